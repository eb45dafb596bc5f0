"""Log output for `queuelog serve` and `queuelog worker`: `text` (the default) or `json`.

With `json`, every record is one JSON object on one line of stdout, for log shippers:

    {"ts": "2030-01-01T00:00:00.000+00:00", "level": "info", "logger": "uvicorn.error",
     "message": "Started server process [4242]"}

`ts` is the record's time in UTC (ISO 8601, milliseconds), `level` its level in lower case
(debug, info, warning, error, critical), `logger` the logger's name, `message` the message
with its arguments; then the record's extra fields (`logger.info(..., extra={"job_id": 7})`
gives `"job_id": 7`), uvicorn's access lines' `client`, `method`, `path`, `http_version` and
`status`, and `exception` (the traceback, as one string) for the records that carry one,
which the server's error policy keeps to bugs (schema/logging.py). A message or traceback
that spans several lines is still one line of output: JSON escapes its newlines.

Log lines quote what clients send (job types, filters, names, paths, error texts), so both
formats escape every value a record interpolates, in the formatter itself, whatever the call
site: a character that is not printable (newline, CR, ESC and the other C0 and C1 controls,
U+2028/U+2029, bidirectional overrides, lone surrogates) is written as a Python escape
(`\\n`, `\\x1b`, `\\u2028`), and a value is cut at MAX_LOGGED_VALUE characters (`escape`).
A record is then one line, or in text a first line whose traceback lines all start with
whitespace: a client can neither forge a record nor send a terminal's control sequences.

Only the standard library: Formatters, and uvicorn's `log_config` (a dictConfig), which
uvicorn applies again in each process that `--workers N` starts.
"""

from __future__ import annotations

import copy
import importlib
import json
import logging
import numbers
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

from queuelog.errors import echo
from queuelog.settings import LOG_FORMATS as LOG_FORMATS  # re-exported: the worker takes them too

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Loggers whose INFO lines are noise for an operator (migrations at start, each HTTP request).
QUIET_LOGGERS = ("alembic", "httpx")
# At most this many characters of one interpolated value reach a log line.
MAX_LOGGED_VALUE = 300
# A message logged without arguments (the whole of it may be a client's) is cut here.
MAX_LOGGED_MESSAGE = 2000
# Each line of a traceback is cut here (an exception's text may quote a client).
MAX_TRACEBACK_LINE = 1000
TRACEBACK_INDENT = "  "
# A LogRecord's own attributes: whatever else a record carries came from `extra=`.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",  # uvicorn's coloured copy of the message
}
_FIRST_FIELDS = ("ts", "level", "logger", "message")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape(text: str, limit: int | None = MAX_LOGGED_VALUE) -> str:
    """`text` fit for one log line: cut after `limit` characters (None: never), and every
    character that is not printable (`str.isprintable`: controls, line and paragraph
    separators, format characters such as bidirectional overrides, lone surrogates, spaces
    other than U+0020) written as its Python escape. Escaping twice changes nothing more."""
    cut = ""
    if limit is not None and len(text) > limit:
        cut = f"...[{len(text) - limit} more characters]"
        text = text[:limit]
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else _escaped_character(ch) for ch in text)
    return text + cut


def _escaped_character(ch: str) -> str:
    named = _NAMED_ESCAPES.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


