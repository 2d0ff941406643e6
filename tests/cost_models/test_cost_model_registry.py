"""Registry: registration, building with validated configs, errors."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict

from cost_models import (
    AnalyticalTrainingCostModel,
    build_cost_model,
    list_cost_models,
    load_entry_point_plugins,
    register_cost_model,
)
from cost_models import __all__ as public
from cost_models.registry import _REGISTRY
from specs.errors import PluginNotFound, SpecError


def test_public_api_pinned() -> None:
    assert sorted(public) == sorted(
        [
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
    )


def test_builtin_registered_and_config_applied() -> None:
    assert "analytical" in list_cost_models()
    cm = build_cost_model("analytical", {"attention_efficiency": 0.5})
    assert isinstance(cm, AnalyticalTrainingCostModel)
    assert cm.config.attention_efficiency == 0.5


def test_unknown_name_lists_known() -> None:
    with pytest.raises(PluginNotFound, match="analytical"):
        build_cost_model("nope")


def test_bad_config_names_the_field() -> None:
    with pytest.raises(SpecError) as exc:
        build_cost_model("analytical", {"attention_efficiency": 2.0})
    assert exc.value.field == "cost_model.config.attention_efficiency"
    with pytest.raises(SpecError) as exc:
        build_cost_model("analytical", {"no_such_option": 1})
    assert exc.value.field == "cost_model.config.no_such_option"


def test_duplicate_registration_raises() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_cost_model("analytical")(AnalyticalTrainingCostModel)


def test_register_and_build_a_plugin() -> None:
    class _Cfg(BaseModel):
        model_config = ConfigDict(extra="forbid")
        scale: float = 1.0

    @register_cost_model("test_dummy")
    class Dummy:
        Config = _Cfg

        def __init__(self, config: _Cfg) -> None:
            self.config = config

    try:
        built = build_cost_model("test_dummy", {"scale": 2})
        assert isinstance(built, Dummy) and built.config.scale == 2.0
        with pytest.raises(ValueError, match="Config"):
            register_cost_model("test_noconfig")(type("NoCfg", (), {}))
    finally:
        _REGISTRY.pop("test_dummy", None)


def test_entry_points_load_once() -> None:
    load_entry_point_plugins(allowlist=[])
    assert load_entry_point_plugins() == []
