"""queuelog.cron: the contract's cron expressions, their ticks, and the time zone rules.

Real zoneinfo data throughout. Times are written as UTC ("Z") or as local wall-clock times
of the schedule's zone; `utc()` and `local()` build them.
"""

from __future__ import annotations

import functools
import random
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from cron_steps import CronSteps
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from queuelog.cron import Cron, CronError, check_timezone, parse

PARIS = "Europe/Paris"
NEW_YORK = "America/New_York"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def local(text: str, zone: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone))


def ticks(expression: str, zone: str, start: datetime, end: datetime, limit: int = 1000) -> list[datetime]:
    return parse(expression, zone).ticks_between(start, end, limit)


def iso(moments: list[datetime]) -> list[str]:
    return [m.strftime("%Y-%m-%d %H:%M:%S") for m in moments]


# --- fields ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("15 10 * * *", "2026-01-01 10:15:00", "2026-01-02 10:15:00"),
        ("15 10 * * *", "2026-01-01 10:14:59", "2026-01-01 10:15:00"),
        ("0 0 * * *", "2026-12-31 23:59:59", "2027-01-01 00:00:00"),
        # six fields: the first is the seconds
        ("30 15 10 * * *", "2026-01-01 10:15:30", "2026-01-02 10:15:30"),
        ("30 15 10 * * *", "2026-01-01 10:15:29", "2026-01-01 10:15:30"),
        ("0 0 0 29 2 *", "2026-01-01 00:00:00", "2028-02-29 00:00:00"),
        # ranges, lists, steps
        ("0 9-11 * * *", "2026-01-01 11:00:00", "2026-01-02 09:00:00"),
        ("5,35 * * * *", "2026-01-01 10:05:00", "2026-01-01 10:35:00"),
        ("*/15 * * * *", "2026-01-01 10:46:00", "2026-01-01 11:00:00"),
        ("10-50/20 * * * *", "2026-01-01 10:30:00", "2026-01-01 10:50:00"),
        ("10-50/20 * * * *", "2026-01-01 10:50:00", "2026-01-01 11:10:00"),
        ("0 0 1 */3 *", "2026-01-01 00:00:00", "2026-04-01 00:00:00"),
        # 2026-05-13 is a Wednesday
        ("0 12 * * 1-5", "2026-05-15 12:00:00", "2026-05-18 12:00:00"),
        ("0 12 * * SAT", "2026-05-13 00:00:00", "2026-05-16 12:00:00"),
    ],
)
def test_next_after(expression: str, after: str, expected: str) -> None:
    assert parse(expression, "UTC").next_after(utc(after)) == utc(expected)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("@yearly", "2027-01-01 00:00:00"),
        ("@monthly", "2026-06-01 00:00:00"),
        ("@weekly", "2026-05-17 00:00:00"),  # Sunday
        ("@daily", "2026-05-14 00:00:00"),
        ("@hourly", "2026-05-13 13:00:00"),
        ("@DAILY", "2026-05-14 00:00:00"),
        ("  @hourly  ", "2026-05-13 13:00:00"),
    ],
)
def test_at_names(expression: str, expected: str) -> None:
    assert parse(expression, "UTC").next_after(utc("2026-05-13 12:00:00")) == utc(expected)


