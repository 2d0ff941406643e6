"""Megatron-LM before Megatron-Core (the 2021–2022 code of Narayanan et al. 2021 and
Korthikanti et al. 2022).

Sources (docs/research/frameworks.md §2, Megatron-LM 9d86ca6 / e1c334b): the local DDP
all-reduces the contiguous fp32 gradient buffer after the whole forward/backward of all
micro-batches, nothing overlapped; the distributed optimizer (late 2022) reduce-scatters after
the backward and all-gathers after the step, both exposed; column-parallel linears already
overlapped their backward all-reduce with the wgrad GEMM (`async_tensor_model_parallel_
allreduce`, on by default); p2p is batched isend/irecv followed by a device synchronise; no
context or expert parallelism.
"""

from __future__ import annotations

from typing import ClassVar

from cost_models.frameworks.base import FrameworkConfig, FrameworkProfile, P2POverlap
from cost_models.frameworks.registry import register_framework
from specs.plan import PlanKey


class MegatronLMConfig(FrameworkConfig):
    """Legacy Megatron-LM's behaviour."""

    grad_bucket_elements: float | None = None
    """One all-reduce over the whole contiguous gradient buffer."""
    overlap_grad_reduce: bool = False
    """The gradient all-reduce runs after the backward of the last micro-batch."""
    overlap_param_gather: bool = False
    """The distributed optimizer's all-gather runs after the optimizer step."""
    p2p_overlap: P2POverlap = "none"
    """Batched isend/irecv followed by a synchronise."""


@register_framework("megatron_lm")
class MegatronLM(FrameworkProfile):
    """Megatron-LM of 2021–2022 (before Megatron-Core)."""

    name = "megatron_lm"
    label = "Megatron-LM (2021–2022)"
    zero_stages = frozenset({0, 1})
    supports_moe = False
    rule_fields = frozenset(
        {
            "zero_stage",
            "context",
            "expert",
            "pipeline_schedule",
            "pipeline",
            "context_parallel_algorithm",
            "vocab_parallel",
        }
    )
    rules: ClassVar[tuple[str, ...]] = (
        "no context parallelism",
        "no expert parallelism and no mixture-of-experts models",
    )
    Config = MegatronLMConfig

    def _rules(self, key: PlanKey) -> list[str]:
        out = []
        if key.context > 1:
            out.append(f"megatron_lm has no context parallelism (context = {key.context})")
        if key.expert > 1:
            out.append(f"megatron_lm has no expert parallelism (expert = {key.expert})")
        return out
