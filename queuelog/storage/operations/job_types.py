"""Job types an ADMIN added at runtime (API.md section 12): the allowlist is the server's
QUEUELOG_JOB_TYPES plus these rows. Each write moves key_state's `types_generation` (a
trigger, migration 0016), which every server reads with its keys generation."""

from __future__ import annotations

from queuelog.storage.transaction import Connection, WriteTx


def added(conn: Connection) -> tuple[int, list[str]]:
    """The types generation and, as of it or later, every added type in name order."""
    row = conn.execute(conn.sql.KEY_GENERATION).fetchone()
    names = [name for (name,) in conn.execute(conn.sql.JOB_TYPE_NAMES).fetchall()]
    return (row[1] if row is not None else 0), names


def add(tx: WriteTx, name: str, added_by: str) -> bool:
    """Add the type; False when it was there already."""
    params = {"name": name, "added_by": added_by, "now": tx.now_us}
    return tx.execute(tx.sql.INSERT_JOB_TYPE, params).fetchone() is not None


def remove(tx: WriteTx, name: str) -> bool:
    """Remove the added type; False when it was not there. Its jobs stay as they are."""
    return tx.execute(tx.sql.DELETE_JOB_TYPE, {"name": name}).fetchone() is not None
