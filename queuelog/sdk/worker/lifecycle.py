"""`Worker`: starts the units, runs until stopped, then drains.

Stopping (SIGTERM, SIGINT, `stop()`, or a refused key): the producer stops claiming (closing
the long poll in flight, so it claims nothing more), running handlers get `grace` seconds,
the rest are cancelled and failed as retryable, and `run()` returns once every job held has
been reported. A key the server refuses is a configuration error, not an outage to wait out:
UNAUTHENTICATED from any call, or FORBIDDEN on a claim; the worker then stops the same way
and `run()` raises `KeyRefused`. Network failures are retried with jittered back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Mapping
from typing import Any

from queuelog import logformat
from queuelog.errors import QueuelogError, Unauthenticated, echo
from queuelog.sdk.async_client import AsyncClient
from queuelog.sdk.worker.cancels import Cancels
from queuelog.sdk.worker.completer import Completer
from queuelog.sdk.worker.executor import Executor, TypeTimeouts
from queuelog.sdk.worker.heartbeat import Heartbeats
from queuelog.sdk.worker.held import HeldJobs
from queuelog.sdk.worker.job import Handler
from queuelog.sdk.worker.job_log import JobLog, own_job_lines
from queuelog.sdk.worker.producer import Producer
from queuelog.sdk.worker.progress import ProgressReports

FIRST_TYPE_TIMEOUTS_WAIT = 2.0  # at start, before the first claim, at most this long
# Hear of cancel requests over a websocket (cancels.py); off, only heartbeats tell (bench/).
LISTEN_FOR_CANCELS = True


class KeyRefused(QueuelogError):
    """The server refused the worker's key; raised by `Worker.run()` once it has stopped.

    `code` is the server's: UNAUTHENTICATED (the key is unknown, mistyped or revoked) or
    FORBIDDEN (the key lacks the WORKER role). `refusal` is the client error it came from.
    Retrying cannot help: the key, or the worker's configuration, must change.
    """

    def __init__(self, refusal: QueuelogError) -> None:
        if isinstance(refusal, Unauthenticated):
            why = "it is unknown, mistyped or revoked"
        else:
            why = "a worker needs a key with the WORKER role"
        super().__init__(f"the server refused this worker's key ({refusal.code}: {refusal.message}): {why}")
        self.code = refusal.code
        self.refusal = refusal


def _event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (uvicorn[standard] brings it), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


class Worker:
    def __init__(
        self,
        url: str,
        key: str | None = None,
        handlers: Mapping[str, Handler] | None = None,
        *,
        concurrency: int = 4,
        grace: float = 30.0,
        client: AsyncClient | None = None,
    ) -> None:
        """`key` defaults to $QUEUELOG_API_KEY (client.MissingKey with neither); `client`, when
        given, is used instead of one made from `url` and `key`."""
        if not handlers:
            raise ValueError("a worker needs at least one handler")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.handlers = dict(handlers)
        self.concurrency = concurrency
        self.grace = grace
        self._client = client or AsyncClient(url, key)
        types = list(self.handlers)
        self._stopping = asyncio.Event()
        self._refused: KeyRefused | None = None  # the server refused the key: run() raises it
        self._held = HeldJobs(concurrency)
        self._job_log = JobLog(types)
        self._completer = Completer(self._client, self._held, self._job_log, self._stopping, self._refuse_key)
        self._cancels = Cancels(self._client, self._held, self._refuse_key)
        self._progress = ProgressReports(self._client, self._refuse_key)
        self._heartbeats = Heartbeats(self._client, self._held, self._refuse_key, self._cancels.request)
        self._timeouts = TypeTimeouts(self._client, types, self._refuse_key)
        self._executor = Executor(
            self._client, self.handlers, self._held, self._completer, self._timeouts, self._progress
        )
        self._producer = Producer(
            self._client,
            types,
            self._held,
            self._executor,
            self._completer,
            self._heartbeats,
            self._stopping,
            self._refuse_key,
        )

    @property
    def active(self) -> int:
        """Handlers running now."""
        return self._held.active

    @property
    def max_active_seen(self) -> int:
        """The most handlers that ran at once."""
        return self._held.max_active_seen

    @property
    def processed(self) -> int:
        """Jobs finished (reported, or given up)."""
        return self._held.processed

    def stop(self) -> None:
        """Stop claiming; `run()` then drains and returns. Safe to call from a signal handler."""
        self._stopping.set()
        self._held.capacity.set()

    def run_forever(self, log_format: str = "text") -> None:
        """Run until SIGTERM or SIGINT (installs the handlers), then shut down gracefully.

        `log_format`: "text" writes each job's JSON line on stderr; "json" writes them on
        stdout, with `level`, `logger` and `message`, and, when the application has not
        configured logging, sends every other record there too as a JSON object.
        Raises KeyRefused (after stopping) when the server refuses the key.
        """
        if log_format not in logformat.LOG_FORMATS:
            formats = ", ".join(logformat.LOG_FORMATS)
            raise ValueError(f"log_format is one of {formats}, not {echo(log_format)}")
        self._job_log.json_lines = log_format == "json"
        stream = sys.stdout if self._job_log.json_lines else sys.stderr
        if self._job_log.json_lines and not logging.getLogger().handlers:
            logformat.configure("json")
        if own_job_lines(stream):
            self._job_log.stream = stream
        with asyncio.Runner(loop_factory=_event_loop_factory()) as runner:
            runner.run(self._run_with_signals())

    async def _run_with_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        await self.run()

    async def run(self) -> None:
        """Claim and run jobs until `stop()`; then drain (see the module docstring).

        Raises KeyRefused, once stopped, when the server refused the key."""
        self._progress.bind(asyncio.get_running_loop())
        helpers: list[asyncio.Task[Any]] = [
            asyncio.create_task(self._completer.flush()),
            asyncio.create_task(self._heartbeats.sweep()),
        ]
        if LISTEN_FOR_CANCELS:
            helpers.append(asyncio.create_task(self._cancels.listen(self._client)))
        try:
            # The types' timeouts first (briefly: the server applies them anyway), so that the
            # first jobs claimed get theirs.
            helpers.append(asyncio.create_task(self._timeouts.refresh()))
            first = [
                asyncio.create_task(self._timeouts.read.wait()),
                asyncio.create_task(self._stopping.wait()),
            ]
            await asyncio.wait(first, timeout=FIRST_TYPE_TIMEOUTS_WAIT, return_when=asyncio.FIRST_COMPLETED)
            for waiting in first:
                waiting.cancel()
            await self._producer.claim_until_stopped()
            why = " (the server refused this worker's key)" if self._refused is not None else ""
            await self._executor.drain(self.grace, why)
            if self._held.jobs:
                self._held.none_held.clear()
                await self._held.none_held.wait()
        finally:
            for task in helpers:
                task.cancel()
            self._completer.cancel()
            self._heartbeats.cancel()
            self._progress.cancel()
            for task in helpers:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._job_log.write()
            await self._client.aclose()
        if self._refused is not None:
            raise self._refused

    def _refuse_key(self, refusal: QueuelogError) -> None:
        """The server refused the key: stop, and have `run()` raise KeyRefused."""
        if self._refused is None:
            self._refused = KeyRefused(refusal)
        self.stop()
