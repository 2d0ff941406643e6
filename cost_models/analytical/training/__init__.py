"""The analytical training cost model, organised by concept (module docstring of `model`)."""

from cost_models.analytical.training.config import (
    DEFAULT_ATTENTION_EFFICIENCY,
    AnalyticalConfig,
    attention_efficiency,
    gemm_k_overhead_for,
)
from cost_models.analytical.training.model import AnalyticalTrainingCostModel
from cost_models.analytical.training.model_states import zero3_working_bytes

__all__ = [
    "DEFAULT_ATTENTION_EFFICIENCY",
    "AnalyticalConfig",
    "AnalyticalTrainingCostModel",
    "attention_efficiency",
    "gemm_k_overhead_for",
    "zero3_working_bytes",
]
