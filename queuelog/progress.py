"""Progress reports (API.md section 12): a server stores at most one per job per WINDOW_SECONDS.

A report on a job that this server has not stored one for in the last WINDOW_SECONDS is
stored at once, as a heartbeat is written (storage/operations/progress.py), and opens the
job's window. One that comes sooner is checked (NOT_FOUND or CONFLICT as a heartbeat's
refusal), answered with the job as it will be, and held: the latest held report is stored
when the window ends, which opens the next window, or before the attempt ends through this
server (`take_held`: the holder's completeJob, failJob...), whichever comes first. So the
last report of an attempt is stored, and delivered before the attempt's end. A handler that
reports 10 times a second costs 4 writes a second at most.

A held report is checked against the job as the window's last store or read found it, as
long as no event of the job has come since (from this server or another: `on_events`);
otherwise the job is read. A report whose attempt ended through another server is thus
refused once that end's event has arrived (NOTIFY, or the event tail: milliseconds to about
50 ms); one that comes before is answered, and stored `late` as below.

Held reports are stored `late`: on the job whatever its state, as long as that attempt is
its last claim. One held while the attempt ended elsewhere (through another server, or by a
timeout) is thus still stored on it, though after its end; a new claim drops it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence

from queuelog.model import EventKind, Job, JobEvent, JobStatus, ProgressReport
from queuelog.storage.operations.running import check_holder
from queuelog.storage.repository import Repository

WINDOW_SECONDS = 0.25
log = logging.getLogger("queuelog.queue")


@dataclasses.dataclass(slots=True)
class _Window:
    ends: float  # the event loop's time
    held: ProgressReport | None = None
    # Set while a report is held: it stores the report when the window ends.
    timer: asyncio.TimerHandle | None = None
    # The job as the window's store or read last found it (RUNNING), while no event of it
    # has come since; `changes` counts those events.
    job: Job | None = None
    changes: int = 0


class ProgressWindows:
    def __init__(self, repository: Repository, lease_seconds: int) -> None:
        self._repository = repository
        self._lease_seconds = lease_seconds
        self._windows: dict[int, _Window] = {}
        self._storing: set[asyncio.Task[None]] = set()
        self._next_sweep = 0.0

    async def report(self, report: ProgressReport, read_job: Callable[[], Awaitable[Job | None]]) -> Job:
        """Store or hold `report`; the job as it is once the report applies. `read_job`
        reads the job as it is now (to check a held report, when the window does not know it)."""
        window = self._windows.get(report.job_id)
        if window is None or (window.held is None and asyncio.get_running_loop().time() >= window.ends):
            window = self._open(report.job_id)
            try:
                job = await self._repository.report_progress(report, self._lease_seconds)
            except BaseException:
                self._close_if_empty(report.job_id)
                raise
            _remember(window, job, changes=0)
            return job
        held = dataclasses.replace(report, at=self._repository.now())
        known = window.job
        if known is None or known.worker_id != report.worker or known.attempt != report.attempt:
            changes = window.changes
            known = check_holder(await read_job(), report.job_id, report.worker, report.attempt)
            if self._windows.get(report.job_id) is not window:  # it ended meanwhile: store this one
                return await self.report(report, read_job)
            _remember(window, known, changes)
        window.held = held
        if window.timer is None:
            window.timer = asyncio.get_running_loop().call_at(window.ends, self._ended, report.job_id)
        return dataclasses.replace(
            known, progress=held.progress, progress_message=held.message, progress_at=held.at
        )

    @property
    def remembered(self) -> int:
        """How many jobs' windows this server keeps (those ended are dropped once a second)."""
        return len(self._windows)

    def on_events(self, events: Sequence[JobEvent]) -> None:
        """Committed events, of this server or another: a job that changed is read again by
        its next held report (its attempt may have ended)."""
        if not self._windows:
            return
        for event in events:
            if event.kind is not EventKind.PROGRESS:
                window = self._windows.get(event.job.id)
                if window is not None:
                    window.job = None
                    window.changes += 1

    def take_held(self, job_ids: Iterable[int]) -> list[ProgressReport]:
        """The reports held for these jobs, which are no longer held: the caller stores
        them (`store_held`) before it ends their attempts."""
        if not self._windows:
            return []
        taken = []
        for job_id in job_ids:
            window = self._windows.get(job_id)
            if window is not None and window.held is not None:
                taken.append(window.held)
                window.held = None
        return taken

    async def store_held(self, reports: Sequence[ProgressReport]) -> list[Job]:
        """Store reports that were held, in one write; the jobs they were stored on. A
        failure is logged, not raised: the attempt's end that follows does not depend on them."""
        try:
            return await self._repository.report_progress_late(reports, self._lease_seconds)
        except Exception as exc:
            log.warning("%d held progress report(s) not stored: %s", len(reports), exc)
            return []

    async def close(self) -> None:
        """Store every report still held (the server is stopping)."""
        held = []
        for window in self._windows.values():
            if window.timer is not None:
                window.timer.cancel()
            if window.held is not None:
                held.append(window.held)
        self._windows.clear()
        if held:
            await self.store_held(held)
        if self._storing:
            await asyncio.gather(*self._storing, return_exceptions=True)

    def _open(self, job_id: int) -> _Window:
        now = asyncio.get_running_loop().time()
        if now >= self._next_sweep:  # the windows of jobs that stopped reporting go, once a second
            self._next_sweep = now + 1.0
            ended = [i for i, w in self._windows.items() if w.held is None and w.ends <= now]
            for ended_id in ended:
                del self._windows[ended_id]
        window = self._windows[job_id] = _Window(now + WINDOW_SECONDS)
        return window

    def _close_if_empty(self, job_id: int) -> None:
        window = self._windows.get(job_id)
        if window is not None and window.held is None:
            del self._windows[job_id]

    def _ended(self, job_id: int) -> None:
        window = self._windows.pop(job_id, None)
        if window is None or window.held is None:
            return
        following = self._open(job_id)  # the store below opens the next window
        task = asyncio.get_running_loop().create_task(self._store_at_end(window.held, following))
        self._storing.add(task)
        task.add_done_callback(self._storing.discard)

    async def _store_at_end(self, held: ProgressReport, following: _Window) -> None:
        """Store the report held when its window ended; the next window knows the job as
        stored (its held reports need no read)."""
        for job in await self.store_held([held]):
            _remember(following, job, changes=0)


def _remember(window: _Window, job: Job, changes: int) -> None:
    """Keep `job` as the window's, unless an event of it came while it was stored or read."""
    if window.changes == changes and job.status is JobStatus.RUNNING:
        window.job = job
