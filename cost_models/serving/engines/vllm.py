"""vLLM: the V1 engine (`vllm`, vLLM 0.8 and later; the only engine from 0.11) and the V0
engine (`vllm_v0`, up to 0.10).

Scheduling. V1 puts prompt chunks and the running decodes in one step under the token
budget `--max-num-batched-tokens` (the plan's `chunk_size`; without one, whole prompts) and
schedules every step. V0 runs prompts in steps of their own unless chunked prefill is on
(`--enable-chunked-prefill`), and `--num-scheduler-steps k` runs k decode steps per scheduler
call, new prompts joining only between blocks (vLLM RFC #6854, PR #7000).

Host cost per scheduler step, from vLLM's own profiles:
- V1, synchronous scheduling: 5–6 ms between two decode steps at 256 running sequences
  (Llama-2-7B, ShareGPT; vllm-project/vllm issue #10634, 2024-11, on the V1 AsyncLLM of
  PR #9826), which the author traces to scheduling contending for the GIL and expects to
  fall to 200–300 µs without it: 0.25 ms fixed + (5.5 − 0.25) ms / 256 = 20.5 µs per
  sequence. With async scheduling (PR #23569) the next step's scheduling and input
  preparation run during the forward pass: overlapped. Async scheduling is on by default
  from vLLM 0.14 (January 2026; PR #27614, the Q4-2025 roadmap item "async scheduling on
  by default"); `async_scheduling: false` prices the synchronous V1 engine of 0.8–0.13 (or
  `--no-async-scheduling`).
- V0: turning the sampled tokens into outputs (`_process_model_outputs`) takes 0.2 ms at
  batch 1 and 3.4 ms at batch 32 (Llama-3-70B FP8 on 4 H100; RFC #6913): 0.2 ms fixed +
  0.1 ms per sequence, on the critical path before vLLM 0.6.0 (the RFC #6854 traces show
  about 4 ms of GPU bubble per decode step for Llama-3-8B on one H100, consistent with this
  at ~35 sequences). From 0.6.0 the async output processor (PR #7049) overlaps it with the
  next step (`async_output_processing`, on by default); with multi-step scheduling the bubble
  is paid once per block of k steps (RFC #6854: "with multi-step-8, the 4 ms only needs to
  be incurred once for every 8 decode" steps). Scheduling and input preparation stay on the
  critical path even with the async output processor: 0.28 ms + 30 µs per sequence, the linear
  fit of the means Vidur profiled for vLLM V0 (Llama-2-7B on one A100, batch 8–64: schedule
  0.17–0.85 ms, prepare inputs 0.35–1.32 ms; microsoft/vidur data/profiling/a100/
  cpu_overheads.csv, Agrawal et al., MLSys'24).
"""

from __future__ import annotations

from pydantic import Field

from cost_models.serving.base import SchedulerPolicy
from cost_models.serving.engines.base import EngineOptions, EngineProfile, HostCost
from cost_models.serving.engines.registry import register_engine

V1_HOST = HostCost(fixed_s=0.25e-3, per_seq_s=20.5e-6, overlapped=False)
"""vLLM V1's synchronous host cost per step (module docstring, issue #10634)."""
V0_HOST = HostCost(
    fixed_s=0.2e-3,
    per_seq_s=0.1e-3,
    overlapped=False,
    serial_fixed_s=0.28e-3,
    serial_per_seq_s=30e-6,
)
"""vLLM V0 per step: output processing (RFC #6913), and scheduling with input preparation
on the critical path (Vidur's profile; module docstring)."""


class VllmOptions(EngineOptions):
    async_scheduling: bool = True
    """Schedule the next step while the GPU runs this one (vLLM's default from 0.14;
    false: `--no-async-scheduling`, or the V1 engine of 0.8–0.13)."""
    enable_prefix_caching: bool = True
    """Automatic prefix caching (on by default in V1; `--no-enable-prefix-caching`)."""


@register_engine("vllm")
class Vllm(EngineProfile):
    """vLLM V1 (module docstring)."""

    name = "vllm"
    label = "vLLM (V1 engine, 0.8+)"
    launcher = "vllm"
    Config = VllmOptions
    sources = (
        "vllm-project/vllm issue #10634 (V1 step gap at 256 sequences)",
        "vllm-project/vllm PR #23569 (async scheduling overlaps model execution)",
        "vllm-project/vllm PR #27614 (async scheduling on by default, vLLM 0.14)",
    )

    def scheduler(self) -> SchedulerPolicy:
        assert isinstance(self.options, VllmOptions)
        return SchedulerPolicy(
            prefill="mixed",
            prefix_caching=self.options.enable_prefix_caching,
            kv_allocation="paged",
        )

    def _host(self) -> HostCost:
        assert isinstance(self.options, VllmOptions)
        return HostCost(
            V1_HOST.fixed_s, V1_HOST.per_seq_s, overlapped=self.options.async_scheduling
        )


class VllmV0Options(EngineOptions):
    num_scheduler_steps: int = Field(default=1, ge=1, le=64)
    """`--num-scheduler-steps`: decode steps per scheduler call (multi-step scheduling)."""
    async_output_processing: bool = True
    """The async output processor of vLLM 0.6.0+ (off with `--disable-async-output-proc`
    and before 0.6.0)."""
    enable_prefix_caching: bool = False
    """Automatic prefix caching (`--enable-prefix-caching`; off by default in V0)."""


@register_engine("vllm_v0")
class VllmV0(EngineProfile):
    """vLLM V0 (module docstring)."""

    name = "vllm_v0"
    label = "vLLM (V0 engine, up to 0.10)"
    launcher = "vllm"
    Config = VllmV0Options
    sources = (
        "vllm-project/vllm RFC #6913 (output processing time by batch)",
        "vllm-project/vllm RFC #6854 and PR #7000 (multi-step scheduling)",
        "vllm-project/vllm PR #7049 (async output processor)",
        "microsoft/vidur data/profiling/a100/cpu_overheads.csv (V0 schedule and prepare-inputs times)",
    )

    def scheduler(self) -> SchedulerPolicy:
        assert isinstance(self.options, VllmV0Options)
        return SchedulerPolicy(
            prefill="separate_unless_chunked",
            decode_steps=self.options.num_scheduler_steps,
            prefix_caching=self.options.enable_prefix_caching,
            kv_allocation="paged",
        )

    def _host(self) -> HostCost:
        assert isinstance(self.options, VllmV0Options)
        single = self.options.num_scheduler_steps == 1
        return HostCost(
            V0_HOST.fixed_s,
            V0_HOST.per_seq_s,
            overlapped=self.options.async_output_processing and single,
            serial_fixed_s=V0_HOST.serial_fixed_s,
            serial_per_seq_s=V0_HOST.serial_per_seq_s,
        )
