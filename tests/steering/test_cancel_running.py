"""Cancelling a RUNNING job (API.md section 12, issue 33 item 1), on real servers and databases.

Every test runs on SQLite and on PostgreSQL; those with two servers run two `queuelog serve`
processes on one database (one SQLite file, or one PostgreSQL database, as concurrency/test_scale_out.py
does). Time only bounds waits (generous deadlines); it never decides a pass.

Proven here:
- cancelJob on a RUNNING job answers at once with the job still RUNNING and `cancelRequested`;
  a repeat changes nothing and answers the job; the holder's next heartbeat answer carries
  `cancelRequested: true`; its failJob (retryable, retries left, or not retryable) ends the job
  CANCELLED with error `cancelled while running`, its `workerId` kept, no retry; its later
  calls get CONFLICT; the job has one CANCEL_REQUESTED and one CANCELLED event; every key's
  counts follow; retryJob by an ADMIN runs it again with the request gone;
- a holder that ignores the request is ended when the grace (`--cancel-grace-seconds`) is up,
  never before; one whose lease expires is ended by the expiry, and one whose timeout comes
  sooner than the grace keeps that timeout and is ended by it: CANCELLED each, never retried,
  never claimed again (a lease expiry without a request retries as before);
- a completion that arrives first completes the job, which the grace then leaves alone;
- `cancelJobs(includeRunning: true)` asks the matching RUNNING jobs with no request yet,
  counted, chunk after chunk until `more` is false, and counts none twice; a PRODUCER only its
  own; without it RUNNING jobs are left alone;
- a PRODUCER cancelling another's RUNNING job gets NOT_FOUND, a WORKER (its holder too) and
  a VIEWER get FORBIDDEN, and nothing changes;
- a job that ends CANCELLED this way cancels its dependents, downstream too;
- two servers: a subscriber on the other server hears CANCEL_REQUESTED, then CANCELLED
  (jobEvents), and the holder's jobUpdated goes RUNNING, RUNNING with the request, CANCELLED
  and ends;
- races, 12 workers over two servers: cancels (single and bulk) against completions,
  failures, lease expiries and the grace. Each job ends as its race allows, in exactly one
  terminal state with one terminal event, no job asked to stop is retried or claimed again,
  and every key's queueStats equals the table;
- a kill -9 of the server that took the cancel, before the holder heard of it: the other
  server ends the job CANCELLED once the grace is up.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from concurrency.test_scale_out import Cluster, cluster_starter, graphql, run, until_live
from conftest import Databases, GraphQLResponse, Server, serving, stored_time
from socket_kit import open_socket

# The hasty server's grace: long enough that a test's next request comes well before it on a
# busy machine, short enough to wait for.
GRACE = 3
RACE_GRACE = 1  # the races' (their outcomes allow either end)
DEADLINE = 30.0  # for what takes a second or two: a grace, a lease, a sweep
RACE_DEADLINE = 150.0
TERMINAL = ("completed", "failed", "cancelled")
WHILE_RUNNING = "cancelled while running"

JOB = "id type status attempt retryCount workerId cancelRequested finishedAt updatedAt result"
ENQUEUE = f"mutation($input: EnqueueJobInput!) {{ enqueueJob(input: $input) {{ job {{ {JOB} }} }} }}"
CLAIM = f"""mutation($types: [String!], $lease: Int) {{
  claimJobs(limit: 100, types: $types, leaseSeconds: $lease) {{ {JOB} payload }} }}"""
CLAIM_ONE = f"""mutation($types: [String!], $lease: Int, $wait: Int) {{
  claimJob(types: $types, leaseSeconds: $lease, waitSeconds: $wait) {{ {JOB} payload }} }}"""
HEARTBEAT = f"""mutation($id: ID!, $attempt: Int, $lease: Int) {{
  heartbeatJob(id: $id, attempt: $attempt, leaseSeconds: $lease) {{ {JOB} }} }}"""
COMPLETE = f"""mutation($id: ID!, $attempt: Int) {{
  completeJob(id: $id, attempt: $attempt, result: {{done: true}}) {{ {JOB} }} }}"""
COMPLETE_MANY = f"""mutation($items: [CompleteJobInput!]!) {{
  completeJobs(items: $items) {{ completed {{ {JOB} }} rejected }} }}"""
FAIL = f"""mutation($id: ID!, $attempt: Int, $retryable: Boolean!, $in: Int) {{
  failJob(id: $id, attempt: $attempt, error: "stopped", retryable: $retryable, retryInSeconds: $in) {{
    {JOB} }} }}"""
CANCEL = f"mutation($id: ID!) {{ cancelJob(id: $id) {{ {JOB} }} }}"
CANCEL_JOBS = """mutation($filter: JobFilter!, $limit: Int!, $running: Boolean!) {
  cancelJobs(filter: $filter, limit: $limit, includeRunning: $running) { count more } }"""
RETRY = f"mutation($id: ID!) {{ retryJob(id: $id) {{ {JOB} }} }}"
READ = f"query($id: ID!) {{ job(id: $id) {{ {JOB} error events(last: 100) {{ kind status }} }} }}"
STATS = "{ queueStats { counts { pending running completed failed cancelled } } }"
JOB_EVENTS = "subscription { jobEvents { kind job { id status cancelRequested } } }"
JOB_UPDATED = "subscription($id: ID!) { jobUpdated(id: $id) { id status cancelRequested workerId } }"


# --- servers ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def patient(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A grace long enough never to end a test's job: only the holder, a lease or a timeout do."""
    with serving(backend, tmp_path_factory, cancel_grace_seconds=3600) as running:
        yield running


