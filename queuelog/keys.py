"""API key administration for the CLI (`queuelog keys ...`, the bootstrap admin key)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from sqlalchemy import Engine

from queuelog import clock
from queuelog.auth import default_max_priority, generate_key, hash_key
from queuelog.errors import BadInput, echo
from queuelog.model import ApiKey, Priority, Role
from queuelog.storage import key_operations as ops

BOOTSTRAP_NAME = "admin"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")


def parse_role(value: str) -> Role:
    try:
        return Role[value.strip().upper()]
    except KeyError:
        choices = ", ".join(r.name.lower() for r in Role)
        raise BadInput(f"unknown role {echo(value)} (choose from {choices})") from None


def parse_priority(value: str) -> Priority:
    try:
        return Priority[value.strip().upper()]
    except KeyError:
        choices = ", ".join(p.name.lower() for p in Priority)
        raise BadInput(f"unknown priority {echo(value)} (choose from {choices})") from None


def create_key(
    engine: Engine, name: str, roles: Iterable[Role], max_priority: Priority | None = None
) -> tuple[ApiKey, str]:
    """Create a key; returns the record and the plaintext key, which is never stored."""
    if not _NAME.match(name):
        raise BadInput(
            "key names are 1-128 characters: letters, digits and . _ @ -, starting with a letter or digit"
        )
    role_set = frozenset(roles)
    if not role_set:
        raise BadInput("a key needs at least one --role")
    priority = max_priority if max_priority is not None else default_max_priority(role_set)
    plaintext = generate_key()
    with engine.begin() as conn:
        record = ops.create_key(conn, name, hash_key(plaintext), role_set, priority, clock.utcnow())
    return record, plaintext


def list_keys(engine: Engine) -> list[ApiKey]:
    with engine.begin() as conn:
        return ops.list_keys(conn)


def revoke_key(engine: Engine, name: str) -> None:
    with engine.begin() as conn:
        ops.revoke_key(conn, name, clock.utcnow())


def bootstrap_admin(engine: Engine) -> tuple[ApiKey, str] | None:
    """On a database with no active key, create an ADMIN key and return it (else None)."""
    with engine.begin() as conn:
        if ops.has_active_key(conn):
            return None
        name = BOOTSTRAP_NAME
        suffix = 1
        while ops.key_name_taken(conn, name):
            suffix += 1
            name = f"{BOOTSTRAP_NAME}-{suffix}"
        plaintext = generate_key()
        now = clock.utcnow()
        record = ops.create_key(conn, name, hash_key(plaintext), [Role.ADMIN], Priority.CRITICAL, now)
    return record, plaintext
