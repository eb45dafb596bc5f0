"""job_counts, key_state and the indexes behind every `jobs(...)` filter

Counts by scope, type and status (filled here from the jobs already stored) replace the
GROUP BY that stats ran over the whole table; key_state's generation, bumped by a trigger
on every UPDATE or DELETE of api_keys, lets servers cache principals safely.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

BACKFILL = [
    "INSERT INTO job_counts (scope, name, type, status, n)"
    " SELECT '*', '', type, status, count(*) FROM jobs GROUP BY type, status",
    "INSERT INTO job_counts (scope, name, type, status, n)"
    " SELECT 'p', created_by, type, status, count(*) FROM jobs GROUP BY created_by, type, status",
    "INSERT INTO job_counts (scope, name, type, status, n)"
    " SELECT 'w', worker_id, type, status, count(*) FROM jobs WHERE worker_id IS NOT NULL"
    " GROUP BY worker_id, type, status",
    "INSERT INTO job_counts (scope, name, type, status, n)"
    " SELECT 's', created_by, type, status, count(*) FROM jobs WHERE worker_id = created_by"
    " GROUP BY created_by, type, status",
]

SQLITE_TRIGGERS = [
    "CREATE TRIGGER tr_api_keys_updated AFTER UPDATE ON api_keys"
    " BEGIN UPDATE key_state SET generation = generation + 1 WHERE id = 1; END",
    "CREATE TRIGGER tr_api_keys_deleted AFTER DELETE ON api_keys"
    " BEGIN UPDATE key_state SET generation = generation + 1 WHERE id = 1; END",
]

POSTGRES_TRIGGERS = [
    "CREATE FUNCTION queuelog_bump_key_generation() RETURNS trigger AS $$"
    " BEGIN UPDATE key_state SET generation = generation + 1 WHERE id = 1; RETURN NULL; END"
    " $$ LANGUAGE plpgsql",
    "CREATE TRIGGER tr_api_keys_changed AFTER UPDATE OR DELETE ON api_keys"
    " FOR EACH STATEMENT EXECUTE FUNCTION queuelog_bump_key_generation()",
]


def upgrade() -> None:
    # Only finished jobs have finished_at, and only claimed ones a worker: partial indexes
    # keep the rows that lack them (every new job) out of those indexes.
    op.drop_index("ix_jobs_finished", "jobs")
    op.create_index(
        "ix_jobs_finished",
        "jobs",
        ["finished_at"],
        postgresql_where=sa.text("finished_at IS NOT NULL"),
        sqlite_where=sa.text("finished_at IS NOT NULL"),
    )
    op.drop_index("ix_jobs_worker", "jobs")
    op.create_index(
        "ix_jobs_worker",
        "jobs",
        ["worker_id", "id"],
        postgresql_where=sa.text("worker_id IS NOT NULL"),
        sqlite_where=sa.text("worker_id IS NOT NULL"),
    )
    op.create_index("ix_jobs_status", "jobs", ["status", "id"])
    op.create_index("ix_jobs_type", "jobs", ["type", "id"])
    op.create_index("ix_jobs_type_status", "jobs", ["type", "status", "id"])

    op.create_table(
        "job_counts",
        sa.Column("scope", sa.String(1), primary_key=True),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("type", sa.String(255), primary_key=True),
        sa.Column("status", sa.String(16), primary_key=True),
        sa.Column("n", sa.BigInteger, nullable=False),
    )
    for statement in BACKFILL:
        op.execute(statement)

    op.create_table(
        "key_state",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("generation", sa.BigInteger, nullable=False),
    )
    op.execute("INSERT INTO key_state (id, generation) VALUES (1, 0)")
    triggers = POSTGRES_TRIGGERS if op.get_bind().dialect.name == "postgresql" else SQLITE_TRIGGERS
    for statement in triggers:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER tr_api_keys_changed ON api_keys")
        op.execute("DROP FUNCTION queuelog_bump_key_generation()")
    else:
        op.execute("DROP TRIGGER tr_api_keys_updated")
        op.execute("DROP TRIGGER tr_api_keys_deleted")
    op.drop_table("key_state")
    op.drop_table("job_counts")
    op.drop_index("ix_jobs_type_status", "jobs")
    op.drop_index("ix_jobs_type", "jobs")
    op.drop_index("ix_jobs_status", "jobs")
    op.drop_index("ix_jobs_worker", "jobs")
    op.create_index("ix_jobs_worker", "jobs", ["worker_id", "id"])
    op.drop_index("ix_jobs_finished", "jobs")
    op.create_index("ix_jobs_finished", "jobs", ["finished_at"])
