"""Column types that read the same on SQLite and PostgreSQL.

Timestamps are UTC. SQLite has no date type, so there they are integer microseconds since
the epoch (exact, compact, and they compare and index as numbers); PostgreSQL gets a real
`timestamptz`. JSON documents are compact text on both (migration 0003 says why).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, Text
from sqlalchemy.dialects.postgresql import TIMESTAMP
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

from queuelog import jsonutil

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_micros(value: datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    return datetime.fromtimestamp(value // 1_000_000, UTC).replace(microsecond=value % 1_000_000)


def compact_json(value: Any) -> str:
    """The contract's canonical form (see jsonutil.compact); ValueError for NaN/Infinity."""
    return jsonutil.compact(value)


def ids_json(ids: Sequence[int]) -> str:
    """Ids as a JSON array, for statements that take a list as one parameter."""
    return "[" + ",".join(str(int(i)) for i in ids) + "]"


class UtcTimestamp(TypeDecorator[datetime]):
    impl = BigInteger
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(TIMESTAMP(timezone=True))
        return dialect.type_descriptor(BigInteger())

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None or dialect.name == "postgresql":
            return value
        return to_micros(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, datetime):
            return value.astimezone(UTC)
        return from_micros(int(value))


class JsonDocument(TypeDecorator[Any]):
    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        return None if value is None else compact_json(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        return None if value is None else json.loads(value)
