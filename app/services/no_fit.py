"""What would make a training problem fit when no plan does: computed suggestions for the
`no-feasible-plan` problem (`suggestions`), each checked by a short exact search.

* `offload`: the best plan of the space with offload variants (`constraints.offload` mode
  `always`, CPU and NVMe, activations) under every built-in framework that offloads
  (Megatron-Core, DeepSpeed, torchtitan) besides the requested ones;
* `num_nodes`: the memory lower bound on the GPU count — the model states of mixed-precision
  Adam, 16 bytes per parameter (ZeRO, Rajbhandari et al. 2020 §3.1), are held once at least
  over all GPUs, so at least ⌈16·P / usable bytes per GPU⌉ GPUs are needed — rounded up to
  whole nodes, then the smallest node count from there (doubling) at which the search finds
  a plan without offload;
* `sequence_length`: the longest of the workload's sequence length halved (down to 128)
  at which the search finds a plan without offload; none is tried when the model states
  alone need more GPUs than the cluster has (`min_gpus_by_memory`: no length helps).

The checking searches share one budget (`SUGGESTIONS_BUDGET_S`, at most the search's own
time limit); a suggestion is null when no search found a plan within it.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from cost_models.base import TrainingCostModel, TrainingProblem
from solver.base import SearchResult
from specs.constraints import OffloadConstraints, SearchConstraints

MIXED_PRECISION_ADAM_BYTES_PER_PARAM = 16
"""bf16 weights (2) and gradients (2), fp32 master weights (4) and Adam moments (4 + 4):
ZeRO, Rajbhandari et al. 2020 (arXiv 1910.02054), §3.1 ("16Ψ bytes")."""
OFFLOAD_FRAMEWORKS = ("megatron_core", "deepspeed", "torchtitan")
"""The built-in frameworks that offload (`FrameworkProfile.offload_*`)."""
SUGGESTIONS_BUDGET_S = 20.0
"""Wall time all the checking searches of one answer share, seconds."""
NODE_TRIES = 4
"""Node counts tried from the memory lower bound (each double the last)."""
MIN_SEQUENCE_LENGTH = 128

Search = Callable[..., SearchResult]


def min_gpus_by_memory(problem: TrainingProblem) -> int:
    """⌈16·P / usable bytes per GPU⌉: no plan without offload fits on fewer GPUs."""
    usable = problem.usable_memory_bytes
    if usable <= 0:
        return 0
    states = problem.model.num_parameters() * MIXED_PRECISION_ADAM_BYTES_PER_PARAM
    return max(1, math.ceil(states / usable))


class Budget:
    """The wall time left to the checking searches."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.perf_counter() + seconds

    def left_s(self) -> float:
        return self.deadline - time.perf_counter()

    def constraints(
        self, constraints: SearchConstraints, **update: Any
    ) -> SearchConstraints | None:
        """`constraints` with the time left as the limit (None once it is spent)."""
        left = self.left_s()
        if left <= 0.05:
            return None
        return constraints.model_copy(update={"time_limit_s": left, **update})


def _plan_summary(result: SearchResult) -> dict[str, Any] | None:
    if not result.plans:
        return None
    est = result.plans[0].estimate
    return {
        "plan": est.plan.model_dump(mode="json"),
        "step_time_s": est.metrics.step_time_s,
        "offload_s": est.metrics.time_breakdown_s.offload,
        "peak_memory_gib": est.memory.peak_gib,
    }


def offload_suggestion(
    run: Search,
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    budget: Budget,
) -> dict[str, Any] | None:
    """The best plan with offload (module docstring), or None."""
    listed = list(constraints.frameworks or [])
    frameworks = listed + [f for f in OFFLOAD_FRAMEWORKS if f not in listed]
    fixed = {k: v for k, v in constraints.fixed.items() if k != "framework"}
    wider = budget.constraints(
        constraints,
        frameworks=frameworks,
        fixed=fixed,
        offload=OffloadConstraints(mode="always"),
    )
    if wider is None:
        return None
    found = _plan_summary(run(problem, cost_model, wider, top_k=1))
    if found is None:
        return None
    plan = found["plan"]
    return {
        "offload": plan.get("offload"),
        "framework": plan.get("framework"),
        "zero_stage": plan.get("zero_stage"),
        **found,
    }


def nodes_suggestion(
    run: Search,
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    budget: Budget,
) -> dict[str, Any] | None:
    """The node count that fits without offload, from the memory lower bound, or None."""
    cluster = problem.cluster
    if not cluster.is_homogeneous or len(cluster.groups) != 1:
        return None
    group = cluster.groups[0]
    least = min_gpus_by_memory(problem)
    first = max(group.num_nodes + 1, math.ceil(least / group.gpus_per_node))

    def trials() -> Iterator[tuple[dict[str, Any], TrainingProblem]]:
        for nodes in (first * 2**i for i in range(NODE_TRIES)):
            bigger = cluster.model_copy(
                update={"groups": [group.model_copy(update={"num_nodes": nodes})]}
            )
            yield (
                {"num_nodes": nodes, "min_gpus_by_memory": least},
                dataclasses.replace(problem, cluster=bigger),
            )

    return _first_fit(run, trials(), cost_model, constraints, budget)


def sequence_suggestion(
    run: Search,
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    budget: Budget,
) -> dict[str, Any] | None:
    """The longest halved sequence length that fits without offload, or None."""
    if min_gpus_by_memory(problem) > problem.num_gpus:
        return None  # the states alone do not fit: no sequence length helps

    def trials() -> Iterator[tuple[dict[str, Any], TrainingProblem]]:
        seq = problem.workload.sequence_length // 2
        while seq >= MIN_SEQUENCE_LENGTH:
            workload = problem.workload.model_copy(update={"sequence_length": seq})
            yield {"sequence_length": seq}, dataclasses.replace(problem, workload=workload)
            seq //= 2

    return _first_fit(run, trials(), cost_model, constraints, budget)


def _first_fit(
    run: Search,
    trials: Iterator[tuple[dict[str, Any], TrainingProblem]],
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    budget: Budget,
) -> dict[str, Any] | None:
    """The first trial problem on which a search without offload finds a plan: what the
    trial changes and that plan's summary; None when none does within the budget."""
    for change, trial in trials:
        quick = budget.constraints(constraints, offload=OffloadConstraints(mode="never"))
        if quick is None:
            return None
        found = _plan_summary(run(trial, cost_model, quick, top_k=1))
        if found is not None:
            return {**change, **found}
    return None


def suggestions(
    run: Search,
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
) -> dict[str, Any]:
    """Every suggestion (module docstring); only on a homogeneous cluster."""
    if not problem.cluster.is_homogeneous:
        return {"offload": None, "num_nodes": None, "sequence_length": None}
    budget = Budget(min(SUGGESTIONS_BUDGET_S, constraints.time_limit_s))
    return {
        "offload": offload_suggestion(run, problem, cost_model, constraints, budget),
        "num_nodes": nodes_suggestion(run, problem, cost_model, constraints, budget),
        "sequence_length": sequence_suggestion(run, problem, cost_model, constraints, budget),
    }
