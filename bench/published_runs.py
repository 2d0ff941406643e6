"""Turn the published, measured training runs in `bench/data/calibration/published_runs.jsonl`
into meshplan requests and measured step times.

Each row becomes a `Case`: model, cluster, workload, the parallel settings the source states
(`fixed`, handed to the search as constraints so unknown settings such as the micro-batch
size are chosen by the planner, as the authors tuned them), and the measured seconds per
step derived from what the source gives:

- seconds per iteration when the source reports it (Korthikanti et al. 2022, Table 5);
- TFLOP/s per GPU under the source's own FLOP formula otherwise:
  Narayanan et al. 2021 eq. (3), `96·B·s·l·h²·(1 + s/6h + V/16lh)` (counts the recomputed
  forward); Megatron-Core README: model FLOPs, Megatron's `num_floating_point_operations`,
  `72·B·s·l·h²·(1 + s/6h + V/12lh)` for a GPT layer. step = F / (TFLOP/s · 1e12 · GPUs).

MoE rows (Liu et al. 2025, "MoE Parallel Folding", arXiv 2504.14960, Table 1 + Appendix
Table 3) report MFU against 989.5 TFLOP/s under Megatron-LM's MoE FLOP count
(`num_floating_point_operations` in megatron/training/training.py, the 2024-2025 releases the
paper ran): F = 12·B·s·L·h²·[(1 + g/a + s/h)·(a·d/h) + k·(f_e/h)·3/2 + (f_s/h)·3/2
+ V/(2·L·h)] for SwiGLU experts (k routed experts of width f_e, shared width f_s, no router
term); step = F / (MFU · 989.5e12 · GPUs) (`megatron_moe_flops`, `moe_case`).

Rows that cannot be represented yet are returned with the reason instead of being dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED_RUNS = ROOT / "bench" / "data" / "calibration" / "published_runs.jsonl"
"""The calibration set, carried in the repository (provenance and caveats in its README)."""

ACCELERATORS = {"A100-SXM4-80GB": "a100-80gb", "H100-SXM5-80GB": "h100-sxm"}


def load_rows(path: Path = PUBLISHED_RUNS) -> list[dict[str, Any]]:
    """Every row of the calibration set; a missing file is an error, never an empty set (the
    golden tests must not pass on nothing)."""
    if not path.is_file():
        raise FileNotFoundError(f"the calibration set {path} is missing from the repository")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class Case:
    row_id: int
    label: str
    source: str
    request: dict[str, Any] | None = None
    """{"model", "cluster", "workload", "constraints"} for the search, or None."""
    measured_step_s: float | None = None
    measured_mfu: float | None = None
    """MFU as the source reports it (model FLOPs, the source's own peak)."""
    status: str = "ok"
    """"ok" (the run fitted) or "OOM"."""
    reason: str | None = None
    """Why the row cannot be represented (then request is None)."""
    notes: list[str] = field(default_factory=list)
    unverified_fields: list[str] = field(default_factory=list)
    """The row's fields whose transcription or alignment the dataset flags as uncertain."""


def _source_key(row: dict[str, Any]) -> str:
    src = row["source"]
    if src.startswith("Narayanan"):
        return "narayanan2021"
    if src.startswith("Korthikanti"):
        return "korthikanti2022"
    if "MoE Parallel Folding" in src or "Liu" in src:
        return "moe_folding2025"
    return "megatron_core_readme"


def gpt_model(row: dict[str, Any], *, dropout: bool) -> dict[str, Any]:
    """A GPT-style explicit model spec (plain GeLU MLP, LayerNorm, biases, learned
    positions, tied embeddings) from a row's architecture fields."""
    h = row["hidden_size"]
    return {
        "name": row["model"],
        "num_layers": row["layers"],
        "hidden_size": h,
        "num_attention_heads": row["num_heads"],
        "num_kv_heads": row["num_kv_heads"] or row["num_heads"],
        "ffn_hidden_size": row["ffn_hidden_size"] or 4 * h,
        "vocab_size": row["vocab_size"],
        "gated_mlp": False,
        "tie_embeddings": True,
        "norm": "layernorm",
        "attention_bias": True,
        "mlp_bias": True,
        "position_embedding": "learned",
        "max_position_embeddings": row["seq_len"],
        "dropout": dropout,
    }


def _shape(row: dict[str, Any]) -> tuple[int, int, int, int, int]:
    """(global batch B, sequence s, layers l, hidden h, vocabulary V) of a row."""
    keys = ("global_batch_seqs", "seq_len", "layers", "hidden_size", "vocab_size")
    b, s, n_layers, h, v = (int(row[k]) for k in keys)
    return b, s, n_layers, h, v


def narayanan_flops(row: dict[str, Any]) -> float:
    """Narayanan et al. 2021 eq. (3) with the paper's 96 (recompute counted)."""
    b, s, n_layers, h, v = _shape(row)
    return 96 * b * s * n_layers * h * h * (1 + s / (6 * h) + v / (16 * n_layers * h))


def megatron_model_flops(row: dict[str, Any]) -> float:
    """Model FLOPs per step for a GPT layer, Korthikanti et al. 2022 §6 / Megatron-Core."""
    b, s, n_layers, h, v = _shape(row)
    return 72 * b * s * n_layers * h * h * (1 + s / (6 * h) + v / (12 * n_layers * h))


def _zero_stage(text: str | None) -> int | None:
    if text is None:
        return None
    t = text.lower()
    if "zero-3" in t or "fsdp" in t:
        return 3
    if "distributed optimizer" in t or "zero-1" in t:
        return 1
    if t.startswith("none"):
        return 0
    return None


def _recompute(text: str | None) -> str | None:
    if text is None:
        return None
    t = text.lower()
    if t.startswith("full"):
        return "full"
    if t.startswith("selective"):
        return "selective"
    if t.startswith("none"):
        return "none"
    return None


MOE_DEFAULT_VOCAB = {"Mixtral": 32768}
"""Vocabulary of a model family when the row leaves it null (mistralai/Mixtral-8x22B-v0.1
config.json: 32768)."""
MOE_DEFAULT_TOP_K = 2
"""Llama3-8x70B's top_k is not stated: 2, as in the Mixtral-style upcycling it follows."""
MOE_PEAK_FLOPS = 989.5e12
"""The paper's H100 BF16 dense peak (the MFU basis)."""
MOE_STRATEGIES = {
    "FSDP": 3,
    "FSDP + EP": 3,
    "TP + EP + DP": 1,
    "MCore": 1,
    "MCore w/ Folding": 1,
}
"""ZeRO stage per strategy: FSDP shards parameters, gradients and optimizer states (ZeRO-3);
the TP + EP + DP baseline uses ZeRO-1 (paper text); Megatron-Core's distributed optimizer is
ZeRO-1."""


MOE_FOLDING_MICRO_BATCH = 1
"""The rows give no micro-batch size. 1: Megatron-LM's MoE recipes (examples/mixtral) train
with --micro-batch-size 1 at a global batch of 256, and only per-micro-batch parameter
gathers at b = 1 explain the FSDP rows' measured 2-10 % MFU (left to the planner, the search
picks b = 4-16 with full recompute for them and predicts rows 81 / 86 / 91 2.5-4.7x faster
than measured)."""
MOE_FOLDING_RECOMPUTE = "none"
"""No activation recompute: the rows name none (`recompute` null), and Megatron-LM's
default (`--recompute-granularity` unset) keeps every activation. Of the two runs the paper
reports as out of memory, the one that fits only under recompute then comes out infeasible (row
98, Llama3-8x70B TP8 EP8 DP32 ZeRO-1: ~70 GiB of model states per GPU leave no room for the
activations; the search used to pick full recompute for it)."""
FRAMEWORKS = {
    "Megatron-LM (2021)": "megatron_lm",
    "Megatron-LM (2022)": "megatron_lm",
    "Megatron-LM (2021) / DeepSpeed ZeRO-3": "deepspeed",
    "Megatron-Core r0.8.0": "megatron_core",
    "Megatron-Core (PyTorch 2.5, CUDA 12.6)": "megatron_core",
}
"""The framework profile (`cost_models.frameworks`) of each row's `framework` field: the
2021–2022 Megatron-LM code base, DeepSpeed's ZeRO-3 (Narayanan et al. 2021 Table 2 ran it
for the ZeRO-3 baseline), Megatron-Core (the README rows and the MoE Folding paper, whose
FSDP baselines run Megatron-Core's own FSDP)."""


def framework_of(row: dict[str, Any]) -> str | None:
    """The framework profile of a row, None when the row's framework is not mapped."""
    return FRAMEWORKS.get(row.get("framework") or "")


FRAMEWORK_SETTINGS: dict[str, dict[str, dict[str, Any]]] = {
    "Megatron-LM (2021) / DeepSpeed ZeRO-3": {"deepspeed": {"elementwise_traffic": 1.0}},
}
"""Profile settings a row's framework states: Narayanan et al.'s ZeRO-3 baseline ran
DeepSpeed's ZeRO-3 on Megatron-LM's GPT model code (its fused norm, bias-GeLU and
bias-dropout-add kernels), not on eager Hugging Face modules (the `deepspeed` profile's
default, as meshplan's DeepSpeed export launches AutoTP)."""


def framework_config(row: dict[str, Any]) -> dict[str, Any] | None:
    """The cost-model config carrying a row's framework settings, or None."""
    settings = FRAMEWORK_SETTINGS.get(row.get("framework") or "")
    return {"frameworks": settings} if settings else None


def _moe_strategy(label: str) -> str | None:
    if "[" not in label:
        return None
    return label[label.index("[") + 1 : label.rindex("]")].strip()


def moe_model(row: dict[str, Any]) -> dict[str, Any]:
    """An explicit MoE model spec (SwiGLU experts, RMSNorm, rotary, untied head; every layer
    MoE) from a row's architecture fields; Qwen2-MoE adds QKV biases and the shared-expert
    gate (Qwen2-57B-A14B config.json)."""
    name = row["model"].split("[")[0].strip()
    vocab = row["vocab_size"] or next(
        (v for family, v in MOE_DEFAULT_VOCAB.items() if name.startswith(family)), None
    )
    qwen = name.startswith("Qwen2")
    moe: dict[str, Any] = {
        "num_experts": row["moe_num_experts"],
        "top_k": row["moe_top_k"] or MOE_DEFAULT_TOP_K,
        "expert_ffn_hidden_size": row["moe_expert_ffn_size"],
    }
    if row.get("moe_shared_experts"):
        moe["num_shared_experts"] = row["moe_shared_experts"]
        moe["shared_expert_ffn_hidden_size"] = (
            row["moe_shared_expert_ffn_size"] // row["moe_shared_experts"]
        )
        moe["shared_expert_gate"] = qwen
    return {
        "name": name,
        "num_layers": row["layers"],
        "hidden_size": row["hidden_size"],
        "num_attention_heads": row["num_heads"],
        "num_kv_heads": row["num_kv_heads"],
        "ffn_hidden_size": row["ffn_hidden_size"] or row["moe_expert_ffn_size"],
        "vocab_size": vocab,
        "gated_mlp": True,
        "tie_embeddings": False,
        "norm": "rmsnorm",
        "attention_bias": qwen,
        "moe": moe,
    }


def megatron_moe_flops(model: dict[str, Any], global_batch: int, seq: int) -> float:
    """Megatron-LM's model FLOPs per step for an MoE model (module docstring), d = h/a."""
    h, n_layers = model["hidden_size"], model["num_layers"]
    a, g = model["num_attention_heads"], model["num_kv_heads"] or model["num_attention_heads"]
    moe = model["moe"]
    shared = moe.get("num_shared_experts", 0) * moe.get("shared_expert_ffn_hidden_size", 0)
    attention = 1 + g / a + seq / h
    mlp = moe["expert_ffn_hidden_size"] / h * moe["top_k"] * 1.5
    logit = float(model["vocab_size"]) / (2 * n_layers * h)
    return float(
        12.0 * global_batch * seq * n_layers * h * h * (attention + mlp + shared / h * 1.5 + logit)
    )


def moe_case(row: dict[str, Any], case: Case) -> Case:
    """An MoE Folding row as a request: the row's degrees fixed, ZeRO per strategy, expert
    tensor = the row's etp, else the attention tensor degree (Megatron-LM's default
    `--expert-tensor-parallel-size`, None → tensor size) when that layout exists, else left
    to the search; capacity factor 1 on balanced loads (the paper's benchmarking setting);
    the source's setup read once for all its rows (`MOE_FOLDING_MICRO_BATCH`,
    `MOE_FOLDING_RECOMPUTE`: micro-batch 1, no activation recompute) and its framework
    (`FRAMEWORKS`); virtual pipeline left to the search."""
    case.unverified_fields = list(row.get("unverified_fields") or [])
    strategy = _moe_strategy(row["model"])
    if strategy not in MOE_STRATEGIES:
        case.reason = f"unknown MoE strategy {strategy!r}"
        return case
    model = moe_model(row)
    if model["vocab_size"] is None:
        case.reason = "the row gives no vocabulary size"
        return case
    tp, pp, cp = row["tp"] or 1, row["pp"] or 1, row["cp"] or 1
    ep = row["ep"] or 1
    n = row["num_gpus"]
    dp = row["dp"] or n // (tp * pp * cp)
    fixed: dict[str, Any] = {
        "tensor": tp,
        "pipeline": pp,
        "data": dp,
        "context": cp,
        "expert": ep,
        "zero_stage": MOE_STRATEGIES[strategy],
        "flash_attention": True,
        "micro_batch_size": MOE_FOLDING_MICRO_BATCH,
        "recompute": MOE_FOLDING_RECOMPUTE,
    }
    framework = framework_of(row)
    if framework is not None:
        fixed["framework"] = framework
    grid = dp * cp * tp
    if row["etp"]:
        fixed["expert_tensor"] = row["etp"]
    elif not grid % (ep * tp) and not row["moe_expert_ffn_size"] % tp:
        fixed["expert_tensor"] = tp
    else:
        case.notes.append(
            f"etp blank and expert_tensor = tensor ({tp}) does not fit "
            f"expert × expert_tensor | data × context × tensor = {grid}: "
            "expert_tensor left to the search"
        )
        case.unverified_fields.append("etp (blank; chosen by the search)")
    cluster = {
        "node_groups": [
            {
                "accelerator": "h100-sxm",
                "num_nodes": n // row["gpus_per_node"],
                "gpus_per_node": row["gpus_per_node"],
            }
        ]
    }
    workload = {
        "kind": "training",
        "global_batch_size": row["global_batch_seqs"],
        "sequence_length": row["seq_len"],
        "precision": "bf16",
        "moe_routing": {"capacity_factor": 1.0},
    }
    case.request = {
        "model": model,
        "cluster": cluster,
        "workload": workload,
        "constraints": {"fixed": fixed, "memory_headroom_gib": 0.0},
    }
    flops = megatron_moe_flops(model, row["global_batch_seqs"], row["seq_len"])
    if row["mfu_pct"]:
        case.measured_mfu = row["mfu_pct"] / 100
        case.measured_step_s = flops / (case.measured_mfu * MOE_PEAK_FLOPS * n)
    elif case.status != "OOM":
        case.reason = "no measured MFU"
        case.request = None
    return case


def to_case(row: dict[str, Any]) -> Case:
    key = _source_key(row)
    case = Case(
        row_id=row["row_id"], label=row["model"], source=key, status=row.get("status") or "ok"
    )
    if row.get("moe_num_experts"):
        return moe_case(row, case)
    if row["gpu_type"] not in ACCELERATORS:
        case.reason = f"accelerator {row['gpu_type']!r} not mapped"
        return case
    if row["tp"] is None or row["pp"] is None or row["dp"] is None:
        case.reason = "the source does not give the parallel configuration (TP/PP/DP)"
        return case
    if row["global_batch_seqs"] is None:
        case.reason = "the source does not give the global batch size"
        return case

    fixed: dict[str, Any] = {
        "tensor": row["tp"],
        "pipeline": row["pp"],
        "data": row["dp"],
        "context": row["cp"] or 1,
    }
    if row["micro_batch_size"]:
        fixed["micro_batch_size"] = row["micro_batch_size"]
    if row["vpp"]:
        fixed["virtual_pipeline"] = row["vpp"]
        fixed["pipeline_schedule"] = "interleaved_1f1b"
    zero = _zero_stage(row["zero_or_dist_opt"])
    if zero is not None:
        fixed["zero_stage"] = zero
    recompute = _recompute(row["recompute"])
    if recompute is not None:
        fixed["recompute"] = recompute
    if row["sequence_parallel"] is not None and row["tp"] > 1:
        fixed["sequence_parallel"] = bool(row["sequence_parallel"])
    framework = framework_of(row)
    if framework is not None:
        fixed["framework"] = framework

    era_2021_2022 = key in ("narayanan2021", "korthikanti2022")
    # Megatron-LM 2021/2022 ran without fused flash attention. Every source used Megatron's
    # GPT defaults, which keep hidden and attention dropout at 0.1.
    fixed["flash_attention"] = not era_2021_2022
    model = gpt_model(row, dropout=True)

    inter = 25.0 if row["gpu_type"].startswith("A100") else None  # Selene: 8×200 Gb/s HDR per node
    cluster = {
        "node_groups": [
            {
                "accelerator": ACCELERATORS[row["gpu_type"]],
                "num_nodes": row["num_gpus"] // row["gpus_per_node"],
                "gpus_per_node": row["gpus_per_node"],
                "inter_node_bandwidth_gb_s": inter,
            }
        ]
    }
    workload = {
        "kind": "training",
        "global_batch_size": row["global_batch_seqs"],
        "sequence_length": row["seq_len"],
        "precision": "bf16",
    }
    case.request = {
        "model": model,
        "cluster": cluster,
        "workload": workload,
        "constraints": {"fixed": fixed, "memory_headroom_gib": 0.0},
    }
    settings = framework_config(row)
    if settings is not None:
        case.request["cost_model"] = {"name": "analytical", "config": settings}
    n = row["num_gpus"]
    if row["sec_per_iter"]:
        case.measured_step_s = float(row["sec_per_iter"])
    elif row["tflops_per_gpu"]:
        flops = narayanan_flops(row) if key == "narayanan2021" else megatron_model_flops(row)
        case.measured_step_s = flops / (row["tflops_per_gpu"] * 1e12 * n)
    if row["mfu_pct"]:
        case.measured_mfu = row["mfu_pct"] / 100
    elif case.measured_step_s:
        peak = (row["peak_tflops_per_gpu_basis"] or 312) * 1e12
        case.measured_mfu = megatron_model_flops(row) / (case.measured_step_s * n * peak)
    if case.measured_step_s is None and case.status != "OOM":
        case.reason = "no measured time, throughput or FLOP rate"
        case.request = None
    return case


def load_cases() -> list[Case]:
    return [to_case(row) for row in load_rows()]
