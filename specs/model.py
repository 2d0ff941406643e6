"""Model architecture specs (dense and MoE transformers) and their parameter counts.

Parameter counts follow the layer anatomy in `docs/reference/cost_formulas.md`:
attention `h·a·d + 2·h·g·d + a·d·h` (+ biases), gated MLP `3·h·f` or plain `2·h·f`,
MoE router `h·E` plus `E` experts and the shared experts, norms `2h` (RMSNorm: h per norm)
or `4h` (LayerNorm: weight and bias), embedding `V·h` and an untied LM head `V·h`.
DeepSeek-V3 multi-head latent attention follows DeepSeek-AI 2024 (arXiv 2412.19437, §2.1.1);
its auxiliary-loss-free balancing bias (§2.1.2) adds E router parameters per MoE layer. Qwen3's
query/key RMSNorm (Qwen3 report, arXiv 2505.09388, §2) adds 2·head_dim per layer.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from specs._base import Spec


class MLASpec(Spec):
    """Multi-head latent attention (DeepSeek-V2/V3)."""

    q_lora_rank: int | None = Field(default=None, gt=0)
    """Rank of the query down-projection; null means a full-rank query projection."""
    kv_lora_rank: int = Field(gt=0)
    """Rank of the joint key/value compression (the cached latent)."""
    qk_nope_head_dim: int = Field(gt=0)
    """Per-head query/key dimension without rotary embedding."""
    qk_rope_head_dim: int = Field(gt=0)
    """Per-head query/key dimension carrying rotary embedding (key part shared by heads)."""
    v_head_dim: int = Field(gt=0)
    """Per-head value dimension."""


class RopeScalingSpec(Spec):
    """A rotary-embedding frequency scaling for contexts longer than the model was pretrained
    for, as a Hugging Face config's `rope_scaling` block spells it (transformers
    `modeling_rope_utils.py`, `ROPE_INIT_FUNCTIONS`):

    - `linear`: position interpolation, every inverse frequency divided by `factor`
      (Chen et al. 2023, arXiv 2306.15595);
    - `dynamic`: NTK-aware scaling of the base as the sequence outgrows the original context;
    - `llama3`: wavelengths above `original_max_position_embeddings / low_freq_factor` are
      divided by `factor`, below `original_max_position_embeddings / high_freq_factor` kept,
      smoothly interpolated between (Llama 3.1, arXiv 2407.21783 and Meta's reference code);
    - `yarn`: NTK-by-parts interpolation with ramp bounds `beta_fast`/`beta_slow` and the
      attention temperature `mscale`/`mscale_all_dim` (Peng et al. 2023, arXiv 2309.00071;
      DeepSeek-V2/V3).
    No parameters: scaling changes the rotary frequencies only."""

    type: Literal["llama3", "linear", "yarn", "dynamic"]
    """The scaling method (HF `rope_type`, formerly `type`)."""
    factor: float = Field(gt=0, le=1024)
    """Context extension factor (dimensionless): the new context over the original one."""
    low_freq_factor: float | None = Field(default=None, gt=0)
    """llama3: wavelengths longer than original context / low_freq_factor are fully scaled
    (dimensionless; Llama 3.1: 1)."""
    high_freq_factor: float | None = Field(default=None, gt=0)
    """llama3: wavelengths shorter than original context / high_freq_factor are kept
    (dimensionless; Llama 3.1: 4)."""
    original_max_position_embeddings: int | None = Field(default=None, ge=1)
    """llama3, yarn: the context length (tokens) of pretraining before the extension."""
    beta_fast: float | None = Field(default=None, gt=0)
    """yarn: rotations per original context above which a dimension is not interpolated
    (dimensionless; YaRN default 32)."""
    beta_slow: float | None = Field(default=None, gt=0)
    """yarn: rotations per original context below which a dimension is fully interpolated
    (dimensionless; YaRN default 1)."""
    mscale: float | None = Field(default=None, ge=0)
    """yarn: attention temperature coefficient, `0.1·mscale·ln(factor) + 1` (dimensionless)."""
    mscale_all_dim: float | None = Field(default=None, ge=0)
    """yarn (DeepSeek): the temperature coefficient applied to all dimensions
    (dimensionless)."""

    @model_validator(mode="after")
    def _check(self) -> RopeScalingSpec:
        if self.type == "llama3":
            missing = [
                k
                for k in ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
                if getattr(self, k) is None
            ]
            if missing:
                raise ValueError(f"llama3 rope scaling needs {', '.join(missing)}")
            assert self.low_freq_factor is not None and self.high_freq_factor is not None
            if self.high_freq_factor <= self.low_freq_factor:
                raise ValueError(
                    f"rope_scaling.high_freq_factor ({self.high_freq_factor}) must exceed "
                    f"low_freq_factor ({self.low_freq_factor})"
                )
        else:
            given = [k for k in ("low_freq_factor", "high_freq_factor") if getattr(self, k)]
            if given:
                raise ValueError(f"{', '.join(given)} apply to llama3 rope scaling only")
        if self.type != "yarn":
            given = [
                k
                for k in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim")
                if getattr(self, k) is not None
            ]
            if given:
                raise ValueError(f"{', '.join(given)} apply to yarn rope scaling only")
        if (
            self.beta_fast is not None
            and self.beta_slow is not None
            and self.beta_fast <= self.beta_slow
        ):
            raise ValueError(
                f"rope_scaling.beta_fast ({self.beta_fast}) must exceed beta_slow "
                f"({self.beta_slow})"
            )
        return self


class MoESpec(Spec):
    """Mixture-of-Experts layers (routed experts plus optional shared experts)."""

    num_experts: int = Field(ge=2, le=4096)
    """Routed experts per MoE layer."""
    top_k: int = Field(ge=1)
    """Routed experts each token is sent to."""
    expert_ffn_hidden_size: int = Field(gt=0)
    """FFN hidden size of one routed expert."""
    num_shared_experts: int = Field(default=0, ge=0)
    """Experts every token goes through."""
    shared_expert_ffn_hidden_size: int | None = Field(default=None, gt=0)
    """FFN hidden size of one shared expert (default: expert_ffn_hidden_size)."""
    num_dense_layers: int = Field(default=0, ge=0)
    """The first this-many layers are dense (DeepSeek `first_k_dense_replace`)."""
    layer_frequency: int = Field(default=1, ge=1)
    """Every this-many-th layer after the dense ones is MoE (Qwen `decoder_sparse_step`):
    after the dense layers, layer j (0-based) is MoE iff (j + 1) % layer_frequency == 0."""
    shared_expert_gate: bool = False
    """A sigmoid gate on the shared expert output (Qwen2-MoE): h extra parameters."""
    router_bias: bool = False
    """A per-expert routing-score bias (DeepSeek-V3 auxiliary-loss-free balancing,
    `e_score_correction_bias`): num_experts extra parameters per MoE layer."""

    @model_validator(mode="after")
    def _check(self) -> MoESpec:
        if self.top_k > self.num_experts:
            raise ValueError(
                f"moe.top_k ({self.top_k}) must not exceed moe.num_experts ({self.num_experts})"
            )
        return self

    @property
    def shared_ffn(self) -> int:
        return self.shared_expert_ffn_hidden_size or self.expert_ffn_hidden_size


class ModelSpec(Spec):
    """A decoder-only transformer: the explicit form every model input resolves to."""

    name: str = Field(default="custom", min_length=1, max_length=200)
    """A label for the model."""
    num_layers: int = Field(ge=1, le=1024)
    """Transformer layers."""
    hidden_size: int = Field(ge=1, le=131072)
    """Model (residual stream) width h."""
    num_attention_heads: int = Field(ge=1, le=1024)
    """Query heads a."""
    num_kv_heads: int | None = Field(default=None, ge=1, le=1024)
    """Key/value heads g (grouped-query attention); null means a (multi-head attention)."""
    head_dim: int | None = Field(default=None, ge=1, le=4096)
    """Per-head dimension d; null means hidden_size / num_attention_heads."""
    ffn_hidden_size: int = Field(ge=1, le=1_048_576)
    """FFN hidden size f of the dense MLP."""
    vocab_size: int = Field(ge=1, le=4_194_304)
    """Vocabulary size V."""
    gated_mlp: bool = True
    """True: SwiGLU-style three matrices; false: the GPT two-matrix MLP."""
    tie_embeddings: bool = False
    """The LM head shares the input embedding matrix."""
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    """Normalisation layer (RMSNorm: weight only; LayerNorm: weight and bias)."""
    attention_bias: bool = False
    """Q, K, V projections carry biases (Qwen2); GPT also has an output bias."""
    mlp_bias: bool = False
    """MLP linear layers carry biases (GPT)."""
    position_embedding: Literal["rope", "learned"] = "rope"
    """Rotary (no parameters) or learned absolute position embeddings."""
    rope_theta: float | None = Field(default=None, gt=0)
    """RoPE base θ (dimensionless): the inverse frequencies are θ^(-2i/d) (Su et al. 2021,
    arXiv 2104.09864). A Hugging Face config's `rope_theta`; Llama 2 10 000, Llama 3
    500 000, Qwen 1 000 000. Null: unknown, i.e. the framework default 10 000. Only with
    rotary embeddings."""
    rope_scaling: RopeScalingSpec | None = None
    """Rotary frequency scaling for an extended context (Llama 3.1, DeepSeek-V3 YaRN); null:
    none. Only with rotary embeddings."""
    norm_epsilon: float | None = Field(default=None, gt=0, lt=1)
    """The ε added to the variance in every RMSNorm/LayerNorm (dimensionless; HF
    `rms_norm_eps` or `layer_norm_epsilon`). Null: unknown, i.e. the framework default
    (Megatron-Core 1e-5)."""
    sliding_window: int | None = Field(default=None, ge=1)
    """Sliding-window attention (Mistral 7B, Jiang et al. 2023, arXiv 2310.06825, §2): each
    query attends to itself and the `sliding_window − 1` tokens before it (tokens; HF
    `sliding_window`, mask `kv_idx > q_idx − sliding_window`), in every layer. Null: full
    causal attention."""
    max_position_embeddings: int | None = Field(default=None, ge=1)
    """Longest sequence (positions) the model supports: the rows of the learned position
    table (required with learned position embeddings), or, with rotary embeddings, the
    context length it was trained for (a Hugging Face config's `max_position_embeddings`;
    no parameters). Null: unknown."""
    dropout: bool = False
    """Dropout on attention probabilities and residual branches (GPT-3 era training)."""
    qk_norm: bool = False
    """RMSNorm on each query and key head before attention (Qwen3): 2·head_dim parameters
    per layer."""
    mla: MLASpec | None = None
    """Multi-head latent attention, replaces the GQA projections (DeepSeek-V3)."""
    moe: MoESpec | None = None
    """Mixture-of-Experts layers; null means a dense model."""

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        a, g = self.num_attention_heads, self.kv_heads
        if g > a:
            raise ValueError(f"num_kv_heads ({g}) must not exceed num_attention_heads ({a})")
        if a % g:
            raise ValueError(f"num_attention_heads ({a}) must be divisible by num_kv_heads ({g})")
        if self.head_dim is None and self.hidden_size % a:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads ({a})"
                " unless head_dim is given"
            )
        if self.moe is not None and self.moe.num_dense_layers > self.num_layers:
            raise ValueError(
                f"moe.num_dense_layers ({self.moe.num_dense_layers}) must not exceed "
                f"num_layers ({self.num_layers})"
            )
        if self.position_embedding == "learned" and self.max_position_embeddings is None:
            raise ValueError("max_position_embeddings is required with learned position embeddings")
        if self.position_embedding != "rope":
            rope = [k for k in ("rope_theta", "rope_scaling") if getattr(self, k) is not None]
            if rope:
                raise ValueError(f"{', '.join(rope)} need rotary position embeddings")
        return self

    # ---- derived shape -------------------------------------------------------------
    @property
    def rope_base(self) -> float:
        """The RoPE base in effect: `rope_theta`, or the framework default 10 000 (Su et al.
        2021; Megatron's `--rotary-base` default)."""
        return self.rope_theta if self.rope_theta is not None else 10000.0

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    def is_moe_layer(self, index: int) -> bool:
        """True when layer `index` (0-based) is an MoE layer."""
        if self.moe is None or index < self.moe.num_dense_layers:
            return False
        # Qwen2-MoE: `(layer_idx + 1) % decoder_sparse_step == 0` (HF modeling_qwen2_moe).
        return (index - self.moe.num_dense_layers + 1) % self.moe.layer_frequency == 0

    @property
    def num_moe_layers(self) -> int:
        """Layers for which `is_moe_layer` holds, in closed form: after the leading dense
        layers, every `layer_frequency`-th layer."""
        if self.moe is None or self.num_layers <= self.moe.num_dense_layers:
            return 0
        return (self.num_layers - self.moe.num_dense_layers) // self.moe.layer_frequency

    # ---- parameter counts ----------------------------------------------------------
    def attention_parameters(self) -> int:
        """Parameters of one attention block (projections and biases, no norm)."""
        h, a, g, d = self.hidden_size, self.num_attention_heads, self.kv_heads, self.head_size
        if self.mla is not None:
            m = self.mla
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            if m.q_lora_rank:
                q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * a * qk
            else:
                q = h * a * qk
            kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
            kv += m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
            return q + kv + a * m.v_head_dim * h
        params = h * a * d + 2 * h * g * d + a * d * h
        if self.qk_norm:  # one RMSNorm weight of size d for queries, one for keys
            params += 2 * d
        if self.attention_bias:
            params += a * d + 2 * g * d
        if self.mlp_bias:  # GPT-style models also bias the attention output projection
            params += h
        return params

    def _mlp_parameters(self, ffn: int) -> int:
        h = self.hidden_size
        params = (3 if self.gated_mlp else 2) * h * ffn
        if self.mlp_bias:
            params += ffn * (2 if self.gated_mlp else 1) + h
        return params

    def dense_mlp_parameters(self) -> int:
        """Parameters of the dense MLP of a non-MoE layer."""
        return self._mlp_parameters(self.ffn_hidden_size)

    def expert_parameters(self) -> int:
        """Parameters of one routed expert."""
        assert self.moe is not None
        return self._mlp_parameters(self.moe.expert_ffn_hidden_size)

    def moe_block_parameters(self, *, active: bool = False) -> int:
        """Parameters of one MoE block: router, routed experts (all, or top_k when
        `active`), shared experts and their gate."""
        assert self.moe is not None
        m, h = self.moe, self.hidden_size
        routed = (m.top_k if active else m.num_experts) * self.expert_parameters()
        shared = m.num_shared_experts * self._mlp_parameters(m.shared_ffn)
        gate = h if m.shared_expert_gate else 0
        router = h * m.num_experts + (m.num_experts if m.router_bias else 0)
        return router + routed + shared + gate

    def norm_parameters(self) -> int:
        """Parameters of one normalisation layer."""
        return self.hidden_size * (2 if self.norm == "layernorm" else 1)

    def layer_parameters(self, index: int, *, active: bool = False) -> int:
        """Parameters of layer `index`: attention, MLP or MoE block, and two norms
        (plus the MLA latent norms counted in attention_parameters)."""
        mlp = (
            self.moe_block_parameters(active=active)
            if self.is_moe_layer(index)
            else self.dense_mlp_parameters()
        )
        return self.attention_parameters() + mlp + 2 * self.norm_parameters()

    def _layers_parameters(self, *, active: bool) -> int:
        """Parameters of all layers: dense and MoE layers counted by kind."""
        moe = self.num_moe_layers
        attention_and_norms = self.attention_parameters() + 2 * self.norm_parameters()
        total = self.num_layers * attention_and_norms
        if self.num_layers > moe:
            total += (self.num_layers - moe) * self.dense_mlp_parameters()
        return total + (moe * self.moe_block_parameters(active=active) if moe else 0)

    def embedding_parameters(self) -> int:
        """Input embedding (and learned positions)."""
        pos = (self.max_position_embeddings or 0) if self.position_embedding == "learned" else 0
        return (self.vocab_size + pos) * self.hidden_size

    def head_parameters(self) -> int:
        """Final norm and the LM head (zero head weights when tied)."""
        head = 0 if self.tie_embeddings else self.vocab_size * self.hidden_size
        return head + self.norm_parameters()

    def num_parameters(self) -> int:
        """Total parameters (MoE: all experts)."""
        layers = self._layers_parameters(active=False)
        return layers + self.embedding_parameters() + self.head_parameters()

    def num_active_parameters(self) -> int:
        """Parameters one token passes through (MoE: top_k routed experts)."""
        layers = self._layers_parameters(active=True)
        return layers + self.embedding_parameters() + self.head_parameters()
