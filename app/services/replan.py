"""`POST /v1/plans/{id}/replan`: a stored plan's search, asked again on the cluster as it is
now (lost nodes or GPUs, added node groups), stored as a search of its own whose problem
remembers the plan it re-plans; `run_problem` then prices every plan's restart
(`solver.replan.annotate` for training, `solver.serving.replan.annotate` for serving, which
also ranks the plan keeping the old instance layouts with re-fitted counts)."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from app.core.config import Settings
from app.db.models import DEFAULT_TENANT, PlanRecord, SearchRecord
from app.schemas import ReplanRequest, SearchCreate
from app.services.planning import InputError, PreparedSearch, _field_error, prepare_search
from hardware_catalog.schema import ResolvedCluster
from specs.cluster import ClusterSpec
from specs.plan import canonical_hash


def _lost_gpus(body: ReplanRequest, cluster: ResolvedCluster, group: int) -> list[int]:
    """The old cluster's GPU indices (groups and nodes in order) that the change removes."""
    if group >= len(cluster.groups):
        raise InputError(
            f"node_group {group}: the search's cluster has {len(cluster.groups)} node group(s)",
            [_field_error("node_group", f"below {len(cluster.groups)}", group, "no such group")],
        )
    offset = sum(g.num_gpus for g in cluster.groups[:group])
    g = cluster.groups[group]
    gpn = g.gpus_per_node
    if isinstance(body.lost_nodes, list):
        bad = [n for n in body.lost_nodes if n >= g.num_nodes]
        if bad:
            raise InputError(
                f"lost_nodes names node {bad[0]}; the group has nodes 0..{g.num_nodes - 1}",
                [
                    _field_error(
                        "lost_nodes", f"node indices below {g.num_nodes}", bad[0], "no such node"
                    )
                ],
            )
        nodes = sorted(set(body.lost_nodes))
    elif body.lost_nodes is not None:
        nodes = list(range(g.num_nodes - body.lost_nodes, g.num_nodes))
    else:
        nodes = []
    lost = [offset + n * gpn + i for n in nodes for i in range(gpn)]
    if body.lost_gpus is not None:
        lost = list(range(offset + g.num_gpus - body.lost_gpus, offset + g.num_gpus))
    if len(lost) >= g.num_gpus and not body.added_node_groups and len(cluster.groups) == 1:
        value: Any = body.lost_gpus if body.lost_gpus is not None else body.lost_nodes
        if body.lost_gpus is not None:
            field, rule = "lost_gpus", f"fewer than the group's {g.num_gpus} GPUs"
        else:
            field, rule = "lost_nodes", f"fewer than the group's {g.num_nodes} nodes"
        raise InputError(
            f"the change leaves no GPU of the cluster ({len(lost)} of {g.num_gpus} lost)",
            [_field_error(field, rule, value, "nothing left")],
        )
    return lost


def prepare_replan(
    plan: PlanRecord,
    search: SearchRecord,
    body: ReplanRequest,
    settings: Settings,
    session: Session | None,
    *,
    tenant: str = DEFAULT_TENANT,
) -> PreparedSearch:
    """The new search: the original request on the changed cluster, its problem carrying
    the plan it re-plans, the surviving GPUs and the restart assumptions."""
    original = SearchCreate.model_validate(search.request)
    old_cluster = ResolvedCluster.model_validate(search.problem["cluster"])
    lost = _lost_gpus(body, old_cluster, body.node_group)
    groups = [g.model_copy() for g in original.cluster.node_groups]
    spec = groups[body.node_group]
    groups[body.node_group] = spec.model_copy(
        update={"unavailable_gpus": spec.unavailable_gpus + len(lost)}
    )
    groups += list(body.added_node_groups or [])
    cluster = ClusterSpec.model_validate(
        {**original.cluster.model_dump(), "node_groups": [g.model_dump() for g in groups]}
    )
    update: dict[str, Any] = {"cluster": cluster, "callback_url": None}
    if body.top_k is not None:
        update["top_k"] = body.top_k
    prepared = prepare_search(original.model_copy(update=update), settings, session, tenant=tenant)
    lost_set = set(lost)
    survivors = [g for g in range(old_cluster.num_gpus) if g not in lost_set]
    added = ResolvedCluster.model_validate(prepared.problem["cluster"]).num_gpus - len(survivors)
    problem = dict(prepared.problem)
    problem["replan"] = {
        "plan_id": plan.id,
        "search_id": search.id,
        "plan": plan.plan,
        "survivors": survivors,
        "added_gpus": added,
        "lost_gpus": len(lost),
        "restart_overhead_s": body.restart_overhead_s,
        "storage_read_gb_s": body.storage_read_gb_s,
    }
    if (search.problem.get("workload") or {}).get("kind") == "serving":
        # where the old plan's instances ran, and what it served (`solver.serving.replan`)
        problem["replan"]["cluster"] = search.problem["cluster"]
        problem["replan"]["goodput_rps"] = (plan.metrics or {}).get("goodput_rps")
        problem["replan"]["weights_read_gb_s"] = body.weights_read_gb_s
    request = dict(prepared.request)
    return PreparedSearch(
        request=request,
        problem=problem,
        request_hash=canonical_hash(problem),
        cost_model_name=prepared.cost_model_name,
        cost_model_version=prepared.cost_model_version,
    )
