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
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cost_models.base import TrainingCostModel, TrainingProblem
from solver.base import SearchStats
from solver.search.steps import BOUND_SAFETY, Monitor, screen_light
from solver.space import Block, block_keys
from specs.errors import InfeasiblePlan
from specs.plan import PlanKey

GroupEntry = tuple[float, PlanKey, None, None, tuple[PlanKey, ...]]
"""(bound, smallest variant key, -, -, the variants): the queue's group form (length 5)."""


def groups_capable(cost_model: TrainingCostModel) -> bool:
    """Whether the cost model bounds a key under every context-parallel algorithm."""
    return callable(getattr(cost_model, "context_free_step_lower_bound_s", None))


_CP = PlanKey._fields.index("context_parallel_algorithm")
"""Where the context-parallel algorithm sits in a key (the head degree follows it)."""


def screen_grouped(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    blocks: Iterable[Block],
    stats: SearchStats,
    monitor: Monitor,
) -> list[Any]:
    """`steps.screen_light` with the context-parallel variants of each candidate of the
    blocks without a fixed split and with context > 1 folded into group entries (module
    docstring); the other blocks are screened as before. The memory group bound (states
    only: the same for every variant) prunes a whole group."""
    plain: list[Block] = []
    # variants keyed by their fields but the algorithm and head degree (`_CP`, `_CP + 1` in
    # `PlanKey`'s field order)
    grouped: dict[tuple[Any, ...], list[PlanKey]] = {}
    sizes = 0
    for blk in blocks:
        if blk.base.context <= 1 or blk.base.stage_layers:
            plain.append(blk)
            continue
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
    out: list[Any] = screen_light(problem, cost_model, plain, stats, monitor)
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
            out.append((free_bound(problem, members[0]) * slack, members[0]))
            continue
        out.append((free_bound(problem, canon) * slack, min(members), None, None, tuple(members)))
    stats.enumerated += sizes
    if memory_bound:
        stats.add_pruned("memory_bound", memory_bound)
    monitor.done += memory_bound
    return out


def entry_size(entry: tuple[Any, ...]) -> int:
    """Candidates one queue entry stands for."""
    return len(entry[4]) if len(entry) == 5 else 1


def expand(
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    entry: GroupEntry,
    stats: SearchStats,
    monitor: Monitor,
) -> list[tuple[float, PlanKey]]:
    """The group's variants that pass the rules, each with its own step-time bound (rule
    rejections counted as `steps.screen_light` counts them)."""
    cm: Any = cost_model
    out: list[tuple[float, PlanKey]] = []
    slack = 1.0 - BOUND_SAFETY
    for key in entry[4]:
        violations = cm.check_key(problem, key)
        if violations:
            stats.rule_rejected += 1
            stats.add_pruned(f"rule:{violations[0].kind}")
            monitor.done += 1
            continue
        out.append((cm.step_time_lower_bound_s(problem, key) * slack, key))
    return out
