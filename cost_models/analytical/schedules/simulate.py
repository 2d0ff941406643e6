"""Discrete-event simulation of a pipeline schedule with F, B and W as separate operations
(what the plan page's timeline draws, and what the tests hold the closed forms to).

Operations: F(s, i), B(s, i), W(s, i) of virtual stage s and micro-batch i. F(s, i) needs
F(s−1, i); B(s, i) needs B(s+1, i) (the last stage's B its own F); W(s, i) needs B(s, i).
Each rank runs its operations one at a time; a stage runs its micro-batches in order. Times:
a chunk's F, B and W are the rank's per micro-batch F_j, B_j, W_j divided by its chunks (each
with its boundary send, as in the cost model). Schedules that do not split the backward run
W right after B, as one operation.

The order is the schedule's:

* interleaved 1F1B: Megatron-LM's fixed order (`schedule_timeline._order`);
* the others: list scheduling that never idles a rank with an eligible operation, with the
  schedule's in-flight limit per rank (its `inflight` counts: a forward may start only while
  fewer micro-batches than its count for that chunk have run F but not B there); W runs when nothing else can), backwards before
  forwards before weight gradients, deeper stages first; GPipe starts no backward before its
  rank's last forward. With these rules 1F1B is PipeDream-Flush, ZB-H1 / ZB-H2 the
  handcrafted schedules of Qi et al. 2024 (W fills the bubbles under the memory limit), and
  the V and DualPipe placements run as their papers draw them.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from cost_models.analytical.schedules.base import Schedule


@dataclass(frozen=True, slots=True)
class SimOp:
    """One operation: kind "F", "B" (with W when fused) or "W"."""

    rank: int
    kind: str
    stage: int
    """Virtual stage in its direction's pipeline order."""
    direction: int
    chunk: int
    """Local chunk index on its rank."""
    microbatch: int
    fused_w: bool = False


@dataclass(frozen=True, slots=True)
class SimRun:
    """Per rank, the (start, end, op) of its operations in time order."""

    runs: list[list[tuple[float, float, SimOp]]]

    @property
    def end_s(self) -> float:
        return max((r[-1][1] for r in self.runs if r), default=0.0)

    def peak_inflight(self) -> list[int]:
        """Most micro-batch-chunks held (F done, W not yet done) at once per rank."""
        out = []
        for run in self.runs:
            events: list[tuple[float, int]] = []
            for start, end, op in run:
                if op.kind == "F":
                    events.append((start, 1))
                if op.kind == "W" or (op.kind == "B" and op.fused_w):
                    events.append((end, -1))
            events.sort(key=lambda e: (e[0], e[1]))
            cur = best = 0
            for _, d in events:
                cur += d
                best = max(best, cur)
            out.append(best)
        return out


def _lanes(placement: str, p: int, v: int, m: int) -> list[tuple[int, int, int, int, list[int]]]:
    """(direction, stage, rank, local chunk, micro-batches) of every stage."""
    out = []
    if placement == "dual":
        half = m // 2
        for s in range(p):
            out.append((0, s, s, 0, list(range(half))))
            out.append((1, s, p - 1 - s, 1, list(range(half, m))))
        return out
    for s in range(p * v):
        if placement == "v":
            rank, chunk = (s, 0) if s < p else (2 * p - 1 - s, 1)
        else:
            rank, chunk = s % p, s // p
        out.append((0, s, rank, chunk, list(range(m))))
    return out


