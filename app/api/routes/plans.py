"""Stored plans."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.api.auth import Reader
from app.api.deps import SessionDep
from app.api.params import PlanId
from app.db import crud
from app.db.models import PlanRecord
from app.schemas import PlanPublic
from app.services import planning
from specs.errors import NotFound

router = APIRouter(tags=["plans"])


def plan_public(record: PlanRecord) -> dict[str, Any]:
    """A plan row as the API shows it."""
    return planning.plan_public(
        {
            "rank": record.rank,
            "plan": record.plan,
            "metrics": record.metrics,
            "memory": record.memory,
            "explanation": record.explanation,
            "feasible": record.feasible,
            "violations": record.violations,
            "warnings": record.warnings or [],
        },
        plan_id=record.id,
        search_id=record.search_id,
    )


@router.get("/v1/plans/{plan_id}", response_model=PlanPublic)
def read_plan(plan_id: PlanId, session: SessionDep, principal: Reader) -> dict[str, Any]:
    """Read one plan."""
    record = crud.get_plan(session=session, plan_id=plan_id, tenant=principal.tenant)
    if record is None:
        raise NotFound(f"no plan with id {plan_id!r}", id=plan_id)
    return plan_public(record)
