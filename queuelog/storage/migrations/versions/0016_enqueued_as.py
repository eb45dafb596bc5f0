"""What an edited job was enqueued as (API.md section 12: idempotency compares a replayed
enqueue with the job's original input, so an edit never turns a replay into CONFLICT)

`updateJob` changes a PENDING job's priority, maxRetries, runAt and expiresAt. The first
edit keeps the values idempotency compares (priority, maxRetries, expiresAt) as they were
enqueued, in `enqueued_as`; a job never edited has NULL there, and a replay compares with
its row. NULL by default: on PostgreSQL the ADD COLUMN changes the catalog only.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("enqueued_as", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("enqueued_as")
