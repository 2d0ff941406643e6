"""Megatron-Core builds every preset from its exported `pretrain_gpt.py` arguments (optional:
needs torch on the CPU and megatron-core, the `exports-check` extra; skipped without them).

For each preset the exported flags are turned into Megatron-Core's `TransformerConfig` (or
`MLATransformerConfig`) the way Megatron-LM core_v0.16.1 `core_transformer_config_from_args`
does (every config field whose name matches an argument, `--swiglu` → gated SiLU,
`--group-query-attention` → num_query_groups, `--disable-bias-linear` → add_bias_linear
false, `--norm-epsilon` → layernorm_epsilon, the CLI's own defaults for flags not written),
so the config's real `__post_init__` validates it. Then `GPTModel` is built on the meta
device with the local (non-Transformer-Engine) layer spec and its parameters are counted
against the preset's `num_parameters()`, after Megatron's vocabulary padding
(`_vocab_size_with_padding`: up to a multiple of make_vocab_size_divisible_by × TP) and
counting the aux-loss-free routing bias, which Megatron keeps as a buffer (`expert_bias`)
where Hugging Face keeps a parameter (`e_score_correction_bias`). The rotary inverse
frequencies the model computes are checked against the Hugging Face formula for the
preset's rope_theta and rope_scaling, written out here independently.

GPU-only checks are answered as a GPU node with Transformer Engine would answer them: the
RoPE-fusion availability check (`apply_rope_fusion` is on by default on the command line)
sees a fused kernel, and the local attention (which refuses sliding windows that only
Transformer Engine's attention implements) is built with the window cleared after the
config holding it has been validated; the window has no parameters.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs torch (CPU build) from the exports-check extra")
pytest.importorskip(
    "megatron.core",
    reason="needs megatron-core from the exports-check extra (pip install -e '.[exports-check]')",
)

from app.exports import export_plan  # noqa: E402
from app.exports import megatron as mg_export  # noqa: E402
from app.exports.base import parse_flags  # noqa: E402
from specs.model import ModelSpec  # noqa: E402
from specs.presets import get_preset, list_presets  # noqa: E402
from tests.app.test_exports_fidelity import megatron_problem  # noqa: E402

pytestmark = [pytest.mark.exports_real, pytest.mark.filterwarnings("ignore")]


@pytest.fixture(scope="module")
def model_parallel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Megatron's model-parallel groups (tensor and pipeline size 1) on the process group
    there is: one CPU rank (gloo) made here, or the fake world another module set up (the
    exports_real DeepSpeed checks), which is left as it was found."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    created = not dist.is_initialized()
    if created:
        store = dist.FileStore(str(tmp_path_factory.mktemp("pg") / "store"), 1)
        dist.init_process_group("gloo", rank=0, world_size=1, store=store)
    if not parallel_state.model_parallel_is_initialized():
        # no extra gloo groups: a fake world has no gloo to build them with
        parallel_state.initialize_model_parallel(1, 1, create_gloo_process_groups=False)
    yield
    parallel_state.destroy_model_parallel()
    if created:
        dist.destroy_process_group()


@pytest.fixture
def as_on_gpu_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Transformer Engine's fused RoPE kernel is present (TransformerConfig.__post_init__
    raises "apply_rope_fusion is not available. Please install TE >= 1.4." without it) and
    CUDA streams can be opened (the all-to-all MoE dispatcher opens one when built), and the
    current CUDA device is where tables are computed (the CPU stands in for it)."""
    import torch
    from megatron.core.models.common.embeddings import rope_utils

    monkeypatch.setattr(rope_utils, "fused_apply_rotary_pos_emb", lambda *a, **k: None)

    class Stream:
        """`MoEAlltoAllTokenDispatcher` opens a CUDA stream for its device-to-host copies."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            del args, kwargs

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    # MLA's YaRN embedding computes its frequency tables on the current CUDA device
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    # with Transformer Engine installed, TELinear is a class (without it Megatron-Core puts
    # a MagicMock there, which MLA's isinstance check on its output projection cannot take)
    from megatron.core.transformer import multi_latent_attention

    if not isinstance(multi_latent_attention.TELinear, type):
        monkeypatch.setattr(multi_latent_attention, "TELinear", type("TELinear", (), {}))


def _int(f: dict[str, Any], name: str, default: int | None = None) -> int | None:
    value = f.get(name)
    return default if value is None else int(str(value))


def _float(f: dict[str, Any], name: str, default: float) -> float:
    value = f.get(name)
    return default if value is None else float(str(value))


def config_from_flags(f: dict[str, Any]) -> Any:
    """The Megatron-Core config `pretrain_gpt.py` would build from these flags."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import (
        MLATransformerConfig,
        TransformerConfig,
    )

    mla = bool(f.get("--multi-latent-attention"))
    kw: dict[str, Any] = {
        "num_layers": _int(f, "--num-layers"),
        "hidden_size": _int(f, "--hidden-size"),
        "ffn_hidden_size": _int(f, "--ffn-hidden-size"),
        "num_attention_heads": _int(f, "--num-attention-heads"),
        "num_query_groups": _int(f, "--num-query-groups")
        if f.get("--group-query-attention")
        else None,
        "kv_channels": _int(f, "--kv-channels"),
        "add_bias_linear": not f.get("--disable-bias-linear"),
        "add_qkv_bias": bool(f.get("--add-qkv-bias")),
        "qk_layernorm": bool(f.get("--qk-layernorm")),
        "normalization": str(f["--normalization"]),
        "layernorm_epsilon": _float(f, "--norm-epsilon", 1e-5),  # the CLI default
        "attention_dropout": _float(f, "--attention-dropout", 0.1),
        "hidden_dropout": _float(f, "--hidden-dropout", 0.1),
        "bf16": bool(f.get("--bf16")),
        "params_dtype": torch.bfloat16 if f.get("--bf16") else torch.float32,
        "apply_rope_fusion": True,  # `--no-rope-fusion` not written: the CLI default
        "use_cpu_initialization": True,
        "perform_initialization": False,
    }
    if f.get("--swiglu"):
        kw |= {"gated_linear_unit": True, "activation_func": F.silu}
    if "--window-size" in f:
        kw["window_size"] = tuple(int(x) for x in str(f["--window-size"]).split(","))
    if "--num-experts" in f:
        kw |= {
            "num_moe_experts": _int(f, "--num-experts"),
            "moe_router_topk": _int(f, "--moe-router-topk"),
            "moe_ffn_hidden_size": _int(f, "--moe-ffn-hidden-size"),
            "moe_shared_expert_intermediate_size": _int(f, "--moe-shared-expert-intermediate-size"),
            "moe_shared_expert_gate": bool(f.get("--moe-shared-expert-gate")),
            "moe_router_enable_expert_bias": bool(f.get("--moe-router-enable-expert-bias")),
            "moe_router_score_function": str(f.get("--moe-router-score-function", "softmax")),
            "moe_token_dispatcher_type": str(f["--moe-token-dispatcher-type"]),
            "moe_router_load_balancing_type": str(f["--moe-router-load-balancing-type"]),
        }
        if "--moe-layer-freq" in f:
            kw["moe_layer_freq"] = mg_export.expand_layer_pattern(str(f["--moe-layer-freq"]))
    if not mla:
        return TransformerConfig(**kw)
    kw |= {
        "multi_latent_attention": True,
        "q_lora_rank": _int(f, "--q-lora-rank"),
        "kv_lora_rank": _int(f, "--kv-lora-rank", 32),
        "qk_head_dim": _int(f, "--qk-head-dim", 128),
        "qk_pos_emb_head_dim": _int(f, "--qk-pos-emb-head-dim", 64),
        "v_head_dim": _int(f, "--v-head-dim", 128),
        "rotary_base": _int(f, "--rotary-base", 10000),
        "rotary_scaling_factor": _float(f, "--rotary-scaling-factor", 1.0),
        "mscale": _float(f, "--mscale", 1.0),
        "mscale_all_dim": _float(f, "--mscale-all-dim", 0.0),
    }
    if "--rope-type" in f:
        kw["rope_type"] = str(f["--rope-type"])
    return MLATransformerConfig(**kw)


