"""Run the serving peers (AIConfigurator, llm-analysis) on the issue-5 cases and write their raw
and normalised figures to `bench/data/serving_peers.json`.

This script is NOT run by the project's venv or CI: the peers are no project dependency. It runs
in a separate venv that has them:

    python3 -m venv /work/peers-venv
    /work/peers-venv/bin/pip install aiconfigurator llm-analysis
    HF_HUB_OFFLINE=1 /work/peers-venv/bin/python bench/serving_peers_collect.py

Everything runs offline on CPU: AIConfigurator 0.12 ships its measured ("silicon") kernel
databases inside the `aiconfigurator-core` wheel (`aiconfigurator_core/systems/data/<system>/
<op>/<backend>/<version>/*.parquet`, h100_sxm and h200_sxm included) and the model configs it
needs (`aiconfigurator_core/model_configs/<org>--<name>_config.json`); llm-analysis is pure
Python and gets model shapes from a JSON file we write (it would otherwise ask the HF hub).

`bench/serving_vs_peers.py` reads the JSON; it does not import this file.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "data" / "serving_peers.json"
BIN = Path(sys.executable).parent
AIC = str(BIN / "aiconfigurator")

# ---------------------------------------------------------------------------------------------
# Case definitions (the same ids appear in serving_vs_peers.py's CASES through the JSON file).
# ---------------------------------------------------------------------------------------------

LLAMA8B = "meta-llama/Meta-Llama-3.1-8B"
LLAMA70B = "meta-llama/Meta-Llama-3.1-70B"
QWEN235B = "Qwen/Qwen3-235B-A22B"
QWEN30B = "Qwen/Qwen3-30B-A3B"

CASES: list[dict[str, Any]] = [
    {
        "id": "llama3.1-8b_1xh100_b1_1024-256",
        "kind": "fixed_batch",
        "model": "llama3-8b",
        "hf_model": LLAMA8B,
        "accelerator": "h100-sxm",
        "aic_system": "h100_sxm",
        "num_gpus": 1,
        "parallelism": {"tensor": 1, "pipeline": 1, "expert": 1, "attention_dp": 1},
        "batch": 1,
        "prompt_tokens": 1024,
        "output_tokens": 256,
        "precision": "bf16",
        "kv_cache_precision": "bf16",
    },
    {
        "id": "llama3.1-8b_1xh100_b16_1024-256",
        "kind": "fixed_batch",
        "model": "llama3-8b",
        "hf_model": LLAMA8B,
        "accelerator": "h100-sxm",
        "aic_system": "h100_sxm",
        "num_gpus": 1,
        "parallelism": {"tensor": 1, "pipeline": 1, "expert": 1, "attention_dp": 1},
        "batch": 16,
        "prompt_tokens": 1024,
        "output_tokens": 256,
        "precision": "bf16",
        "kv_cache_precision": "bf16",
    },
    {
        "id": "llama3.1-70b_8xh100_slo_ttft1000_tpot50_1024-256",
        "kind": "slo_search",
        "model": "llama3-70b",
        "hf_model": LLAMA70B,
        "accelerator": "h100-sxm",
        "aic_system": "h100_sxm",
        "num_gpus": 8,
        "prompt_tokens": 1024,
        "output_tokens": 256,
        "precision": "bf16",
        "kv_cache_precision": "bf16",
        "slo": {"ttft_ms": 1000, "tpot_ms": 50},
        "note": (
            "The issue gives no lengths for this case; 1024/256 is used to match the 8B case. "
            "AIConfigurator's own default lengths (4000/1000) are run as a second variant."
        ),
    },
    {
        "id": "qwen3-235b-a22b_8xh200_ep_slo_ttft1000_tpot50_1024-256",
        "kind": "slo_search",
        "model": "qwen3-235b-a22b",
        "hf_model": QWEN235B,
        "accelerator": "h200",
        "aic_system": "h200_sxm",
        "num_gpus": 8,
        "prompt_tokens": 1024,
        "output_tokens": 256,
        "precision": "bf16",
        "kv_cache_precision": "bf16",
        "slo": {"ttft_ms": 1000, "tpot_ms": 50},
        "note": "bf16 checkpoint (470 GB of weights) over 8 H200 (141 GB each); EP searched by AIC.",
    },
    {
        "id": "qwen3-235b-a22b_8xh200_tp1dp8ep8_b32_1024-256",
        "kind": "fixed_batch",
        "model": "qwen3-235b-a22b",
        "hf_model": QWEN235B,
        "accelerator": "h200",
        "aic_system": "h200_sxm",
        "num_gpus": 8,
        "parallelism": {"tensor": 1, "pipeline": 1, "expert": 8, "attention_dp": 8},
        "batch": 32,
        "batch_note": "per attention-DP rank (AIC --batch-size); 256 concurrent requests in all",
        "prompt_tokens": 1024,
        "output_tokens": 256,
        "precision": "bf16",
        "kv_cache_precision": "bf16",
    },
    {
        "id": "qwen3-235b-a22b_8xh200_tp8ep8_b16_1024-256",
        "kind": "fixed_batch",
        "model": "qwen3-235b-a22b",
        "hf_model": QWEN235B,
        "accelerator": "h200",
        "aic_system": "h200_sxm",
        "num_gpus": 8,
        "parallelism": {"tensor": 8, "pipeline": 1, "expert": 8, "attention_dp": 1},
        "batch": 16,
        "prompt_tokens": 1024,
        "output_tokens": 256,
        "precision": "bf16",
        "kv_cache_precision": "bf16",
    },
    {
        "id": "qwen3-30b-a3b_1xh200_b16_1024-256",
        "kind": "fixed_batch",
        "model": "qwen3-30b-a3b",
        "hf_model": QWEN30B,
        "accelerator": "h200",
        "aic_system": "h200_sxm",
        "num_gpus": 1,
        "parallelism": {"tensor": 1, "pipeline": 1, "expert": 1, "attention_dp": 1},
        "batch": 16,
        "prompt_tokens": 1024,
        "output_tokens": 256,
        "precision": "bf16",
        "kv_cache_precision": "bf16",
        "note": "No qwen3-30b-a3b preset in meshplan's catalog yet (qwen3-235b-a22b exists).",
    },
    {
        "id": "qwen3-30b-a3b_2xh200_dp2ep2_b16_1024-256",
        "kind": "fixed_batch",
        "model": "qwen3-30b-a3b",
        "hf_model": QWEN30B,
        "accelerator": "h200",
        "aic_system": "h200_sxm",
        "num_gpus": 2,
        "parallelism": {"tensor": 1, "pipeline": 1, "expert": 2, "attention_dp": 2},
        "batch": 16,
        "batch_note": "per attention-DP rank; 32 concurrent requests in all",
        "prompt_tokens": 1024,
        "output_tokens": 256,
        "precision": "bf16",
        "kv_cache_precision": "bf16",
    },
]

BACKENDS = ("trtllm", "vllm", "sglang")

# ---------------------------------------------------------------------------------------------
# AIConfigurator
# ---------------------------------------------------------------------------------------------

_NUM = r"(-?[\d,]+(?:\.\d+)?)"
_SUMMARY_KEYS = {
    "TTFT": "ttft_ms",
    "TPOT": "tpot_ms",
    "Request Latency": "request_latency_ms",
    "tokens/s": "tokens_per_s",
    "tokens/s/gpu": "tokens_per_s_per_gpu",
    "tokens/s/user": "tokens_per_s_per_user",
    "seq/s": "seq_per_s",
    "Concurrency": "concurrency",
    "Memory (GPU)": "memory_gb_per_gpu",
    "Context Tokens": "ctx_tokens",
}


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def parse_estimate(stdout: str) -> dict[str, Any]:
    """Pull the summary box and the step totals out of `aiconfigurator cli estimate` output."""
    out: dict[str, Any] = {}
    for line in stdout.splitlines():
        m = re.match(r"^\s{2}([A-Za-z/() ]+?):\s+" + _NUM, line)
        if m and m.group(1).strip() in _SUMMARY_KEYS:
            out[_SUMMARY_KEYS[m.group(1).strip()]] = _num(m.group(2))
        m = re.match(r"^\s{2}Backend:\s+(\S+) \(([^)]+)\)", line)
        if m:
            out["backend"], out["backend_version"] = m.group(1), m.group(2)
        m = re.match(r"^Scheduling: " + _NUM + r" mix steps \+ " + _NUM + " gen-only steps", line)
        if m:
            out["mix_steps"], out["gen_only_steps"] = _num(m.group(1)), _num(m.group(2))
        for label, key in (
            ("Mix Step", "mix_step_ms"),
            ("Gen-Only Step", "gen_only_step_ms"),
            ("Context phase", "context_phase_ms"),
            ("Generation phase", "generation_phase_ms"),
        ):
            m = re.match(r"^" + label + r" \(total = " + _NUM + " ms", line)
            if m:
                out[key] = _num(m.group(1))
    return out


def _summary_box(stdout: str) -> str:
    """The human summary (box + breakdown) without the deprecation/logging lines."""
    keep = [
        ln
        for ln in stdout.splitlines()
        if not re.match(r"^\d\d:\d\d:\d\d \[aiconfigurator\]", ln)
        and "DeprecationWarning" not in ln
        and "sys.exit(main())" not in ln
    ]
    return "\n".join(keep).strip()


def run(cmd: list[str], cwd: Path | None = None) -> tuple[int, str, float]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=env, cwd=cwd, check=False, timeout=1800
    )
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - t0


def _shown(cmd: list[str]) -> str:
    return " ".join(["aiconfigurator", *cmd[1:]])


def aic_estimate(case: dict[str, Any], backend: str, mode: str) -> dict[str, Any]:
    p = case["parallelism"]
    cmd = [
        AIC,
        "cli",
        "estimate",
        "--model-path",
        case["hf_model"],
        "--system",
        case["aic_system"],
        "--backend",
        backend,
        "--isl",
        str(case["prompt_tokens"]),
        "--osl",
        str(case["output_tokens"]),
        "--batch-size",
        str(case["batch"]),
        "--tp-size",
        str(p["tensor"]),
        "--pp-size",
        str(p["pipeline"]),
        "--estimate-mode",
        mode,
        "--log-level",
        "ERROR",
        "--no-color",
        "--detail",
        "time",
    ]
    if p["expert"] > 1 or p["attention_dp"] > 1 or case["model"].startswith("qwen3"):
        cmd += [
            "--attention-dp-size",
            str(p["attention_dp"]),
            "--moe-tp-size",
            str(p["tensor"] * p["attention_dp"] // p["expert"]),
            "--moe-ep-size",
            str(p["expert"]),
        ]
    rc, text, secs = run(cmd)
    rec: dict[str, Any] = {
        "tool": "aiconfigurator",
        "variant": f"estimate {mode} {backend}",
        "backend": backend,
        "mode": mode,
        "command": _shown(cmd),
        "returncode": rc,
        "wall_s": round(secs, 2),
        "raw": _summary_box(text),
    }
    if rc != 0:
        rec["error"] = _summary_box(text)[-2000:]
        return rec
    fig = parse_estimate(text)
    rec["figures"] = fig
    rec["normalised"] = normalise_aic_estimate(case, mode, backend, fig)
    return rec


# Backend-specific TTFT heuristics in aiconfigurator_core/sdk/backends/*.py (0.12.0), quoted
# so the benchmark can undo them: TTFT(agg) = (prefill step · ceil(isl/ctx_tokens) + dispatch)
# · queuing factor.
AIC_TTFT_RULES = {
    "trtllm": {
        "queuing_factor": "min(2 + (ceil(isl*b/ctx_tokens) - 3)/20, 4)  (base_backend.py; 1.9 at b=1)",
        "dispatch_overhead_ms": "0",
    },
    "sglang": {
        "queuing_factor": "same as trtllm (base_backend.py default; 1.9 at b=1)",
        "dispatch_overhead_ms": "0",
    },
    "vllm": {
        "queuing_factor": "1 + log2(b)/8, capped at 2 (1.0 at b=1)  (vllm_backend.py)",
        "dispatch_overhead_ms": "0.8 ms x num_layers (vllm_backend.py)",
    },
}


def normalise_aic_estimate(
    case: dict[str, Any], mode: str, backend: str, fig: dict[str, Any]
) -> dict[str, Any]:
    """Express an estimate in the benchmark's common definitions.

    - `prefill_one_request_ms`: time of the forward pass(es) that prefill ONE request's prompt
      with nothing queued ahead of it (agg: the mix step, which at b=1 holds only that prompt;
      static b=1: the context phase). None where the output does not give it.
    - `prefill_whole_batch_ms`: static mode only: the context phase of all `batch` prompts at once.
    - `ttft_ms_reported`: AIC's own TTFT (agg: per-request prefill x a queuing heuristic, see
      AIC_TTFT_RULES; static: whole-batch prefill).
    - `tpot_ms`: AIC's TPOT = mean decode-step time over the output (agg: weighted mean of mix and
      gen-only steps; static: generation phase / (osl - 1)).
    - `decode_step_ms`: a pure decode step at this batch (agg: gen-only step; static: TPOT).
    - `throughput_tokens_per_s`: output tokens/s of the whole instance(s) as AIC reports it.
    """
    b = case["batch"]
    n: dict[str, Any] = {
        "ttft_ms_reported": fig.get("ttft_ms"),
        "tpot_ms": fig.get("tpot_ms"),
        "throughput_tokens_per_s": fig.get("tokens_per_s"),
        "throughput_tokens_per_s_per_gpu": fig.get("tokens_per_s_per_gpu"),
        "prefill_one_request_ms": None,
        "prefill_whole_batch_ms": None,
        "decode_step_ms": None,
    }
    if mode == "agg":
        n["decode_step_ms"] = fig.get("gen_only_step_ms")
        if b == 1:
            n["prefill_one_request_ms"] = fig.get("mix_step_ms")
        n["ttft_definition"] = (
            "per-request: prefill step x ceil(isl/ctx_tokens) (+ vLLM dispatch overhead) x "
            "backend queuing heuristic; steady-state continuous batching with b slots full"
        )
        n["ttft_rule"] = AIC_TTFT_RULES[backend]
    else:
        n["decode_step_ms"] = fig.get("tpot_ms")
        n["prefill_whole_batch_ms"] = fig.get("context_phase_ms")
        if b == 1:
            n["prefill_one_request_ms"] = fig.get("context_phase_ms")
        n["ttft_definition"] = "whole-batch prefill: all b prompts in one context phase"
    return n


def _read_csv(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with path.open() as fh:
        for row in csv.DictReader(fh):
            conv: dict[str, Any] = {}
            for k, v in row.items():
                try:
                    conv[k] = float(v) if re.fullmatch(r"-?\d+(\.\d+)?(e-?\d+)?", v) else v
                except (TypeError, ValueError):
                    conv[k] = v
            rows.append(conv)
    return rows


def parse_default_best(stdout: str) -> dict[str, Any]:
    best: dict[str, Any] = {}
    pats = {
        "tokens_per_s": r"Best Throughput: " + _NUM,
        "tokens_per_s_per_gpu": r"Per-GPU Throughput: " + _NUM,
        "tokens_per_s_per_user": r"Per-User Throughput: " + _NUM,
        "request_rate_rps": r"Request Rate: " + _NUM,
        "ttft_ms": r"- TTFT: " + _NUM,
        "tpot_ms": r"- TPOT: " + _NUM,
        "request_latency_ms": r"Request Latency: " + _NUM,
    }
    for key, pat in pats.items():
        m = re.search(pat, stdout)
        if m:
            best[key] = _num(m.group(1))
    m = re.search(r"All experiments completed in " + _NUM + " seconds", stdout)
    if m:
        best["search_seconds_reported"] = _num(m.group(1))
    return best


def _top_tables(stdout: str) -> str:
    """The ranked tables AIC prints (agg and disagg), for the record."""
    start = stdout.find("Overall Best Configuration")
    end = stdout.find("All experiments completed")
    return _summary_box(stdout[start:end]) if start >= 0 else ""


def aic_default(
    case: dict[str, Any], backend: str, isl: int, osl: int, workdir: Path
) -> dict[str, Any]:
    save = workdir / f"default_{case['model']}_{backend}_{isl}_{osl}"
    cmd = [
        AIC,
        "cli",
        "default",
        "--model-path",
        case["hf_model"],
        "--system",
        case["aic_system"],
        "--backend",
        backend,
        "--total-gpus",
        str(case["num_gpus"]),
        "--isl",
        str(isl),
        "--osl",
        str(osl),
        "--ttft",
        str(case["slo"]["ttft_ms"]),
        "--tpot",
        str(case["slo"]["tpot_ms"]),
        "--save-dir",
        str(save),
        "--no-color",
    ]
    rc, text, secs = run(cmd)
    shown = _shown(cmd).replace(str(save), "<save-dir>")
    rec: dict[str, Any] = {
        "tool": "aiconfigurator",
        "variant": f"default {backend} isl{isl} osl{osl}",
        "backend": backend,
        "mode": "default (agg vs disagg search)",
        "prompt_tokens": isl,
        "output_tokens": osl,
        "command": shown,
        "returncode": rc,
        "wall_s": round(secs, 2),
    }
    if rc != 0:
        rec["error"] = _summary_box(text)[-3000:]
        return rec
    rec["best"] = parse_default_best(text)
    rec["tables"] = _top_tables(text)
    for mode in ("agg", "disagg"):
        found = sorted(save.rglob(f"{mode}/best_config_topn.csv"))
        rec[f"{mode}_top"] = _read_csv(found[0]) if found else []
    rec["recommended"] = recommended_plan(rec, case["num_gpus"])
    return rec


def recommended_plan(rec: dict[str, Any], total_gpus: int) -> dict[str, Any] | None:
    """The plan AIC ranks first overall (highest tokens/s/gpu among agg and disagg top-1)."""
    cands: list[tuple[float, str, dict[str, Any]]] = []
    for mode in ("agg", "disagg"):
        rows = rec.get(f"{mode}_top") or []
        if rows:
            r = rows[0]
            cands.append((float(r.get("tokens/s/gpu_cluster", r["tokens/s/gpu"])), mode, r))
    if not cands:
        return None
    _, mode, r = max(cands, key=lambda c: c[0])
    replicas = int(total_gpus // r["num_total_gpus"])
    if mode == "agg":
        gpus_per_worker = int(r["tp"] * r["pp"] * r["dp"])
        plan = {
            "mode": "colocated",
            "instances": [
                {
                    "role": "both",
                    "count": replicas,
                    "tensor": int(r["tp"]),
                    "pipeline": int(r["pp"]),
                    "attention_dp": int(r["dp"]),
                    "moe_tp": int(r["moe_tp"]),
                    "expert": int(r["moe_ep"]),
                    "max_batch_size": int(r["bs"]),
                    "gpus": gpus_per_worker,
                }
            ],
        }
    else:
        plan = {
            "mode": "disaggregated",
            "instances": [
                {
                    "role": role,
                    "count": replicas * int(r[f"({x})workers"]),
                    "tensor": int(r[f"({x})tp"]),
                    "pipeline": int(r[f"({x})pp"]),
                    "attention_dp": int(r[f"({x})dp"]),
                    "moe_tp": int(r[f"({x})moe_tp"]),
                    "expert": int(r[f"({x})moe_ep"]),
                    "max_batch_size": int(r[f"({x})bs"]),
                }
                for role, x in (("prefill", "p"), ("decode", "d"))
            ],
        }
    return {
        "aic_mode": mode,
        "plan": plan,
        "tokens_per_s_per_gpu": r.get("tokens/s/gpu_cluster", r["tokens/s/gpu"]),
        "ttft_ms": r["ttft"],
        "tpot_ms": r["tpot"],
        "concurrency_per_replica": r["concurrency"],
        "request_rate_rps_per_replica": r["request_rate"],
        "gpus_per_replica": r["num_total_gpus"],
        "replicas": replicas,
        "note": "count = replicas x workers per replica; AIC ranks by tokens/s/gpu_cluster",
    }


# ---------------------------------------------------------------------------------------------
# llm-analysis
# ---------------------------------------------------------------------------------------------

# llm-analysis counts MLP weights as 2*h*ffn (two matrices); a gated SwiGLU MLP has three
# (h*ffn each), so ffn_embed_dim = 1.5*intermediate_size gives the right weight count and FLOPs.
# Passing expansion_ratio explicitly skips its `ffn_embed_dim % hidden_dim == 0` assertion.
LA_MODELS: dict[str, dict[str, Any]] = {
    "llama3-8b": {
        "name": "llama3.1-8b-gated",
        "num_layers": 32,
        "n_head": 32,
        "hidden_dim": 4096,
        "vocab_size": 128256,
        "max_seq_len": 131072,
        "num_key_value_heads": 8,
        "ffn_embed_dim": 21504,
        "expansion_ratio": 5.25,
        "model_type": "llama",
    },
    "llama3-70b": {
        "name": "llama3.1-70b-gated",
        "num_layers": 80,
        "n_head": 64,
        "hidden_dim": 8192,
        "vocab_size": 128256,
        "max_seq_len": 131072,
        "num_key_value_heads": 8,
        "ffn_embed_dim": 43008,
        "expansion_ratio": 5.25,
        "model_type": "llama",
    },
    "qwen3-235b-a22b": {
        "name": "qwen3-235b-a22b-gated",
        "num_layers": 94,
        "n_head": 64,
        "hidden_dim": 4096,
        "vocab_size": 151936,
        "max_seq_len": 40960,
        "num_key_value_heads": 4,
        "ffn_embed_dim": 2304,
        "expansion_ratio": 0.5625,
        "model_type": "qwen3_moe",
        "moe_num_experts": 128,
        "moe_top_k": 8,
    },
}
LA_MODEL_CAVEATS = {
    "qwen3-235b-a22b": (
        "llm-analysis assumes q/o projections of hidden x hidden; Qwen3-235B has 64 heads x 128 "
        "= 8192 wide q/o, so attention weights are undercounted (~36M vs ~71M per layer); "
        "experts dominate (2.4B per layer) so weights are ~1.5% low. Its inference path reads "
        "ALL experts' weights every step (no top-k touched-expert model) and has no EP."
    ),
}
LA_GPUS = {"h100-sxm": "h100-sxm-80gb", "h200": "h200-sxm-141gb"}
# No H200 in llm-analysis 0.2.2; this is ours, from NVIDIA's H200 datasheet (141 GB, 4.8 TB/s,
# same Hopper tensor peaks as H100 SXM, 900 GB/s NVLink = 450 GB/s per direction).
LA_H200 = {
    "name": "h200-sxm-141gb",
    "mem_per_GPU_in_GB": 141,
    "hbm_bandwidth_in_GB_per_sec": 4800,
    "intra_node_bandwidth_in_GB_per_sec": 450,
    "intra_node_min_message_latency": 8e-06,
    "peak_fp16_TFLOPS": 989,
    "peak_i8_TFLOPS": 1979,
    "peak_i4_TFLOPS": 3958,
    "inter_node_bandwidth_in_GB_per_sec": 400,
}
LA_EFFICIENCY: dict[str, dict[str, float | None]] = {
    "default": {"flops_efficiency": None, "hbm_memory_efficiency": None},
    "readme_typical": {"flops_efficiency": 0.7, "hbm_memory_efficiency": 0.9},
}

LA_RUNS: list[dict[str, Any]] = [
    {"case": "llama3.1-8b_1xh100_b1_1024-256", "tp": 1, "batch": 1},
    {"case": "llama3.1-8b_1xh100_b16_1024-256", "tp": 1, "batch": 16},
    # The 70B case at AIConfigurator's recommended layouts (llm-analysis cannot search).
    {"case": "llama3.1-70b_8xh100_slo_ttft1000_tpot50_1024-256", "tp": 4, "batch": 112},
    {"case": "llama3.1-70b_8xh100_slo_ttft1000_tpot50_1024-256", "tp": 8, "batch": 192},
    {"case": "llama3.1-70b_8xh100_slo_ttft1000_tpot50_1024-256", "tp": 8, "batch": 1},
    {"case": "qwen3-235b-a22b_8xh200_tp8ep8_b16_1024-256", "tp": 8, "batch": 16},
]


def la_infer(case: dict[str, Any], tp: int, batch: int, eff_name: str, tmp: Path) -> dict[str, Any]:
    from llm_analysis import analysis, config

    if "h200-sxm-141gb" not in config.gpu_configs:
        config.gpu_configs["h200-sxm-141gb"] = config.GPUConfig(**LA_H200)
    mcfg = LA_MODELS[case["model"]]
    mpath = tmp / f"{mcfg['name']}.json"
    mpath.write_text(json.dumps(mcfg))
    eff = LA_EFFICIENCY[eff_name]
    kwargs: dict[str, Any] = {
        "model_name": str(mpath),
        "gpu_name": LA_GPUS[case["accelerator"]],
        "dtype_name": "w16a16e16",
        "log_level": "ERROR",
        "batch_size_per_gpu": batch,
        "tp_size": tp,
        "seq_len": case["prompt_tokens"],
        "num_tokens_to_generate": case["output_tokens"],
        **{k: v for k, v in eff.items() if v is not None},
    }
    shown = "llm_analysis.analysis.infer(" + ", ".join(
        f"{k}={v!r}" if k != "model_name" else f"model_name='<{mcfg['name']}.json>'"
        for k, v in kwargs.items()
    )
    shown += ")"
    rec: dict[str, Any] = {
        "tool": "llm-analysis",
        "variant": f"infer tp{tp} b{batch} eff={eff_name}",
        "tp": tp,
        "batch": batch,
        "efficiency": eff_name,
        "api_call": shown,
        "model_config": mcfg,
    }
    t0 = time.perf_counter()
    try:
        d = analysis.infer(**kwargs)
    except Exception as exc:  # the peer's own failure is data here
        rec["error"] = f"{type(exc).__name__}: {exc}"
        rec["wall_s"] = round(time.perf_counter() - t0, 3)
        return rec
    rec["wall_s"] = round(time.perf_counter() - t0, 3)
    keep = (
        "prefill_latency",
        "decode_latency",
        "total_decode_latency",
        "total_latency",
        "total_per_token_latency",
        "kv_cache_latency",
        "weight_memory_per_gpu",
        "kv_cache_memory_per_gpu",
        "decode_max_batch_size_per_gpu",
        "prefill_max_batch_size_per_gpu",
        "flops_efficiency",
        "hbm_memory_efficiency",
    )
    rec["raw"] = {k: d[k] for k in keep if k in d}
    osl = case["output_tokens"]
    total_s = d["total_latency"]
    rec["normalised"] = {
        "prefill_whole_batch_ms": d["prefill_latency"] * 1e3,
        "prefill_one_request_ms": d["prefill_latency"] * 1e3 if batch == 1 else None,
        "ttft_ms_reported": d["prefill_latency"] * 1e3,
        "ttft_definition": "whole-batch prefill of batch x seq_len tokens (static batch)",
        "tpot_ms": d["decode_latency"] * 1e3,
        "decode_step_ms": d["decode_latency"] * 1e3,
        "tpot_definition": (
            "one decode step at the FINAL context length (seq_len + num_tokens_to_generate) "
            "for every sequence, KV cache read AND written once (2 x kv bytes), max(compute, "
            "memory) per op; the same for every step"
        ),
        "throughput_tokens_per_s": batch * osl / total_s,
        "throughput_tokens_per_s_per_gpu": batch * osl / total_s / tp,
        "throughput_definition": "batch x output tokens / (prefill + output x decode step)",
    }
    return rec


# ---------------------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    out = {}
    for pkg in ("aiconfigurator", "aiconfigurator-core", "llm-analysis", "pandas", "numpy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def aic_databases() -> dict[str, Any]:
    import aiconfigurator_core

    base = Path(aiconfigurator_core.__file__).parent / "systems"
    info: dict[str, Any] = {"systems_dir": "aiconfigurator_core/systems (in the wheel)"}
    for system in ("h100_sxm", "h200_sxm"):
        d = base / "data" / system
        backends: dict[str, list[str]] = {}
        for meta in sorted(d.glob("*/*/*/collection_meta.yaml")):
            op, be, ver = meta.parts[-4], meta.parts[-3], meta.parts[-2]
            backends.setdefault(f"{be} {ver}", []).append(op)
        size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
        info[system] = {"bytes": size, "op_tables_by_backend_version": backends}
    info["query_versions_yaml_defaults"] = (
        "trtllm current 1.3.0rc20, sglang current 0.5.14, vllm current 0.24.0 "
        "(systems/query_versions.yaml); h100_sxm.yaml: mem_bw 3.35 TB/s x empirical 0.8, "
        "bf16 989 TFLOPS, fp8 1978 TFLOPS, NVLink 450 GB/s per direction, other_mem 3.5 GiB"
    )
    return info


def main() -> None:
    started = dt.datetime.now(dt.UTC)
    by_id = {c["id"]: c for c in CASES}
    results: dict[str, list[dict[str, Any]]] = {c["id"]: [] for c in CASES}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for case in CASES:
            if case["kind"] == "fixed_batch":
                modes = ("agg", "static") if case["model"].startswith("llama") else ("agg",)
                for backend in BACKENDS:
                    for mode in modes:
                        print(f"[aic] {case['id']} {backend} {mode}", flush=True)
                        results[case["id"]].append(aic_estimate(case, backend, mode))
            else:
                for backend in BACKENDS:
                    print(f"[aic] {case['id']} default {backend}", flush=True)
                    rec = aic_default(
                        case, backend, case["prompt_tokens"], case["output_tokens"], tmp
                    )
                    results[case["id"]].append(rec)
                if case["model"] == "llama3-70b":
                    print(f"[aic] {case['id']} default trtllm 4000/1000", flush=True)
                    results[case["id"]].append(aic_default(case, "trtllm", 4000, 1000, tmp))
        for run_ in LA_RUNS:
            case = by_id[run_["case"]]
            for eff_name in LA_EFFICIENCY:
                print(f"[llm-analysis] {case['id']} tp{run_['tp']} b{run_['batch']}", flush=True)
                rec = la_infer(case, run_["tp"], run_["batch"], eff_name, tmp)
                if case["model"] in LA_MODEL_CAVEATS:
                    rec["caveat"] = LA_MODEL_CAVEATS[case["model"]]
                results[case["id"]].append(rec)
    doc = {
        "generated_utc": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "generator": (
            "HF_HUB_OFFLINE=1 /work/peers-venv/bin/python bench/serving_peers_collect.py "
            "(venv: python3 -m venv /work/peers-venv && /work/peers-venv/bin/pip install "
            "aiconfigurator llm-analysis)"
        ),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "note": "CPU only, no network but PyPI; both tools run fully offline",
        },
        "tool_versions": versions(),
        "tools": {
            "aiconfigurator": {
                "what": (
                    "NVIDIA AIConfigurator (ai-dynamo). Op-level latency model over measured "
                    "kernel tables ('silicon' rows) with empirical/SOL fill-ins; a mean-field "
                    "continuous-batching (IFB) model for agg and a rate-matched prefill/decode "
                    "pool model for disagg. 0.12.0 warns that the `aiconfigurator` distribution "
                    "moves to `aisimulate` in 0.13 (same CLI)."
                ),
                "databases": aic_databases(),
                "backend_assumed": (
                    "--backend selects the framework whose kernels were measured: trtllm "
                    "(TensorRT-LLM 1.3.0rc20, the default), vllm (0.24.0), sglang (0.5.14); "
                    "generated deploy configs target dynamo 1.3.0 (trtllm 1.3.0rc23)"
                ),
                "quantisation": (
                    "auto-inferred from the HF config: bf16 GEMM / bf16 KV / bf16 FMHA / half "
                    "comm for the bf16 checkpoints used here (logged as 'Resolved quant modes')"
                ),
                "definitions": {
                    "agg": (
                        "steady-state continuous batching with batch b: each mix step carries "
                        "ctx_tokens (=isl) prompt tokens plus b-1 decodes; ceil(isl*b/ctx) mix "
                        "steps then gen-only steps"
                    ),
                    "ttft_agg": (
                        "(one prefill step x ceil(isl/ctx_tokens) + backend dispatch overhead) x "
                        "backend queuing factor: NOT the raw prefill time even at b=1"
                    ),
                    "ttft_rules": AIC_TTFT_RULES,
                    "static": (
                        "one static batch: TTFT = context phase of all b prompts (whole-batch "
                        "prefill), TPOT = generation phase / (osl-1)"
                    ),
                    "tpot": "mean time per output token after the first (inter-token latency)",
                    "tpot_agg": (
                        "weighted mean of mix-step and gen-only-step times over the output; "
                        "trtllm and sglang count only (mix steps - 3) mix steps (an empirical "
                        "'pipeline drain' correction in trtllm_backend.py / sglang_backend.py)"
                    ),
                    "throughput": (
                        "tokens/s = output tokens per second of the instance (agg: b*(osl-1) "
                        "per full cycle of mix + gen-only steps, capped by Little's law for vLLM)"
                    ),
                    "default_search": (
                        "sweeps tp/pp/dp/ep and batch for agg and (prefill, decode) pools for "
                        "disagg under --ttft/--tpot; ranks by tokens/s/gpu; a 'replica' is the "
                        "smallest scalable unit, replicated to fill --total-gpus; disagg TTFT "
                        "is multiplied by an autoscale correction factor 1.8 before the SLO check"
                    ),
                },
            },
            "llm-analysis": {
                "what": (
                    "Cheng Li's llm-analysis: per-op roofline max(compute, memory) with perfect "
                    "overlap, static batch, Megatron/FasterTransformer-style TP"
                ),
                "api": "llm_analysis.analysis.infer(...) (python API; CLI is python -m "
                "llm_analysis.analysis infer via fire)",
                "efficiencies": LA_EFFICIENCY,
                "efficiency_note": (
                    "default = 1.0/1.0 (its README: a lower bound on latency); readme_typical = "
                    "flops 0.7 ('up to 0.7 for inference') and HBM 0.9 ('aggressive target')"
                ),
                "gpus": {"h100-sxm": "h100-sxm-80gb (shipped)", "h200": LA_H200},
                "model_configs_note": (
                    "no Llama-3.1 / Qwen3 configs ship with 0.2.2 and the HF fallback needs the "
                    "network; configs are written from the HF config.json shapes with "
                    "ffn_embed_dim = 1.5 x intermediate_size to count SwiGLU's third matrix"
                ),
                "limitations": [
                    "no continuous batching, no queueing, no SLO search",
                    "infer() has no expert-parallel argument; MoE reads every expert each step",
                    "decode step priced at the final context length for all steps",
                ],
            },
        },
        "cases": [{**c, "peers": results[c["id"]]} for c in CASES],
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1, default=_json_default) + "\n")
    print(f"wrote {OUT}")


def _json_default(o: object) -> object:
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return str(o)


if __name__ == "__main__":
    main()
