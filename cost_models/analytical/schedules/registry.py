"""The registered pipeline schedules, by name. Unknown names are an error (a 422 problem at
`pipeline_schedule`), never a fallback: pricing an unknown schedule as another would prune
plans the search claims to have weighed.

The names themselves live in `specs.plan.PIPELINE_SCHEDULES` (the plan's field type; specs
sit below the cost models); importing this module checks both lists agree."""

from __future__ import annotations

from functools import lru_cache

from cost_models.analytical.schedules.base import RuleBreak, Schedule
from cost_models.analytical.schedules.dualpipe import DUALPIPE, DUALPIPE_V
from cost_models.analytical.schedules.one_f_one_b import INTERLEAVED_1F1B, ONE_F_ONE_B, GPipe
from cost_models.analytical.schedules.v_shape import V_HALF, ZERO_BUBBLE_V
from cost_models.analytical.schedules.zero_bubble import ZERO_BUBBLE_H1, ZERO_BUBBLE_H2
from specs.errors import SpecError
from specs.plan import PIPELINE_SCHEDULES

SCHEDULES: dict[str, Schedule] = {
    s.name: s
    for s in (
        GPipe(),
        ONE_F_ONE_B,
        INTERLEAVED_1F1B,
        ZERO_BUBBLE_H1,
        ZERO_BUBBLE_H2,
        ZERO_BUBBLE_V,
        V_HALF,
        DUALPIPE,
        DUALPIPE_V,
    )
}
if tuple(SCHEDULES) != PIPELINE_SCHEDULES:  # pragma: no cover - a programming error
    raise RuntimeError(
        f"schedule registry {tuple(SCHEDULES)} != specs.plan.PIPELINE_SCHEDULES "
        f"{PIPELINE_SCHEDULES}"
    )


def get(name: str) -> Schedule:
    """The schedule `name`.

    Raises:
        SpecError: at `pipeline_schedule` when no schedule has that name.
    """
    hit = SCHEDULES.get(name)
    if hit is None:
        raise SpecError(
            "pipeline_schedule",
            f"must be one of {', '.join(SCHEDULES)}",
            name,
        )
    return hit


def names() -> tuple[str, ...]:
    return tuple(SCHEDULES)


@lru_cache(maxsize=65_536)
def rule_breaks(name: str, pipeline: int, virtual: int, microbatches: int) -> tuple[RuleBreak, ...]:
    """The schedule's rules `(pipeline, virtual, microbatches)` breaks (cached: the search
    asks once per candidate)."""
    return tuple(get(name).rules(pipeline, virtual, microbatches))


def valid_for(pipeline: int, virtual: int) -> tuple[str, ...]:
    """The schedules that can run `virtual` chunks per rank on `pipeline` ranks (the rules
    that read the micro-batch count are checked per plan)."""
    return tuple(
        n for n, s in SCHEDULES.items() if s.chunks_ok(virtual) and (pipeline > 1 or n == "1f1b")
    )
