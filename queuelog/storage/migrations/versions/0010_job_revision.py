"""jobs.revision: how many times the job's row has been updated

Every UPDATE of a job adds one to it, under the row's lock, so a job's revisions grow in the
order its changes commit. Subscriptions order a job's states by it (resolvers/subscriptions.py):
a write's timestamp cannot, since PostgreSQL stamps a batch with the time it began, and a
write that waited for a row lock commits after changes stamped later.

Adding a column with a constant default rewrites no row, on PostgreSQL (11 and later) as on
SQLite: a short catalog change, safe online on a big table.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("revision", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("revision")
