"""Initial schema: searches and plans.

Revision ID: 0001_initial
Revises:
Create Date: 2025-01-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_initial"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "searches",
        sa.Column("id", sa.String(length=36), primary_key=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("problem", sa.JSON(), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("cost_model_name", sa.String(length=100), nullable=False),
        sa.Column("cost_model_version", sa.String(length=50), nullable=False),
        sa.Column("progress_evaluated", sa.Integer(), nullable=False),
        sa.Column("progress_total", sa.Integer(), nullable=True),
        sa.Column("stats", sa.JSON(), nullable=True),
        sa.Column("error", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
    )
    op.create_index("ix_searches_status", "searches", ["status"])
    op.create_index("ix_searches_created_at", "searches", ["created_at"])
    op.create_index("ix_searches_request_hash", "searches", ["request_hash"])
    op.create_table(
        "plans",
        sa.Column("id", sa.String(length=36), primary_key=True),
        sa.Column(
            "search_id",
            sa.String(length=36),
            sa.ForeignKey("searches.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("memory", sa.JSON(), nullable=False),
        sa.Column("explanation", sa.Text(), nullable=False),
        sa.Column("feasible", sa.Boolean(), nullable=False),
        sa.Column("violations", sa.JSON(), nullable=False),
    )
    op.create_index("ix_plans_search_id_rank", "plans", ["search_id", "rank"])


def downgrade() -> None:
    op.drop_index("ix_plans_search_id_rank", table_name="plans")
    op.drop_table("plans")
    op.drop_index("ix_searches_request_hash", table_name="searches")
    op.drop_index("ix_searches_created_at", table_name="searches")
    op.drop_index("ix_searches_status", table_name="searches")
    op.drop_table("searches")
