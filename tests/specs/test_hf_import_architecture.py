"""Hugging Face import keeps the architecture fields without parameters, family by family:
RoPE base (with each configuration class's default when absent), rope scaling (`rope_type`
or the older `type`, and transformers 5's `rope_parameters`), norm ε, sliding window (Qwen's
only with `use_sliding_window`), QKV bias and query/key norm; what ModelSpec cannot hold is
refused naming the key, never dropped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specs.errors import SpecError
from specs.hf_import import model_from_hf_config
from specs.model import RopeScalingSpec
from specs.presets import get_preset

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def _fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


LLAMA31_SCALING = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
}


def _llama31_8b() -> dict[str, Any]:
    """meta-llama/Llama-3.1-8B config.json (architecture keys)."""
    return _fixture("llama3-8b") | {
        "max_position_embeddings": 131072,
        "rope_scaling": dict(LLAMA31_SCALING),
    }


# ---- Llama ------------------------------------------------------------------------------
def test_llama31_config_is_the_llama31_preset() -> None:
    spec = model_from_hf_config(_llama31_8b())
    assert spec.model_dump(exclude={"name"}) == get_preset("llama3.1-8b").model_dump(
        exclude={"name"}
    )
    assert spec.rope_scaling is not None and spec.rope_scaling.type == "llama3"


def test_older_type_key_and_missing_theta_take_the_config_class_defaults() -> None:
    config = _fixture("llama3-8b")
    del config["rope_theta"]  # Llama 2 configs predate the key: LlamaConfig's 10000
    config["rope_scaling"] = {"type": "linear", "factor": 2.0}
    spec = model_from_hf_config(config)
    assert spec.rope_theta == 10000.0
    assert spec.rope_scaling == RopeScalingSpec(type="linear", factor=2.0)


def test_default_rope_type_means_no_scaling() -> None:
    config = _fixture("llama3-8b") | {"rope_scaling": {"rope_type": "default"}}
    assert model_from_hf_config(config).rope_scaling is None


def test_transformers5_rope_parameters_carry_theta_and_scaling() -> None:
    config = _llama31_8b()
    params = {"rope_theta": config.pop("rope_theta"), **config.pop("rope_scaling")}
    spec = model_from_hf_config(config | {"rope_parameters": params})
    assert spec == model_from_hf_config(_llama31_8b())


def test_llama_qkv_bias_and_eps() -> None:
    config = _fixture("llama3-8b") | {"attention_bias": True, "rms_norm_eps": 1e-6}
    spec = model_from_hf_config(config)
    assert spec.attention_bias and spec.norm_epsilon == 1e-6
    assert spec.sliding_window is None  # LlamaConfig has no window


# ---- Mistral / Mixtral --------------------------------------------------------------------
def test_mistral_keeps_its_sliding_window() -> None:
    config = _fixture("llama3-8b") | {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "vocab_size": 32000,
        "rope_theta": 10000.0,
        "max_position_embeddings": 32768,
        "sliding_window": 4096,
    }
    spec = model_from_hf_config(config)
    assert spec.model_dump(exclude={"name"}) == get_preset("mistral-7b").model_dump(
        exclude={"name"}
    )
    assert model_from_hf_config(config | {"sliding_window": None}).sliding_window is None


def test_mixtral_without_theta_takes_mixtral_config_default() -> None:
    config = _fixture("mixtral-8x7b")
    del config["rope_theta"]
    assert model_from_hf_config(config).rope_theta == 1e6  # MixtralConfig(rope_theta=1e6)
    assert model_from_hf_config(config | {"sliding_window": 4096}).sliding_window == 4096


# ---- Qwen2 / Qwen3 --------------------------------------------------------------------------
def test_qwen_window_applies_only_with_use_sliding_window() -> None:
    config = _fixture("qwen2-57b-a14b")
    assert config["use_sliding_window"] is False and config["sliding_window"]
    assert model_from_hf_config(config).sliding_window is None
    every_layer = config | {"use_sliding_window": True, "max_window_layers": 0}
    assert model_from_hf_config(every_layer).sliding_window == config["sliding_window"]
    no_layer = config | {
        "use_sliding_window": True,
        "max_window_layers": config["num_hidden_layers"],
    }
    assert model_from_hf_config(no_layer).sliding_window is None
    with pytest.raises(SpecError) as err:
        model_from_hf_config(config | {"use_sliding_window": True, "max_window_layers": 21})
    assert err.value.field == "model.hf_config.max_window_layers"


def test_qwen2_always_biases_qkv_and_qwen3_normalises_qk() -> None:
    qwen2 = model_from_hf_config(_fixture("qwen2-57b-a14b"))
    assert qwen2.attention_bias and not qwen2.qk_norm and qwen2.norm_epsilon == 1e-6
    qwen3 = model_from_hf_config(_fixture("qwen3-235b-a22b"))
    assert qwen3.qk_norm and not qwen3.attention_bias
    assert qwen3.rope_theta == 1e6 and qwen3.max_position_embeddings == 40960


def test_qwen3_yarn_extension_is_kept() -> None:
    # Qwen3 model cards extend the 32768 context with YaRN factor 4
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    spec = model_from_hf_config(_fixture("qwen3-235b-a22b") | {"rope_scaling": yarn})
    assert spec.rope_scaling == RopeScalingSpec(
        type="yarn", factor=4.0, original_max_position_embeddings=32768
    )


# ---- DeepSeek ------------------------------------------------------------------------------
def test_deepseek_v3_yarn_block_is_kept_whole() -> None:
    config = _fixture("deepseek-v3")
    spec = model_from_hf_config(config)
    rs = spec.rope_scaling
    assert rs is not None and rs.type == "yarn"
    source = config["rope_scaling"]
    for key in ("factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim"):
        assert getattr(rs, key) == source[key]
    assert rs.original_max_position_embeddings == source["original_max_position_embeddings"]
    assert spec.norm_epsilon == config["rms_norm_eps"]


# ---- refusals -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("scaling", "field"),
    [
        ({"rope_type": "longrope", "factor": 2.0}, "model.hf_config.rope_scaling.rope_type"),
        (
            {"rope_type": "yarn", "factor": 4.0, "attention_factor": 0.8},
            "model.hf_config.rope_scaling.attention_factor",
        ),
        ({"rope_type": "linear"}, "model.hf_config.rope_scaling.factor"),
        ({"rope_type": "linear", "factor": -1}, "model.hf_config.rope_scaling.factor"),
        ({"rope_type": "llama3", "factor": 8.0}, "model.hf_config"),
        ("linear", "model.hf_config.rope_scaling"),
    ],
    ids=[
        "unsupported-type",
        "unmodelled-key",
        "no-factor",
        "bad-factor",
        "llama3-partial",
        "not-object",
    ],
)
def test_rope_scaling_the_spec_cannot_hold_is_refused(scaling: Any, field: str) -> None:
    with pytest.raises(SpecError) as err:
        model_from_hf_config(_fixture("llama3-8b") | {"rope_scaling": scaling})
    assert err.value.field == field


@pytest.mark.parametrize("key", ["rope_theta", "rms_norm_eps"])
def test_non_positive_theta_or_eps_is_refused(key: str) -> None:
    with pytest.raises(SpecError) as err:
        model_from_hf_config(_fixture("llama3-8b") | {key: 0})
    assert err.value.field == f"model.hf_config.{key}"