@pytest.fixture(scope="module")
def hasty(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, cancel_grace_seconds=GRACE) as running:
        yield running


@pytest.fixture
def start_cluster(
    databases: Databases, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Cluster]]:
    """start_cluster(count, **serve_flags): servers on one fresh database of this backend."""
    yield from cluster_starter(databases.fresh(), tmp_path_factory)


# --- one job at a time ------------------------------------------------------------------------


class Keys:
    """A fresh producer, worker and viewer on `server` (so that their counts start at 0)."""

    def __init__(self, server: Server, unique: Callable[[str], str]) -> None:
        self.server = server
        self.worker_name = unique("worker")
        self.producer = server.make_key(unique("producer"), "producer")
        self.other_producer = server.make_key(unique("producer"), "producer")
        self.worker = server.make_key(self.worker_name, "worker")
        self.viewer = server.make_key(unique("viewer"), "viewer")

    def gql(self, query: str, variables: dict[str, Any] | None = None, key: str | None = None) -> Any:
        return self.server.gql(query, variables, key=key).ok()

    def enqueue(self, job_type: str = "email", key: str | None = None, **fields: Any) -> str:
        job_input = {"type": job_type, "maxRetries": 3, **fields}
        data = self.gql(ENQUEUE, {"input": job_input}, key=key or self.producer)
        return str(data["enqueueJob"]["job"]["id"])

    def claim(
        self, job_ids: list[str], job_type: str = "email", lease: int | None = None
    ) -> list[dict[str, Any]]:
        """Claim exactly these jobs (nothing else of the type is due on the module's server)."""
        jobs = self.gql(CLAIM, {"types": [job_type], "lease": lease}, key=self.worker)["claimJobs"]
        assert sorted(job["id"] for job in jobs) == sorted(job_ids), jobs
        return jobs

    def running(self, job_type: str = "email", lease: int | None = None, **fields: Any) -> str:
        job_id = self.enqueue(job_type, **fields)
        self.claim([job_id], job_type, lease)
        return job_id

    def cancel(self, job_id: str, key: str | None = None) -> dict[str, Any]:
        return self.gql(CANCEL, {"id": job_id}, key=key or self.producer)["cancelJob"]

    def heartbeat(self, job_id: str, attempt: int = 1) -> GraphQLResponse:
        return self.server.gql(HEARTBEAT, {"id": job_id, "attempt": attempt}, key=self.worker)

    def read(self, job_id: str) -> dict[str, Any]:
        return self.gql(READ, {"id": job_id})["job"]

    def stats(self, key: str) -> dict[str, int]:
        return self.gql(STATS, key=key)["queueStats"]["counts"]

    def until_finished(self, job_id: str, beat: bool = False) -> dict[str, Any]:
        """The job once it has left RUNNING (heartbeating meanwhile, when `beat`)."""
        end = time.monotonic() + DEADLINE
        while True:
            job = self.read(job_id)
            if job["status"] != "RUNNING":
                return job
            if time.monotonic() > end:
                pytest.fail(f"job {job_id} still RUNNING after {DEADLINE:.0f} s: {job}")
            if beat:
                self.heartbeat(job_id)
            time.sleep(0.2)


def kinds(job: dict[str, Any]) -> list[str]:
    return [event["kind"] for event in job["events"]]


