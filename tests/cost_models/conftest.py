"""Fixtures for the cost-model tests (builders live in cm_support.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from cm_support import llama3_70b, make_a100, make_cluster, make_h100

from cost_models.base import TrainingProblem
from hardware_catalog.schema import AcceleratorSpec
from specs.model import ModelSpec
from specs.workload import TrainingWorkload


@pytest.fixture
def h100() -> AcceleratorSpec:
    return make_h100()


@pytest.fixture
def a100() -> AcceleratorSpec:
    return make_a100()


@pytest.fixture
def llama_problem() -> TrainingProblem:
    """Llama-3-70B on 8 nodes × 8 H100, 1024 × 4096-token sequences."""
    return TrainingProblem(
        model=llama3_70b(),
        cluster=make_cluster(make_h100(), 8),
        workload=TrainingWorkload(global_batch_size=1024, sequence_length=4096),
    )


@pytest.fixture
def problem_factory() -> Callable[..., TrainingProblem]:
    def build(
        model: ModelSpec,
        acc: AcceleratorSpec,
        num_nodes: int,
        gbs: int,
        seq: int,
        precision: str = "bf16",
        gpus_per_node: int = 8,
    ) -> TrainingProblem:
        return TrainingProblem(
            model=model,
            cluster=make_cluster(acc, num_nodes, gpus_per_node),
            workload=TrainingWorkload(
                global_batch_size=gbs, sequence_length=seq, precision=precision
            ),  # type: ignore[arg-type]
        )

    return build
