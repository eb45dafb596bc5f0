"""A month whose ticks a deployment down for weeks missed, whatever today's date: the tests
of the catch-up after a long downtime put schedules firing every second of it
(`* * * * <month> *`), down since its 10th."""

from __future__ import annotations

import calendar
from datetime import UTC, datetime
from zoneinfo import ZoneInfo


def stale_month(now: datetime) -> tuple[int, int]:
    """(year, month) of the month before last: never the current month while a test runs."""
    month = (now.month - 3) % 12 + 1
    return (now.year if month < now.month else now.year - 1), month


def last_second_of(year: int, month: int, zone: str) -> datetime:
    """The last second of the month in `zone`, in UTC."""
    day = calendar.monthrange(year, month)[1]
    return datetime(year, month, day, 23, 59, 59, tzinfo=ZoneInfo(zone)).astimezone(UTC)


def first_second_of(year: int, month: int, zone: str) -> datetime:
    """The first second of the month in `zone`, in UTC."""
    return datetime(year, month, 1, tzinfo=ZoneInfo(zone)).astimezone(UTC)
