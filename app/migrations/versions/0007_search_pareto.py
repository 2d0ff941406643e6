"""Searches keep their Pareto front once `GET /v1/searches/{id}/pareto` has computed it
completely: `searches.pareto`, the front document (null until then, and for searches stored
before this revision: their front is computed on the next request, as before).

Revision ID: 0007_search_pareto
Revises: 0006_plan_dominated_by
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_search_pareto"
down_revision: str | None = "0006_plan_dominated_by"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("searches", sa.Column("pareto", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("searches") as batch:
        batch.drop_column("pareto")
