"""Stored plans."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from sqlmodel import Session

from app.api.auth import Reader
from app.api.deps import SessionDep
from app.api.params import PlanId
from app.db import crud
from app.db.models import PlanRecord
from app.schemas import PlanPublic
from app.services import planning
from specs.errors import NotFound

router = APIRouter(tags=["plans"])


def plan_public(record: PlanRecord, *, rank: int | None = None) -> dict[str, Any]:
    """A plan row as the API shows it, numbered `rank` (default: its stored rank, its place
    among all the search's plans, folded ones included)."""
    return planning.plan_public(
        {
            "rank": record.rank if rank is None else rank,
            "plan": record.plan,
            "metrics": record.metrics,
            "memory": record.memory,
            "explanation": record.explanation,
            "feasible": record.feasible,
            "violations": record.violations,
            "warnings": record.warnings or [],
            "dominated_by": record.dominated_by,
            "dominated_reason": record.dominated_reason,
        },
        plan_id=record.id,
        search_id=record.search_id,
    )


@router.get("/v1/plans/{plan_id}", response_model=PlanPublic)
def read_plan(plan_id: PlanId, session: SessionDep, principal: Reader) -> dict[str, Any]:
    """Read one plan. Its `rank` is the one the search's plan list shows it with: a
    non-dominated plan's among the non-dominated plans (the default list), a dominated
    plan's among all plans (`?include_dominated=true`)."""
    record = crud.get_plan(session=session, plan_id=plan_id, tenant=principal.tenant)
    if record is None:
        raise NotFound(f"no plan with id {plan_id!r}", id=plan_id)
    return plan_public(record, rank=shown_rank(session, record))


def shown_rank(session: Session, record: PlanRecord) -> int:
    """The rank of a non-dominated plan among the non-dominated plans of its search; a
    dominated plan's stored rank (among all of them)."""
    if record.dominated_by is not None:
        return record.rank
    before = crud.count_plans_before(
        session=session, search_id=record.search_id, rank=record.rank, include_dominated=False
    )
    return before + 1
