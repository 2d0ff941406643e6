"""Registry of serving cost models: register by name, build from a request's config.

Kept apart from the training registry (`cost_models/registry.py`) so that training
plug-ins and their entry points are untouched. A serving plug-in is a class with a nested
pydantic `Config` (extra fields forbidden), a constructor taking one `Config` instance and
an `instance_cost(...)` method (`cost_models.serving.base.ServingCostModel`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from cost_models.plugin_registry import PluginRegistry
from cost_models.serving.base import ServingCostModel

_PLUGINS = PluginRegistry("serving cost model")
_REGISTRY = _PLUGINS.classes

C = TypeVar("C", bound=type[Any])


def register_serving_cost_model(name: str) -> Callable[[C], C]:
    """Class decorator registering a serving cost model under `name` (lower_snake).

    Raises ValueError on a duplicate or malformed name, or a class without a pydantic
    `Config`.
    """
    return _PLUGINS.register(name)


def list_serving_cost_models() -> list[str]:
    """Registered names, sorted."""
    return _PLUGINS.names()


def build_serving_cost_model(
    name: str = "analytical", config: dict[str, Any] | None = None
) -> ServingCostModel:
    """Instantiate the serving cost model `name` with its validated `config`.

    Raises:
        PluginNotFound: unknown name (the message lists the registered ones).
        SpecError: the config does not validate (field `cost_model.config.<option>`).
    """
    return cast(ServingCostModel, _PLUGINS.build(name, config))
