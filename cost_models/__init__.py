"""Plug-in cost models. Built-ins register by explicit import below; third-party models
through the `meshplan.cost_models` entry points (`load_entry_point_plugins`)."""

from cost_models import calibrated as calibrated  # registers "calibrated"
from cost_models.analytical import AnalyticalConfig, AnalyticalTrainingCostModel
from cost_models.base import LayerProfile, TrainingCostModel, TrainingEstimate, TrainingProblem
from cost_models.registry import (
    build_cost_model,
    list_cost_models,
    load_entry_point_plugins,
    register_cost_model,
)

__all__ = [
    "AnalyticalConfig",
    "AnalyticalTrainingCostModel",
    "LayerProfile",
    "TrainingCostModel",
    "TrainingEstimate",
    "TrainingProblem",
    "build_cost_model",
    "list_cost_models",
    "load_entry_point_plugins",
    "register_cost_model",
]
