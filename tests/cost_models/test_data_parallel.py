"""Data-parallel exposure (`cost_models/analytical/training/data_parallel.py`): what the
framework hides, and what a busy NIC cannot."""

from __future__ import annotations

import dataclasses

import pytest
from cm_support import llama3_70b

from cost_models.analytical.training import AnalyticalTrainingCostModel
from cost_models.analytical.training.data_parallel import (
    RankWork,
    data_parallel_s,
    tied_embedding_bytes,
    tied_embedding_sync_s,
)
from cost_models.analytical.training.profile import profiled
from cost_models.base import TrainingProblem
from hardware_catalog import resolve_cluster
from specs.cluster import ClusterSpec
from specs.plan import PlanKey
from specs.presets import get_preset
from specs.workload import TrainingWorkload


def _setup(nodes: int, key: PlanKey):  # type: ignore[no-untyped-def]
    problem = TrainingProblem(
        model=llama3_70b(),
        cluster=resolve_cluster(
            ClusterSpec.model_validate(
                {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": nodes}]}
            )
        ),
        workload=TrainingWorkload(global_batch_size=256, sequence_length=4096),
    )
    ctx = AnalyticalTrainingCostModel().context(problem)
    return ctx, profiled(ctx, key)


def _rank(params: float, forward_s: float, backward_s: float, nic_busy_s: float) -> RankWork:
    return RankWork(
        dense_params=params,
        expert_params=0.0,
        units=82,
        forward_s=forward_s,
        backward_s=backward_s,
        fill_slack_s=0.0,
        drain_slack_s=0.0,
        nic_busy_s=nic_busy_s,
    )


KEY = PlanKey(data=8, tensor=8, sequence_parallel=True, zero_stage=1, framework="megatron_core")


def test_gradient_reduction_hides_under_the_last_backward_unless_the_nic_is_busy() -> None:
    """Megatron-Core, ZeRO-1, data 8 across nodes: the bucketed reduce-scatter runs during
    the last backward and the all-gather during the next forward; only max(one bucket,
    traffic − window) is exposed. Time the NIC spends on the expert all-to-all is not a
    window: the exposure grows by exactly the busy time (half forward, half backward) while
    the traffic still exceeds the shrunken windows."""
    ctx, prof = _setup(8, KEY)
    assert prof.groups.data_context.tier == "inter"
    params = 70e9 / 8
    probe = data_parallel_s(ctx, prof, KEY, [_rank(params, 1e-3, 2e-3, 0.0)], 8)
    # windows much shorter than the traffic: nearly everything is exposed
    assert probe.exposed_s == pytest.approx(probe.raw_s - 3e-3, rel=1e-9)
    forward, backward = probe.raw_s / 4, probe.raw_s / 4  # windows hiding part of it
    calm = data_parallel_s(ctx, prof, KEY, [_rank(params, forward, backward, 0.0)], 8)
    busy_s = probe.raw_s / 10
    busy = data_parallel_s(ctx, prof, KEY, [_rank(params, forward, backward, busy_s)], 8)
    assert calm.raw_s == busy.raw_s == probe.raw_s
    assert busy.exposed_s == pytest.approx(calm.exposed_s + busy_s, rel=1e-9)


def test_a_busy_nic_does_not_matter_to_traffic_inside_the_domain() -> None:
    """Data 8 behind tensor 1 on one 8-GPU node: the reduction stays on NVLink."""
    key = KEY._replace(tensor=1, data=8)
    ctx, prof = _setup(1, key)
    assert prof.groups.data_context.tier == "intra"
    rank = _rank(70e9 / 8, 0.05, 0.1, 0.0)
    calm = data_parallel_s(ctx, prof, key, [rank], 8)
    busy = data_parallel_s(ctx, prof, key, [_rank(70e9 / 8, 0.05, 0.1, 0.04)], 8)
    assert busy == calm


def test_tied_embeddings_across_stages_are_all_reduced_once_per_step() -> None:
    """GPT-22B (tied embeddings, vocabulary 51200, hidden 6144) on 4 H100 nodes, tensor 8 ×
    pipeline 4, Megatron-Core (fp32 gradients): the first and the last stage sum their
    word-embedding gradient shards, 51200 · 6144 / 8 · 4 B = 157.3 MB each, over the NICs
    (the two stages are 3 · 8 ranks apart, on different nodes); a two-rank ring moves the
    whole shard each way, so it takes at least shard / the per-GPU line rate. The step,
    whose data-parallel part carries it, grows by exactly that time over the same plan
    priced without it; an untied model or a plan without a pipeline has none."""
    model = AnalyticalTrainingCostModel()
    tied = get_preset("gpt-22b")
    assert tied.tie_embeddings and tied.vocab_size == 51200 and tied.hidden_size == 6144
    problem = TrainingProblem(
        model=tied,
        cluster=resolve_cluster(
            ClusterSpec.model_validate(
                {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 4}]}
            )
        ),
        workload=TrainingWorkload(global_batch_size=64, sequence_length=2048),
    )
    key = PlanKey(tensor=8, pipeline=4, sequence_parallel=True, framework="megatron_core")
    ctx = model.context(problem)
    shard = 51200 * 6144 / 8 * 4
    assert tied_embedding_bytes(ctx, key) == shard
    sync = tied_embedding_sync_s(ctx, key)
    line = problem.cluster.inter_node_bandwidth_gb_s * 1e9
    assert shard / line <= sync <= 2.5 * shard / line
    plan = key.to_plan([12, 12, 12, 12])
    est = model.evaluate(problem, plan)
    assert est.details["tied_embedding_sync_s"] == sync
    untied = dataclasses.replace(problem, model=tied.model_copy(update={"tie_embeddings": False}))
    assert tied_embedding_bytes(model.context(untied), key) == 0.0
    assert tied_embedding_sync_s(ctx, key._replace(pipeline=1)) == 0.0
    # it is part of the data-parallel time: the exposed reduction (plus the interference
    # share of what it hid) and the sync
    d = est.details
    exposed = d["data_parallel_comm_exposed_s"]
    hidden = d["data_parallel_comm_raw_s"] - exposed
    dp = exposed + d["dp_interference"] * max(0.0, hidden)
    assert est.metrics.time_breakdown_s.data_parallel_comm == pytest.approx(dp + sync, rel=1e-12)