@pytest.mark.parametrize(
    ("expression", "same_as"),
    [
        ("0 0 1 JAN *", "0 0 1 1 *"),
        ("0 0 1 jan *", "0 0 1 1 *"),
        ("0 0 1 Jul,DEC *", "0 0 1 7,12 *"),
        ("0 9 * FEB-apr *", "0 9 * 2-4 *"),
        ("0 9 * * MON", "0 9 * * 1"),
        ("0 9 * * mon-fri", "0 9 * * 1-5"),
        ("0 9 * * Sun", "0 9 * * 0"),
        # day-of-week 7 is Sunday, as 0 is
        ("0 9 * * 7", "0 9 * * 0"),
        ("0 9 * * 5-7", "0 9 * * 0,5,6"),
        ("0 9 * * 0,7", "0 9 * * 0"),
        ("*/15 * * * *", "0,15,30,45 * * * *"),
        ("10-50/20 * * * *", "10,30,50 * * * *"),
        ("0 */6 * * *", "0 0,6,12,18 * * *"),
        ("0 9-11 * * *", "0 9,10,11 * * *"),
        ("0 0 * * */2", "0 0 * * 0,2,4,6"),
        ("  0   9\t* *  1  ", "0 9 * * 1"),
        ("0 0 9 * * *", "0 9 * * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ],
)
def test_same_ticks(expression: str, same_as: str) -> None:
    start, end = utc("2026-01-01 00:00:00"), utc("2027-01-01 00:00:00")
    expected = ticks(same_as, PARIS, start, end, 10_000)
    assert expected
    assert ticks(expression, PARIS, start, end, 10_000) == expected


def test_sunday_is_0_and_7() -> None:
    for expression in ("0 0 * * 0", "0 0 * * 7", "0 0 * * SUN", "0 0 * * sun"):
        found = ticks(expression, "UTC", utc("2026-05-01 00:00:00"), utc("2026-06-01 00:00:00"))
        assert iso(found) == [
            "2026-05-03 00:00:00",
            "2026-05-10 00:00:00",
            "2026-05-17 00:00:00",
            "2026-05-24 00:00:00",
            "2026-05-31 00:00:00",
        ]
        assert {t.weekday() for t in found} == {6}


def test_either_day_fires_when_both_are_restricted() -> None:
    # every 13th and every Friday (2026-02-13 and 2026-03-13 are both)
    found = ticks("0 0 13 * FRI", "UTC", utc("2026-01-01 00:00:00"), utc("2026-04-01 00:00:00"))
    assert iso(found) == [
        f"2026-{day} 00:00:00"
        for day in (
            "01-02",
            "01-09",
            "01-13",
            "01-16",
            "01-23",
            "01-30",
            "02-06",
            "02-13",
            "02-20",
            "02-27",
            "03-06",
            "03-13",
            "03-20",
            "03-27",
        )
    ]


@pytest.mark.parametrize(
    ("expression", "expected_days"),
    [
        # one day field restricted: that one alone
        ("0 0 * * MON", ["01-05", "01-12"]),
        ("0 0 1,10 * *", ["01-01", "01-10"]),
        # a step restricts a field, so a day matching either fires (Debian's and Vixie's
        # cron count a field starting with '*' as unrestricted and would give 01-05 only)
        ("0 0 */4 * MON", ["01-01", "01-05", "01-09", "01-12", "01-13"]),
        # a field that leaves no value out is not restricted: Mondays only
        ("0 0 1-31 * MON", ["01-05", "01-12"]),
        ("0 0 1 * 0-7", ["01-01"]),
    ],
)
def test_day_fields(expression: str, expected_days: list[str]) -> None:
    # 2026-01-01 is a Thursday
    found = ticks(expression, "UTC", utc("2025-12-31 00:00:00"), utc("2026-01-14 00:00:00"))
    assert iso(found) == [f"2026-{day} 00:00:00" for day in expected_days]


def test_seconds_field() -> None:
    cron = parse("*/10 * * * * *", "UTC")
    assert cron.next_after(utc("2026-01-01 12:00:05")) == utc("2026-01-01 12:00:10")
    assert cron.next_after(utc("2026-01-01 12:00:50")) == utc("2026-01-01 12:01:00")
    found = cron.ticks_between(utc("2026-01-01 12:00:00"), utc("2026-01-01 12:01:00"), 100)
    assert iso(found) == [f"2026-01-01 12:00:{s}0" for s in range(1, 6)] + ["2026-01-01 12:01:00"]


def test_every_second_for_an_hour_takes_a_step_per_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    steps = CronSteps(limit=3700).install(monkeypatch)
    cron = parse("* * * * * *", PARIS)
    found = cron.ticks_between(utc("2026-06-01 10:00:00"), utc("2026-06-01 11:00:00"), 10_000)
    assert len(found) == 3600
    assert found[0] == utc("2026-06-01 10:00:01") and found[-1] == utc("2026-06-01 11:00:00")
    assert all(b - a == timedelta(seconds=1) for a, b in zip(found, found[1:], strict=False))
    assert steps.count <= 3601 + 2, steps  # one per tick, and the step past the end


# --- results --------------------------------------------------------------------------------


def test_result_is_utc_whole_seconds_strictly_after() -> None:
    cron = parse("0 * * * *", PARIS)
    moment = datetime(2026, 7, 1, 9, 0, 0, 500_000, tzinfo=ZoneInfo("Asia/Tokyo"))
    tick = cron.next_after(moment)
    assert tick.tzinfo is UTC
    assert tick.microsecond == 0
    assert tick == utc("2026-07-01 01:00:00")
    # exactly on a tick: the next one
    assert cron.next_after(utc("2026-07-01 01:00:00")) == utc("2026-07-01 02:00:00")
    assert cron.next_after(utc("2026-07-01 00:59:59.999999")) == utc("2026-07-01 01:00:00")


def test_ticks_between_bounds_and_limit() -> None:
    cron = parse("0 * * * *", "UTC")
    start, end = utc("2026-01-01 00:00:00"), utc("2026-01-01 03:00:00")
    # start excluded, end included
    assert iso(cron.ticks_between(start, end, 10)) == [
        "2026-01-01 01:00:00",
        "2026-01-01 02:00:00",
        "2026-01-01 03:00:00",
    ]
    assert iso(cron.ticks_between(start, end, 2)) == ["2026-01-01 01:00:00", "2026-01-01 02:00:00"]
    assert cron.ticks_between(start, end, 0) == []
    assert cron.ticks_between(end, start, 10) == []
    assert cron.ticks_between(start, start + timedelta(minutes=59), 10) == []
    assert all(t.tzinfo is UTC for t in cron.ticks_between(start, end, 10))


def test_naive_moment_is_refused() -> None:
    cron = parse("0 * * * *", "UTC")
    with pytest.raises(ValueError, match="aware"):
        cron.next_after(datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="aware"):
        cron.ticks_between(datetime(2026, 1, 1), utc("2026-01-02 00:00:00"), 5)


def test_parse_keeps_the_stripped_text_and_is_cached() -> None:
    cron = parse("  */5  * * * *\n", PARIS)
    assert isinstance(cron, Cron)
    assert cron.expression == "*/5  * * * *"
    assert cron.timezone == PARIS
    assert parse("  */5  * * * *\n", PARIS) is cron
    assert parse("*/5 * * * *", PARIS) == parse("*/5 * * * *", PARIS)


# --- daylight saving ------------------------------------------------------------------------


def test_paris_spring_forward_skips_the_missing_time() -> None:
    # 2026-03-29: 02:00 CET becomes 03:00 CEST, so 02:30 does not exist that day
    cron = parse("30 2 * * *", PARIS)
    assert cron.next_after(local("2026-03-28 02:30:00", PARIS)) == local("2026-03-30 02:30:00", PARIS)
    assert cron.next_after(local("2026-03-28 02:30:00", PARIS)) == utc("2026-03-30 00:30:00")
    found = cron.ticks_between(utc("2026-03-27 00:00:00"), utc("2026-03-31 12:00:00"), 10)
    assert iso(found) == [
        "2026-03-27 01:30:00",
        "2026-03-28 01:30:00",
        "2026-03-30 00:30:00",
        "2026-03-31 00:30:00",
    ]


def test_paris_spring_forward_hourly() -> None:
    # local 01:00 CET, (02:00 missing), 03:00 CEST, 04:00 CEST: one tick an hour in UTC
    found = ticks("0 * * * *", PARIS, utc("2026-03-28 23:30:00"), utc("2026-03-29 02:30:00"))
    assert iso(found) == ["2026-03-29 00:00:00", "2026-03-29 01:00:00", "2026-03-29 02:00:00"]
    found = ticks("*/20 * * * *", PARIS, utc("2026-03-29 00:30:00"), utc("2026-03-29 01:30:00"))
    assert iso(found) == ["2026-03-29 00:40:00", "2026-03-29 01:00:00", "2026-03-29 01:20:00"]


def test_paris_fall_back_fires_once() -> None:
    # 2026-10-25: 03:00 CEST becomes 02:00 CET, so 02:00-02:59 happens twice
    # (00:00-00:59 UTC, then 01:00-01:59 UTC); it fires at the first occurrence only
    cron = parse("30 2 * * *", PARIS)
    found = cron.ticks_between(utc("2026-10-24 00:00:00"), utc("2026-10-26 12:00:00"), 10)
    assert iso(found) == ["2026-10-24 00:30:00", "2026-10-25 00:30:00", "2026-10-26 01:30:00"]
    # from the first occurrence, and from inside the second
    assert cron.next_after(utc("2026-10-25 00:30:00")) == utc("2026-10-26 01:30:00")
    assert cron.next_after(utc("2026-10-25 01:15:00")) == utc("2026-10-26 01:30:00")
    assert cron.next_after(utc("2026-10-25 00:15:00")) == utc("2026-10-25 00:30:00")
    # the six-field form too
    found = ticks("0 30 2 * * *", PARIS, utc("2026-10-24 12:00:00"), utc("2026-10-25 12:00:00"))
    assert iso(found) == ["2026-10-25 00:30:00"]


def test_paris_fall_back_hourly_and_per_minute() -> None:
    # local 00:00 CEST, 01:00 CEST, 02:00 CEST, (02:00 CET again: not twice), 03:00 CET
    found = ticks("0 * * * *", PARIS, utc("2026-10-24 21:30:00"), utc("2026-10-25 03:30:00"))
    assert iso(found) == [
        "2026-10-24 22:00:00",
        "2026-10-24 23:00:00",
        "2026-10-25 00:00:00",
        "2026-10-25 02:00:00",
        "2026-10-25 03:00:00",
    ]
    found = ticks("* * * * *", PARIS, utc("2026-10-25 00:57:00"), utc("2026-10-25 02:02:00"))
    assert iso(found) == [
        "2026-10-25 00:58:00",
        "2026-10-25 00:59:00",
        "2026-10-25 02:00:00",
        "2026-10-25 02:01:00",
        "2026-10-25 02:02:00",
    ]
    # from inside the second occurrence, the next tick is after it
    assert parse("* * * * *", PARIS).next_after(utc("2026-10-25 01:15:00")) == utc("2026-10-25 02:00:00")
    # over the whole night: in order, no UTC instant twice, each local minute once
    found = ticks("* * * * *", PARIS, utc("2026-10-24 22:00:00"), utc("2026-10-25 04:00:00"), 10_000)
    assert found == sorted(set(found))
    wall = [t.astimezone(ZoneInfo(PARIS)).replace(tzinfo=None) for t in found]
    assert len(wall) == len(set(wall)) == 6 * 60 - 60


def test_new_york() -> None:
    # 2026-03-08: 02:00 EST becomes 03:00 EDT; 2026-11-01: 02:00 EDT becomes 01:00 EST
    found = ticks("30 2 * * *", NEW_YORK, utc("2026-03-07 00:00:00"), utc("2026-03-10 00:00:00"))
    assert iso(found) == ["2026-03-07 07:30:00", "2026-03-09 06:30:00"]
    found = ticks("30 1 * * *", NEW_YORK, utc("2026-10-31 00:00:00"), utc("2026-11-03 00:00:00"))
    assert iso(found) == ["2026-10-31 05:30:00", "2026-11-01 05:30:00", "2026-11-02 06:30:00"]
    found = ticks("0 * * * *", NEW_YORK, utc("2026-11-01 03:30:00"), utc("2026-11-01 07:30:00"))
    assert iso(found) == ["2026-11-01 04:00:00", "2026-11-01 05:00:00", "2026-11-01 07:00:00"]
    assert parse("0 9 * * MON-FRI", NEW_YORK).next_after(utc("2026-07-03 14:00:00")) == utc(
        "2026-07-06 13:00:00"
    )


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "zone", "says"),
    [
        ("60 * * * *", "UTC", "minute"),
        ("* 24 * * *", "UTC", "hour"),
        ("* * 0 * *", "UTC", "day-of-month"),
        ("* * * 13 *", "UTC", "month"),
        ("* * * * 8", "UTC", "day-of-week"),
        ("60 * * * * *", "UTC", "second"),
        ("FOO", "UTC", "1 field"),
        ("* * * * FOO", "UTC", "FOO"),
        ("* * * MON *", "UTC", "MON"),
        ("* * * * JAN", "UTC", "JAN"),
        ("* * * * * * *", "UTC", "7 fields"),
        ("* * * *", "UTC", "4 fields"),
        ("@reboot", "UTC", "@reboot"),
        ("@annually", "UTC", "@annually"),  # the contract has @yearly
        ("@midnight", "UTC", "@midnight"),  # and @daily
        ("@every 5m", "UTC", "not supported"),
        ("", "UTC", "empty"),
        ("   ", "UTC", "empty"),
        ("0 0 30 2 *", "UTC", "never fires"),
        ("0 0 31 4,6,9,11 *", PARIS, "never fires"),
        ("*/0 * * * *", "UTC", "step"),
        ("5/15 * * * *", "UTC", "5-59/15"),
        ("30-10 * * * *", "UTC", "backwards"),
        ("* * * * FRI-SUN", "UTC", "backwards"),
        ("1,,2 * * * *", "UTC", "not valid"),
        ("-5 * * * *", "UTC", "not valid"),
        ("0 0 L * *", "UTC", "L"),
        ("0 0 * * MON#2", "UTC", "not valid"),
        ("0 0 ? * *", "UTC", "not valid"),
        ("0 0 * * 1½", "UTC", "ASCII"),
        ("0 " * 100 + "*", "UTC", "200"),
        ("* * * * *", "Mars/Base", "unknown time zone 'Mars/Base'"),
        ("* * * * *", "", "time zone"),
        ("* * * * *", "europe/paris", "time zone"),
        ("* * * * *", "Europe", "time zone"),
        ("* * * * *", "../etc/passwd", "time zone"),
        ("* * * * *", "/etc/localtime", "time zone"),
        ("* * * * *", "localtime", "time zone"),
        ("* * * * *", "Europe/Paris\x00", "time zone"),
        (None, "UTC", "cron expression"),
        (5, "UTC", "cron expression"),
        (b"* * * * *", "UTC", "cron expression"),
        ("* * * * *", None, "time zone"),
        ("* * * * *", 0, "time zone"),
    ],
)
def test_bad_input(expression: object, zone: object, says: str) -> None:
    with pytest.raises(CronError) as raised:
        parse(expression, zone)  # type: ignore[arg-type]
    message = str(raised.value)
    assert says in message
    assert "Traceback" not in message
    assert "\n" not in message
    assert isinstance(raised.value, ValueError)


