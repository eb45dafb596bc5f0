"""Other servers' progress reports, for this server's jobUpdated subscribers (API.md section 12).

A stored report writes no event (operations/progress.py says why), so no feed carries it to
the other servers. Each server instead reads, every WATCH_SECONDS, the RUNNING jobs that its
jobUpdated subscribers follow, all in one read, and delivers each whose progress changed as
a PROGRESS event, as the feeds deliver other servers' events: a report reaches every
server's subscribers within a second. A server that no subscriber follows a RUNNING job on
reads nothing; one that does pays one read per WATCH_SECONDS, whatever the number of reports.

Whether a followed job is RUNNING comes from its last read and from the events every commit
publishes (this server's and, through the feeds, the others'), so a job that is claimed
after its subscriber came is followed from its CLAIMED event on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import datetime

from queuelog.model import EventKind, Job, JobEvent, JobStatus

WATCH_SECONDS = 0.5
log = logging.getLogger("queuelog.storage")


@dataclasses.dataclass(slots=True)
class _Followed:
    subscribers: int
    running: bool
    progress_at: datetime | None
    revision: int


class ProgressWatch:
    def __init__(
        self,
        read_jobs: Callable[[list[int]], Awaitable[list[Job]]],
        deliver: Callable[[Sequence[JobEvent]], None],
    ) -> None:
        self._read_jobs = read_jobs
        self._deliver = deliver
        self._followed: dict[int, _Followed] = {}
        self._task: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def following(self, job: Job) -> Iterator[None]:
        """Deliver the reports on `job` (as it was read for a subscriber) while the block runs."""
        followed = self._followed.get(job.id)
        if followed is None:
            followed = self._followed[job.id] = _Followed(0, False, None, -1)
            self._seen(followed, job)
        followed.subscribers += 1
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._watch())
        try:
            yield
        finally:
            followed.subscribers -= 1
            if not followed.subscribers:
                del self._followed[job.id]

    def on_events(self, events: Sequence[JobEvent]) -> None:
        """Every commit's events (this server's and the others'): which followed jobs run."""
        if not self._followed:
            return
        for event in events:
            followed = self._followed.get(event.job.id)
            if followed is not None:
                self._seen(followed, event.newest)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    @staticmethod
    def _seen(followed: _Followed, job: Job) -> None:
        if job.revision > followed.revision:
            followed.running = job.status is JobStatus.RUNNING
            followed.progress_at = job.progress_at
            followed.revision = job.revision

    async def _watch(self) -> None:
        while self._followed:
            await asyncio.sleep(WATCH_SECONDS)
            running = [job_id for job_id, followed in self._followed.items() if followed.running]
            if not running:
                continue
            try:
                jobs = await self._read_jobs(running)
            except Exception as exc:  # the database is unavailable for a moment: the next read
                log.warning("could not read the followed jobs' progress (%s); retrying", type(exc).__name__)
                continue
            reported = []
            for job in jobs:
                followed = self._followed.get(job.id)
                if followed is None or job.revision <= followed.revision:
                    continue
                if job.progress_at != followed.progress_at:
                    reported.append(JobEvent(EventKind.PROGRESS, job, job.updated_at))
                self._seen(followed, job)
            if reported:
                self._deliver(reported)
