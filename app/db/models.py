"""Database tables: one row per search, one row per ranked plan of a search, one row per
measured run of a plan.

The Alembic revision in `app/migrations/versions/` creates exactly these tables; a test
compares the migrated schema with this metadata, so change both together.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Column, DateTime, Float, ForeignKey, Index, String, Text
from sqlmodel import Field, SQLModel


class SearchStatus(StrEnum):
    """Life cycle of a search: queued → running → succeeded | failed | cancelled."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE_STATUSES = (SearchStatus.QUEUED.value, SearchStatus.RUNNING.value)
TERMINAL_STATUSES = (
    SearchStatus.SUCCEEDED.value,
    SearchStatus.FAILED.value,
    SearchStatus.CANCELLED.value,
)


def utcnow() -> datetime:
    """Timezone-aware current time (UTC)."""
    return datetime.now(UTC)


def new_id() -> str:
    return str(uuid.uuid4())


class SearchRecord(SQLModel, table=True):
    """A plan search: its request, resolved problem, state, progress and outcome."""

    __tablename__ = "searches"
    __table_args__ = (
        Index("ix_searches_status", "status"),
        Index("ix_searches_created_at", "created_at"),
        Index("ix_searches_request_hash", "request_hash"),
    )

    id: str = Field(default_factory=new_id, sa_column=Column(String(36), primary_key=True))
    status: str = Field(default=SearchStatus.QUEUED.value, sa_column=Column(String(16), nullable=False))
    request: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    """The request body as received (after defaults)."""
    problem: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    """The resolved problem: explicit model, resolved cluster, workload, constraints."""
    request_hash: str = Field(sa_column=Column(String(64), nullable=False))
    cost_model_name: str = Field(sa_column=Column(String(100), nullable=False))
    cost_model_version: str = Field(sa_column=Column(String(50), nullable=False))
    progress_evaluated: int = Field(default=0, nullable=False)
    progress_total: int | None = Field(default=None, nullable=True)
    stats: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    error: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    """An RFC 9457 problem when the search failed."""
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False)
    )
    started_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True)
    )
    finished_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True)
    )
    attempts: int = Field(default=0, nullable=False)
    """Times a worker has started this search."""


class PlanRecord(SQLModel, table=True):
    """One ranked plan of a search (rank 1 = best)."""

    __tablename__ = "plans"
    __table_args__ = (Index("ix_plans_search_id_rank", "search_id", "rank"),)

    id: str = Field(default_factory=new_id, sa_column=Column(String(36), primary_key=True))
    search_id: str = Field(
        sa_column=Column(
            String(36), ForeignKey("searches.id", ondelete="CASCADE"), nullable=False
        )
    )
    rank: int = Field(nullable=False)
    plan: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    """The TrainingPlan with stage_layers filled in."""
    metrics: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    memory: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    explanation: str = Field(default="", sa_column=Column(Text, nullable=False))
    feasible: bool = Field(default=True, nullable=False)
    violations: list[dict[str, Any]] = Field(
        default_factory=list, sa_column=Column(JSON, nullable=False)
    )


class MeasurementRecord(SQLModel, table=True):
    """A measured run of a stored plan (what a scheduler posts back after running it)."""

    __tablename__ = "measurements"
    __table_args__ = (
        Index("ix_measurements_plan_id_created_at", "plan_id", "created_at"),
        Index("ix_measurements_accelerator_id", "accelerator_id"),
    )

    id: str = Field(default_factory=new_id, sa_column=Column(String(36), primary_key=True))
    plan_id: str = Field(
        sa_column=Column(String(36), ForeignKey("plans.id", ondelete="CASCADE"), nullable=False)
    )
    search_id: str = Field(sa_column=Column(String(36), nullable=False))
    """The plan's search (denormalised: the plan row cascades with its search)."""
    accelerator_id: str = Field(sa_column=Column(String(100), nullable=False))
    """The catalog id the plan ran on (from the search's resolved cluster): the calibration
    fits per accelerator."""
    step_time_s: float = Field(sa_column=Column(Float, nullable=False))
    """Measured seconds per optimizer step (converted from tokens_per_s when only that came)."""
    tokens_per_s: float = Field(sa_column=Column(Float, nullable=False))
    peak_memory_gib: float | list[float] | None = Field(
        default=None, sa_column=Column(JSON, nullable=True)
    )
    """Measured peak memory: one figure, or one per pipeline rank."""
    notes: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    measured_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True)
    )
    predicted_step_time_s: float = Field(sa_column=Column(Float, nullable=False))
    """The plan's predicted step time when the measurement was stored."""
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False)
    )
