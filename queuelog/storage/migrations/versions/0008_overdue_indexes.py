"""overdue indexes (PostgreSQL): ix_jobs_lease and ix_jobs_timeout hold the rows whose
lease or timeout is set, not the rows whose status is RUNNING

The overdue probe that runs before every claim asked for `status = 'running' AND
lease_expires_at < now`. Statistics taken before a burst of claims say RUNNING jobs are rare,
and PostgreSQL then walked every running job through ix_jobs_status (the status index of
`jobs(status:)` pages) and sorted them: 11 ms per claim with 30,000 jobs running, for no row.
With these predicates the probe can name its index by its own column (`lease_expires_at <
now` implies the predicate) and check the status where no index serves it, so no other index
can answer it. A job's lease and timeout are cleared whenever it leaves RUNNING (completion
now clears the timeout too); this migration clears those left on other jobs.

SQLite keeps its predicates: its statements name their index (INDEXED BY).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# index -> (column, predicate before, predicate after)
INDEXES = {
    "ix_jobs_lease": ("lease_expires_at", "status = 'running'", "lease_expires_at IS NOT NULL"),
    "ix_jobs_timeout": (
        "timeout_at",
        "status = 'running' AND timeout_at IS NOT NULL",
        "timeout_at IS NOT NULL",
    ),
}


def _recreate(after: bool) -> None:
    for name, (column, before_predicate, after_predicate) in INDEXES.items():
        op.drop_index(name, table_name="jobs")
        predicate = after_predicate if after else before_predicate
        op.create_index(name, "jobs", [column], postgresql_where=sa.text(predicate))


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for column in ("lease_expires_at", "timeout_at"):
        op.execute(f"UPDATE jobs SET {column} = NULL WHERE {column} IS NOT NULL AND status <> 'running'")
    _recreate(after=True)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _recreate(after=False)
