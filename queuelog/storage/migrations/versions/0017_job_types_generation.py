"""key_state.types_generation: moved by a trigger on every change of job_types

Every request with a key already reads key_state's one row (principals.py); that same read
now also tells a server whether an ADMIN has added or removed a job type anywhere since it
last read the table (API.md section 12), so that no server polls job_types. A trigger, as
for api_keys, so that every path that writes job_types counts. The new column has a
constant default: on PostgreSQL the ADD COLUMN changes the catalog only.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

BUMP = "UPDATE key_state SET types_generation = types_generation + 1 WHERE id = 1"
SQLITE_TRIGGERS = {
    f"tr_job_types_{change.lower()}": f"CREATE TRIGGER tr_job_types_{change.lower()} AFTER {change}"
    f" ON job_types BEGIN {BUMP}; END"
    for change in ("INSERT", "UPDATE", "DELETE")
}
POSTGRES_TRIGGERS = [
    "CREATE FUNCTION queuelog_bump_types_generation() RETURNS trigger AS $$"
    f" BEGIN {BUMP}; RETURN NULL; END $$ LANGUAGE plpgsql",
    "CREATE TRIGGER tr_job_types_changed AFTER INSERT OR UPDATE OR DELETE ON job_types"
    " FOR EACH STATEMENT EXECUTE FUNCTION queuelog_bump_types_generation()",
]


def upgrade() -> None:
    column = sa.Column("types_generation", sa.BigInteger, nullable=False, server_default="0")
    op.add_column("key_state", column)
    if op.get_bind().dialect.name == "postgresql":
        for statement in POSTGRES_TRIGGERS:
            op.execute(statement)
    else:
        for statement in SQLITE_TRIGGERS.values():
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER tr_job_types_changed ON job_types")
        op.execute("DROP FUNCTION queuelog_bump_types_generation()")
    else:
        for name in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
    op.drop_column("key_state", "types_generation")
