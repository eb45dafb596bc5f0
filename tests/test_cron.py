"""queuelog.cron: the contract's cron expressions, their ticks, and the time zone rules.

Real zoneinfo data throughout. Times are written as UTC ("Z") or as local wall-clock times
of the schedule's zone; `utc()` and `local()` build them.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
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


def test_every_second_for_an_hour_is_quick() -> None:
    cron = parse("* * * * * *", PARIS)
    began = time.perf_counter()
    found = cron.ticks_between(utc("2026-06-01 10:00:00"), utc("2026-06-01 11:00:00"), 10_000)
    elapsed = time.perf_counter() - began
    assert len(found) == 3600
    assert found[0] == utc("2026-06-01 10:00:01") and found[-1] == utc("2026-06-01 11:00:00")
    assert all(b - a == timedelta(seconds=1) for a, b in zip(found, found[1:], strict=False))
    assert elapsed < 2.0


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
