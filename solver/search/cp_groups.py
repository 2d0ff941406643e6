"""Screening a key's context-parallel algorithms as one queue entry (issue 15).

With context parallelism every candidate comes in up to five variants that differ only in
`context_parallel_algorithm` / `context_parallel_heads` (`solver.space`). Screening each
variant (rules, bound) costs as much as screening the candidate did before the algorithms
were searched, and most candidates never reach the top-k. The lazy driver
(`branch_and_bound._lazy`) therefore queues one *group* entry per candidate: its bound is
the cost model's `context_free_step_lower_bound_s` (a lower bound of every variant's step
time: `cost_models.analytical.training.bounds`), its key the smallest of its variants' keys.
When the group reaches the front of the queue it is expanded: every variant is checked,
memory-screened and queued with its own bound, as `steps.screen_light` would have done.

Why the search stays exact: a group leaves the queue unexpanded only when its bound, at most
each variant's step time, exceeds the k-th best time, or equals it and its key (at most each
variant's key) sorts after the k-th plan's: then so does every variant. Counts: a group
counts as many candidates as it has variants wherever the driver counts entries.

Only blocks without a fixed pipeline split are grouped (a fixed split has its own exact
bound), and only on cost models that offer `context_free_step_lower_bound_s`.

The split of a group (`refine_group`). Most variants that reach the front are dropped only
after their own partition solve: the split the memory limit forces is lumpier than the
balanced bound assumed (`steps`, `split_lower_bound_s`). On a cost model that also offers
`context_free_profile_key` (a profile whose partition program is, number for number, no
harder than any variant's: `cost_models.analytical.training.bounds.context_free_profile`),
a group reaching the front for the first time is split once on that profile instead: the
program's optimum T there is at most every variant's optimum, hence at most the busiest
rank's work of the split the search evaluates for it, so the group's bound becomes
`context_free_step_lower_bound_s` with max W ≥ T (and at least m·T). When that is larger
than the bound the group was queued with, the group goes back in the queue with it (as a
single candidate is re-queued after its split) and is expanded only if it reaches the
front again. The optimum is read from the solver's answer on rounded numbers
(`stage_partition`: 7 significant digits, half a unit of the last digit per number), so it
is taken with a relative slack `ROUNDING_SLACK` that covers the rounding both of this
profile and of the variant's. Only exact answers are used (`OPTIMAL`; a group whose split
would need the ILP is expanded as before). When the profile has no split (`INFEASIBLE`), no
variant has one (every split feasible for a variant is feasible for the profile): the group
is dropped, each variant counted under the rule it breaks (`check_key`, as `expand` counts
it) or else under `memory_bound` when the profile's memory lower bound already exceeds the
limit (each variant's is at least as large: `steps.refine` would count it there) and under
`memory` otherwise (a variant whose own memory bound exceeds the limit, which the driver
would have counted under `memory_bound`, is counted there too: only that reason differs).
When a group is expanded, every variant is queued with at least the group's bound (a lower
bound of each of them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from cost_models.base import TrainingCostModel, TrainingProblem
from solver.base import SearchStats, SolveStatus
from solver.formulations.stage_partition import PartitionSolver, memory_lower_bound_bytes
from solver.search.steps import BOUND_SAFETY, Monitor, screen_light
from solver.space import Block, block_keys
from specs.errors import InfeasiblePlan
from specs.plan import PlanKey

GroupEntry = tuple[float, PlanKey, bool | None, None, tuple[PlanKey, ...]]
"""(bound, smallest variant key, split already tried (None: not yet), -, the variants): the
queue's group form (length 5)."""

ROUNDING_SLACK = 1e-5
"""Relative slack on the group's split optimum (module docstring): the solver's rounding to
7 significant digits moves a sum of non-negative numbers by at most 5e-7 of it, once for
the group's profile and once for a variant's."""


def groups_capable(cost_model: TrainingCostModel) -> bool:
    """Whether the cost model bounds a key under every context-parallel algorithm."""
    return callable(getattr(cost_model, "context_free_step_lower_bound_s", None))


_CP = PlanKey._fields.index("context_parallel_algorithm")
"""Where the context-parallel algorithm sits in a key (the head degree follows it)."""


def splits_capable(cost_model: TrainingCostModel) -> bool:
    """Whether the cost model offers a context-free profile to split a group on."""
    return callable(getattr(cost_model, "context_free_profile_key", None))


def families_capable(cost_model: TrainingCostModel) -> bool:
    """Whether the cost model bounds a whole family of candidates (`FamilyEntry`)."""
    return callable(getattr(cost_model, "relaxed_step_lower_bound_s", None))


