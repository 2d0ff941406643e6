"""Which framework runs a plan's pipeline schedule, for the exports: the schedule plug-in
lists the frameworks that run it and their options (`cost_models.analytical.schedules`); a
format whose framework is not among them refuses the plan (422) naming the rule
`<format>.pipeline-schedule`. Likewise vocabulary parallelism (`plan.vocab_parallel`): a
format whose framework does not run it (`FrameworkProfile.runs_vocab_parallel`) refuses the
plan naming `<format>.vocab-parallel`."""

from __future__ import annotations

from collections.abc import Mapping

from app.exports.base import UnexpressiblePlan
from cost_models.analytical.schedules import get
from cost_models.frameworks import build_framework
from specs.plan import TrainingPlan


def schedule_options(fmt: str, framework: str, plan: TrainingPlan) -> Mapping[str, str]:
    """The options `framework` runs `plan.pipeline_schedule` with (empty without
    pipelining: there is no schedule to run).

    Raises:
        UnexpressiblePlan: rule `<fmt>.pipeline-schedule` when the framework does not run
            the schedule.
    """
    if plan.parallelism.pipeline <= 1:
        return {}
    schedule = get(plan.pipeline_schedule)
    option = schedule.frameworks.get(framework)
    if option is None:
        runs = ", ".join(sorted(schedule.frameworks)) or "none of the exported frameworks"
        raise UnexpressiblePlan(
            fmt,
            f"{fmt}.pipeline-schedule",
            f"{framework} does not run pipeline schedule {plan.pipeline_schedule} "
            f"({schedule.title}; run by: {runs})",
        )
    return option.options


def require_vocab_parallel(fmt: str, framework: str, plan: TrainingPlan) -> None:
    """Nothing when the plan keeps Megatron's vocabulary layout or `framework` runs
    vocabulary parallelism.

    Raises:
        UnexpressiblePlan: rule `<fmt>.vocab-parallel` when the plan splits the embedding
            and LM head over the pipeline stages and the framework does not.
    """
    if not plan.vocab_parallel or build_framework(framework).runs_vocab_parallel:
        return
    raise UnexpressiblePlan(
        fmt,
        f"{fmt}.vocab-parallel",
        f"{framework} does not split the embedding and LM head over the pipeline stages "
        "(vocab_parallel; run by the sail-sg/VocabularyParallelism fork of Megatron-LM: use "
        "the megatron format)",
    )
