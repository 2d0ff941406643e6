"""Side-by-side serving benchmark (issue 5, item 5): meshplan's serving estimates next to
AIConfigurator and llm-analysis on the same cases, and next to published measured figures.

Inputs (committed data, no peer is imported here):

- `bench/data/serving_peers.json`: the peers' raw and normalised figures, produced offline by
  `bench/serving_peers_collect.py` in a separate venv (see that file for the exact commands,
  tool versions and each tool's definitions);
- `bench/data/published_serving.json`: golden measured rows (MLPerf Inference logs, vLLM CI,
  TensorRT-LLM / NIM / LMDeploy benchmark tables), each with its source and quoted figure.

Every case is data: `Case` is built from a JSON entry (model preset, accelerator, GPUs,
parallel degrees, batch or load, prompt/output tokens, precision, SLO). `our_estimate(case)`
(`bench/serving_ours.py`) gives meshplan's figures, or None when a case cannot be represented
(the table then says so in our column).

Definitions used for the comparison (see serving_peers.json `tools.*.definitions`):

- `prefill_one_request_ms`: the prefill forward pass(es) of one prompt with nothing queued;
  compare with our per-request TTFT at an empty system. AIConfigurator's agg `ttft_ms_reported`
  is this times a backend queuing heuristic (x1.9 for trtllm/sglang at batch 1), so the raw
  prefill, not AIC's TTFT, is the like-for-like figure.
- `prefill_whole_batch_ms`: a static batch's context phase (all prompts at once).
- `tpot_ms`: mean time per output token after the first; `decode_step_ms` one pure decode step.
- `throughput_tokens_per_s`: output tokens per second of the instance(s).
- relative difference = (ours - reference) / reference.

Usage: `python bench/serving_vs_peers.py [--case SUBSTRING] [--no-published]`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python bench/serving_vs_peers.py`
    sys.path.insert(0, str(ROOT))
DATA = ROOT / "bench" / "data"
PEERS_FILE = DATA / "serving_peers.json"
PUBLISHED_FILE = DATA / "published_serving.json"

FIXED_BATCH_METRICS: tuple[tuple[str, str], ...] = (
    ("prefill_one_request_ms", "prefill 1 req ms"),
    ("prefill_whole_batch_ms", "prefill batch ms"),
    ("ttft_ms_reported", "TTFT(tool) ms"),
    ("tpot_ms", "TPOT ms"),
    ("decode_step_ms", "decode step ms"),
    ("throughput_tokens_per_s", "out tok/s"),
    ("wall_s", "time s"),
)
SLO_METRICS: tuple[tuple[str, str], ...] = (
    ("tokens_per_s_per_gpu", "tok/s/GPU"),
    ("ttft_ms", "TTFT ms"),
    ("tpot_ms", "TPOT ms"),
    ("request_rate_rps", "req/s"),
    ("search_s", "search s"),
)


@dataclass(frozen=True)
class Case:
    """One comparison point, built from a JSON entry (never hard-coded here)."""

    id: str
    origin: str
    """"peers" (serving_peers.json case) or "published" (a golden measured row)."""
    kind: str
    """fixed_batch | slo_search | offline_max_throughput | poisson_server |
    closed_loop_concurrency | static_batch."""
    model: str
    accelerator: str
    num_gpus: int
    prompt_tokens: Any
    output_tokens: Any
    precision: str
    tensor: int | None = None
    pipeline: int | None = None
    expert: int | None = None
    attention_dp: int | None = None
    batch: int | None = None
    concurrency: int | None = None
    request_rate_rps: float | None = None
    slo: dict[str, float] | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


def load_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def case_from_peer_entry(entry: dict[str, Any]) -> Case:
    par = entry.get("parallelism") or {}
    return Case(
        id=entry["id"],
        origin="peers",
        kind=entry["kind"],
        model=entry["model"],
        accelerator=entry["accelerator"],
        num_gpus=int(entry["num_gpus"]),
        prompt_tokens=entry["prompt_tokens"],
        output_tokens=entry["output_tokens"],
        precision=entry["precision"],
        tensor=par.get("tensor"),
        pipeline=par.get("pipeline"),
        expert=par.get("expert"),
        attention_dp=par.get("attention_dp"),
        batch=entry.get("batch"),
        slo=entry.get("slo"),
        raw=entry,
    )


def case_from_published_row(row: dict[str, Any]) -> Case:
    load = row["load"]
    return Case(
        id=row["id"],
        origin="published",
        kind=load["kind"],
        model=row["model"],
        accelerator=row["accelerator"],
        num_gpus=int(row["num_gpus"]),
        prompt_tokens=row["prompt_tokens"],
        output_tokens=row["output_tokens"],
        precision=row["precision"],
        tensor=row.get("tp"),
        pipeline=row.get("pp"),
        expert=row.get("ep"),
        batch=load.get("batch"),
        concurrency=load.get("concurrency"),
        request_rate_rps=load.get("target_qps"),
        slo=load.get("slo"),
        raw=row,
    )


def load_cases(include_published: bool = True) -> list[Case]:
    cases = [case_from_peer_entry(e) for e in load_json(PEERS_FILE)["cases"]]
    if include_published:
        cases += [case_from_published_row(r) for r in load_json(PUBLISHED_FILE)["rows"]]
    return cases


def our_estimate(case: Case) -> dict[str, Any] | None:
    """meshplan's figures for `case` (`bench.serving_ours.our_estimate`), or None when the
    case cannot be represented (e.g. a prompt length the source does not give)."""
    from bench.serving_ours import our_estimate as ours

    return ours(case)


# ---------------------------------------------------------------------------------------------
# Peer figures per case
# ---------------------------------------------------------------------------------------------


def _layout(plan: dict[str, Any]) -> str:
    parts = []
    for inst in plan["instances"]:
        par = f"tp{inst['tensor']}pp{inst['pipeline']}"
        if inst.get("attention_dp", 1) > 1:
            par += f"dp{inst['attention_dp']}"
        if inst.get("expert", 1) > 1 or inst.get("moe_tp", 1) > 1:
            par += f"etp{inst.get('moe_tp', 1)}ep{inst.get('expert', 1)}"
        parts.append(f"{inst['count']}x{inst['role']}[{par} bs{inst['max_batch_size']}]")
    return f"{plan['mode']}: " + " + ".join(parts)


def peer_figures(case: Case) -> list[tuple[str, str, dict[str, Any]]]:
    """(section, label, metrics) for every peer run of a peers case, in file order.

    Section "search" holds SLO-search results (the peer's recommended plan), section "fixed"
    fixed-batch estimates (for an SLO case: the peer evaluated at a given layout)."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for p in case.raw.get("peers", []):
        label = f"{p['tool']} {p['variant']}"
        section = "search" if "default" in p.get("mode", "") else "fixed"
        if "error" in p:
            out.append((section, label, {"error": p["error"].strip().splitlines()[-1][:120]}))
            continue
        if section == "search":
            rec = p.get("recommended") or {}
            best = p.get("best") or {}
            m = {
                "tokens_per_s_per_gpu": rec.get("tokens_per_s_per_gpu"),
                "ttft_ms": rec.get("ttft_ms"),
                "tpot_ms": rec.get("tpot_ms"),
                "request_rate_rps": best.get("request_rate_rps"),
                "search_s": best.get("search_seconds_reported", p.get("wall_s")),
                "plan": _layout(rec["plan"]) if rec.get("plan") else None,
            }
            if p.get("prompt_tokens") != case.prompt_tokens:
                label += " (other lengths)"
        else:
            m = dict(p.get("normalised") or {})
            m["wall_s"] = p.get("wall_s")
        out.append((section, label, m))
    return out


def published_figures(case: Case) -> list[tuple[str, str, dict[str, Any]]]:
    return [("measured", f"measured: {case.raw['engine'][:48]}", dict(case.raw["measured"]))]


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------


def rel_diff(ours: float | None, ref: float | None) -> float | None:
    """(ours - ref) / ref, or None when either is missing or ref is zero."""
    if ours is None or ref is None or ref == 0:
        return None
    return (ours - ref) / ref


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.3g}"
    return str(v)


