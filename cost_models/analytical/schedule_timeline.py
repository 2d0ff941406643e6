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
(interleaved), the closed forms of `cost_models.analytical.schedule`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

KINDS = ("forward", "backward", "communication", "bubble", "data_parallel", "optimizer")


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
    (kind an index into `kinds`), the end of the pipeline flush and of the step's last rank."""
    work = [float(x) for x in details["rank_work_s"]]
    fwd = [float(x) for x in details["rank_forward_s"]]
    bwd = [w - f for w, f in zip(work, fwd, strict=True)]
    m = int(details["num_microbatches"])
    v = virtual if schedule == "interleaved_1f1b" else 1
    p = len(work)
    runs = simulate(fwd, bwd, m, v)
    flush = max((r[-1][1] for r in runs if r), default=0.0)
    p2p = 0.0 if details.get("p2p_overlapped", True) else float(details.get("p2p_time_s", 0.0))
    dp = details.get("rank_data_parallel_exposed_s") or [0.0] * p
    opt = details.get("rank_optimizer_s") or [0.0] * p
    kind = {k: i for i, k in enumerate(KINDS)}
    stages: list[list[list[float]]] = []
    v_used = v if v > 1 and m % p == 0 else 1
    for j, run in enumerate(runs):
        segs: list[list[float]] = []
        t = 0.0
        for start, end, op in run:
            if start > t:
                segs.append([t, start, kind["bubble"], -1])
            s = op.chunk * p + j
            sends = (s < p * v_used - 1) if op.forward else s > 0
            comm = min(p2p, end - start) if sends else 0.0
            segs.append(
                [start, end - comm, kind["forward" if op.forward else "backward"], op.microbatch]
            )
            if comm > 0:
                segs.append([end - comm, end, kind["communication"], op.microbatch])
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
        "virtual": v_used,
        "pipeline_end_s": flush,
        "end_s": max((s[-1][1] for s in stages if s), default=0.0),
    }
