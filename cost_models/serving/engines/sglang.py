"""SGLang (0.4 and later).

Scheduling: when new requests fit, SGLang runs a prefill ("extend") batch of them, in chunks
of `--chunked-prefill-size` tokens (the plan's `chunk_size`), and the running decodes wait
for it; `--enable-mixed-chunk` puts the chunk and the decodes in one batch instead
(`enable_mixed_chunk`).

Host cost: the overlap scheduler (SGLang v0.4, "zero-overhead batch scheduler", LMSYS blog
2024-12-04; on by default, `--disable-overlap-schedule` turns it off) prepares the next batch
while the GPU runs the current one, so an iteration takes max(GPU, CPU). No SGLang-specific
measurement of the CPU work per step was found; the profile uses vLLM V1's (a Python
scheduler of the same design; `vllm.V1_HOST`), which matters only when the overlap is off or
the CPU work outlasts the GPU's.
"""

from __future__ import annotations

from cost_models.serving.base import SchedulerPolicy
from cost_models.serving.engines.base import EngineOptions, EngineProfile, HostCost
from cost_models.serving.engines.registry import register_engine
from cost_models.serving.engines.vllm import V1_HOST


class SglangOptions(EngineOptions):
    enable_mixed_chunk: bool = False
    """`--enable-mixed-chunk`: prompt chunks and decodes share a batch."""
    disable_overlap_schedule: bool = False
    """`--disable-overlap-schedule`: schedule after each batch (the GPU waits)."""
    disable_radix_cache: bool = False
    """`--disable-radix-cache`: no prefix reuse (the radix cache is on by default)."""


@register_engine("sglang")
class Sglang(EngineProfile):
    """SGLang (module docstring)."""

    name = "sglang"
    label = "SGLang (0.4+)"
    launcher = "sglang"
    Config = SglangOptions
    sources = (
        "LMSYS blog 2024-12-04, SGLang v0.4: zero-overhead batch scheduler",
        "vllm-project/vllm issue #10634 (host cost figures, borrowed)",
    )

    def scheduler(self) -> SchedulerPolicy:
        assert isinstance(self.options, SglangOptions)
        return SchedulerPolicy(
            prefill="mixed" if self.options.enable_mixed_chunk else "separate",
            prefix_caching=not self.options.disable_radix_cache,
            kv_allocation="paged",
        )

    def _host(self) -> HostCost:
        assert isinstance(self.options, SglangOptions)
        return HostCost(
            V1_HOST.fixed_s,
            V1_HOST.per_seq_s,
            overlapped=not self.options.disable_overlap_schedule,
        )
