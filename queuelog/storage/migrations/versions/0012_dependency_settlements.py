"""dependency_settlements, job_dependencies.spared_by: dependents settled in chunks

A job that finishes with many dependents no longer releases or cancels them all in its own
transaction: that one settles the first few, and writes down what is left as a row of
dependency_settlements, which the servers' sweepers work through in short transactions of
their own (storage/operations/settlements.py). `spared_by` on an edge: the newest settlement of the
dependency that the dependent was retried after, which passes it by.

A new table and a nullable column: no row is rewritten, on PostgreSQL as on SQLite.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-09
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

IdType = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column("job_dependencies", sa.Column("spared_by", sa.BigInteger))
    op.create_table(
        "dependency_settlements",
        sa.Column("id", IdType, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.BigInteger, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("passed", sa.BigInteger, nullable=False),
        sa.Column("reaches", sa.BigInteger, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_dependency_settlements_job", "dependency_settlements", ["job_id", "id"])


def downgrade() -> None:
    op.drop_table("dependency_settlements")
    with op.batch_alter_table("job_dependencies") as batch:
        batch.drop_column("spared_by")
