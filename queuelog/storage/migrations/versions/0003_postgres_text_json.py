"""PostgreSQL: payload and result as text, like SQLite

A job's payload and result are opaque to the queue: it never queries inside them. Kept as
the compact JSON text the server wrote, they read back byte for byte the same on both
backends (jsonb would reorder keys, drop duplicates and refuse `\\u0000`), and equality
for idempotent replays is defined once, in Python (jsonutil.canonical). SQLite: no change.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER TABLE jobs ALTER COLUMN payload TYPE text USING payload::text")
    op.execute("ALTER TABLE jobs ALTER COLUMN result TYPE text USING result::text")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER TABLE jobs ALTER COLUMN payload TYPE jsonb USING payload::jsonb")
    op.execute("ALTER TABLE jobs ALTER COLUMN result TYPE jsonb USING result::jsonb")