def build_gpt_model(f: dict[str, Any], config: Any) -> Any:
    """`GPTModel` on the meta device, as pretrain_gpt.py's model provider builds it."""
    import dataclasses

    import torch
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import (
        get_gpt_decoder_block_spec,
        get_gpt_layer_local_spec,
    )

    # the local attention has no sliding window (Transformer Engine's has): no parameters
    build_config = dataclasses.replace(config, window_size=None) if config.window_size else config
    if build_config.num_moe_experts:
        # MoE: one spec per layer, dense or MoE by moe_layer_freq (gpt_builders.py)
        spec = get_gpt_decoder_block_spec(
            build_config, use_transformer_engine=False, normalization=build_config.normalization
        )
        layer_specs = list(spec.layer_specs)
    else:
        spec = get_gpt_layer_local_spec(
            qk_layernorm=build_config.qk_layernorm,
            multi_latent_attention=build_config.multi_latent_attention,
            normalization=build_config.normalization,
        )
        layer_specs = [spec]
    if build_config.multi_latent_attention:
        # MLA's core attention is Transformer Engine's (the local DotProductAttention takes
        # no separate key and value widths); it has no parameters: a stand-in takes its place
        for layer in layer_specs:
            layer.submodules.self_attention.submodules.core_attention = (
                TransformerEngineCoreAttention
            )
    tp = _int(f, "--tensor-model-parallel-size", 1) or 1
    vocab = padded_vocab(f, tp)
    with torch.device("meta"):
        return GPTModel(
            config=build_config,
            transformer_layer_spec=spec,
            vocab_size=vocab,
            max_sequence_length=_int(f, "--max-position-embeddings"),
            position_embedding_type=str(f["--position-embedding-type"]),
            rotary_base=_int(f, "--rotary-base", 10000),
            rope_scaling=bool(f.get("--use-rope-scaling")),
            rope_scaling_factor=_float(f, "--rope-scaling-factor", 8.0),
            seq_len_interpolation_factor=_int(f, "--rotary-seq-len-interpolation-factor"),
            share_embeddings_and_output_weights=not f.get("--untie-embeddings-and-output-weights"),
        )


