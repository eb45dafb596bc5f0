"""`queuelog copy-database`'s statements, on the SQLite source."""

from __future__ import annotations

IS_MIGRATED = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
GIVEN_OUT = "SELECT seq FROM sqlite_sequence WHERE name = :name"
