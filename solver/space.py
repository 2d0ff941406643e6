"""The declared search space: pure generators of legal plan candidates (Calculon's
`get_all_*` style).

A candidate is every plan field except the pipeline split (`stage_layers`, chosen later by the
partition ILP) unless the request fixes it. The rules here are structural and cheap; the cost
model's `check()` has the last word.

- Degrees (Megatron-LM, Narayanan et al. 2021 §2-3): `data × tensor × pipeline × context` is
  the GPU count; tensor divides the query heads, the KV heads and the FFN width and stays inside
  a node (the scale-up domain) unless allowed across nodes; `pipeline ≤ num_layers`; the
  context degree divides `sequence_length / 2` (load-balanced ring attention cuts each sequence
  into `2·context` chunks, Megatron-Core context parallelism); `data` divides the global batch.
- Virtual pipeline (interleaved 1F1B, Narayanan et al. 2021 §2.2): `v = 1` always; with
  `pipeline > 1` also every `v` in `2..max_v` with `pipeline·v ≤ num_layers`.
- Pipeline schedule (`cost_models.analytical.schedules`): every registered schedule that runs
  `v` chunks per rank (1F1B alone without pipelining), minus those whose rules the micro-batch
  count breaks (interleaving needs m a multiple of, and at least, `pipeline`; DualPipe an even
  m ≥ 2·pipeline, ...); `constraints.pipeline_schedules` / `fixed.pipeline_schedule` restrict.
- Micro-batch: the requested sizes, or powers of two up to 16, dividing `global_batch / data`.
- ZeRO 0-3 (Rajbhandari et al. 2020) with every pipeline degree; which framework can run a
  combination is the framework profiles' rule (`cost_models.frameworks`): DeepSpeed and
  Megatron-Core do not combine ZeRO-2/3 with pipelining, torchtitan (FSDP2) does.
- Framework: a candidate is priced under Megatron-Core (what the Megatron export launches),
  under each of `constraints.frameworks` that can run it, or under `fixed.framework`. By
  default the space is what Megatron-Core can run (ZeRO-2/3 only without pipelining); listing
  torchtitan adds its FSDP2 + pipeline plans.
- Recompute none / selective / full (Korthikanti et al. 2022); sequence parallelism is on
  whenever tensor > 1 (it only saves memory and time) unless fixed off.
- Context-parallel algorithm (`context > 1` only; the ring without context parallelism):
  ring, ulysses, all_gather and hybrid with every head degree that divides the context
  degree strictly between 1 and it (by default only where the context group spans
  scale-up domains and the head group fits in one), those whose all-to-all degree divides a
  tensor rank's query and KV heads, and only those some searched framework runs (Megatron-Core all four,
  torchtitan / PyTorch FSDP ring and all_gather, DeepSpeed ulysses);
  `fixed.context_parallel_algorithm` / `fixed.context_parallel_heads` restrict.
- Expert degrees (MoE models only; dense models keep 1 / 1 unless fixed): `expert` divides
  `num_experts`; `expert_tensor` divides the expert FFN width, stays inside a scale-up domain unless
  tensor groups may span nodes; `expert × expert_tensor` divides `data × context × tensor`
  (Megatron-Core "MoE Parallel Folding", Liu et al. 2025, arXiv 2504.14960 §3: the expert
  layout is folded onto the attention's GPUs independently of the attention layout).

- Vocabulary parallelism (Yeung et al. 2025, `cost_models.analytical.training.
  vocab_parallel`): with pipeline > 1 and untied embeddings every candidate of the schedules
  it runs with (1F1B, V-Half) also comes with `vocab_parallel` on, under the frameworks that
  run it (Megatron-Core through the sail-sg fork); `fixed.vocab_parallel` restricts.

`constraints.fixed` restricts a dimension to one value (plan fields or degree names).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import attrgetter
from typing import Any, NamedTuple

from cost_models.analytical.schedules import SCHEDULES, rule_breaks, valid_for
from cost_models.analytical.training.rules import VOCAB_PARALLEL_SCHEDULES
from cost_models.base import TrainingProblem
from cost_models.frameworks import DEFAULT_PREFERENCE, FrameworkProfile, build_framework
from specs.constraints import SearchConstraints
from specs.errors import PlannerError, SpecError
from specs.plan import CONTEXT_PARALLEL_ALGORITHMS, ParallelDims, PlanKey

RECOMPUTE_OPTIONS: tuple[str, ...] = ("none", "selective", "full")
"""Recompute modes in canonical order."""
ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)
DEFAULT_MAX_MICRO_BATCH = 16
"""Largest default micro-batch size (powers of two up to this)."""

_INT_FIELDS = (
    "data",
    "tensor",
    "pipeline",
    "virtual_pipeline",
    "context",
    "expert",
    "expert_tensor",
    "micro_batch_size",
    "zero_stage",
    "context_parallel_heads",
)
_BOOL_FIELDS = ("sequence_parallel", "flash_attention", "vocab_parallel")


def _field_max(name: str) -> int:
    """The `le` bound of a ParallelDims field (the space never proposes what it rejects)."""
    for meta in ParallelDims.model_fields[name].metadata:
        bound = getattr(meta, "le", None)
        if bound is not None:
            return int(bound)
    return 1 << 62


_MAX_DEGREE = {name: _field_max(name) for name in ("data", "tensor", "pipeline", "context")}
_EXPERT_MAX = {name: _field_max(name) for name in ("expert", "expert_tensor")}
MAX_VIRTUAL_PIPELINE = _field_max("virtual_pipeline")


def divisors(n: int) -> list[int]:
    """All positive divisors of `n`, ascending."""
    if n < 1:
        raise SpecError("n", "must be a positive integer", n)
    small: list[int] = []
    large: list[int] = []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i * i != n:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def validated_fixed(constraints: SearchConstraints) -> dict[str, Any]:
    """`constraints.fixed` with types checked (SpecError naming the field otherwise)."""
    out: dict[str, Any] = {}
    for name, value in constraints.fixed.items():
        field = f"constraints.fixed.{name}"
        if name in _INT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError(field, "must be a non-negative integer", value)
        elif name in _BOOL_FIELDS:
            if not isinstance(value, bool):
                raise SpecError(field, "must be a boolean", value)
        elif name == "recompute":
            if value not in RECOMPUTE_OPTIONS:
                raise SpecError(field, f"must be one of {list(RECOMPUTE_OPTIONS)}", value)
        elif name == "pipeline_schedule":
            if value not in SCHEDULES:
                raise SpecError(field, f"must be one of {', '.join(SCHEDULES)}", value)
        elif name == "framework":
            check_framework(value, field)
        elif name == "context_parallel_algorithm":
            if value not in CONTEXT_PARALLEL_ALGORITHMS:
                raise SpecError(
                    field, f"must be one of {', '.join(CONTEXT_PARALLEL_ALGORITHMS)}", value
                )
        elif name == "stage_layers":
            if value is not None and (
                not isinstance(value, list | tuple)
                or not value
                or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in value)
            ):
                raise SpecError(field, "must be a list of positive integers", value)
            value = tuple(value) if value is not None else None
        out[name] = value
    return out


FRAMEWORK_RULE = "must name a registered framework (GET /v1/frameworks)"
"""The rule an unknown framework name breaks, wherever a request names one."""


def check_framework(name: Any, field: str) -> FrameworkProfile:
    """The profile `name` names, with its default behaviour.

    Raises:
        SpecError: `name` is not a string, or no registered framework has it (the error
            names `field`; its message lists the registered frameworks).
    """
    if not isinstance(name, str):
        raise SpecError(field, "must be a framework name", name)
    try:
        return build_framework(name)
    except PlannerError as exc:
        raise SpecError(field, FRAMEWORK_RULE, name, f"{field}: {exc.detail}") from exc


DEFAULT_SEARCH_FRAMEWORK = DEFAULT_PREFERENCE[0]
"""The framework a search prices candidates under when the request names none."""


def framework_options(
    constraints: SearchConstraints,
) -> tuple[tuple[FrameworkProfile, ...], bool]:
    """(profiles, requested): the frameworks candidates are priced under, and whether the
    request named them (`fixed.framework`, `constraints.frameworks`): then a combination none
    of them can run is still enumerated, under the first, so that the rule check says why;
    by default such combinations are not part of the space."""
    fixed = validated_fixed(constraints)
    if "framework" in fixed:
        pinned = check_framework(fixed["framework"], "constraints.fixed.framework")
        if constraints.frameworks and pinned.name not in constraints.frameworks:
            raise SpecError(
                "constraints.fixed.framework",
                "must be one of constraints.frameworks when both are given",
                fixed["framework"],
            )
        return (pinned,), True
    if constraints.frameworks:
        # checked at the request's own indices, then each framework once
        profiles = [
            check_framework(n, f"constraints.frameworks.{i}")
            for i, n in enumerate(constraints.frameworks)
        ]
        return tuple({p.name: p for p in profiles}.values()), True
    return (build_framework(DEFAULT_SEARCH_FRAMEWORK),), False


def _restrict(values: list[Any], fixed: Mapping[str, Any], name: str) -> list[Any]:
    if name not in fixed:
        return values
    return [v for v in values if v == fixed[name]]


def degree_tuples(
    problem: TrainingProblem, constraints: SearchConstraints
) -> Iterator[tuple[int, int, int, int]]:
    """Legal `(data, tensor, pipeline, context)` degree tuples, in ascending order.

    Rules (Megatron-LM): the product is the GPU count; tensor divides the attention heads, KV
    heads and FFN width and is at most the scale-up domain unless `allow_tensor_across_nodes`;
    `pipeline ≤ num_layers`; context > 1 divides `sequence_length / 2`; data divides the
    global batch; every degree within ParallelDims' field limits.
    """
    fixed = validated_fixed(constraints)
    model, wl = problem.model, problem.workload
    n = problem.num_gpus
    across = constraints.allow_tensor_across_nodes or problem.allow_tensor_across_nodes
    gpn = min(problem.cluster.scale_up_domain_gpus, problem.num_gpus)
    for tensor in _restrict(divisors(n), fixed, "tensor"):
        if (
            model.num_attention_heads % tensor
            or model.kv_heads % tensor
            or model.ffn_hidden_size % tensor
            or (not across and tensor > gpn)
            or tensor > _MAX_DEGREE["tensor"]
        ):
            continue
        rest_t = n // tensor
        for pipeline in _restrict(divisors(rest_t), fixed, "pipeline"):
            if pipeline > model.num_layers or pipeline > _MAX_DEGREE["pipeline"]:
                continue
            rest_p = rest_t // pipeline
            for context in _restrict(divisors(rest_p), fixed, "context"):
                if context > 1 and (wl.sequence_length % 2 or (wl.sequence_length // 2) % context):
                    continue
                data = rest_p // context
                if context > _MAX_DEGREE["context"] or data > _MAX_DEGREE["data"]:
                    continue
                if "data" in fixed and fixed["data"] != data:
                    continue
                if wl.global_batch_size % data:
                    continue
                yield data, tensor, pipeline, context


def expert_degree_options(
    problem: TrainingProblem,
    constraints: SearchConstraints,
    data: int,
    tensor: int,
    context: int,
) -> list[tuple[int, int]]:
    """Legal `(expert, expert_tensor)` pairs for one attention layout, ascending.

    Dense models: `[(1, 1)]` (or the fixed values). MoE models (Megatron-Core folding rules,
    module docstring): expert ∈ divisors(num_experts); expert_tensor ∈ divisors(expert FFN
    width), ≤ the scale-up domain unless tensor groups may span nodes; expert·expert_tensor
    divides data·context·tensor; within ParallelDims' field limits.
    """
    fixed = validated_fixed(constraints)
    moe = problem.model.moe
    if moe is None:
        return [(fixed.get("expert", 1), fixed.get("expert_tensor", 1))]
    across = constraints.allow_tensor_across_nodes or problem.allow_tensor_across_nodes
    gpn = min(problem.cluster.scale_up_domain_gpus, problem.num_gpus)
    grid = data * context * tensor
    experts = [
        e
        for e in _restrict(divisors(moe.num_experts), fixed, "expert")
        if e <= _EXPERT_MAX["expert"] and not grid % e
    ]
    etps = [
        et
        for et in _restrict(divisors(moe.expert_ffn_hidden_size), fixed, "expert_tensor")
        if et <= _EXPERT_MAX["expert_tensor"] and (across or et <= gpn)
    ]
    return [(e, et) for e in experts for et in etps if not grid % (e * et)]


def context_parallel_options(
    problem: TrainingProblem,
    fixed: Mapping[str, Any],
    tensor: int,
    context: int,
    runnable: frozenset[str],
) -> list[tuple[str, int]]:
    """Legal `(context_parallel_algorithm, context_parallel_heads)` pairs for one tensor and
    context degree, in `CONTEXT_PARALLEL_ALGORITHMS` order, hybrids by ascending head
    degree.

    Without context parallelism only the ring (the default, nothing to exchange). With it:
    every algorithm some searched framework runs (`runnable`) or the one fixed, where the
    all-to-all degree (Ulysses: the context degree; a hybrid: its head degree, a divisor of
    the context degree strictly between 1 and it) divides the query and KV heads of a
    tensor rank (the cost model's rule, `rules._context_parallel_rules`). Hybrids are
    enumerated where they are meant to run (Megatron-Core's a2a+p2p): the context group
    spans scale-up domains and the head group (head degree × tensor GPUs) fits in one;
    pinning `context_parallel_algorithm` hybrid or `context_parallel_heads` enumerates every
    head degree."""
    if context == 1:
        if fixed.get("context_parallel_algorithm", "ring") != "ring":
            return []
        if fixed.get("context_parallel_heads", 1) != 1:
            return []
        return [("ring", 1)]
    model = problem.model
    a_t = model.num_attention_heads // tensor
    g_t = (model.num_attention_heads if model.mla is not None else model.kv_heads) // tensor

    def splits(degree: int) -> bool:
        return a_t % degree == 0 and g_t % degree == 0

    names = _restrict(list(CONTEXT_PARALLEL_ALGORITHMS), fixed, "context_parallel_algorithm")
    if "context_parallel_algorithm" not in fixed:
        names = [n for n in names if n in runnable]
    out: list[tuple[str, int]] = []
    domain = min(problem.cluster.scale_up_domain_gpus, problem.num_gpus)
    pinned = "context_parallel_algorithm" in fixed or "context_parallel_heads" in fixed
    for name in names:
        if name == "hybrid":
            # all-to-all inside a scale-up domain, the ring across domains (Megatron-Core's
            # a2a+p2p: "A2A communications in low-level CP groups (e.g., via NVLink), and
            # P2P communications in high-level CP groups (e.g., via IBLink)"); any head
            # degree when the request pins the hybrid
            out += [
                (name, u)
                for u in divisors(context)[1:-1]
                if splits(u) and (pinned or (u * tensor <= domain < context * tensor))
            ]
        elif name != "ulysses" or splits(context):
            out.append((name, 1))
    if "context_parallel_heads" in fixed:
        out = [o for o in out if o[1] == fixed["context_parallel_heads"]]
    return out


def virtual_pipeline_options(num_layers: int, pipeline: int, max_v: int) -> list[int]:
    """Virtual pipeline degrees: 1 (plain 1F1B), and with pipeline > 1 every v in 2..max_v
    with `pipeline·v ≤ num_layers` (each chunk needs a layer; Narayanan et al. 2021 §2.2)."""
    if pipeline <= 1:
        return [1]
    top = min(max_v, MAX_VIRTUAL_PIPELINE)
    return [1] + [v for v in range(2, top + 1) if pipeline * v <= num_layers]


def micro_batch_options(
    global_batch_size: int, data: int, sizes: list[int] | None = None
) -> list[int]:
    """Micro-batch sizes dividing the per-replica batch `global_batch_size / data`: the given
    sizes (sorted, deduplicated) or powers of two up to 16."""
    if global_batch_size % data:
        return []
    per_replica = global_batch_size // data
    if sizes is None:
        pool = [
            1 << i
            for i in range(DEFAULT_MAX_MICRO_BATCH.bit_length())
            if 1 << i <= DEFAULT_MAX_MICRO_BATCH
        ]
    else:
        pool = sorted(set(sizes))
    return [b for b in pool if per_replica % b == 0]


def zero_stage_options() -> list[int]:
    """ZeRO stages 0-3 (the framework profiles say which a framework combines with what)."""
    return list(ZERO_STAGES)


def interleave_allowed(num_microbatches: int, pipeline: int) -> bool:
    """Megatron's interleaved schedule needs m to be a multiple of, and at least, p."""
    return num_microbatches >= pipeline and num_microbatches % pipeline == 0


class _Inner(NamedTuple):
    virtual_pipeline: int
    schedule: str
    micro_batch_size: int


def _inner_options(
    problem: TrainingProblem,
    constraints: SearchConstraints,
    fixed: Mapping[str, Any],
    data: int,
    pipeline: int,
) -> list[_Inner]:
    model, wl = problem.model, problem.workload
    vs = _restrict(
        virtual_pipeline_options(model.num_layers, pipeline, constraints.max_virtual_pipeline),
        fixed,
        "virtual_pipeline",
    )
    mbs = _restrict(
        micro_batch_options(wl.global_batch_size, data, constraints.micro_batch_sizes),
        fixed,
        "micro_batch_size",
    )
    allowed = searched_schedules(constraints, fixed)
    out: list[_Inner] = []
    for v in vs:
        for schedule in valid_for(pipeline, v):
            if schedule not in allowed:
                continue
            for b in mbs:
                m = wl.global_batch_size // (b * data)
                if rule_breaks(schedule, pipeline, v, m):
                    continue
                out.append(_Inner(v, schedule, b))
    return out


def searched_schedules(constraints: SearchConstraints, fixed: Mapping[str, Any]) -> frozenset[str]:
    """The pipeline schedules the space enumerates: `fixed.pipeline_schedule`, else
    `constraints.pipeline_schedules`, else every registered schedule
    (`cost_models.analytical.schedules`); each candidate then takes those valid for its
    pipeline, chunks per rank and micro-batch count."""
    if "pipeline_schedule" in fixed:
        return frozenset((fixed["pipeline_schedule"],))
    listed = constraints.pipeline_schedules
    if listed is None:
        return frozenset(SCHEDULES)
    for name in listed:
        if name not in SCHEDULES:
            raise SpecError(
                "constraints.pipeline_schedules", f"must list only {', '.join(SCHEDULES)}", name
            )
    return frozenset(listed)


def _stage_layers_ok(fixed: Mapping[str, Any], pipeline: int, v: int, num_layers: int) -> bool:
    layers = fixed.get("stage_layers")
    return layers is None or (len(layers) == pipeline * v and sum(layers) == num_layers)


OffloadOption = tuple[float, str, str]
"""(offload_activations, offload_optimizer, offload_parameters) of a slot."""
NO_OFFLOAD: OffloadOption = (0.0, "none", "none")
SEARCHED_ACTIVATION_FRACTIONS = (0.5, 1.0)
"""Activation offload fractions the space tries (half the layers' activations, or all:
Megatron-Core offloads whole layers, DeepSpeed every checkpoint)."""


class Slot(NamedTuple):
    """One (inner option, ZeRO stage, offload) of a block with the frameworks it is priced
    under."""

    inner: _Inner
    zero_stage: int
    frameworks: tuple[str, ...]
    offload: OffloadOption = NO_OFFLOAD


def offload_options(
    constraints: SearchConstraints,
    zero_stage: int,
    profiles: Sequence[FrameworkProfile],
    model: Any,
) -> list[OffloadOption]:
    """The offload variants a slot of `zero_stage` takes when the space includes offload
    (`constraints.offload.mode` `always`; the search asks for it when no plan fits without
    it): no offload first, then optimizer offload to each allowed device, with ZeRO-3 the
    parameters to the same device too, each without and with activation offload
    (`SEARCHED_ACTIVATION_FRACTIONS`), and activation offload alone; only those one of the
    slot's frameworks runs (`FrameworkProfile.offload_*`; the per-key rules, recompute and
    pipeline, are the cost model's)."""
    off = constraints.offload
    if not off.searched:
        return [NO_OFFLOAD]
    states: list[tuple[str, str]] = [("none", "none")]
    for device in off.devices:
        states.append((device, "none"))
        if zero_stage == 3:
            states.append((device, device))
    fractions = (0.0, *SEARCHED_ACTIVATION_FRACTIONS) if off.activations else (0.0,)
    out: list[OffloadOption] = []
    for opt, par in states:
        for f in fractions:
            if any(_runs_offload(p, model, zero_stage, f, opt, par) for p in profiles):
                out.append((f, opt, par))
    if NO_OFFLOAD not in out:
        out.insert(0, NO_OFFLOAD)
    return out


def _runs_offload(p: FrameworkProfile, model: Any, zero: int, f: float, opt: str, par: str) -> bool:
    """Whether the framework runs this offload for some recompute mode without pipelining
    (the rules that read the rest of the key are left to the cost model's check)."""
    if (f, opt, par) == NO_OFFLOAD:
        return True
    probe = PlanKey(
        zero_stage=zero, offload_activations=f, offload_optimizer=opt, offload_parameters=par
    )
    return any(
        not p.offload_violations(model, probe._replace(recompute=rc)) for rc in ("none", "full")
    )


class Block(NamedTuple):
    """The candidates of one degree tuple: `base` carries the degrees, sequence parallelism,
    the fixed split (or ()), flash attention and the context-parallel algorithm; every slot (inner option, ZeRO stage and
    its frameworks) times every recompute mode fills the rest, in `candidates()` order
    (slots outermost, recompute innermost). Slots no framework can run are left out."""

    base: PlanKey
    slots: list[Slot]
    recomputes: list[str]

    @property
    def size(self) -> int:
        return sum(len(slot.frameworks) for slot in self.slots) * len(self.recomputes)


_new_key = tuple.__new__
"""Builds a PlanKey from a ready tuple without NamedTuple's keyword-argument __new__ (the
search screens one key per candidate)."""


def block_keys(block: Block, slot: Slot) -> list[PlanKey]:
    """The block's keys for one slot, one per framework and recompute mode (the one place a
    key is built from positions: `PlanKey`'s field order)."""
    b, inner, zero = block.base, slot.inner, slot.zero_stage
    return [
        _new_key(
            PlanKey,
            (
                b.data,
                b.tensor,
                b.pipeline,
                inner.virtual_pipeline,
                b.context,
                b.expert,
                b.expert_tensor,
                b.sequence_parallel,
                inner.micro_batch_size,
                zero,
                recompute,
                inner.schedule,
                b.stage_layers,
                b.flash_attention,
                framework,
                b.context_parallel_algorithm,
                b.context_parallel_heads,
                b.vocab_parallel,
                *slot.offload,
            ),
        )
        for framework in slot.frameworks
        for recompute in block.recomputes
    ]


class _FrameworkChooser:
    """The frameworks a candidate is priced under: every profile that can run it. When none
    can, a requested framework list keeps its first so that the cost model's rule check
    reports why (the candidate is counted, not hidden); the default space leaves the
    combination out. Answers are cached per the fields the profiles' rules read
    (`FrameworkProfile.rule_fields`)."""

    _SLOT_FIELDS = ("virtual_pipeline", "pipeline_schedule", "zero_stage")

    def __init__(self, model: Any, profiles: tuple[FrameworkProfile, ...], requested: bool) -> None:
        self.model, self.profiles, self.requested = model, profiles, requested
        self.memo: dict[tuple[Any, ...], tuple[str, ...]] = {}
        read = set().union(*(p.rule_fields for p in profiles))
        base_fields = sorted(read - set(self._SLOT_FIELDS))
        # the base key's fields the rules read (a value, a tuple, or a constant when none)
        self.base_values = attrgetter(*base_fields) if base_fields else (lambda _key: ())
        self.reads_v, self.reads_schedule, self.reads_zero = (f in read for f in self._SLOT_FIELDS)

    def __call__(self, base: PlanKey, v: int, schedule: str, zero: int) -> tuple[str, ...]:
        memo_key = (
            v if self.reads_v else 0,
            schedule if self.reads_schedule else "",
            zero if self.reads_zero else 0,
            self.base_values(base),
        )
        hit = self.memo.get(memo_key)
        if hit is None:
            probe = base._replace(virtual_pipeline=v, pipeline_schedule=schedule, zero_stage=zero)
            able = [p.name for p in self.profiles if p.can_run(self.model, probe)]
            if not able and self.requested:
                able = [self.profiles[0].name]
            hit = self.memo[memo_key] = tuple(able)
        return hit


def candidate_blocks(problem: TrainingProblem, constraints: SearchConstraints) -> Iterator[Block]:
    """The space as one block per degree tuple (`candidates()` expands them; the search
    screens them block by block)."""
    fixed = validated_fixed(constraints)
    profiles, requested = framework_options(constraints)
    frameworks_of = _FrameworkChooser(problem.model, profiles, requested)
    cp_runnable = frozenset().union(*(p.context_parallel_algorithms for p in profiles))
    num_layers = problem.model.num_layers
    flash = fixed.get("flash_attention", True)
    stage_layers = fixed.get("stage_layers") or ()
    recomputes = _restrict(list(RECOMPUTE_OPTIONS), fixed, "recompute")
    zeros = _restrict(zero_stage_options(), fixed, "zero_stage")
    forks = constraints.research_forks or fixed.get("vocab_parallel") is True
    vocab_options = _restrict(
        vocab_parallel_options(problem.model) if forks else [False], fixed, "vocab_parallel"
    )
    by_name = {p.name: p for p in profiles}
    offloading = constraints.offload.searched
    offload_memo: dict[tuple[int, tuple[str, ...]], list[OffloadOption]] = {}

    def offloads_of(zero: int, able: tuple[str, ...]) -> list[OffloadOption]:
        hit = offload_memo.get((zero, able))
        if hit is None:
            chosen = [by_name[name] for name in able if name in by_name]
            hit = offload_memo[(zero, able)] = offload_options(
                constraints, zero, chosen, problem.model
            )
        return hit

    offloads = offloads_of if offloading else None
    for data, tensor, pipeline, context in degree_tuples(problem, constraints):
        sp = fixed.get("sequence_parallel", tensor > 1)
        if sp and tensor == 1:
            continue
        inners = [
            inner
            for inner in _inner_options(problem, constraints, fixed, data, pipeline)
            if _stage_layers_ok(fixed, pipeline, inner.virtual_pipeline, num_layers)
        ]
        cp_options = context_parallel_options(problem, fixed, tensor, context, cp_runnable)
        for (expert, expert_tensor), (algorithm, heads) in (
            (ex, cp)
            for ex in expert_degree_options(problem, constraints, data, tensor, context)
            for cp in cp_options
        ):
            base = PlanKey(
                data=data,
                tensor=tensor,
                pipeline=pipeline,
                context=context,
                expert=expert,
                expert_tensor=expert_tensor,
                sequence_parallel=sp,
                stage_layers=stage_layers,
                flash_attention=flash,
                context_parallel_algorithm=algorithm,
                context_parallel_heads=heads,
            )
            if False in vocab_options:
                yield Block(base, _slots(base, inners, zeros, frameworks_of, offloads), recomputes)
            if True in vocab_options and pipeline > 1:
                # never with offload (`rules.vocab_parallel_rules`)
                yield from _vocab_block(base, inners, zeros, recomputes, frameworks_of)


OffloadsOf = Callable[[int, tuple[str, ...]], list[OffloadOption]]
"""The offload options of a (ZeRO stage, frameworks) slot (`offload_options`)."""


def _slots(
    base: PlanKey,
    inners: list[_Inner],
    zeros: list[int],
    frameworks_of: _FrameworkChooser,
    offloads_of: OffloadsOf | None = None,
) -> list[Slot]:
    """Every (inner option, ZeRO stage, offload) of a block some framework runs, with those
    frameworks (which depend on the inner option's virtual pipeline and schedule only);
    without `offloads_of` (offload not searched) the one slot without offload."""
    runnable = {
        vs: [(z, able) for z in zeros if (able := frameworks_of(base, *vs, z))]
        for vs in {(i.virtual_pipeline, i.schedule) for i in inners}
    }
    if offloads_of is None:
        return [
            Slot(inner, zero, able)
            for inner in inners
            for zero, able in runnable[inner.virtual_pipeline, inner.schedule]
        ]
    return [
        Slot(inner, zero, able, offload)
        for inner in inners
        for zero, able in runnable[inner.virtual_pipeline, inner.schedule]
        for offload in offloads_of(zero, able)
    ]


def vocab_parallel_options(model: Any) -> list[bool]:
    """`vocab_parallel` values the space may enumerate: False always; True too for untied
    embeddings (`rules.vocab_parallel_rules`), on blocks with pipeline > 1, when the
    constraints search research forks (`SearchConstraints.research_forks`)."""
    return [False] if model.tie_embeddings else [False, True]


def _vocab_block(
    base: PlanKey,
    inners: list[_Inner],
    zeros: list[int],
    recomputes: list[str],
    frameworks_of: _FrameworkChooser,
) -> Iterator[Block]:
    """The vocabulary-parallel twin of a block (pipeline > 1): the schedules it runs with
    (`VOCAB_PARALLEL_SCHEDULES`) under the frameworks that run it; nothing when none do."""
    vocab = base._replace(vocab_parallel=True)
    inners = [inner for inner in inners if inner.schedule in VOCAB_PARALLEL_SCHEDULES]
    slots = _slots(vocab, inners, zeros, frameworks_of)
    if slots:
        yield Block(vocab, slots, recomputes)


def candidates(problem: TrainingProblem, constraints: SearchConstraints) -> Iterator[PlanKey]:
    """Every candidate of the declared space, in a deterministic order."""
    for blk in candidate_blocks(problem, constraints):
        for slot in blk.slots:
            yield from block_keys(blk, slot)


def count_candidates(problem: TrainingProblem, constraints: SearchConstraints) -> int:
    """Number of candidates `candidates()` yields, without building them (progress totals)."""
    return sum(blk.size for blk in candidate_blocks(problem, constraints))
