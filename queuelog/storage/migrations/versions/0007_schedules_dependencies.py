"""schedules and dependencies (API.md section 10)

jobs gains `waiting_for` (dependencies not yet COMPLETED), `dependency_count`,
`has_dependents` (so that finishing a job looks for dependents only when it has some) and
`schedule_name`. A job waiting for dependencies is PENDING with delayed = 2: it is in none
of the claim's indexes (they hold delayed = 0), nor in ix_jobs_delayed (delayed = 1).
`job_dependencies` holds the edges; `schedules` the cron schedules, due first by
`next_run_at`; `schedule_clock` one row, the last moment any server's ticker ran (a tick
older than that was not missed while no server ran: misfire).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

from queuelog.storage.schema.types import JsonDocument, UtcTimestamp

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("waiting_for", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("dependency_count", sa.SmallInteger, nullable=False, server_default="0"))
        batch.add_column(sa.Column("has_dependents", sa.SmallInteger, nullable=False, server_default="0"))
        batch.add_column(sa.Column("schedule_name", sa.String(100)))
    op.create_index(
        "ix_jobs_schedule",
        "jobs",
        ["schedule_name", "id"],
        postgresql_where=sa.text("schedule_name IS NOT NULL"),
        sqlite_where=sa.text("schedule_name IS NOT NULL"),
    )
    op.create_table(
        "job_dependencies",
        sa.Column("job_id", sa.BigInteger, primary_key=True),
        sa.Column("depends_on", sa.BigInteger, primary_key=True),
    )
    op.create_index("ix_job_dependencies_on", "job_dependencies", ["depends_on", "job_id"])
    op.create_table(
        "schedules",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("type", sa.String(255), nullable=False),
        sa.Column("cron", sa.String(200), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("payload", JsonDocument(), nullable=False),
        sa.Column("priority", sa.SmallInteger, nullable=False),
        sa.Column("max_retries", sa.Integer, nullable=False),
        sa.Column("misfire", sa.String(16), nullable=False),
        sa.Column("overlap", sa.String(16), nullable=False),
        sa.Column("paused", sa.SmallInteger, nullable=False, server_default="0"),
        sa.Column("next_run_at", UtcTimestamp()),
        sa.Column("last_run_at", UtcTimestamp()),
        sa.Column("last_job_id", sa.BigInteger),
        sa.Column("created_at", UtcTimestamp(), nullable=False),
        sa.Column("updated_at", UtcTimestamp(), nullable=False),
    )
    op.create_index(
        "ix_schedules_due",
        "schedules",
        ["next_run_at"],
        postgresql_where=sa.text("paused = 0"),
        sqlite_where=sa.text("paused = 0"),
    )
    op.create_table(
        "schedule_clock",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("alive_at", UtcTimestamp()),
    )
    op.execute("INSERT INTO schedule_clock (id, alive_at) VALUES (1, NULL)")


def downgrade() -> None:
    op.drop_table("schedule_clock")
    op.drop_table("schedules")
    op.drop_table("job_dependencies")
    op.drop_index("ix_jobs_schedule", "jobs")
    with op.batch_alter_table("jobs") as batch:
        for column in ("schedule_name", "has_dependents", "dependency_count", "waiting_for"):
            batch.drop_column(column)
