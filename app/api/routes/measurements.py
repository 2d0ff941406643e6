"""Measured runs of stored plans: a scheduler posts back what a plan actually did, and the
`calibrated` cost model fits itself to these measurements (see `calibration.py`)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status
from sqlmodel import Session

from app.api.auth import Reader, Writer
from app.api.deps import OffsetQuery, SessionDep
from app.api.params import MeasurementId, PlanId, limit_description
from app.db import crud
from app.db.models import MeasurementRecord, PlanRecord, SearchRecord
from app.schemas import MeasurementCreate, MeasurementList, MeasurementPublic
from app.services.planning import InputError
from specs.errors import NotFound
from specs.workload import TrainingWorkload

router = APIRouter(tags=["measurements"])

RATE_TOLERANCE = 0.05
"""step_time_s × tokens_per_s may differ from the plan's tokens per step by this fraction."""
MEMORY_TOLERANCE = 1.05
"""Peak memory may exceed the device capacity by this factor (allocator vs nvidia-smi GiB)."""


def _error(field: str, rule: str, value: Any, message: str) -> dict[str, Any]:
    return {"field": field, "rule": rule, "value": value, "message": message}


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def measurement_public(record: MeasurementRecord) -> dict[str, Any]:
    """A measurement row as the API shows it."""
    return {
        "id": record.id,
        "plan_id": record.plan_id,
        "search_id": record.search_id,
        "accelerator_id": record.accelerator_id,
        "step_time_s": record.step_time_s,
        "tokens_per_s": record.tokens_per_s,
        "peak_memory_gib": record.peak_memory_gib,
        "notes": record.notes,
        "measured_at": _utc(record.measured_at),
        "created_at": _utc(record.created_at),
        "predicted_step_time_s": record.predicted_step_time_s,
        "error": record.step_time_s / record.predicted_step_time_s - 1.0,
    }


def _load_plan(session: Session, plan_id: str, tenant: str) -> tuple[PlanRecord, SearchRecord]:
    """The plan and its search, or 404 when either is unknown or another tenant's."""
    plan = crud.get_plan(session=session, plan_id=plan_id, tenant=tenant)
    search = (
        crud.get_search(session=session, search_id=plan.search_id, tenant=tenant) if plan else None
    )
    if plan is None or search is None:
        raise NotFound(f"no plan with id {plan_id!r}", id=plan_id)
    return plan, search


def _rates(body: MeasurementCreate, tokens_per_step: float) -> tuple[float, float]:
    """(step_time_s, tokens_per_s) from whichever the body gives; 422 naming both fields
    when neither comes or they disagree."""
    step, rate = body.step_time_s, body.tokens_per_s
    if step is None and rate is None:
        message = "give step_time_s, tokens_per_s or both"
        raise InputError(
            message,
            [
                _error("step_time_s", "one of step_time_s, tokens_per_s required", None, message),
                _error("tokens_per_s", "one of step_time_s, tokens_per_s required", None, message),
            ],
        )
    if step is None or rate is None:
        given, value = ("tokens_per_s", rate) if step is None else ("step_time_s", step)
        assert value is not None
        derived = tokens_per_step / value
        if not (math.isfinite(derived) and derived > 0):
            message = (
                f"{given} = {value:g} gives {derived:g} for the other figure "
                f"({tokens_per_step} tokens per step): not a finite positive number"
            )
            raise InputError(message, [_error(given, "finite derived rate", value, message)])
        return (derived, value) if step is None else (value, derived)
    implied = step * rate / tokens_per_step
    if abs(implied - 1.0) > RATE_TOLERANCE:
        message = (
            f"step_time_s × tokens_per_s = {step:g} × {rate:g} = {step * rate:.6g} tokens, but "
            f"a step of this plan is {tokens_per_step} tokens (global_batch_size × "
            "sequence_length, padding excluded); they must agree within "
            f"{RATE_TOLERANCE:.0%}"
        )
        rule = f"step_time_s × tokens_per_s within {RATE_TOLERANCE:.0%} of {tokens_per_step}"
        raise InputError(
            message,
            [
                _error("step_time_s", rule, step, message),
                _error("tokens_per_s", rule, rate, message),
            ],
        )
    return step, rate


