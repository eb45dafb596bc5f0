"""job_minutes: jobs finished per minute, by scope

The dashboard's throughput (QueueStats.throughput) reads these rows instead of counting
finished jobs. They start empty: minutes before the upgrade show no jobs.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_minutes",
        sa.Column("scope", sa.String(1), primary_key=True),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("minute", sa.BigInteger, primary_key=True),
        sa.Column("status", sa.String(16), primary_key=True),
        sa.Column("n", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("job_minutes")
