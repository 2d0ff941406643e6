"""The pipeline schedule of one training plan as a timeline per stage (a discrete-event
simulation of the schedule, beside its closed forms in `schedule`), rebuilt from the cost
model's own per-rank numbers (`POST /v1/estimate` → `details`: `num_microbatches`,
`rank_forward_s`, `rank_work_s`, `rank_data_parallel_exposed_s`, `rank_optimizer_s`,
`p2p_time_s`, `p2p_overlapped`).

Each pipeline rank j spends F_j (`rank_forward_s[j]`) on the forward and B_j = W_j − F_j
(`rank_work_s[j]` − F_j) on the backward of one micro-batch; with v virtual stages per rank
each chunk takes F_j/v and B_j/v. The order of the operations on each rank is Megatron-LM's
(`megatron/core/pipeline_parallel/schedules.py`):

* 1F1B (PipeDream-Flush, Narayanan et al. 2021 §2.2.1): p − j − 1 warm-up forwards, then
  one forward and one backward alternately, then the remaining backwards.
* Interleaved 1F1B (§2.2.2; needs m divisible by p): (p − j − 1)·2 + (v − 1)·p warm-up
  forwards; forwards run chunk 0 of micro-batches 0…p−1, then chunk 1 of the same, …;
  backwards run the chunks in reverse order.

An operation starts when its rank is free and its input is there: the forward of virtual
stage s after the forward of s − 1 on the same micro-batch, the backward of s after the
backward of s + 1 (the last stage's backward after its own forward). The gaps are the
bubble. The cost model counts boundary transfers inside W_j; when they are not overlapped
(`p2p_overlapped` false) the last `p2p_time_s` of each operation that sends (every operation
but the last stage's forward and the first stage's backward) is drawn as communication. After the
pipeline flush each rank runs its exposed data-parallel communication and its optimizer step.
For uniform stages the pipeline part ends at (m + p − 1)·W (1F1B) and m·W + (p − 1)·W/v
(interleaved), the closed forms of `cost_models.analytical.schedule`.

Every other schedule (GPipe, the zero-bubble family, the V shapes, DualPipe) is drawn from
its plug-in's simulation (`cost_models.analytical.schedules.simulate`) on the estimate's
per-rank F (`stage_forward_s`, with its sends), B (`rank_input_grad_s`) and W
(`rank_weight_grad_s`); W is its own kind, "weight-gradient". An unknown schedule, or one
whose rules the plan breaks (interleaving with m not a multiple of p), is a SpecError: the
timeline never draws another schedule in its place."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specs.errors import SpecError

KINDS = (
    "forward",
    "backward",
    "communication",
    "bubble",
    "data_parallel",
    "optimizer",
    "weight-gradient",
)


@dataclass(frozen=True, slots=True)
class Op:
    """One forward or backward of one chunk of one micro-batch on one rank."""

    rank: int
    forward: bool
    chunk: int
    microbatch: int


def _order(rank: int, p: int, m: int, v: int) -> list[Op]:
    """Megatron-LM's order of the operations on `rank` (module docstring)."""
    total = m * v

    def chunk_mb(k: int, forward: bool) -> tuple[int, int]:
        group, in_group = divmod(k, p * v)
        chunk = in_group // p if v > 1 else 0
        if not forward:
            chunk = v - 1 - chunk
        return chunk, (group * p + in_group % p) if v > 1 else k

    warmup = (p - rank - 1) * 2 + (v - 1) * p if v > 1 else p - rank - 1
    warmup = min(warmup, total)
    ops = [Op(rank, True, *chunk_mb(k, True)) for k in range(warmup)]
    for i in range(total - warmup):
        ops.append(Op(rank, True, *chunk_mb(warmup + i, True)))
        ops.append(Op(rank, False, *chunk_mb(i, False)))
    ops.extend(Op(rank, False, *chunk_mb(k, False)) for k in range(total - warmup, total))
    return ops


def simulate(
    forward_s: Sequence[float], backward_s: Sequence[float], microbatches: int, virtual: int = 1
) -> list[list[tuple[float, float, Op]]]:
    """Start and end of every operation on every rank (list scheduling in Megatron's order)."""
    p, m = len(forward_s), microbatches
    v = virtual if virtual > 1 and m % p == 0 else 1
    stages = p * v
    orders = [_order(j, p, m, v) for j in range(p)]
    done: dict[tuple[bool, int, int], float] = {}  # (forward, virtual stage, mb) -> end
    out: list[list[tuple[float, float, Op]]] = [[] for _ in range(p)]
    free = [0.0] * p
    nxt = [0] * p
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for j in range(p):
            while nxt[j] < len(orders[j]):
                op = orders[j][nxt[j]]
                s = op.chunk * p + j
                if op.forward:
                    dep = (True, s - 1, op.microbatch) if s > 0 else None
                else:
                    dep = (
                        (False, s + 1, op.microbatch)
                        if s < stages - 1
                        else (True, s, op.microbatch)
                    )
                if dep is not None and dep not in done:
                    break
                start = max(free[j], done[dep] if dep is not None else 0.0)
                length = (forward_s[j] if op.forward else backward_s[j]) / v
                end = start + length
                done[(op.forward, s, op.microbatch)] = end
                out[j].append((start, end, op))
                free[j] = end
                nxt[j] += 1
                remaining -= 1
                progressed = True
        if not progressed:  # cannot happen for Megatron's orders; guards a bad input
            raise ValueError("pipeline schedule deadlocked")
    return out


