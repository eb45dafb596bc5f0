"""flow control: ready jobs apart from delayed ones, type controls, rate windows, timeouts

The claim index becomes per type and holds only ready jobs (not delayed), so that a claim
never walks delayed jobs or other types' backlogs. Jobs pending now with a
future run_at are marked delayed; everything else pending is ready.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

from queuelog.storage.schema.types import UtcTimestamp

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

ID_TYPE = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
READY = "status = 'pending' AND delayed = 0"
MARK_DELAYED = {
    "sqlite": "UPDATE jobs SET delayed = 1 WHERE status = 'pending'"
    " AND run_at > CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)",
    "postgresql": "UPDATE jobs SET delayed = 1 WHERE status = 'pending' AND run_at > now()",
}


def _partial(name: str, columns: list[Any], where: str, postgresql_mark: str = "") -> None:
    """A partial index; `postgresql_mark`: a term only its own statements state (tables.py)."""
    postgresql = f"{where} AND {postgresql_mark}" if postgresql_mark else where
    op.create_index(name, "jobs", columns, postgresql_where=sa.text(postgresql), sqlite_where=sa.text(where))


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("concurrency_key", sa.String(255)))
        batch.add_column(sa.Column("timeout_seconds", sa.Integer))
        batch.add_column(sa.Column("delayed", sa.SmallInteger, nullable=False, server_default="0"))
        batch.add_column(sa.Column("timeout_at", UtcTimestamp()))
    op.execute(MARK_DELAYED[op.get_bind().dialect.name])
    op.drop_index("ix_jobs_claim", "jobs")
    op.drop_index("ix_jobs_due", "jobs")
    claim_order = ["type", sa.text("priority DESC"), "created_at", "id"]
    _partial("ix_jobs_ready", claim_order, f"{READY} AND concurrency_key IS NULL")
    _partial("ix_jobs_ready_keyed", claim_order, f"{READY} AND concurrency_key IS NOT NULL")
    _partial(
        "ix_jobs_ready_key",
        ["type", "concurrency_key", sa.text("priority DESC"), "created_at", "id"],
        f"{READY} AND concurrency_key IS NOT NULL",
        postgresql_mark="concurrency_key >= ''",
    )
    _partial("ix_jobs_lag", ["type", "run_at"], READY, postgresql_mark="run_at IS NOT NULL")
    _partial("ix_jobs_delayed", ["type", "run_at"], "status = 'pending' AND delayed = 1")
    _partial(
        "ix_jobs_running_key",
        ["type", "concurrency_key"],
        "status = 'running' AND concurrency_key IS NOT NULL",
    )
    _partial("ix_jobs_timeout", ["timeout_at"], "status = 'running' AND timeout_at IS NOT NULL")
    op.create_table(
        "type_controls",
        sa.Column("type", sa.String(255), primary_key=True),
        sa.Column("paused", sa.SmallInteger, nullable=False, server_default="0"),
        sa.Column("paused_until", UtcTimestamp()),
        sa.Column("max_running", sa.Integer),
        sa.Column("max_running_per_key", sa.Integer),
        sa.Column("rate_limit", sa.Integer),
        sa.Column("rate_period_seconds", sa.Integer),
        sa.Column("rate_per_key", sa.SmallInteger, nullable=False, server_default="0"),
        sa.Column("timeout_seconds", sa.Integer),
        sa.Column("updated_at", UtcTimestamp(), nullable=False),
    )
    op.create_table(
        "rate_claims",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True
        ),
        sa.Column("type", sa.String(255), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("at", UtcTimestamp(), nullable=False),
    )
    op.create_index("ix_rate_claims", "rate_claims", ["type", "key", "at"])


def downgrade() -> None:
    op.drop_table("rate_claims")
    op.drop_table("type_controls")
    for name in (
        "ix_jobs_timeout",
        "ix_jobs_running_key",
        "ix_jobs_delayed",
        "ix_jobs_lag",
        "ix_jobs_ready_key",
        "ix_jobs_ready_keyed",
        "ix_jobs_ready",
    ):
        op.drop_index(name, "jobs")
    pending = "status = 'pending'"
    op.create_index(
        "ix_jobs_claim",
        "jobs",
        [sa.text("priority DESC"), "created_at", "id", "run_at", "type"],
        postgresql_where=sa.text(pending),
        sqlite_where=sa.text(pending),
    )
    op.create_index(
        "ix_jobs_due", "jobs", ["run_at"], postgresql_where=sa.text(pending), sqlite_where=sa.text(pending)
    )
    with op.batch_alter_table("jobs") as batch:
        for column in ("timeout_at", "delayed", "timeout_seconds", "concurrency_key"):
            batch.drop_column(column)