def cancel_times(server: Server, job_id: str) -> tuple[Any, Any, Any]:
    """(cancel_requested_at, timeout_at, finished_at) as stored."""
    ((requested, timeout, finished),) = server.sql(
        "SELECT cancel_requested_at, timeout_at, finished_at FROM jobs WHERE id = :id", id=int(job_id)
    )
    return stored_time(requested), stored_time(timeout), stored_time(finished)


@pytest.mark.parametrize("retryable", [True, False], ids=["retryable", "final"])
def test_the_holder_hears_the_request_and_its_failure_ends_the_job_cancelled(
    patient: Server, unique: Callable[[str], str], retryable: bool
) -> None:
    keys = Keys(patient, unique)
    job_id = keys.running()

    asked = keys.cancel(job_id)
    assert asked["status"] == "RUNNING" and asked["cancelRequested"] is True
    assert asked["workerId"] == keys.worker_name and asked["finishedAt"] is None
    again = keys.cancel(job_id, key=patient.admin_key)
    assert again == asked, "a repeated cancelJob changes nothing and answers the job"
    assert kinds(keys.read(job_id)) == ["ENQUEUED", "CLAIMED", "CANCEL_REQUESTED"]

    beat = keys.heartbeat(job_id).ok()["heartbeatJob"]
    assert beat["status"] == "RUNNING" and beat["cancelRequested"] is True
    variables = {"id": job_id, "attempt": 1, "retryable": retryable, "in": 0}
    ended = keys.gql(FAIL, variables, key=keys.worker)["failJob"]
    assert ended["status"] == "CANCELLED" and ended["retryCount"] == 0 and ended["attempt"] == 1
    assert ended["workerId"] == keys.worker_name and ended["finishedAt"] is not None

    job = keys.read(job_id)
    assert job["error"] == WHILE_RUNNING
    assert kinds(job) == ["ENQUEUED", "CLAIMED", "CANCEL_REQUESTED", "CANCELLED"]
    for late in (
        keys.heartbeat(job_id),
        patient.gql(COMPLETE, {"id": job_id, "attempt": 1}, key=keys.worker),
        patient.gql(FAIL, variables, key=keys.worker),
    ):
        assert late.codes == ["CONFLICT"], late.body
    assert keys.cancel(job_id) == {**ended, "updatedAt": job["updatedAt"]}, "asked again once ended: the job"
    assert keys.read(job_id) == job, "nothing changed"
    cancelled = {"pending": 0, "running": 0, "completed": 0, "failed": 0, "cancelled": 1}
    assert keys.stats(keys.worker) == keys.stats(keys.producer) == cancelled

    retried = keys.gql(RETRY, {"id": job_id})["retryJob"]
    assert (
        retried["status"] == "PENDING" and retried["cancelRequested"] is False and retried["workerId"] is None
    )
    (claimed,) = keys.claim([job_id])
    assert claimed["attempt"] == 2 and claimed["cancelRequested"] is False
    assert keys.heartbeat(job_id, 2).ok()["heartbeatJob"]["cancelRequested"] is False
    keys.gql(COMPLETE, {"id": job_id, "attempt": 2}, key=keys.worker)


def test_a_holder_that_ignores_the_request_is_ended_when_the_grace_is_up(
    hasty: Server, unique: Callable[[str], str]
) -> None:
    keys = Keys(hasty, unique)
    job_id = keys.running()
    keys.cancel(job_id)
    requested, deadline, _ = cancel_times(hasty, job_id)
    assert abs(deadline - requested - timedelta(seconds=GRACE)) < timedelta(milliseconds=50)

    job = keys.until_finished(job_id, beat=True)  # it heartbeats on, deaf to the request
    assert job["status"] == "CANCELLED" and job["error"] == WHILE_RUNNING
    assert job["workerId"] == keys.worker_name and job["retryCount"] == 0
    assert kinds(job) == ["ENQUEUED", "CLAIMED", "CANCEL_REQUESTED", "CANCELLED"]
    requested, _, finished = cancel_times(hasty, job_id)
    assert finished >= requested + timedelta(seconds=GRACE), "never before the grace is up"
    assert keys.heartbeat(job_id).codes == ["CONFLICT"]
    assert keys.gql(CLAIM_ONE, {"types": ["email"]}, key=keys.worker)["claimJob"] is None