def timeline(details: dict[str, Any], virtual: int, schedule: str) -> dict[str, Any]:
    """The timeline the plan page draws: per stage, segments `[start_s, end_s, kind, mb]`
    (kind an index into `kinds`), the end of the pipeline flush and of the step's last rank.

    Raises:
        SpecError: at `pipeline_schedule` for an unknown schedule or a broken schedule rule.
    """
    from cost_models.analytical.schedules import get, rule_breaks

    plugin = get(schedule)
    work = [float(x) for x in details["rank_work_s"]]
    fwd = [float(x) for x in details["rank_forward_s"]]
    m = int(details["num_microbatches"])
    p = len(work)
    v = virtual if plugin.chunks_ok(virtual) else 0
    breaks = rule_breaks(schedule, p, virtual, m) if p > 1 else ()
    if v == 0 or breaks:
        rule = breaks[0].rule if breaks else f"{schedule}.chunks-per-rank"
        detail = breaks[0].detail if breaks else f"virtual_pipeline = {virtual}"
        raise SpecError("pipeline_schedule", rule, schedule, detail)
    p2p = 0.0 if details.get("p2p_overlapped", True) else float(details.get("p2p_time_s", 0.0))
    kind = {k: i for i, k in enumerate(KINDS)}
    segments: list[list[tuple[float, float, str, int, bool]]]
    if schedule in ("1f1b", "interleaved_1f1b"):
        bwd = [w - f for w, f in zip(work, fwd, strict=True)]
        runs = simulate(fwd, bwd, m, v)
        stages_total = p * v
        segments = [
            [
                (
                    start,
                    end,
                    "forward" if op.forward else "backward",
                    op.microbatch,
                    (op.chunk * p + j < stages_total - 1) if op.forward else op.chunk * p + j > 0,
                )
                for start, end, op in run
            ]
            for j, run in enumerate(runs)
        ]
    else:
        from cost_models.analytical.schedules.simulate import simulate as simulate_schedule

        f = [float(x) for x in details["stage_forward_s"]]
        b = [float(x) for x in details["rank_input_grad_s"]]
        w = [float(x) for x in details["rank_weight_grad_s"]]
        sim = simulate_schedule(plugin, f, b, w, m, v)
        last = p if plugin.placement == "dual" else p * (2 if plugin.placement == "v" else v)
        names = {"F": "forward", "B": "backward", "W": "weight-gradient"}
        segments = [
            [
                (
                    start,
                    end,
                    names[op.kind],
                    op.microbatch,
                    (op.stage < last - 1) if op.kind == "F" else op.kind == "B" and op.stage > 0,
                )
                for start, end, op in run
            ]
            for run in sim.runs
        ]
    flush = max((r[-1][1] for r in segments if r), default=0.0)
    dp = details.get("rank_data_parallel_exposed_s") or [0.0] * p
    opt = details.get("rank_optimizer_s") or [0.0] * p
    stages: list[list[list[float]]] = []
    for j, run in enumerate(segments):
        segs: list[list[float]] = []
        t = 0.0
        for start, end, name, mb, sends in run:
            if start > t:
                segs.append([t, start, kind["bubble"], -1])
            comm = min(p2p, end - start) if sends else 0.0
            segs.append([start, end - comm, kind[name], mb])
            if comm > 0:
                segs.append([end - comm, end, kind["communication"], mb])
            t = end
        if flush > t:
            segs.append([t, flush, kind["bubble"], -1])
        t = flush
        if dp[j] > 0:
            segs.append([t, t + float(dp[j]), kind["data_parallel"], -1])
            t += float(dp[j])
        if opt[j] > 0:
            segs.append([t, t + float(opt[j]), kind["optimizer"], -1])
            t += float(opt[j])
        stages.append(segs)
    return {
        "kinds": list(KINDS),
        "stages": stages,
        "num_microbatches": m,
        "virtual": v,
        "schedule": schedule,
        "pipeline_end_s": flush,
        "end_s": max((s[-1][1] for s in stages if s), default=0.0),
    }