class TransformerEngineCoreAttention(torch.nn.Module):
    """Stands in for `TEDotProductAttention` (softmax(QKᵀ)V over its arguments: no
    parameters) when building MLA layers off a GPU node."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self.init_kwargs = kwargs


def tokenizer_vocab(f: dict[str, Any], model: ModelSpec) -> int:
    """The tokenizer's vocabulary: NullTokenizer has --vocab-size plus an EOD token; for a
    Hugging Face tokenizer (not downloadable here) the checkpoint's config vocabulary."""
    if f["--tokenizer-type"] == "NullTokenizer":
        return int(str(f["--vocab-size"])) + 1
    return model.vocab_size


def padded_vocab(f: dict[str, Any], tp: int, vocab: int | None = None) -> int:
    """Megatron's `_vocab_size_with_padding`."""
    size = vocab if vocab is not None else int(f["_tokenizer_vocab"])
    multiple = int(str(f.get("--make-vocab-size-divisible-by", 128))) * tp
    return math.ceil(size / multiple) * multiple


def hf_inv_freq(model: ModelSpec, dim: int) -> list[float]:
    """Hugging Face's rotary inverse frequencies (transformers `modeling_rope_utils`:
    default, linear and llama3), from the spec alone."""
    base = model.rope_theta or 10000.0
    freqs = [1.0 / base ** (i / dim) for i in range(0, dim, 2)]
    rs = model.rope_scaling
    if rs is None:
        return freqs
    if rs.type == "linear":
        return [x / rs.factor for x in freqs]
    assert rs.type == "llama3"
    assert rs.low_freq_factor and rs.high_freq_factor and rs.original_max_position_embeddings
    old = rs.original_max_position_embeddings
    low_wavelen, high_wavelen = old / rs.low_freq_factor, old / rs.high_freq_factor
    out = []
    for x in freqs:
        wavelen = 2 * math.pi / x
        if wavelen < high_wavelen:
            out.append(x)
        elif wavelen > low_wavelen:
            out.append(x / rs.factor)
        else:
            smooth = (old / wavelen - rs.low_freq_factor) / (
                rs.high_freq_factor - rs.low_freq_factor
            )
            out.append((1 - smooth) * x / rs.factor + smooth * x)
    return out


