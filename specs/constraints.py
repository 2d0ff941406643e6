"""Search constraints and objective."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer

from specs._base import Spec
from specs.plan import canonical_framework_name
from specs.serving import canonical_engine_name

Objective = Literal["max_throughput", "min_cost", "min_energy", "min_time_to_train", "min_gpus"]
"""What a training search ranks by (`solver.objectives`)."""

TRAINING_FIXABLE_FIELDS = frozenset(
    {
        "data",
        "tensor",
        "pipeline",
        "virtual_pipeline",
        "context",
        "expert",
        "expert_tensor",
        "sequence_parallel",
        "micro_batch_size",
        "zero_stage",
        "recompute",
        "pipeline_schedule",
        "stage_layers",
        "flash_attention",
        "framework",
        "context_parallel_algorithm",
        "context_parallel_heads",
        "vocab_parallel",
    }
)
"""`fixed` keys of a training search."""
SERVING_FIXABLE_FIELDS = frozenset(
    {"mode", "tensor", "pipeline", "expert", "max_batch_size", "chunk_size", "precision", "engine"}
)
"""`fixed` keys of a serving search (`solver.serving.search.FIXED_KEYS`)."""
FIXABLE_FIELDS = TRAINING_FIXABLE_FIELDS | SERVING_FIXABLE_FIELDS
"""Every key `fixed` accepts; each search kind then refuses the keys that are not its own."""


OffloadMode = Literal["when_needed", "always", "never"]
OffloadDeviceName = Literal["cpu", "nvme"]


def _all_devices() -> list[OffloadDeviceName]:
    return ["cpu", "nvme"]


class OffloadConstraints(Spec):
    """Whether and how the search may offload to host memory or NVMe (`plan.offload`)."""

    mode: OffloadMode = "when_needed"
    """`when_needed`: offload is searched only when no plan fits without it (every plan of
    the offload-free space is over the memory limit); `always`: offload variants of every
    candidate are searched alongside (slower); `never`: no offload."""
    devices: list[OffloadDeviceName] = Field(default_factory=_all_devices, max_length=2)
    """Devices the optimizer states and parameters may be offloaded to."""
    activations: bool = True
    """Whether activation offloading (a fraction of the saved activations in host memory)
    is searched."""

    @field_validator("devices")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"devices must not repeat a device (got {value})")
        return value

    @property
    def searched(self) -> bool:
        """Whether the space includes offload variants as it stands (`always`)."""
        return self.mode == "always" and (bool(self.devices) or self.activations)


def _offload_or_mode(schema: dict[str, Any]) -> None:
    """The field's JSON schema: the object, or the mode alone as a string."""
    ref = {k: schema.pop(k) for k in ("$ref", "allOf") if k in schema}
    default = schema.pop("default", None)
    del default  # a factory default: not a literal in the document
    schema["anyOf"] = [ref, {"type": "string", "enum": list(get_args(OffloadMode))}]


def _offload_shorthand(value: Any) -> Any:
    """`"never"` / `"always"` / `"when_needed"` as shorthand for `{"mode": ...}`."""
    if isinstance(value, str):
        return {"mode": value}
    return value


