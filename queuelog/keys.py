"""API key administration for the CLI (`queuelog keys ...`, the bootstrap admin key)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError

from queuelog import clock
from queuelog.auth import default_max_priority, generate_key, hash_key
from queuelog.errors import BadInput, Conflict, echo
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
    """On a database that has never had a key, create an ADMIN key named `admin` and return it
    (else None). A database whose keys are all revoked gets none: a key printed to a log at
    every restart would be a way in for whoever reads the logs (`keys create --role admin`
    recovers). Servers starting together on a fresh PostgreSQL database make one key: the
    others' inserts meet the unique name and leave it to the first."""
    plaintext = generate_key()
    try:
        with engine.begin() as conn:
            if ops.any_key(conn):
                return None
            record = ops.create_key(
                conn, BOOTSTRAP_NAME, hash_key(plaintext), [Role.ADMIN], Priority.CRITICAL, clock.utcnow()
            )
    except (IntegrityError, Conflict):
        return None  # another server made it meanwhile
    return record, plaintext