def _cell(value: Any, ours: Any) -> str:
    text = _fmt(value)
    d = rel_diff(ours, value) if isinstance(ours, int | float) else None
    if d is not None and isinstance(value, int | float):
        text += f" ({d:+.0%})"
    return text


def render_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    rows = [list(r) for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join([line, sep, *body])


def _metrics_for(section: str, refs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    if section == "fixed":
        return list(FIXED_BATCH_METRICS)
    if section == "search":
        return list(SLO_METRICS)
    keys: list[str] = []
    for m in refs:
        keys += [k for k in m if k not in keys]
    return [(k, k) for k in keys]


def _fmt_len(spec: Any) -> str:
    """A token-length spec of the JSON (int, or {"mean", "max", ...}) in a few characters."""
    if isinstance(spec, dict):
        if spec.get("mean") is not None:
            return f"mean {_fmt(spec['mean'])}"
        if spec.get("max") is not None:
            return f"<={_fmt(spec['max'])}"
        return "?"
    return _fmt(spec)


def case_title(case: Case) -> str:
    par = []
    for name, v in (
        ("tp", case.tensor),
        ("pp", case.pipeline),
        ("ep", case.expert),
        ("dp", case.attention_dp),
    ):
        if v not in (None, 1):
            par.append(f"{name}{v}")
    load = ""
    if case.batch is not None:
        load = f" batch {case.batch}"
    if case.concurrency is not None:
        load = f" concurrency {case.concurrency}"
    if case.request_rate_rps is not None:
        load = f" Poisson {case.request_rate_rps} req/s"
    if case.slo:
        load += f" SLO {case.slo}"
    return (
        f"[{case.id}] {case.model} on {case.num_gpus}x {case.accelerator} "
        f"{'/'.join(par) or 'no split'} {case.precision}, "
        f"{_fmt_len(case.prompt_tokens)} in / {_fmt_len(case.output_tokens)} out,{load} "
        f"({case.kind})"
    )


def _section_table(
    section: str,
    refs: list[tuple[str, dict[str, Any]]],
    ours: dict[str, Any] | None,
) -> str:
    metrics = _metrics_for(section, [m for _, m in refs])
    headers = ["source", *(label for _, label in metrics)]
    rows: list[list[str]] = []
    if ours is None:
        rows.append(["meshplan (not representable)", *("-" for _ in metrics)])
    else:
        rows.append(["meshplan", *(_fmt(ours.get(k)) for k, _ in metrics)])
    for label, m in refs:
        if "error" in m:
            rows.append([label, f"FAILED: {m['error']}", *("" for _ in metrics[1:])])
            continue
        rows.append([label, *(_cell(m.get(k), (ours or {}).get(k)) for k, _ in metrics)])
    return render_table(headers, rows)


def report(
    cases: Sequence[Case],
    estimate: Callable[[Case], dict[str, Any] | None] = our_estimate,
) -> str:
    """The side-by-side tables; peer cells show (ours - peer) / peer once ours exists."""
    out: list[str] = []
    for case in cases:
        refs = peer_figures(case) if case.origin == "peers" else published_figures(case)
        t0 = time.perf_counter()
        ours = estimate(case)
        ours_s = time.perf_counter() - t0
        if ours is not None:
            ours = {"wall_s": ours_s, "search_s": ours_s, **ours}
        out.append(case_title(case))
        for section in ("search", "fixed", "measured"):
            sec = [(label, m) for s_, label, m in refs if s_ == section]
            if sec:
                out.append(_section_table(section, sec, ours))
        plans = [(label, m["plan"]) for _, label, m in refs if m.get("plan")]
        if ours and ours.get("plan"):
            plans.insert(0, ("meshplan", ours["plan"]))
        for label, plan in plans:
            out.append(f"  plan {label}: {plan}")
        if ours and ours.get("why"):
            out.append(f"  why: {ours['why']}")
        if case.origin == "published":
            out.append(f"  source: {case.raw['source']['url']}")
            out.append(f"  quote: {case.raw['quote']}")
        out.append("")
    return "\n".join(out)


FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("TTFT", ("ttft_ms_mean", "ttft_ms_p50", "ttft_ms")),
    ("TPOT", ("tpot_ms_mean", "tpot_ms_p50", "itl_ms", "token_latency_ms_p50", "tpot_ms_approx")),
    ("batch latency", ("e2e_latency_ms_mean",)),
    ("throughput", ("throughput_tokens_per_s",)),
)
"""Metric families of the published rows, each read from the first key a row has (so a
row with several percentiles counts once per family)."""


@dataclass(frozen=True)
class RowError:
    case_id: str
    engine: str
    family: str
    error: float
    """(ours − measured) / measured."""


def published_errors(
    cases: Sequence[Case], estimate: Callable[[Case], dict[str, Any] | None] = our_estimate
) -> list[RowError]:
    """One relative error per published row and metric family that both sides have."""
    out = []
    for case in cases:
        if case.origin != "published":
            continue
        ours = estimate(case)
        if ours is None:
            continue
        measured = case.raw["measured"]
        for family, keys in FAMILIES:
            key = next((k for k in keys if k in measured and ours.get(k) is not None), None)
            if key is None:
                continue
            err = rel_diff(float(ours[key]), float(measured[key]))
            if err is not None:
                engine = str(case.raw.get("engine", "")).split(" ")[0].rstrip(",")
                out.append(RowError(case.id, engine, family, err))
    return out


def accuracy_summary(errors: Sequence[RowError]) -> str:
    """MAPE and mean signed error over the published rows, by metric family and by engine.
    Nothing in the serving model is fitted to these rows (its constants come from kernel
    tables and the engines' own profiles), so held-out-by-source equals in-sample."""
    if not errors:
        return "no published row is representable"

    def line(label: str, errs: Sequence[float]) -> list[str]:
        mape = sum(abs(e) for e in errs) / len(errs)
        bias = sum(errs) / len(errs)
        return [label, str(len(errs)), f"{mape:.1%}", f"{bias:+.1%}", f"{max(map(abs, errs)):.1%}"]

    rows = [line("all", [e.error for e in errors])]
    for family, _ in FAMILIES:
        errs = [e.error for e in errors if e.family == family]
        if errs:
            rows.append(line(family, errs))
    for engine in sorted({e.engine for e in errors}):
        rows.append(line(f"engine {engine}", [e.error for e in errors if e.engine == engine]))
    return "Published rows (held out = in-sample: nothing is fitted to them):\n" + render_table(
        ["rows", "n", "MAPE", "mean signed", "max"], rows
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--case", default="", help="only cases whose id contains this")
    ap.add_argument("--no-published", action="store_true", help="skip the golden rows")
    args = ap.parse_args(argv)
    peers = load_json(PEERS_FILE)
    versions = ", ".join(f"{k} {v}" for k, v in peers["tool_versions"].items())
    print(f"peers: {versions}; collected {peers['generated_utc']}")
    cases = [c for c in load_cases(not args.no_published) if args.case in c.id]
    print(report(cases))
    print(accuracy_summary(published_errors(cases)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
