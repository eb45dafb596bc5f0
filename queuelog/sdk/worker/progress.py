"""Progress reports: what handlers report (`job.report_progress`) goes to the server as
`reportProgress`, the latest value at most every PROGRESS_INTERVAL seconds per job, and the
last one before the attempt's outcome is reported.

A handler's call only stores the value on the job's `Reporting` and, when no send is
pending, wakes the loop (from a sync handler's thread: call_soon_threadsafe, once per
pending send, not once per report); it never waits for the server. Each job with reports
has at most one sender task, which sleeps out the interval, sends the newest value, and
ends once no newer one came. `then` runs a callback (the outcome's report) after the last
value has been sent, skipping what is left of the interval (the server holds a report that
comes too soon until its window ends, or until the attempt ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from queuelog.errors import Conflict, NotFound, QueuelogError, Unauthenticated
from queuelog.sdk.worker.held import Held
from queuelog.sdk.worker_calls import WorkerCalls

log = logging.getLogger("queuelog.worker")
PROGRESS_INTERVAL = 0.25  # 4 reports a second per job at most
REPORT_PROGRESS = (
    "mutation($id: ID!, $attempt: Int!, $progress: Float!, $message: String) {"
    " reportProgress(id: $id, attempt: $attempt, progress: $progress, message: $message) { id } }"
)


class Reporting:
    """One job's progress: the newest value not yet sent, and its sender."""

    __slots__ = ("latest", "woken", "sender", "sent_at", "sleeping", "final", "gone")

    def __init__(self) -> None:
        self.latest: tuple[float, str | None] | None = None
        self.woken = False  # the loop has been (or is being) told of a value to send
        self.sender: asyncio.Task[None] | None = None
        self.sent_at = -PROGRESS_INTERVAL
        self.sleeping = False  # the sender waits out the interval (and may be woken early)
        self.final = False  # the attempt has ended: reports after this are dropped
        self.gone = False  # the server refused a report: the job is no longer this worker's


class ProgressReports:
    def __init__(self, client: WorkerCalls, refuse: Callable[[QueuelogError], None]) -> None:
        self._client = client
        self._refuse = refuse
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def report(self, held: Held, fraction: float, message: str | None) -> None:
        """A handler's report (checked by JobContext), from any thread."""
        reporting: Reporting | None = held.progress
        if reporting is None:
            held.progress = reporting = Reporting()  # only this job's handler reports for it
        if reporting.final or reporting.gone:
            return
        reporting.latest = (fraction, message)
        if reporting.woken:
            return  # the pending send will take the newest value
        reporting.woken = True
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake(held)
        else:
            with contextlib.suppress(RuntimeError):  # the loop has closed: the worker has stopped
                loop.call_soon_threadsafe(self._wake, held)

    def pending(self, held: Held) -> bool:
        """Whether `then` has anything to wait for."""
        reporting: Reporting | None = held.progress
        return reporting is not None and (reporting.latest is not None or reporting.sender is not None)

    def then(self, held: Held, callback: Callable[[], None]) -> None:
        """Send the job's last report now, then call `callback`; later reports are dropped."""
        reporting: Reporting = held.progress
        reporting.final = True
        if reporting.sender is not None and reporting.sleeping:
            reporting.sender.cancel()  # woken early: it sends at once (see _send_newest)
        task = asyncio.ensure_future(self._last(held, reporting, callback))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel(self) -> None:
        """The worker has stopped: abandon the reports in flight."""
        for task in list(self._tasks):
            task.cancel()

    async def _last(self, held: Held, reporting: Reporting, callback: Callable[[], None]) -> None:
        try:
            if reporting.sender is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(reporting.sender)
            if reporting.latest is not None:
                await self._send(held, reporting)
        finally:
            callback()

    def _wake(self, held: Held) -> None:
        reporting: Reporting = held.progress
        if reporting.sender is None and not reporting.final:
            reporting.sender = task = asyncio.ensure_future(self._send_newest(held, reporting))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send_newest(self, held: Held, reporting: Reporting) -> None:
        try:
            while True:
                while (wait := reporting.sent_at + PROGRESS_INTERVAL - time.monotonic()) > 0:
                    if reporting.final:
                        break
                    reporting.sleeping = True
                    try:
                        await asyncio.sleep(wait)
                    except asyncio.CancelledError:
                        if not reporting.final:
                            raise  # the worker stopped
                        task = asyncio.current_task()
                        if task is not None:
                            task.uncancel()  # woken by `then`: what follows must not see a cancel
                    finally:
                        reporting.sleeping = False
                # Cleared before the value is taken: a report made after this wakes the loop
                # again (a harmless extra wake), never goes unsent.
                reporting.woken = False
                if reporting.latest is None:
                    return
                await self._send(held, reporting)
        finally:
            reporting.sender = None

    async def _send(self, held: Held, reporting: Reporting) -> None:
        value, reporting.latest = reporting.latest, None
        if value is None or reporting.gone:
            return
        reporting.sent_at = time.monotonic()
        fraction, message = value
        variables = {"id": held.id, "attempt": held.attempt, "progress": fraction, "message": message}
        try:
            await self._client.execute(REPORT_PROGRESS, variables)
        except (Conflict, NotFound) as exc:
            reporting.gone = True
            log.info("job %s: progress refused (%s); no more progress sent for it", held.id, exc)
        except Unauthenticated as exc:
            self._refuse(exc)
        except QueuelogError as exc:  # unreachable, a bad value: the next report may go through
            log.debug("job %s: progress not sent: %s", held.id, exc)
