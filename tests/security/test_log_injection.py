"""Log-line injection: client text that forges records in the server's log, or garbles it.

Attacked, through real `queuelog serve` processes (text log, text log with `--workers 2`, JSON
log; on SQLite and PostgreSQL): `cancelJobs` and `retryJobs` filters whose `type` (logged with
who ran them) carries a whole forged record after a newline (in the text format's shape and
in the JSON format's), a bare CR and CR LF, ESC with ANSI sequences that erase the line and
move the cursor, every other C0 control and DEL, every C1 control (NEL, the 8-bit CSI),
U+2028 and U+2029, bidirectional overrides, and 100 KB of text. In process: the formatters on
their own with arguments given as `%s`, `%r`, a mapping, or no arguments at all, uvicorn's
access and default formatters as `queuelog serve` configures them, and an exception whose text
forges a record inside its traceback.

Proven: each attack adds exactly the operation's own line to the log, which starts as every
record does; no line anywhere begins with the forged record; every character of every line
is printable (the value is escaped: `\\n`, `\\x1b`, `\\u2028`) and a value is cut at
MAX_LOGGED_VALUE characters; a JSON line parses, its message is printable too. In text, every
line after a record's first (its traceback) starts with whitespace.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Callable
from typing import Any

import pytest
from conftest import Server

from queuelog.logformat import (
    MAX_LOGGED_VALUE,
    JsonFormatter,
    TextFormatter,
    escape,
    escaping_formatter,
    uvicorn_log_config,
)

CANCEL = "mutation($f: JobFilter!) { cancelJobs(filter: $f) { count } }"
RETRY = "mutation($f: JobFilter!) { retryJobs(filter: $f) { count } }"
FORGED_TEXT = "2026-12-05 10:00:00,000 WARNING queuelog.app: key 'admin1' revoked"
FORGED_JSON = json.dumps(
    {
        "ts": "2026-12-05T10:00:00.000+00:00",
        "level": "warning",
        "logger": "queuelog.app",
        "message": "revoked",
    }
)
ATTACKS: dict[str, str] = {
    "newline": f"a)\n{FORGED_TEXT}",
    "newline-json": f"a)\n{FORGED_JSON}",
    "cr": f"a)\r{FORGED_TEXT}",
    "crlf": f"a)\r\n{FORGED_TEXT}",
    "ansi": f"a)\x1b[2K\x1b[1A\x1b[31m{FORGED_TEXT}\x1b[0m",
    "c0-and-del": "".join(chr(c) for c in range(1, 32)) + "\x7f",  # NUL is refused: not storable
    "c1": "".join(chr(c) for c in range(0x80, 0xA0)) + f"\x85{FORGED_TEXT}\x9b2J",
    "separators": f"a\u2028{FORGED_TEXT}\u2029{FORGED_TEXT}",
    "bidi": f"\u202e{FORGED_TEXT}\u2066\u2069\u200f",
    "100-kb": "y" * 100_000,
}
TEXT_RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO queuelog\.queue: ")
FORGED_STARTS = (FORGED_TEXT, FORGED_JSON, "{FORGED")
SERVERS: dict[str, dict[str, Any]] = {
    "text": {},
    "text-two-processes": {"workers": 2},
    "json": {"log_format": "json"},
}


def log_lines(server: Server) -> list[str]:
    """The server's log as it is on disk, split at newlines only (not at the other line
    boundaries that str.splitlines knows: those are what is being looked for)."""
    return server.log_path.read_bytes().decode("utf-8", errors="backslashreplace").split("\n")


@pytest.mark.parametrize("settings", SERVERS.values(), ids=SERVERS.keys())
def test_client_text_never_forges_or_garbles_a_log_line(
    start_server: Callable[..., Server], settings: dict[str, Any]
) -> None:
    server = start_server(**settings)
    as_json = settings.get("log_format") == "json"
    for name, value in ATTACKS.items():
        before = log_lines(server)
        for query in (CANCEL, RETRY):
            assert server.gql(query, {"f": {"type": value}}).ok(), name
        after = log_lines(server)
        assert after[: len(before) - 1] == before[:-1], f"{name}: earlier lines changed"
        added = [line for line in after[len(before) - 1 :] if line]
        assert len(added) == 2, (name, added)
        described = escape(f"type={value}")
        for line, verb in zip(
            added, ("cancelJobs by admin: 0 cancelled", "retryJobs by admin: 0 retried"), strict=True
        ):
            assert line.isprintable(), (name, line)
            if as_json:
                entry = json.loads(line)
                assert (entry["level"], entry["logger"]) == ("info", "queuelog.queue"), (name, line)
                assert entry["message"] == f"{verb} ({described})", (name, line)
                assert entry["message"].isprintable(), (name, line)
            else:
                assert TEXT_RECORD.match(line), (name, line)
                assert line.endswith(f": {verb} ({described})"), (name, line)
            assert len(line) < 2 * MAX_LOGGED_VALUE * 10, (name, len(line))
    lines = log_lines(server)
    assert not [line for line in lines if line.lstrip().startswith(FORGED_STARTS)], lines
    assert all(line.isprintable() for line in lines), [line for line in lines if not line.isprintable()]
    if not as_json:  # (each JSON line is checked above)
        assert sum("cancelJobs by admin" in line for line in lines) == len(ATTACKS)


# --- the formatters in process ------------------------------------------------------------------------------


ESCAPES = {
    "plain text stays": ("queue.example/é 日本 🙂", "queue.example/é 日本 🙂"),
    "newline": ("a\nb", "a\\nb"),
    "cr and tab": ("a\rb\tc", "a\\rb\\tc"),
    "esc": ("\x1b[31mred", "\\x1b[31mred"),
    "del and c1": ("\x7f\x85\x9b", "\\x7f\\x85\\x9b"),
    "separators": ("a\u2028b\u2029c", "a\\u2028b\\u2029c"),
    "bidi": ("\u202ea\u2066", "\\u202ea\\u2066"),
    "lone surrogate": ("\ud800", "\\ud800"),
    "no-break space": ("a\u00a0b", "a\\xa0b"),
    "astral non-character": ("\U000e0001", "\\U000e0001"),
    "backslashes are left": ("a\\nb", "a\\nb"),
}


@pytest.mark.parametrize(("raw", "escaped"), ESCAPES.values(), ids=ESCAPES.keys())
def test_escape_writes_each_unprintable_character_as_its_escape(raw: str, escaped: str) -> None:
    assert escape(raw) == escaped
    assert escape(escape(raw)) == escaped  # twice changes nothing more


def test_escape_cuts_long_values_and_says_by_how_much() -> None:
    value = "x" * (MAX_LOGGED_VALUE + 1234)
    assert escape(value) == "x" * MAX_LOGGED_VALUE + "...[1234 more characters]"
    assert escape("\n" * 10_000) == "\\n" * MAX_LOGGED_VALUE + "...[9700 more characters]"
    assert escape("x" * 5000, limit=None) == "x" * 5000


def record(message: str, args: Any, exc_info: Any = None, name: str = "queuelog.queue") -> logging.LogRecord:
    return logging.getLogger(name).makeRecord(name, logging.INFO, __file__, 1, message, args, exc_info)


EVIL = f"a)\n{FORGED_TEXT}\x1b[31m\r\u2028"


@pytest.mark.parametrize(
    ("message", "args", "expected"),
    [
        pytest.param(
            "by %s: %d cancelled (%s)", ("admin", 3, EVIL), f"by admin: 3 cancelled ({escape(EVIL)})", id="%s"
        ),
        pytest.param("schedule %r deleted", (EVIL,), f"schedule {escape(repr(EVIL))} deleted", id="%r"),
        pytest.param("%(who)s did it", ({"who": EVIL},), f"{escape(EVIL)} did it", id="mapping"),
        pytest.param(EVIL, None, escape(EVIL, None), id="no arguments"),
        pytest.param("x" * 5000, None, escape("x" * 5000, 2000), id="no arguments, long"),
    ],
)
def test_both_formats_escape_what_a_record_interpolates(message: str, args: Any, expected: str) -> None:
    text = TextFormatter().format(record(message, args))
    assert "\n" not in text and text.isprintable(), text
    assert text.endswith(f"INFO queuelog.queue: {expected}"), text
    line = JsonFormatter().format(record(message, args))
    assert "\n" not in line and json.loads(line)["message"] == expected, line


def test_a_traceback_that_quotes_a_client_forges_no_record() -> None:
    try:
        raise ValueError(f"bad type {EVIL}")
    except ValueError:
        failure = record("unexpected error: %s", (EVIL,), sys.exc_info())
    text = TextFormatter().format(failure)
    first, *rest = text.split("\n")
    assert first.endswith(f"unexpected error: {escape(EVIL)}") and rest, text
    assert all(line.startswith(" ") for line in rest if line), text  # none looks like a record
    assert all(line.isprintable() for line in rest), text
    assert rest[0] == "  Traceback (most recent call last):" and "ValueError: bad type a)" in rest[-2], text
    entry = json.loads(JsonFormatter().format(failure))
    assert entry["exception"].startswith("Traceback (most recent call last):")
    assert all(line.isprintable() for line in entry["exception"].split("\n")), entry["exception"]
    assert failure.msg == "unexpected error: %s" and failure.args == (EVIL,)  # the record is left as it is


def test_uvicorn_lines_are_escaped_as_queuelog_serve_configures_them() -> None:
    config = uvicorn_log_config("text")
    access = dict(config["formatters"]["access"])
    formatter = escaping_formatter(**{k: v for k, v in access.items() if k != "()"})
    line = formatter.format(
        record(
            '%s - "%s %s HTTP/%s" %d', ("127.0.0.1:5", "GET", f"/x{EVIL}", "1.1", 200), name="uvicorn.access"
        )
    )
    assert line.isprintable() and f"/x{escape(EVIL)}" in line and line.endswith(" 200 OK"), line
    default = dict(config["formatters"]["default"])
    formatter = escaping_formatter(**{k: v for k, v in default.items() if k != "()"})
    line = formatter.format(record("Invalid request %s", (EVIL,), name="uvicorn.error"))
    assert line.isprintable() and line.endswith(f"Invalid request {escape(EVIL)}"), line
    assert config["root"]["handlers"] == ["text"]  # queuelog's own loggers, in every process
    access_line = JsonFormatter().format(
        record('%s - "%s %s HTTP/%s" %d', ("c", "GET", f"/{EVIL}", "1.1", 404), name="uvicorn.access")
    )
    entry = json.loads(access_line)
    assert (entry["path"], entry["status"]) == (f"/{escape(EVIL)}", 404), entry