def screen_grouped(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    blocks: Iterable[Block],
    stats: SearchStats,
    monitor: Monitor,
    *,
    families: bool = False,
) -> list[Any]:
    """`steps.screen_light` with the context-parallel variants of each candidate of the
    blocks without a fixed split and with context > 1 folded into group entries (module
    docstring); the other blocks are screened as before. The memory group bound (states
    only: the same for every variant) prunes a whole group. With `families` (a cost model
    that `families_capable`) those blocks are queued as one family entry per degree tuple
    instead, grouped when the family reaches the front (`expand_family`)."""
    plain: list[Block] = []
    grouped: list[Block] = []
    for blk in blocks:
        if blk.base.context <= 1 or blk.base.stage_layers:
            plain.append(blk)
        else:
            grouped.append(blk)
    out: list[Any] = screen_light(problem, cost_model, plain, stats, monitor)
    if not families:
        out.extend(_group_entries(problem, cost_model, grouped, stats, monitor, 0.0))
        return out
    by_degrees: dict[PlanKey, list[Block]] = {}
    for blk in grouped:
        family = _family_key(blk.base)
        members = by_degrees.get(family)
        if members is None:
            by_degrees[family] = [blk]
        else:
            members.append(blk)
    for family, fam_blocks in by_degrees.items():
        entry = _family_entry(problem, cost_model, family, fam_blocks)
        if entry is not None:
            stats.enumerated += entry[2]
            out.append(entry)
    return out


FamilyEntry = tuple[float, PlanKey, int, None, None, tuple[Block, ...]]
"""(bound, the family's key, its candidates, -, -, its blocks): the queue's family form
(length 6). A family is every candidate of the grouped blocks of one degree tuple (data,
tensor, pipeline, context, expert, expert-tensor): every algorithm, micro-batch size,
virtual pipeline, schedule, ZeRO stage, offload, recompute mode, framework and vocabulary
layout. Its bound is the least of the cost model's `relaxed_step_lower_bound_s` over the
(micro-batch size, framework, vocabulary layout) its blocks hold, a lower bound of each
member's context-free bound and so of its step time; its key sorts before every member's
(virtual pipeline 0 where every member has at least 1) and differs from every other
family's (the degrees). So a family leaves the queue unexpanded only when every member
would have (the group argument of the module docstring, one level up), and when it is
expanded its groups are queued with at least its bound."""


def _family_key(base: PlanKey) -> PlanKey:
    """The key a family is queued under (`FamilyEntry`): its degrees, virtual pipeline 0."""
    return PlanKey(
        data=base.data,
        tensor=base.tensor,
        pipeline=base.pipeline,
        virtual_pipeline=0,
        context=base.context,
        expert=base.expert,
        expert_tensor=base.expert_tensor,
    )


def _family_entry(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    family: PlanKey,
    blocks: list[Block],
) -> FamilyEntry | None:
    """The family entry of `blocks` (one degree tuple), or None when they hold no
    candidate."""
    relaxed = cast(Any, cost_model).relaxed_step_lower_bound_s
    size = sum(blk.size for blk in blocks)
    if not size:
        return None
    probes: set[tuple[int, str, bool]] = set()
    for blk in blocks:
        vocab = blk.base.vocab_parallel
        for slot in blk.slots:
            mbs = slot.inner.micro_batch_size
            for framework in slot.frameworks:
                probes.add((mbs, framework, vocab))
    base = blocks[0].base
    bound = min(
        relaxed(
            problem,
            base._replace(micro_batch_size=mbs, framework=framework, vocab_parallel=vocab),
        )
        for mbs, framework, vocab in probes
    )
    return (bound * (1.0 - BOUND_SAFETY), family, size, None, None, tuple(blocks))


def expand_family(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    entry: FamilyEntry,
    stats: SearchStats,
    monitor: Monitor,
) -> list[Any]:
    """A family's group and single entries (`screen_grouped` without families), each
    queued with at least the family's bound; its candidates are already enumerated."""
    return _group_entries(problem, cost_model, entry[5], stats, monitor, entry[0], counted=True)


