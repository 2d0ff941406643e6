"""Pipeline schedules: step time from the per-rank work per micro-batch.

W_j is the time pipeline rank j spends on one micro-batch (forward + backward of all its
chunks, extras and boundary transfers). With uneven stages the slowest rank sets the pace.

* 1F1B (PipeDream-Flush; Narayanan et al. 2021 §2.2.1): step = (m−1)·max_j W_j + Σ_j W_j.
  For uniform stages W this is (m + p − 1)·W: the bubble is (p−1)/m of the ideal m·W.
* Interleaved 1F1B with v chunks per rank (§2.2.2): step = m·max_j W_j + (Σ_j W_j − max_j W_j)/v,
  i.e. m·W + (p−1)·W/v for uniform stages: the bubble shrinks to (p−1)/(v·m).

The bubble is step − m·max_j W_j.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScheduleTime:
    """A schedule's step time and its bubble, seconds."""

    step_s: float
    steady_s: float
    """m × the slowest rank's work per micro-batch."""
    bubble_s: float

    @property
    def bubble_fraction(self) -> float:
        return self.bubble_s / self.step_s if self.step_s > 0 else 0.0


def one_f_one_b(work_s: Sequence[float], microbatches: int) -> ScheduleTime:
    """1F1B: (m−1)·max W + Σ W (Narayanan et al. 2021 §2.2.1)."""
    w_max = max(work_s)
    step = (microbatches - 1) * w_max + sum(work_s)
    steady = microbatches * w_max
    return ScheduleTime(step, steady, step - steady)


def interleaved_one_f_one_b(
    work_s: Sequence[float], microbatches: int, virtual: int
) -> ScheduleTime:
    """Interleaved 1F1B: m·max W + (Σ W − max W)/v (Narayanan et al. 2021 §2.2.2)."""
    w_max = max(work_s)
    steady = microbatches * w_max
    step = steady + (sum(work_s) - w_max) / virtual
    return ScheduleTime(step, steady, step - steady)


def pipeline_step(
    work_s: Sequence[float], microbatches: int, virtual: int, schedule: str
) -> ScheduleTime:
    """Dispatch on the plan's pipeline_schedule."""
    if schedule == "interleaved_1f1b" and virtual > 1:
        return interleaved_one_f_one_b(work_s, microbatches, virtual)
    return one_f_one_b(work_s, microbatches)
