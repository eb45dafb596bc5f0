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

Only the standard library: a Formatter, and uvicorn's `log_config` (a dictConfig), which
uvicorn applies again in each process that `--workers N` starts.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from queuelog.settings import LOG_FORMATS as LOG_FORMATS  # re-exported: the worker takes them too

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Loggers whose INFO lines are noise for an operator (migrations at start, each HTTP request).
QUIET_LOGGERS = ("alembic", "httpx")
# A LogRecord's own attributes: whatever else a record carries came from `extra=`.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
    "color_message",  # uvicorn's coloured copy of the message
}
_FIRST_FIELDS = ("ts", "level", "logger", "message")


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


class JsonFormatter(logging.Formatter):
    """Each record as one JSON object on one line (the fields are in the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {}
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            client, method, path, http_version, status = record.args
            fields.update(client=client, method=method, path=path, http_version=http_version, status=status)
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES:
                fields[key] = value
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            fields["exception"] = record.exc_text
        if record.stack_info:
            fields["stack"] = self.formatStack(record.stack_info)
        return json_line(record.levelname.lower(), record.name, record.getMessage(), record.created, **fields)


def configure(log_format: str, stream: TextIO | None = None, level: int = logging.INFO) -> None:
    """The root logger's output in `log_format`: text on stderr (what `logging.basicConfig`
    gives), or JSON on stdout. Replaces the plain StreamHandlers it had (basicConfig's), not
    handlers of other kinds (an application's or a test's)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"the log format is one of {', '.join(LOG_FORMATS)}, not {log_format!r}")
    if log_format == "json":
        handler = logging.StreamHandler(stream or sys.stdout)
        handler.setFormatter(JsonFormatter())
    else:
        handler = logging.StreamHandler(stream or sys.stderr)
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        if type(old) is logging.StreamHandler:
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def uvicorn_log_config(log_format: str) -> dict[str, Any] | None:
    """uvicorn's `log_config` for `log_format`: None keeps uvicorn's own (text); for json,
    every logger, uvicorn's included, goes through one JSON handler on stdout, in every
    server process (uvicorn applies it in each). uvicorn sets its loggers' levels from
    `--log-level` afterwards."""
    if log_format != "json":
        return None
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
            **{name: {"level": "WARNING"} for name in QUIET_LOGGERS},
        },
    }
