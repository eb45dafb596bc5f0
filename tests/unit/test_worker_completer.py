"""The worker's completer (queuelog/sdk/worker/completer.py) as a unit: the jobs' ends in,
the reports out, each job let go with one log line saying how its report went. The server
is played by the test (worker_units.ScriptedClient); tests/sdk/test_worker_batching.py and
tests/concurrency/test_lost_answers.py run the same code against real servers.

Proven: a batch holds at most COMPLETE_BATCH items and COMPLETE_BATCH_BYTES, and one attempt
of a job; completions queued together go out in one `completeJobs`; of the ids it rejects,
those the server has COMPLETED at the attempt held are logged "completed" (an earlier copy
applied), the others "lost"; a batch refused as too large is sent item by item, and only
the item refused alone is failed, for good; failures report the outcome's error, retry
and retryability, and are logged as the server's answer says; a refused key is passed on;
and what the producer takes to carry and gives back is reported by the flush loop, in order.
"""

from __future__ import annotations

import asyncio
import collections
import io
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from worker_units import ScriptedClient, claimed, job_with_status, until

from queuelog.errors import Conflict, PayloadTooLarge, QueuelogError, Unauthenticated
from queuelog.sdk.worker.completer import COMPLETE_BATCH, COMPLETE_BATCH_BYTES, Completer, completion_batch
from queuelog.sdk.worker.held import Held, HeldJobs
from queuelog.sdk.worker.job import JobContext
from queuelog.sdk.worker.job_log import JobLog
from queuelog.sdk.worker.outcomes import TIMED_OUT, Outcome, completion_item


def held_job(id: str, attempt: int = 1) -> Held:
    return Held(JobContext.from_graphql(claimed(id, attempt=attempt)), time.monotonic(), 100.0)


def item(held: Held, result: Any = None) -> bytes:
    return completion_item(held.id_json, held.attempt, result)


