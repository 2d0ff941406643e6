"""Registry of framework profiles (the same registry shape as the cost models) and the
rule that picks a framework for a plan that names none: the first of `DEFAULT_PREFERENCE`
that can run it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from cost_models.frameworks.base import FrameworkProfile
from cost_models.plugin_registry import PluginRegistry
from specs.model import ModelSpec
from specs.plan import PlanKey

_PLUGINS = PluginRegistry("framework")

C = TypeVar("C", bound=type[Any])

DEFAULT_PREFERENCE: tuple[str, ...] = (
    "megatron_core",
    "torchtitan",
    "deepspeed",
    "fsdp",
    "megatron_lm",
)
"""The order in which a framework is picked for a plan that names none: Megatron-Core (what
meshplan's Megatron export launches), then torchtitan (FSDP2 with pipelining, which
Megatron-Core does not combine), DeepSpeed, standalone FSDP, legacy Megatron-LM."""


def register_framework(name: str) -> Callable[[C], C]:
    """Class decorator registering a framework profile under `name` (lower_snake)."""
    return _PLUGINS.register(name)


def list_frameworks() -> list[str]:
    """Registered names, sorted."""
    return _PLUGINS.names()


def build_framework(name: str, config: dict[str, Any] | None = None) -> FrameworkProfile:
    """The profile `name` with its behaviour `config` (validated by its `Config`).

    Raises:
        PluginNotFound: unknown name (the message lists the registered ones).
        SpecError: the config does not validate.
    """
    profile: FrameworkProfile = _PLUGINS.build(name, config)
    return profile


def first_that_runs(
    model: ModelSpec, key: PlanKey, profiles: Sequence[FrameworkProfile]
) -> FrameworkProfile | None:
    """The first of `profiles` that can run `key` (its framework field is ignored)."""
    for profile in profiles:
        if profile.can_run(model, key):
            return profile
    return None
