"""Registry of training cost models: register by name, build from a request's config.

Built-ins register by explicit import in `cost_models/__init__.py`; third-party plug-ins
expose the entry-point group `meshplan.cost_models` and are loaded at start-up (and by every
Ray task) by `load_entry_point_plugins(allowlist)`, each once per process (each failure is
logged, never raised).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from importlib.metadata import entry_points
from typing import Any, Protocol, TypeVar, cast

from pydantic import BaseModel

from cost_models.base import TrainingCostModel
from cost_models.plugin_registry import PluginRegistry

ENTRY_POINT_GROUP = "meshplan.cost_models"

logger = logging.getLogger(__name__)


class CostModelPlugin(Protocol):
    """What a registered class provides: a nested pydantic `Config` and a constructor
    taking one instance of it."""

    Config: type[BaseModel]

    def __call__(self, config: Any) -> TrainingCostModel: ...


_PLUGINS = PluginRegistry("cost model")
_REGISTRY = _PLUGINS.classes
_ENTRY_POINTS_LOADED = False
"""True once a call allowed every entry point."""
_ENTRY_POINTS_SCANNED = False
"""True once a call scanned the installed distributions."""
_ENTRY_POINTS_ASKED: set[str] = set()
"""Names earlier calls allowed."""
_ENTRY_POINTS_TRIED: set[str] = set()
"""Entry points loaded (or failed to load) in this process."""

C = TypeVar("C", bound=type[Any])


def register_cost_model(name: str) -> Callable[[C], C]:
    """Class decorator registering a cost model under `name` (lower_snake).

    The class must have a nested pydantic `Config` (extra fields forbidden) and accept a
    `Config` instance as its only constructor argument. Raises ValueError on a duplicate or
    malformed name, or a class without `Config`.
    """
    return _PLUGINS.register(name)


def list_cost_models() -> list[str]:
    """Registered names, sorted."""
    return _PLUGINS.names()


def build_cost_model(
    name: str = "analytical", config: dict[str, Any] | None = None
) -> TrainingCostModel:
    """Instantiate the cost model `name` with its validated `config`.

    Raises:
        PluginNotFound: unknown name (the message lists the registered ones).
        SpecError: the config does not validate (field `cost_model.config.<option>`).
    """
    return cast(TrainingCostModel, _PLUGINS.build(name, config))


def load_entry_point_plugins(allowlist: Collection[str] | None = None) -> list[str]:
    """Load third-party cost models from the `meshplan.cost_models` entry points, each
    once per process.

    An entry point's value is a module (registering on import) or a class (registered under
    the entry point's name if not already). `allowlist`: entry-point names allowed; None
    allows all. A later call loads the allowed entry points no earlier call loaded (a Ray
    worker serves tasks that each load their service's allow-list); a call whose names were
    all asked for before (after a first scan) returns at once, without scanning the
    installed distributions again.
    Returns the names of the entry points loaded by this call.
    """
    global _ENTRY_POINTS_LOADED, _ENTRY_POINTS_SCANNED
    if _ENTRY_POINTS_LOADED:
        return []
    if _ENTRY_POINTS_SCANNED and allowlist is not None and set(allowlist) <= _ENTRY_POINTS_ASKED:
        return []
    _ENTRY_POINTS_SCANNED = True  # the first call scans (and logs what it skips)
    if allowlist is None:
        _ENTRY_POINTS_LOADED = True
    else:
        _ENTRY_POINTS_ASKED.update(allowlist)
    loaded: list[str] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _ENTRY_POINTS_TRIED:
            continue
        if allowlist is not None and ep.name not in allowlist:
            logger.info("cost-model plug-in %s skipped: not in the allow-list", ep.name)
            continue
        _ENTRY_POINTS_TRIED.add(ep.name)
        try:
            obj = ep.load()
            if isinstance(obj, type) and obj not in _REGISTRY.values():
                register_cost_model(ep.name)(obj)
        except Exception:  # a broken plug-in must not stop the service
            logger.exception("cost-model plug-in %s failed to load", ep.name)
            continue
        loaded.append(ep.name)
    return loaded
