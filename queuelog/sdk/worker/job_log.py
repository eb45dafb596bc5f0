"""Each finished job's JSON line: `ts`, `event`, `id`, `type`, `attempt`, `outcome`,
`duration_ms`, and for a failed attempt `error` (the exception's class and message, sanitised
as the server stores it), gathered as jobs finish and written a batch at a time."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import TextIO

from queuelog.sanitize import sanitize_error
from queuelog.sdk.worker.held import Held

log = logging.getLogger("queuelog.worker")
job_log = logging.getLogger("queuelog.worker.jobs")
JOB_LOGGER_JSON = json.dumps(job_log.name)
# Job outcomes where the worker's report did not settle the job (a warning in JSON logs).
UNSETTLED_OUTCOMES = frozenset({"lost", "refused", "unreported"})
# A failure's error in its line: cut as the server cuts what it stores, by default
# (QUEUELOG_MAX_ERROR_CHARS); the worker cannot know a server's own setting.
LOGGED_ERROR_CHARS = 2000


def timestamp() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def own_job_lines(stream: TextIO) -> bool:
    """Unless the application configured it, print job records as bare JSON lines on `stream`
    (not behind the root logger's text prefix), so log shippers can parse each line whole.
    True when it did (the worker then writes its lines to `stream` itself, a batch at a time)."""
    if job_log.handlers:
        return False
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    job_log.addHandler(handler)
    job_log.propagate = False
    return True


class JobLog:
    def __init__(self, job_types: list[str]) -> None:
        self._type_json = {name: json.dumps(name) for name in job_types}
        self._lines: list[str] = []
        self.stream: TextIO | None = None  # None: the lines go through `job_log`
        self.json_lines = False  # with level, logger and message (log format "json")

    def record(self, held: Held, status: str, now: float, ts: str, error: str | None = None) -> None:
        """The job's line, `status` its outcome, `now` (time.monotonic) when it finished;
        `error`: the failure the worker reported (sent to failJob), sanitised here as the
        server sanitises what it stores (sanitize.py), so the line says what the job says."""
        job_type = self._type_json.get(held.type) or json.dumps(held.type)
        duration = round((now - held.started) * 1000, 1)
        fields = (
            f'"event": "job", "id": {held.id_json}, "type": {job_type},'
            f' "attempt": {held.attempt}, "outcome": "{status}", "duration_ms": {duration!r}'
        )
        if error is not None:
            fields += f', "error": {json.dumps(sanitize_error(error, LOGGED_ERROR_CHARS))}'
        fields += "}"
        if self.json_lines:  # as logformat.JsonFormatter writes a record, with the job's fields
            level = "warning" if status in UNSETTLED_OUTCOMES else "info"
            message = json.dumps(f"job {held.id} {status}")
            self._lines.append(
                f'{{"ts": "{ts}", "level": "{level}", "logger": {JOB_LOGGER_JSON},'
                f' "message": {message}, {fields}'
            )
        else:
            self._lines.append(f'{{"ts": "{ts}", {fields}')

    def write(self) -> None:
        """Write the lines recorded since the last call: one write for the lot."""
        lines = self._lines
        if not lines:
            return
        self._lines = []
        if self.stream is None:
            for line in lines:
                job_log.info(line)
            return
        lines.append("")
        try:
            self.stream.write("\n".join(lines))
            self.stream.flush()
        except (OSError, ValueError) as exc:  # stderr closed: the jobs are reported all the same
            log.debug("job lines not written: %s", exc)