def test_a_lease_that_expires_after_the_request_ends_the_job_cancelled(
    patient: Server, unique: Callable[[str], str]
) -> None:
    """Against the same lease expiry without a request, which retries the job."""
    keys = Keys(patient, unique)
    asked = keys.enqueue()
    unasked = keys.enqueue()
    keys.claim([asked, unasked], lease=1)
    keys.cancel(asked)

    job = keys.until_finished(asked)
    assert job["status"] == "CANCELLED" and job["error"] == WHILE_RUNNING and job["retryCount"] == 0
    assert kinds(job) == ["ENQUEUED", "CLAIMED", "CANCEL_REQUESTED", "CANCELLED"]
    other = keys.until_finished(unasked)
    assert other["status"] == "PENDING" and other["retryCount"] == 1 and other["error"] == "lease expired"
    assert kinds(other) == ["ENQUEUED", "CLAIMED", "LEASE_EXPIRED"]

    keys.gql("mutation($id: ID!) { cancelJob(id: $id) { id } }", {"id": unasked})  # PENDING: at once
    assert keys.gql(CLAIM_ONE, {"types": ["email"]}, key=keys.worker)["claimJob"] is None
    assert keys.read(asked) == job, "no lease rescue brings it back"


def test_a_timeout_sooner_than_the_grace_stays_and_ends_the_job_cancelled(
    patient: Server, unique: Callable[[str], str]
) -> None:
    keys = Keys(patient, unique)
    soon = keys.running(timeoutSeconds=2)
    late = keys.running("report", timeoutSeconds=86400)
    _, soon_timeout, _ = cancel_times(patient, soon)
    keys.cancel(soon)
    keys.cancel(late)
    assert cancel_times(patient, soon)[1] == soon_timeout, "the sooner timeout is kept"
    requested, late_deadline, _ = cancel_times(patient, late)
    assert abs(late_deadline - requested - timedelta(seconds=3600)) < timedelta(milliseconds=50)

    job = keys.until_finished(soon, beat=True)
    assert job["status"] == "CANCELLED" and job["error"] == WHILE_RUNNING and job["retryCount"] == 0
    assert kinds(job) == ["ENQUEUED", "CLAIMED", "CANCEL_REQUESTED", "CANCELLED"]
    keys.gql(FAIL, {"id": late, "attempt": 1, "retryable": True, "in": 0}, key=keys.worker)


def test_a_completion_that_comes_first_completes_the_job(hasty: Server, unique: Callable[[str], str]) -> None:
    keys = Keys(hasty, unique)
    single, batched = keys.enqueue(), keys.enqueue()
    keys.claim([single, batched])
    keys.cancel(single)
    keys.cancel(batched)

    done = keys.gql(COMPLETE, {"id": single, "attempt": 1}, key=keys.worker)["completeJob"]
    assert done["status"] == "COMPLETED" and done["result"] == {"done": True} and done["cancelRequested"]
    answer = keys.gql(COMPLETE_MANY, {"items": [{"id": batched, "attempt": 1}]}, key=keys.worker)
    assert [job["status"] for job in answer["completeJobs"]["completed"]] == ["COMPLETED"]
    before = [keys.read(single), keys.read(batched)]
    time.sleep(GRACE + 1.5)  # past the grace and a sweep: nothing may change now
    assert [keys.read(single), keys.read(batched)] == before
    assert kinds(before[0]) == ["ENQUEUED", "CLAIMED", "CANCEL_REQUESTED", "COMPLETED"]
    assert keys.cancel(single)["status"] == "COMPLETED", "asked again: the job as it is"
    counts = keys.stats(keys.worker)
    assert (counts["completed"], counts["cancelled"], counts["running"]) == (2, 0, 0)


def test_cancel_jobs_with_include_running_asks_each_matching_running_job_once(
    patient: Server, unique: Callable[[str], str]
) -> None:
    keys = Keys(patient, unique)
    running = [keys.enqueue("report") for _ in range(3)]
    others = keys.enqueue("report", key=keys.other_producer)
    keys.claim([*running, others], "report")
    pending = [keys.enqueue("report") for _ in range(2)]

    def cancel_jobs(job_filter: dict[str, Any], limit: int, include: bool, key: str) -> dict[str, Any]:
        variables = {"filter": job_filter, "limit": limit, "running": include}
        return keys.gql(CANCEL_JOBS, variables, key=key)["cancelJobs"]

    mine = keys.producer
    assert cancel_jobs({"status": "RUNNING", "type": "report"}, 10, False, mine) == {
        "count": 0,
        "more": False,
    }
    assert cancel_jobs({"type": "report"}, 10, False, mine) == {"count": 2, "more": False}
    assert [keys.read(j)["status"] for j in pending] == ["CANCELLED"] * 2
    assert not any(keys.read(j)["cancelRequested"] for j in running), "left alone without includeRunning"

    running_filter = {"status": "RUNNING", "type": "report"}
    assert cancel_jobs(running_filter, 2, True, mine) == {"count": 2, "more": True}
    assert cancel_jobs(running_filter, 2, True, mine) == {"count": 1, "more": False}
    assert cancel_jobs(running_filter, 2, True, mine) == {"count": 0, "more": False}, "asked already"
    assert cancel_jobs({"type": "report"}, 10, True, mine) == {"count": 0, "more": False}
    assert keys.read(others)["cancelRequested"] is False, "a PRODUCER asks only its own jobs"
    assert cancel_jobs(running_filter, 10, True, patient.admin_key) == {"count": 1, "more": False}

    for job_id in [*running, others]:
        job = keys.read(job_id)
        assert job["status"] == "RUNNING" and kinds(job).count("CANCEL_REQUESTED") == 1
        assert keys.heartbeat(job_id).ok()["heartbeatJob"]["cancelRequested"] is True
        variables = {"id": job_id, "attempt": 1, "retryable": True, "in": 0}
        assert keys.gql(FAIL, variables, key=keys.worker)["failJob"]["status"] == "CANCELLED"
    assert keys.stats(keys.producer)["cancelled"] == 5 and keys.stats(keys.worker)["cancelled"] == 4