def compute_floor_s(plan_metrics: dict[str, Any], problem: dict[str, Any]) -> float | None:
    """The least time a step of the plan can take: its model FLOPs per GPU (the plan's
    `model_tflops_per_gpu` × `step_time_s`, the cost model's 6·N·tokens-style count without
    recomputation, `cost_models.analytical.training.estimate`) at the highest dense peak of
    its accelerators (catalog `peak_tflops` of the workload's precision, BF16/FP16 and, for
    FP8 training, FP8). No GPU computes faster than its peak, so a shorter measured step is
    not a run of this plan. None when the plan lacks the figures."""
    try:
        flops_per_gpu = (
            float(plan_metrics["model_tflops_per_gpu"]) * 1e12 * float(plan_metrics["step_time_s"])
        )
        precision = str(problem["workload"].get("precision", "bf16"))
        keys = {precision, "bf16", "fp16"}
        peaks = [
            float(value) * 1e12
            for group in problem["cluster"]["groups"]
            for key, value in (group["accelerator"].get("peak_tflops") or {}).items()
            if key in keys and value
        ]
    except (KeyError, TypeError, ValueError):
        return None
    if not peaks or not flops_per_gpu > 0:
        return None
    return flops_per_gpu / max(peaks)


def _check_floor(
    body: MeasurementCreate, step_time_s: float, tokens_per_step: float, floor_s: float | None
) -> None:
    """422 naming the field given (step_time_s and/or tokens_per_s) when the step is faster
    than the compute floor; the problem carries `compute_floor_s` and `max_tokens_per_s`."""
    if floor_s is None or step_time_s >= floor_s:
        return
    max_rate = tokens_per_step / floor_s
    message = (
        f"a step of {step_time_s:.6g} s is below this plan's compute floor of {floor_s:.6g} s "
        f"(its model FLOPs per GPU at the accelerator's dense peak), i.e. more than "
        f"{max_rate:.6g} tokens/s: not a physical run of this plan"
    )
    errors = []
    if body.step_time_s is not None:
        errors.append(
            _error("step_time_s", f">= compute floor {floor_s:.6g} s", step_time_s, message)
        )
    if body.tokens_per_s is not None:
        errors.append(
            _error("tokens_per_s", f"<= {max_rate:.6g} (compute floor)", body.tokens_per_s, message)
        )
    raise InputError(message, errors, compute_floor_s=floor_s, max_tokens_per_s=max_rate)


def _check_memory(
    value: float | list[float] | None, capacity_gib: float, pipeline: int, accelerator_id: str
) -> None:
    if value is None:
        return
    limit = capacity_gib * MEMORY_TOLERANCE
    rule = f"at most {MEMORY_TOLERANCE:g} × {capacity_gib:g} GiB ({accelerator_id})"
    errors = []
    if isinstance(value, list):
        if len(value) != pipeline:
            message = (
                f"peak_memory_gib has {len(value)} values; the plan has {pipeline} "
                "pipeline ranks (give one per rank, or one number)"
            )
            raise InputError(
                message,
                [
                    _error(
                        "peak_memory_gib",
                        f"one value per pipeline rank ({pipeline})",
                        value,
                        message,
                    )
                ],
            )
        items = [(f"peak_memory_gib.{i}", v) for i, v in enumerate(value)]
    else:
        items = [("peak_memory_gib", value)]
    for field, gib in items:
        if gib > limit:
            errors.append(
                _error(
                    field,
                    rule,
                    gib,
                    f"{field} = {gib:g} GiB exceeds the {accelerator_id}'s "
                    f"{capacity_gib:g} GiB by more than 5%",
                )
            )
    if errors:
        raise InputError("; ".join(e["message"] for e in errors), errors)


