"""The PyTorch pipelining schedules the registry maps to meshplan's schedules run the same
schedule: PyTorch's own per-rank operation order (`torch.distributed.pipelining.schedules`,
computed without processes), replayed with F, B and W times under the data dependencies,
takes the step the schedule plug-in prices.

ZB-H1 is `ScheduleInterleavedZeroBubble` with one stage per rank (the `fsdp` profile's plain
loop; torchtitan only builds it with ≥ 2 stages per rank)."""

from __future__ import annotations

from typing import Any

import pytest

from cost_models.analytical.schedules import get
from cost_models.analytical.schedules.base import StageTimes

schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
KINDS = schedules._ComputationType


def _torch_order(cls: Any, pipeline: int, microbatches: int) -> dict[int, list[Any]]:
    """The per-rank actions PyTorch's constructor computes, for one stage per rank."""
    sched = cls.__new__(cls)  # the order needs no process group: set what it reads
    sched.pp_group_size = pipeline
    sched.n_local_stages = 1
    sched._n_microbatches = microbatches
    sched.number_of_rounds = max(1, microbatches // pipeline)
    sched.microbatches_per_round = microbatches // sched.number_of_rounds
    return {
        r: [a for a in sched._calculate_single_rank_operations(r) if a is not None]
        for r in range(pipeline)
    }


def _replay(order: dict[int, list[Any]], f: float, b: float, w: float) -> float:
    """Each rank runs its actions in PyTorch's order, each as soon as its inputs exist:
    F(s, i) after F(s−1, i); B(s, i) after B(s+1, i) (the last stage's after its F); W(s, i)
    after B(s, i). Returns the end of the last operation."""
    last = len(order) - 1
    done: dict[tuple[str, int, int], float] = {}
    clock = dict.fromkeys(order, 0.0)
    pos = dict.fromkeys(order, 0)
    remaining = sum(len(v) for v in order.values())
    while remaining:
        moved = False
        for r, actions in order.items():
            while pos[r] < len(actions):
                a = actions[pos[r]]
                s, i, kind = a.stage_index, a.microbatch_index, a.computation_type
                if kind == KINDS.FORWARD:
                    op, need, dur = "F", [("F", s - 1, i)] if s else [], f
                elif kind == KINDS.BACKWARD_WEIGHT:
                    op, need, dur = "W", [("B", s, i)], w
                else:
                    assert kind in (KINDS.BACKWARD_INPUT, KINDS.FULL_BACKWARD), kind
                    op = "B"
                    need = [("B", s + 1, i)] if s < last else [("F", s, i)]
                    dur = b if kind == KINDS.BACKWARD_INPUT else b + w
                if any(n not in done for n in need):
                    break
                clock[r] = max([clock[r]] + [done[n] for n in need]) + dur
                done[op, s, i] = clock[r]
                pos[r] += 1
                remaining -= 1
                moved = True
        assert moved, "the order deadlocks"
    return max(clock.values())


@pytest.mark.parametrize(
    ("pipeline", "microbatches", "f", "b", "w"),
    [
        (4, 8, 1.0, 1.0, 1.0),
        (4, 8, 1.0, 1.2, 0.8),
        (8, 24, 1.0, 1.15, 0.8),
        (6, 12, 1.0, 2.0, 0.5),
        (4, 8, 1.0, 0.5, 2.0),  # W > F + B: the fill F floors the bubble
        (3, 9, 1.0, 1.0, 3.0),
    ],
)
def test_torch_interleaved_zero_bubble_with_one_stage_is_zb_h1(
    pipeline: int, microbatches: int, f: float, b: float, w: float
) -> None:
    order = _torch_order(schedules.ScheduleInterleavedZeroBubble, pipeline, microbatches)
    # one stage per rank: rank r runs only stage r, every micro-batch's F, B and W once
    for r, actions in order.items():
        assert {a.stage_index for a in actions} == {r}
        assert len(actions) == 3 * microbatches
    times = StageTimes.of([f] * pipeline, [b] * pipeline, [w] * pipeline)
    priced = get("zero_bubble_h1").step(times, microbatches, 1)
    # by hand (Qi et al. 2024 Table 1): m·(F+B+W) + (p−1)·max(F, F+B−W)
    hand = microbatches * (f + b + w) + (pipeline - 1) * max(f, f + b - w)
    assert priced.step_s == pytest.approx(hand)
    assert _replay(order, f, b, w) == pytest.approx(hand)


def test_the_replay_with_w_fused_into_b_takes_the_1f1b_step() -> None:
    """The replay itself against a known schedule: the same order with each W run inside
    its B (full backwards) is 1F1B's order, and takes 1F1B's step."""
    p, m, f, b, w = 4, 8, 1.0, 1.0, 1.0
    order = _torch_order(schedules.ScheduleInterleavedZeroBubble, p, m)
    fused = {
        r: [
            a._replace(computation_type=KINDS.FULL_BACKWARD)
            if a.computation_type == KINDS.BACKWARD_INPUT
            else a
            for a in acts
            if a.computation_type != KINDS.BACKWARD_WEIGHT
        ]
        for r, acts in order.items()
    }
    times = StageTimes.of([f] * p, [b] * p, [w] * p)
    assert _replay(fused, f, b, w) == pytest.approx(get("1f1b").step(times, m, 1).step_s)


def test_the_registry_names_who_runs_each_schedule() -> None:
    h1 = get("zero_bubble_h1").frameworks
    assert set(h1) == {"fsdp"}
    assert h1["fsdp"].options["schedule_class"].endswith(".ScheduleInterleavedZeroBubble")
    assert not get("zero_bubble_h2").frameworks  # ZB-2p is a different, searched schedule
    for name, cls in (
        ("gpipe", "ScheduleGPipe"),
        ("zero_bubble_v", "ScheduleZBVZeroBubble"),
        ("dualpipe_v", "ScheduleDualPipeV"),
    ):
        option = get(name).frameworks["fsdp"].options["schedule_class"]
        assert option == f"torch.distributed.pipelining.{cls}"
        assert hasattr(schedules, cls)