def test_length_limit_counts_the_stripped_text() -> None:
    text = "0 0 1 1  " + "0," * 95 + "0"
    assert len(text) == 200
    assert parse(f"   {text}\n", "UTC").expression == text
    with pytest.raises(CronError, match="200"):
        parse(text + "0", "UTC")


@pytest.mark.parametrize("zone", ["Europe/Paris", "America/New_York", "UTC", "Asia/Kolkata", "Etc/GMT+5"])
def test_check_timezone_accepts(zone: str) -> None:
    check_timezone(zone)


@pytest.mark.parametrize("zone", ["Mars/Base", "", "Paris", "UTC+1", "localtime", "Europe/"])
def test_check_timezone_refuses(zone: str) -> None:
    with pytest.raises(CronError, match="time zone"):
        check_timezone(zone)


# --- property -------------------------------------------------------------------------------


def field(low: int, high: int) -> st.SearchStrategy[str]:
    number = st.integers(low, high)
    return st.one_of(
        st.just("*"),
        number.map(str),
        st.integers(1, high - low + 1).map(lambda n: f"*/{n}"),
        st.tuples(number, number).map(lambda p: f"{min(p)}-{max(p)}"),
        st.tuples(number, number, st.integers(1, 12)).map(lambda p: f"{min(p[:2])}-{max(p[:2])}/{p[2]}"),
        st.lists(number, min_size=2, max_size=4).map(lambda v: ",".join(map(str, v))),
    )


