"""Registry of serving engine profiles (the same registry shape as the cost models and the
training framework profiles)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from cost_models.plugin_registry import PluginRegistry
from cost_models.serving.engines.base import EngineProfile

_PLUGINS = PluginRegistry("serving engine")

C = TypeVar("C", bound=type[Any])

DEFAULT_ENGINE = "vllm"
"""The engine a serving plan that names none is priced for: vLLM (V1), what meshplan's vLLM
export launches."""


def register_engine(name: str) -> Callable[[C], C]:
    """Class decorator registering an engine profile under `name` (lower_snake)."""
    return _PLUGINS.register(name)


def list_engines() -> list[str]:
    """Registered names, sorted."""
    return _PLUGINS.names()


def build_engine(
    name: str | None = None,
    options: dict[str, Any] | None = None,
    field: str = "plan.engine_options",
) -> EngineProfile:
    """The profile `name` (default `DEFAULT_ENGINE`) with its validated `options`.

    Raises:
        PluginNotFound: unknown name (the message lists the registered ones).
        SpecError: the options do not validate (field `<field>.<option>`).
    """
    profile: EngineProfile = _PLUGINS.build(name or DEFAULT_ENGINE, options, field=field)
    return profile
