"""Tenants, API keys and search leases.

- `searches.tenant` and `measurements.tenant` (existing rows: the default tenant);
- `idempotency_keys` keyed by (tenant, key) instead of the key alone;
- `api_keys` (hashed secrets, scopes, revocation);
- `searches.lease_owner` / `lease_expires_at`: the replica that claimed a running search and
  until when its heartbeat holds the claim.

Revision ID: 0005_tenants_keys_leases
Revises: 0004_plan_warnings
Create Date: 2026-12-02
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0005_tenants_keys_leases"
down_revision: str | None = "0004_plan_warnings"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DEFAULT = "default"


def upgrade() -> None:
    # Plain ADD COLUMNs (no batch copy: on SQLite, recreating `searches` would cascade-delete
    # its plans). The server default stays: it names the tenant of rows stored before.
    tenant: dict[str, Any] = {"nullable": False, "server_default": _DEFAULT}
    op.add_column("searches", sa.Column("tenant", sa.String(length=100), **tenant))
    op.add_column("searches", sa.Column("lease_owner", sa.String(length=100), nullable=True))
    op.add_column(
        "searches", sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.create_index("ix_searches_tenant_created_at", "searches", ["tenant", "created_at"])
    op.create_index(
        "ix_searches_status_lease_expires_at", "searches", ["status", "lease_expires_at"]
    )
    op.add_column("measurements", sa.Column("tenant", sa.String(length=100), **tenant))
    op.create_index("ix_measurements_tenant_created_at", "measurements", ["tenant", "created_at"])

    # A new primary key: build the keyed-by-tenant table, copy, swap.
    op.create_table(
        "idempotency_keys_v5",
        sa.Column("tenant", sa.String(length=100), primary_key=True),
        sa.Column("key", sa.String(length=255), primary_key=True),
        sa.Column(
            "search_id",
            sa.String(length=36),
            sa.ForeignKey("searches.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("body_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.execute(
        "INSERT INTO idempotency_keys_v5 (tenant, key, search_id, body_hash, created_at) "
        f"SELECT '{_DEFAULT}', key, search_id, body_hash, created_at FROM idempotency_keys"
    )
    op.drop_table("idempotency_keys")
    op.rename_table("idempotency_keys_v5", "idempotency_keys")

    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=36), primary_key=True),
        sa.Column("tenant", sa.String(length=100), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_api_keys_key_hash", "api_keys", ["key_hash"], unique=True)
    op.create_index("ix_api_keys_tenant", "api_keys", ["tenant"])


def downgrade() -> None:
    op.drop_index("ix_api_keys_tenant", table_name="api_keys")
    op.drop_index("ix_api_keys_key_hash", table_name="api_keys")
    op.drop_table("api_keys")

    op.create_table(
        "idempotency_keys_v4",
        sa.Column("key", sa.String(length=255), primary_key=True),
        sa.Column(
            "search_id",
            sa.String(length=36),
            sa.ForeignKey("searches.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("body_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    # Keys of other tenants cannot survive the global namespace: the default tenant's win.
    op.execute(
        "INSERT INTO idempotency_keys_v4 (key, search_id, body_hash, created_at) "
        "SELECT key, search_id, body_hash, created_at FROM idempotency_keys "
        f"WHERE tenant = '{_DEFAULT}'"
    )
    op.drop_table("idempotency_keys")
    op.rename_table("idempotency_keys_v4", "idempotency_keys")

    op.drop_index("ix_measurements_tenant_created_at", table_name="measurements")
    op.drop_column("measurements", "tenant")
    op.drop_index("ix_searches_status_lease_expires_at", table_name="searches")
    op.drop_index("ix_searches_tenant_created_at", table_name="searches")
    for column in ("lease_expires_at", "lease_owner", "tenant"):
        op.drop_column("searches", column)
