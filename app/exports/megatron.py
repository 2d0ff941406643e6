"""Megatron-LM (Megatron-Core) export: the `pretrain_gpt.py` argument list of a training plan
and the environment its launcher sets.

Flag names and the rules checked follow NVIDIA/Megatron-LM `megatron/training/arguments.py`
(`validate_args` and the `_add_*_args` parsers), `megatron/core/transformer/
transformer_config.py` (`__post_init__`: heads and query groups by tensor size, uneven and
layout pipeline splits, recompute flags), `megatron/core/model_parallel_config.py` ("When
using expert parallelism and tensor parallelism for training, sequence parallelism must be
used": an error in earlier Megatron-Core releases, a warning in current ones; refused here;
the interleaved micro-batch group defaults to the pipeline size), `megatron/core/parallel_state.py`
(expert-tensor-pipeline grid divides the world) and `megatron/core/pipeline_parallel/
schedules.py` (interleaved micro-batch groups).

Plan → flags:
- parallel sizes: `--tensor-/--pipeline-model-parallel-size`, `--context-parallel-size`,
  `--expert-model-parallel-size`, `--expert-tensor-parallel-size`, `--sequence-parallel`;
- context-parallel algorithm (context > 1): `--cp-comm-type` p2p (ring), a2a (ulysses),
  allgather (all_gather) or a2a+p2p (hybrid, with `--hierarchical-context-parallel-sizes
  <heads> <context / heads>`: the a2a level first, adjacent GPUs);
- pipeline split (chunk c of `stage_layers` runs on pipeline rank c mod pp, virtual stage
  c div pp): an even split needs no flag (`--num-layers-per-virtual-pipeline-stage` when
  interleaved); a split whose ranks differ only at the first and last rank uses
  `--decoder-first/last-pipeline-num-layers` (with `--num-virtual-stages-per-pipeline-rank`
  when interleaved); any other split is written as `--pipeline-model-parallel-layout`
  ("E" embedding, "t" a transformer layer, "L" loss, stages split by "|", in the same chunk
  order);
- vocabulary parallelism (`vocab_parallel`, Yeung et al. 2025): `--enable-vocab-parallel`
  of the sail-sg/VocabularyParallelism fork (non-interleaved 1F1B, untied embeddings,
  `--make-vocab-size-divisible-by` a multiple of tensor × pipeline) with the fork's split
  flags (`--enable-layer-redistribution --final-stage-num-layers`) in place of the ones
  above; what the fork cannot run is refused as `megatron.vocab-parallel`;
- ZeRO: 0 → plain DDP; 1 → `--use-distributed-optimizer`; 3 → `--use-torch-fsdp2`;
  2 → `--use-torch-fsdp2 --torch-fsdp2-no-reshard-after-forward` (Megatron's help: "Set to
  enable FSDP ZeRO-2"); FSDP2 refuses pipeline and expert parallelism (validate_args);
- recompute: selective → `--recompute-granularity selective`; full →
  `--recompute-granularity full --recompute-method uniform --recompute-num-layers 1`;
- document packing (`workload.sequence_lengths`, packing `pack` or `concat`):
  `--reset-position-ids --reset-attention-mask --eod-mask-loss` (Megatron-LM `_add_data_args`;
  Megatron-Core `GPTDatasetConfig.reset_position_ids / reset_attention_mask /
  eod_mask_loss`); the per-document attention cost the plan is priced with needs the
  variable-length kernel path (`PackedSeqParams`, `qkv_format="thd"`, `cu_seqlens`), said
  in a note; `pad` needs no flag (samples padded to `--seq-length`). Per-document
  context-parallel degrees (Megatron-Core `ModelParallelConfig.hybrid_context_parallel` with
  `max_seqlen_per_dp_cp_rank`, `--hybrid-context-parallel --max-seqlen-per-dp-cp-rank`) are
  not written: the plan is priced with one context degree; a note gives the per-bucket
  degrees the estimate reports.

Architecture without parameters (flags of Megatron-LM core_v0.16.1 `arguments.py`
`_add_network_size_args`, `_add_mla_args` and the TransformerConfig fields it exposes,
`core_transformer_config_from_args`, `models/common/embeddings/rotary_pos_embedding.py`):
- RoPE base → `--rotary-base` (an `int` argument; default 10000, so it is always written);
- llama3 rope scaling → `--use-rope-scaling --rope-scaling-factor F`; Megatron hard-codes
  low_freq_factor 1, high_freq_factor 4 and original context 8192 (`_apply_scaling`), any
  other values are refused;
- linear rope scaling → `--rotary-seq-len-interpolation-factor` (an `int` argument);
- yarn → only with multi-latent attention: `--rope-type yarn --rotary-scaling-factor F
  --mscale M --mscale-all-dim A`; `original_max_position_embeddings`, `beta_fast` and
  `beta_slow` have no flag and must equal MLATransformerConfig's defaults 4096, 32, 1;
  common attention takes only `rope_type="rope"` (`core_transformer_config_from_args`);
  dynamic NTK scaling has no Megatron form and is refused;
- norm ε → `--norm-epsilon`; QKV bias → `--add-qkv-bias`; query/key norm (and MLA's latent
  norms) → `--qk-layernorm`;
- sliding window of W tokens (the query and the W − 1 before it, Hugging Face's
  `kv_idx > q_idx − W`) → `--window-size W-1,0` (TransformerConfig.window_size, Transformer
  Engine's (left, right) convention);
- learned position tables have `max_position_embeddings` rows: the sequence must fit them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from app.exports.base import (
    ExportContext,
    ExportResult,
    block_notes,
    hf_model_id,
    int_flag,
    parse_flags,
    plan_node_layout,
    require,
    shell_command,
    torchrun_args,
)
from app.exports.offload import check_offload
from app.exports.schedules import schedule_options
from specs.model import ModelSpec
from specs.plan import TrainingPlan
from specs.workload import TrainingWorkload

FORMAT = "megatron"
ENTRYPOINT = "pretrain_gpt.py"

SWITCHES = frozenset(
    {
        "--sequence-parallel",
        "--use-distributed-optimizer",
        "--use-torch-fsdp2",
        "--torch-fsdp2-no-reshard-after-forward",
        "--no-gradient-accumulation-fusion",
        "--group-query-attention",
        "--swiglu",
        "--untie-embeddings-and-output-weights",
        "--bf16",
        "--fp16",
        "--moe-grouped-gemm",
        "--disable-bias-linear",
        "--add-qkv-bias",
        "--qk-layernorm",
        "--use-rope-scaling",
        "--multi-latent-attention",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
        "--mock-data",
        "--moe-router-enable-expert-bias",
        "--enable-vocab-parallel",
        "--enable-layer-redistribution",
        "--moe-shared-expert-gate",
        "--optimizer-cpu-offload",
        "--cpu-offloading",
        "--reset-position-ids",
        "--reset-attention-mask",
        "--eod-mask-loss",
    }
)
"""Megatron's `store_true` flags this exporter writes (they take no value)."""


