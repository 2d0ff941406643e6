"""Framework profiles: what a training framework overlaps with what, how it reduces gradients
and gathers parameters, what it keeps in memory per parameter, and which plans it can run.

A profile is a plug-in (`registry.py`, the same registry shape as the cost models): a class
registered under a lower_snake name with a nested pydantic `Config` holding its behaviour,
every field defaulting to what the framework does as meshplan's exports launch it (the
launch flags and library defaults are cited per profile). A request may override fields per
framework through the analytical cost model's `frameworks` option.

The cost model reads the behaviour; the rules (`violations`) say which plans the framework
can run. Sources for every default: `docs/research/frameworks.md` (framework code read at
pinned commits) unless a field's docstring says otherwise.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from specs.model import ModelSpec
from specs.plan import CONTEXT_PARALLEL_ALGORITHMS, PlanKey

ReduceCollective = Literal["reduce_scatter", "all_reduce"]
P2POverlap = Literal["none", "interleaved", "always"]


EAGER_ELEMENTWISE_TRAFFIC = 3.1
"""Elementwise HBM bytes of an eager PyTorch Llama layer against fused kernels, counted op
by op from the modules (torchtitan's `RMSNorm` and `apply_rotary_emb`, Hugging Face's
`LlamaRMSNorm`, `F.silu(w1(x)) * w3(x)`), bytes per element of the tensor they touch:

- RMSNorm upcasts to fp32: `x.float()` (read 2, write 4), `pow(2)` (4 + 4), `mean` (4),
  `x * rsqrt` (4 + 4), `type_as` (4 + 2), `* weight` (2 + 2): 36 against a fused kernel's 4;
- rotary embedding through complex fp32: `float()` (2 + 4), complex multiply (4 + 4),
  `type_as` (4 + 2): 20 against 4;
- SwiGLU: `silu` (2 + 2), multiply (4 + 2): 10 per FFN element against 6;
- residual adds: 6 either way.

