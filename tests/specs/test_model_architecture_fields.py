"""ModelSpec's architecture fields without parameters (rope_theta, rope_scaling,
norm_epsilon, sliding_window): their ranges are 422s naming the field, they leave every
parameter count unchanged, and the presets carry their published values."""

from __future__ import annotations

import re
from typing import Any

import pytest

from specs.errors import SpecError
from specs.model import ModelSpec
from specs.model_input import resolve_model
from specs.presets import get_preset, list_presets, preset_info

BASE: dict[str, Any] = {
    "num_layers": 2,
    "hidden_size": 256,
    "num_attention_heads": 4,
    "ffn_hidden_size": 512,
    "vocab_size": 1000,
}


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"rope_theta": 0}, "model.rope_theta"),
        ({"norm_epsilon": 0}, "model.norm_epsilon"),
        ({"norm_epsilon": 1.5}, "model.norm_epsilon"),
        ({"sliding_window": 0}, "model.sliding_window"),
        ({"rope_scaling": {"type": "ntk", "factor": 2}}, "model.rope_scaling.type"),
        ({"rope_scaling": {"type": "linear", "factor": 0}}, "model.rope_scaling.factor"),
        ({"rope_scaling": {"type": "linear", "factor": 2, "beta_fast": 32}}, "model.rope_scaling"),
        ({"rope_scaling": {"type": "llama3", "factor": 8}}, "model.rope_scaling"),
        (
            {
                "rope_scaling": {
                    "type": "llama3",
                    "factor": 8,
                    "low_freq_factor": 4,
                    "high_freq_factor": 1,
                    "original_max_position_embeddings": 8192,
                }
            },
            "model.rope_scaling",
        ),
        (
            {"position_embedding": "learned", "max_position_embeddings": 64, "rope_theta": 1e4},
            "model",
        ),
    ],
    ids=[
        "theta",
        "eps-zero",
        "eps-big",
        "window",
        "type",
        "factor",
        "yarn-key-on-linear",
        "llama3-missing",
        "llama3-order",
        "rope-on-learned",
    ],
)
def test_out_of_range_fields_are_spec_errors_naming_the_field(
    fields: dict[str, Any], field: str
) -> None:
    with pytest.raises(SpecError) as err:
        resolve_model(BASE | fields)
    assert err.value.status == 422
    assert err.value.field == field


def test_the_fields_carry_no_parameters() -> None:
    plain = ModelSpec.model_validate(BASE)
    full = ModelSpec.model_validate(
        BASE
        | {
            "rope_theta": 5e5,
            "rope_scaling": {
                "type": "yarn",
                "factor": 4,
                "original_max_position_embeddings": 4096,
                "beta_fast": 32,
                "beta_slow": 1,
            },
            "norm_epsilon": 1e-6,
            "sliding_window": 128,
            "max_position_embeddings": 16384,
        }
    )
    assert full.num_parameters() == plain.num_parameters()
    assert plain.rope_base == 10000.0 and full.rope_base == 5e5


@pytest.mark.parametrize("name", list_presets())
def test_presets_name_the_source_of_their_architecture_fields(name: str) -> None:
    spec = get_preset(name)
    info = preset_info(name)
    if spec.position_embedding == "learned":  # GPT-3 style: positions are parameters
        assert spec.rope_theta is None and spec.rope_scaling is None
        assert spec.max_position_embeddings is not None
        return
    source = info["architecture_source"]
    # every value the preset holds is the one its source quotes
    for field, key in (
        ("rope_theta", "rope_theta"),
        ("norm_epsilon", "rms_norm_eps"),
        ("max_position_embeddings", "max_position_embeddings"),
        ("sliding_window", "sliding_window"),
    ):
        value = getattr(spec, field)
        quoted = re.search(rf"(?<![_a-z]){key} ([0-9][0-9.e+-]*|null)", source)
        if value is None:
            # a quoted window is off when the config turns it off (Qwen2)
            off = quoted is None or quoted.group(1) == "null"
            assert off or "use_sliding_window false" in source, (field, source)
        else:
            assert quoted is not None, (field, source)
            assert float(quoted.group(1).rstrip(".")) == value, (field, source)
    rs = spec.rope_scaling
    if rs is not None:
        assert f"{rs.type}" in source and f"factor {rs.factor:g}" in source.replace(".0,", ",")