# ---- pipeline split ----------------------------------------------------------------------
def layout_string(stage_layers: Sequence[int]) -> str:
    """`--pipeline-model-parallel-layout` of a split: "E" (embedding) before the first
    stage's layers, "L" (loss) after the last stage's, `t*n` for n transformer layers, "|"
    between stages (Megatron's `PipelineParallelLayerLayout.parse_str_to_list` grammar;
    stage i is virtual stage i div pp of pipeline rank i mod pp)."""
    parts = []
    last = len(stage_layers) - 1
    for i, n in enumerate(stage_layers):
        text = f"t*{n}" if n > 1 else "t"
        if i == 0:
            text = "E" + text
        if i == last:
            text = text + "L"
        parts.append(text)
    return "|".join(parts)


def parse_layout(layout: str) -> list[list[str]]:
    """Megatron's layout grammar back to stages of layer symbols: commas are cosmetic,
    `(x)*n` and `x*n` repeat, `|` separates stages."""
    text = layout.replace(",", "")
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    text = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    return [list(stage) for stage in text.split("|")]


def _pipeline_flags(plan: TrainingPlan, num_layers: int) -> list[str]:
    p = plan.parallelism
    pp, vpp = p.pipeline, p.virtual_pipeline
    schedule_options(FORMAT, "megatron_core", plan)  # 1F1B / interleaved 1F1B only
    require(
        vpp == 1 or pp > 1,
        FORMAT,
        "megatron.interleaving-needs-pipeline",
        "an interleaved schedule (virtual_pipeline > 1) needs pipeline-model-parallel size > 1",
    )
    if pp == 1:
        return []
    layers = list(plan.stage_layers) if plan.stage_layers else None
    if layers is None:  # the service's own split: Megatron's even split
        require(
            num_layers % (pp * vpp) == 0,
            FORMAT,
            "megatron.layers-divisible-by-stages",
            f"{num_layers} layers do not split evenly over {pp} × {vpp} stages",
        )
        layers = [num_layers // (pp * vpp)] * (pp * vpp)
    require(
        sum(layers) == num_layers,
        FORMAT,
        "megatron.stage-layers-sum",
        f"stage_layers add up to {sum(layers)}, the model has {num_layers} layers",
    )
    if len(set(layers)) == 1:
        if vpp == 1:
            return []
        return ["--num-layers-per-virtual-pipeline-stage", str(layers[0])]
    # first/last form: every rank's chunks equal, middle ranks equal, only ends differ
    per_rank = [[layers[v * pp + r] for v in range(vpp)] for r in range(pp)]
    uniform_chunks = all(len(set(chunks)) == 1 for chunks in per_rank)
    middle = {per_rank[r][0] for r in range(1, pp - 1)}
    if uniform_chunks and len(middle) <= 1:
        flags = [
            "--decoder-first-pipeline-num-layers",
            str(sum(per_rank[0])),
            "--decoder-last-pipeline-num-layers",
            str(sum(per_rank[-1])),
        ]
        if vpp > 1:
            flags += ["--num-virtual-stages-per-pipeline-rank", str(vpp)]
        return flags
    return ["--pipeline-model-parallel-layout", layout_string(layers)]


# ---- vocabulary parallelism (sail-sg/VocabularyParallelism) -------------------------------
VOCAB_PARALLEL_FORK = "sail-sg/VocabularyParallelism"
"""The Megatron-LM fork that runs vocabulary parallelism (Yeung et al. 2025); its
`megatron/training/arguments.py` defines `--enable-vocab-parallel` (with
`--disable-backward-fusion` for the two-barrier variant, not exported: the plan prices the
default one-barrier algorithm) and `--enable-layer-redistribution --final-stage-num-layers`."""


def vocab_multiple(plan: TrainingPlan) -> int:
    """`--make-vocab-size-divisible-by`: 128, or under vocabulary parallelism the least
    multiple of 128 that tensor × pipeline divides (the fork asserts "vocab size must be
    divisible by model parallel size": make_vocab_size_divisible_by % (tp × pp) == 0)."""
    if not plan.vocab_parallel:
        return 128
    return math.lcm(128, plan.parallelism.tensor * plan.parallelism.pipeline)


def fork_stage_layers(num_layers: int, pipeline: int, final: int | None) -> list[int]:
    """The layers per stage the fork builds (`transformer_block.get_num_layers_to_build`):
    without `--final-stage-num-layers` L // p each, the remainder one more each on the
    ranks before the last (from p − 2 down); with it, `final` on the last rank and the rest
    spread likewise over the p − 1 others."""
    if final is None:
        out = [num_layers // pipeline] * pipeline
        extra = num_layers % pipeline
    else:
        out = [(num_layers - final) // (pipeline - 1)] * pipeline
        extra = (num_layers - final) % (pipeline - 1)
    for rank in range(pipeline - 2, pipeline - extra - 2, -1):
        out[rank] += 1
    if final is not None:
        out[pipeline - 1] = final
    return out


def vocab_parallel_flags(model: ModelSpec, plan: TrainingPlan, notes: list[str]) -> list[str]:
    """The fork's flags for a vocabulary-parallel plan, in place of the pipeline-split
    flags: `--enable-vocab-parallel` and, when the split is not the fork's default one,
    `--enable-layer-redistribution --final-stage-num-layers N` (the fork has no
    `--decoder-first/last-pipeline-num-layers` nor `--pipeline-model-parallel-layout`).

    Raises:
        UnexpressiblePlan: rule `megatron.vocab-parallel` for what the fork asserts against
            (`validate_args`): a schedule other than non-interleaved 1F1B, tied
            embeddings, or a split neither of its two forms builds.
    """
    p = plan.parallelism
    schedule_options(FORMAT, "megatron_core", plan)  # 1F1B / interleaved 1F1B only
    rule = "megatron.vocab-parallel"
    require(
        plan.pipeline_schedule == "1f1b" and p.virtual_pipeline == 1,
        FORMAT,
        rule,
        f"{VOCAB_PARALLEL_FORK} runs vocabulary parallelism with non-interleaved 1F1B only "
        f"('vocab parallel with interleaved schedule is not supported yet'; got "
        f"{plan.pipeline_schedule})",
    )
    require(
        not model.tie_embeddings,
        FORMAT,
        rule,
        "--enable-vocab-parallel requires --untie-embeddings-and-output-weights; the model "
        "ties its input and output embeddings",
    )
    notes.append(
        f"vocab_parallel runs on the {VOCAB_PARALLEL_FORK} fork of Megatron-LM "
        "(--enable-vocab-parallel, one all-reduce barrier per micro-batch), not on upstream "
        "Megatron-LM; flags newer than the fork (e.g. --cp-comm-type, rope scaling) may need "
        "dropping there"
    )
    flags = ["--enable-vocab-parallel"]
    L, pp = model.num_layers, p.pipeline
    layers = list(plan.stage_layers) if plan.stage_layers else fork_stage_layers(L, pp, None)
    if layers == fork_stage_layers(L, pp, None):
        return flags
    final = layers[-1]
    require(
        layers == fork_stage_layers(L, pp, final),
        FORMAT,
        rule,
        f"{VOCAB_PARALLEL_FORK} builds either its default split "
        f"{fork_stage_layers(L, pp, None)} or, with --final-stage-num-layers N, N layers on "
        f"the last stage and the rest spread over the others; stage_layers {layers} is "
        "neither",
    )
    return flags + ["--enable-layer-redistribution", "--final-stage-num-layers", str(final)]


def moe_layer_pattern(model: ModelSpec) -> str:
    """`--moe-layer-freq` as Megatron's list expression (1 = MoE layer, 0 = dense), run-length
    compressed, e.g. `[0]*3+[1]*58`."""
    bits = [1 if model.is_moe_layer(i) else 0 for i in range(model.num_layers)]
    runs: list[tuple[int, int]] = []
    for b in bits:
        if runs and runs[-1][0] == b:
            runs[-1] = (b, runs[-1][1] + 1)
        else:
            runs.append((b, 1))
    return "+".join(f"[{b}]*{n}" for b, n in runs)


def expand_layer_pattern(text: str) -> list[int]:
    """Evaluate a `--moe-layer-freq` list expression made of `[b]*n` terms joined by `+`
    (the only form this exporter writes) without `eval`."""
    out: list[int] = []
    for term in text.split("+"):
        m = re.fullmatch(r"\[(\d)\]\*(\d+)", term.strip())
        if m is None:
            raise ValueError(f"unsupported --moe-layer-freq term {term!r}")
        out += [int(m.group(1))] * int(m.group(2))
    return out


# ---- building ----------------------------------------------------------------------------
CP_COMM_TYPES = {"ring": "p2p", "ulysses": "a2a", "all_gather": "allgather", "hybrid": "a2a+p2p"}
"""`--cp-comm-type` of each `context_parallel_algorithm` (Megatron-LM arguments.py:
"p2p, a2a, allgather or a2a+p2p")."""


def _context_parallel_args(plan: TrainingPlan) -> list[str]:
    """`--cp-comm-type` (and the hybrid's two levels) when context parallelism is on."""
    c = plan.parallelism.context
    if c == 1:
        return []
    algorithm = plan.context_parallel_algorithm
    args = ["--cp-comm-type", CP_COMM_TYPES[algorithm]]
    if algorithm == "hybrid":
        u = plan.context_parallel_heads
        args += ["--hierarchical-context-parallel-sizes", str(u), str(c // u)]
    return args


def _list_flag(args: Sequence[str], name: str) -> list[str]:
    """The values of an nargs='+' flag (the tokens after it up to the next flag)."""
    out: list[str] = []
    for i, token in enumerate(args):
        if token == name:
            out = []
            for value in args[i + 1 :]:
                if value.startswith("--"):
                    break
                out.append(value)
    return out


def _check_context_parallel(
    args: Sequence[str], cp: int, *, heads: int, groups: int, tp: int, mla: bool
) -> None:
    """validate_args' context-parallel rules: a known `--cp-comm-type`; a2a+p2p needs
    `--hierarchical-context-parallel-sizes`, whose product is the context size; and
    Transformer Engine's all-to-all rule (`AttnFuncWithCPAndQKVOA2A`: "The number of
    attention heads needs to be divisible by CP size!", on the query and the key heads of a
    tensor rank) over the a2a group (the whole context group, or the first level)."""
    comm = _list_flag(args, "--cp-comm-type") or ["p2p"]
    for kind in comm:
        require(
            kind in CP_COMM_TYPES.values(),
            FORMAT,
            "megatron.cp-comm-type",
            f"--cp-comm-type must be p2p, a2a, allgather or a2a+p2p (got {kind})",
        )
    sizes = _list_flag(args, "--hierarchical-context-parallel-sizes")
    if "a2a+p2p" in comm:
        require(
            bool(sizes),
            FORMAT,
            "megatron.hierarchical-cp-sizes",
            "--hierarchical-context-parallel-sizes must be set when a2a+p2p is used in cp comm",
        )
    if sizes:
        product = 1
        for size in sizes:
            product *= int(size)
        require(
            product == cp,
            FORMAT,
            "megatron.hierarchical-cp-sizes",
            f"context_parallel_size ({cp}) must equal the product of "
            f"--hierarchical-context-parallel-sizes ({' × '.join(sizes)} = {product})",
        )
    if cp > 1 and ("a2a" in comm or "a2a+p2p" in comm):
        degree = cp if "a2a" in comm or not sizes else int(sizes[0])
        kv = heads if mla else groups
        require(
            (heads // tp) % degree == 0 and (kv // tp) % degree == 0,
            FORMAT,
            "megatron.cp-a2a-heads",
            f"the attention heads ({heads} / tp {tp}) and key heads ({kv} / tp {tp}) of a "
            f"tensor rank must be divisible by the all-to-all context size ({degree})",
        )


def build_args(
    model: ModelSpec, plan: TrainingPlan, workload: TrainingWorkload
) -> tuple[list[str], dict[str, str], list[str]]:
    """`pretrain_gpt.py` arguments, environment and notes for a training plan."""
    p = plan.parallelism
    notes: list[str] = []
    seq = workload.sequence_length
    args: list[str] = [
        "--tensor-model-parallel-size",
        str(p.tensor),
        "--pipeline-model-parallel-size",
        str(p.pipeline),
        "--context-parallel-size",
        str(p.context),
    ]
    args += _context_parallel_args(plan)
    if model.moe is not None:
        args += [
            "--expert-model-parallel-size",
            str(p.expert),
            "--expert-tensor-parallel-size",
            str(p.expert_tensor),
        ]
    else:
        require(
            p.expert == 1,
            FORMAT,
            "megatron.expert-parallel-needs-moe",
            "expert parallelism needs an MoE model (num_experts must be set)",
        )
    if p.sequence_parallel:
        args.append("--sequence-parallel")
    if plan.vocab_parallel:
        args += vocab_parallel_flags(model, plan, notes)
    else:
        args += _pipeline_flags(plan, model.num_layers)
    # optimizer sharding
    fsdp = plan.zero_stage >= 2
    if plan.zero_stage == 1:
        args.append("--use-distributed-optimizer")
    elif fsdp:
        args += ["--use-torch-fsdp2", "--no-gradient-accumulation-fusion"]
        if plan.zero_stage == 2:
            args.append("--torch-fsdp2-no-reshard-after-forward")
        notes.append(
            f"ZeRO-{plan.zero_stage} maps to PyTorch FSDP2 (--use-torch-fsdp2"
            + (", no reshard after forward = ZeRO-2" if plan.zero_stage == 2 else "")
            + ")"
        )
    if p.data > 1 and not fsdp:
        args.append("--overlap-grad-reduce")
        if plan.zero_stage == 1:
            args.append("--overlap-param-gather")
    # recompute
    if plan.recompute == "selective":
        args += ["--recompute-granularity", "selective"]
    elif plan.recompute == "full":
        args += [
            "--recompute-granularity",
            "full",
            "--recompute-method",
            "uniform",
            "--recompute-num-layers",
            "1",
        ]
    args += _offload_args(model, plan, notes)
    # batch and sequence
    args += [
        "--micro-batch-size",
        str(plan.micro_batch_size),
        "--global-batch-size",
        str(workload.global_batch_size),
        "--seq-length",
        str(seq),
        "--max-position-embeddings",
        str(max(seq, model.max_position_embeddings or 0)),
    ]
    args += _architecture_args(model, plan)
    args += _position_args(model, seq)
    args += _moe_args(model, workload, notes)
    args += _packing_args(plan, workload, notes)
    args += _precision_args(workload)
    args += _tokenizer_and_run_args(model, notes, vocab_multiple(plan))
    env: dict[str, str] = {}
    if not fsdp:
        # validate_args: TP or CP before Blackwell needs exactly one hardware queue so that
        # communication kernels are issued before the GEMMs they overlap with.
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    return args, env, notes


def _offload_args(model: ModelSpec, plan: TrainingPlan, notes: list[str]) -> list[str]:
    """Offload flags (Megatron-LM arguments of Megatron-Core's `OptimizerConfig.
    optimizer_cpu_offload` / `optimizer_offload_fraction` and `TransformerConfig.
    cpu_offloading` / `cpu_offloading_num_layers`): the whole optimizer on the CPU, the
    activations of `offload.activations` × num_layers layers."""
    check_offload(FORMAT, "megatron_core", model, plan)
    off = plan.offload
    args: list[str] = []
    if off.optimizer == "cpu":
        args += ["--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.0"]
        notes.append(
            "--optimizer-cpu-offload runs Adam on the CPU (HybridDeviceOptimizer) for the "
            "whole shard (--optimizer-offload-fraction 1.0)"
        )
    if off.activations > 0.0:
        layers = round(off.activations * model.num_layers)
        args += ["--cpu-offloading", "--cpu-offloading-num-layers", str(layers)]
    return args


def _architecture_args(model: ModelSpec, plan: TrainingPlan) -> list[str]:
    args = [
        "--num-layers",
        str(model.num_layers),
        "--hidden-size",
        str(model.hidden_size),
        "--ffn-hidden-size",
        str(model.ffn_hidden_size),
        "--num-attention-heads",
        str(model.num_attention_heads),
    ]
    if (
        model.head_dim is not None
        and model.head_dim * model.num_attention_heads != model.hidden_size
    ):
        args += ["--kv-channels", str(model.head_dim)]
    if model.mla is not None:
        m = model.mla
        args += [
            "--multi-latent-attention",
            "--kv-lora-rank",
            str(m.kv_lora_rank),
            "--qk-head-dim",
            str(m.qk_nope_head_dim),
            "--qk-pos-emb-head-dim",
            str(m.qk_rope_head_dim),
            "--v-head-dim",
            str(m.v_head_dim),
        ]
        if m.q_lora_rank:
            args += ["--q-lora-rank", str(m.q_lora_rank)]
    elif model.kv_heads != model.num_attention_heads:
        args += ["--group-query-attention", "--num-query-groups", str(model.kv_heads)]
    if model.gated_mlp:
        args.append("--swiglu")
    args += ["--normalization", "RMSNorm" if model.norm == "rmsnorm" else "LayerNorm"]
    args += [
        "--position-embedding-type",
        "rope" if model.position_embedding == "rope" else "learned_absolute",
    ]
    if not model.tie_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not model.mlp_bias:
        args.append("--disable-bias-linear")
    if model.attention_bias and not model.mlp_bias:
        args.append("--add-qkv-bias")
    if model.qk_norm or model.mla is not None:
        # MLA: the RMSNorms on the query and key/value latents (DeepSeek's q_a_layernorm,
        # kv_a_layernorm) are Megatron's qk_layernorm (gpt_layer_specs: the up projections
        # become layer-norm linears)
        args.append("--qk-layernorm")
    if not model.dropout:
        args += ["--attention-dropout", "0.0", "--hidden-dropout", "0.0"]
    args += ["--attention-backend", "flash" if plan.flash_attention else "unfused"]
    return args


MLA_YARN_DEFAULTS = {"original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0}
"""MLATransformerConfig's YaRN fields without a command-line flag (Megatron-Core 0.16)."""
LLAMA3_SCALING_FIXED = {
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
"""The llama3 scaling constants Megatron's `RotaryEmbedding._apply_scaling` hard-codes."""


def _number(value: float) -> str:
    """A float flag value without a spurious `.0` on integers (1e-05 stays 1e-05)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _position_args(model: ModelSpec, seq: int) -> list[str]:
    """RoPE base and scaling, norm ε and sliding window (see the module docstring)."""
    args: list[str] = []
    if model.position_embedding == "learned":
        positions = model.max_position_embeddings or 0
        require(
            seq <= positions,
            FORMAT,
            "megatron.learned-positions-cover-sequence",
            f"the learned position table has {positions} rows (max_position_embeddings); "
            f"sequences of {seq} tokens do not fit it",
        )
    else:
        base = model.rope_base
        require(
            float(base).is_integer(),
            FORMAT,
            "megatron.rotary-base-integer",
            f"--rotary-base is an integer argument; rope_theta {base} is not an integer",
        )
        args += ["--rotary-base", str(int(base))]
        args += _rope_scaling_args(model)
    if model.norm_epsilon is not None:
        args += ["--norm-epsilon", _number(model.norm_epsilon)]
    if model.sliding_window is not None:
        args += ["--window-size", f"{model.sliding_window - 1},0"]
    return args


def _rope_scaling_args(model: ModelSpec) -> list[str]:
    rs = model.rope_scaling
    if model.mla is not None:
        if rs is None:
            return ["--rope-type", "rope"]
        require(
            rs.type == "yarn",
            FORMAT,
            "megatron.mla-rope-scaling",
            f"multi-latent attention takes rope or yarn; {rs.type} rope scaling has no "
            "Megatron form",
        )
        for key, default in MLA_YARN_DEFAULTS.items():
            value = getattr(rs, key)
            require(
                value is None or float(value) == default,
                FORMAT,
                "megatron.yarn-fixed-parameters",
                f"rope_scaling.{key} is {value}; Megatron has no flag for it and uses {default:g}",
            )
        return [
            "--rope-type",
            "yarn",
            "--rotary-scaling-factor",
            _number(rs.factor),
            "--mscale",
            _number(rs.mscale if rs.mscale is not None else 1.0),
            "--mscale-all-dim",
            _number(rs.mscale_all_dim if rs.mscale_all_dim is not None else 0.0),
        ]
    if rs is None:
        return []
    if rs.type == "llama3":
        for key, fixed in LLAMA3_SCALING_FIXED.items():
            value = getattr(rs, key)
            require(
                value is not None and float(value) == fixed,
                FORMAT,
                "megatron.llama3-rope-scaling-fixed",
                f"rope_scaling.{key} is {value}; Megatron's llama3 scaling fixes it at {fixed:g}",
            )
        return ["--use-rope-scaling", "--rope-scaling-factor", _number(rs.factor)]
    if rs.type == "linear":
        require(
            float(rs.factor).is_integer(),
            FORMAT,
            "megatron.linear-rope-scaling-integer",
            f"--rotary-seq-len-interpolation-factor is an integer argument; factor {rs.factor}",
        )
        return ["--rotary-seq-len-interpolation-factor", str(int(rs.factor))]
    require(
        False,
        FORMAT,
        "megatron.rope-scaling-type",
        f"{rs.type} rope scaling has no Megatron form: common attention takes rope_type rope "
        "(llama3 via --use-rope-scaling, linear via --rotary-seq-len-interpolation-factor); "
        "yarn needs multi-latent attention",
    )
    return []


def _moe_args(model: ModelSpec, workload: TrainingWorkload, notes: list[str]) -> list[str]:
    moe = model.moe
    if moe is None:
        return []
    args = [
        "--num-experts",
        str(moe.num_experts),
        "--moe-router-topk",
        str(moe.top_k),
        "--moe-ffn-hidden-size",
        str(moe.expert_ffn_hidden_size),
        "--moe-token-dispatcher-type",
        "alltoall",
        "--moe-router-load-balancing-type",
        "aux_loss",
        "--moe-aux-loss-coeff",
        "1e-2",
    ]
    if moe.num_shared_experts:
        args += [
            "--moe-shared-expert-intermediate-size",
            str(moe.num_shared_experts * moe.shared_ffn),
        ]
        if moe.shared_expert_gate:  # TransformerConfig.moe_shared_expert_gate (Qwen2-MoE)
            args.append("--moe-shared-expert-gate")
    if moe.num_dense_layers or moe.layer_frequency > 1:
        args += ["--moe-layer-freq", moe_layer_pattern(model)]
    if moe.router_bias:
        args += ["--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias"]
    if workload.precision in ("bf16", "fp8"):
        args.append("--moe-grouped-gemm")
    routing = workload.moe_routing
    if routing is not None and routing.capacity_factor is not None:
        args += [
            "--moe-expert-capacity-factor",
            f"{routing.capacity_factor:g}",
            "--moe-token-drop-policy",
            "probs",
        ]
    else:
        notes.append("MoE routing is dropless (no --moe-expert-capacity-factor)")
    return args


def _packing_args(plan: TrainingPlan, workload: TrainingWorkload, notes: list[str]) -> list[str]:
    """Document masking of a packed mix (module docstring); notes for the rest."""
    lengths = workload.sequence_lengths
    if lengths is None:
        return []
    if lengths.packing == "pad":
        notes.append(
            "sequence_lengths packing pad: one document per sample, padded to --seq-length "
            "(use a dataset that pads; Megatron's GPTDataset concatenates documents)"
        )
        return []
    notes.append(
        f"sequence_lengths packing {lengths.packing}: documents attend within themselves; the "
        "plan's attention cost (Σ sᵢ² per sequence) assumes the variable-length kernel path "
        "(PackedSeqParams with qkv_format thd and cu_seqlens from the EOD positions)"
        + (
            "; pack (whole documents, never split) needs pre-packed samples: GPTDataset "
            "splits documents at the sequence boundary (concat)"
            if lengths.packing == "pack"
            else ""
        )
    )
    c = plan.parallelism.context
    if c > 1:
        notes.append(
            "per-document context-parallel degrees (Megatron-Core --hybrid-context-parallel "
            f"--max-seqlen-per-dp-cp-rank {plan.micro_batch_size * workload.sequence_length // c})"
            " are not set: the plan is priced with one context degree; "
            "details.sequence_lengths.per_bucket_context_parallel of its estimate says what "
            "they would give"
        )
    return ["--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss"]


def _precision_args(workload: TrainingWorkload) -> list[str]:
    if workload.precision == "bf16":
        return ["--bf16"]
    if workload.precision == "fp16":
        return ["--fp16"]
    if workload.precision == "fp8":
        return ["--bf16", "--fp8-format", "hybrid"]
    return []


def _tokenizer_and_run_args(model: ModelSpec, notes: list[str], divisible_by: int) -> list[str]:
    hf_id = hf_model_id(model)
    if hf_id is not None:
        tok = ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", hf_id]
        # build_tokenizer: padded_vocab_size comes from the tokenizer's length, not from
        # the checkpoint's config (a Qwen tokenizer holds fewer tokens than its vocab_size)
        notes.append(
            f"the embedding rows are the {hf_id} tokenizer's length padded to a multiple of "
            f"128 × tensor size; the plan counts the config's vocabulary ({model.vocab_size})"
        )
    else:
        # NullTokenizer's vocabulary is --vocab-size plus one EOD token (Megatron's
        # `_NullTokenizer.vocab_size`): V - 1 gives the model's V rows before padding
        tok = ["--tokenizer-type", "NullTokenizer", "--vocab-size", str(model.vocab_size - 1)]
        notes.append(
            "no public tokenizer for this model: NullTokenizer with the model's "
            "vocabulary size; replace with your tokenizer"
        )
    notes.append(
        "--mock-data trains on synthetic tokens; replace it with --data-path PREFIX "
        "--split 99,1,0 for real data"
    )
    return tok + [
        "--make-vocab-size-divisible-by",
        str(divisible_by),
        "--mock-data",
        "--train-iters",
        "100",
        "--lr",
        "3.0e-4",
        "--min-lr",
        "3.0e-5",
        "--lr-decay-style",
        "cosine",
        "--lr-warmup-iters",
        "10",
        "--weight-decay",
        "0.1",
        "--clip-grad",
        "1.0",
        "--log-interval",
        "1",
        "--eval-iters",
        "0",
    ]


# ---- checking ----------------------------------------------------------------------------
def check_args(args: Sequence[str], *, world_size: int, env: Mapping[str, str]) -> None:
    """Megatron's own consistency rules on an argument list (raises `UnexpressiblePlan`
    naming the rule). Every rule quotes the Megatron source that enforces it."""
    f = parse_flags(args, SWITCHES)
    tp = int_flag(f, "--tensor-model-parallel-size", 1)
    pp = int_flag(f, "--pipeline-model-parallel-size", 1)
    cp = int_flag(f, "--context-parallel-size", 1)
    ep = int_flag(f, "--expert-model-parallel-size", 1)
    etp = int_flag(f, "--expert-tensor-parallel-size", tp)
    num_layers = int_flag(f, "--num-layers", 0)
    heads = int_flag(f, "--num-attention-heads", 0)
    groups = int_flag(f, "--num-query-groups", 1) if f.get("--group-query-attention") else heads
    seq = int_flag(f, "--seq-length", 0)
    mbs = int_flag(f, "--micro-batch-size", 0)
    gbs = int_flag(f, "--global-batch-size", 0)
    num_experts = int_flag(f, "--num-experts", 0)
    sp = bool(f.get("--sequence-parallel"))
    fsdp = bool(f.get("--use-torch-fsdp2"))

    # validate_args: "world size is not divisible by total_model_size"
    model_size = tp * pp * cp
    require(
        world_size % model_size == 0,
        FORMAT,
        "megatron.world-size",
        f"world size {world_size} is not divisible by tp × pp × cp = {model_size}",
    )
    dp = world_size // model_size
    # TransformerConfig.__post_init__
    require(
        heads > 0 and heads % tp == 0,
        FORMAT,
        "megatron.heads-divisible-by-tp",
        f"num_attention_heads ({heads}) must be a multiple of tensor_model_parallel_size ({tp})",
    )
    if "--multi-latent-attention" not in f:
        require(
            groups % tp == 0,
            FORMAT,
            "megatron.query-groups-divisible-by-tp",
            f"num_query_groups ({groups}) must be a multiple of tensor_model_parallel_size ({tp})",
        )
    _check_context_parallel(
        args, cp, heads=heads, groups=groups, tp=tp, mla="--multi-latent-attention" in f
    )
    # validate_args: seq-length multiple of 2 × cp
    if cp > 1:
        require(
            seq % (2 * cp) == 0,
            FORMAT,
            "megatron.seq-length-divisible-by-2cp",
            f"seq-length ({seq}) should be a multiple of 2 × context-parallel-size ({2 * cp})",
        )
    require(
        int_flag(f, "--max-position-embeddings", 0) >= seq,
        FORMAT,
        "megatron.max-position-embeddings",
        "max_position_embeddings must be >= seq_length",
    )
    # core_transformer_config_from_args: "Common attention only support rope_type="rope""
    require(
        f.get("--rope-type") in (None, "rope") or "--multi-latent-attention" in f,
        FORMAT,
        "megatron.rope-type-common-attention",
        f"common attention only supports rope_type rope, got {f.get('--rope-type')}",
    )
    if f.get("--use-rope-scaling") or "--rotary-base" in f:
        require(
            f.get("--position-embedding-type") == "rope",
            FORMAT,
            "megatron.rotary-flags-need-rope",
            "--rotary-base and --use-rope-scaling act only with --position-embedding-type rope",
        )
    # microbatch calculator: global batch = micro × dp × number of micro-batches
    require(
        mbs > 0 and gbs % (mbs * dp) == 0,
        FORMAT,
        "megatron.global-batch-divisible",
        f"global batch size ({gbs}) is not divisible by micro batch size ({mbs}) times "
        f"data parallel size ({dp})",
    )
    # experts
    if ep > 1:
        require(
            num_experts > 0,
            FORMAT,
            "megatron.expert-parallel-needs-moe",
            "num_experts must be set to use expert model parallelism",
        )
        require(
            num_experts % ep == 0,
            FORMAT,
            "megatron.experts-divisible-by-ep",
            f"number of experts ({num_experts}) should be a multiple of expert model "
            f"parallel size ({ep})",
        )
        require(
            "--fp16" not in f,
            FORMAT,
            "megatron.expert-parallel-fp16",
            "expert parallelism is not supported with fp16 training",
        )
        # ModelParallelConfig.__post_init__
        require(
            tp == 1 or sp,
            FORMAT,
            "megatron.expert-and-tensor-parallel-need-sp",
            "when using expert parallelism and tensor parallelism, sequence parallelism "
            "must be used",
        )
    # parallel_state.initialize_model_parallel: the expert grid etp × ep × pp tiles the world
    require(
        world_size % (etp * ep * pp) == 0,
        FORMAT,
        "megatron.expert-grid",
        f"world size {world_size} is not divisible by expert_tensor × expert × pipeline "
        f"= {etp} × {ep} × {pp}",
    )
    # sequence parallelism needs tensor parallelism (validate_args turns it off at tp = 1)
    require(
        not sp or tp > 1,
        FORMAT,
        "megatron.sequence-parallel-needs-tp",
        "sequence parallelism needs tensor-model-parallel-size > 1 (Megatron drops it)",
    )
    require(
        not (f.get("--bf16") and f.get("--fp16")),
        FORMAT,
        "megatron.bf16-or-fp16",
        "--bf16 and --fp16 are exclusive",
    )
    if f.get("--moe-grouped-gemm"):
        require(
            bool(f.get("--bf16")),
            FORMAT,
            "megatron.grouped-gemm-needs-bf16",
            "GroupedGEMM for MoE only supports bf16",
        )
    if "--moe-layer-freq" in f:
        pattern = expand_layer_pattern(str(f["--moe-layer-freq"]))
        require(
            len(pattern) == num_layers,
            FORMAT,
            "megatron.moe-layer-freq-length",
            f"--moe-layer-freq has {len(pattern)} entries for {num_layers} layers",
        )
    _check_pipeline(f, num_layers=num_layers, pp=pp, gbs=gbs, mbs=mbs, dp=dp)
    _check_recompute(f)
    # FSDP2 (validate_args, `if args.use_torch_fsdp2`)
    if fsdp:
        require(
            pp == 1,
            FORMAT,
            "megatron.fsdp2-no-pipeline",
            "--use-torch-fsdp2 is not supported with pipeline parallelism (ZeRO-2/3 plans "
            "with pipeline stages cannot be launched with Megatron)",
        )
        require(
            ep == 1,
            FORMAT,
            "megatron.fsdp2-no-expert-parallel",
            "--use-torch-fsdp2 is not supported with expert parallelism",
        )
        require(
            "--use-distributed-optimizer" not in f,
            FORMAT,
            "megatron.fsdp2-no-distributed-optimizer",
            "--use-torch-fsdp2 is not supported with MCore's distributed optimizer",
        )
        require(
            bool(f.get("--untie-embeddings-and-output-weights")),
            FORMAT,
            "megatron.fsdp2-untied-embeddings",
            "--use-torch-fsdp2 requires --untie-embeddings-and-output-weights",
        )
        require(
            "--fp16" not in f,
            FORMAT,
            "megatron.fsdp2-no-fp16",
            "--use-torch-fsdp2 not supported with fp16",
        )
        require(
            bool(f.get("--no-gradient-accumulation-fusion")),
            FORMAT,
            "megatron.fsdp2-no-grad-accumulation-fusion",
            "--use-torch-fsdp2 is not supported with gradient accumulation fusion",
        )
        require(
            env.get("CUDA_DEVICE_MAX_CONNECTIONS") != "1",
            FORMAT,
            "megatron.fsdp2-device-connections",
            "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS larger than one",
        )
    elif tp > 1 or cp > 1:
        require(
            env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1",
            FORMAT,
            "megatron.cuda-device-max-connections",
            "tensor or context parallelism requires CUDA_DEVICE_MAX_CONNECTIONS=1",
        )
    if f.get("--overlap-param-gather"):
        require(
            bool(f.get("--use-distributed-optimizer")),
            FORMAT,
            "megatron.overlap-param-gather",
            "--overlap-param-gather only supported with distributed optimizer",
        )
        require(
            bool(f.get("--overlap-grad-reduce")),
            FORMAT,
            "megatron.overlap-param-gather",
            "must use --overlap-param-gather with --overlap-grad-reduce",
        )


def _check_pipeline(
    f: Mapping[str, str | bool], *, num_layers: int, pp: int, gbs: int, mbs: int, dp: int
) -> None:
    per_vstage = f.get("--num-layers-per-virtual-pipeline-stage")
    vstages = f.get("--num-virtual-stages-per-pipeline-rank")
    layout = f.get("--pipeline-model-parallel-layout")
    first = f.get("--decoder-first-pipeline-num-layers")
    last = f.get("--decoder-last-pipeline-num-layers")
    given = [x for x in (per_vstage, vstages, layout) if x is not None]
    require(
        len(given) <= 1,
        FORMAT,
        "megatron.virtual-pipeline-options-exclusive",
        "no more than one of --num-layers-per-virtual-pipeline-stage, "
        "--num-virtual-stages-per-pipeline-rank, --pipeline-model-parallel-layout",
    )
    vpp = 1
    if layout is not None:
        require(
            first is None and last is None,
            FORMAT,
            "megatron.layout-exclusive",
            "pipeline_model_parallel_layout cannot be set with other pipeline layout arguments",
        )
        stages = parse_layout(str(layout))
        require(
            len(stages) % pp == 0,
            FORMAT,
            "megatron.layout-stages",
            f"the layout has {len(stages)} stages, not a multiple of "
            f"pipeline_model_parallel_size ({pp})",
        )
        vpp = len(stages) // pp
        flat = [s for stage in stages for s in stage]
        ok_symbols = set(flat) <= {"E", "t", "L"}
        require(
            ok_symbols
            and flat[:1] == ["E"]
            and flat[-1:] == ["L"]
            and flat.count("E") == 1
            and flat.count("L") == 1,
            FORMAT,
            "megatron.layout-embedding-and-loss",
            "the layout must start with the embedding and end with the loss, once each",
        )
        # the flattened layout runs in layer order: chunk order vp-major, as Megatron flattens
        require(
            flat.count("t") == num_layers,
            FORMAT,
            "megatron.layout-layer-count",
            f"the layout holds {flat.count('t')} decoder layers, the model has {num_layers}",
        )
    elif per_vstage is not None:
        n = int(str(per_vstage))
        require(
            first is None and last is None,
            FORMAT,
            "megatron.uneven-pipeline-needs-virtual-stages",
            "please use --num-virtual-stages-per-pipeline-rank to specify virtual pipeline "
            "parallel degree when enable uneven pipeline parallelism",
        )
        require(
            num_layers % pp == 0,
            FORMAT,
            "megatron.layers-divisible-by-pipeline",
            "number of layers of the model must be divisible by pipeline model parallel size",
        )
        require(
            (num_layers // pp) % n == 0,
            FORMAT,
            "megatron.layers-divisible-by-vstage",
            "number of layers per pipeline stage must be divisible by number of layers per "
            "virtual pipeline stage",
        )
        vpp = (num_layers // pp) // n
    elif vstages is not None:
        vpp = int(str(vstages))
    if layout is None and (first is not None or last is not None):
        remaining, middle_ranks = num_layers, pp
        for name, value in (("first", first), ("last", last)):
            if value is None:
                continue
            n = int(str(value))
            require(
                n > 0,
                FORMAT,
                "megatron.uneven-pipeline",
                f"num_layers_in_{name}_pipeline_stage must be larger than 0",
            )
            require(
                n % vpp == 0,
                FORMAT,
                "megatron.uneven-pipeline-by-vpp",
                f"number of layers at {name} stage: {n} must be divisible by virtual "
                f"pipeline parallel degree {vpp}",
            )
            remaining -= n
            middle_ranks -= 1
        require(
            remaining >= 0,
            FORMAT,
            "megatron.uneven-pipeline",
            "first and last stages hold more layers than the model has",
        )
        if middle_ranks > 0:
            require(
                remaining % middle_ranks == 0,
                FORMAT,
                "megatron.uneven-pipeline-middle",
                f"number of layers at middle stage: {remaining} must be divisible by the "
                f"middle pipeline model parallel size {middle_ranks}",
            )
            require(
                (remaining // middle_ranks) % vpp == 0,
                FORMAT,
                "megatron.uneven-pipeline-by-vpp",
                "number of layers on each middle pipeline rank must be divisible by the "
                "virtual pipeline parallel degree",
            )
        else:
            require(
                remaining == 0,
                FORMAT,
                "megatron.uneven-pipeline",
                "with no middle stages the first and last stages must hold every layer",
            )
    elif f.get("--enable-vocab-parallel"):
        # the sail-sg fork spreads a remainder itself (`get_num_layers_to_build`); its
        # validate_args: "--final-stage-num-layers must be between 0 and the number of layers"
        final = f.get("--final-stage-num-layers")
        require(
            pp > 1
            and (not f.get("--enable-layer-redistribution") or final is not None)
            and (final is None or 0 <= int(str(final)) <= num_layers),
            FORMAT,
            "megatron.vocab-parallel",
            "--enable-vocab-parallel needs pipeline-model-parallel size > 1, and "
            "--enable-layer-redistribution a --final-stage-num-layers between 0 and the "
            "number of layers",
        )
    elif layout is None and per_vstage is None and pp > 1:
        require(
            num_layers % (pp * vpp) == 0,
            FORMAT,
            "megatron.layers-divisible-by-pipeline",
            "number of layers should be divisible by the pipeline-model-parallel size",
        )
    if vpp > 1:
        # validate_args: interleaving needs pp > 1 (p2p overlap is on by default)
        require(
            pp > 1,
            FORMAT,
            "megatron.interleaving-needs-pipeline",
            "when interleaved schedule is used, pipeline-model-parallel size should be "
            "greater than 1",
        )
        # schedules.forward_backward_pipelining_with_interleaving, with Megatron's default
        # microbatch group size per virtual stage (= pp)
        m = gbs // (mbs * dp) if mbs * dp else 0
        require(
            m >= pp and m % pp == 0,
            FORMAT,
            "megatron.interleaved-microbatches",
            f"the interleaved schedule runs micro-batches in groups of pp = {pp}: the "
            f"{m} micro-batches per step must be a multiple of {pp}",
        )


def _check_recompute(f: Mapping[str, str | bool]) -> None:
    granularity = f.get("--recompute-granularity")
    method = f.get("--recompute-method")
    num = f.get("--recompute-num-layers")
    if granularity is None:
        require(
            method is None and num is None,
            FORMAT,
            "megatron.recompute-flags",
            "--recompute-method and --recompute-num-layers need --recompute-granularity",
        )
        return
    require(
        granularity in ("full", "selective"),
        FORMAT,
        "megatron.recompute-flags",
        "recompute granularity must be full or selective",
    )
    if granularity == "selective":
        require(
            method is None,
            FORMAT,
            "megatron.recompute-flags",
            "recompute method is not yet supported for selective recomputing granularity",
        )
        require(
            num is None,
            FORMAT,
            "megatron.recompute-flags",
            "when using recompute_granularity selective recompute_num_layers must be None",
        )
    else:
        require(
            method in ("uniform", "block"),
            FORMAT,
            "megatron.recompute-flags",
            "using recompute_granularity full so recompute_method must be block or uniform",
        )
        require(
            num is not None and int(str(num)) >= 1,
            FORMAT,
            "megatron.recompute-flags",
            "when using recompute_granularity full recompute_num_layers must be set",
        )


# ---- the export --------------------------------------------------------------------------
def export(ctx: ExportContext) -> ExportResult:
    plan, workload = ctx.training_plan(FORMAT)
    world = plan.parallelism.world_size
    layout = plan_node_layout(FORMAT, ctx.cluster, plan)
    args, env, notes = build_args(ctx.model, plan, workload)
    check_args(args, world_size=world, env=env)
    launcher = [*torchrun_args(layout), ENTRYPOINT]
    exports = "\n".join(f"export {k}={v}" for k, v in env.items())
    ranks = block_notes(layout)
    placement = "".join(f"#   {line}\n" for line in ranks)
    required = (
        ': "${NODE_RANK:?set NODE_RANK on every node: the node ranks of each group above}"\n'
        ': "${MASTER_ADDR:?set MASTER_ADDR to the address of node rank 0}"\n'
        if layout.blocks
        else ""
    )
    content = (
        "#!/usr/bin/env bash\n"
        f"# Megatron-LM launch of meshplan plan {ctx.plan_id or ''} ({world} GPUs: "
        f"{layout.num_nodes} node(s) × {layout.gpus_per_node}).\n"
        "# Run from the Megatron-LM checkout on every node (or through the slurm export).\n"
        + (
            f"# Nodes by group (pipeline stages run in node-rank order):\n{placement}"
            if ranks
            else ""
        )
        + "set -euo pipefail\n"
        f"{exports}\n"
        + (
            ': "${MASTER_PORT:=29500}"\n'
            if layout.blocks
            else ': "${MASTER_ADDR:=127.0.0.1}" "${MASTER_PORT:=29500}" "${JOB_ID:=meshplan}"\n'
        )
        + required
        + "\n"
        + shell_command([*launcher, *args])
        + "\n"
    )
    notes = [*notes, *ranks]
    return ExportResult(
        format=FORMAT,
        filename="launch_megatron.sh",
        content=content,
        args=args,
        env=env,
        notes=[f"args are the arguments of {ENTRYPOINT} (Megatron-LM)", *notes],
    )