def simulate(
    schedule: Schedule,
    forward_s: Sequence[float],
    input_grad_s: Sequence[float],
    weight_grad_s: Sequence[float],
    microbatches: int,
    virtual: int = 1,
) -> SimRun:
    """Simulate `schedule` on per-rank F, B, W times (per micro-batch, all chunks)."""
    p, m = len(forward_s), microbatches
    if schedule.name == "interleaved_1f1b" or (schedule.name == "1f1b" and virtual == 1):
        return _fixed_order(forward_s, input_grad_s, weight_grad_s, m, virtual)
    placement = schedule.placement
    v = 2 if placement == "v" else (1 if placement == "dual" else virtual)
    per_rank_chunks = 2 if placement in ("v", "dual") else v
    div = 1 if placement == "dual" else per_rank_chunks
    split = schedule.splits_backward
    lanes = _lanes(placement, p, v, m)
    stages_per_dir = p if placement == "dual" else p * v
    rows = schedule.inflight(p, virtual, m)
    limit = [sum(row) for row in rows]
    flush = schedule.name == "gpipe"
    # ZB-V's counts are a peak the V reaches in its steady state, not a cap per chunk: capped
    # per chunk the greedy order stalls (measured: 1.7× the closed form at p = 4, m = 8); the
    # rank's total caps the forwards of its first chunk only
    per_lane = schedule.name != "zero_bubble_v"
    # per lane: next F, B, W positions into its micro-batch list
    by_rank: list[list[int]] = [[] for _ in range(p)]
    for idx, lane in enumerate(lanes):
        by_rank[lane[2]].append(idx)
    pos = {(idx, k): 0 for idx in range(len(lanes)) for k in "FBW"}
    done: dict[tuple[str, int, int, int], float] = {}  # (kind, direction, stage, mb) -> end
    held = [0] * len(lanes)  # per lane: F done, B not yet
    pending_w = [0] * p
    forwards_left = [sum(len(lanes[i][4]) for i in by_rank[j]) for j in range(p)]
    free = [0.0] * p
    ends: list[float] = []
    runs: list[list[tuple[float, float, SimOp]]] = [[] for _ in range(p)]
    remaining = sum(len(lane[4]) * (3 if split else 2) for lane in lanes)

    def ready(kind: str, idx: int, t: float) -> int | None:
        d, s, _rank, _chunk, mbs = lanes[idx]
        k = pos[(idx, kind)]
        if k >= len(mbs):
            return None
        i = mbs[k]
        if kind == "F":
            dep = ("F", d, s - 1, i) if s > 0 else None
        elif kind == "B":
            dep = ("B", d, s + 1, i) if s < stages_per_dir - 1 else ("F", d, s, i)
        else:
            dep = ("B", d, s, i)
        if dep is not None:
            end = done.get(dep)
            if end is None or end > t:
                return None
        if kind == "F" and (kind, d, s, i) in done:
            return None
        return i

    kinds = "FBW" if split else "FB"

    def busy(r: int) -> bool:
        return any(pos[(i, k)] < len(lanes[i][4]) for i in by_rank[r] for k in kinds)

    blocked: set[int] = set()  # ranks with nothing eligible at their current time
    while remaining:
        active = [r for r in range(p) if busy(r)]
        open_ = [r for r in active if r not in blocked]
        if not open_:  # everyone waits: advance the earliest to the next event
            t0 = min(free[r] for r in active)
            later = [e for e in ends if e > t0] + [free[r] for r in active if free[r] > t0]
            if not later:
                raise ValueError(f"{schedule.name}: the simulation deadlocked")
            for r in active:
                if free[r] == t0:
                    free[r] = min(later)
            blocked.clear()
            continue
        j = min(open_, key=lambda r: (free[r], r))
        t = free[j]
        choice: tuple[str, int, int] | None = None
        lanes_deep = sorted(by_rank[j], key=lambda i: -lanes[i][1])
        if choice is None and not (flush and forwards_left[j] > 0):
            for idx in lanes_deep:
                i = ready("B", idx, t)
                if i is not None:
                    choice = ("B", idx, i)
                    break
        if choice is None:
            for idx in lanes_deep:
                lane_cap = (
                    limit[j] if not per_lane else rows[j][min(lanes[idx][3], len(rows[j]) - 1)]
                )
                total = sum(held[k] for k in by_rank[j])
                capped_lane = per_lane or lanes[idx][3] == 0
                if not flush and capped_lane and (held[idx] >= lane_cap or total >= limit[j]):
                    continue
                i = ready("F", idx, t)
                if i is not None:
                    choice = ("F", idx, i)
                    break
        if choice is None and split:
            for idx in sorted(by_rank[j], key=lambda i: lanes[i][1]):
                i = ready("W", idx, t)
                if i is not None:
                    choice = ("W", idx, i)
                    break
        if choice is None:
            later = [e for e in ends if e > t] + [free[r] for r in active if free[r] > t]
            if later and all(free[r] > t or r in blocked or r == j for r in active):
                free[j] = min(later)
            else:
                blocked.add(j)
            continue
        blocked.clear()
        kind, idx, i = choice
        d, s, _rank, chunk, _mbs = lanes[idx]
        base = {"F": forward_s, "B": input_grad_s, "W": weight_grad_s}[kind][j]
        length = base / div
        if kind == "B" and not split:
            length += weight_grad_s[j] / div
        end = t + length
        done[(kind, d, s, i)] = end
        heapq.heappush(ends, end)
        runs[j].append((t, end, SimOp(j, kind, s, d, chunk, i, kind == "B" and not split)))
        pos[(idx, kind)] += 1
        if kind == "F":
            held[idx] += 1
            forwards_left[j] -= 1
        elif kind == "B":
            held[idx] -= 1
            pending_w[j] += split
        else:
            pending_w[j] -= 1
        free[j] = end
        remaining -= 1
    return SimRun(runs)


def _fixed_order(
    forward_s: Sequence[float],
    input_grad_s: Sequence[float],
    weight_grad_s: Sequence[float],
    microbatches: int,
    virtual: int,
) -> SimRun:
    """Megatron-LM's 1F1B / interleaved order, B and W as one backward."""
    from cost_models.analytical.schedule_timeline import simulate as megatron

    backward = [b + w for b, w in zip(input_grad_s, weight_grad_s, strict=True)]
    p = len(forward_s)
    raw = megatron(forward_s, backward, microbatches, virtual)
    runs = [
        [
            (
                start,
                end,
                SimOp(
                    j,
                    "F" if op.forward else "B",
                    op.chunk * p + j,
                    0,
                    op.chunk,
                    op.microbatch,
                    not op.forward,
                ),
            )
            for start, end, op in run
        ]
        for j, run in enumerate(raw)
    ]
    return SimRun(runs)
