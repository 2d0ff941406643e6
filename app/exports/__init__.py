"""Plan exports: a stored plan rendered as what Megatron-LM, torchtitan, DeepSpeed, vLLM,
SGLang, Slurm or Kubernetes run, each checked against the framework's own rules."""

from app.exports.base import ExportContext, ExportResult, UnexpressiblePlan, UnknownFormat
from app.exports.registry import FORMATS, build_context, export_plan

__all__ = [
    "FORMATS",
    "ExportContext",
    "ExportResult",
    "UnexpressiblePlan",
    "UnknownFormat",
    "build_context",
    "export_plan",
]