def test_only_admin_and_the_producer_that_enqueued_it_may_cancel_a_running_job(
    patient: Server, unique: Callable[[str], str]
) -> None:
    keys = Keys(patient, unique)
    job_id = keys.running()
    before = keys.read(job_id)
    refusals = [
        (keys.other_producer, CANCEL, {"id": job_id}, "NOT_FOUND"),
        (keys.worker, CANCEL, {"id": job_id}, "FORBIDDEN"),
        (keys.viewer, CANCEL, {"id": job_id}, "FORBIDDEN"),
        (keys.worker, CANCEL_JOBS, {"filter": {"type": "email"}, "limit": 10, "running": True}, "FORBIDDEN"),
    ]
    for key, query, variables, code in refusals:
        response = patient.gql(query, variables, key=key)
        assert response.codes == [code] and response.data is None, response.body
    bulk = {"filter": {"type": "email"}, "limit": 10, "running": True}
    assert keys.gql(CANCEL_JOBS, bulk, key=keys.other_producer)["cancelJobs"] == {"count": 0, "more": False}
    assert keys.read(job_id) == before, "a refused cancel changed the job"
    keys.gql(COMPLETE, {"id": job_id, "attempt": 1}, key=keys.worker)


def test_a_job_cancelled_while_running_cancels_its_dependents(
    patient: Server, unique: Callable[[str], str]
) -> None:
    keys = Keys(patient, unique)
    parent = keys.running()
    child = keys.enqueue(dependsOn=[parent])
    grandchild = keys.enqueue(dependsOn=[child])
    keys.cancel(parent)
    keys.gql(FAIL, {"id": parent, "attempt": 1, "retryable": True, "in": 0}, key=keys.worker)

    assert keys.read(parent)["status"] == "CANCELLED"
    for job_id in (child, grandchild):
        job = keys.read(job_id)
        assert job["status"] == "CANCELLED" and job["error"] == f"dependency {parent} CANCELLED", job
        assert kinds(job) == ["ENQUEUED", "CANCELLED"]


# --- two servers ------------------------------------------------------------------------------


