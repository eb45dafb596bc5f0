"""The CLI's statements on `api_keys`: create, list, revoke (SQLAlchemy Core, on an Engine).

The per-request lookup runs on the server's own connections: `ACTIVE_KEY` in the
statements classes, read by the repository."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, and_, insert, select, update

from queuelog.errors import Conflict, NotFound, echo
from queuelog.model import ApiKey, Priority, Role
from queuelog.storage.schema.tables import api_keys


def _row_to_key(row: Row[Any]) -> ApiKey:
    return ApiKey(
        name=row.name,
        roles=frozenset(Role(r) for r in row.roles.split(",")),
        max_priority=Priority(row.max_priority),
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


def create_key(
    conn: Connection,
    name: str,
    key_hash: str,
    roles: Iterable[Role],
    max_priority: Priority,
    now: datetime,
) -> ApiKey:
    if conn.execute(select(api_keys.c.id).where(api_keys.c.name == name)).first() is not None:
        raise Conflict(f"a key named {echo(name)} already exists")
    role_text = ",".join(sorted(r.value for r in roles))
    conn.execute(
        insert(api_keys).values(
            name=name, key_hash=key_hash, roles=role_text, max_priority=max_priority.value, created_at=now
        )
    )
    return ApiKey(name, frozenset(roles), max_priority, now, None)


def list_keys(conn: Connection) -> list[ApiKey]:
    return [_row_to_key(r) for r in conn.execute(select(api_keys).order_by(api_keys.c.id)).all()]


def revoke_key(conn: Connection, name: str, now: datetime) -> None:
    result = conn.execute(
        update(api_keys)
        .where(and_(api_keys.c.name == name, api_keys.c.revoked_at.is_(None)))
        .values(revoked_at=now)
    )
    if result.rowcount == 0:
        raise NotFound(f"no active key named {echo(name)}")


def any_key(conn: Connection) -> bool:
    """Whether the database has ever had a key (revoked keys stay, as their names do)."""
    return conn.execute(select(api_keys.c.id).limit(1)).first() is not None
