"""Framework profiles: a plug-in family beside the cost models (`base.py` explains what a
profile holds). Built-ins register by explicit import below."""

from cost_models.frameworks import deepspeed as deepspeed
from cost_models.frameworks import fsdp as fsdp
from cost_models.frameworks import megatron_core as megatron_core
from cost_models.frameworks import megatron_lm as megatron_lm
from cost_models.frameworks import torchtitan as torchtitan
from cost_models.frameworks.base import FrameworkConfig, FrameworkProfile
from cost_models.frameworks.registry import (
    DEFAULT_PREFERENCE,
    build_framework,
    first_that_runs,
    list_frameworks,
    register_framework,
)

__all__ = [
    "DEFAULT_PREFERENCE",
    "FrameworkConfig",
    "FrameworkProfile",
    "build_framework",
    "first_that_runs",
    "list_frameworks",
    "register_framework",
]
