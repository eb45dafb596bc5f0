"""`queuelog copy-database`'s statements, on the PostgreSQL target."""

from __future__ import annotations

from collections.abc import Sequence

SEQUENCE_OF = "SELECT pg_get_serial_sequence(:table, 'id')"
COLUMN_TYPES = (
    "SELECT attname, format_type(atttypid, NULL) FROM pg_attribute"
    " WHERE attrelid = CAST(:table AS regclass) AND attnum > 0 AND NOT attisdropped"
)


def lock_exclusive(tables: Sequence[str]) -> str:
    """Lock `tables` (names from schema/tables.py) against every other writer until the transaction ends."""
    return f"LOCK TABLE {', '.join(tables)} IN EXCLUSIVE MODE"


def sequence_state(sequence: str) -> str:
    """`sequence` as pg_get_serial_sequence returned it: already quoted."""
    return f"SELECT last_value, is_called FROM {sequence}"


def restart_sequence(sequence: str, next_id: int) -> str:
    return f"ALTER SEQUENCE {sequence} RESTART WITH {int(next_id)}"


def copy_binary(table: str, columns: Sequence[str]) -> str:
    return f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)"