expressions = st.tuples(
    st.one_of(st.just(""), field(0, 59).map(lambda s: s + " ")),
    field(0, 59),
    field(0, 23),
    field(1, 31),
    field(1, 12),
    field(0, 7),
).map(lambda f: f[0] + " ".join(f[1:]))

ZONES = ["UTC", PARIS, NEW_YORK, "Australia/Lord_Howe", "Asia/Kolkata", "America/Santiago", "Pacific/Apia"]


@settings(max_examples=300, deadline=None)
@given(
    expression=expressions,
    zone=st.sampled_from(ZONES),
    moment=st.datetimes(
        min_value=datetime(1990, 1, 1), max_value=datetime(2090, 1, 1), timezones=st.timezones()
    ),
)
def test_next_after_is_a_later_tick(expression: str, zone: str, moment: datetime) -> None:
    try:
        cron = parse(expression, zone)
    except CronError as error:
        assert "never fires" in str(error)
        assume(False)
        return
    tick = cron.next_after(moment)
    assert tick > moment
    assert tick.tzinfo is UTC and tick.microsecond == 0
    # it is a tick: just before it, it is the next one
    assert cron.next_after(tick - timedelta(microseconds=1)) == tick
    # and nothing lies between
    assert cron.ticks_between(moment, tick, 5) == [tick]


