"""Cron expressions of schedules: parsing, and the ticks around an instant in a time zone.

The contract (API.md section 10): an expression is 5 fields (minute hour day-of-month month
day-of-week), or 6 with a leading seconds field, or one of @yearly @monthly @weekly @daily
@hourly. A field is a number, `*`, a range `a-b`, a step `*/n` or `a-b/n`, or a list of
these `a,b`; months and days of the week may be named (`JAN`, `mon`, any case); day-of-week
runs 0-7 with both 0 and 7 Sunday. When both day-of-month and day-of-week are restricted, a
day matching either fires. Time zones are IANA names (zoneinfo). A local time that does not
exist (a daylight-saving gap) is skipped; a local time that happens twice fires once.

The ticks are computed by cronsim (the calendar walk, day-of-month/day-of-week matching,
the 6-field form with leading seconds). This module keeps three things to itself, where
cronsim, which follows Debian's cron, says otherwise than the contract:

* The grammar. cronsim also takes `L`, `LW`, `5L`, `MON#2` and `a/n`, which the contract
  does not have, and names a bad field only as "Bad minute". Each field is checked here
  against the contract's grammar, with a message that says what is wrong, and handed to
  cronsim as the plain list of values it means (or `*`).
* The day rule. cronsim (like Vixie and Debian cron) counts a day-of-month or day-of-week
  field that starts with `*` as unrestricted, so `0 0 */2 * MON` fires on odd-numbered
  Mondays only. Here a field is restricted when it leaves out some value, so that one fires
  on every odd-numbered day and every Monday.
* Daylight saving. cronsim runs a job whose time falls in a gap at the end of the gap, and
  fires a sub-hourly or 6-field schedule at both occurrences of a repeated local hour.
  Here cronsim walks wall-clock time (naive datetimes), forwards for `next_after` and
  backwards for `previous`; in both, a wall-clock tick that does not exist in the zone is
  dropped, and one that exists twice is taken at its first occurrence only. So `30 2 * * *`
  in Europe/Paris does not fire on 2026-03-29, fires once (00:30 UTC) on 2026-10-25, and
  `* * * * *` fires nothing from 01:00 to 01:59 UTC that night (local 02:00-02:59 again,
  already fired).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, available_timezones

from cronsim import CronSim, CronSimError

from queuelog.errors import echo

__all__ = ["Cron", "CronError", "check_timezone", "parse"]

MAX_LENGTH = 200

# Gives up on a schedule whose every candidate for this many years is skipped (a time zone
# whose rules leave no matching local time); cronsim itself gives up after 50 years with no
# candidate at all.
_HORIZON_YEARS = 50

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@hourly": "0 * * * *",
}

MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    # the value the first name stands for (JAN = 1, SUN = 0)
    names_start: int = 0

    def value(self, text: str, term: str) -> int:
        where = "" if text == term else f" in {echo(term)}"
        if text.isdigit():
            number = int(text)
            if not self.low <= number <= self.high:
                raise CronError(
                    f"{self.name} field: {number}{where} is out of range (allowed: {self.low}-{self.high})"
                )
            return number
        if text in self.names:
            return self.names.index(text) + self.names_start
        if self.names:
            raise CronError(
                f"{self.name} field: {echo(text)}{where} is not a number or one of {', '.join(self.names)}"
            )
        raise CronError(f"{self.name} field: {echo(text)}{where} is not a number")

    def parse(self, text: str) -> frozenset[int]:
        """The values `text` (upper case) stands for."""
        values: set[int] = set()
        for term in text.split(","):
            match = _TERM.fullmatch(term)
            if match is None:
                raise CronError(f"{self.name} field: {echo(term)} is not valid ({_FORMS})")
            star, first, last, step_text = match.groups()
            if star:
                low, high = self.low, self.high
            else:
                low = self.value(first, term)
                high = self.value(last, term) if last else low
                if step_text is not None and last is None:
                    raise CronError(
                        f"{self.name} field: {echo(term)} steps from a single value; "
                        f"write {echo(f'{first}-{self.high}/{step_text}')} or {echo(f'*/{step_text}')}"
                    )
                if high < low:
                    hint = " (Sunday is also 7)" if self is DAY_OF_WEEK and high == 0 else ""
                    raise CronError(f"{self.name} field: the range {echo(term)} goes backwards{hint}")
            step = 1 if step_text is None else int(step_text)
            if step < 1:
                raise CronError(f"{self.name} field: the step in {echo(term)} must be at least 1")
            values.update(range(low, high + 1, step))
        return frozenset(values)


_TERM = re.compile(r"(?:(\*)|([0-9]+|[A-Z]+)(?:-([0-9]+|[A-Z]+))?)(?:/([0-9]+))?")
_FORMS = "use a number, *, a-b, */n, a-b/n, or a list of these like a,b"

SECOND = _Field("second", 0, 59)
MINUTE = _Field("minute", 0, 59)
HOUR = _Field("hour", 0, 23)
DAY_OF_MONTH = _Field("day-of-month", 1, 31)
MONTH = _Field("month", 1, 12, MONTH_NAMES, 1)
DAY_OF_WEEK = _Field("day-of-week", 0, 7, DAY_NAMES, 0)


class CronError(ValueError):
    """A bad cron expression or time zone; the message is one sentence for the user."""


def check_timezone(name: str) -> None:
    """Raise CronError unless `name` is an IANA time zone name (e.g. Europe/Paris)."""
    _zone(name)


def _zone(name: object) -> ZoneInfo:
    if not isinstance(name, str):
        raise CronError(f"the time zone must be a name such as 'Europe/Paris', not {type(name).__name__}")
    return _load_zone(name)


@functools.lru_cache(maxsize=1024)
def _load_zone(name: str) -> ZoneInfo:
    # "localtime" is this machine's own zone under another name, not an IANA zone.
    if name == "localtime" or name not in _known_zones():
        raise CronError(f"unknown time zone {echo(name)} (use an IANA name such as 'Europe/Paris')")
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError) as error:  # ZoneInfoNotFoundError is a KeyError
        raise CronError(f"unknown time zone {echo(name)}") from error


@functools.lru_cache(maxsize=1)
def _known_zones() -> frozenset[str]:
    return frozenset(available_timezones())


def parse(expression: str, timezone: str) -> Cron:
    """The schedule `expression` in `timezone`; CronError if either is bad or it never fires."""
    if not isinstance(expression, str):
        raise CronError(
            f"the cron expression must be text such as '0 * * * *', not {type(expression).__name__}"
        )
    return _parse(expression, _zone(timezone).key)


@functools.lru_cache(maxsize=4096)
def _parse(expression: str, timezone: str) -> Cron:
    text = expression.strip()
    if not text:
        raise CronError("the cron expression is empty")
    if len(text) > MAX_LENGTH:
        raise CronError(f"the cron expression is longer than {MAX_LENGTH} characters")
    if not text.isascii():
        raise CronError(f"the cron expression {echo(text)} has a character that is not plain ASCII")
    cron = Cron(text, timezone, _cronsim_spec(text), _load_zone(timezone))
    try:
        first = next(cron._ticks_after(datetime.now(UTC)), None)
    except CronSimError as error:  # not expected after _cronsim_spec's checks
        raise CronError(f"the cron expression {echo(text)} is not valid ({error})") from error
    if first is None:
        raise CronError(f"the cron expression {echo(text)} never fires")
    return cron


def _cronsim_spec(text: str) -> str:
    """The 6-field cronsim expression `text` means, each field its list of values or `*`."""
    if text.startswith("@"):
        macro = MACROS.get(text.lower())
        if macro is None:
            raise CronError(
                f"{echo(text)} is not supported: use {', '.join(MACROS)}, or 5 fields "
                "(minute hour day-of-month month day-of-week), or 6 with a leading seconds field"
            )
        text = macro
    parts = text.upper().split()
    if len(parts) == 5:
        parts.insert(0, "0")
    elif len(parts) != 6:
        raise CronError(
            f"the cron expression {echo(text)} has {len(parts)} field{'s' if len(parts) != 1 else ''}; "
            "it needs 5 (minute hour day-of-month month day-of-week) "
            "or 6 with a leading seconds field"
        )
    fields = (SECOND, MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK)
    seconds, minutes, hours, days, months, weekdays = (
        f.parse(part) for f, part in zip(fields, parts, strict=True)
    )
    # A day field is restricted when it leaves out a value; cronsim applies the OR rule when
    # neither field starts with '*', and the AND rule (which then means the other field
    # alone) otherwise.
    days_restricted = len(days) < 31
    weekdays_restricted = len({d % 7 for d in weekdays}) < 7
    if not weekdays_restricted and max(DAYS_IN_MONTH[m - 1] for m in months) < min(days):
        raise CronError(f"the cron expression {echo(text)} never fires (no such day in its months)")

    def listed(values: frozenset[int], restricted: bool) -> str:
        return ",".join(str(v) for v in sorted(values)) if restricted else "*"

    return " ".join(
        (
            listed(seconds, len(seconds) < 60),
            listed(minutes, len(minutes) < 60),
            listed(hours, len(hours) < 24),
            listed(days, days_restricted),
            listed(months, len(months) < 12),
            listed(weekdays, weekdays_restricted),
        )
    )


@dataclass(frozen=True)
class Cron:
    """A parsed schedule; make one with `parse`."""

    expression: str
    timezone: str
    _spec: str = field(repr=False)
    _zone: ZoneInfo = field(repr=False, compare=False)

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after `moment` (aware, any zone), as an aware UTC datetime."""
        tick = next(self._ticks_after(moment), None)
        if tick is None:
            raise CronError(
                f"the cron expression {echo(self.expression)} has no tick after {moment.isoformat()}"
            )
        return tick

    def previous(self, before: datetime) -> datetime | None:
        """The last tick strictly before `before` (aware, any zone), as an aware UTC datetime;
        None if there is none in the _HORIZON_YEARS before it (or before the year 1).

        Found the way `next_after` finds the next one, backwards: cronsim passes a month,
        day, hour or minute that does not match in one step, so the cost does not grow with
        the number of ticks between the answer and `before`."""
        return next(self._ticks_before(before), None)

    def ticks_between(self, start: datetime, end: datetime, limit: int) -> list[datetime]:
        """The ticks t with start < t <= end, in order, at most `limit` of them (aware UTC)."""
        end_utc = _utc(end)
        ticks: list[datetime] = []
        if limit <= 0:
            return ticks
        for tick in self._ticks_after(start):
            if tick > end_utc:
                break
            ticks.append(tick)
            if len(ticks) >= limit:
                break
        return ticks

    def _ticks_after(self, moment: datetime) -> Iterator[datetime]:
        after = _utc(moment)
        # cronsim walks wall-clock time from the wall-clock time of `after`; it drops the
        # microseconds and yields strictly later whole seconds.
        start = after.astimezone(self._zone).replace(tzinfo=None)
        last_year = start.year
        for wall in _walk(self._spec, start, reverse=False):
            tick = self._instant(wall)
            if tick is not None and tick > after:
                last_year = wall.year
                yield tick
            elif wall.year > last_year + _HORIZON_YEARS:
                # Skipped: `wall` does not exist in the zone (a gap), or it happens twice
                # and its first occurrence is not after `moment` (which is in the second).
                return

    def _ticks_before(self, moment: datetime) -> Iterator[datetime]:
        before = _utc(moment)
        local = before.astimezone(self._zone)
        # The walk starts from the latest wall-clock time that a tick before `moment` can
        # have. That is `moment`'s own, except in the second occurrence of a repeated hour:
        # there the rest of the hour, fired at its first occurrence, is before `moment` too,
        # and `moment` read with the first occurrence's (larger) offset is past it. The
        # wall-clock times after the repeated hour that this adds are after `moment`, and
        # dropped. cronsim yields whole seconds strictly before `start`.
        start = (before + max(_offset(local), _offset(local.replace(fold=0)))).replace(tzinfo=None)
        last_year = start.year
        for wall in _walk(self._spec, start, reverse=True):
            tick = self._instant(wall)
            if tick is not None and tick < before:
                last_year = wall.year
                yield tick
            elif wall.year < last_year - _HORIZON_YEARS:
                # Skipped: `wall` does not exist in the zone (a gap), or it is after the
                # repeated hour `moment` is in the second occurrence of.
                return

    def _instant(self, wall: datetime) -> datetime | None:
        """The first occurrence of the wall-clock time `wall` in UTC; None in a gap."""
        zone = self._zone
        tick = wall.replace(tzinfo=zone).astimezone(UTC)  # fold=0: the first occurrence
        return tick if tick.astimezone(zone).replace(tzinfo=None) == wall else None


def _walk(spec: str, start: datetime, reverse: bool) -> Iterator[datetime]:
    """cronsim's wall-clock candidates from `start` (naive), until it gives up (50 years
    without one) or leaves the calendar (year 1 or 9999)."""
    walk = CronSim(spec, start, reverse=reverse)
    while True:
        try:
            yield next(walk)
        except (StopIteration, OverflowError):
            return


def _offset(local: datetime) -> timedelta:
    offset = local.utcoffset()
    assert offset is not None  # a ZoneInfo always has one
    return offset


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"a cron schedule needs an aware datetime, got naive {moment.isoformat()}")
    return moment.astimezone(UTC)