@pytest.mark.parametrize("name", list_presets())
def test_megatron_core_builds_the_preset_from_the_exported_args(
    name: str, model_parallel: None, as_on_gpu_node: None
) -> None:
    model = get_preset(name)
    problem, row = megatron_problem(model)
    f: dict[str, Any] = dict(
        parse_flags(export_plan(row, problem, "megatron").args, mg_export.SWITCHES)
    )
    f["_tokenizer_vocab"] = tokenizer_vocab(f, model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = config_from_flags(f)
        gpt = build_gpt_model(f, config)

    # the architecture fields, as Megatron-Core holds them
    assert config.layernorm_epsilon == (model.norm_epsilon or 1e-5)
    assert config.add_qkv_bias == (model.attention_bias and not model.mlp_bias)
    assert config.add_bias_linear == model.mlp_bias
    assert config.qk_layernorm == (model.qk_norm or model.mla is not None)
    assert config.normalization == {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}[model.norm]
    if model.sliding_window is None:
        assert config.window_size is None
    else:  # Transformer Engine's (left, right): the query and W - 1 keys before it
        assert config.window_size == (model.sliding_window - 1, 0)
    if model.position_embedding == "learned":
        assert gpt.position_embedding_type == "learned_absolute"
        table = gpt.embedding.position_embeddings.weight
        assert table.shape[0] == model.max_position_embeddings
    elif model.mla is not None:
        rs = model.rope_scaling
        assert config.rotary_base == (model.rope_theta or 10000.0)
        assert config.rope_type == ("yarn" if rs is not None else "rope")
        if rs is not None:
            assert config.rotary_scaling_factor == rs.factor
            assert config.original_max_position_embeddings == rs.original_max_position_embeddings
            assert config.beta_fast == rs.beta_fast and config.beta_slow == rs.beta_slow
            assert config.mscale == rs.mscale and config.mscale_all_dim == rs.mscale_all_dim
            # HF DeepSeek-V3 attention: softmax scale q_head_dim^-1/2 · m², with the YaRN
            # temperature m = 0.1 · mscale_all_dim · ln(factor) + 1
            assert model.mla is not None
            m = 0.1 * (rs.mscale_all_dim or 0.0) * math.log(rs.factor) + 1.0
            q_head = model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
            attention = gpt.decoder.layers[0].self_attention
            assert attention.softmax_scale == pytest.approx(m * m / math.sqrt(q_head))
    else:
        assert gpt.rotary_base == (model.rope_theta or 10000.0)
        rotary = gpt.rotary_pos_emb
        inv_freq = rotary.inv_freq.tolist()  # built on the CPU (use_cpu_initialization)
        expected = hf_inv_freq(model, model.head_size)
        assert len(inv_freq) == len(expected)
        for got, want in zip(inv_freq, expected, strict=True):
            assert got == pytest.approx(want, rel=1e-5)
        positions = rotary.seq_len_interpolation_factor
        rs = model.rope_scaling
        assert positions == (rs.factor if rs is not None and rs.type == "linear" else None)

    # the parameter count: the preset's own, plus Megatron's padded vocabulary rows
    params = sum(p.numel() for p in gpt.parameters())
    params += sum(b.numel() for n, b in gpt.named_buffers() if n.endswith("expert_bias"))
    vocab_rows = padded_vocab(f, 1) - model.vocab_size
    extra = vocab_rows * model.hidden_size * (1 if model.tie_embeddings else 2)
    assert params == model.num_parameters() + extra


def test_without_the_base_megatron_would_run_other_frequencies(
    model_parallel: None, as_on_gpu_node: None
) -> None:
    """The check above can fail: the Llama 3.1 arguments without `--rotary-base` (the export
    before issue 14) build a model whose frequencies are not Llama 3.1's."""
    model = get_preset("llama3.1-8b")
    problem, row = megatron_problem(model)
    args = list(export_plan(row, problem, "megatron").args)
    i = args.index("--rotary-base")
    del args[i : i + 2]
    f: dict[str, Any] = dict(parse_flags(args, mg_export.SWITCHES))
    f["_tokenizer_vocab"] = tokenizer_vocab(f, model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpt = build_gpt_model(f, config_from_flags(f))
    assert gpt.rotary_base == 10000
    got = gpt.rotary_pos_emb.inv_freq.tolist()
    want = hf_inv_freq(model, model.head_size)
    assert got[1] != pytest.approx(want[1], rel=1e-3)


def test_megatron_core_takes_the_exported_offload_flags(as_on_gpu_node: None) -> None:
    """The offload flags build Megatron-Core's own configs: `OptimizerConfig` with the CPU
    optimizer over the whole shard, `TransformerConfig` with `cpu_offloading` of half the
    layers (its `__post_init__` checks the layer count, pipelining and recompute), and the
    rules the exporter shares with the search are Megatron-Core's: offloading every layer,
    or offloading with recompute, is refused by Megatron-Core too."""
    import dataclasses

    from megatron.core.optimizer.optimizer_config import OptimizerConfig

    model = get_preset("llama3-8b")
    problem, row = megatron_problem(model)
    row = {
        **row,
        "plan": {
            **row["plan"],
            "zero_stage": 1,
            "framework": "megatron_core",
            "offload": {"optimizer": "cpu", "activations": 0.5},
        },
    }
    f: dict[str, Any] = dict(
        parse_flags(export_plan(row, problem, "megatron").args, mg_export.SWITCHES)
    )
    assert f["--use-distributed-optimizer"] is True
    opt = OptimizerConfig(
        optimizer="adam",
        use_distributed_optimizer=True,
        optimizer_cpu_offload=bool(f["--optimizer-cpu-offload"]),
        optimizer_offload_fraction=float(str(f["--optimizer-offload-fraction"])),
    )
    assert opt.optimizer_cpu_offload and opt.optimizer_offload_fraction == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = config_from_flags(f)
        layers = int(str(f["--cpu-offloading-num-layers"]))
        assert layers == model.num_layers // 2
        offloaded = dataclasses.replace(
            config, cpu_offloading=bool(f["--cpu-offloading"]), cpu_offloading_num_layers=layers
        )
        assert offloaded.cpu_offloading_num_layers == 16
        with pytest.raises(ValueError, match="only for layers less than"):
            dataclasses.replace(config, cpu_offloading=True, cpu_offloading_num_layers=32)
        with pytest.raises(ValueError, match="recomputation"):
            dataclasses.replace(
                config,
                cpu_offloading=True,
                cpu_offloading_num_layers=16,
                recompute_granularity="full",
                recompute_method="uniform",
                recompute_num_layers=1,
            )
