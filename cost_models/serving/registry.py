"""Registry of serving cost models: register by name, build from a request's config.

Kept apart from the training registry (`cost_models/registry.py`) so that training
plug-ins and their entry points are untouched. A serving plug-in is a class with a nested
pydantic `Config` (extra fields forbidden), a constructor taking one `Config` instance and
an `instance_cost(...)` method (`cost_models.serving.base.ServingCostModel`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ValidationError

from cost_models.serving.base import ServingCostModel
from specs.errors import PluginNotFound, SpecError

_REGISTRY: dict[str, type[Any]] = {}

C = TypeVar("C", bound=type[Any])


def register_serving_cost_model(name: str) -> Callable[[C], C]:
    """Class decorator registering a serving cost model under `name` (lower_snake).

    Raises ValueError on a duplicate or malformed name, or a class without a pydantic
    `Config`.
    """
    if not name or not name.replace("_", "").isalnum() or name.lower() != name:
        raise ValueError(f"serving cost model name must be lower_snake (got {name!r})")

    def decorator(cls: C) -> C:
        if name in _REGISTRY:
            raise ValueError(f"serving cost model {name!r} is already registered")
        config = getattr(cls, "Config", None)
        if not (isinstance(config, type) and issubclass(config, BaseModel)):
            raise ValueError(f"serving cost model {name!r} needs a nested pydantic Config class")
        _REGISTRY[name] = cls
        return cls

    return decorator


def list_serving_cost_models() -> list[str]:
    """Registered names, sorted."""
    return sorted(_REGISTRY)


def build_serving_cost_model(
    name: str = "analytical", config: dict[str, Any] | None = None
) -> ServingCostModel:
    """Instantiate the serving cost model `name` with its validated `config`.

    Raises:
        PluginNotFound: unknown name (the message lists the registered ones).
        SpecError: the config does not validate (field `cost_model.config.<option>`).
    """
    cls = _REGISTRY.get(name)
    if cls is None:
        known = ", ".join(list_serving_cost_models()) or "none"
        raise PluginNotFound(f"unknown serving cost model {name!r}; registered: {known}", name=name)
    if config is not None and not isinstance(config, dict):
        raise SpecError("cost_model.config", "must be an object", config)
    try:
        validated = cls.Config.model_validate(config or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(part) for part in first["loc"])
        field = f"cost_model.config.{loc}" if loc else "cost_model.config"
        raise SpecError(
            field, first["msg"], first.get("input"), f"{field}: {first['msg']}"
        ) from exc
    return cast(ServingCostModel, cls(validated))
