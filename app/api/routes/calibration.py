"""The calibrated cost model's current fit per accelerator."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from app.api.deps import SessionDep
from app.schemas import CalibrationPublic
from app.services import planning

router = APIRouter(tags=["calibration"])


@router.get("/v1/calibration", response_model=CalibrationPublic)
def read_calibration(
    session: SessionDep,
    accelerator: Annotated[
        str,
        Query(
            min_length=1, max_length=100, description="Catalog id (or alias) of the accelerator."
        ),
    ],
) -> dict[str, Any]:
    """The calibrated model's fit to every measured run on one accelerator."""
    return planning.current_calibration(session, accelerator)