Per token of a Llama layer (two norms on h, rotary on (a + g)·d = 1.25 h, SwiGLU on
f = 3.5 h, two residual adds): 72 h + 25 h + 35 h + 12 h = 144 h bytes eager against
8 h + 5 h + 21 h + 12 h = 46 h fused: 3.1×. torch.compile fuses them back (1.0)."""


class FrameworkConfig(BaseModel):
    """The behaviour of a framework that prices a plan (every field physical and sourced in
    the profile's defaults)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    grad_reduce_bytes: float = Field(default=4.0, gt=0, le=8)
    """Bytes per gradient element on the wire of the data-parallel reduction (4 fp32, 2 bf16)."""
    sharded_grad_collective: ReduceCollective = "reduce_scatter"
    """The collective that reduces gradients for a sharded optimizer (ZeRO-1/2): a true
    reduce-scatter, or an all-reduce of which each rank keeps its slice (DeepSpeed's default
    `use_multi_rank_bucket_allreduce`)."""
    grad_bucket_elements: float | None = Field(default=40e6, gt=0)
    """Gradient elements per reduction bucket; null reduces all of a rank's gradients in one
    collective."""
    bucket_per_layer: bool = False
    """Gradients are reduced one layer (one FSDP unit) at a time, whatever its size
    (`grad_bucket_elements` is then ignored)."""
    grad_bucket_elements_per_dp_rank: float = Field(default=0.0, ge=0)
    """Added to the bucket per data-parallel rank (Megatron-Core: max(40M, 1M × dp))."""
    buckets_on_first_stage_only: bool = False
    """Only pipeline rank 0 splits its gradients into buckets; the other ranks reduce in one
    collective after their backward (Megatron-Core `DistributedDataParallel`)."""
    overlap_grad_reduce: bool = True
    """Gradient buckets are reduced while the backward pass still runs."""
    overlap_param_gather: bool = True
    """The distributed optimizer's parameter all-gather (ZeRO-1/2) is waited on in a forward
    pre-hook, overlapping the next step's first forward pass."""
    zero3_prefetch: bool = True
    """ZeRO-3 / FSDP all-gathers the next unit's parameters while the current one computes
    (forward and backward prefetch)."""
    zero3_unit: Literal["module", "layer"] = "layer"
    """What ZeRO-3 gathers at once: a whole transformer layer (FSDP / FSDP2 wrap units,
    Megatron-FSDP; the unit's unsharded gradient also lives until its reduce-scatter) or
    each module (DeepSpeed fetches parameters module by module, bounded by
    `stage3_prefetch_bucket_size`)."""
    zero3_flat_ring: bool = False
    """ZeRO-3 gathers and reduce-scatters cross the network as one flat ring over each GPU's
    own NIC instead of NCCL's rings over every NIC of a node."""
    grad_reduce_every_microbatch: bool = False
    """ZeRO-2 / FSDP reduce (and, for ZeRO-3, re-gather) on every micro-batch of a step
    without pipeline parallelism, instead of once per step."""
    ep_comm_overlap: bool = False
    """The expert-parallel all-to-all runs while another micro-batch computes (DeepSeek-V3's
    DualPipe, arXiv 2412.19437 §3.2.1; Megatron-Core's 1F1B all-to-all overlap,
    `--overlap-moe-expert-parallel-comm`, 2025): exposed only beyond a layer's forward
    computation. Off by default: Megatron-Core runs it on the critical path unless asked."""
    tp_backward_overlap: bool = True
    """Column-parallel layers overlap their backward tensor-parallel collectives with the
    data- and weight-gradient GEMMs (Megatron `LinearWithGradAccumulationAndAsyncCommunication`:
    the input all-gather with the dgrad GEMM, the gradient reduce-scatter or all-reduce with
    the wgrad GEMM)."""
    tp_comm_overlap: float = Field(default=0.0, ge=0, le=1)
    """Fraction of the remaining tensor-parallel communication hidden behind GEMMs
    (Transformer Engine userbuffers, `--tp-comm-overlap`; async TP)."""
    p2p_overlap: P2POverlap = "interleaved"
    """When pipeline send/receives overlap compute in the steady state: never, only in the
    interleaved schedule (Megatron `overlap_p2p_comm`), or always (asynchronous schedules)."""
    host_overhead_per_kernel_s: float = Field(default=6e-6, ge=0, le=1e-3)
    """CPU time to issue one kernel (Python, dispatcher, autograd, launch). A pipeline rank's
    micro-batch takes at least the CPU time of its kernels: eager PyTorch ops with autograd
    cost 5–7 µs each on the host (pytorch/pytorch#41383, maintainer measurement); kernel
    launches 5–20 µs of CPU time (Meta HTA kernel-launch statistics)."""
    elementwise_traffic: float = Field(default=1.0, ge=1.0, le=8.0)
    """HBM traffic of a layer's norms, rotary embedding, activation and residual kernels
    relative to Megatron / Transformer Engine's fused kernels (eager PyTorch modules:
    `EAGER_ELEMENTWISE_TRAFFIC`)."""
    fp8_param_gather: bool = False
    """FP8 training keeps the compute weights in FP8 and all-gathers them in FP8
    (Megatron `--fp8-param-gather`; torchao FSDP float8 all-gather)."""
    weight_bytes_per_param: float = Field(default=2.0, gt=0, le=8)
    """Compute (bf16) weight bytes per parameter held between forward and backward."""
    grad_bytes_per_param: float = Field(default=4.0, gt=0, le=8)
    """Gradient bytes per parameter kept for the optimizer (Megatron's fp32 main grads 4;
    DeepSpeed bf16 with ZeRO 2)."""
    optimizer_bytes_per_param: float = Field(default=12.0, gt=0, le=32)
    """Optimizer bytes per parameter: fp32 master copy 4 + Adam moments 8."""


class FrameworkProfile:
    """A framework: its behaviour (`config`) and the plans it can run (`violations`)."""

    name: ClassVar[str]
    label: ClassVar[str]
    """Human-readable name for explanations."""
    zero_stages: ClassVar[frozenset[int]] = frozenset({0, 1, 2, 3})
    """ZeRO stages the framework implements."""
    supports_moe: ClassVar[bool] = True
    """Whether the framework trains mixture-of-experts models."""
    rules: ClassVar[tuple[str, ...]] = ()
    """The combination rules `_rules` checks, in words (`GET /v1/frameworks`)."""
    context_parallel_algorithms: ClassVar[frozenset[str]] = frozenset(CONTEXT_PARALLEL_ALGORITHMS)
    """The context-parallel algorithms (`plan.context_parallel_algorithm`) the framework
    runs when `context` > 1."""
    runs_vocab_parallel: ClassVar[bool] = False
    """Whether the framework runs vocabulary parallelism (`plan.vocab_parallel`)."""
    rule_fields: ClassVar[frozenset[str]] = frozenset(
        {
            "zero_stage",
            "pipeline",
            "pipeline_schedule",
            "context",
            "context_parallel_algorithm",
            "vocab_parallel",
        }
    )
    """The `PlanKey` fields `violations` reads (callers may cache its answer per these
    fields and the model); a profile whose `_rules` reads more must list them."""
    Config: ClassVar[type[FrameworkConfig]] = FrameworkConfig
    offload_optimizer_devices: ClassVar[frozenset[str]] = frozenset()
    """Where the framework can offload optimizer states (`plan.offload.optimizer`)."""
    offload_parameter_devices: ClassVar[frozenset[str]] = frozenset()
    """Where it can offload (ZeRO-3 sharded) parameters (`plan.offload.parameters`)."""
    offload_activations: ClassVar[Literal["none", "layers", "checkpoints"]] = "none"
    """How it offloads activations: not at all, whole layers' activations (Megatron-Core
    `--cpu-offloading-num-layers`: a fraction n / layers with n < layers, no pipelining and no
    recompute), or every activation checkpoint of full recompute (DeepSpeed
    `cpu_checkpointing`: fraction 1 with recompute full)."""
    offload_states_together: ClassVar[bool] = False
    """Parameters, gradients and optimizer states go to the CPU together or not at all
    (FSDP2's `CPUOffloadPolicy`: ZeRO-3, optimizer and parameters both `cpu`)."""

    def offload_violations(self, model: ModelSpec, key: PlanKey) -> list[str]:
        """Why this framework cannot run the key's offload (empty: it can, or there is none).
        Each entry names the rule."""
        out: list[str] = []
        opt, par, f = key.offload_optimizer, key.offload_parameters, key.offload_activations
        if opt != "none" and opt not in self.offload_optimizer_devices:
            runs = ", ".join(sorted(self.offload_optimizer_devices)) or "none"
            out.append(
                f"{self.name} does not offload the optimizer to {opt} (it offloads to: {runs})"
            )
        if par != "none" and par not in self.offload_parameter_devices:
            runs = ", ".join(sorted(self.offload_parameter_devices)) or "none"
            out.append(f"{self.name} does not offload parameters to {par} (it offloads to: {runs})")
        if self.offload_states_together and (opt != "none" or par != "none"):
            if not (opt == "cpu" and par == "cpu" and key.zero_stage == 3):
                out.append(
                    f"{self.name} offloads parameters, gradients and optimizer states together "
                    f"(FSDP CPU offload): offload.optimizer and offload.parameters must both be "
                    f"cpu with zero_stage 3 (got {opt}, {par}, zero_stage {key.zero_stage})"
                )
        if f > 0.0:
            mode = self.offload_activations
            layers = model.num_layers
            if mode == "none":
                out.append(f"{self.name} does not offload activations (offload.activations {f})")
            elif mode == "layers":
                n = f * layers
                if key.pipeline > 1 or key.recompute != "none":
                    out.append(
                        f"{self.name} offloads activations (--cpu-offloading) only without "
                        f"pipeline parallelism and without recompute (got pipeline "
                        f"{key.pipeline}, recompute {key.recompute})"
                    )
                elif abs(n - round(n)) > 1e-9 or not 1 <= round(n) < layers:
                    out.append(
                        f"{self.name} offloads the activations of whole layers, fewer than all "
                        f"(--cpu-offloading-num-layers < num_layers): offload.activations × "
                        f"num_layers = {f} × {layers} must be an integer from 1 to {layers - 1}"
                    )
            elif f != 1.0 or key.recompute != "full":
                out.append(
                    f"{self.name} offloads the activation checkpoints of full recompute "
                    f"(cpu_checkpointing): offload.activations must be 1 with recompute full "
                    f"(got {f}, recompute {key.recompute})"
                )
        return out

    def __init__(self, config: FrameworkConfig | None = None) -> None:
        self.config = config or self.Config()

    def violations(self, model: ModelSpec, key: PlanKey) -> list[str]:
        """Why this framework cannot run `key` of `model` (empty: it can). Each entry names
        the rule."""
        out: list[str] = []
        if key.zero_stage not in self.zero_stages:
            stages = ", ".join(str(z) for z in sorted(self.zero_stages))
            out.append(f"{self.name} implements zero_stage {stages} (got {key.zero_stage})")
        if model.moe is not None and not self.supports_moe:
            out.append(f"{self.name} has no mixture-of-experts layers")
        algorithm = key.context_parallel_algorithm
        if key.context > 1 and algorithm not in self.context_parallel_algorithms:
            runs = ", ".join(
                a for a in CONTEXT_PARALLEL_ALGORITHMS if a in self.context_parallel_algorithms
            )
            out.append(
                f"{self.name} does not run context_parallel_algorithm {algorithm} "
                f"(it runs: {runs or 'no context parallelism'})"
            )
        if key.vocab_parallel and not self.runs_vocab_parallel:
            out.append(
                f"{self.name} does not run vocab_parallel (the embedding and LM head split "
                "over the pipeline stages)"
            )
        out.extend(self._rules(key))
        schedule = self._schedule_rule(key)
        if schedule and not any("schedule" in o for o in out):
            out.append(schedule)
        return out

    def _schedule_rule(self, key: PlanKey) -> str:
        """Whether the framework runs the plan's pipeline schedule: the schedule plug-in
        lists the frameworks that run it (`cost_models.analytical.schedules`); without
        pipelining there is no schedule to run."""
        if key.pipeline <= 1:
            return ""
        # imported here: the schedules package sits in the analytical model, which imports
        # the framework profiles
        from cost_models.analytical.schedules import get as get_schedule

        runs = get_schedule(key.pipeline_schedule).frameworks
        if self.name in runs:
            return ""
        who = ", ".join(sorted(runs)) or "no registered framework"
        return f"{self.name} does not run pipeline schedule {key.pipeline_schedule} (run by: {who})"

    def _rules(self, key: PlanKey) -> list[str]:
        """The framework's own combination rules (none by default)."""
        del key
        return []

    def can_run(self, model: ModelSpec, key: PlanKey) -> bool:
        return not self.violations(model, key)

    def state_bytes_per_param(self, zero_stage: int, shards: int) -> tuple[float, float, float]:
        """(weights, gradients, optimizer) bytes per parameter on one GPU with the states
        sharded over `shards` ranks at `zero_stage` (Rajbhandari et al. 2020, Fig. 1: stage 1
        shards the optimizer states, 2 also the gradients, 3 also the weights)."""
        c = self.config
        d = float(max(1, shards))
        w, g, o = c.weight_bytes_per_param, c.grad_bytes_per_param, c.optimizer_bytes_per_param
        if zero_stage == 0:
            return w, g, o
        if zero_stage == 1:
            return w, g, o / d
        if zero_stage == 2:
            return w, g / d, o / d
        return w / d, g / d, o / d

    def reshards_after_forward(self, zero_stage: int) -> bool:
        """ZeRO-3 frees gathered parameters after each unit's forward and gathers them again
        for its backward; ZeRO-2 (FSDP `reshard_after_forward=False`) keeps them."""
        return zero_stage == 3
