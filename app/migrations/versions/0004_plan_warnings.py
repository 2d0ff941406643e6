"""Plans store their advisory warnings (`[{"code", "detail"}]`); rows stored before this
revision keep null, which the API reads as no warnings.

Revision ID: 0004_plan_warnings
Revises: 0003_scheduler_api
Create Date: 2025-01-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_plan_warnings"
down_revision: str | None = "0003_scheduler_api"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("plans", sa.Column("warnings", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("plans") as batch:
        batch.drop_column("warnings")
