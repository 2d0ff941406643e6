"""Validation rules of the domain specs, one rule per test, and content_hash properties."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specs.constraints import FIXABLE_FIELDS, SearchConstraints
from specs.model import MLASpec, ModelSpec, MoESpec
from specs.plan import ParallelDims, TrainingPlan, canonical_hash
from specs.workload import TrainingWorkload

_MODEL: dict[str, Any] = {
    "num_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 8,
    "ffn_hidden_size": 1024,
    "vocab_size": 1000,
}


# ---- ModelSpec / MoESpec ---------------------------------------------------------------
def test_kv_heads_must_divide_attention_heads() -> None:
    with pytest.raises(
        ValueError, match=r"num_attention_heads \(8\) must be divisible by num_kv_heads \(3\)"
    ):
        ModelSpec(**_MODEL, num_kv_heads=3)


def test_kv_heads_must_not_exceed_attention_heads() -> None:
    with pytest.raises(ValueError, match=r"num_kv_heads \(16\) must not exceed"):
        ModelSpec(**_MODEL, num_kv_heads=16)


def test_hidden_size_divisible_by_heads_without_head_dim() -> None:
    with pytest.raises(ValueError, match="unless head_dim is given"):
        ModelSpec(**(_MODEL | {"hidden_size": 250}))


def test_hidden_size_not_divisible_is_fine_with_head_dim() -> None:
    spec = ModelSpec(**(_MODEL | {"hidden_size": 250}), head_dim=32)
    assert spec.head_size == 32


def test_top_k_must_not_exceed_experts() -> None:
    with pytest.raises(ValueError, match=r"moe.top_k \(9\) must not exceed moe.num_experts \(8\)"):
        MoESpec(num_experts=8, top_k=9, expert_ffn_hidden_size=64)


def test_moe_needs_two_experts() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 2"):
        MoESpec(num_experts=1, top_k=1, expert_ffn_hidden_size=64)


def test_dense_layers_must_not_exceed_layers() -> None:
    with pytest.raises(
        ValueError, match=r"moe.num_dense_layers \(5\) must not exceed num_layers \(4\)"
    ):
        ModelSpec(
            **_MODEL,
            moe=MoESpec(num_experts=4, top_k=2, expert_ffn_hidden_size=64, num_dense_layers=5),
        )


def test_learned_positions_need_a_table_size() -> None:
    with pytest.raises(ValueError, match="max_position_embeddings is required"):
        ModelSpec(**_MODEL, position_embedding="learned")


def test_unknown_model_field_is_rejected() -> None:
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        ModelSpec.model_validate(_MODEL | {"num_experts": 8})


def test_mla_ranks_must_be_positive() -> None:
    with pytest.raises(ValueError, match="greater than 0"):
        MLASpec(kv_lora_rank=0, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_layers", 0, "greater than or equal to 1"),
        ("num_layers", 1025, "less than or equal to 1024"),
        ("hidden_size", -8, "greater than or equal to 1"),
        ("vocab_size", 2.5, "fractional part"),
        ("num_attention_heads", "many", "valid integer"),
    ],
)
def test_model_number_rules(field: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ModelSpec(**(_MODEL | {field: value}))


def test_specs_are_frozen() -> None:
    spec = ModelSpec(**_MODEL)
    with pytest.raises(ValueError, match="frozen"):
        spec.num_layers = 8  # type: ignore[misc]


# ---- ParallelDims / TrainingPlan ---------------------------------------------------------
def test_sequence_parallel_needs_tensor_parallel() -> None:
    with pytest.raises(
        ValueError, match=r"sequence_parallel requires tensor > 1 \(got tensor = 1\)"
    ):
        ParallelDims(tensor=1, sequence_parallel=True)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("tensor", 0, "greater than or equal to 1"),
        ("tensor", 2048, "less than or equal to 1024"),
        ("pipeline", -1, "greater than or equal to 1"),
        ("virtual_pipeline", 65, "less than or equal to 64"),
        ("expert", 1.5, "fractional part"),
        ("data", 0, "greater than or equal to 1"),
    ],
)
def test_parallel_degree_number_rules(field: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ParallelDims(**{field: value})


def test_parallel_world_size_is_data_tensor_pipeline_context() -> None:
    dims = ParallelDims(data=3, tensor=4, pipeline=5, context=2, expert=8)
    assert dims.world_size == 3 * 4 * 5 * 2 == 120
    assert dims.tensor_enabled and dims.pipeline_enabled and dims.expert_enabled


def test_interleaved_schedule_needs_virtual_pipeline() -> None:
    with pytest.raises(
        ValueError, match=r"interleaved_1f1b requires parallelism.virtual_pipeline > 1 \(got 1\)"
    ):
        TrainingPlan(parallelism=ParallelDims(pipeline=4), pipeline_schedule="interleaved_1f1b")


def test_virtual_pipeline_needs_interleaved_schedule() -> None:
    with pytest.raises(ValueError, match="requires pipeline_schedule interleaved_1f1b"):
        TrainingPlan(parallelism=ParallelDims(pipeline=4, virtual_pipeline=2))


def test_stage_layers_length_is_pipeline_times_virtual() -> None:
    with pytest.raises(
        ValueError, match=r"stage_layers has 3 entries; it must have .* = 4 × 2 = 8"
    ):
        TrainingPlan(
            parallelism=ParallelDims(pipeline=4, virtual_pipeline=2),
            pipeline_schedule="interleaved_1f1b",
            stage_layers=[10, 10, 10],
        )


def test_stage_layers_entries_at_least_one() -> None:
    with pytest.raises(ValueError, match="every stage_layers entry must be >= 1"):
        TrainingPlan(parallelism=ParallelDims(pipeline=2), stage_layers=[4, 0])


def test_zero_stage_is_zero_to_three() -> None:
    with pytest.raises(ValueError, match="Input should be 0, 1, 2 or 3"):
        TrainingPlan(parallelism=ParallelDims(), zero_stage=4)


def test_micro_batch_size_positive() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        TrainingPlan(parallelism=ParallelDims(), micro_batch_size=0)


# ---- SearchConstraints / workload -----------------------------------------------------
def test_unknown_fixed_field_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"fixed has unknown fields \['tp'\]"):
        SearchConstraints(fixed={"tp": 8})


def test_known_fixed_fields_are_accepted() -> None:
    assert SearchConstraints(fixed={"tensor": 8, "recompute": "full"}).fixed["tensor"] == 8
    assert {"tensor", "pipeline", "stage_layers"} <= FIXABLE_FIELDS


def test_micro_batch_sizes_bounds() -> None:
    with pytest.raises(ValueError, match="micro_batch_sizes must be between 1 and 65536"):
        SearchConstraints(micro_batch_sizes=[1, 0])


def test_time_limit_positive() -> None:
    with pytest.raises(ValueError, match="greater than 0"):
        SearchConstraints(time_limit_s=0)


def test_workload_batch_positive() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        TrainingWorkload(global_batch_size=0, sequence_length=4096)


def test_workload_tokens_per_step() -> None:
    assert (
        TrainingWorkload(global_batch_size=1024, sequence_length=4096).tokens_per_step == 4_194_304
    )


# ---- content_hash ------------------------------------------------------------------------
_plans = st.fixed_dictionaries(
    {
        "parallelism": st.fixed_dictionaries(
            {
                "data": st.integers(1, 64),
                "tensor": st.sampled_from([1, 2, 4, 8]),
                "pipeline": st.integers(1, 8),
                "context": st.integers(1, 4),
                "expert": st.integers(1, 8),
            }
        ),
        "micro_batch_size": st.integers(1, 16),
        "zero_stage": st.sampled_from([0, 1, 2, 3]),
        "recompute": st.sampled_from(["none", "selective", "full"]),
        "flash_attention": st.booleans(),
    }
)


def _shuffled(value: Any, rng: random.Random) -> Any:
    """The same JSON value with every object's keys in a random order."""
    if isinstance(value, dict):
        keys = list(value)
        rng.shuffle(keys)
        return {k: _shuffled(value[k], rng) for k in keys}
    return value


@settings(max_examples=60, deadline=None)
@given(plan=_plans, seed=st.integers(0, 2**32 - 1))
def test_content_hash_stable_under_key_reordering(plan: dict[str, Any], seed: int) -> None:
    shuffled = _shuffled(plan, random.Random(seed))
    a = TrainingPlan.model_validate(plan)
    b = TrainingPlan.model_validate(shuffled)
    assert a.content_hash() == b.content_hash()
    assert canonical_hash(plan) == canonical_hash(shuffled)


@settings(max_examples=40, deadline=None)
@given(plan=_plans)
def test_content_hash_changes_with_the_answer(plan: dict[str, Any]) -> None:
    a = TrainingPlan.model_validate(plan)
    bumped = plan | {"micro_batch_size": plan["micro_batch_size"] + 1}
    assert a.content_hash() != TrainingPlan.model_validate(bumped).content_hash()


def test_content_hash_is_sha256_hex() -> None:
    digest = TrainingPlan(parallelism=ParallelDims()).content_hash()
    assert len(digest) == 64 and int(digest, 16) >= 0
