"""Plan exports: `GET /v1/plans/{plan_id}/export/{format}` (API.md "Exports")."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from app.api.auth import Reader
from app.api.deps import SessionDep
from app.api.params import ExportFormat, PlanId
from app.db import crud
from app.exports import FORMATS, export_plan
from app.exports.registry import StoredPlanUnreadable
from specs.errors import NotFound

router = APIRouter(tags=["exports"])


@router.get("/v1/plans/{plan_id}/export/{format}")
def export(
    plan_id: PlanId,
    format: ExportFormat,
    request: Request,
    session: SessionDep,
    principal: Reader,
) -> dict[str, Any]:
    """Render a plan for a launcher: Megatron-LM, torchtitan, DeepSpeed, vLLM, SGLang, Slurm
    or Kubernetes.

    Answers `{"format", "filename", "content", "args", "env", "notes"}` (and `roles` for
    disaggregated serving plans, `groups`, each node group's command, for serving plans
    across node groups, which launch behind a weighted nginx router). Query parameters:
    `framework` (slurm and kubernetes: megatron, torchtitan or deepspeed for training;
    vllm, sglang or trtllm for serving), `kind` (kubernetes training: pytorchjob or
    jobset), `image` and `router_image` (kubernetes), `cpus_per_task` and `time` (slurm). A plan the format cannot express is a 422 problem naming the rule; an
    unknown format is a 422 listing the formats.
    """
    record = crud.get_plan(session=session, plan_id=plan_id, tenant=principal.tenant)
    if record is None:
        raise NotFound(f"no plan with id {plan_id!r}", id=plan_id)
    search = crud.get_search(session=session, search_id=record.search_id)
    if search is None:
        raise StoredPlanUnreadable(f"plan {plan_id!r} has no search", id=plan_id)
    options = dict(request.query_params.items())
    result = export_plan({"id": record.id, "plan": record.plan}, search.problem, format, options)
    return result.to_dict()


__all__ = ["FORMATS", "router"]
