"""Which framework runs a plan's offload, for the exports: the framework profile's offload
rules (`FrameworkProfile.offload_violations`, the same rules the search prices plans by); a
format whose framework cannot run the plan's offload refuses it (422) naming the rule
`<format>.offload`."""

from __future__ import annotations

from app.exports.base import UnexpressiblePlan
from cost_models.frameworks import build_framework
from specs.model import ModelSpec
from specs.plan import TrainingPlan

NVME_PATH = "/local_nvme"
"""Where the exports point NVMe offload (`nvme_path`); a note asks to mount the node's
drives there."""


def check_offload(fmt: str, framework: str, model: ModelSpec, plan: TrainingPlan) -> None:
    """Raise `UnexpressiblePlan` (rule `<fmt>.offload`) when `framework` cannot run the
    plan's offload; nothing without offload."""
    if not plan.offload.enabled:
        return
    why = build_framework(framework).offload_violations(model, plan.key())
    if why:
        raise UnexpressiblePlan(fmt, f"{fmt}.offload", "; ".join(why))
