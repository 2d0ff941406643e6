"""Pipeline schedules as plug-ins (`Schedule`, `registry.py`): each gives its step time from
the per-rank forward, input-gradient and weight-gradient times, its in-flight activations per
rank, its lower bound for the exact search, its rules and the frameworks that run it; and a
discrete-event simulation of its operation order (`simulate.py`)."""

from cost_models.analytical.schedules.base import (
    RuleBreak,
    Schedule,
    ScheduleTime,
    StageSums,
    StageTimes,
)
from cost_models.analytical.schedules.registry import SCHEDULES, get, names, rule_breaks, valid_for

__all__ = [
    "SCHEDULES",
    "RuleBreak",
    "Schedule",
    "ScheduleTime",
    "StageSums",
    "StageTimes",
    "get",
    "names",
    "rule_breaks",
    "valid_for",
]
