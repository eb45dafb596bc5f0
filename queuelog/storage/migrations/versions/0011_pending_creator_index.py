"""ix_jobs_pending_creator: each creator's PENDING jobs, by id

A producer's cancelJobs walked the status index (or the type's) and tested the creator on
each row: past every other producer's backlog, all of it for a producer with no match left
(19 ms at 100k pending, on SQLite inside the writer). It now walks this index: its own
PENDING jobs and nothing else.

On PostgreSQL the index is built CONCURRENTLY, outside any transaction (storage/migrate.py
runs each migration in its own and holds its lock on the session): enqueues, claims and
completions go on meanwhile, however big the table. A build that was interrupted leaves an
invalid index behind; it is dropped and built again.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-08
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

INDEX = "ix_jobs_pending_creator"
COLUMNS = ["created_by", "id"]
PREDICATE = "status = 'pending'"
INVALID = "SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(:name) AND NOT indisvalid"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        op.create_index(INDEX, "jobs", COLUMNS, sqlite_where=sa.text(PREDICATE))
        return
    with op.get_context().autocommit_block():
        if op.get_bind().execute(sa.text(INVALID), {"name": INDEX}).first() is not None:
            op.drop_index(INDEX, table_name="jobs", postgresql_concurrently=True)
        op.create_index(
            INDEX,
            "jobs",
            COLUMNS,
            postgresql_where=sa.text(PREDICATE),
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        op.drop_index(INDEX, table_name="jobs")
        return
    with op.get_context().autocommit_block():
        op.drop_index(INDEX, table_name="jobs", postgresql_concurrently=True, if_exists=True)
