"""jobs, api_keys and job_events

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

from queuelog.storage.schema.types import JsonDocument, UtcTimestamp

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

IdType = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("type", sa.String(255), nullable=False),
        sa.Column("payload", JsonDocument(), nullable=False),
        sa.Column("priority", sa.SmallInteger, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("retry_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("max_retries", sa.Integer, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False, server_default="0"),
        sa.Column("idempotency_key", sa.String(255)),
        sa.Column("claimed_at", UtcTimestamp()),
        sa.Column("worker_id", sa.String(255)),
        sa.Column("lease_expires_at", UtcTimestamp()),
        sa.Column("run_at", UtcTimestamp(), nullable=False),
        sa.Column("finished_at", UtcTimestamp()),
        sa.Column("result", JsonDocument()),
        sa.Column("error", sa.Text),
        sa.Column("created_by", sa.String(255), nullable=False),
        sa.Column("created_at", UtcTimestamp(), nullable=False),
        sa.Column("updated_at", UtcTimestamp(), nullable=False),
        sa.UniqueConstraint("created_by", "idempotency_key", name="uq_jobs_idempotency"),
        # Never reuse the id of a pruned job: ids are what clients hold on to (and cursors).
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_jobs_claim",
        "jobs",
        [sa.text("priority DESC"), "created_at", "id", "run_at", "type"],
        postgresql_where=sa.text("status = 'pending'"),
        sqlite_where=sa.text("status = 'pending'"),
    )
    op.create_index(
        "ix_jobs_lease",
        "jobs",
        ["lease_expires_at"],
        postgresql_where=sa.text("status = 'running'"),
        sqlite_where=sa.text("status = 'running'"),
    )
    op.create_index("ix_jobs_finished", "jobs", ["finished_at"])
    op.create_index(
        "ix_jobs_due",
        "jobs",
        ["run_at"],
        postgresql_where=sa.text("status = 'pending'"),
        sqlite_where=sa.text("status = 'pending'"),
    )
    op.create_index("ix_jobs_created_by", "jobs", ["created_by", "id"])
    op.create_index("ix_jobs_worker", "jobs", ["worker_id", "id"])

    op.create_table(
        "api_keys",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(255), nullable=False, unique=True),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("roles", sa.String(64), nullable=False),
        sa.Column("max_priority", sa.SmallInteger, nullable=False),
        sa.Column("created_at", UtcTimestamp(), nullable=False),
        sa.Column("revoked_at", UtcTimestamp()),
    )

    op.create_table(
        "job_events",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.BigInteger, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("at", UtcTimestamp(), nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_job_events_job", "job_events", ["job_id", "id"])


def downgrade() -> None:
    op.drop_table("job_events")
    op.drop_table("api_keys")
    op.drop_table("jobs")
