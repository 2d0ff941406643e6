"""What a pipeline schedule is to the cost model (`Schedule`), and the closed form most
schedules share (`BubbleSchedule`).

Per pipeline rank j and per micro-batch (summed over the rank's chunks):

* F_j — forward, with its boundary sends;
* B_j — input-gradient backward ("B" of Qi et al., "Zero Bubble Pipeline Parallelism", ICLR
  2024, §2), with recomputation and its boundary sends;
* W_j — weight-gradient backward ("W", ibid.): the GEMMs' weight-gradient halves
  (`layer_costs.py` documents the split);
* T_j = F_j + B_j + W_j, the rank's work per micro-batch; M = max_j T_j.

A schedule that does not split the backward runs W right after its B (B + W is the classic
backward). The step of the pipeline is `steady + bubble` with steady = m·M (the slowest rank
is never idle in the steady state) and a bubble each schedule gives in closed form from its
paper. The papers state their bubbles for identical stages as (p−1) (or (p/2−1)) times a
per-stage term β(F, B, W); with uneven stages we charge every rank but the critical one its
own β (the pattern of Narayanan et al. 2021's 1F1B, (m−1)·max T + Σ T):

    bubble = κ(p, v) · Σ_{j ≠ c} β_j,   β_j = max(F_j, a_F·F_j + a_B·B_j + a_W·W_j),

c the rank with the largest T. For identical stages this is the paper's formula wherever it
is at least the pipeline fill: a synchronous step cannot hide the wait of the later ranks for
their first forward, (p−1)·F (per-chunk F with 2 chunks), which the zero-bubble papers hide
only across steps (Qi et al. 2024 §4, optimizer post-validation; this planner prices one
synchronous step). Hence the floor F_j in β_j: ZB-H2 and ZB-V with F + B ≤ 2W still pay the
fill. The closed forms are checked against the discrete-event simulation (`simulate.py`)
in the tests.

Lower bound (for the exact search, `bounds.py`): with L ≤ M known and G = a_F·ΣF + a_B·ΣB
+ a_W·ΣW (split-independent), Σ_{j≠c} β_j ≥ Σ_{j≠c} lin_j = G − lin_c ≥ G − a·M where a =
max(a_F, a_B, a_W, 0) (every time is ≥ 0), and Σ_{j≠c} β_j ≥ ΣF − F_c ≥ ΣF − M; so step ≥
m·M + κ·max(0, G − a·M, ΣF − M), which does not decrease in M when m ≥ κ·max(a, 1) (true
for every registered schedule: κ·max(a, 1) ≤ 1 ≤ m); hence step ≥ m·L + κ·max(0, G − a·L,
ΣF − L).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

Placement = Literal["loop", "v", "dual"]
"""How chunks sit on ranks: "loop" — chunk c on rank c mod p (Megatron, torchtitan's default);
"v" — 2 chunks per rank, chunk c on rank c for c < p and 2p−1−c after (ZB-V, V-Half,
DualPipeV); "dual" — one stage per rank per direction, rank j holding stage j of one model
copy and stage p−1−j of the other (DualPipe)."""


@dataclass(frozen=True, slots=True)
class StageTimes:
    """Per pipeline rank, per micro-batch (all of the rank's chunks), seconds."""

    forward_s: tuple[float, ...]
    input_grad_s: tuple[float, ...]
    weight_grad_s: tuple[float, ...]
    total_s: tuple[float, ...] | None = None
    """T_j when the caller has it summed already (the cost model's rank work, so that the
    schedule reads the very number the rest of the estimate does); else F + B + W."""

    @classmethod
    def of(
        cls,
        forward_s: Sequence[float],
        input_grad_s: Sequence[float],
        weight_grad_s: Sequence[float] | None = None,
    ) -> StageTimes:
        w = tuple(weight_grad_s) if weight_grad_s is not None else (0.0,) * len(forward_s)
        return cls(tuple(forward_s), tuple(input_grad_s), w)

    @property
    def work_s(self) -> list[float]:
        if self.total_s is not None:
            return list(self.total_s)
        return [
            f + b + w
            for f, b, w in zip(self.forward_s, self.input_grad_s, self.weight_grad_s, strict=True)
        ]


@dataclass(frozen=True, slots=True)
class StageSums:
    """Split-independent sums over the ranks of F, B and W (what `bounds.py` knows)."""

    forward_s: float
    input_grad_s: float
    weight_grad_s: float

    @property
    def total_s(self) -> float:
        return self.forward_s + self.input_grad_s + self.weight_grad_s


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


@dataclass(frozen=True, slots=True)
class RuleBreak:
    """A schedule rule a plan breaks: a stable rule id and the detail."""

    rule: str
    detail: str


@dataclass(frozen=True, slots=True)
class FrameworkOption:
    """How one framework runs a schedule: the options to set (empty: its default)."""

    options: Mapping[str, str] = field(default_factory=dict)
    note: str = ""


@runtime_checkable
class Schedule(Protocol):
    """A pipeline schedule plug-in (`registry.py`)."""

    @property
    def name(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def source(self) -> str:
        """The paper or code the closed forms come from."""
        ...

    @property
    def placement(self) -> Placement: ...

    @property
    def splits_backward(self) -> bool:
        """Runs B and W as separate operations (zero-bubble family)."""
        ...

    @property
    def parameter_copies(self) -> int:
        """Copies of its stage's parameters a rank holds (DualPipe: 2)."""
        ...

    @property
    def frameworks(self) -> Mapping[str, FrameworkOption]:
        """Frameworks that run the schedule, by their registered name, and how."""
        ...

    def chunks_ok(self, virtual: int) -> bool: ...

    def rules(self, pipeline: int, virtual: int, microbatches: int) -> list[RuleBreak]: ...

    def step(self, times: StageTimes, microbatches: int, virtual: int) -> ScheduleTime: ...

    def inflight(
        self, pipeline: int, virtual: int, microbatches: int
    ) -> tuple[tuple[int, ...], ...]: ...

    def lower_bound_s(
        self, microbatches: int, pipeline: int, virtual: int, work_max_s: float, sums: StageSums
    ) -> float: ...


Coefficient = Callable[[int, int], float]
"""κ(p, v)."""


@dataclass(frozen=True, slots=True)
class BubbleSchedule:
    """The shared closed form of the module docstring: steady m·M plus κ·Σ_{j≠c} β_j."""

    name: str
    title: str
    source: str
    beta: tuple[float, float, float]
    """(a_F, a_B, a_W) of the per-stage bubble term."""
    kappa: Coefficient
    chunks: tuple[int, int | None]
    """Allowed chunks per rank: (min, max); max None = unbounded."""
    inflight_rows: Callable[[int, int, int], tuple[tuple[int, ...], ...]]
    placement: Placement = "loop"
    splits_backward: bool = False
    parameter_copies: int = 1
    frameworks: Mapping[str, FrameworkOption] = field(default_factory=dict)
    extra_rules: Callable[[int, int, int], list[RuleBreak]] | None = None

    def chunks_ok(self, virtual: int) -> bool:
        lo, hi = self.chunks
        return virtual >= lo and (hi is None or virtual <= hi)

    def rules(self, pipeline: int, virtual: int, microbatches: int) -> list[RuleBreak]:
        out: list[RuleBreak] = []
        lo, hi = self.chunks
        if not self.chunks_ok(virtual):
            want = (
                f"exactly {lo}" if lo == hi else f"at least {lo}" if hi is None else f"{lo}..{hi}"
            )
            out.append(
                RuleBreak(
                    f"{self.name}.chunks-per-rank",
                    f"{self.name} runs {want} model chunk(s) per pipeline rank "
                    f"(parallelism.virtual_pipeline = {virtual})",
                )
            )
        if self.extra_rules is not None:
            out.extend(self.extra_rules(pipeline, virtual, microbatches))
        return out

    def _beta(self, f: float, b: float, w: float) -> float:
        a_f, a_b, a_w = self.beta
        return max(f, a_f * f + a_b * b + a_w * w)

    def step(self, times: StageTimes, microbatches: int, virtual: int) -> ScheduleTime:
        work = times.work_s
        crit = max(range(len(work)), key=work.__getitem__)
        w_max = work[crit]
        betas = sum(
            self._beta(f, b, w)
            for j, (f, b, w) in enumerate(
                zip(times.forward_s, times.input_grad_s, times.weight_grad_s, strict=True)
            )
            if j != crit
        )
        steady = microbatches * w_max
        bubble = self.kappa(len(work), virtual) * betas
        return ScheduleTime(steady + bubble, steady, bubble)

    def lower_bound_s(
        self, microbatches: int, pipeline: int, virtual: int, work_max_s: float, sums: StageSums
    ) -> float:
        a_f, a_b, a_w = self.beta
        g = a_f * sums.forward_s + a_b * sums.input_grad_s + a_w * sums.weight_grad_s
        a = max(a_f, a_b, a_w, 0.0)
        kappa = self.kappa(pipeline, virtual) if pipeline > 1 else 0.0
        fill = sums.forward_s - work_max_s
        return microbatches * work_max_s + kappa * max(0.0, g - a * work_max_s, fill)

    def inflight(
        self, pipeline: int, virtual: int, microbatches: int
    ) -> tuple[tuple[int, ...], ...]:
        return self.inflight_rows(pipeline, virtual, microbatches)


def capped(rows: Sequence[Sequence[int]], microbatches: int) -> tuple[tuple[int, ...], ...]:
    """Each count capped at the micro-batches of the step (none can hold more)."""
    return tuple(tuple(min(c, microbatches) for c in row) for row in rows)
