"""Structural rules of a training plan (no costs): degrees against the model and cluster,
micro-batches, virtual pipeline, schedule, the framework's combination rules
(`cost_models.frameworks`), expert and precision rules, in a fixed order.

The rules that read only the degrees are cached per `Degrees`, the framework's per the
fields its rules read; `check_key` answers a key whose degrees and framework pass from those
caches and a few integer tests, and runs the full check only when one of them fails.
"""

from __future__ import annotations

from typing import NamedTuple

from cost_models.analytical.fp8 import default_recipe
from cost_models.analytical.fp8 import supports as fp8_supports
from cost_models.analytical.schedules import rule_breaks
from cost_models.analytical.training.context import ProblemContext
from cost_models.analytical.training.offload import offload_rule
from specs.errors import PlannerError
from specs.model import ModelSpec
from specs.plan import CONTEXT_PARALLEL_ALGORITHMS, PlanKey, Violation


class Degrees(NamedTuple):
    """The parallel degrees the cached degree rules read."""

    tensor: int
    context: int
    data: int
    pipeline: int
    expert: int
    expert_tensor: int

    @classmethod
    def of(cls, key: PlanKey) -> Degrees:
        return cls(key.tensor, key.context, key.data, key.pipeline, key.expert, key.expert_tensor)


def _framework_rules(ctx: ProblemContext, key: PlanKey) -> list[Violation]:
    """The framework's combination rules (cached per the fields they read)."""
    fkey = _framework_key(key)
    hit = ctx.framework_checks.get(fkey)
    if hit is None:
        try:
            profile = ctx.framework(key.framework)
        except PlannerError as exc:
            hit = [Violation(kind="framework", detail=str(exc), field="plan.framework")]
        else:
            hit = [
                Violation(kind="framework", detail=detail, field="plan.framework")
                for detail in profile.violations(ctx.model, key)
            ]
        ctx.framework_checks[fkey] = hit
    return hit


def _framework_key(key: PlanKey) -> tuple[str, int, int, int, int, int, int, str, str, bool]:
    return (
        key.framework,
        key.zero_stage,
        key.tensor,
        key.pipeline,
        key.virtual_pipeline,
        key.context,
        key.expert,
        key.pipeline_schedule,
        key.context_parallel_algorithm,
        key.vocab_parallel,
    )