@router.post(
    "/v1/plans/{plan_id}/measurements",
    response_model=MeasurementPublic,
    status_code=status.HTTP_201_CREATED,
)
def create_measurement(
    plan_id: PlanId,
    body: MeasurementCreate,
    response: Response,
    session: SessionDep,
    principal: Writer,
) -> dict[str, Any]:
    """Record a measured run of a plan (step time or throughput, peak memory)."""
    plan, search = _load_plan(session, plan_id, principal.tenant)
    problem = search.problem
    workload = problem["workload"]
    if workload.get("kind") == "serving":
        message = (
            "measurements record a training plan's step time; serving plans cannot be measured yet"
        )
        raise InputError(message, [_error("plan_id", "a training plan", plan_id, message)])
    accelerator = problem["cluster"]["groups"][0]["accelerator"]
    tokens_per_step: float = int(workload["global_batch_size"]) * int(workload["sequence_length"])
    if workload.get("sequence_lengths"):  # documents' tokens only, as the plan's tokens_per_s
        tokens_per_step = TrainingWorkload.model_validate(workload).real_tokens_per_step
    step_time_s, tokens_per_s = _rates(body, tokens_per_step)
    _check_floor(body, step_time_s, tokens_per_step, compute_floor_s(plan.metrics, problem))
    _check_memory(
        body.peak_memory_gib,
        float(accelerator["memory_gib"]),
        int(plan.plan["parallelism"]["pipeline"]),
        str(accelerator["id"]),
    )
    record = crud.create_measurement(
        session=session,
        plan=plan,
        accelerator_id=str(accelerator["id"]),
        step_time_s=step_time_s,
        tokens_per_s=tokens_per_s,
        predicted_step_time_s=float(plan.metrics["step_time_s"]),
        peak_memory_gib=body.peak_memory_gib,
        notes=body.notes,
        measured_at=_utc(body.measured_at),
        tenant=principal.tenant,
    )
    response.headers["Location"] = f"/v1/plans/{plan_id}/measurements/{record.id}"
    return measurement_public(record)


@router.get("/v1/plans/{plan_id}/measurements", response_model=MeasurementList)
def list_measurements(
    plan_id: PlanId,
    session: SessionDep,
    principal: Reader,
    limit: Annotated[int, Query(ge=1, le=1000, description=limit_description(100, 1000))] = 100,
    offset: OffsetQuery = 0,
) -> dict[str, Any]:
    """List a plan's measurements, oldest first."""
    _load_plan(session, plan_id, principal.tenant)
    rows, total = crud.list_measurements(
        session=session, plan_id=plan_id, limit=limit, offset=offset, tenant=principal.tenant
    )
    return {"items": [measurement_public(r) for r in rows], "total": total}


@router.get("/v1/plans/{plan_id}/measurements/{measurement_id}", response_model=MeasurementPublic)
def read_measurement(
    plan_id: PlanId, measurement_id: MeasurementId, session: SessionDep, principal: Reader
) -> dict[str, Any]:
    """Read one measurement of a plan."""
    record = session.get(MeasurementRecord, measurement_id)
    if record is None or record.plan_id != plan_id or record.tenant != principal.tenant:
        raise NotFound(f"no measurement {measurement_id!r} of plan {plan_id!r}", id=measurement_id)
    return measurement_public(record)


@router.delete(
    "/v1/plans/{plan_id}/measurements/{measurement_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
def delete_measurement(
    plan_id: PlanId, measurement_id: MeasurementId, session: SessionDep, principal: Writer
) -> Response:
    """Delete one of the tenant's measurements of a plan (its calibrated fit no longer
    counts it); 404 when the plan has no such measurement of this tenant."""
    record = session.get(MeasurementRecord, measurement_id)
    if record is None or record.plan_id != plan_id or record.tenant != principal.tenant:
        raise NotFound(f"no measurement {measurement_id!r} of plan {plan_id!r}", id=measurement_id)
    crud.delete_measurement(session=session, measurement_id=measurement_id, tenant=principal.tenant)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.delete(
    "/v1/measurements/{measurement_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
)
def delete_measurement_by_id(
    measurement_id: MeasurementId, session: SessionDep, principal: Writer
) -> Response:
    """Delete one of the tenant's measurements by its id alone; 404 when there is none."""
    if not crud.delete_measurement(
        session=session, measurement_id=measurement_id, tenant=principal.tenant
    ):
        raise NotFound(f"no measurement {measurement_id!r}", id=measurement_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
