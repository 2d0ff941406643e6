"""Registry of training cost models: register by name, build from a request's config.

Built-ins register by explicit import in `cost_models/__init__.py`; third-party plug-ins
expose the entry-point group `meshplan.cost_models` and are loaded once at start-up by
`load_entry_point_plugins(allowlist)` (each failure is logged, never raised).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from importlib.metadata import entry_points
from typing import Any, Protocol, TypeVar, cast

from pydantic import BaseModel, ValidationError

from cost_models.base import TrainingCostModel
from specs.errors import PluginNotFound, SpecError

ENTRY_POINT_GROUP = "meshplan.cost_models"

logger = logging.getLogger(__name__)


class CostModelPlugin(Protocol):
    """What a registered class provides: a nested pydantic `Config` and a constructor
    taking one instance of it."""

    Config: type[BaseModel]

    def __call__(self, config: Any) -> TrainingCostModel: ...


_REGISTRY: dict[str, type[Any]] = {}
_ENTRY_POINTS_LOADED = False

C = TypeVar("C", bound=type[Any])


def register_cost_model(name: str) -> Callable[[C], C]:
    """Class decorator registering a cost model under `name` (lower_snake).

    The class must have a nested pydantic `Config` (extra fields forbidden) and accept a
    `Config` instance as its only constructor argument. Raises ValueError on a duplicate or
    malformed name, or a class without `Config`.
    """
    if not name or not name.replace("_", "").isalnum() or name.lower() != name:
        raise ValueError(f"cost model name must be lower_snake (got {name!r})")

    def decorator(cls: C) -> C:
        if name in _REGISTRY:
            raise ValueError(f"cost model {name!r} is already registered ({_REGISTRY[name]!r})")
        config = getattr(cls, "Config", None)
        if not (isinstance(config, type) and issubclass(config, BaseModel)):
            raise ValueError(f"cost model {name!r} needs a nested pydantic Config class")
        _REGISTRY[name] = cls
        return cls

    return decorator


def list_cost_models() -> list[str]:
    """Registered names, sorted."""
    return sorted(_REGISTRY)


def build_cost_model(name: str = "analytical", config: dict[str, Any] | None = None) -> TrainingCostModel:
    """Instantiate the cost model `name` with its validated `config`.

    Raises:
        PluginNotFound: unknown name (the message lists the registered ones).
        SpecError: the config does not validate (field `cost_model.config.<option>`).
    """
    cls = _REGISTRY.get(name)
    if cls is None:
        known = ", ".join(list_cost_models()) or "none"
        raise PluginNotFound(f"unknown cost model {name!r}; registered: {known}", name=name)
    if config is not None and not isinstance(config, dict):
        raise SpecError("cost_model.config", "must be an object", config)
    try:
        validated = cls.Config.model_validate(config or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(part) for part in first["loc"])
        field = f"cost_model.config.{loc}" if loc else "cost_model.config"
        raise SpecError(field, first["msg"], first.get("input"), f"{field}: {first['msg']}") from exc
    return cast(TrainingCostModel, cls(validated))


def load_entry_point_plugins(allowlist: Collection[str] | None = None) -> list[str]:
    """Load third-party cost models from the `meshplan.cost_models` entry points, once.

    An entry point's value is a module (registering on import) or a class (registered under
    the entry point's name if not already). `allowlist`: entry-point names allowed; None
    allows all. Returns the names of the entry points loaded by this call.
    """
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return []
    _ENTRY_POINTS_LOADED = True
    loaded: list[str] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if allowlist is not None and ep.name not in allowlist:
            logger.info("cost-model plug-in %s skipped: not in the allow-list", ep.name)
            continue
        try:
            obj = ep.load()
            if isinstance(obj, type) and obj not in _REGISTRY.values():
                register_cost_model(ep.name)(obj)
        except Exception:  # a broken plug-in must not stop the service
            logger.exception("cost-model plug-in %s failed to load", ep.name)
            continue
        loaded.append(ep.name)
    return loaded