def _context_parallel_rules(ctx: ProblemContext, key: PlanKey) -> list[Violation]:
    """The context-parallel algorithm's rules (`cost_models.analytical.context_parallel`),
    cached per (algorithm, head degree, tensor, context): a known algorithm, anything but
    the ring only with context > 1, the hybrid's head degree strictly between 1 and the
    context degree and dividing it (1 otherwise), and the all-to-all degree (Ulysses': the
    context degree; the hybrid's: its head degree) dividing the query heads and the KV heads
    of a tensor rank (Transformer Engine's `AttnFuncWithCPAndQKVOA2A` asserts both; MLA
    exchanges one K/V head per query head)."""
    algorithm, u = key.context_parallel_algorithm, key.context_parallel_heads
    t, c = key.tensor, key.context
    memo = (algorithm, u, t, c)
    hit = ctx.cp_checks.get(memo)
    if hit is not None:
        return hit
    out: list[Violation] = []

    def bad(detail: str, field: str, kind: str = "divisibility") -> None:
        out.append(Violation(kind=kind, detail=detail, field=field))

    model = ctx.model
    if algorithm not in CONTEXT_PARALLEL_ALGORITHMS:
        bad(
            f"context_parallel_algorithm must be one of {', '.join(CONTEXT_PARALLEL_ALGORITHMS)}"
            f" (got {algorithm})",
            "plan.context_parallel_algorithm",
            "context_parallel",
        )
    elif algorithm != "ring" and c == 1:
        bad(
            f"context_parallel_algorithm {algorithm} needs parallelism.context > 1 (got 1)",
            "plan.context_parallel_algorithm",
            "context_parallel",
        )
    elif algorithm == "hybrid" and (not 1 < u < c or c % u):
        bad(
            f"context_parallel_heads of a hybrid must divide parallelism.context ({c}) and "
            f"lie strictly between 1 and it (got {u})",
            "plan.context_parallel_heads",
            "context_parallel",
        )
    elif algorithm != "hybrid" and u != 1:
        bad(
            f"context_parallel_heads must be 1 unless context_parallel_algorithm is hybrid "
            f"(got {u} with {algorithm})",
            "plan.context_parallel_heads",
            "context_parallel",
        )
    elif algorithm in ("ulysses", "hybrid") and c > 1:
        degree = c if algorithm == "ulysses" else u
        field = (
            "plan.context_parallel_algorithm"
            if algorithm == "ulysses"
            else "plan.context_parallel_heads"
        )
        a = model.num_attention_heads
        g = a if model.mla is not None else model.kv_heads
        what = "context" if algorithm == "ulysses" else "context_parallel_heads"
        if a % t == 0 and (a // t) % degree:
            bad(
                f"{algorithm} splits the attention heads of a tensor rank over the all-to-all "
                f"group: num_attention_heads / tensor = {a} / {t} = {a // t} must be "
                f"divisible by {what} ({degree})",
                field,
            )
        if g % t == 0 and (g // t) % degree:
            bad(
                f"{algorithm} splits the KV heads of a tensor rank over the all-to-all group: "
                f"num_kv_heads / tensor = {g} / {t} = {g // t} must be divisible by {what} "
                f"({degree}); use ring, all_gather or a hybrid with fewer head ranks",
                field,
            )
    ctx.cp_checks[memo] = out
    return out


_OFFLOAD = PlanKey._fields.index("offload_activations")
"""Where the offload fields start in a key (`offload_activations`, `_optimizer`,
`_parameters`)."""
_NO_OFFLOAD = (0.0, "none", "none")


def check_key(ctx: ProblemContext, key: PlanKey) -> list[Violation]:
    """Every rule `key` breaks (empty: the plan can be expressed); `key` names its
    framework (`ProblemContext.resolve`)."""
    if key[_OFFLOAD:] != _NO_OFFLOAD:  # offload keys are few (searched when memory binds)
        return check(ctx, key)
    gbs = ctx.global_batch
    b, d, pp, v = key.micro_batch_size, key.data, key.pipeline, key.virtual_pipeline
    schedule = key.pipeline_schedule
    # The rules that do not read the micro-batch size pass for this combination (cached):
    # only the batch and interleaving rules are left to check.
    combination = (
        key.tensor,
        key.context,
        d,
        pp,
        key.expert,
        key.expert_tensor,
        key.zero_stage,
        v,
        schedule,
        key.framework,
        key.context_parallel_algorithm,
        key.context_parallel_heads,
        key.vocab_parallel,
    )
    clear = ctx.combinations_clear.get(combination)
    if clear is None:
        check(ctx, key)  # fills the degree and framework caches
        clear = ctx.combinations_clear[combination] = bool(
            ctx.degrees_clear.get(Degrees.of(key))
            and pp * v <= ctx.num_layers
            and ctx.framework_checks.get(_framework_key(key)) == []
            and not _context_parallel_rules(ctx, key)
            and not vocab_parallel_rules(ctx.model, key)
        )
    if clear and not gbs % (b * d) and not rule_breaks(schedule, pp, v, gbs // (b * d)):
        return []
    return check(ctx, key)


def check(ctx: ProblemContext, key: PlanKey) -> list[Violation]:
    """Every rule, in a fixed order: the degree rules (cached per degrees), then the
    micro-batch, virtual pipeline, schedule and ZeRO rules, then the expert and precision
    rules (cached per degrees)."""
    degrees = Degrees.of(key)
    before_after = ctx.degree_checks.get(degrees)
    if before_after is None:
        before_after = ctx.degree_checks[degrees] = _degree_rules(ctx, degrees)
        ctx.degrees_clear[degrees] = not before_after[0] and not before_after[1]
    before, after = before_after
    out = list(before)
    out.extend(_context_parallel_rules(ctx, key))
    model, gbs = ctx.model, ctx.global_batch
    b, d, pp, v = key.micro_batch_size, key.data, key.pipeline, key.virtual_pipeline
    if gbs % (b * d):
        out.append(
            Violation(
                kind="batch",
                field="plan.micro_batch_size",
                detail=(
                    f"global_batch_size ({gbs}) must be divisible by micro_batch_size × "
                    f"data = {b} × {d} = {b * d}"
                ),
            )
        )
    if pp * v > model.num_layers:
        out.append(
            Violation(
                kind="divisibility",
                field="plan.parallelism.virtual_pipeline",
                detail=(
                    f"pipeline × virtual_pipeline = {pp} × {v} = {pp * v} must not "
                    f"exceed num_layers ({model.num_layers})"
                ),
            )
        )
    # the schedule's own rules (`cost_models.analytical.schedules`; an unknown schedule is a
    # SpecError, never another schedule's rules)
    m = gbs // (b * d) if b * d else 0
    for brk in rule_breaks(key.pipeline_schedule, pp, v, m):
        out.append(Violation(kind="schedule", field="plan.pipeline_schedule", detail=brk.detail))
    out.extend(vocab_parallel_rules(ctx.model, key))
    out.extend(_framework_rules(ctx, key))
    if key.offloads:
        out.extend(_offload_rules(ctx, key))
    out.extend(after)
    return out


VOCAB_PARALLEL_SCHEDULES = ("1f1b", "v_half")
"""The schedules vocabulary parallelism is implemented on: non-interleaved 1F1B (the
sail-sg/VocabularyParallelism fork of Megatron-LM) and V-Half (the `v-half-vocab` branch of
sail-sg/zero-bubble-pipeline-parallelism); Yeung et al. 2025 §5."""


def vocab_parallel_rules(model: ModelSpec, key: PlanKey) -> list[Violation]:
    """Vocabulary parallelism's rules: pipeline > 1, one of `VOCAB_PARALLEL_SCHEDULES`
    (the fork asserts "vocab parallel with interleaved schedule is not supported yet") and
    untied embeddings (it asserts `--untie-embeddings-and-output-weights`)."""
    if not key.vocab_parallel:
        return []
    out = []
    field = "plan.vocab_parallel"
    if key.pipeline < 2:
        out.append(
            Violation(
                kind="divisibility",
                field=field,
                detail=f"vocab_parallel needs parallelism.pipeline > 1 (got {key.pipeline})",
            )
        )
    if key.pipeline_schedule not in VOCAB_PARALLEL_SCHEDULES:
        out.append(
            Violation(
                kind="schedule",
                field=field,
                detail=(
                    f"vocab_parallel runs with pipeline_schedule "
                    f"{' or '.join(VOCAB_PARALLEL_SCHEDULES)} (got {key.pipeline_schedule})"
                ),
            )
        )
    if model.tie_embeddings:
        out.append(
            Violation(
                kind="model",
                field=field,
                detail=(
                    "vocab_parallel needs untied input and output embeddings (the model "
                    "ties them: tie_embeddings is true)"
                ),
            )
        )
    if key.offloads:
        out.append(
            Violation(
                kind="offload",
                field=field,
                detail=(
                    "vocab_parallel with offload is not priced: the vocabulary shard's "
                    "offload and its bounds are not modelled; give one of them"
                ),
            )
        )
    return out


def _offload_rules(ctx: ProblemContext, key: PlanKey) -> list[Violation]:
    """The offload's rules: the cluster has a host link (and NVMe where asked), parameter
    offload with ZeRO-3, and the framework runs that offload (`FrameworkProfile.
    offload_violations`)."""
    out: list[Violation] = []
    why = offload_rule(ctx, key)
    if why:
        out.append(Violation(kind="offload", detail=why, field="plan.offload"))
    try:
        profile = ctx.framework(key.framework)
    except PlannerError:
        return out  # reported by the framework rules
    out.extend(
        Violation(kind="offload", detail=detail, field="plan.offload")
        for detail in profile.offload_violations(ctx.model, key)
    )
    return out


def _degree_rules(ctx: ProblemContext, degrees: Degrees) -> tuple[list[Violation], list[Violation]]:
    """The rules that read only the degrees: (those `check` reports before the per-step
    rules, those it reports after them)."""
    problem = ctx.problem
    model, work, cluster = problem.model, problem.workload, problem.cluster
    t, c, d, pp, e, et = degrees
    world_size = d * t * pp * c
    out: list[Violation] = []

    def bad(kind: str, detail: str, field: str) -> None:
        out.append(Violation(kind=kind, detail=detail, field=field))

    if not ctx.is_homogeneous:  # the mixed cost model prices each pool on its own
        bad(
            "heterogeneous",
            "the cluster mixes node types; only homogeneous clusters are priced for now",
            "cluster.node_groups",
        )
        return out, []
    if world_size != ctx.num_gpus:
        bad(
            "divisibility",
            f"data × tensor × pipeline × context = {d} × {t} × {pp} × {c} "
            f"= {world_size} must equal the cluster's {ctx.num_gpus} GPUs",
            "plan.parallelism",
        )
    a = model.num_attention_heads
    if a % t:
        bad(
            "divisibility",
            f"num_attention_heads ({a}) must be divisible by tensor ({t})",
            "plan.parallelism.tensor",
        )
    if model.mla is None and model.kv_heads % t:
        bad(
            "divisibility",
            f"num_kv_heads ({model.kv_heads}) must be divisible by tensor ({t})",
            "plan.parallelism.tensor",
        )
    if model.ffn_hidden_size % t:
        bad(
            "divisibility",
            f"ffn_hidden_size ({model.ffn_hidden_size}) must be divisible by tensor ({t})",
            "plan.parallelism.tensor",
        )
    domain = ctx.domain_gpus
    if t > domain and not problem.allow_tensor_across_nodes:
        bad(
            "topology",
            f"tensor ({t}) must not exceed the scale-up domain ({domain} GPUs) unless "
            "allow_tensor_across_nodes is set",
            "plan.parallelism.tensor",
        )
    s = work.sequence_length
    if c > 1 and s % (2 * c):
        bad(
            "divisibility",
            f"sequence_length ({s}) must be divisible by 2 × context "
            f"= {2 * c} (load-balanced causal context parallelism)",
            "plan.parallelism.context",
        )
    before = out
    out = []
    if model.moe is None:
        if e > 1 or et > 1:
            bad(
                "expert",
                f"expert ({e}) and expert_tensor ({et}) must be 1 for a dense model",
                "plan.parallelism.expert",
            )
    else:
        if model.moe.num_experts % e:
            bad(
                "expert",
                f"moe.num_experts ({model.moe.num_experts}) must be divisible by expert ({e})",
                "plan.parallelism.expert",
            )
        if (d * c * t) % (e * et):
            bad(
                "expert",
                f"expert × expert_tensor = {e} × {et} must divide data × context "
                f"× tensor = {d} × {c} × {t} = {d * c * t}",
                "plan.parallelism.expert",
            )
        fe = model.moe.expert_ffn_hidden_size
        if fe % et:
            bad(
                "divisibility",
                f"moe.expert_ffn_hidden_size ({fe}) must be divisible by expert_tensor ({et})",
                "plan.parallelism.expert_tensor",
            )
        if et > domain and not problem.allow_tensor_across_nodes:
            bad(
                "topology",
                f"expert_tensor ({et}) must not exceed the scale-up domain ({domain} GPUs) "
                "unless allow_tensor_across_nodes is set",
                "plan.parallelism.expert_tensor",
            )
        if model.moe.num_shared_experts:
            fs = model.moe.num_shared_experts * model.moe.shared_ffn
            if fs % t:
                bad(
                    "divisibility",
                    f"shared expert width ({fs}) must be divisible by tensor ({t})",
                    "plan.parallelism.tensor",
                )
        loads = work.moe_routing.expert_loads if work.moe_routing is not None else None
        if loads is not None and len(loads) != model.moe.num_experts:
            bad(
                "expert",
                f"moe_routing.expert_loads has {len(loads)} entries; the model "
                f"has {model.moe.num_experts} routed experts",
                "workload.moe_routing.expert_loads",
            )
    acc = cluster.accelerator
    if not acc.peak_tflops.get(work.precision) and not (
        work.precision in ("fp16", "bf16")
        and (acc.peak_tflops.get("bf16") or acc.peak_tflops.get("fp16"))
    ):
        bad(
            "precision",
            f"{acc.id} has no dense {work.precision} peak in the catalog",
            "workload.precision",
        )
    elif work.precision == "fp8":
        why = fp8_supports(work.fp8_recipe or default_recipe(acc), acc)
        if why is not None:
            bad("precision", why, "workload.fp8_recipe")
    return before, out