# --- the last tick before an instant ---------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "before", "expected"),
    [
        ("15 10 * * *", "2026-01-02 10:15:00", "2026-01-01 10:15:00"),  # strictly before
        ("15 10 * * *", "2026-01-02 10:15:00.000001", "2026-01-02 10:15:00"),
        ("15 10 * * *", "2026-01-01 00:00:00", "2025-12-31 10:15:00"),
        ("30 15 10 * * *", "2026-01-01 10:15:30", "2025-12-31 10:15:30"),
        ("*/10 * * * * *", "2026-01-01 12:00:05", "2026-01-01 12:00:00"),
        ("*/10 * * * * *", "2026-01-01 12:00:00", "2026-01-01 11:59:50"),
        ("0 0 1 */3 *", "2026-03-31 23:59:59", "2026-01-01 00:00:00"),
        ("10-50/20 * * * *", "2026-01-01 10:10:00", "2026-01-01 09:50:00"),
        # 2026-05-13 is a Wednesday
        ("0 12 * * 1-5", "2026-05-18 12:00:00", "2026-05-15 12:00:00"),
        ("0 0 13 * FRI", "2026-03-13 00:00:00", "2026-03-06 00:00:00"),  # either day field
        # every second of January, from December: the last second of January
        ("* * * * 1 *", "2026-12-05 16:13:41.5", "2026-01-31 23:59:59"),
        ("* * * * 1 *", "2026-01-20 08:00:00", "2026-01-20 07:59:59"),
        # leap days; 2100 is not a leap year
        ("0 0 0 29 2 *", "2028-02-29 00:00:00", "2024-02-29 00:00:00"),
        ("0 0 29 2 *", "2104-02-28 12:00:00", "2096-02-29 00:00:00"),
        ("* * * * * *", "0001-01-01 00:00:05", "0001-01-01 00:00:04"),
    ],
)
def test_previous(expression: str, before: str, expected: str) -> None:
    tick = parse(expression, "UTC").previous(utc(before))
    assert tick == utc(expected)
    assert tick is not None and tick.tzinfo is UTC


