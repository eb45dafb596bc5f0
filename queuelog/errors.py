"""The refusals of API.md section 4, as exceptions any layer may raise.

Storage and auth raise these; the GraphQL layer turns them into `extensions.code`, the
CLI into one line on stderr. Anything else that escapes is a bug and is masked.
"""

from __future__ import annotations

import re

# An error message quotes at most this many characters of what the client sent.
MAX_ECHOED = 100


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


def echo(value: object) -> str:
    """How an error message quotes a client's input: the repr of its first MAX_ECHOED
    characters, with `...` after when there were more (a 100 KB time zone is not sent back)."""
    text = value if isinstance(value, str) else str(value)
    return repr(text[:MAX_ECHOED]) + ("..." if len(text) > MAX_ECHOED else "")


_QUOTED_BODY = r"(?:[^{q}\\]|\\.){{" + str(MAX_ECHOED + 1) + ",}}"
_LONG_QUOTED = re.compile(
    "'(" + _QUOTED_BODY.format(q="'") + ")'|\"(" + _QUOTED_BODY.format(q='"') + ')"', re.DOTALL
)


def shorten_echoes(message: str) -> str:
    """`message` with each quoted span longer than MAX_ECHOED characters cut as `echo` cuts:
    for the messages that libraries (graphql-core, Strawberry) write, which quote whole field
    names, enum values and variable values."""
    if len(message) <= MAX_ECHOED:
        return message

    def cut(match: re.Match[str]) -> str:
        quote = match.group(0)[0]
        quoted = match.group(1) if match.group(1) is not None else match.group(2)
        return f"{quote}{quoted[:MAX_ECHOED]}{quote}..."

    return _LONG_QUOTED.sub(cut, message)
