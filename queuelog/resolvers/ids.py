"""Job ids and page cursors as the API spells them."""

from __future__ import annotations

import base64
import binascii

from queuelog.errors import BadInput, echo

CURSOR_PREFIX = "job:"
MAX_ID = 2**63 - 1


def parse_job_id(value: str, field: str | None = None) -> int:
    """`field`: the input field the id came from, named in the error."""
    if not value.isascii() or not value.isdigit() or len(value) > 19 or not 0 < int(value) <= MAX_ID:
        raise BadInput(f"{field + ': ' if field else ''}invalid job id {echo(value)}")
    return int(value)


def encode_cursor(job_id: int) -> str:
    return base64.urlsafe_b64encode(f"{CURSOR_PREFIX}{job_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        text = base64.urlsafe_b64decode(padded.encode("ascii")).decode("ascii")
    except (binascii.Error, UnicodeError, ValueError):
        raise BadInput("invalid cursor") from None
    if not text.startswith(CURSOR_PREFIX):
        raise BadInput("invalid cursor")
    try:
        return parse_job_id(text[len(CURSOR_PREFIX) :])
    except BadInput:
        raise BadInput("invalid cursor") from None