class _Escaped:
    """A log argument whose rendering (`%s`, `%r`, an f-string) is escaped."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __str__(self) -> str:
        return escape(str(self.value))

    def __repr__(self) -> str:
        return escape(repr(self.value))

    def __format__(self, spec: str) -> str:
        return escape(format(self.value, spec))


def _escaped_argument(value: object) -> object:
    # Numbers render as digits, and `%d` needs a number.
    if isinstance(value, numbers.Number):
        return value
    return _Escaped(value)


def _escaped_arguments(args: Any) -> Any:
    if not args:
        return args
    if isinstance(args, Mapping):  # logger.info("%(name)s", {"name": ...})
        return {key: _escaped_argument(value) for key, value in args.items()}
    return tuple(_escaped_argument(value) for value in args)


def _escaped_lines(text: str, indent: str = "") -> str:
    """A multi-line text (a traceback) with each line escaped and, but for empty ones,
    indented by `indent`: no line of it can then pass for the start of a record."""
    lines = [escape(line, MAX_TRACEBACK_LINE) for line in text.split("\n")]
    return "\n".join(indent + line if line else line for line in lines)


class EscapingFormatter(logging.Formatter):
    """A Formatter that formats an escaped copy of each record: its arguments (or, when it has
    none, its message) escaped as `escape` says, its traceback line by line. The record
    itself is left as it is for other handlers."""

    traceback_indent = TRACEBACK_INDENT

    def format(self, record: logging.LogRecord) -> str:
        return super().format(self.escaped(record))

    def escaped(self, record: logging.LogRecord) -> logging.LogRecord:
        safe = logging.makeLogRecord(vars(record))
        safe.msg = escape(str(record.msg), None if record.args else MAX_LOGGED_MESSAGE)
        safe.args = _escaped_arguments(record.args)
        if record.exc_info or record.exc_text:
            text = self.formatException(record.exc_info) if record.exc_info else record.exc_text
            safe.exc_info, safe.exc_text = None, _escaped_lines(text or "", self.traceback_indent)
        if record.stack_info:
            safe.stack_info = _escaped_lines(record.stack_info, self.traceback_indent)
        return safe


class TextFormatter(EscapingFormatter):
    """`TEXT_FORMAT` lines, escaped."""

    def __init__(self, fmt: str = TEXT_FORMAT, **kwargs: Any) -> None:
        super().__init__(fmt, **kwargs)


def escaping_formatter(base: str, **kwargs: Any) -> logging.Formatter:
    """An instance of the Formatter class named `base` ("uvicorn.logging.AccessFormatter")
    that escapes as EscapingFormatter does (for dictConfig's "()")."""
    module, _, name = base.rpartition(".")
    formatter_class = getattr(importlib.import_module(module), name)
    escaping = type(f"Escaping{name}", (EscapingFormatter, formatter_class), {})
    formatter: logging.Formatter = escaping(**kwargs)
    return formatter


def timestamp(created: float) -> str:
    """A record's time as every JSON line gives it: UTC, ISO 8601, milliseconds."""
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")


def json_line(level: str, logger: str, message: str, created: float | None = None, **fields: Any) -> str:
    """One JSON log line (without its newline), for output written outside `logging`."""
    entry: dict[str, Any] = {
        "ts": timestamp(datetime.now(UTC).timestamp() if created is None else created),
        "level": level,
        "logger": logger,
        "message": message,
    }
    entry.update((k, v) for k, v in fields.items() if k not in _FIRST_FIELDS)
    return json.dumps(entry, default=str)


class JsonFormatter(EscapingFormatter):
    """Each record as one JSON object on one line (the fields are in the module docstring)."""

    traceback_indent = ""  # the traceback is a field of its own

    def format(self, record: logging.LogRecord) -> str:
        safe = self.escaped(record)
        fields: dict[str, Any] = {}
        if safe.name == "uvicorn.access" and isinstance(safe.args, tuple) and len(safe.args) == 5:
            client, method, path, http_version, status = safe.args
            fields.update(client=str(client), method=str(method), path=str(path))
            fields.update(http_version=str(http_version), status=status)
        for key, value in vars(safe).items():
            if key not in _RECORD_ATTRIBUTES:
                fields[key] = escape(value) if isinstance(value, str) else value
        if safe.exc_text:
            fields["exception"] = safe.exc_text
        if safe.stack_info:
            fields["stack"] = safe.stack_info
        return json_line(safe.levelname.lower(), safe.name, safe.getMessage(), safe.created, **fields)


def configure(log_format: str, stream: TextIO | None = None, level: int = logging.INFO) -> None:
    """The root logger's output in `log_format`: escaped text on stderr (the lines
    `logging.basicConfig` gives), or JSON on stdout. Replaces the plain StreamHandlers it had
    (basicConfig's), not handlers of other kinds (an application's or a test's)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"the log format is one of {', '.join(LOG_FORMATS)}, not {echo(log_format)}")
    handler = logging.StreamHandler(stream or (sys.stdout if log_format == "json" else sys.stderr))
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        if type(old) is logging.StreamHandler:
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def uvicorn_log_config(log_format: str) -> dict[str, Any]:
    """uvicorn's `log_config` for `log_format`, which uvicorn applies in every server process.

    json: every logger, uvicorn's included, goes through one JSON handler on stdout. text:
    uvicorn's own configuration with its formatters escaping, and the other loggers (the
    root's) in TEXT_FORMAT on stderr. uvicorn sets its loggers' levels from `--log-level`
    afterwards."""
    quiet = {name: {"level": "WARNING"} for name in QUIET_LOGGERS}
    if log_format != "json":
        from uvicorn.config import LOGGING_CONFIG

        config = copy.deepcopy(LOGGING_CONFIG)
        for formatter in config["formatters"].values():
            formatter["base"] = formatter.pop("()")
            formatter["()"] = f"{__name__}.escaping_formatter"
        config["formatters"]["text"] = {"()": f"{__name__}.TextFormatter"}
        config["handlers"]["text"] = {
            "class": "logging.StreamHandler",
            "formatter": "text",
            "stream": "ext://sys.stderr",
        }
        config["root"] = {"handlers": ["text"], "level": "INFO"}
        config["loggers"].update(quiet)
        return config
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        "handlers": {
            "json": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stdout"}
        },
        "root": {"handlers": ["json"], "level": "INFO"},
        "loggers": {
            "uvicorn": {"handlers": [], "level": "INFO", "propagate": True},
            "uvicorn.error": {"handlers": [], "level": "INFO", "propagate": True},
            "uvicorn.access": {"handlers": [], "level": "INFO", "propagate": True},
            **quiet,
        },
    }
