"""Serving engine profiles (issue 11): scheduler behaviour and host costs per engine.
Built-ins register by explicit import below."""

from cost_models.serving.engines import sglang, tensorrt_llm, vllm
from cost_models.serving.engines.base import (
    EngineInstanceCost,
    EngineOptions,
    EngineProfile,
    HostCost,
)
from cost_models.serving.engines.registry import (
    DEFAULT_ENGINE,
    build_engine,
    list_engines,
    register_engine,
)

__all__ = [
    "DEFAULT_ENGINE",
    "EngineInstanceCost",
    "EngineOptions",
    "EngineProfile",
    "HostCost",
    "build_engine",
    "list_engines",
    "register_engine",
    "sglang",
    "tensorrt_llm",
    "vllm",
]
