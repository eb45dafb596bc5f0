"""ix_jobs_creator_status, ix_jobs_worker_status; autovacuum settings of jobs

A caller who sees only its own jobs (a producer, a worker) reads its pages through its own
index. By (created_by, id) and (worker_id, id), a page of one status tested the status on
each row: a worker's page of COMPLETED jobs among its 500k was planned by PostgreSQL as all
of them, sorted (410 ms at 1M jobs). By (scope, status, id) each status's page is a range of
the index, read from its end down to the page's end; a page with no status filter merges
each status's part (storage/operations/reads.py). ix_jobs_creator_status also holds what
ix_jobs_pending_creator (migration 0011) held, a producer's PENDING jobs in id order, and
replaces it and ix_jobs_created_by; ix_jobs_worker_status replaces ix_jobs_worker.

On PostgreSQL the table's autovacuum thresholds become 2 % of its rows + 1,000 (the server's
defaults: 20 % + 50 for dead rows, 20 % + 1,000 for inserts, 10 % + 50 for ANALYZE): dead
index entries pile up at the head of the ready index behind every claim, and the next
claims walk them until a VACUUM removes them (storage/postgres/vacuum.py does it where autovacuum is
off).

On PostgreSQL the indexes are built and the old ones dropped CONCURRENTLY, outside any
transaction (storage/migrate.py holds its lock on the session), as migration 0011 does:
enqueues, claims and completions go on meanwhile, and a build that was interrupted leaves
an invalid index, which is dropped and built again. A build reads the whole table twice
and waits for the transactions older than it; the locks it takes (SHARE UPDATE EXCLUSIVE,
and ALTER TABLE ... SET for the autovacuum settings takes the same) block no read or write,
only VACUUM, ANALYZE and other schema changes of jobs. Measured on this project's 2-core test
machine (PostgreSQL 15, shared_buffers 128MB) on a table of 1M jobs (227 MB, and 414 MB of
indexes): 1.9 s with the server idle, 2.6 s while a server claimed, completed and enqueued
one job after another (a round of the three took 22 ms at the median before the build, 25 ms
during it, 57 ms at most: none waited for it). At 10M jobs expect
ten to fifteen times that where the table is in memory (20-40 s), and minutes where each of
the four reads of the table (two per index) comes from disk; the drops take moments. SQLite
builds the indexes in the migration's transaction, holding the database's write lock
meanwhile: 1.3 s at 1M jobs (a 460 MB file), so 15-20 s at 10M, during which nothing is
written (run `queuelog migrate` before the new code serves, as docs/deployment.md says).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# name: (columns, partial-index predicate or None)
NEW_INDEXES = {
    "ix_jobs_creator_status": (["created_by", "status", "id"], None),
    "ix_jobs_worker_status": (["worker_id", "status", "id"], "worker_id IS NOT NULL"),
}
OLD_INDEXES = {
    "ix_jobs_created_by": (["created_by", "id"], None),
    "ix_jobs_pending_creator": (["created_by", "id"], "status = 'pending'"),
    "ix_jobs_worker": (["worker_id", "id"], "worker_id IS NOT NULL"),
}
AUTOVACUUM = {
    "autovacuum_vacuum_scale_factor": "0.02",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_vacuum_insert_scale_factor": "0.02",
    "autovacuum_vacuum_insert_threshold": "1000",
    "autovacuum_analyze_scale_factor": "0.02",
    "autovacuum_analyze_threshold": "1000",
}
INVALID = "SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(:name) AND NOT indisvalid"


def _build(indexes: dict[str, tuple[list[str], str | None]]) -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name, (columns, predicate) in indexes.items():
        where = sa.text(predicate) if predicate is not None else None
        if not postgres:
            op.create_index(name, "jobs", columns, sqlite_where=where)
            continue
        if op.get_bind().execute(sa.text(INVALID), {"name": name}).first() is not None:
            op.drop_index(name, table_name="jobs", postgresql_concurrently=True)
        op.create_index(
            name, "jobs", columns, postgresql_where=where, postgresql_concurrently=True, if_not_exists=True
        )


def _drop(indexes: dict[str, tuple[list[str], str | None]]) -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name in indexes:
        if postgres:
            op.drop_index(name, table_name="jobs", postgresql_concurrently=True, if_exists=True)
        else:
            op.drop_index(name, table_name="jobs")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        _build(NEW_INDEXES)
        _drop(OLD_INDEXES)
        return
    with op.get_context().autocommit_block():
        _build(NEW_INDEXES)
        _drop(OLD_INDEXES)
        settings = ", ".join(f"{name} = {value}" for name, value in AUTOVACUUM.items())
        op.execute(f"ALTER TABLE jobs SET ({settings})")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        _build(OLD_INDEXES)
        _drop(NEW_INDEXES)
        return
    with op.get_context().autocommit_block():
        op.execute(f"ALTER TABLE jobs RESET ({', '.join(AUTOVACUUM)})")
        _build(OLD_INDEXES)
        _drop(NEW_INDEXES)