def test_previous_takes_any_zone_and_refuses_naive() -> None:
    cron = parse("0 * * * *", PARIS)
    assert cron.previous(datetime(2026, 7, 1, 10, 0, 0, 1, tzinfo=ZoneInfo("Asia/Tokyo"))) == utc(
        "2026-07-01 01:00:00"
    )
    with pytest.raises(ValueError, match="aware"):
        cron.previous(datetime(2026, 1, 1))


def test_previous_is_none_before_the_first_tick() -> None:
    assert parse("0 0 1 1 *", "UTC").previous(utc("0001-01-01 00:00:00")) is None
    assert parse("0 0 1 1 *", "UTC").previous(utc("0001-06-01 00:00:00")) == utc("0001-01-01 00:00:00")


def test_previous_skips_the_missing_time_and_fires_the_repeated_one_once() -> None:
    nightly = parse("30 2 * * *", PARIS)
    # 2026-03-29 has no 02:30 in Paris
    assert nightly.previous(utc("2026-03-30 00:30:00")) == utc("2026-03-28 01:30:00")
    assert nightly.previous(utc("2026-03-30 00:30:01")) == utc("2026-03-30 00:30:00")
    # 2026-10-25 has it twice (00:30 and 01:30 UTC): the first one is the tick, also from
    # inside the second occurrence
    assert nightly.previous(utc("2026-10-25 01:15:00")) == utc("2026-10-25 00:30:00")
    assert nightly.previous(utc("2026-10-25 01:45:00")) == utc("2026-10-25 00:30:00")
    assert nightly.previous(utc("2026-10-26 01:30:00")) == utc("2026-10-25 00:30:00")
    assert nightly.previous(utc("2026-10-25 00:30:00")) == utc("2026-10-24 00:30:00")
    minutely = parse("* * * * *", PARIS)
    # inside the repeated hour (01:00-01:59 UTC): the last tick is the end of its first pass
    assert minutely.previous(utc("2026-10-25 01:30:00")) == utc("2026-10-25 00:59:00")
    assert minutely.previous(utc("2026-10-25 02:00:00")) == utc("2026-10-25 00:59:00")
    assert minutely.previous(utc("2026-10-25 02:00:00.000001")) == utc("2026-10-25 02:00:00")
    assert minutely.previous(utc("2026-10-25 00:59:30")) == utc("2026-10-25 00:59:00")
    # across the spring gap (01:00 UTC is 03:00 CEST; 02:xx CET does not exist)
    assert minutely.previous(utc("2026-03-29 01:00:00")) == utc("2026-03-29 00:59:00")
    assert parse("0 * * * *", PARIS).previous(utc("2026-03-29 01:00:00")) == utc("2026-03-29 00:00:00")
    every_second = parse("* * * * * *", NEW_YORK)
    # 2026-11-01: 01:00-01:59 EDT (05:00-05:59 UTC) happens again as EST (06:00-06:59 UTC)
    assert every_second.previous(utc("2026-11-01 06:59:59.5")) == utc("2026-11-01 05:59:59")
    assert every_second.previous(utc("2026-11-01 07:00:00.5")) == utc("2026-11-01 07:00:00")


