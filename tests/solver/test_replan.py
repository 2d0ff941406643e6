"""Re-plan restart costs (issue 16, point 4) against reshards worked by hand: which slices of
the optimizer state and weights each rank of the new layout keeps, fetches from a surviving
GPU, or reads back from the checkpoint, and the break-even time."""

from __future__ import annotations

import pytest
from fake_cost_model import tiny_model

from solver.replan import OPTIMIZER_BYTES, WEIGHT_BYTES, break_even_s, reshard, restart_seconds
from specs.plan import ParallelDims, TrainingPlan

MODEL = tiny_model(num_layers=8)
P = MODEL.num_parameters()


def _plan(zero: int = 1, **degrees: int) -> TrainingPlan:
    return TrainingPlan(parallelism=ParallelDims(**degrees), zero_stage=zero)


def test_data_degree_halved_with_zero1_fetches_one_quarter_and_reloads_half() -> None:
    # 4 data ranks, each with a quarter of the optimizer state; GPUs 2 and 3 are lost.
    # New rank 0 needs [0, 1/2): keeps [0, 1/4), fetches [1/4, 1/2) from GPU 1.
    # New rank 1 needs [1/2, 1): held by GPUs 2 and 3, both lost: read from the checkpoint.
    shard = reshard(MODEL, _plan(data=4), _plan(data=2), survivors=[0, 1])
    assert shard.peer_bytes == pytest.approx(0.25 * P * OPTIMIZER_BYTES)
    assert shard.max_rank_peer_bytes == pytest.approx(0.25 * P * OPTIMIZER_BYTES)
    assert shard.reload_bytes == pytest.approx(0.5 * P * OPTIMIZER_BYTES)
    # weights are replicated: both ranks keep theirs; rank 0 keeps a quarter of the optimizer
    assert shard.kept_bytes == pytest.approx(2 * P * WEIGHT_BYTES + 0.25 * P * OPTIMIZER_BYTES)


def test_without_zero_every_survivor_already_holds_everything() -> None:
    shard = reshard(MODEL, _plan(zero=0, data=4), _plan(zero=0, data=2), survivors=[0, 1])
    assert shard.peer_bytes == 0 and shard.reload_bytes == 0
    assert shard.kept_bytes == pytest.approx(2 * P * (WEIGHT_BYTES + OPTIMIZER_BYTES))


def test_tensor_kept_data_dropped_reloads_the_lost_data_ranks_optimizer_shards() -> None:
    # tp 2 × dp 2 (ranks: tp fastest): GPU 2 + j held the second half of tensor slice j's
    # optimizer state; after losing GPUs 2 and 3, rank j needs all of slice j's state
    shard = reshard(MODEL, _plan(tensor=2, data=2), _plan(tensor=2, data=1), survivors=[0, 1])
    assert shard.peer_bytes == pytest.approx(0.0)
    assert shard.reload_bytes == pytest.approx(2 * 0.25 * P * OPTIMIZER_BYTES)


def test_a_new_gpu_fetches_its_whole_share_from_peers() -> None:
    # 2 data ranks with ZeRO-1; GPU 1 lost, one GPU added: the new GPU (rank 1) needs the
    # weights (a surviving replica on GPU 0) and optimizer half [1/2, 1) (GPU 1's: lost)
    shard = reshard(MODEL, _plan(data=2), _plan(data=2), survivors=[0], added_gpus=1)
    assert shard.peer_bytes == pytest.approx(P * WEIGHT_BYTES)
    assert shard.reload_bytes == pytest.approx(0.5 * P * OPTIMIZER_BYTES)


def test_restart_time_and_break_even() -> None:
    shard = reshard(MODEL, _plan(data=4), _plan(data=2), survivors=[0, 1])
    nic, storage = 50e9, 10e9
    t = restart_seconds(shard, nic_bytes_per_s=nic, storage_bytes_per_s=storage, overhead_s=60)
    assert t == pytest.approx(60 + 0.25 * P * 12 / nic + 0.5 * P * 12 / storage)
    # 1000 tok/s after 100 s against 800 tok/s after 50 s: equal tokens at
    # 1000 (t − 100) = 800 (t − 50) → t = 300 s
    assert break_even_s(1000, 100, 800, 50) == pytest.approx(300)
    assert break_even_s(700, 10, 800, 50) is None  # slower: never ahead for good
    assert break_even_s(1000, 10, 800, 50) == pytest.approx(10)  # ahead from its restart


def test_pipeline_change_moves_layers_between_stages() -> None:
    # pp 2 → pp 1 on GPU 0: layers 4..7 and the output layer lived on GPU 1 (pipeline rank
    # 1); GPU 1 survives, so GPU 0 fetches their weights and optimizer state from it
    shard = reshard(MODEL, _plan(pipeline=2), _plan(pipeline=1), survivors=[0, 1])
    vocab = MODEL.vocab_size * MODEL.hidden_size
    second = (P - 2 * vocab) / 8 * 4 + vocab  # four layers and the output layer
    assert shard.peer_bytes == pytest.approx(second * (WEIGHT_BYTES + OPTIMIZER_BYTES))
    assert shard.reload_bytes == pytest.approx(0.0)
