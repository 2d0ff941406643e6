"""Serving cost models (issue 5): per-iteration latency and KV capacity of an engine
instance. Built-ins register by explicit import below."""

from cost_models.serving.analytical import (
    AnalyticalInstanceCost,
    AnalyticalServingCostModel,
    ServingAnalyticalConfig,
    build_instance_cost,
    touched_experts,
)
from cost_models.serving.base import InstanceCost, IterationBatch, ServingCostModel
from cost_models.serving.registry import (
    build_serving_cost_model,
    list_serving_cost_models,
    register_serving_cost_model,
)

__all__ = [
    "AnalyticalInstanceCost",
    "AnalyticalServingCostModel",
    "InstanceCost",
    "IterationBatch",
    "ServingAnalyticalConfig",
    "ServingCostModel",
    "build_instance_cost",
    "build_serving_cost_model",
    "list_serving_cost_models",
    "register_serving_cost_model",
    "touched_experts",
]
