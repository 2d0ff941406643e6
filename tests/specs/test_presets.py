"""Built-in presets: lookup rules and parameter counts against the published figures."""

from __future__ import annotations

import json

import pytest

from specs.errors import CatalogLookupError
from specs.model import ModelSpec
from specs.presets import PRESETS_DIR, get_preset, list_presets, preset_info

REQUIRED = {
    "gpt3-175b",
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "llama3-8b",
    "llama3-70b",
    "llama3-405b",
    "mistral-7b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "qwen2-57b-a14b",
    "qwen3-235b-a22b",
    "deepseek-v3",
    "nemotron4-340b",
    "gpt-22b",
    "gpt-530b",
    "gpt-1t",
}


def test_list_presets_has_every_required_model_sorted() -> None:
    names = list_presets()
    assert REQUIRED <= set(names)
    assert names == sorted(names)
    assert len(names) == len(list(PRESETS_DIR.glob("*.json")))


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_preset_total_parameters_within_1pct_of_published(name: str) -> None:
    info = preset_info(name)
    published = info["published"]
    assert published["source"]
    assert info["num_parameters"] == pytest.approx(published["num_parameters"], rel=0.01)


MOE = ["mixtral-8x7b", "mixtral-8x22b", "qwen2-57b-a14b", "qwen3-235b-a22b", "deepseek-v3"]


@pytest.mark.parametrize("name", MOE)
def test_moe_preset_active_parameters_within_1pct_of_published(name: str) -> None:
    spec = get_preset(name)
    info = preset_info(name)
    published = info["published"]
    active = info["num_active_parameters"]
    assert active == spec.num_active_parameters()
    if published.get("active_excludes_input_embedding"):
        # DeepSeek counts activated parameters without the input-embedding lookup
        # (README_WEIGHTS.md: 36.6B "including 0.9B for the output Head")
        active -= spec.embedding_parameters()
    assert active == pytest.approx(published["num_active_parameters"], rel=0.01)


def test_published_headline_figures_from_the_brief() -> None:
    # The figures quoted in the task, checked directly (total, active) at 1%
    expected = {
        "gpt3-175b": (174.6e9, None),
        "llama2-7b": (6.74e9, None),
        "llama2-13b": (13.0e9, None),
        "llama2-70b": (68.98e9, None),
        "llama3-8b": (8.03e9, None),
        "llama3-70b": (70.55e9, None),
        "llama3-405b": (405.8e9, None),
        "mistral-7b": (7.24e9, None),
        "mixtral-8x7b": (46.7e9, 12.9e9),
        "mixtral-8x22b": (141e9, 39e9),
        "qwen2-57b-a14b": (57.4e9, 14.2e9),
        "qwen3-235b-a22b": (235e9, 22e9),
        "deepseek-v3": (671e9, None),
        "nemotron4-340b": (341e9, None),
    }
    for name, (total, active) in expected.items():
        spec = get_preset(name)
        assert spec.num_parameters() == pytest.approx(total, rel=0.01), name
        if active is not None:
            assert spec.num_active_parameters() == pytest.approx(active, rel=0.01), name


def test_deepseek_v3_active_count_vs_headline_37b() -> None:
    # With the input embedding (0.927 B) our count is 37.55 B, 1.5% above the paper's rounded
    # "37B"; without it, 36.63 B, which is the README's 36.6 B and rounds to 37 B.
    spec = get_preset("deepseek-v3")
    with_embedding = spec.num_active_parameters()
    assert spec.embedding_parameters() == 129280 * 7168 == 926_679_040
    assert round((with_embedding - spec.embedding_parameters()) / 1e9) == 37
    assert abs(with_embedding / 37e9 - 1) > 0.01


def test_get_preset_is_case_insensitive_and_knows_aliases() -> None:
    spec = get_preset("Llama3-70B")
    assert isinstance(spec, ModelSpec)
    assert spec is get_preset("llama3-70b")  # cached: loaded once
    assert get_preset("  LLAMA3.1-405B ") is get_preset("llama3-405b")
    assert get_preset("MT-NLG-530B").num_layers == 105


def test_unknown_preset_raises_catalog_error_with_close_matches() -> None:
    with pytest.raises(CatalogLookupError, match="llama3-70b") as info:
        get_preset("llama-3-70b")
    err = info.value
    assert err.status == 404
    assert "llama3-70b" in err.extensions["close_matches"]
    assert "deepseek-v3" in err.extensions["available"]


def test_unknown_preset_without_any_close_match() -> None:
    with pytest.raises(CatalogLookupError) as info:
        get_preset("zzzzzzzz")
    assert info.value.extensions["close_matches"] == []


def test_preset_info_dense_has_no_active_count() -> None:
    info = preset_info("llama3-70b")
    assert info["num_parameters"] == 70_553_706_496
    assert "num_active_parameters" not in info
    assert info["name"] == "llama3-70b"
    assert info["num_kv_heads"] == 8
    # the spec fields round-trip into a ModelSpec
    meta = {"num_parameters", "published", "aliases", "architecture_source"}
    spec_fields = {k: v for k, v in info.items() if k not in meta}
    assert ModelSpec.model_validate(spec_fields) == get_preset("llama3-70b")
    assert info["architecture_source"].startswith("config.json of meta-llama/Meta-Llama-3-70B")


def test_preset_info_moe_has_active_count() -> None:
    info = preset_info("mixtral-8x7b")
    # hand count (test_model_params style): per layer 41_943_040 attention + 8 experts ·
    # 176_160_768 + router 32_768 + norms 8_192 = 1_451_270_144; ·32 + 2·32000·4096 + 4096
    assert info["num_parameters"] == 1_451_270_144 * 32 + 262_144_000 + 4096
    # active: 2 experts → 394_305_536 per layer
    assert info["num_active_parameters"] == 394_305_536 * 32 + 262_144_000 + 4096


def test_every_preset_file_names_itself_and_has_a_source() -> None:
    for path in PRESETS_DIR.glob("*.json"):
        raw = json.loads(path.read_text())
        assert raw["name"] == path.stem
        assert set(raw["published"]) >= {"num_parameters", "source"}
        assert ("num_active_parameters" in raw["published"]) == (raw.get("moe") is not None)


def test_required_shapes_match_the_task() -> None:
    gpt3 = get_preset("gpt3-175b")
    assert (gpt3.num_layers, gpt3.hidden_size, gpt3.ffn_hidden_size, gpt3.vocab_size) == (
        96,
        12288,
        4 * 12288,
        50257,
    )
    assert gpt3.tie_embeddings and gpt3.dropout and not gpt3.gated_mlp
    nemotron = get_preset("nemotron4-340b")
    assert not nemotron.gated_mlp and nemotron.norm == "layernorm" and not nemotron.tie_embeddings
    deepseek = get_preset("deepseek-v3")
    assert deepseek.moe is not None and deepseek.moe.num_dense_layers == 3
    assert deepseek.num_moe_layers == 58
    qwen3 = get_preset("qwen3-235b-a22b")
    assert qwen3.qk_norm and qwen3.head_size == 128