class SearchConstraints(Spec):
    """Restrictions on the searched space; every field optional."""

    fixed: dict[str, Any] = Field(default_factory=dict)
    """Plan fields or parallel degrees (by name) held at the given value."""
    memory_headroom_gib: float = Field(default=2.0, ge=0, le=1024)
    """Memory left free on every GPU, GiB."""
    time_limit_s: float = Field(default=60.0, gt=0, le=3600)
    """Wall-time budget of the search, seconds; it stops with the best plans found so far."""
    allow_tensor_across_nodes: bool = False
    """Allow tensor (and expert-tensor) groups to span nodes."""
    max_virtual_pipeline: int = Field(default=8, ge=1, le=64)
    """Largest virtual pipeline degree searched."""
    micro_batch_sizes: list[int] | None = Field(default=None, min_length=1, max_length=32)
    """Micro-batch sizes searched (default: powers of two up to 16 that divide the batch)."""
    frameworks: list[str] | None = Field(default=None, min_length=1, max_length=16)
    """Training frameworks to compare (`GET /v1/frameworks`): every candidate is priced under
    each listed framework that can run it. Default: Megatron-Core (what the Megatron export
    launches); `fixed.framework` pins one. List `torchtitan` to add FSDP2 with pipelining
    (ZeRO-2/3 with pipeline parallelism)."""

    pipeline_schedules: list[str] | None = Field(default=None, min_length=1, max_length=32)
    """Pipeline schedules searched (`plan.pipeline_schedule` values). Default: every schedule
    the cost model prices that is valid for the candidate's pipeline, chunks per rank and
    micro-batch count; `fixed.pipeline_schedule` pins one."""

    per_stage_tensor: bool = False
    """Searches on a cluster of mixed hardware: let each node group's pipeline stages take
    their own tensor degree (`plan.stage_tensor`, HexiScale), e.g. tensor 8 inside NVLink
    nodes beside tensor 1 on PCIe GPUs. Off by default: no launcher exported here runs such
    plans (they answer "what would this hardware allow?")."""
    engines: list[str] | None = Field(default=None, min_length=1, max_length=8)
    """Serving engines to compare (`GET /v1/engines`): the search runs for each and ranks
    their plans together. Default: vLLM (V1); `fixed.engine` pins one."""
    engine_options: dict[str, dict[str, Any]] | None = None
    """Serving searches: settings per searched engine, by engine name (`GET /v1/engines`:
    `options`), e.g. `{"vllm_v0": {"num_scheduler_steps": 8}}`; the plans carry them."""
    research_forks: bool = False
    """Training searches: also search plan options that only research forks of the
    frameworks run, so far vocabulary parallelism (`plan.vocab_parallel`: the
    sail-sg/VocabularyParallelism fork of Megatron-LM; stock Megatron-Core has no
    `--enable-vocab-parallel`). Off by default, so that a search's plans launch on the
    released frameworks; `fixed.vocab_parallel = true` searches it too."""
    offload: OffloadConstraints = Field(
        default_factory=OffloadConstraints, json_schema_extra=_offload_or_mode
    )
    """Training searches: offloading of optimizer states, parameters and activations
    (`plan.offload`). By default it is searched only when no plan fits without it; the
    string `"never"` switches it off (shorthand for `{"mode": "never"}`)."""

    @field_validator("offload", mode="before")
    @classmethod
    def _offload_mode(cls, value: Any) -> Any:
        return _offload_shorthand(value)

    @model_serializer(mode="wrap")
    def _omit_unset_frameworks(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Requests without `frameworks` or `engines` dump exactly as before the fields
        existed (request hashes stay)."""
        data = handler(self)
        if isinstance(data, dict):
            for name in ("frameworks", "engines", "engine_options", "pipeline_schedules"):
                if data.get(name, 0) is None:
                    del data[name]
            if data.get("per_stage_tensor") is False:
                del data["per_stage_tensor"]
            if data.get("offload") == OffloadConstraints().model_dump(mode="json"):
                del data["offload"]
        return data

    @field_validator("fixed")
    @classmethod
    def _known_fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - FIXABLE_FIELDS)
        if unknown:
            raise ValueError(
                f"fixed has unknown fields {unknown}; allowed: {sorted(FIXABLE_FIELDS)}"
            )
        if "framework" in value:
            value = {**value, "framework": canonical_framework_name(value["framework"])}
        if "engine" in value:
            value = {**value, "engine": canonical_engine_name(value["engine"])}
        return value

    @field_validator("engines", mode="before")
    @classmethod
    def _canonical_engines(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [canonical_engine_name(v) for v in value]
        return value

    @field_validator("engine_options", mode="before")
    @classmethod
    def _canonical_engine_keys(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {canonical_engine_name(k): v for k, v in value.items()}
        return value

    @field_validator("frameworks", mode="before")
    @classmethod
    def _canonical_frameworks(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [canonical_framework_name(v) for v in value]
        return value

    @field_validator("micro_batch_sizes")
    @classmethod
    def _positive(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and any(v < 1 or v > 65_536 for v in value):
            raise ValueError(f"micro_batch_sizes must be between 1 and 65536 (got {value})")
        return value
