"""The refusals of API.md section 4, as exceptions any layer may raise.

Storage and auth raise these; the GraphQL layer turns them into `extensions.code`, the
CLI into one line on stderr. Anything else that escapes is a bug and is masked.
"""

from __future__ import annotations


class QueuelogError(Exception):
    code = "INTERNAL_SERVER_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unauthenticated(QueuelogError):
    code = "UNAUTHENTICATED"


class Forbidden(QueuelogError):
    code = "FORBIDDEN"


class BadInput(QueuelogError):
    code = "BAD_USER_INPUT"


class PayloadTooLarge(QueuelogError):
    code = "PAYLOAD_TOO_LARGE"


class NotFound(QueuelogError):
    code = "NOT_FOUND"


class Conflict(QueuelogError):
    code = "CONFLICT"


class DatabaseUnavailable(QueuelogError):
    """The database could not be reached or opened."""


def job_not_found(job_id: int | str) -> NotFound:
    """The refusal for a job that does not exist and for one the caller may not see (API.md
    section 2): the same code and the same message, so that the answer reveals nothing."""
    return NotFound(f"job {job_id} not found")
