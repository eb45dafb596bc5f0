"""Following a job until it ends (docs/python.md, "Steering and waiting"): `watch` and `wait`,
over the `jobUpdated` subscription, or by polling `job(id)` when no websocket can be had; and
`subscribe`, any subscription of the API over the server's websocket."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from queuelog.errors import job_not_found
from queuelog.sdk.session import Session
from queuelog.sdk.types import JOB_FIELDS, Job
from queuelog.sdk.websocket import WebSocketUnavailable
from queuelog.sdk.wire import Data

TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED"})
JOB_UPDATED = f"subscription($id: ID!) {{ jobUpdated(id: $id) {{ {JOB_FIELDS} }} }}"
POLL_FIRST, POLL_MAX = 0.05, 1.0  # seconds between polls, when polling: doubling up to the max


class WatchCalls(Session):
    async def subscribe(
        self, query: str, variables: dict[str, Any] | None = None
    ) -> AsyncGenerator[Data, None]:
        """Each result of a GraphQL subscription (`subscription { jobEvents { kind job { id } } }`)
        as its `data`, over one websocket of its own (graphql-transport-ws), until the server
        completes it; results are as `execute` returns them, and so are its errors: the
        server's refusal (BadInput, NotFound, Forbidden, ...) raises, by execute's rule.
        Leaving early (`break`, an exception, `aclose()`) closes the websocket.

        Raises WebSocketUnavailable (a ServerUnreachable) when no websocket can be opened or it
        closes under the reader, Unauthenticated for a key the server refuses.
        """
        async with self._open_socket() as socket:
            await socket.subscribe(query, variables)
            while (data := await socket.next()) is not None:
                yield data

    async def watch(self, id: str) -> AsyncGenerator[Job, None]:
        """The job as it is now, then again after each change, ending after its terminal state
        (COMPLETED, FAILED or CANCELLED): the `jobUpdated` subscription over the server's
        websocket. Changes that come faster than they are read merge into the newest; the
        terminal state always comes. Where no websocket can be opened (or it closes), the job
        is polled instead, which may skip more intermediate states.

        Raises NotFound (no such job, or not visible to this key), Unauthenticated,
        ServerUnreachable (polling, with no answer).
        """
        last: Job | None = None
        try:
            async with self._open_socket() as socket:
                await socket.subscribe(JOB_UPDATED, {"id": id})
                while (data := await socket.next()) is not None:
                    last = Job.from_graphql(data["jobUpdated"])
                    yield last
                    if last.status in TERMINAL:
                        return
                return  # completed by the server without a terminal state: the key lost sight of it
        except WebSocketUnavailable:
            pass
        async for job in self._poll(id, last):
            yield job

    async def wait(self, id: str, timeout: float | None = None) -> Job:
        """The job once it is terminal, whatever its status (COMPLETED, FAILED or CANCELLED:
        read `status`, `result`, `error`). `timeout`: seconds, None for no limit.

        Raises the builtin TimeoutError when the job is not terminal after `timeout` seconds,
        and what `watch` raises.
        """
        last: Job | None = None
        try:
            async with asyncio.timeout(timeout):
                async with contextlib.aclosing(self.watch(id)) as updates:
                    async for last in updates:
                        if last.status in TERMINAL:
                            return last
        except TimeoutError:
            status = last.status if last is not None else "unknown"
            raise TimeoutError(f"job {id} is not finished after {timeout} s (status {status})") from None
        raise job_not_found(id)  # the subscription ended before the end: the key no longer sees it

    async def _poll(self, id: str, last: Job | None) -> AsyncIterator[Job]:
        pause = POLL_FIRST
        while True:
            data = await self.execute(f"query($id: ID!) {{ job(id: $id) {{ {JOB_FIELDS} }} }}", {"id": id})
            if not data.get("job"):
                raise job_not_found(id)
            job = Job.from_graphql(data["job"])
            if job != last:
                yield job
                if job.status in TERMINAL:
                    return
                last, pause = job, POLL_FIRST
            await asyncio.sleep(pause)
            pause = min(POLL_MAX, pause * 2)
