"""Advisory warnings attached to plans and estimates.

A warning says that an answer may mislead (a prediction above anything published, an input
that looks like a unit slip, a case outside what the cost model was checked against); it
never changes a plan's feasibility or ranking. `solver.warnings` decides which apply.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field

from specs._base import Spec

WarningCode = Literal[
    "mfu_above_measured",
    "low_memory_headroom",
    "sequence_beyond_max_positions",
    "batch_looks_like_tokens",
    "bandwidth_out_of_range",
    "scale_up_domain_beyond_system",
    "outside_validated_range",
    "kv_preemption",
    "no_launcher",
]
"""The stable warning codes (README, "Warnings")."""

WARNING_CODES: tuple[WarningCode, ...] = get_args(WarningCode)
"""Every code, in the order warnings are listed on a plan."""


class PlanWarning(Spec):
    """One advisory warning on a plan or an estimate."""

    code: WarningCode
    """Stable snake_case identifier of the rule that fired."""
    detail: str = Field(min_length=1)
    """A plain sentence for the user, with the numbers behind the warning."""


__all__ = ["WARNING_CODES", "PlanWarning", "WarningCode"]