def test_a_batch_is_bounded_in_items_bytes_and_attempts_of_one_job() -> None:
    many = collections.deque((held_job(str(n)), b"x") for n in range(COMPLETE_BATCH + 5))
    assert len(completion_batch(many)) == COMPLETE_BATCH and len(many) == 5
    big = b"x" * (COMPLETE_BATCH_BYTES // 2)
    large = collections.deque([(held_job("1"), big), (held_job("2"), big), (held_job("3"), b"x")])
    assert [h.id for h, _ in completion_batch(large)] == ["1", "2"]
    assert [h.id for h, _ in completion_batch(large)] == ["3"]
    retried = collections.deque([(held_job("1", 1), b"a"), (held_job("2"), b"b"), (held_job("1", 2), b"c")])
    # The server answers which ids it rejected, not which attempts: a job's next attempt waits.
    assert [(h.id, h.attempt) for h, _ in completion_batch(retried)] == [("1", 1), ("2", 1)]
    assert [(h.id, h.attempt) for h, _ in completion_batch(retried)] == [("1", 2)]
    assert completion_batch(collections.deque()) == []


Scenario = Callable[[Completer, list[Held]], Awaitable[None]]


def complete(
    client: ScriptedClient, ids: list[str], scenario: Scenario
) -> tuple[dict[str, str], list[QueuelogError], HeldJobs]:
    """Hold `ids`, run the flush loop while `scenario` plays, until every job is let go; the
    outcome each job's line logs, and the refusals passed on."""

    async def main() -> tuple[dict[str, str], list[QueuelogError], HeldJobs]:
        held, stream, refused = HeldJobs(concurrency=len(ids)), io.StringIO(), []
        log = JobLog(["t"])
        log.stream = stream
        completer = Completer(client, held, log, asyncio.Event(), refused.append)
        jobs = [held_job(id) for id in ids]
        for job in jobs:
            held.take(job)
        flushing = asyncio.create_task(completer.flush())
        try:
            await scenario(completer, jobs)
            await until(lambda: not held.jobs, "every job to be let go")
        finally:
            flushing.cancel()
            completer.cancel()
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
        assert all(line["event"] == "job" and line["type"] == "t" for line in lines)
        return {line["id"]: line["outcome"] for line in lines}, refused, held

    return asyncio.run(main())


def test_completions_go_out_together_and_a_rejected_one_is_checked() -> None:
    client = ScriptedClient(
        {
            "complete_encoded": lambda items: ["2", "3"],
            "job_state": lambda id: {"2": ("COMPLETED", 1), "3": ("RUNNING", 2)}[id],
        }
    )

    async def scenario(completer: Completer, jobs: list[Held]) -> None:
        for job in jobs:
            completer.complete(job, item(job, {"n": job.id}))

    outcomes, refused, held = complete(client, ["1", "2", "3"], scenario)
    assert outcomes == {"1": "completed", "2": "completed", "3": "lost"}
    (sent,) = client.called("complete_encoded")
    assert [json.loads(i) for i in sent[0]] == [{"id": n, "attempt": 1, "result": {"n": n}} for n in "123"]
    assert sorted(args[0] for args in client.called("job_state")) == ["2", "3"]
    assert (held.processed, refused) == (3, [])


def test_a_batch_too_large_is_sent_item_by_item_and_only_the_large_one_fails() -> None:
    def complete_encoded(items: list[bytes]) -> list[str]:
        if any(b"huge" in i for i in items):
            raise PayloadTooLarge("request body too large")
        return []

    client = ScriptedClient(
        {"complete_encoded": complete_encoded, "fail": lambda id, *rest: job_with_status(id, "FAILED")}
    )

    async def scenario(completer: Completer, jobs: list[Held]) -> None:
        for job in jobs:
            completer.complete(job, item(job, "huge" if job.id == "2" else "small"))

    outcomes, _, _ = complete(client, ["1", "2", "3"], scenario)
    assert outcomes == {"1": "completed", "2": "failed", "3": "completed"}
    assert [len(args[0]) for args in client.called("complete_encoded")] == [3, 1, 1, 1]
    ((id, attempt, error, how),) = client.called("fail")
    assert (id, attempt, how) == ("2", 1, {"retryable": False, "retry_in_seconds": None})
    assert error == "result refused: request body too large"


def test_failures_report_their_outcome_and_are_logged_as_the_server_answers() -> None:
    answers = {"1": "PENDING", "2": "FAILED", "3": "FAILED"}

    def fail(id: str, attempt: int, error: str, how: dict[str, Any]) -> Any:
        if id in answers:
            return job_with_status(id, answers[id])
        raise Conflict("job is not RUNNING")

    client = ScriptedClient({"fail": fail})
    outcomes_given = {
        "1": Outcome("retrying", "Retry: busy", retry_in=5),
        "2": Outcome("retrying", "ValueError: bad"),
        "3": Outcome("discarded", "no recipient", retryable=False),
        "4": Outcome("retrying", "KeyError: 'x'"),
        "5": TIMED_OUT,
    }

    async def scenario(completer: Completer, jobs: list[Held]) -> None:
        for job in jobs:
            completer.fail(job, outcomes_given[job.id])

    outcomes, _, _ = complete(client, list(outcomes_given), scenario)
    # The server failed job 5 first, for the same reason: "timed out", not "lost".
    assert outcomes == {"1": "retrying", "2": "failed", "3": "discarded", "4": "lost", "5": "timed out"}
    sent = {args[0]: (args[2], args[3]) for args in client.called("fail")}
    assert sent["1"] == ("Retry: busy", {"retryable": True, "retry_in_seconds": 5})
    assert sent["3"] == ("no recipient", {"retryable": False, "retry_in_seconds": None})
    assert sent["5"] == ("timed out", {"retryable": True, "retry_in_seconds": None})


def test_a_refused_key_is_passed_on_and_the_jobs_logged_refused() -> None:
    def refuse(items: list[bytes]) -> list[str]:
        raise Unauthenticated("unknown key")

    client = ScriptedClient({"complete_encoded": refuse})

    async def scenario(completer: Completer, jobs: list[Held]) -> None:
        for job in jobs:
            completer.complete(job, item(job))

    outcomes, refused, _ = complete(client, ["1", "2"], scenario)
    assert outcomes == {"1": "refused", "2": "refused"}
    assert [type(r) for r in refused] == [Unauthenticated]


def test_what_the_producer_carries_and_gives_back_is_reported_in_order() -> None:
    client = ScriptedClient({"complete_encoded": lambda items: []})
    carried: list[list[str]] = []

    async def scenario(completer: Completer, jobs: list[Held]) -> None:
        assert await completer.carry(wait=False) == []  # nothing queued, none expected
        waiting = asyncio.create_task(completer.carry(wait=True))
        await asyncio.sleep(0)
        completer.complete(jobs[0], item(jobs[0]))  # while the producer waits for one
        batch = await waiting
        carried.append([held.id for held, _ in batch])
        for job in jobs[1:]:
            completer.complete(job, item(job))
        completer.give_back(batch)  # not sent after all: before the ones queued since

    outcomes, _, _ = complete(client, ["1", "2", "3"], scenario)
    assert carried == [["1"]]
    assert outcomes == dict.fromkeys("123", "completed")
    assert [[json.loads(i)["id"] for i in args[0]] for args in client.called("complete_encoded")] == [
        ["1", "2", "3"]
    ]
