"""Hugging Face `config.json` → `ModelSpec` for the decoder families meshplan knows.

Supported: Llama, Mistral, Mixtral, Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE, DeepSeek-V2 and
DeepSeek-V3, recognised by `model_type` (or, failing that, `architectures`). The key names and
their meaning follow the configuration classes of the `transformers` library
(`configuration_<family>.py`) and the reference modelling code of each family:

- Llama/Mistral: SwiGLU MLP, RMSNorm, RoPE, optional `attention_bias`/`mlp_bias` (Llama) and
  `head_dim` (when not hidden_size / num_attention_heads).
- Mixtral: every layer is MoE with `num_local_experts` experts of `intermediate_size`, top
  `num_experts_per_tok` (Jiang et al. 2024, arXiv 2401.04088, §2.1).
- Qwen2 / Qwen2-MoE: biases on the Q, K, V projections (Qwen2 report, arXiv 2407.10671, §2.2);
  MoE layers where `(layer + 1) % decoder_sparse_step == 0` and the layer is not in
  `mlp_only_layers`; one shared expert of `shared_expert_intermediate_size` with a sigmoid gate.
- Qwen3 / Qwen3-MoE: explicit `head_dim` and RMSNorm on queries and keys (Qwen3 report,
  arXiv 2505.09388, §2); no shared experts.
- DeepSeek-V2/V3: multi-head latent attention and DeepSeekMoE (arXiv 2405.04434 §2,
  arXiv 2412.19437 §2.1): the first `first_k_dense_replace` layers are dense, then MoE layers with
  `n_routed_experts` routed and `n_shared_experts` shared experts of `moe_intermediate_size`;
  V3's auxiliary-loss-free balancing (`topk_method: noaux_tc`) adds a per-expert routing bias.
  The multi-token-prediction module (`num_nextn_predict_layers`) is not part of the main model.

Architecture fields without parameters are kept too (transformers `modeling_rope_utils.py`
and the configuration classes):

- `rope_theta` (or transformers 5's `rope_parameters.rope_theta`); when absent, the family's
  configuration-class default: 1e6 for Mixtral (`MixtralConfig`), 10 000 for the others;
- `rope_scaling` (or `rope_parameters`) with `rope_type` (older configs: `type`) `linear`,
  `dynamic`, `llama3` or `yarn` and its factors; `default` means none; other types (longrope,
  mrope, …) and keys this service does not model are refused, not dropped;
- `rms_norm_eps` (or `layer_norm_epsilon`) → norm_epsilon; absent: unknown (null);
- `sliding_window` (Mistral, Mixtral); Qwen2/Qwen3 apply it only with `use_sliding_window`
  true, and then to layers `>= max_window_layers` (HF `Qwen2Attention`): a window on every
  layer (`max_window_layers` 0) is kept, one on only some layers is refused;
- QKV bias (`attention_bias`; Qwen2 always) and query/key norm (Qwen3).

Missing or invalid keys raise `SpecError(field="model.hf_config.<key>")`; an unknown family raises
`UnsupportedModelError` naming what was found and what is supported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ValidationError

from specs.errors import SpecError, UnsupportedModelError
from specs.model import MLASpec, ModelSpec, MoESpec, RopeScalingSpec

_FIELD = "model.hf_config"
_S = TypeVar("_S", ModelSpec, MoESpec, MLASpec, RopeScalingSpec)

# model_type → family; architectures → model_type (transformers' registered names)
_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
}
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(set(_ARCHITECTURES.values())))
"""`model_type` values `model_from_hf_config` accepts."""
SUPPORTED_ARCHITECTURES: tuple[str, ...] = tuple(sorted(_ARCHITECTURES))
"""`architectures` entries `model_from_hf_config` accepts."""


# ---- key readers ---------------------------------------------------------------------
def _bad(key: str, rule: str, value: Any) -> SpecError:
    return SpecError(field=f"{_FIELD}.{key}", rule=rule, value=value)


def _int(config: dict[str, Any], key: str, *, default: int | None = None, minimum: int = 1) -> int:
    """A required integer key (or `default` when absent or null)."""
    value = config.get(key)
    if value is None:
        if default is None:
            raise _bad(key, "is required", None)
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(key, "must be an integer", value)
    if value < minimum:
        raise _bad(key, f"must be >= {minimum}", value)
    return value


def _opt_int(config: dict[str, Any], key: str, *, minimum: int = 1) -> int | None:
    """An optional integer key: None when absent or null."""
    if config.get(key) is None:
        return None
    return _int(config, key, minimum=minimum)


def _float(config: dict[str, Any], key: str, *, field: str | None = None) -> float | None:
    """An optional positive number (None when absent or null)."""
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise _bad(field or key, "must be a positive number", value)
    return float(value)


def _bool(config: dict[str, Any], key: str, default: bool) -> bool:
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _bad(key, "must be a boolean", value)
    return value


# ---- family detection ----------------------------------------------------------------
def detect_model_type(config: dict[str, Any]) -> str:
    """The supported `model_type` of a config, from `model_type` or else `architectures`.

    Raises:
        UnsupportedModelError: neither names a supported family.
    """
    model_type = config.get("model_type")
    architectures = config.get("architectures")
    if isinstance(model_type, str) and model_type in SUPPORTED_MODEL_TYPES:
        return model_type
    if isinstance(architectures, list):
        for arch in architectures:
            if isinstance(arch, str) and arch in _ARCHITECTURES:
                return _ARCHITECTURES[arch]
    raise UnsupportedModelError(
        f"unsupported Hugging Face model: model_type={model_type!r}, "
        f"architectures={architectures!r}; supported model_type values: "
        f"{', '.join(SUPPORTED_MODEL_TYPES)} (architectures {', '.join(SUPPORTED_ARCHITECTURES)})",
        model_type=model_type,
        architectures=architectures,
        supported_model_types=list(SUPPORTED_MODEL_TYPES),
        supported_architectures=list(SUPPORTED_ARCHITECTURES),
    )


# ---- shared shape --------------------------------------------------------------------
def _name(config: dict[str, Any], model_type: str) -> str:
    for key in ("_name_or_path", "name_or_path"):
        value = config.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()[:200]
    return model_type


def _base_fields(config: dict[str, Any], model_type: str) -> dict[str, Any]:
    """Fields every supported family shares: layers, widths, heads, vocabulary, tying."""
    hidden = _int(config, "hidden_size")
    heads = _int(config, "num_attention_heads")
    kv_heads = _int(config, "num_key_value_heads", default=heads)
    head_dim = _opt_int(config, "head_dim")
    # a head_dim equal to the default is the default: keep one canonical spec per shape
    if head_dim is not None and hidden % heads == 0 and head_dim == hidden // heads:
        head_dim = None
    return {
        "name": _name(config, model_type),
        "num_layers": _int(config, "num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": None if kv_heads == heads else kv_heads,
        "head_dim": head_dim,
        "ffn_hidden_size": _int(config, "intermediate_size"),
        "vocab_size": _int(config, "vocab_size"),
        "gated_mlp": True,
        # every supported configuration class defaults tie_word_embeddings to False
        "tie_embeddings": _bool(config, "tie_word_embeddings", False),
        "norm": "rmsnorm",
        "position_embedding": "rope",
        # the context the model was trained for (warnings compare sequence lengths with it)
        "max_position_embeddings": _opt_int(config, "max_position_embeddings"),
        "norm_epsilon": _norm_epsilon(config),
        **_rope_fields(config, model_type),
    }


def _qwen_num_dense_layers(config: dict[str, Any], num_layers: int) -> int:
    """Qwen MoE: `mlp_only_layers` must be a prefix 0..k-1 with decoder_sparse_step 1 to map onto
    `num_dense_layers`; any other set of dense layers cannot be expressed by ModelSpec."""
    value = config.get("mlp_only_layers") or []
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in value
    ):
        raise _bad("mlp_only_layers", "must be a list of layer indices", value)
    if not value:
        return 0
    k = len(value)
    step = _int(config, "decoder_sparse_step", default=1)
    if sorted(value) != list(range(k)) or step != 1 or k > num_layers:
        raise _bad(
            "mlp_only_layers",
            "is supported only as a prefix [0, 1, …, k-1] of dense layers with "
            "decoder_sparse_step 1 (other dense-layer sets cannot be modelled)",
            value,
        )
    return k


# ---- rotary embedding, norm epsilon, sliding window -------------------------------------
_DEFAULT_ROPE_THETA: dict[str, float] = {"mixtral": 1e6}
"""`rope_theta` of a configuration class whose default is not 10 000 (`MixtralConfig`)."""

_ROPE_KEYS: dict[str, tuple[str, ...]] = {
    "linear": ("factor",),
    "dynamic": ("factor", "original_max_position_embeddings"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": (
        "factor",
        "original_max_position_embeddings",
        "beta_fast",
        "beta_slow",
        "mscale",
        "mscale_all_dim",
    ),
}
"""The keys of each supported `rope_scaling` type (transformers `_compute_*_parameters`)."""


def _rope_fields(config: dict[str, Any], model_type: str) -> dict[str, Any]:
    """`rope_theta` and `rope_scaling` from `rope_theta`/`rope_scaling` or transformers 5's
    `rope_parameters`."""
    params = config.get("rope_parameters")
    scaling_key = "rope_scaling"
    scaling: Any
    if isinstance(params, dict) and "rope_scaling" not in config:
        scaling, scaling_key = params, "rope_parameters"
        theta = _float(params, "rope_theta", field="rope_parameters.rope_theta")
    else:
        if params is not None and not isinstance(params, dict):
            raise _bad("rope_parameters", "must be an object", params)
        scaling = config.get("rope_scaling")
        theta = _float(config, "rope_theta")
    if theta is None:
        theta = _DEFAULT_ROPE_THETA.get(model_type, 10000.0)
    return {"rope_theta": theta, "rope_scaling": _rope_scaling(scaling, scaling_key)}


def _rope_scaling(value: Any, key: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _bad(key, "must be an object or null", value)
    kind = value.get("rope_type", value.get("type"))
    if kind in (None, "default"):
        return None
    if kind not in _ROPE_KEYS:
        raise _bad(
            f"{key}.rope_type",
            f"is not supported (supported: default, {', '.join(sorted(_ROPE_KEYS))})",
            kind,
        )
    allowed = {"rope_type", "type", "rope_theta", *_ROPE_KEYS[kind]}
    extra = sorted(k for k in value if k not in allowed)
    if extra:
        raise _bad(f"{key}.{extra[0]}", f"is not modelled for {kind} rope scaling", value[extra[0]])
    out: dict[str, Any] = {"type": kind}
    for name in _ROPE_KEYS[kind]:
        if name == "original_max_position_embeddings":
            number: float | int | None = value.get(name)
            if number is not None and (
                isinstance(number, bool) or not isinstance(number, int) or number < 1
            ):
                raise _bad(f"{key}.{name}", "must be an integer >= 1", number)
        else:
            number = _float(value, name, field=f"{key}.{name}")
        if number is not None:
            out[name] = number
    if "factor" not in out:
        raise _bad(f"{key}.factor", "is required", None)
    return out


def _norm_epsilon(config: dict[str, Any]) -> float | None:
    for key in ("rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps"):
        if config.get(key) is not None:
            return _float(config, key)
    return None


def _qwen_sliding_window(config: dict[str, Any], num_layers: int) -> int | None:
    """Qwen2/Qwen3: the window applies only with `use_sliding_window`, and then to the layers
    from `max_window_layers` on."""
    if not _bool(config, "use_sliding_window", False):
        return None
    window = _opt_int(config, "sliding_window")
    if window is None:
        return None
    first = _int(config, "max_window_layers", default=0, minimum=0)
    if first >= num_layers:
        return None  # no layer reaches the window
    if first:
        raise _bad(
            "max_window_layers",
            f"a sliding window on layers {first}..{num_layers - 1} only is not modelled "
            "(ModelSpec.sliding_window applies to every layer)",
            first,
        )
    return window


# ---- families ------------------------------------------------------------------------
def _llama(config: dict[str, Any], model_type: str) -> dict[str, Any]:
    fields = _base_fields(config, model_type)
    fields["attention_bias"] = _bool(config, "attention_bias", False)
    fields["mlp_bias"] = _bool(config, "mlp_bias", False)
    if model_type == "mistral":  # LlamaConfig has no window; MistralConfig's default is null
        fields["sliding_window"] = _opt_int(config, "sliding_window")
    return fields


def _mixtral(config: dict[str, Any], model_type: str) -> dict[str, Any]:
    fields = _base_fields(config, model_type)
    fields["sliding_window"] = _opt_int(config, "sliding_window")
    fields["moe"] = {
        "num_experts": _int(config, "num_local_experts", minimum=2),
        "top_k": _int(config, "num_experts_per_tok"),
        "expert_ffn_hidden_size": fields["ffn_hidden_size"],
    }
    return fields


def _qwen2(config: dict[str, Any], model_type: str) -> dict[str, Any]:
    fields = _base_fields(config, model_type)
    fields["attention_bias"] = True  # Qwen2 always biases Q, K and V (no config key)
    fields["sliding_window"] = _qwen_sliding_window(config, fields["num_layers"])
    return fields


def _qwen_moe(config: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any] | None:
    num_experts = _int(config, "num_experts", default=0, minimum=0)
    if num_experts == 0:
        return None
    moe: dict[str, Any] = {
        "num_experts": num_experts,
        "top_k": _int(config, "num_experts_per_tok"),
        "expert_ffn_hidden_size": _int(config, "moe_intermediate_size"),
        "layer_frequency": _int(config, "decoder_sparse_step", default=1),
        "num_dense_layers": _qwen_num_dense_layers(config, fields["num_layers"]),
    }
    return moe


def _qwen2_moe(config: dict[str, Any], model_type: str) -> dict[str, Any]:
    fields = _qwen2(config, model_type)
    moe = _qwen_moe(config, fields)
    if moe is not None:
        shared = _int(config, "shared_expert_intermediate_size", default=0, minimum=0)
        if shared:
            moe["num_shared_experts"] = 1
            moe["shared_expert_ffn_hidden_size"] = shared
            moe["shared_expert_gate"] = True
    fields["moe"] = moe
    return fields


def _qwen3(config: dict[str, Any], model_type: str) -> dict[str, Any]:
    fields = _base_fields(config, model_type)
    fields["attention_bias"] = _bool(config, "attention_bias", False)
    fields["qk_norm"] = True
    fields["sliding_window"] = _qwen_sliding_window(config, fields["num_layers"])
    return fields


def _qwen3_moe(config: dict[str, Any], model_type: str) -> dict[str, Any]:
    fields = _qwen3(config, model_type)
    fields["moe"] = _qwen_moe(config, fields)
    return fields


def _deepseek(config: dict[str, Any], model_type: str) -> dict[str, Any]:
    fields = _base_fields(config, model_type)
    fields["num_kv_heads"] = None  # MLA: every head has its own K/V from the shared latent
    # head_dim is unused with MLA, but ModelSpec needs a well-defined value
    fields["head_dim"] = (
        None
        if fields["hidden_size"] % fields["num_attention_heads"] == 0
        else _int(config, "v_head_dim")
    )
    fields["mla"] = {
        "q_lora_rank": _opt_int(config, "q_lora_rank"),
        "kv_lora_rank": _int(config, "kv_lora_rank"),
        "qk_nope_head_dim": _int(config, "qk_nope_head_dim"),
        "qk_rope_head_dim": _int(config, "qk_rope_head_dim"),
        "v_head_dim": _int(config, "v_head_dim"),
    }
    if _bool(config, "attention_bias", False):
        raise _bad("attention_bias", "is not supported with multi-head latent attention", True)
    n_routed = _int(config, "n_routed_experts", default=0, minimum=0)
    if n_routed == 0:
        return fields
    freq = _int(config, "moe_layer_freq", default=1)
    if freq != 1:
        # HF: MoE iff layer >= first_k_dense_replace and layer % moe_layer_freq == 0, a pattern
        # ModelSpec (dense prefix, then every freq-th) matches only for freq 1
        raise _bad("moe_layer_freq", "only 1 is supported (every layer after the dense ones)", freq)
    topk_method = config.get("topk_method")
    router_bias = topk_method == "noaux_tc" or (topk_method is None and model_type == "deepseek_v3")
    fields["moe"] = {
        "num_experts": n_routed,
        "top_k": _int(config, "num_experts_per_tok"),
        "expert_ffn_hidden_size": _int(config, "moe_intermediate_size"),
        "num_shared_experts": _int(config, "n_shared_experts", default=0, minimum=0),
        "num_dense_layers": _int(config, "first_k_dense_replace", default=0, minimum=0),
        "router_bias": router_bias,
    }
    return fields


_FAMILIES: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {
    "llama": _llama,
    "mistral": _llama,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen2_moe": _qwen2_moe,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
}


def model_from_hf_config(config: dict[str, Any]) -> ModelSpec:
    """Build the explicit ModelSpec from a Hugging Face `config.json` object.

    Args:
        config: the parsed `config.json`.

    Returns:
        The ModelSpec; its name is `_name_or_path` when present, else the model_type.

    Raises:
        UnsupportedModelError: an architecture outside SUPPORTED_MODEL_TYPES (422).
        SpecError: a missing or invalid key (field `model.hf_config.<key>`), or a shape the
            ModelSpec rules reject (field `model.hf_config`).
    """
    if not isinstance(config, dict):
        raise SpecError(field=_FIELD, rule="must be a JSON object", value=type(config).__name__)
    model_type = detect_model_type(config)
    fields = _FAMILIES[model_type](config, model_type)
    if fields.get("moe") is not None:
        fields["moe"] = _validated(MoESpec, fields["moe"])
    if fields.get("mla") is not None:
        fields["mla"] = _validated(MLASpec, fields["mla"])
    if fields.get("rope_scaling") is not None:
        fields["rope_scaling"] = _validated(RopeScalingSpec, fields["rope_scaling"])
    return _validated(ModelSpec, fields)


def _validated(cls: type[_S], fields: dict[str, Any]) -> _S:
    try:
        return cls.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        raise SpecError(
            field=_FIELD, rule=message, value=first.get("input"), message=f"{_FIELD}: {message}"
        ) from exc