def test_the_request_and_the_end_reach_subscribers_on_the_other_server(
    start_cluster: Callable[..., Cluster],
) -> None:
    cluster = start_cluster(2, cancel_grace_seconds=3600)
    near, far = cluster.servers
    worker_name = "holder"
    worker = near.make_key(worker_name, "worker")
    producer = near.make_key("producer", "producer")

    async def scenario() -> None:
        async with httpx.AsyncClient(timeout=60) as http:

            async def gql(server: Server, key: str, query: str, **variables: Any) -> Any:
                return (await graphql(http, server, key, query, variables)).ok()

            async def sentinel() -> str:
                # Enqueued on the near server: `far` hears it by reading near's events back in
                # commit order, so once it arrives `far` has also read (and not delivered to
                # this later subscription) the job's own earlier ENQUEUED event.
                data = await gql(near, producer, ENQUEUE, input={"type": "noop"})
                return str(data["enqueueJob"]["job"]["id"])

            job_id = str(
                (await gql(near, producer, ENQUEUE, input={"type": "email"}))["enqueueJob"]["job"]["id"]
            )
            await gql(far, worker, CLAIM, types=["email"])
            async with open_socket(far, cluster.admin_key) as events, open_socket(far, worker) as holder:
                await events.subscribe("events", JOB_EVENTS)
                await until_live(events, "events", sentinel)
                await holder.subscribe("updated", JOB_UPDATED, {"id": job_id})
                first = (await holder.data("updated", DEADLINE))["jobUpdated"]
                assert first == {
                    "id": job_id,
                    "status": "RUNNING",
                    "cancelRequested": False,
                    "workerId": worker_name,
                }

                asked = (await gql(near, producer, CANCEL, id=job_id))["cancelJob"]
                assert asked["status"] == "RUNNING" and asked["cancelRequested"]
                heard = await events.event_of("events", job_id, DEADLINE)
                assert heard == {
                    "kind": "CANCEL_REQUESTED",
                    "job": {"id": job_id, "status": "RUNNING", "cancelRequested": True},
                }
                told = (await holder.data("updated", DEADLINE))["jobUpdated"]
                assert told["status"] == "RUNNING" and told["cancelRequested"] is True

                beat = (await gql(far, worker, HEARTBEAT, id=job_id, attempt=1))["heartbeatJob"]
                assert beat["cancelRequested"] is True
                await gql(near, worker, FAIL, id=job_id, attempt=1, retryable=True)
                heard = await events.event_of("events", job_id, DEADLINE)
                assert heard == {
                    "kind": "CANCELLED",
                    "job": {"id": job_id, "status": "CANCELLED", "cancelRequested": True},
                }
                last = (await holder.data("updated", DEADLINE))["jobUpdated"]
                assert last == {
                    "id": job_id,
                    "status": "CANCELLED",
                    "cancelRequested": True,
                    "workerId": worker_name,
                }
                assert (await holder.message_for("updated", DEADLINE))["type"] == "complete"

    run(scenario())


def test_the_grace_ends_the_job_after_the_server_that_took_the_cancel_is_killed(
    start_cluster: Callable[..., Cluster],
) -> None:
    cluster = start_cluster(2, cancel_grace_seconds=2)
    taker, survivor = cluster.servers
    worker = survivor.make_key("holder", "worker")
    producer = survivor.make_key("producer", "producer")
    job_id = str(
        survivor.gql(ENQUEUE, {"input": {"type": "email"}}, key=producer).ok()["enqueueJob"]["job"]["id"]
    )
    survivor.gql(CLAIM, {"types": ["email"]}, key=worker).ok()

    asked = taker.gql(CANCEL, {"id": job_id}, key=producer).ok()["cancelJob"]
    cluster.kill(0)  # SIGKILL: the server that took the cancel never runs again
    assert asked["status"] == "RUNNING" and asked["cancelRequested"] is True

    end = time.monotonic() + DEADLINE
    while (job := survivor.gql(READ, {"id": job_id}).ok()["job"])["status"] == "RUNNING":
        assert time.monotonic() < end, f"still RUNNING {DEADLINE:.0f} s after the cancel: {job}"
        time.sleep(0.2)
    assert job["status"] == "CANCELLED" and job["error"] == WHILE_RUNNING and job["workerId"] == "holder"
    assert kinds(job) == ["ENQUEUED", "CLAIMED", "CANCEL_REQUESTED", "CANCELLED"]
    requested, _, finished = cancel_times(survivor, job_id)
    assert finished >= requested + timedelta(seconds=2)
    print(f"\nended {(finished - requested).total_seconds():.2f} s after the request (grace 2 s)")
    assert survivor.gql(HEARTBEAT, {"id": job_id, "attempt": 1}, key=worker).codes == ["CONFLICT"]


# --- races on two servers ---------------------------------------------------------------------

# Each job's race (its payload says which); every retry is an hour away (retry base 3600), so
# each job is claimed once, by the worker that plays its race:
# - complete: completeJob against cancelJob on the other server: COMPLETED either way (unless
#   the completion came over a second after the request: then the grace ended it first);
# - fail: a retryable failJob against cancelJob: CANCELLED either way (a failure first puts the
#   job back to PENDING, which the cancel then cancels at once);
# - expiry: the lease cut to 1 s, then cancelJob about when it expires: CANCELLED either way;
# - grace: cancelJob, then the holder completes about when the grace (1 s) is up: COMPLETED if
#   its completeJob came first, else CANCELLED (and the completeJob got CONFLICT);
# - heed / bulk: cancelJob / cancelJobs(includeRunning) while the holder heartbeats until it
#   hears of it, then fails for good: CANCELLED while running.
RACES = ("complete", "fail", "expiry", "grace", "heed", "bulk")
JOBS_PER_RACE = 20
RACE_WORKERS = 12
WORKER_NAMES = ("w0", "w1", "w2", "w3")


