"""Hugging Face config.json import: each family against its preset, and every error path."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from specs.errors import SpecError, UnsupportedModelError
from specs.hf_import import SUPPORTED_MODEL_TYPES, detect_model_type, model_from_hf_config
from specs.presets import get_preset

FIXTURES = Path(__file__).parent / "fixtures" / "hf"


def _fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


@pytest.mark.parametrize(
    "name", ["llama3-8b", "mixtral-8x7b", "qwen2-57b-a14b", "qwen3-235b-a22b", "deepseek-v3"]
)
def test_fixture_imports_to_the_preset_shape_and_count(name: str) -> None:
    config = _fixture(name)
    spec = model_from_hf_config(config)
    preset = get_preset(name)
    # the import keeps the architecture fields without parameters, as the preset does
    assert spec.max_position_embeddings == config["max_position_embeddings"]
    assert spec.rope_theta == config["rope_theta"]
    assert spec.norm_epsilon == config["rms_norm_eps"]
    assert spec.model_dump(exclude={"name"}) == preset.model_dump(exclude={"name"})
    assert spec.num_parameters() == preset.num_parameters()
    assert spec.num_active_parameters() == preset.num_active_parameters()


def test_name_comes_from_name_or_path() -> None:
    config = _fixture("llama3-8b") | {"_name_or_path": "meta-llama/Meta-Llama-3-8B"}
    assert model_from_hf_config(config).name == "meta-llama/Meta-Llama-3-8B"
    assert model_from_hf_config(_fixture("llama3-8b")).name == "llama"


def test_architectures_used_when_model_type_missing() -> None:
    config = _fixture("mixtral-8x7b")
    del config["model_type"]
    assert detect_model_type(config) == "mixtral"
    assert model_from_hf_config(config).moe is not None


def _mistral_7b_config() -> dict[str, Any]:
    return {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "sliding_window": 4096,
        "tie_word_embeddings": False,
        "rope_theta": 10000.0,
        "rms_norm_eps": 1e-05,
        "max_position_embeddings": 32768,
    }


def test_mistral_config_matches_mistral_7b_preset() -> None:
    spec = model_from_hf_config(_mistral_7b_config())
    assert spec.model_dump(exclude={"name"}) == get_preset("mistral-7b").model_dump(
        exclude={"name"}
    )
    assert spec.num_parameters() == 7_241_732_096


def test_llama2_70b_style_config_without_head_dim() -> None:
    config = _fixture("llama3-8b") | {
        "num_hidden_layers": 80,
        "hidden_size": 8192,
        "num_attention_heads": 64,
        "intermediate_size": 28672,
        "vocab_size": 32000,
    }
    assert (
        model_from_hf_config(config).num_parameters()
        == get_preset("llama2-70b").num_parameters()
        == 68_976_648_192
    )


def test_qwen2_dense_has_qkv_bias_and_tied_small_model() -> None:
    # Qwen2-0.5B shape: 24 layers, h 896, 14 heads, 2 KV heads, f 4864, V 151936, tied
    # per layer: Q 896·896 + KV 2·896·128 + O 896·896 = 1_835_008; QKV bias 896 + 256 = 1_152
    #            MLP 3·896·4864 = 13_074_432; norms 1_792                → 14_912_384
    # 24 layers = 357_897_216; embedding 151936·896 = 136_134_656 (tied); final norm 896
    # total = 494_032_768 (Qwen2 report: 0.49B)
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_attention_heads": 14,
        "num_hidden_layers": 24,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    }
    spec = model_from_hf_config(config)
    assert spec.attention_bias and spec.tie_embeddings
    assert spec.num_parameters() == 494_032_768


def test_qwen3_dense_head_dim_and_qk_norm() -> None:
    # Qwen3-8B shape: 36 layers, h 4096, 32 heads, 8 KV, head_dim 128, f 12288, V 151936, untied
    # per layer: attention 2·4096·4096 + 2·4096·1024 = 41_943_040, qk norm 256,
    #            MLP 3·4096·12288 = 150_994_944, norms 8_192        → 192_946_432
    # 36 layers = 6_946_071_552; embeddings 2·151936·4096 = 1_244_659_712; final norm 4096
    # total = 8_190_735_360 (model card: 8.2B)
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 4096,
        "head_dim": 128,
        "intermediate_size": 12288,
        "num_attention_heads": 32,
        "num_hidden_layers": 36,
        "num_key_value_heads": 8,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
        "attention_bias": False,
    }
    spec = model_from_hf_config(config)
    assert spec.qk_norm
    assert spec.num_parameters() == 8_190_735_360


def test_deepseek_v2_lite_matches_published_total_and_hand_count() -> None:
    # DeepSeek-V2-Lite (arXiv 2405.04434, App. B): 15.7B total, 2.4B activated; full-rank query.
    # Per layer, MLA: Q 2048·16·192 = 6_291_456; W_DKV+W_KR 2048·576 = 1_179_648; kv norm 512;
    #   W_UK+W_UV 512·16·256 = 2_097_152; O 16·128·2048 = 4_194_304          → 13_763_072
    # expert 3·2048·1408 = 8_650_752; router 2048·64 = 131_072; norms 4_096
    # active MoE layer: 13_763_072 + 131_072 + (6 routed + 2 shared)·8_650_752 + 4_096
    #   = 83_104_256, × 26 MoE layers = 2_160_710_656
    # dense layer 0: 13_763_072 + 3·2048·10944 + 4_096 = 81_007_104
    # head 102400·2048 = 209_715_200, final norm 2_048
    # activated without the input embedding = 2_451_435_008 (published, rounded: 2.4B)
    config = {
        "architectures": ["DeepseekV2ForCausalLM"],
        "model_type": "deepseek_v2",
        "hidden_size": 2048,
        "intermediate_size": 10944,
        "moe_intermediate_size": 1408,
        "num_hidden_layers": 27,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "n_shared_experts": 2,
        "n_routed_experts": 64,
        "num_experts_per_tok": 6,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "q_lora_rank": None,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "vocab_size": 102400,
        "tie_word_embeddings": False,
        "topk_method": "greedy",
    }
    spec = model_from_hf_config(config)
    assert spec.mla is not None and spec.mla.q_lora_rank is None
    assert spec.moe is not None and not spec.moe.router_bias
    assert spec.attention_parameters() == 13_763_072
    assert spec.num_parameters() == pytest.approx(15.7e9, rel=0.01)
    active = spec.num_active_parameters() - spec.embedding_parameters()
    assert active == 2_451_435_008


def test_unknown_architecture_is_422_naming_what_was_found() -> None:
    config = {
        "architectures": ["GPTNeoXForCausalLM"],
        "model_type": "gpt_neox",
        "hidden_size": 6144,
    }
    with pytest.raises(UnsupportedModelError, match="gpt_neox") as info:
        model_from_hf_config(config)
    err = info.value
    assert err.status == 422
    assert "GPTNeoXForCausalLM" in err.detail
    for model_type in SUPPORTED_MODEL_TYPES:
        assert model_type in err.detail
    assert err.extensions["model_type"] == "gpt_neox"
    assert "deepseek_v3" in err.extensions["supported_model_types"]


def test_config_without_type_or_architectures_is_unsupported() -> None:
    with pytest.raises(UnsupportedModelError, match="model_type=None"):
        model_from_hf_config({"hidden_size": 4096})


@pytest.mark.parametrize(
    ("key", "value", "rule"),
    [
        ("hidden_size", None, "is required"),
        ("num_hidden_layers", "32", "must be an integer"),
        ("vocab_size", 0, "must be >= 1"),
        ("num_attention_heads", True, "must be an integer"),
        ("tie_word_embeddings", "no", "must be a boolean"),
    ],
)
def test_missing_or_invalid_key_names_the_field(key: str, value: Any, rule: str) -> None:
    config = _fixture("llama3-8b")
    if value is None:
        del config[key]
    else:
        config[key] = value
    with pytest.raises(SpecError, match=rule) as info:
        model_from_hf_config(config)
    assert info.value.field == f"model.hf_config.{key}"
    assert info.value.status == 422


def test_mixtral_without_experts_key_is_a_spec_error() -> None:
    config = _fixture("mixtral-8x7b")
    del config["num_local_experts"]
    with pytest.raises(SpecError, match="is required") as info:
        model_from_hf_config(config)
    assert info.value.field == "model.hf_config.num_local_experts"


def test_top_k_above_experts_becomes_spec_error() -> None:
    config = _fixture("mixtral-8x7b") | {"num_experts_per_tok": 9}
    with pytest.raises(SpecError, match=r"top_k \(9\) must not exceed") as info:
        model_from_hf_config(config)
    assert info.value.field == "model.hf_config"


def test_kv_heads_not_dividing_heads_becomes_spec_error() -> None:
    config = _fixture("llama3-8b") | {"num_key_value_heads": 5}
    with pytest.raises(SpecError, match="divisible by num_kv_heads"):
        model_from_hf_config(config)


def test_qwen_mlp_only_layers_prefix_maps_to_dense_layers() -> None:
    config = _fixture("qwen3-235b-a22b") | {"mlp_only_layers": [0, 1]}
    spec = model_from_hf_config(config)
    assert spec.moe is not None and spec.moe.num_dense_layers == 2
    assert spec.num_moe_layers == 92


def test_qwen_mlp_only_layers_scattered_is_rejected() -> None:
    config = _fixture("qwen3-235b-a22b") | {"mlp_only_layers": [3, 10]}
    with pytest.raises(SpecError, match="prefix") as info:
        model_from_hf_config(config)
    assert info.value.field == "model.hf_config.mlp_only_layers"


def test_qwen_decoder_sparse_step_two() -> None:
    config = copy.deepcopy(_fixture("qwen2-57b-a14b")) | {"decoder_sparse_step": 2}
    spec = model_from_hf_config(config)
    # HF Qwen2-MoE: layer i is MoE iff (i + 1) % 2 == 0 → 14 of 28 layers, the rest dense
    assert spec.num_moe_layers == 14
    assert not spec.is_moe_layer(0) and spec.is_moe_layer(1)


def test_deepseek_moe_layer_freq_above_one_is_rejected() -> None:
    config = _fixture("deepseek-v3") | {"moe_layer_freq": 2}
    with pytest.raises(SpecError, match="only 1 is supported") as info:
        model_from_hf_config(config)
    assert info.value.field == "model.hf_config.moe_layer_freq"


def test_non_dict_config_is_spec_error() -> None:
    with pytest.raises(SpecError, match="must be a JSON object"):
        model_from_hf_config([1, 2])  # type: ignore[arg-type]
