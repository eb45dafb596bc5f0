"""counter shards: job_counts and job_minutes rows split by a `shard` column

Every write transaction added to the same few counter rows (every job's type and status),
so on PostgreSQL concurrent transactions of several servers queued behind each other's row
locks until COMMIT: three servers moved fewer jobs than one. A transaction now adds to the
rows of one shard (PostgreSQL: picked at random per write batch; SQLite, one writer:
always 0) and reads add the shards up. Existing rows become shard 0.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TABLES: dict[str, tuple[str, sa.types.TypeEngine[Any]]] = {
    "job_counts": ("type", sa.String(255)),
    "job_minutes": ("minute", sa.BigInteger()),
}


def _rebuild(table: str, with_shard: bool) -> None:
    """Recreate `table` with (or without) the shard in its primary key, keeping its counts."""
    column, column_type = TABLES[table]
    old = f"{table}_old"
    op.rename_table(table, old)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER INDEX {table}_pkey RENAME TO {old}_pkey")
    op.create_table(
        table,
        sa.Column("scope", sa.String(1), primary_key=True),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column(column, column_type, primary_key=True),
        sa.Column("status", sa.String(16), primary_key=True),
        *([sa.Column("shard", sa.SmallInteger, primary_key=True, server_default="0")] if with_shard else []),
        sa.Column("n", sa.BigInteger, nullable=False),
    )
    listed = ", ".join(["scope", "name", column, "status"])
    if with_shard:
        op.execute(f"INSERT INTO {table} ({listed}, shard, n) SELECT {listed}, 0, n FROM {old}")
    else:
        op.execute(f"INSERT INTO {table} ({listed}, n) SELECT {listed}, SUM(n) FROM {old} GROUP BY {listed}")
    op.drop_table(old)


def upgrade() -> None:
    for table in TABLES:
        _rebuild(table, with_shard=True)


def downgrade() -> None:
    for table in TABLES:
        _rebuild(table, with_shard=False)