def test_previous_walks_the_calendar_not_the_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    """From December, the last second of January is found in a few steps of the walk, not
    in one per second of the eleven months (or of the 30 days before: 2.6 million)."""
    steps = CronSteps(limit=100).install(monkeypatch)
    every_january_second = parse("* * * * 1 *", PARIS)
    assert every_january_second.previous(utc("2026-12-05 16:13:41")) == local("2026-01-31 23:59:59", PARIS)
    assert every_january_second.previous(utc("2026-01-31 23:00:00")) == local("2026-01-31 23:59:59", PARIS)
    assert parse("0 0 29 2 *", NEW_YORK).previous(utc("2104-02-28 12:00:00")) == local(
        "2096-02-29 00:00:00", NEW_YORK
    )
    assert parse("59 59 23 31 12 *", "UTC").previous(utc("2026-12-31 23:59:59")) == utc("2025-12-31 23:59:59")
    assert 0 < steps.count <= 40, steps


def random_field(rng: random.Random, low: int, high: int, dense: bool) -> str:
    """A field as the grammar allows it; `dense` ones match many values (ticks close together)."""
    kind = rng.choice(
        ["*", "*", "step", "range"] if dense else ["*", "n", "step", "range", "range/n", "list"]
    )
    first, second = sorted(rng.randint(low, high) for _ in range(2))
    if kind == "*":
        return "*"
    if kind == "n":
        return str(first)
    if kind == "step":
        return f"*/{rng.randint(1, 4 if dense else high - low + 1)}"
    if kind == "range":
        return f"{first}-{second}" if not dense else f"{low}-{rng.randint((low + high) // 2, high)}"
    if kind == "range/n":
        return f"{first}-{second}/{rng.randint(1, 12)}"
    return ",".join(str(rng.randint(low, high)) for _ in range(rng.randint(2, 4)))


