"""Exports faithful to the architecture (issue 14 point 4): for every preset, the exported
Megatron arguments carry the preset's RoPE base and scaling, norm ε, QKV bias, query/key norm,
positions and sliding window, each expected value computed from the preset spec (not written
down per model); architectures Megatron cannot express are refused naming the rule; the
serving and torchtitan exports pass the same fields as those tools spell them."""

from __future__ import annotations

import json
import math
import tomllib
from typing import Any

import pytest

from app.exports import export_plan
from app.exports import megatron as mg_export
from app.exports import torchtitan as tt_export
from app.exports.base import UnexpressiblePlan, parse_flags
from specs.model import ModelSpec, RopeScalingSpec
from specs.presets import get_preset, list_presets

PRESETS = list_presets()


def _cluster(nodes: int = 8) -> dict[str, Any]:
    from app.services import planning
    from specs.cluster import ClusterSpec

    spec = ClusterSpec.model_validate(
        {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": nodes, "gpus_per_node": 8}]}
    )
    return planning.resolve_cluster(spec).model_dump(mode="json")


def sequence_for(model: ModelSpec) -> int:
    """A training sequence the model takes: 4096, or its whole context when shorter."""
    return min(4096, model.max_position_embeddings or 4096)


def megatron_problem(model: ModelSpec, *, seq: int | None = None) -> tuple[dict, dict]:
    """A 64-GPU data-parallel training problem and plan row for `model`."""
    problem = {
        "model": model.model_dump(mode="json"),
        "cluster": _cluster(),
        "workload": {
            "kind": "training",
            "global_batch_size": 256,
            "sequence_length": seq or sequence_for(model),
            "precision": "bf16",
        },
    }
    row = {"id": "fidelity", "plan": {"parallelism": {"data": 64}, "micro_batch_size": 1}}
    return problem, row


def megatron_flags(model: ModelSpec, **kw: Any) -> dict[str, str | bool]:
    problem, row = megatron_problem(model, **kw)
    return parse_flags(export_plan(row, problem, "megatron").args, mg_export.SWITCHES)


def _close(text: str | bool | None, value: float) -> bool:
    return isinstance(text, str) and math.isclose(float(text), value, rel_tol=1e-12)


@pytest.mark.parametrize("name", PRESETS)
def test_megatron_args_carry_the_preset_architecture(name: str) -> None:
    model = get_preset(name)
    f = megatron_flags(model)
    seq = sequence_for(model)
    # positions
    if model.position_embedding == "learned":
        assert f["--position-embedding-type"] == "learned_absolute"
        assert int(str(f["--max-position-embeddings"])) == model.max_position_embeddings
        assert "--rotary-base" not in f and "--use-rope-scaling" not in f
    else:
        assert f["--position-embedding-type"] == "rope"
        # Megatron's default base is 10000: the base is written whatever it is
        assert _close(f["--rotary-base"], model.rope_theta or 10000.0)
        assert int(str(f["--max-position-embeddings"])) == max(
            seq, model.max_position_embeddings or 0
        )
    # rope scaling
    rs = model.rope_scaling
    if rs is not None and rs.type == "llama3":
        assert f["--use-rope-scaling"] is True
        assert _close(f["--rope-scaling-factor"], rs.factor)
    else:
        assert "--use-rope-scaling" not in f and "--rope-scaling-factor" not in f
    if model.mla is not None:
        assert f["--rope-type"] == ("yarn" if rs is not None else "rope")
        if rs is not None:
            assert _close(f["--rotary-scaling-factor"], rs.factor)
            assert _close(f["--mscale"], rs.mscale if rs.mscale is not None else 1.0)
            assert _close(f["--mscale-all-dim"], rs.mscale_all_dim or 0.0)
    else:
        assert "--rope-type" not in f and "--rotary-scaling-factor" not in f
    # norm
    if model.norm_epsilon is None:
        assert "--norm-epsilon" not in f  # Megatron's default 1e-5
    else:
        assert _close(f["--norm-epsilon"], model.norm_epsilon)
    assert f["--normalization"] == {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}[model.norm]
    # biases and query/key norm
    assert ("--add-qkv-bias" in f) == (model.attention_bias and not model.mlp_bias)
    assert ("--disable-bias-linear" in f) == (not model.mlp_bias)
    # MLA's query and key/value latent norms are Megatron's qk_layernorm too
    assert ("--qk-layernorm" in f) == (model.qk_norm or model.mla is not None)
    # sliding window: (left, right) = (W - 1, 0) keys around each query
    if model.sliding_window is None:
        assert "--window-size" not in f
    else:
        left, right = (int(x) for x in str(f["--window-size"]).split(","))
        assert (left + 1, right) == (model.sliding_window, 0)
    assert ("--untie-embeddings-and-output-weights" in f) == (not model.tie_embeddings)


def test_llama3_base_reaches_megatron_where_it_used_to_be_dropped() -> None:
    """The regression of issue 14: Llama 3 ran with Megatron's default base 10 000."""
    f = megatron_flags(get_preset("llama3.1-70b"))
    assert f["--rotary-base"] == "500000"
    assert f["--rope-scaling-factor"] == "8"
    assert f["--norm-epsilon"] == "1e-05"
    g = megatron_flags(get_preset("llama3-70b"))  # Llama 3: 8192 context, no scaling
    assert g["--rotary-base"] == "500000" and "--use-rope-scaling" not in g
    assert megatron_flags(get_preset("mistral-7b"))["--window-size"] == "4095,0"


def _variant(name: str, **fields: Any) -> ModelSpec:
    return get_preset(name).model_copy(update=fields)


def _refused(model: ModelSpec, **kw: Any) -> str:
    problem, row = megatron_problem(model, **kw)
    with pytest.raises(UnexpressiblePlan) as refused:
        export_plan(row, problem, "megatron")
    return refused.value.rule


@pytest.mark.parametrize(
    ("model", "rule"),
    [
        (
            _variant(
                "llama3-8b",
                rope_scaling=RopeScalingSpec(
                    type="yarn", factor=4, original_max_position_embeddings=8192
                ),
            ),
            "megatron.rope-scaling-type",
        ),
        (
            _variant("llama3-8b", rope_scaling=RopeScalingSpec(type="dynamic", factor=2)),
            "megatron.rope-scaling-type",
        ),
        (
            _variant(
                "llama3-8b",
                rope_scaling=RopeScalingSpec(
                    type="llama3",
                    factor=8,
                    low_freq_factor=1,
                    high_freq_factor=4,
                    original_max_position_embeddings=4096,
                ),
            ),
            "megatron.llama3-rope-scaling-fixed",
        ),
        (
            _variant("llama3-8b", rope_scaling=RopeScalingSpec(type="linear", factor=2.5)),
            "megatron.linear-rope-scaling-integer",
        ),
        (_variant("llama3-8b", rope_theta=12345.5), "megatron.rotary-base-integer"),
        (
            _variant(
                "deepseek-v3",
                rope_scaling=RopeScalingSpec(
                    type="yarn", factor=40, original_max_position_embeddings=8192
                ),
            ),
            "megatron.yarn-fixed-parameters",
        ),
        (
            _variant("deepseek-v3", rope_scaling=RopeScalingSpec(type="linear", factor=4)),
            "megatron.mla-rope-scaling",
        ),
    ],
    ids=["yarn-common", "dynamic", "llama3-context", "linear-fraction", "base", "yarn-ctx", "mla"],
)
def test_architectures_megatron_cannot_express_are_refused(model: ModelSpec, rule: str) -> None:
    assert _refused(model) == rule


def test_linear_scaling_is_megatrons_interpolation_factor() -> None:
    model = _variant("llama3-8b", rope_scaling=RopeScalingSpec(type="linear", factor=4))
    assert megatron_flags(model)["--rotary-seq-len-interpolation-factor"] == "4"


def test_learned_positions_must_cover_the_sequence() -> None:
    gpt = get_preset("gpt3-175b")
    assert gpt.max_position_embeddings is not None
    rule = _refused(gpt, seq=2 * gpt.max_position_embeddings)
    assert rule == "megatron.learned-positions-cover-sequence"


def test_checker_refuses_a_rope_type_common_attention_does_not_take() -> None:
    problem, row = megatron_problem(get_preset("llama3-8b"))
    args = export_plan(row, problem, "megatron").args
    with pytest.raises(UnexpressiblePlan) as refused:
        mg_export.check_args([*args, "--rope-type", "yarn"], world_size=64, env={})
    assert refused.value.rule == "megatron.rope-type-common-attention"


# ---- serving: the engines read the checkpoint's config.json ------------------------------
def serving_problem(model: ModelSpec, *, prompt: int = 1024, output: int = 256) -> tuple:
    """A one-instance colocated serving plan of 4 GPUs (4 divides every preset's heads)."""
    problem = {
        "model": model.model_dump(mode="json"),
        "cluster": _cluster(1),
        "workload": {
            "kind": "serving",
            "prompt_tokens": prompt,
            "output_tokens": output,
            "slo": {"ttft_ms": 1000, "tpot_ms": 50},
        },
    }
    instance = {
        "role": "both",
        "count": 1,
        "max_batch_size": 16,
        "parallelism": {"tensor": 4, "pipeline": 1, "expert": 1},
    }
    return problem, {"id": "fidelity", "plan": {"mode": "colocated", "instances": [instance]}}


def engine_context(model: ModelSpec, engine: str) -> int | None:
    """The context the engine derives from a config.json holding the model's fields, written
    out from the engines' rules (vLLM `_get_and_verify_max_len`: × factor unless llama3, yarn
    from its original context; SGLang `get_context_length`: × factor unless llama3 or an
    original context is named)."""
    if model.max_position_embeddings is None:
        return None
    rs = model.rope_scaling
    if rs is None or rs.type == "llama3":
        return model.max_position_embeddings
    if engine == "sglang":
        if rs.original_max_position_embeddings is not None:
            return model.max_position_embeddings
        return int(model.max_position_embeddings * rs.factor)
    base = rs.original_max_position_embeddings if rs.type == "yarn" else None
    return int((base or model.max_position_embeddings) * rs.factor)


SERVE_FLAGS = {
    "vllm": ("--max-model-len", "--hf-overrides"),
    "sglang": ("--context-length", "--json-model-override-args"),
}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("name", PRESETS)
def test_serving_exports_keep_within_the_models_context(name: str, engine: str) -> None:
    model = get_preset(name)
    context = engine_context(model, engine)
    length_flag, override_flag = SERVE_FLAGS[engine]
    problem, row = serving_problem(model)
    args = export_plan(row, problem, engine).args
    f = parse_flags(args, set())
    assert override_flag not in args  # a preset is its checkpoint: nothing to override
    assert context is None or int(str(f[length_flag])) <= context
    if context is None or context >= 131_072:
        return  # unknown, or beyond the longest workload accepted
    problem, row = serving_problem(model, prompt=context, output=256)
    with pytest.raises(UnexpressiblePlan) as refused:
        export_plan(row, problem, engine)
    assert (
        refused.value.rule
        == {"vllm": "vllm.max-model-len", "sglang": "sglang.context-length"}[engine]
    )


def test_a_model_differing_from_its_checkpoint_overrides_the_config_keys() -> None:
    """A spec named after a preset loads that preset's checkpoint: where it differs, the
    serving engines are told the Hugging Face keys, and trtllm-serve (no override) refuses."""
    model = _variant(
        "llama3-8b",
        rope_theta=1_000_000.0,
        max_position_embeddings=32768,
        rope_scaling=RopeScalingSpec(type="linear", factor=4),
    )
    expected = {
        "rope_theta": 1_000_000.0,
        "max_position_embeddings": 32768,
        "rope_scaling": {"rope_type": "linear", "factor": 4.0},
    }
    problem, row = serving_problem(model)
    for engine, flag in (("vllm", "--hf-overrides"), ("sglang", "--json-model-override-args")):
        args = export_plan(row, problem, engine).args
        assert json.loads(args[args.index(flag) + 1]) == expected
    with pytest.raises(UnexpressiblePlan) as refused:
        export_plan(row, problem, "trtllm")
    assert refused.value.rule == "trtllm.checkpoint-architecture"
    # a model without a public checkpoint (served from ${MODEL_PATH}) overrides nothing
    custom = model.model_copy(update={"name": "my-model"})
    problem, row = serving_problem(custom)
    assert "--hf-overrides" not in export_plan(row, problem, "vllm").args


# ---- torchtitan ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", PRESETS)
def test_torchtitan_runs_a_builtin_flavor_only_when_its_architecture_matches(name: str) -> None:
    model = get_preset(name)
    problem, row = megatron_problem(model)
    if model.sliding_window is not None:  # torchtitan has no sliding-window attention
        with pytest.raises(UnexpressiblePlan) as refused:
            export_plan(row, problem, "torchtitan")
        assert refused.value.rule == "torchtitan.sliding-window"
        return
    result = export_plan(row, problem, "torchtitan")
    section = tomllib.loads(result.content)["model"]
    args = tt_export.model_args(model, section["name"])
    assert args["rope_theta"] == (model.rope_theta or 10000.0)
    if model.norm_epsilon is not None:
        assert args["norm_eps"] == model.norm_epsilon
    rs = model.rope_scaling
    if section["name"] == "llama3":
        scaling = args["rope_scaling_args"]
        assert scaling["scaling_factor"] == (rs.factor if rs is not None else 1.0)
        if rs is not None:
            assert scaling["low_freq_factor"] == rs.low_freq_factor
            assert scaling["high_freq_factor"] == rs.high_freq_factor
            assert (
                scaling["original_max_position_embeddings"] == rs.original_max_position_embeddings
            )
    if section["name"] == "deepseek_v3" and rs is not None:
        assert args["rope_factor"] == rs.factor
        assert args["original_seq_len"] == rs.original_max_position_embeddings
    builtin = tt_export.TORCHTITAN_FLAVORS.get(name)
    matches = builtin is not None and tt_export.FLAVOR_ARGS[builtin] == args
    assert (section["flavor"] == (builtin[1] if builtin else None)) == matches
    if not matches:
        assert section["flavor"] == name
        assert any("register flavor" in note for note in result.notes)
    header = next(line for line in result.content.splitlines() if line.startswith("# model args"))
    assert f"rope_theta={args['rope_theta']!r}" in header
