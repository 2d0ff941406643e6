"""The analytical training cost model and its sub-models (one concept per module)."""

from cost_models.analytical.training import AnalyticalConfig, AnalyticalTrainingCostModel

__all__ = ["AnalyticalConfig", "AnalyticalTrainingCostModel"]
