"""The registered "analytical" training cost model: FLOPs × achieved GEMM efficiency,
alpha-beta collectives on a two-tier topology, tensor-counted memory and 1F1B schedules.

The model is a thin object over the concept modules of this package: `rules` (structural
checks), `layer_costs` / `model_states` / `extras` (per-layer time, states and the
embedding / LM head), `profile` (a plan's `LayerProfile`), `bounds` (the search's lower
bounds), `data_parallel` and `estimate` (the full estimate). Everything derived from a
problem lives in one `ProblemContext` (`context`), built once per problem object; every
part is cached by the named projection of the plan it depends on (`shapes`).

The keyed entry points (`check_key`, `profile_key`) and the search bounds
(`group_memory_lower_bound_bytes`, `step_time_lower_bound_s`) implement the optional
`KeyedTrainingCostModel` / `BoundedTrainingCostModel` protocols of `cost_models.base`; no
pydantic object is built before the output.
"""

from __future__ import annotations

from cost_models.analytical.training import bounds, estimate, rules
from cost_models.analytical.training.config import AnalyticalConfig
from cost_models.analytical.training.context import ProblemContext, build_context
from cost_models.analytical.training.profile import profiled
from cost_models.base import LayerProfile, TrainingEstimate, TrainingProblem
from cost_models.registry import register_cost_model
from specs.plan import PlanKey, TrainingPlan, Violation

_MAX_CONTEXTS = 512


@register_cost_model("analytical")
class AnalyticalTrainingCostModel:
    """FLOPs × achieved efficiency, alpha-beta comm, tensor-counted memory, 1F1B schedules."""

    name = "analytical"
    version = "1"
    Config = AnalyticalConfig

    def __init__(self, config: AnalyticalConfig | None = None) -> None:
        self.config = config or AnalyticalConfig()
        self._contexts: dict[int, ProblemContext] = {}
        self._last: ProblemContext | None = None
        """The context asked for last (one attribute: a search asks for the same problem
        tens of thousands of times)."""

    def context(self, problem: TrainingProblem) -> ProblemContext:
        """Everything derived from `problem` (built once per problem object)."""
        ctx = self._last
        if ctx is not None and ctx.problem is problem:
            return ctx
        ctx = self._contexts.get(id(problem))
        if ctx is None or ctx.problem is not problem:
            if len(self._contexts) >= _MAX_CONTEXTS:
                self._contexts.clear()
            ctx = self._contexts[id(problem)] = build_context(self.config, problem)
        self._last = ctx
        return ctx

    def check(self, problem: TrainingProblem, plan: TrainingPlan) -> list[Violation]:
        """Structural rules (no costs), `rules.check`. A plan that names no framework is
        checked under the one `resolve` picks."""
        ctx = self.context(problem)
        return rules.check(ctx, ctx.resolve(plan.key()))

    def check_key(self, problem: TrainingProblem, key: PlanKey) -> list[Violation]:
        """`check()` of the plan `key` describes, without building the plan."""
        ctx = self.context(problem)
        return rules.check_key(ctx, key if key.framework else ctx.resolve(key))

    def profile(self, problem: TrainingProblem, plan: TrainingPlan) -> LayerProfile:
        """Per-layer costs independent of the pipeline split (stage_layers is ignored)."""
        ctx = self.context(problem)
        return profiled(ctx, ctx.resolve(plan.key())).public

    def profile_key(self, problem: TrainingProblem, key: PlanKey) -> LayerProfile:
        """`profile()` of the plan `key` describes, without building the plan."""
        ctx = self.context(problem)
        return profiled(ctx, ctx.resolve(key)).public

    def evaluate(self, problem: TrainingProblem, plan: TrainingPlan) -> TrainingEstimate:
        """Full estimate of a plan with stage_layers set (`estimate.evaluate`); a plan that
        names no framework is priced, and returned, with the one `resolve` picks."""
        ctx = self.context(problem)
        key = ctx.resolve(plan.key())
        if plan.framework is None:
            plan = plan.model_copy(update={"framework": key.framework})
        return estimate.evaluate(ctx, plan, rules.check_key(ctx, key))

    def group_memory_lower_bound_bytes(self, problem: TrainingProblem, key: PlanKey) -> float:
        """`bounds.group_memory_lower_bound_bytes`."""
        ctx = self.context(problem)
        return bounds.group_memory_lower_bound_bytes(ctx, ctx.resolve(key))

    def step_time_lower_bound_s(self, problem: TrainingProblem, key: PlanKey) -> float:
        """`bounds.step_time_lower_bound_s`."""
        ctx = self.context(problem)
        return bounds.step_time_lower_bound_s(ctx, key if key.framework else ctx.resolve(key))

    def context_free_step_lower_bound_s(
        self, problem: TrainingProblem, key: PlanKey, work_floor_s: float = 0.0
    ) -> float:
        """`bounds.context_free_step_lower_bound_s`: a bound for `key` under every
        context-parallel algorithm (`work_floor_s`: a proved lower bound on their busiest
        rank's work per micro-batch)."""
        ctx = self.context(problem)
        return bounds.context_free_step_lower_bound_s(
            ctx, key if key.framework else ctx.resolve(key), work_floor_s
        )

    def relaxed_step_lower_bound_s(self, problem: TrainingProblem, key: PlanKey) -> float:
        """`bounds.relaxed_step_lower_bound_s`: a bound for every plan sharing `key`'s
        degrees, micro-batch size, framework and vocabulary parallelism."""
        ctx = self.context(problem)
        return bounds.relaxed_step_lower_bound_s(ctx, key if key.framework else ctx.resolve(key))

    def context_free_profile_key(
        self, problem: TrainingProblem, key: PlanKey
    ) -> LayerProfile | None:
        """`bounds.context_free_profile`: a profile whose partition program bounds that of
        every context-parallel algorithm of `key` from below (None: no such profile)."""
        ctx = self.context(problem)
        return bounds.context_free_profile(ctx, key if key.framework else ctx.resolve(key))
