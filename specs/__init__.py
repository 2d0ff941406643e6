"""Pure, validated domain models shared by every layer (imports nothing of ours)."""

from specs.cluster import ClusterSpec, NodeGroupSpec
from specs.constraints import FIXABLE_FIELDS, Objective, SearchConstraints
from specs.errors import (
    CatalogLookupError,
    Conflict,
    InfeasiblePlan,
    NoFeasiblePlan,
    NotFound,
    PlannerError,
    PluginNotFound,
    SolverTimeout,
    SpecError,
    UnsupportedModelError,
)
from specs.model import MLASpec, ModelSpec, MoESpec
from specs.plan import (
    MemoryReport,
    ParallelDims,
    StageMemory,
    TimeBreakdown,
    TrainingMetrics,
    TrainingPlan,
    Violation,
    canonical_hash,
)
from specs.warnings import WARNING_CODES, PlanWarning
from specs.workload import Precision, TrainingWorkload, Workload

__all__ = [
    "CatalogLookupError",
    "ClusterSpec",
    "Conflict",
    "FIXABLE_FIELDS",
    "InfeasiblePlan",
    "MLASpec",
    "MemoryReport",
    "ModelSpec",
    "MoESpec",
    "NoFeasiblePlan",
    "NodeGroupSpec",
    "NotFound",
    "Objective",
    "ParallelDims",
    "PlanWarning",
    "PlannerError",
    "PluginNotFound",
    "Precision",
    "SearchConstraints",
    "SolverTimeout",
    "SpecError",
    "StageMemory",
    "TimeBreakdown",
    "TrainingMetrics",
    "TrainingPlan",
    "TrainingWorkload",
    "UnsupportedModelError",
    "Violation",
    "WARNING_CODES",
    "Workload",
    "canonical_hash",
]
