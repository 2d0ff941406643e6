"""Database tables: one row per search, one row per ranked plan of a search, one row per
measured run of a plan, one row per `Idempotency-Key` a tenant sent on `POST /v1/searches`,
one row per webhook delivery (one event of one search to one callback URL), one row per HTTP
attempt of a delivery and one row per API key.

Every search and measurement belongs to a tenant (`DEFAULT_TENANT` when authentication is
off); plans, deliveries and attempts belong to their search's tenant.

The Alembic revision in `app/migrations/versions/` creates exactly these tables; a test
compares the migrated schema with this metadata, so change both together.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
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


DEFAULT_TENANT = "default"
"""The tenant of every row stored with authentication off (and of rows stored before
revision 0005)."""
TENANT_MAX_LENGTH = 100


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
        Index("ix_searches_tenant_created_at", "tenant", "created_at"),
        Index("ix_searches_status_lease_expires_at", "status", "lease_expires_at"),
    )

    id: str = Field(default_factory=new_id, sa_column=Column(String(36), primary_key=True))
    tenant: str = Field(
        default=DEFAULT_TENANT,
        sa_column=Column(String(TENANT_MAX_LENGTH), nullable=False, server_default=DEFAULT_TENANT),
    )
    """The tenant that submitted the search; only its keys see the search and its plans."""
    status: str = Field(
        default=SearchStatus.QUEUED.value, sa_column=Column(String(16), nullable=False)
    )
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
    pareto: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    """The search's Pareto front once computed completely (`GET /v1/searches/{id}/pareto`;
    a finished search's space and plans no longer change, so it is computed once)."""
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
    lease_owner: str | None = Field(default=None, sa_column=Column(String(100), nullable=True))
    """The replica that claimed the search and runs it (None while queued)."""
    lease_expires_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True)
    )
    """Until when the owner's claim holds; the owner's heartbeat pushes it forward, and
    another replica may take the search over once it has passed."""


class PlanRecord(SQLModel, table=True):
    """One ranked plan of a search (rank 1 = best; ranks count the folded plans too:
    the list of non-dominated plans renumbers them, `app.api.routes.searches`)."""

    __tablename__ = "plans"
    __table_args__ = (Index("ix_plans_search_id_rank", "search_id", "rank"),)

    id: str = Field(default_factory=new_id, sa_column=Column(String(36), primary_key=True))
    search_id: str = Field(
        sa_column=Column(String(36), ForeignKey("searches.id", ondelete="CASCADE"), nullable=False)
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
    warnings: list[dict[str, Any]] | None = Field(
        default=None, sa_column=Column(JSON, nullable=True)
    )
    """Advisory warnings `[{"code", "detail"}]`; null in rows stored before revision 0004
    (read as no warnings)."""
    dominated_by: str | None = Field(default=None, sa_column=Column(String(36), nullable=True))
    """The id of the plan of the same search this one is folded under (the diverse top-k,
    `solver.search.diverse`: same layout, no better on any reported metric, ranked
    before it); null for a non-dominated plan and in rows stored before revision 0006. An
    id, not a foreign key: the two rows are written in one transaction and deleted with
    their search, and adding a constraint would rebuild the table on SQLite."""
    dominated_reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    """Which knobs differ from that plan and on which metrics it is no better."""


class MeasurementRecord(SQLModel, table=True):
    """A measured run of a stored plan (what a scheduler posts back after running it)."""

    __tablename__ = "measurements"
    __table_args__ = (
        Index("ix_measurements_plan_id_created_at", "plan_id", "created_at"),
        Index("ix_measurements_accelerator_id", "accelerator_id"),
        Index("ix_measurements_tenant_created_at", "tenant", "created_at"),
    )

    id: str = Field(default_factory=new_id, sa_column=Column(String(36), primary_key=True))
    tenant: str = Field(
        default=DEFAULT_TENANT,
        sa_column=Column(String(TENANT_MAX_LENGTH), nullable=False, server_default=DEFAULT_TENANT),
    )
    """The tenant that posted the measurement (it feeds only that tenant's calibration)."""
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


IDEMPOTENCY_KEY_MAX_LENGTH = 255
CALLBACK_URL_MAX_LENGTH = 2048


class IdempotencyKeyRecord(SQLModel, table=True):
    """An `Idempotency-Key` of `POST /v1/searches`: the search it answered and a hash of the
    request body it came with. (tenant, key) is the primary key: two concurrent requests of
    one tenant with one key cannot both store it (the loser reads the winner's row), and
    tenants' keys never meet."""

    __tablename__ = "idempotency_keys"

    tenant: str = Field(
        default=DEFAULT_TENANT,
        sa_column=Column(String(TENANT_MAX_LENGTH), primary_key=True),
    )
    key: str = Field(sa_column=Column(String(IDEMPOTENCY_KEY_MAX_LENGTH), primary_key=True))
    search_id: str = Field(
        sa_column=Column(String(36), ForeignKey("searches.id", ondelete="CASCADE"), nullable=False)
    )
    body_hash: str = Field(sa_column=Column(String(64), nullable=False))
    """SHA-256 of the canonical JSON of the validated request body."""
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False)
    )