def outcome(answer: GraphQLResponse, field: str) -> str:
    """A report's or a cancel's answer: the job's status, or the error code."""
    if answer.errors:
        assert answer.codes in (["CONFLICT"], ["NOT_FOUND"]), answer.body
        return answer.codes[0]
    return str(answer.data[field]["status"])


def test_cancels_racing_completions_failures_expiries_and_the_grace_end_each_job_once(
    start_cluster: Callable[..., Cluster],
) -> None:
    cluster = start_cluster(2, cancel_grace_seconds=RACE_GRACE, retry_base_seconds=3600)
    servers = cluster.servers
    producer = servers[0].make_key("producer", "producer")
    workers = [servers[0].make_key(name, "worker") for name in WORKER_NAMES]
    plan = [race for race in RACES for _ in range(JOBS_PER_RACE)]
    random.Random(33).shuffle(plan)
    inputs = [
        {"type": "email", "payload": {"race": race}, "concurrencyKey": f"k{n}", "maxRetries": 3}
        for n, race in enumerate(plan)
    ]
    enqueued = (
        servers[1]
        .gql(
            "mutation($i: [EnqueueJobInput!]!) { enqueueJobs(inputs: $i) { job { id concurrencyKey } } }",
            {"i": inputs},
            key=producer,
        )
        .ok()["enqueueJobs"]
    )
    race_of = {item["job"]["id"]: plan[n] for n, item in enumerate(enqueued)}
    key_of = {item["job"]["id"]: item["job"]["concurrencyKey"] for item in enqueued}
    cancels: dict[str, list[str]] = {}  # job id -> how its cancels were answered
    reports: dict[str, list[str]] = {}  # job id -> how its holder's reports were answered
    holders: dict[str, str] = {}

    async def scenario() -> None:
        async with httpx.AsyncClient(timeout=60) as http:
            finished = asyncio.Event()

            async def play(
                job: dict[str, Any], rng: random.Random, near: Server, far: Server, w: int
            ) -> None:
                job_id, race = job["id"], job["payload"]["race"]
                holders[job_id] = WORKER_NAMES[w]
                assert job["attempt"] == 1, job
                worker = workers[w]
                cancels[job_id], reports[job_id] = [], []

                async def report(query: str, field: str, **variables: Any) -> GraphQLResponse:
                    answer = await graphql(
                        http, near, worker, query, {"id": job_id, "attempt": 1, **variables}
                    )
                    reports[job_id].append(outcome(answer, field))
                    return answer

                async def cancel() -> None:
                    if race == "bulk":
                        job_filter = {"type": "email", "concurrencyKey": key_of[job_id]}
                        variables = {"filter": job_filter, "limit": 10, "running": True}
                        answer = await graphql(http, far, producer, CANCEL_JOBS, variables)
                        cancels[job_id].append(f"bulk {answer.ok()['cancelJobs']['count']}")
                        return
                    key = producer if rng.random() < 0.5 else cluster.admin_key
                    cancels[job_id].append(
                        outcome(await graphql(http, far, key, CANCEL, {"id": job_id}), "cancelJob")
                    )

                if race == "complete":
                    await asyncio.gather(cancel(), report(COMPLETE, "completeJob"))
                elif race == "fail":
                    await asyncio.gather(cancel(), report(FAIL, "failJob", retryable=True, **{"in": 3600}))
                elif race == "expiry":
                    await report(HEARTBEAT, "heartbeatJob", lease=1)
                    await asyncio.sleep(rng.uniform(0.7, 1.4))
                    await cancel()
                elif race == "grace":
                    await cancel()
                    heard = await report(HEARTBEAT, "heartbeatJob")
                    assert heard.errors or heard.data["heartbeatJob"]["cancelRequested"] is True, heard.body
                    await asyncio.sleep(rng.uniform(0.5, 1.5))
                    await report(COMPLETE, "completeJob")
                else:  # heed, bulk
                    asking = asyncio.create_task(cancel())
                    while True:
                        beat = await report(HEARTBEAT, "heartbeatJob")
                        if beat.errors or beat.data["heartbeatJob"]["cancelRequested"]:
                            break
                        await asyncio.sleep(0.05)
                    await asking
                    await report(FAIL, "failJob", retryable=False)

            async def work(w: int) -> None:
                rng = random.Random(w)
                near, far = servers[w % 2], servers[(w + 1) % 2]
                variables = {"types": ["email"], "lease": 60, "wait": 1}
                while not finished.is_set():
                    answer = await graphql(http, near, workers[w % len(workers)], CLAIM_ONE, variables)
                    job = answer.ok()["claimJob"]
                    if job is not None:
                        await play(job, rng, near, far, w % len(workers))

            tasks = [asyncio.create_task(work(w)) for w in range(RACE_WORKERS)]
            try:
                end = time.monotonic() + RACE_DEADLINE
                while True:
                    counts = (await graphql(http, servers[0], cluster.admin_key, STATS)).ok()
                    counts = counts["queueStats"]["counts"]
                    if counts["pending"] == counts["running"] == 0:
                        break
                    for task in tasks:
                        if task.done():
                            task.result()
                    assert time.monotonic() < end, f"jobs left after {RACE_DEADLINE:.0f} s: {counts}"
                    await asyncio.sleep(0.2)
            finally:
                finished.set()
                await asyncio.gather(*tasks)

    run(scenario(), RACE_DEADLINE + 60)
    server = servers[0]
    rows = {
        str(job_id): (status, error, worker, requested is not None)
        for job_id, status, error, worker, requested in server.sql(
            "SELECT id, status, error, worker_id, cancel_requested_at FROM jobs"
        )
    }
    assert set(rows) == set(race_of) and set(holders) == set(race_of), "every job was claimed once"
    events: dict[str, list[tuple[str, str]]] = {job_id: [] for job_id in rows}
    for job_id, kind, status in server.sql("SELECT job_id, kind, status FROM job_events ORDER BY id"):
        events[str(job_id)].append((kind, status))

    tally: Counter[str] = Counter()
    for job_id, (status, error, worker, requested) in rows.items():
        race, asked, told, seen = race_of[job_id], cancels[job_id], reports[job_id], events[job_id]
        where = f"job {job_id} ({race}): {status} {error!r}, cancels {asked}, reports {told}, events {seen}"
        terminal = [n for n, (_, s) in enumerate(seen) if s in TERMINAL]
        assert terminal == [len(seen) - 1] and seen[-1][1] == status, where  # one end, the last event
        assert [kind for kind, _ in seen].count("CLAIMED") == 1, where
        assert [kind for kind, _ in seen].count("CANCEL_REQUESTED") == int(requested), where
        if requested:  # after the request, only the end: no retry, no lease rescue, no claim
            after = [kind for kind, _ in seen[[kind for kind, _ in seen].index("CANCEL_REQUESTED") + 1 :]]
            assert after in (["COMPLETED"], ["CANCELLED"]), where
            assert (status == "cancelled") == (error == WHILE_RUNNING), where
            assert worker == holders[job_id], where
        if race == "complete":  # CANCELLED only if the grace passed before the completion came
            assert asked[0] in ("CONFLICT", "RUNNING") and requested == (asked[0] == "RUNNING"), where
            assert (status == "completed") == (told == ["COMPLETED"]), where
            assert status == "completed" or (requested and told == ["CONFLICT"]), where
        elif race in ("fail", "expiry"):
            assert status == "cancelled" and asked[0] in ("RUNNING", "CANCELLED"), where
            assert requested == (asked[0] == "RUNNING"), where
            if not requested:  # the attempt had ended first: the PENDING job was cancelled at once
                assert error == ("stopped" if race == "fail" else "lease expired") and worker is None, where
        elif race == "grace":
            assert requested and told[-1] == ("COMPLETED" if status == "completed" else "CONFLICT"), where
        else:
            assert status == "cancelled" and requested, where
            assert asked == (["bulk 1"] if race == "bulk" else ["RUNNING"]), where
        tally[f"{race}: {status}{' (asked first)' if requested else ''}"] += 1
    print("\n" + "\n".join(f"{name}: {n}" for name, n in sorted(tally.items())))

    def table(where: str = "", **params: Any) -> dict[str, int]:
        counts = dict.fromkeys(("pending", "running", "completed", "failed", "cancelled"), 0)
        counts.update(server.sql(f"SELECT status, count(*) FROM jobs {where} GROUP BY status", **params))
        return counts

    views = [(cluster.admin_key, table()), (producer, table("WHERE created_by = :n", n="producer"))]
    views += [
        (key, table("WHERE worker_id = :n", n=name)) for key, name in zip(workers, WORKER_NAMES, strict=True)
    ]
    for key, expected in views:
        for each in servers:
            assert each.gql(STATS, key=key).ok()["queueStats"]["counts"] == expected
    negative = server.sql(
        "SELECT scope, name, type, status FROM job_counts"
        " GROUP BY scope, name, type, status HAVING SUM(n) < 0"
    )
    assert negative == []
