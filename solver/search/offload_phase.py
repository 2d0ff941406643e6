"""Offload searched when memory binds (`constraints.offload.mode` `when_needed`).

The space without offload is searched first. When it is complete, holds no plan that fits
and memory pruned some of its candidates (not rules alone), the search runs again over the
space with offload variants (`solver.space.offload_options`: every candidate also with its
optimizer states, parameters and a fraction of its activations in host memory or on NVMe,
as its frameworks run them). Both
searches are exact over their spaces, so the answer is the exhaustive answer over "plans
without offload, or, if none fits, plans with offload": a search where some plan fits is
the search it was before offload existed (same plans, same work), and every plan of the
second search needs offload to fit (all plans without it were over the memory limit).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cost_models.base import TrainingCostModel, TrainingProblem
from solver.base import SearchResult
from specs.constraints import SearchConstraints

MEMORY_REASONS = ("memory_bound", "memory", "host_memory")
"""Prune reasons that mean "over the memory limit" (`SearchStats.pruned`)."""


def memory_pruned(pruned: dict[str, int]) -> bool:
    """Whether memory pruned any candidate (else offload cannot help: rules pruned them)."""
    return any(pruned.get(reason) for reason in MEMORY_REASONS)


def with_offload(constraints: SearchConstraints) -> SearchConstraints:
    """The constraints of the second search: offload variants in the space."""
    off = constraints.offload.model_copy(update={"mode": "always"})
    return constraints.model_copy(update={"offload": off})


def search_offload_when_needed(
    run: Callable[..., SearchResult],
    problem: TrainingProblem,
    cost_model: TrainingCostModel,
    constraints: SearchConstraints,
    **kwargs: Any,
) -> tuple[SearchResult, bool]:
    """`run(problem, cost_model, constraints, **kwargs)`, and when that finds nothing that
    fits (complete, no plan, memory pruned candidates) and `constraints.offload.mode` is
    `when_needed`, `run` again
    with offload in the space (module docstring). Returns (result, whether the second
    search ran)."""
    result = run(problem, cost_model, constraints, **kwargs)
    off = constraints.offload
    if result.plans or off.mode != "when_needed" or not result.stats.complete:
        return result, False
    if not memory_pruned(result.stats.pruned):  # every candidate broke a rule
        return result, False
    if not (off.devices or off.activations) or not problem.cluster.is_homogeneous:
        return result, False
    should_stop = kwargs.get("should_stop")
    if should_stop is not None and should_stop():
        return result, False
    return run(problem, cost_model, with_offload(constraints), **kwargs), True
