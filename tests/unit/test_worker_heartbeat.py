"""The worker's heartbeats (queuelog/sdk/worker/heartbeat.py) as a unit, the server played by
the test; tests/sdk/test_worker_batching.py heartbeats a job past its lease on a real server.

Proven: the jobs of a claim are heartbeated a third of their lease apart (never more often
than MIN_HEARTBEAT_INTERVAL; the server's default lease when the claim does not say), and
the sweep comes often enough for that; a job is heartbeated only once due, with the attempt
it holds, and then not again before its interval; a job whose heartbeat is refused as not
its own (CONFLICT, NOT_FOUND) is never heartbeated again; an unknown key is passed on; a
heartbeat answered with `cancelRequested` hands that job to the cancel request (the fallback
when the worker's websocket is away), and no other job.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from worker_units import ScriptedClient, claimed, job_with_status, until

from queuelog.errors import Conflict, QueuelogError, Unauthenticated
from queuelog.sdk.worker.heartbeat import DEFAULT_LEASE_SECONDS, MIN_HEARTBEAT_INTERVAL, Heartbeats
from queuelog.sdk.worker.held import Held, HeldJobs
from queuelog.sdk.worker.job import JobContext


def test_a_claims_jobs_are_heartbeated_a_third_of_their_lease_apart() -> None:
    heartbeats = Heartbeats(ScriptedClient(), HeldJobs(1), lambda refusal: None, lambda job: None)
    at = datetime(2030, 1, 1, tzinfo=UTC)
    job = claimed("1", claimed_at=at)
    assert heartbeats.interval(job, at) == 100.0  # worker_units.LEASE is 300 s
    short = {**job, "leaseExpiresAt": (at + timedelta(seconds=0.3)).isoformat()}
    assert heartbeats.interval(short, at) == MIN_HEARTBEAT_INTERVAL
    assert heartbeats.interval({**job, "leaseExpiresAt": None}, at) == DEFAULT_LEASE_SECONDS / 3
    assert heartbeats.interval(job, None) == DEFAULT_LEASE_SECONDS / 3


def test_only_due_jobs_are_heartbeated_and_a_lost_lease_stops_them() -> None:
    def heartbeat(id: str, attempt: int) -> object:
        if id == "2":
            raise Conflict("job 2 is not RUNNING")
        if id == "4":
            raise Unauthenticated("revoked key")
        return replace(job_with_status(id, "RUNNING"), cancel_requested=id == "1")

    client = ScriptedClient({"heartbeat": heartbeat})
    refused: list[QueuelogError] = []
    cancel_requested: list[str] = []

    async def main() -> dict[str, Held]:
        held = HeldJobs(4)
        heartbeats = Heartbeats(client, held, refused.append, lambda job: cancel_requested.append(job.id))
        now = time.monotonic()
        at = datetime(2030, 1, 1, tzinfo=UTC)
        heartbeats.interval({**claimed("0"), "leaseExpiresAt": (at + timedelta(seconds=0.6)).isoformat()}, at)
        jobs = {}
        for id, attempt, due in (("1", 3, True), ("2", 1, True), ("3", 1, False), ("4", 1, True)):
            job = jobs[id] = Held(JobContext.from_graphql(claimed(id, attempt=attempt)), now, 100.0)
            job.next_beat = now if due else now + 100
            held.take(job)
        held.taken()
        sweeping = asyncio.create_task(heartbeats.sweep())
        try:
            await until(lambda: len(client.calls) == 3, "the three heartbeats due")
            await until(lambda: all(job.beat is None for job in jobs.values()), "their answers")
            await asyncio.sleep(0.2)  # several sweeps: none is due again
        finally:
            sweeping.cancel()
            heartbeats.cancel()
        return jobs

    jobs = asyncio.run(main())
    assert sorted(client.called("heartbeat")) == [("1", 3), ("2", 1), ("4", 1)]
    assert jobs["1"].next_beat > time.monotonic() + 50  # its interval after the beat
    assert jobs["2"].next_beat == math.inf and jobs["4"].next_beat == math.inf
    assert [type(r) for r in refused] == [Unauthenticated]
    assert cancel_requested == ["1"]
