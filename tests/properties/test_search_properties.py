"""Properties of whole searches over random small problems (hypothesis).

For every plan a search returns: the degrees multiply to the GPU count, the layer split covers
the model, the reported peak memory never exceeds the usable memory (capacity less headroom)
and equals the largest per-stage total, and the ranking is by step time.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cost_models.base import TrainingProblem
from cost_models.registry import build_cost_model
from hardware_catalog import resolve_cluster
from solver import search
from specs import ClusterSpec, ModelSpec, SearchConstraints, TrainingWorkload


@st.composite
def problems(draw: st.DrawFn) -> TrainingProblem:
    heads = draw(st.sampled_from([8, 16, 32]))
    head_dim = draw(st.sampled_from([64, 128]))
    kv = draw(st.sampled_from([h for h in (1, 2, 4, 8, heads) if heads % h == 0]))
    hidden = heads * head_dim
    model = ModelSpec(
        num_layers=draw(st.integers(2, 24)),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv,
        ffn_hidden_size=draw(st.sampled_from([2, 3, 4])) * hidden,
        vocab_size=draw(st.sampled_from([32000, 50257, 128256])),
        gated_mlp=draw(st.booleans()),
    )
    accelerator = draw(st.sampled_from(["h100-sxm", "a100-40gb", "mi300x", "l40s"]))
    gpus_per_node = draw(st.sampled_from([2, 4, 8]))
    cluster = resolve_cluster(
        ClusterSpec.model_validate(
            {
                "node_groups": [
                    {
                        "accelerator": accelerator,
                        "num_nodes": draw(st.integers(1, 4)),
                        "gpus_per_node": gpus_per_node,
                    }
                ]
            }
        )
    )
    workload = TrainingWorkload(
        global_batch_size=draw(st.sampled_from([8, 16, 32, 64, 96])),
        sequence_length=draw(st.sampled_from([512, 2048, 4096])),
    )
    headroom = draw(st.sampled_from([0.0, 2.0, 10.0]))
    return TrainingProblem(
        model=model, cluster=cluster, workload=workload, memory_headroom_gib=headroom
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems())
def test_every_returned_plan_is_legal_and_fits(problem: TrainingProblem) -> None:
    result = search(
        problem,
        build_cost_model("analytical"),
        SearchConstraints(memory_headroom_gib=problem.memory_headroom_gib),
        top_k=5,
    )
    usable_gib = problem.cluster.accelerator.memory_gib - problem.memory_headroom_gib
    times = []
    for ranked in result.plans:
        est = ranked.estimate
        par = est.plan.parallelism
        assert par.data * par.tensor * par.pipeline * par.context == problem.num_gpus
        assert est.plan.stage_layers is not None
        assert sum(est.plan.stage_layers) == problem.model.num_layers
        assert len(est.plan.stage_layers) == par.pipeline * par.virtual_pipeline
        assert est.feasible and not est.violations
        assert est.memory.peak_gib <= usable_gib + 1e-9
        assert est.memory.peak_gib == max(s.total_gib for s in est.memory.by_stage)
        assert est.metrics.peak_memory_gib == est.memory.peak_gib
        times.append(est.metrics.step_time_s)
    assert times == sorted(times)
    assert [r.rank for r in result.plans] == list(range(1, len(result.plans) + 1))
