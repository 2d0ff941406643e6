"""Plans record the plan they are folded under (the diverse top-k, `solver.search.diverse`):
`plans.dominated_by`, the id of the dominating plan of the same search, and
`plans.dominated_reason`, which knobs differ and on which metrics it is no better. Rows
stored before this revision keep null: every one of them reads as non-dominated, and their
ranks are consecutive as before.

Plain ADD COLUMNs (no batch copy: on SQLite, recreating `plans` would cascade-delete its
measurements); `dominated_by` is an id without a foreign-key constraint for the same reason
(both rows are written in one transaction and deleted with their search).

Revision ID: 0006_plan_dominated_by
Revises: 0005_tenants_keys_leases
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_plan_dominated_by"
down_revision: str | None = "0005_tenants_keys_leases"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("plans", sa.Column("dominated_by", sa.String(length=36), nullable=True))
    op.add_column("plans", sa.Column("dominated_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("dominated_reason")
        batch.drop_column("dominated_by")
