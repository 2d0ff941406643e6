"""resolve_model: the three model-input forms and every way to get them wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from specs.errors import CatalogLookupError, SpecError, UnsupportedModelError
from specs.model_input import ModelInput, resolve_model
from specs.presets import get_preset

FIXTURES = Path(__file__).parent / "fixtures" / "hf"

_EXPLICIT: dict[str, Any] = {
    "name": "my-70b",
    "num_layers": 80,
    "hidden_size": 8192,
    "num_attention_heads": 64,
    "num_kv_heads": 8,
    "ffn_hidden_size": 28672,
    "vocab_size": 128256,
    "gated_mlp": True,
    "tie_embeddings": False,
    "moe": None,
}


def test_preset_form() -> None:
    assert resolve_model({"preset": "LLAMA3-70B"}) is get_preset("llama3-70b")


def test_hf_config_form() -> None:
    config = json.loads((FIXTURES / "deepseek-v3.json").read_text())
    spec = resolve_model({"hf_config": config})
    assert spec.num_parameters() == get_preset("deepseek-v3").num_parameters()


def test_explicit_form_is_the_api_example() -> None:
    spec = resolve_model(_EXPLICIT)
    # the API.md example is Llama-3-70B's shape: 70_553_706_496 parameters (test_model_params)
    assert spec.name == "my-70b"
    assert spec.num_parameters() == 70_553_706_496


def test_explicit_form_with_moe() -> None:
    spec = resolve_model(
        _EXPLICIT | {"moe": {"num_experts": 8, "top_k": 2, "expert_ffn_hidden_size": 28672}}
    )
    assert spec.moe is not None and spec.num_moe_layers == 80


def test_unknown_preset_is_422_with_close_matches() -> None:
    with pytest.raises(CatalogLookupError, match="did you mean") as info:
        resolve_model({"preset": "mixtral-8x7"})
    err = info.value
    assert err.status == 422
    assert "mixtral-8x7b" in err.extensions["close_matches"]
    assert err.extensions["errors"][0]["field"] == "model.preset"


def test_preset_and_hf_config_together_rejected() -> None:
    with pytest.raises(SpecError, match="exactly one of") as info:
        resolve_model({"preset": "llama3-8b", "hf_config": {}})
    assert info.value.field == "model"


def test_preset_with_extra_spec_fields_rejected() -> None:
    with pytest.raises(SpecError, match=r"found keys \['num_layers', 'preset'\]"):
        resolve_model({"preset": "llama3-8b", "num_layers": 4})


@pytest.mark.parametrize("value", [None, "llama3-8b", 42, ["preset"]])
def test_non_object_rejected(value: Any) -> None:
    with pytest.raises(SpecError, match="exactly one of") as info:
        resolve_model(value)
    assert info.value.status == 422


@pytest.mark.parametrize("name", [7, "", "   ", None])
def test_preset_must_be_a_name(name: Any) -> None:
    with pytest.raises(SpecError, match="non-empty preset name") as info:
        resolve_model({"preset": name})
    assert info.value.field == "model.preset"


def test_hf_config_must_be_an_object() -> None:
    with pytest.raises(SpecError, match="must be a JSON object") as info:
        resolve_model({"hf_config": "meta-llama/Meta-Llama-3-8B"})
    assert info.value.field == "model.hf_config"


def test_hf_config_unknown_architecture() -> None:
    with pytest.raises(UnsupportedModelError, match="FalconForCausalLM"):
        resolve_model({"hf_config": {"architectures": ["FalconForCausalLM"]}})


def test_explicit_field_error_is_prefixed_with_model() -> None:
    with pytest.raises(SpecError, match="greater than or equal to 1") as info:
        resolve_model(_EXPLICIT | {"num_layers": 0})
    err = info.value
    assert err.field == "model.num_layers"
    assert err.value == 0


def test_explicit_nested_field_error_path() -> None:
    with pytest.raises(SpecError) as info:
        resolve_model(_EXPLICIT | {"moe": {"num_experts": 8, "top_k": 2}})
    assert info.value.field == "model.moe.expert_ffn_hidden_size"
    assert info.value.rule == "Field required"


def test_explicit_cross_field_rule_message() -> None:
    with pytest.raises(
        SpecError, match=r"num_attention_heads \(64\) must be divisible by num_kv_heads \(7\)"
    ) as info:
        resolve_model(_EXPLICIT | {"num_kv_heads": 7})
    assert info.value.field == "model"


def test_explicit_reports_every_error() -> None:
    with pytest.raises(SpecError) as info:
        resolve_model(_EXPLICIT | {"num_layers": 0, "vocab_size": -1, "bogus": 1})
    fields = {e["field"] for e in info.value.extensions["errors"]}
    assert fields == {"model.num_layers", "model.vocab_size", "model.bogus"}


def test_model_input_type_has_schema_examples() -> None:
    schema = TypeAdapter(ModelInput).json_schema()
    forms = [option["$ref"].rsplit("/", 1)[-1] for option in schema["anyOf"]]
    assert forms == ["PresetModelInput", "HFConfigModelInput", "ModelSpec"]
    assert set(schema["$defs"]["ModelSpec"]["required"]) >= {"num_layers", "hidden_size"}
    assert schema["$defs"]["PresetModelInput"]["required"] == ["preset"]
    assert {"preset": "llama3-70b"} in schema["examples"]


def test_model_input_rejects_a_non_object_at_request_time() -> None:
    adapter = TypeAdapter(ModelInput)
    assert adapter.validate_python({"preset": "x"}) == {"preset": "x"}  # resolved later
    with pytest.raises(ValidationError, match="must be exactly one of"):
        adapter.validate_python(["llama3-8b"])
