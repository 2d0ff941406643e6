"""The calibrated cost model's current fit per accelerator."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from app.api.auth import Reader
from app.api.deps import SessionDep
from app.schemas import CalibrationPublic
from app.services import planning

router = APIRouter(tags=["calibration"])


@router.get("/v1/calibration", response_model=CalibrationPublic)
def read_calibration(
    session: SessionDep,
    principal: Reader,
    accelerator: Annotated[
        str,
        Query(
            min_length=1, max_length=100, description="Catalog id (or alias) of the accelerator."
        ),
    ],
) -> dict[str, Any]:
    """The calibrated model's fit to the caller's tenant's measured runs on one accelerator."""
    return planning.current_calibration(session, accelerator, tenant=principal.tenant)
