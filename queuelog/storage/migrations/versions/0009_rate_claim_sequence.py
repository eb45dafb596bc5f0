"""rate_claims.seq: a rate window counted by two index seeks per key, not row by row

Each (type, key) numbers its claims 1, 2, 3... (`seq`, given under the lock that every
server's rate-limited claims take) and their `at` never decreases with `seq`, so the claims
inside a window are those from the first with `at` after its start to the last: their count
is a difference of two sequence numbers, read from ix_rate_claims_window. Existing rows are
numbered in their `at` order. rate_claims holds at most each window's claims; on PostgreSQL
the UPDATE locks it for as long as numbering them takes (milliseconds at 100,000 rows).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("rate_claims", sa.Column("seq", sa.BigInteger(), nullable=True))
    op.execute(
        "UPDATE rate_claims SET seq = numbered.n FROM ("
        " SELECT id, row_number() OVER (PARTITION BY type, key ORDER BY at, id) AS n FROM rate_claims"
        ") AS numbered WHERE rate_claims.id = numbered.id"
    )
    op.create_index("ix_rate_claims_window", "rate_claims", ["type", "key", "at", "seq"])
    op.drop_index("ix_rate_claims", table_name="rate_claims")


def downgrade() -> None:
    op.create_index("ix_rate_claims", "rate_claims", ["type", "key", "at"])
    op.drop_index("ix_rate_claims_window", table_name="rate_claims")
    op.drop_column("rate_claims", "seq")