def random_expression(rng: random.Random, dense: bool = False) -> str:
    """Seconds (sometimes) minute hour day-of-month month day-of-week; in a `dense` one the
    time of day fields match often, so that its ticks meet daylight-saving changes."""
    seconds = random_field(rng, 0, 59, dense) + " " if rng.random() < 0.4 else ""
    return seconds + " ".join(
        (
            random_field(rng, 0, 59, dense),
            random_field(rng, 0, 23, dense),
            random_field(rng, 1, 31, False),
            random_field(rng, 1, 12, False),
            random_field(rng, 0, 7, False),
        )
    )


@functools.cache
def offset_changes(zone: str) -> list[datetime]:
    """The instants (UTC, to the second) at which `zone` changed or changes its offset in
    2010-2031: each daylight-saving gap and fold, and Apia's skipped day (2011-12-30)."""
    info = ZoneInfo(zone)
    changes = []
    moment, end, step = utc("2010-01-01 00:00:00"), utc("2032-01-01 00:00:00"), timedelta(hours=6)
    while moment < end:
        later = moment + step
        if moment.astimezone(info).utcoffset() != later.astimezone(info).utcoffset():
            low, high = moment, later
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                if middle.astimezone(info).utcoffset() == low.astimezone(info).utcoffset():
                    low = middle
                else:
                    high = middle
            changes.append(high.replace(microsecond=0))
        moment = later
    return changes


def random_moment(rng: random.Random, zone: str) -> datetime:
    """Any instant in 1990-2090, or one within two hours of one of `zone`'s offset changes;
    a whole second, or not."""
    changes = offset_changes(zone)
    if changes and rng.random() < 0.6:
        moment = rng.choice(changes) + timedelta(seconds=rng.randint(-7200, 7200))
    else:
        moment = utc("1990-01-01 00:00:00") + timedelta(seconds=rng.randint(0, 100 * 365 * 86400))
    if rng.random() < 0.5:
        moment += timedelta(microseconds=rng.randint(1, 999_999))
    return moment


def test_previous_is_the_last_tick_the_forward_walk_yields_before() -> None:
    """For 3,000 random expressions, zones and instants (seeded, so a failure repeats), many
    of them around daylight-saving changes: previous(t) is a tick of the forward walk
    (`next_after` just before it gives it back), and the forward walk's next tick after it is
    t or later. So is the tick before that one."""
    rng = random.Random(20261205)
    zones = [*ZONES, "Europe/London", "Asia/Tehran"]
    checked = 0
    while checked < 3000:
        zone = rng.choice(zones)
        expression = random_expression(rng, dense=rng.random() < 0.5)
        try:
            cron = parse(expression, zone)
        except CronError as error:
            assert "never fires" in str(error), expression
            continue
        moment = random_moment(rng, zone)
        case = f"{expression!r} in {zone} before {moment.isoformat()}"
        tick = cron.previous(moment)
        assert tick is not None, case
        assert tick < moment and tick.tzinfo is UTC, (case, tick)
        assert cron.next_after(tick - timedelta(microseconds=1)) == tick, (case, tick)
        assert cron.next_after(tick) >= moment, (case, tick)
        earlier = cron.previous(tick)
        assert earlier is not None and cron.next_after(earlier) == tick, (case, tick, earlier)
        checked += 1
