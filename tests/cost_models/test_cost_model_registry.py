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


def test_entry_points_load_once_each_and_a_wider_allowlist_loads_more(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two installed plug-ins (a distribution on the path): each call loads the allowed
    ones no earlier call loaded, so a process that first loaded with an empty allow-list (a
    Ray worker's warm-up for another service) still loads its task's plug-in."""
    import importlib

    from cost_models import registry

    (tmp_path / "meshplan_registry_test_plugin.py").write_text(
        "from cost_models import AnalyticalTrainingCostModel\n"
        "class One(AnalyticalTrainingCostModel):\n    name = 'registry_test_one'\n"
        "class Two(AnalyticalTrainingCostModel):\n    name = 'registry_test_two'\n"
    )
    dist = tmp_path / "meshplan_registry_test_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mrtp\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[meshplan.cost_models]\n"
        "registry_test_one = meshplan_registry_test_plugin:One\n"
        "registry_test_two = meshplan_registry_test_plugin:Two\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    monkeypatch.setattr(registry, "_ENTRY_POINTS_LOADED", False)
    monkeypatch.setattr(registry, "_ENTRY_POINTS_SCANNED", False)
    monkeypatch.setattr(registry, "_ENTRY_POINTS_ASKED", set())
    monkeypatch.setattr(registry, "_ENTRY_POINTS_TRIED", set())
    try:
        assert load_entry_point_plugins(allowlist=[]) == []
        assert "registry_test_one" not in list_cost_models()
        assert load_entry_point_plugins(allowlist=["registry_test_one"]) == ["registry_test_one"]
        assert load_entry_point_plugins(allowlist=["registry_test_one"]) == []  # once
        assert build_cost_model("registry_test_one").name == "registry_test_one"
        assert "registry_test_two" not in list_cost_models()
        assert load_entry_point_plugins() == ["registry_test_two"]  # all: the one left
        assert load_entry_point_plugins() == []
    finally:
        _REGISTRY.pop("registry_test_one", None)
        _REGISTRY.pop("registry_test_two", None)
