"""API keys, principals and what each role may do (API.md section 2; V-01, V-03, V-04).

A key is 256 random bits shown once; only its SHA-256 is stored. A slow password hash
buys nothing here: the key is not guessable, and the hash is looked up on every request.
"""

from __future__ import annotations

import enum
import hashlib
import secrets
from dataclasses import dataclass

from queuelog.model import ApiKey, JobScope, Priority, Role

KEY_PREFIX = "ql_"


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def bearer_token(authorization: str | None) -> str | None:
    """The key from an `Authorization: Bearer <key>` value, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > 512:
        return None
    return token


def default_max_priority(roles: frozenset[Role]) -> Priority:
    return Priority.CRITICAL if Role.ADMIN in roles else Priority.MEDIUM


class Action(enum.Enum):
    """Operations whose permission depends on the role alone (the first check)."""

    READ = "read"
    ENQUEUE = "enqueue"
    WORK = "work"
    CANCEL = "cancel"
    RETRY = "retry"
    READ_ERROR = "read_error"
    CONTROL = "control_types"
    SEE_SCHEDULES = "see_schedules"
    SCHEDULE = "schedule"
    EDIT = "edit_jobs"


ALLOWED_ROLES: dict[Action, frozenset[Role]] = {
    Action.READ: frozenset(Role),
    Action.ENQUEUE: frozenset({Role.ADMIN, Role.PRODUCER}),
    Action.WORK: frozenset({Role.WORKER}),
    Action.CANCEL: frozenset({Role.ADMIN, Role.PRODUCER}),
    Action.RETRY: frozenset({Role.ADMIN}),
    Action.READ_ERROR: frozenset({Role.ADMIN}),
    Action.CONTROL: frozenset({Role.ADMIN}),
    Action.SEE_SCHEDULES: frozenset({Role.ADMIN, Role.VIEWER}),
    Action.SCHEDULE: frozenset({Role.ADMIN}),
    Action.EDIT: frozenset({Role.ADMIN, Role.PRODUCER}),
}


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    roles: frozenset[Role]
    max_priority: Priority

    @classmethod
    def from_key(cls, key: ApiKey) -> Principal:
        return cls(name=key.name, roles=key.roles, max_priority=key.max_priority)

    def may(self, action: Action) -> bool:
        return not self.roles.isdisjoint(ALLOWED_ROLES[action])

    @property
    def scope(self) -> JobScope:
        """The jobs this caller may see: all (ADMIN, VIEWER), else its own and/or held ones."""
        if Role.ADMIN in self.roles or Role.VIEWER in self.roles:
            return JobScope(everything=True)
        return JobScope(
            everything=False,
            created_by=self.name if Role.PRODUCER in self.roles else None,
            worker_id=self.name if Role.WORKER in self.roles else None,
        )

    @property
    def cancel_scope(self) -> JobScope:
        """ADMIN cancels (or edits) any job; a PRODUCER only those it enqueued."""
        if Role.ADMIN in self.roles:
            return JobScope(everything=True)
        return JobScope(everything=False, created_by=self.name)
