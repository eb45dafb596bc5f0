"""How a handler's end becomes the job's report: a completion item, or a failure."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from queuelog.sdk.worker.job import Discard, JobCancelled, Retry, Snooze

TIMED_OUT_ERROR = "timed out"  # the server's error for a job past its timeout (API.md section 9)


@dataclass
class Outcome:
    """A failure to report: `status` is what the job's log line says if the server agrees."""

    status: str
    error: str | None = None
    retryable: bool = True
    retry_in: int | None = None
    snooze: int | None = None  # snoozeJob for this many seconds, not failJob


STOPPED = Outcome("retrying", "worker stopped before the job finished")
# Reported at the job's deadline, with the server's own error text: whichever of the two
# fails the job first, it fails the same way (retry rules as for failJob).
TIMED_OUT = Outcome("timed out", TIMED_OUT_ERROR)
# The handler stopped on a cancel request (cancelled, or JobCancelled): the server ends the
# attempt CANCELLED whatever the failure says.
CANCELLED = Outcome("cancelled", "cancelled while running", retryable=False)


def json_string(text: str) -> str:
    if text.isascii() and text.isalnum():  # ids are digits: nothing to escape
        return f'"{text}"'
    return json.dumps(text)


def completion_item(id_json: str, attempt: int, result: Any) -> bytes:
    """The job's `CompleteJobInput`, as JSON; TypeError/ValueError if `result` is not JSON."""
    if result is None:
        encoded = "null"
    else:
        encoded = json.dumps(result, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return f'{{"id":{id_json},"attempt":{attempt},"result":{encoded}}}'.encode()


def _text(exc: BaseException) -> str:
    return str(exc).replace("\x00", "")  # NUL cannot be stored (the server refuses it)


def _describe(exc: BaseException) -> str:
    text = _text(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def failure(exc: BaseException) -> Outcome:
    """What a handler's exception reports: Retry, Discard, Snooze and JobCancelled as they
    say, anything else a retryable failure carrying its text."""
    if isinstance(exc, Snooze):
        return Outcome("snoozed", snooze=exc.seconds)
    if isinstance(exc, JobCancelled):
        return CANCELLED
    if isinstance(exc, Retry):
        after = None if exc.after is None else max(0, min(86400, round(exc.after)))
        return Outcome("retrying", _describe(exc), retry_in=after)
    if isinstance(exc, Discard):
        return Outcome("discarded", _text(exc) or "discarded", retryable=False)
    return Outcome("retrying", _describe(exc))