def _group_entries(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    blocks: Iterable[Block],
    stats: SearchStats,
    monitor: Monitor,
    floor: float,
    *,
    counted: bool = False,
) -> list[Any]:
    """The group entries of grouped blocks (module docstring), each bound at least
    `floor`; the candidates are added to `stats.enumerated` unless `counted`."""
    # variants keyed by their fields but the algorithm and head degree (`_CP`, `_CP + 1` in
    # `PlanKey`'s field order)
    grouped: dict[tuple[Any, ...], list[PlanKey]] = {}
    sizes = 0
    for blk in blocks:
        for slot in blk.slots:
            keys = block_keys(blk, slot)
            sizes += len(keys)
            for key in keys:
                prefix = key[:_CP] + key[_CP + 2 :]
                members = grouped.get(prefix)
                if members is None:
                    grouped[prefix] = [key]
                else:
                    members.append(key)
    out: list[Any] = []
    cm: Any = cost_model
    group_bound = cm.group_memory_lower_bound_bytes
    free_bound = cm.context_free_step_lower_bound_s
    usable = problem.usable_memory_bytes * (1.0 + BOUND_SAFETY)
    slack = 1.0 - BOUND_SAFETY
    fits: dict[tuple[Any, ...], bool] = {}
    memory_bound = 0
    for prefix, members in grouped.items():
        canon = PlanKey._make((*prefix[:_CP], "ring", 1, *prefix[_CP:]))
        memo = (
            canon.data,
            canon.tensor,
            canon.pipeline,
            canon.context,
            canon.expert,
            canon.expert_tensor,
            canon.zero_stage,
            canon.framework,
            canon.vocab_parallel,
            canon.offload_optimizer,
            canon.offload_parameters,
        )
        ok = fits.get(memo)
        if ok is None:
            try:
                ok = group_bound(problem, canon) <= usable
            except InfeasiblePlan:  # a rule the variants' check reports when expanded
                ok = True
            fits[memo] = ok
        if not ok:
            memory_bound += len(members)
            continue
        if len(members) == 1:
            out.append((max(free_bound(problem, members[0]) * slack, floor), members[0]))
            continue
        bound = max(free_bound(problem, canon) * slack, floor)
        out.append((bound, min(members), None, None, tuple(members)))
    if not counted:
        stats.enumerated += sizes
    if memory_bound:
        stats.add_pruned("memory_bound", memory_bound)
    monitor.done += memory_bound
    return out


def entry_size(entry: tuple[Any, ...]) -> int:
    """Candidates one queue entry stands for."""
    size = len(entry)
    if size == 6:
        return int(entry[2])
    return len(entry[4]) if size == 5 else 1


def refine_group(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    entry: GroupEntry,
    solver: PartitionSolver,
    stats: SearchStats,
    monitor: Monitor,
) -> tuple[str | None, float | None]:
    """(reason, bound) of the group after one partition solve on its context-free profile
    (module docstring): reason `memory_bound` or `memory` when no variant has a split
    (`drop`), else None with the group's bound, or None when there is none to give (no
    such profile, a rule the profile breaks, or only the ILP would answer). The solve is
    counted like the search's other partition solves."""
    cm: Any = cost_model
    canon = entry[4][0]._replace(context_parallel_algorithm="ring", context_parallel_heads=1)
    try:
        profile = cm.context_free_profile_key(problem, canon)
    except InfeasiblePlan:  # a rule: the variants' check reports it when expanded
        return None, None
    if profile is None:
        return None, None
    pp, v = canon.pipeline, canon.virtual_pipeline
    if memory_lower_bound_bytes(profile, pp, v) > profile.usable_bytes * (1.0 + BOUND_SAFETY):
        return "memory_bound", None
    res = solver.solve(
        profile,
        canon.pipeline,
        canon.virtual_pipeline,
        time_limit_s=max(0.05, min(10.0, monitor.remaining_s())),
        ilp=False,
    )
    if res.method == "skipped":
        return None, None
    if res.from_cache:
        stats.solver_cache_hits += 1
    else:
        stats.solver_calls += 1
    if res.status == SolveStatus.INFEASIBLE:
        return "memory", None
    if res.status != SolveStatus.OPTIMAL or res.max_rank_time_s is None:
        return None, None
    floor = res.max_rank_time_s * (1.0 - ROUNDING_SLACK)
    bound = max(
        cm.context_free_step_lower_bound_s(problem, canon, floor),
        profile.num_microbatches * floor,
    )
    return None, bound * (1.0 - BOUND_SAFETY)


def drop(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    entry: GroupEntry,
    reason: str,
    stats: SearchStats,
    monitor: Monitor,
) -> None:
    """Count the variants of a group no split fits (`refine_group`): a broken rule as
    `expand` counts it, else `reason`."""
    cm: Any = cost_model
    for key in entry[4]:
        violations = cm.check_key(problem, key)
        if violations:
            stats.rule_rejected += 1
            stats.add_pruned(f"rule:{violations[0].kind}")
        else:
            stats.add_pruned(reason)
        monitor.done += 1


def expand(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    entry: GroupEntry,
    stats: SearchStats,
    monitor: Monitor,
) -> list[tuple[float, PlanKey]]:
    """The group's variants that pass the rules, each with its own step-time bound or the
    group's when that is larger (rule rejections counted as `steps.screen_light` counts
    them)."""
    cm: Any = cost_model
    out: list[tuple[float, PlanKey]] = []
    slack = 1.0 - BOUND_SAFETY
    floor = entry[0]
    for key in entry[4]:
        violations = cm.check_key(problem, key)
        if violations:
            stats.rule_rejected += 1
            stats.add_pruned(f"rule:{violations[0].kind}")
            monitor.done += 1
            continue
        out.append((max(cm.step_time_lower_bound_s(problem, key) * slack, floor), key))
    return out
