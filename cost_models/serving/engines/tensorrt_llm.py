"""TensorRT-LLM (PyTorch backend, 0.20 and later).

Scheduling: in-flight batching puts context (prompt) requests and generation steps in one
batch under `max_num_tokens` (the plan's `chunk_size`). Context chunking is off by default
(`enable_chunked_prefill`, LLM API): a prompt runs whole in a batch whose remaining token
budget holds it, else waits for the next.

Host cost: the overlap scheduler (TensorRT-LLM docs, "Overlap Scheduler"; on by default,
`disable_overlap_scheduler`) launches step n+1 before the CPU work of step n is done, so an
iteration takes max(GPU, CPU). No TensorRT-LLM measurement of that CPU work was found; the
profile uses vLLM V1's (`vllm.V1_HOST`), which matters only when the overlap is off or the
CPU work outlasts the GPU's. meshplan's `trtllm` export launches it (`trtllm-serve`).
"""

from __future__ import annotations

from cost_models.serving.base import SchedulerPolicy
from cost_models.serving.engines.base import EngineOptions, EngineProfile, HostCost
from cost_models.serving.engines.registry import register_engine
from cost_models.serving.engines.vllm import V1_HOST


class TensorrtLlmOptions(EngineOptions):
    disable_overlap_scheduler: bool = False
    """Schedule after each step (the GPU waits)."""
    enable_chunked_prefill: bool = False
    """Split prompts over batches to fill `max_num_tokens` (context chunking)."""
    enable_block_reuse: bool = True
    """KV-cache block reuse across requests with a common prefix (`kv_cache_config`)."""


@register_engine("tensorrt_llm")
class TensorrtLlm(EngineProfile):
    """TensorRT-LLM (module docstring)."""

    name = "tensorrt_llm"
    label = "TensorRT-LLM (PyTorch backend)"
    launcher = "trtllm"
    Config = TensorrtLlmOptions
    sources = (
        "NVIDIA TensorRT-LLM docs, Overlap Scheduler",
        "vllm-project/vllm issue #10634 (host cost figures, borrowed)",
    )

    def scheduler(self) -> SchedulerPolicy:
        assert isinstance(self.options, TensorrtLlmOptions)
        return SchedulerPolicy(
            prefill="mixed",
            split_prompts=self.options.enable_chunked_prefill,
            prefix_caching=self.options.enable_block_reuse,
            kv_allocation="reserve",  # the GUARANTEED_NO_EVICT capacity scheduler
        )

    def _host(self) -> HostCost:
        assert isinstance(self.options, TensorrtLlmOptions)
        return HostCost(
            V1_HOST.fixed_s,
            V1_HOST.per_seq_s,
            overlapped=not self.options.disable_overlap_scheduler,
        )
