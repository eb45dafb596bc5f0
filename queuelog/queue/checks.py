"""Checks of input that every entry point applies alike: times in UTC, text a database can
store, keys as they are stored, dependencies within bounds."""

from __future__ import annotations

import dataclasses
import unicodedata
from datetime import UTC, datetime
from typing import Any

from queuelog.errors import BadInput, PayloadTooLarge
from queuelog.model import (
    JobFilter,
    NewJob,
)
from queuelog.queue.limits import MAX_CONCURRENCY_KEY, MAX_DEPENDENCIES, MAX_IDEMPOTENCY_KEY
from queuelog.storage.schema.types import compact_json


def described(job_filter: JobFilter) -> str:
    fields = dataclasses.asdict(job_filter)
    return ", ".join(f"{name}={value}" for name, value in fields.items() if value is not None)


def as_utc(value: datetime, what: str) -> datetime:
    """A time without an offset is taken as UTC (the API speaks UTC), not server-local."""
    try:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:
        raise BadInput(f"{what} cannot be expressed in UTC") from None


def checked_expiry(expires_at: datetime, run_at: datetime | None) -> datetime:
    """An enqueue's expiresAt in UTC, once later than its runAt (None: now). Whether it is
    later than now is asked where the job would be created (storage/operations/enqueue.py):
    a replay of a job that has expired since answers that job."""
    expires_at = as_utc(expires_at, "expiresAt")
    if run_at is not None and expires_at <= run_at:
        raise BadInput("expiresAt must be later than runAt")
    return expires_at


def check_no_nul(text: str, what: str) -> None:
    if "\x00" in text:
        raise BadInput(f"{what} must not contain NUL (U+0000)")


def check_storable(text: str, what: str) -> None:
    """Refuse text that a database cannot store, the same on every backend."""
    check_no_nul(text, what)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise BadInput(f"{what} holds a lone surrogate (not Unicode text)") from None


def check_dependencies(item: NewJob, position: int) -> NewJob:
    """`dependsOnItems` may only name earlier inputs of the same call, and a job waits for
    at most MAX_DEPENDENCIES jobs in all."""
    for index in item.depends_on_items:
        if not 0 <= index < position:
            raise BadInput(
                f"dependsOnItems: {index} is not an earlier input of this enqueueJobs call"
                f" (input {position} may name 0..{position - 1})"
                if position
                else f"dependsOnItems: {index} is not an earlier input (enqueueJob has none)"
            )
    if len(item.depends_on) + len(item.depends_on_items) > MAX_DEPENDENCIES:
        raise BadInput(f"dependsOn: a job may wait for at most {MAX_DEPENDENCIES} jobs")
    return item


def checked_key(key: str, field: str, limit: int) -> str:
    """A concurrency or idempotency key as it is stored and answered: NFC-normalised (so "é"
    and "e" + U+0301 are one key), 1 to `limit` printable characters, not all spaces."""
    key = unicodedata.normalize("NFC", key)
    if not 1 <= len(key) <= limit or not key.isprintable():
        raise BadInput(f"{field} must be 1 to {limit} printable characters")
    if key.isspace():  # printable, yet it tells nothing apart (and looks like no key at all)
        raise BadInput(f"{field} must not be only spaces")
    check_storable(key, field)
    return key


def checked_concurrency_key(key: str) -> str:
    return checked_key(key, "concurrencyKey", MAX_CONCURRENCY_KEY)


def checked_idempotency_key(key: str) -> str:
    return checked_key(key, "idempotencyKey", MAX_IDEMPOTENCY_KEY)


def checked_json(value: Any, what: str, limit: int) -> str:
    """The value's compact JSON, once it is known to be JSON within `limit` bytes (V-07)."""
    try:
        text = compact_json(value)
    except (TypeError, ValueError):
        raise BadInput(f"{what} is not valid JSON") from None
    # Characters count as at least one byte each: most texts need no encoding to pass.
    if text.isascii():
        size = len(text)
    else:
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise BadInput(f"{what} holds a lone surrogate (not Unicode text)") from None
    if size > limit:
        raise PayloadTooLarge(f"{what} is {size} bytes; the limit is {limit}")
    return text
