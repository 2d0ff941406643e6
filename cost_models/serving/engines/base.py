"""Serving engine profiles: how an engine schedules its iterations and what its host side
(CPU) costs per iteration, as a plug-in family (`registry.py`) beside the serving cost models.

The cost model prices the GPU work of one iteration (`cost_models/serving/analytical.py`).
An engine adds two things the GPU time does not show:

- its **scheduler** (`cost_models.serving.base.SchedulerPolicy`): whether prompts share an
  iteration with the running decodes or stall them, and how many decode steps run per
  scheduler call (multi-step scheduling); the simulator follows it;
- its **host cost**: the CPU work of one scheduler step (schedule the batch, prepare the
  inputs, turn the sampled tokens into outputs), `fixed_s + per_seq_s × sequences`. A
  synchronous engine adds it to every iteration (the GPU waits); an engine that schedules one
  batch ahead (SGLang's overlap scheduler, TensorRT-LLM's overlap scheduler, vLLM's async
  scheduling) runs it during the GPU work, so an iteration takes max(GPU, CPU). Multi-step
  scheduling pays it once per block of decode steps.

Each profile's figures, with its source, are in its module (`vllm.py`, `sglang.py`,
`tensorrt_llm.py`); `options` (the profile's `Config`) are the engine settings a user sets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from cost_models.serving.base import (
    ForwardingCost,
    InstanceCost,
    IterationBatch,
    SchedulerPolicy,
)


@dataclass(frozen=True, slots=True)
class HostCost:
    """CPU time of one scheduler step: `fixed_s + per_seq_s × sequences` of its batch, which
    runs during the GPU work when `overlapped`, plus `serial_fixed_s + serial_per_seq_s ×
    sequences` that stays on the critical path either way (vLLM V0 overlaps only its output
    processing, not its scheduling and input preparation)."""

    fixed_s: float
    per_seq_s: float
    overlapped: bool
    """The engine does this work for one step while the GPU runs another."""
    serial_fixed_s: float = 0.0
    serial_per_seq_s: float = 0.0

    def step_s(self, sequences: int) -> float:
        """The overlappable part."""
        return self.fixed_s + self.per_seq_s * sequences

    def serial_s(self, sequences: int) -> float:
        """The part the GPU always waits for."""
        return self.serial_fixed_s + self.serial_per_seq_s * sequences

    def scaled(self, factor: float) -> HostCost:
        return HostCost(
            self.fixed_s * factor,
            self.per_seq_s * factor,
            self.overlapped,
            self.serial_fixed_s * factor,
            self.serial_per_seq_s * factor,
        )


class EngineOptions(BaseModel):
    """Settings of an engine that change how it runs."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    host_cost_scale: float = Field(default=1.0, ge=0.0, le=100.0, allow_inf_nan=False)
    """Multiplies the profile's host (CPU) time per scheduler step: a host CPU slower or
    faster than the one the profile's figures were measured on, or 0 for the GPU work
    alone."""


class EngineProfile:
    """One serving engine (subclasses register with `register_engine`)."""

    name: ClassVar[str]
    label: ClassVar[str]
    """The engine as people name it, with the version range the profile describes."""
    launcher: ClassVar[str | None]
    """The export format that launches it (None: no export does)."""
    Config: ClassVar[type[EngineOptions]] = EngineOptions
    sources: ClassVar[tuple[str, ...]] = ()
    """Where the profile's figures come from."""

    def __init__(self, options: EngineOptions) -> None:
        self.options = options

    def scheduler(self) -> SchedulerPolicy:
        """How the engine builds iterations."""
        raise NotImplementedError

    def host(self) -> HostCost:
        """What one scheduler step costs on the CPU (`host_cost_scale` applied)."""
        return self._host().scaled(self.options.host_cost_scale)

    def _host(self) -> HostCost:
        """The profile's own host cost per scheduler step."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """The profile as `GET /v1/engines` lists it."""
        policy, host = self.scheduler(), self.host()
        return {
            "name": self.name,
            "label": self.label,
            "launcher": self.launcher,
            "prefill": policy.prefill,
            "decode_steps_per_schedule": policy.decode_steps,
            "split_prompts": policy.split_prompts,
            "prefix_caching": policy.prefix_caching,
            "kv_allocation": policy.kv_allocation,
            "host_fixed_ms": host.fixed_s * 1e3,
            "host_per_sequence_us": host.per_seq_s * 1e6,
            "host_overlapped": host.overlapped,
            "host_serial_fixed_ms": host.serial_fixed_s * 1e3,
            "host_serial_per_sequence_us": host.serial_per_seq_s * 1e6,
            "options": self.options.model_dump(mode="json"),
            "options_schema": self.Config.model_json_schema(),
            "sources": list(self.sources),
        }


class EngineInstanceCost(ForwardingCost):
    """An instance's GPU costs as a given engine runs them (implements `InstanceCost`, with
    the engine's `scheduler`): each iteration adds the engine's host cost, divided over the
    block for decode-only steps of a multi-step scheduler, and hidden behind the GPU work
    when the engine overlaps it."""

    def __init__(self, base: InstanceCost, host: HostCost, scheduler: SchedulerPolicy) -> None:
        self.base = base
        self.host = host
        self._scheduler = scheduler
        self._host_cache: dict[int, tuple[float, float]] = {}
        """`host_s` by sequences (decode-only steps of a multi-step block under −1 − seqs):
        the simulator asks for it every iteration."""
        # looked up once: iteration_time_s is the simulator's innermost call
        self._gpu_time = base.iteration_time_s
        self._single_step = scheduler.decode_steps <= 1
        self._overlapped = host.overlapped

    def __getattr__(self, name: str) -> Any:
        # explanations and benchmarks read the cost model's own figures (weights, KV bytes)
        if name == "base":  # not set yet (copy / unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.base, name)

    @property
    def scheduler(self) -> SchedulerPolicy:
        return self._scheduler

    @property
    def pipeline_stages(self) -> int:
        return int(getattr(self.base, "pipeline_stages", 1) or 1)

    def host_s(self, batch: IterationBatch) -> tuple[float, float]:
        """(overlappable, serial) CPU time charged to `batch`'s iteration: a scheduler
        call's work, spread over its block for the decode-only steps of a multi-step
        scheduler."""
        seqs = batch.decode_seqs + batch.prefill_seqs
        cpu, serial = self.host.step_s(seqs), self.host.serial_s(seqs)
        if batch.prefill_tokens == 0 and self._scheduler.decode_steps > 1:
            cpu /= self._scheduler.decode_steps
            serial /= self._scheduler.decode_steps
        return cpu, serial

    def iteration_time_s(self, batch: IterationBatch) -> float:
        gpu = self._gpu_time(batch)
        if gpu <= 0.0:
            return gpu
        seqs = batch.decode_seqs + batch.prefill_seqs
        key = seqs if batch.prefill_tokens or self._single_step else -1 - seqs
        hit = self._host_cache.get(key)
        if hit is None:
            hit = self._host_cache[key] = self.host_s(batch)
        cpu, serial = hit
        return (max(gpu, cpu) if self._overlapped else gpu + cpu) + serial


__all__ = ["EngineInstanceCost", "EngineOptions", "EngineProfile", "HostCost"]
