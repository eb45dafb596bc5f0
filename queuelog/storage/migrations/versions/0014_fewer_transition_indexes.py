"""PostgreSQL: idempotency keys in a partial unique index; no ix_jobs_type

A job's status change is never a HOT update (status is in several indexes), so PostgreSQL
writes a new entry in every index whose predicate the new row version matches, at every
transition. Two of those indexes did nothing for most of them:

- the unique constraint uq_jobs_idempotency indexed every job, keyed or not (NULL keys never
  collide). It becomes ix_jobs_idempotency, a unique index of the jobs that have a key
  (`WHERE idempotency_key IS NOT NULL`); INSERT ... ON CONFLICT names that predicate;
- ix_jobs_type (type, id) served only `jobs(type:)` without a status, which now reads
  ix_jobs_type_status once per status and merges the pages (read_plans.plan_list).

Measured on 10,000 no-op jobs claimed and completed 64 at a time through the storage layer:
PostgreSQL's CPU per job 65 -> 58 us (bench/README.md, figure 4 on PostgreSQL).

Online, for an operator with 10M jobs: the new index is built CONCURRENTLY, outside any
transaction, so enqueues, claims and completions go on (two scans of the table; its size is
that of the keyed jobs only). Dropping the constraint then takes the table's lock for an
instant, and ix_jobs_type goes with DROP INDEX CONCURRENTLY. Measured here on 1M jobs, 10 %
of them with a key (402 MB): upgrade 0.7 s, downgrade 2.3 s (it builds both old indexes
over every row); at 10M, about ten times that. A build that was interrupted leaves an
invalid index behind: it is dropped and built again. Servers of an older version that still
run meanwhile name the old constraint in ON CONFLICT: their enqueues with an idempotency key
fail once it is dropped, until they are upgraded too.

SQLite keeps both: its UPDATE touches only the indexes of the columns it changes (never
these), and dropping a table constraint there rewrites the whole table.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

KEYS_INDEX = "ix_jobs_idempotency"
KEYS_CONSTRAINT = "uq_jobs_idempotency"
KEY_COLUMNS = ["created_by", "idempotency_key"]
KEYED = "idempotency_key IS NOT NULL"
TYPE_INDEX = "ix_jobs_type"
INVALID = "SELECT 1 FROM pg_index WHERE indexrelid = to_regclass(:name) AND NOT indisvalid"
CONSTRAINT_EXISTS = "SELECT 1 FROM pg_constraint WHERE conname = :name AND conrelid = 'jobs'::regclass"


def _drop_if_invalid(name: str) -> None:
    if op.get_bind().execute(sa.text(INVALID), {"name": name}).first() is not None:
        op.drop_index(name, table_name="jobs", postgresql_concurrently=True)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    with op.get_context().autocommit_block():
        _drop_if_invalid(KEYS_INDEX)
        op.create_index(
            KEYS_INDEX,
            "jobs",
            KEY_COLUMNS,
            unique=True,
            postgresql_where=sa.text(KEYED),
            postgresql_concurrently=True,
            if_not_exists=True,
        )
        if op.get_bind().execute(sa.text(CONSTRAINT_EXISTS), {"name": KEYS_CONSTRAINT}).first() is not None:
            op.drop_constraint(KEYS_CONSTRAINT, "jobs", type_="unique")
        op.drop_index(TYPE_INDEX, table_name="jobs", postgresql_concurrently=True, if_exists=True)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    with op.get_context().autocommit_block():
        _drop_if_invalid(TYPE_INDEX)
        op.create_index(TYPE_INDEX, "jobs", ["type", "id"], postgresql_concurrently=True, if_not_exists=True)
        # The constraint's index, built CONCURRENTLY, then taken over by the constraint.
        _drop_if_invalid(KEYS_CONSTRAINT)
        op.create_index(
            KEYS_CONSTRAINT,
            "jobs",
            KEY_COLUMNS,
            unique=True,
            postgresql_concurrently=True,
            if_not_exists=True,
        )
        if op.get_bind().execute(sa.text(CONSTRAINT_EXISTS), {"name": KEYS_CONSTRAINT}).first() is None:
            op.execute(
                f"ALTER TABLE jobs ADD CONSTRAINT {KEYS_CONSTRAINT} UNIQUE USING INDEX {KEYS_CONSTRAINT}"
            )
        op.drop_index(KEYS_INDEX, table_name="jobs", postgresql_concurrently=True, if_exists=True)
