"""Steering jobs after enqueue (API.md section 12): cancel requests, expiry, snoozes,
progress, each attempt's worker and error on its events, and job types added at runtime

Every new `jobs` column is NULL or has a constant default, so on PostgreSQL each ADD COLUMN
changes the catalog only (no table rewrite, the table's lock for an instant), whatever the
table's size. The expiry index covers only PENDING jobs that have an expiry, and is built
CONCURRENTLY: on 10M jobs of which none expire it reads the table once while enqueues,
claims and completions go on. `job_events` gains the attempt, worker and error of the
claims and ends it records (what `Job.attempts` is read from), also without a rewrite.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

from queuelog.storage.schema.types import UtcTimestamp

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

EXPIRY_INDEX = "ix_jobs_expiry"
EXPIRING = "status = 'pending' AND expires_at IS NOT NULL"
INVALID = "SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(:name) AND NOT indisvalid"
JOB_COLUMNS: list[sa.Column[object]] = [
    sa.Column("cancel_requested_at", UtcTimestamp()),
    sa.Column("expires_at", UtcTimestamp()),
    sa.Column("snooze_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("progress", sa.Float),
    sa.Column("progress_message", sa.String(200)),
    sa.Column("progress_at", UtcTimestamp()),
]
EVENT_COLUMNS: list[sa.Column[object]] = [
    sa.Column("attempt", sa.Integer),
    sa.Column("worker_id", sa.String(255)),
    sa.Column("error", sa.Text),
]


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    with op.batch_alter_table("jobs") as batch:
        for column in JOB_COLUMNS:
            batch.add_column(column)
    with op.batch_alter_table("job_events") as batch:
        for column in EVENT_COLUMNS:
            batch.add_column(column)
    op.create_table(
        "job_types",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("added_by", sa.String(255), nullable=False),
        sa.Column("added_at", UtcTimestamp(), nullable=False),
    )
    if not postgres:
        op.create_index(EXPIRY_INDEX, "jobs", ["expires_at"], sqlite_where=sa.text(EXPIRING))
        return
    with op.get_context().autocommit_block():
        if op.get_bind().execute(sa.text(INVALID), {"name": EXPIRY_INDEX}).first() is not None:
            op.drop_index(EXPIRY_INDEX, table_name="jobs", postgresql_concurrently=True)
        op.create_index(
            EXPIRY_INDEX,
            "jobs",
            ["expires_at"],
            postgresql_where=sa.text(EXPIRING),
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        with op.get_context().autocommit_block():
            op.drop_index(EXPIRY_INDEX, table_name="jobs", postgresql_concurrently=True, if_exists=True)
    else:
        op.drop_index(EXPIRY_INDEX, table_name="jobs")
    op.drop_table("job_types")
    with op.batch_alter_table("job_events") as batch:
        for column in EVENT_COLUMNS:
            batch.drop_column(column.name)
    with op.batch_alter_table("jobs") as batch:
        for column in JOB_COLUMNS:
            batch.drop_column(column.name)
