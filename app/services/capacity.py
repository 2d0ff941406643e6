"""`POST /v1/capacity`: the request resolved into one problem per node type, answered by
`solver.capacity`, and the answer as the response document (`CapacityPublic`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import ValidationError

from app.schemas import CapacityRequest
from app.services.planning import (
    InputError,
    _check_supported,
    _field_error,
    build_cost_model,
    resolve_cluster,
    resolve_model,
    validation_errors,
)
from cost_models.base import TrainingProblem
from hardware_catalog.schema import ResolvedCluster
from solver.capacity import MAX_SIZES, SizeAnswer, capacity, node_counts
from specs.cluster import ClusterSpec, NodeGroupSpec
from specs.constraints import SearchConstraints
from specs.errors import PlannerError


def _size_public(size: SizeAnswer) -> dict[str, Any]:
    est = size.estimate
    out = {k: v for k, v in dataclasses.asdict(size).items() if k != "estimate"}
    out["plan"] = est.plan.model_dump(mode="json") if est is not None else None
    out["metrics"] = est.metrics.model_dump(mode="json") if est is not None else None
    return out


def _resolve(group: NodeGroupSpec, index: int) -> ResolvedCluster:
    """The node type as a one-group cluster; a 422 names `node_types.<index>.<field>`."""
    try:
        spec = ClusterSpec(node_groups=[group])
    except ValidationError as exc:  # the cluster's own bounds (at most MAX_TOTAL_GPUS GPUs)
        errors = validation_errors(exc, f"node_types.{index}")
        for error in errors:
            error["field"] = error["field"].replace(
                f"node_types.{index}.node_groups.0", f"node_types.{index}"
            )
            if error["field"] == f"node_types.{index}":  # the one group's size
                error["field"] = f"node_types.{index}.num_nodes"
                error["value"] = group.num_nodes

        raise InputError(f"invalid node_types.{index}: {errors[0]['message']}", errors) from exc
    try:
        return resolve_cluster(spec)
    except PlannerError as exc:
        prefix = "cluster.node_groups.0"
        for error in exc.extensions.get("errors", []):
            if isinstance(error.get("field"), str):
                error["field"] = error["field"].replace(prefix, f"node_types.{index}", 1)
        exc.detail = exc.detail.replace(prefix, f"node_types.{index}")
        raise


def answer(body: CapacityRequest, *, max_time_limit_s: float) -> dict[str, Any]:
    """The capacity answer document for `body` (422 for what cannot be asked)."""
    constraints = body.constraints or SearchConstraints()
    if constraints.time_limit_s > max_time_limit_s:
        raise InputError(
            f"constraints.time_limit_s must be at most {max_time_limit_s} s",
            [
                _field_error(
                    "constraints.time_limit_s",
                    f"at most {max_time_limit_s}",
                    constraints.time_limit_s,
                    "time limit above the service maximum",
                )
            ],
        )
    if body.budget is not None and body.workload.train_tokens is None:
        raise InputError(
            "a budget is for the whole run: give workload.train_tokens",
            [
                _field_error(
                    "workload.train_tokens",
                    "required with budget",
                    None,
                    "budget needs train_tokens",
                )
            ],
        )
    total = 0
    for index, group in enumerate(body.node_types):
        if body.min_nodes > group.num_nodes:
            raise InputError(
                f"min_nodes ({body.min_nodes}) is above node_types[{index}].num_nodes "
                f"({group.num_nodes})",
                [
                    _field_error(
                        "min_nodes",
                        f"at most node_types.{index}.num_nodes ({group.num_nodes})",
                        body.min_nodes,
                        "an empty range of node counts",
                    )
                ],
            )
        total += len(node_counts(body.min_nodes, group.num_nodes, body.node_counts))
    if total > MAX_SIZES:
        raise InputError(
            f"the question searches {total} sizes; at most {MAX_SIZES}: give node_counts or a "
            "smaller range",
            [
                _field_error(
                    "node_counts",
                    f"at most {MAX_SIZES} sizes over every node type",
                    total,
                    "too many sizes",
                )
            ],
        )
    model = resolve_model(body.model)
    problems = []
    for index, group in enumerate(body.node_types):
        cluster = _resolve(group, index)
        _check_supported(model, cluster, body.workload)
        problems.append(
            TrainingProblem(
                model=model,
                cluster=cluster,
                workload=body.workload,
                memory_headroom_gib=constraints.memory_headroom_gib,
                allow_tensor_across_nodes=constraints.allow_tensor_across_nodes,
            )
        )
    cost_model = build_cost_model(body.cost_model)
    result = capacity(
        problems,
        cost_model,
        constraints,
        min_nodes=body.min_nodes,
        counts=body.node_counts,
        budget=body.budget,
    )
    recommendation = None
    if result.recommendation is not None:
        index, size = result.recommendation
        recommendation = {"index": index, "size": _size_public(size)}
    return {
        "node_types": [
            {
                "index": a.index,
                "node_group": body.node_types[a.index].model_dump(mode="json"),
                "sizes": [_size_public(s) for s in a.sizes],
                "smallest_meeting": a.smallest_meeting,
                "nearest_fit": _size_public(a.nearest_fit) if a.nearest_fit else None,
            }
            for a in result.node_types
        ],
        "recommendation": recommendation,
        "target_tokens_per_s": result.target_tokens_per_s,
        "budget": result.budget,
    }