class DeliveryStatus(StrEnum):
    """waiting (the search has not finished) → pending (due or retrying) → delivered | failed."""

    WAITING = "waiting"
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class WebhookDeliveryRecord(SQLModel, table=True):
    """The completion event of one search for one callback URL."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("ix_webhook_deliveries_search_id", "search_id"),
        Index("ix_webhook_deliveries_status_next_attempt_at", "status", "next_attempt_at"),
    )

    id: str = Field(default_factory=new_id, sa_column=Column(String(36), primary_key=True))
    search_id: str = Field(
        sa_column=Column(String(36), ForeignKey("searches.id", ondelete="CASCADE"), nullable=False)
    )
    url: str = Field(sa_column=Column(String(CALLBACK_URL_MAX_LENGTH), nullable=False))
    status: str = Field(
        default=DeliveryStatus.WAITING.value, sa_column=Column(String(16), nullable=False)
    )
    event: str | None = Field(default=None, sa_column=Column(String(50), nullable=True))
    """`search.succeeded`, `search.failed` or `search.cancelled` once the search finished."""
    payload: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    """The JSON body, fixed when the search finished (every attempt sends the same bytes)."""
    attempt_count: int = Field(default=0, sa_column=Column(Integer, nullable=False))
    next_attempt_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True)
    )
    """When the next attempt is due (pending), or until when a sender holds it."""
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False)
    )
    delivered_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True)
    )


class WebhookAttemptRecord(SQLModel, table=True):
    """One HTTP POST of a delivery and what came of it."""

    __tablename__ = "webhook_attempts"
    __table_args__ = (Index("ix_webhook_attempts_delivery_id", "delivery_id", "number"),)

    id: str = Field(default_factory=new_id, sa_column=Column(String(36), primary_key=True))
    delivery_id: str = Field(
        sa_column=Column(
            String(36), ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), nullable=False
        )
    )
    number: int = Field(sa_column=Column(Integer, nullable=False))
    """1 for the first attempt."""
    attempted_at: datetime = Field(sa_column=Column(DateTime(timezone=True), nullable=False))
    duration_s: float = Field(sa_column=Column(Float, nullable=False))
    status_code: int | None = Field(default=None, sa_column=Column(Integer, nullable=True))
    """The receiver's HTTP status (None: no response)."""
    error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    """Why the attempt failed (connection error, timeout, non-2xx), None when it succeeded."""


class ApiKeyScope(StrEnum):
    """What a key may do: `read` (GET), `write` (read + submit, cancel, measure, delete its
    tenant's data), `admin` (write + manage keys of every tenant)."""

    READ = "read"
    WRITE = "write"
    ADMIN = "admin"


class ApiKeyRecord(SQLModel, table=True):
    """An API key: only the SHA-256 of the secret is stored (keys are 256-bit random tokens,
    so a fast hash suffices; the secret is shown once, at creation)."""

    __tablename__ = "api_keys"
    __table_args__ = (
        Index("ix_api_keys_key_hash", "key_hash", unique=True),
        Index("ix_api_keys_tenant", "tenant"),
    )

    id: str = Field(default_factory=new_id, sa_column=Column(String(36), primary_key=True))
    tenant: str = Field(sa_column=Column(String(TENANT_MAX_LENGTH), nullable=False))
    name: str | None = Field(default=None, sa_column=Column(String(200), nullable=True))
    """A label for people (who or what uses the key)."""
    prefix: str = Field(sa_column=Column(String(16), nullable=False))
    """The first characters of the secret, shown in listings to tell keys apart."""
    key_hash: str = Field(sa_column=Column(String(64), nullable=False))
    """Hex SHA-256 of the whole secret."""
    scopes: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(
        default_factory=utcnow, sa_column=Column(DateTime(timezone=True), nullable=False)
    )
    revoked_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True)
    )
    last_used_at: datetime | None = Field(
        default=None, sa_column=Column(DateTime(timezone=True), nullable=True)
    )
