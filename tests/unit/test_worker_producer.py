"""The worker's producer (queuelog/sdk/worker/producer.py) as a unit, the server played by the
test; tests/sdk/test_worker_batching.py and tests/concurrency/test_lost_answers.py run it against real
servers, whose claims, long polls and lost answers it is made for.

Proven: a claim asks for the free slots, for the handled types, long-polling; a claim whose
answer is lost is not sent again before the producer has listed the RUNNING jobs held under
its name and taken over, as if just claimed and heartbeated at once, those it does not hold,
of a type it handles, claimed after its newest answered claim, newest first, as many as it
has room for; and once stopped it claims nothing more.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from worker_units import ScriptedClient, claimed, job_with_status, until

from queuelog.sdk.wire import ServerUnreachable
from queuelog.sdk.worker.completer import Completer
from queuelog.sdk.worker.executor import Executor, TypeTimeouts
from queuelog.sdk.worker.heartbeat import Heartbeats
from queuelog.sdk.worker.held import HeldJobs
from queuelog.sdk.worker.job import JobContext
from queuelog.sdk.worker.job_log import JobLog
from queuelog.sdk.worker.producer import CLAIM_FIELDS, CLAIM_WAIT_SECONDS, Producer
from queuelog.sdk.worker.progress import ProgressReports

T0 = datetime(2030, 1, 1, tzinfo=UTC)


class ClaimingClient(ScriptedClient):
    async def claim_data(self, limit: int, fields: str, **how: Any) -> list[dict[str, Any]]:
        return self._answer("claim_data", limit, fields, how)


def test_a_lost_claims_jobs_are_taken_over_before_the_next_claim() -> None:
    def later(seconds: int) -> datetime:
        return T0 + timedelta(seconds=seconds)

    claims = iter(
        [
            lambda: [claimed("1", claimed_at=T0)],
            lambda: (_ for _ in ()).throw(ServerUnreachable("ReadTimeout: the answer was lost")),
        ]
    )
    running = [
        claimed("1", claimed_at=T0),  # held already
        claimed("2", claimed_at=later(1)),
        claimed("3", "other", claimed_at=later(4)),  # not a type this worker handles
        claimed("4", claimed_at=T0 - timedelta(seconds=1)),  # before the newest answered claim
        claimed("5", claimed_at=later(3)),
        claimed("6", claimed_at=later(2)),
    ]
    client = ClaimingClient(
        {
            "claim_data": lambda limit, fields, how: next(claims)(),
            "running_data": lambda fields: running,
            "fail": lambda id, *rest: job_with_status(id, "PENDING"),  # stopped: failed as retryable
        }
    )
    started: list[str] = []

    async def main() -> dict[str, bool]:
        held, stopping = HeldJobs(concurrency=3), asyncio.Event()
        gate = asyncio.Event()

        async def handler(job: JobContext) -> None:
            started.append(job.id)
            await gate.wait()

        completer = Completer(client, held, JobLog(["t"]), stopping, lambda refusal: None)
        timeouts = TypeTimeouts(client, ["t"], lambda refusal: None)
        progress = ProgressReports(client, lambda refusal: None)
        executor = Executor(client, {"t": handler}, held, completer, timeouts, progress)
        heartbeats = Heartbeats(client, held, lambda refusal: None, lambda job: None)
        producer = Producer(client, ["t"], held, executor, completer, heartbeats, stopping, lambda r: None)
        claiming = asyncio.create_task(producer.claim_until_stopped())
        await until(lambda: len(started) == 3, "the claimed job and two taken over")
        beat_now = {h.id: h.next_beat <= h.started for h in held.jobs}
        stopping.set()
        held.capacity.set()
        await asyncio.wait_for(claiming, 10)
        await executor.drain(0)
        completer.cancel()
        return beat_now

    beat_now = asyncio.run(main())
    # Room for two more: of the three the lost claim may have claimed, the two newest.
    assert started == ["1", "5", "6"]
    (first, lost) = client.called("claim_data")
    assert first == (3, CLAIM_FIELDS, {"types": ["t"], "wait_seconds": CLAIM_WAIT_SECONDS})
    assert lost[0] == 2  # after the first job started
    calls = [name for name, _ in client.calls if name != "fail"]
    assert calls == ["claim_data", "claim_data", "running_data"]  # none after the stop
    assert beat_now == {"1": False, "5": True, "6": True}  # their leases run: heartbeat at once
