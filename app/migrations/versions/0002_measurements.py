"""Measured runs of stored plans (calibration feedback).

Revision ID: 0002_measurements
Revises: 0001_initial
Create Date: 2025-01-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_measurements"
down_revision: str | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "measurements",
        sa.Column("id", sa.String(length=36), primary_key=True),
        sa.Column(
            "plan_id",
            sa.String(length=36),
            sa.ForeignKey("plans.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("search_id", sa.String(length=36), nullable=False),
        sa.Column("accelerator_id", sa.String(length=100), nullable=False),
        sa.Column("step_time_s", sa.Float(), nullable=False),
        sa.Column("tokens_per_s", sa.Float(), nullable=False),
        sa.Column("peak_memory_gib", sa.JSON(), nullable=True),
        sa.Column("notes", sa.Text(), nullable=True),
        sa.Column("measured_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("predicted_step_time_s", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_measurements_plan_id_created_at", "measurements", ["plan_id", "created_at"])
    op.create_index("ix_measurements_accelerator_id", "measurements", ["accelerator_id"])


def downgrade() -> None:
    op.drop_index("ix_measurements_accelerator_id", table_name="measurements")
    op.drop_index("ix_measurements_plan_id_created_at", table_name="measurements")
    op.drop_table("measurements")
