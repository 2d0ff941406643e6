"""Plan search: the candidate space, bounds, the pipeline partition program, ranked and
explained results."""

from solver.base import PartitionResult, RankedPlan, SearchResult, SearchStats, SolveStatus
from solver.estimate import estimate_plan
from solver.explain import explain
from solver.search.branch_and_bound import search
from solver.search.exhaustive import exhaustive_search
from solver.search.mixed import mixed_search

__all__ = [
    "PartitionResult",
    "RankedPlan",
    "SearchResult",
    "SearchStats",
    "SolveStatus",
    "estimate_plan",
    "exhaustive_search",
    "explain",
    "mixed_search",
    "search",
]
