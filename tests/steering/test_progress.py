"""reportProgress (API.md section 12) against real servers, on SQLite and PostgreSQL.

Proven here: bad input names its field; fencing as heartbeatJob (a wrong attempt CONFLICT,
another worker's job NOT_FOUND), whether the report is stored at once or held; a report
stores progress, message and time on the job and extends the lease (never shortens it); a
server stores at most one report per job per 250 ms, the last one always, and before the
attempt ends when the holder ends it through that server; a new claim resets progress;
`jobUpdated` delivers reports, on another server too, and `jobEvents` never does; a report
writes no event row.

Stores are counted by the job's `revision`, which every write of the row adds one to.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import GraphQLResponse, Server, migrate, serving, stored_time
from socket_kit import open_socket

from queuelog.model import NewJob, Priority, ProgressReport
from queuelog.progress import WINDOW_SECONDS, ProgressWindows
from queuelog.retry_policy import RetryPolicy
from queuelog.storage.repository import Repository

ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { job { id } } }"
CLAIM = (
    "mutation($types: [String!], $lease: Int) { claimJob(types: $types, leaseSeconds: $lease)"
    " { id attempt progress progressMessage progressAt leaseExpiresAt } }"
)
REPORT = (
    "mutation($id: ID!, $attempt: Int!, $progress: Float!, $message: String) {"
    " reportProgress(id: $id, attempt: $attempt, progress: $progress, message: $message)"
    " { id status attempt progress progressMessage progressAt leaseExpiresAt } }"
)
COMPLETE = (
    "mutation($id: ID!, $attempt: Int!) { completeJob(id: $id, attempt: $attempt) { status progress } }"
)
FAIL = (
    "mutation($id: ID!, $attempt: Int!) {"
    ' failJob(id: $id, attempt: $attempt, error: "boom", retryInSeconds: 0) { status progress } }'
)
JOB = "query($id: ID!) { job(id: $id) { status progress progressMessage progressAt events { kind } } }"
JOB_UPDATED = "subscription($id: ID!) { jobUpdated(id: $id) { id status attempt progress progressMessage } }"
JOB_EVENTS = "subscription { jobEvents { kind job { id status progress } } }"
WAIT = 15.0  # the longest any delivery is waited for: a bound, not a timing


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, retry_base_seconds=0) as running:
        yield running


@pytest.fixture
def worker(server: Server, unique: Callable[[str], str]) -> str:
    return server.make_key(unique("worker"), "worker")


def enqueue(server: Server, job_type: str = "report", **fields: Any) -> str:
    job = {"type": job_type, "payload": {}, **fields}
    return server.gql(ENQUEUE, {"input": job}).ok()["enqueueJob"]["job"]["id"]


def claim(server: Server, key: str, job_id: str, job_type: str = "report", lease: int = 60) -> dict[str, Any]:
    """Claim `job_id`, once due (other jobs of its type are completed on the way)."""
    deadline = time.monotonic() + WAIT
    while True:
        claimed = server.gql(CLAIM, {"types": [job_type], "lease": lease}, key=key).ok()["claimJob"]
        if claimed is not None and claimed["id"] == job_id:
            return claimed
        if claimed is not None:
            server.gql(COMPLETE, {"id": claimed["id"], "attempt": claimed["attempt"]}, key=key).ok()
        else:
            assert time.monotonic() < deadline, f"job {job_id} was never claimed"
            time.sleep(0.1)


def report(
    server: Server, key: str, job_id: str, attempt: int, progress: float, message: str | None = None
) -> GraphQLResponse:
    variables = {"id": job_id, "attempt": attempt, "progress": progress, "message": message}
    return server.gql(REPORT, variables, key=key)


def stored(server: Server, job_id: str) -> tuple[Any, ...]:
    """(progress, progress_message, progress_at, lease_expires_at, revision) as stored."""
    (row,) = server.sql(
        "SELECT progress, progress_message, progress_at, lease_expires_at, revision FROM jobs WHERE id = :id",
        id=int(job_id),
    )
    return row


def wait_for_stored(server: Server, job_id: str, progress: float) -> tuple[Any, ...]:
    deadline = time.monotonic() + WAIT
    while (row := stored(server, job_id))[0] != progress:
        assert time.monotonic() < deadline, f"progress {progress} never stored: {row}"
        time.sleep(0.05)
    return row


# --- bad input and fencing ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("progress", "message", "field"),
    [
        (-0.01, None, "progress"),
        (1.01, None, "progress"),
        (0.5, "x" * 201, "message"),
        (0.5, "é" * 201, "message"),
        (0.5, "nul \x00 inside", "message"),
    ],
)
def test_bad_input_is_refused_naming_the_field(
    server: Server, worker: str, progress: float, message: str | None, field: str
) -> None:
    job_id = enqueue(server)
    held = claim(server, worker, job_id)
    before = stored(server, job_id)
    response = report(server, worker, job_id, held["attempt"], progress, message)
    assert response.codes == ["BAD_USER_INPUT"], response.body
    assert response.errors[0]["message"].startswith(field), response.body
    assert stored(server, job_id) == before, "a refused report changed the job"


def test_the_bounds_themselves_are_accepted(server: Server, worker: str) -> None:
    job_id = enqueue(server)
    held = claim(server, worker, job_id)
    for progress, message in ((0.0, ""), (1.0, "é" * 200)):
        answer = report(server, worker, job_id, held["attempt"], progress, message).ok()["reportProgress"]
        assert (answer["progress"], answer["progressMessage"]) == (progress, message)
    assert wait_for_stored(server, job_id, 1.0)[1] == "é" * 200


def test_fencing_is_a_heartbeats_whether_the_report_is_stored_or_held(
    server: Server, worker: str, unique: Callable[[str], str]
) -> None:
    """A wrong attempt: CONFLICT; another worker: NOT_FOUND, revealing nothing; a finished
    job: CONFLICT. Right after a stored report (held path) as on its own (stored path)."""
    other = server.make_key(unique("other-worker"), "worker")
    job_id = enqueue(server)
    attempt = claim(server, worker, job_id)["attempt"]
    for _ in range(2):  # first with no window open, then within the window of the good report
        assert report(server, worker, job_id, attempt + 1, 0.5).codes == ["CONFLICT"]
        assert report(server, other, job_id, attempt, 0.5).codes == ["NOT_FOUND"]
        assert report(server, worker, job_id, attempt, 0.25).ok()["reportProgress"]["progress"] == 0.25
    wait_for_stored(server, job_id, 0.25)
    assert server.gql(COMPLETE, {"id": job_id, "attempt": attempt}, key=worker).ok()
    assert report(server, worker, job_id, attempt, 0.5).codes == ["CONFLICT"]
    assert report(server, worker, job_id, attempt, 0.75).codes == ["CONFLICT"]  # within a window
    time.sleep(WINDOW_SECONDS * 2)
    assert stored(server, job_id)[0] == 0.25, "a refused report was stored"


# --- what a report stores --------------------------------------------------------------------


def test_a_report_is_stored_on_the_job_and_extends_the_lease(server: Server, worker: str) -> None:
    job_id = enqueue(server)
    held = claim(server, worker, job_id, lease=5)
    claim_lease = stored(server, job_id)[3]
    answer = report(server, worker, job_id, held["attempt"], 0.25, "a quarter").ok()["reportProgress"]
    progress, message, at, lease, _ = stored(server, job_id)
    assert (progress, message) == (0.25, "a quarter") == (answer["progress"], answer["progressMessage"])
    assert stored_time(at) == datetime.fromisoformat(answer["progressAt"])
    assert stored_time(lease) == datetime.fromisoformat(answer["leaseExpiresAt"])
    # The server's lease (300 s), from the report: past the claim's 5 s.
    assert stored_time(lease) - stored_time(at) == timedelta(seconds=300)
    assert stored_time(lease) > stored_time(claim_lease)
    job = server.gql(JOB, {"id": job_id}).ok()["job"]
    assert (job["progress"], job["progressMessage"], job["progressAt"]) == (
        0.25,
        "a quarter",
        answer["progressAt"],
    )
    assert "PROGRESS" not in [e["kind"] for e in job["events"]], "a report is no transition of the job"


def test_a_report_never_shortens_a_longer_lease(server: Server, worker: str) -> None:
    job_id = enqueue(server)
    held = claim(server, worker, job_id, lease=3600)
    lease = stored(server, job_id)[3]
    report(server, worker, job_id, held["attempt"], 0.5).ok()
    assert stored(server, job_id)[3] == lease


def test_a_new_claim_resets_progress(server: Server, worker: str) -> None:
    """Progress belongs to the attempt: it stays with the job until the next claim."""
    job_id = enqueue(server, maxRetries=1)
    first = claim(server, worker, job_id)
    report(server, worker, job_id, first["attempt"], 0.5, "half").ok()
    failed = server.gql(FAIL, {"id": job_id, "attempt": first["attempt"]}, key=worker).ok()["failJob"]
    assert (failed["status"], failed["progress"]) == ("PENDING", 0.5)
    second = claim(server, worker, job_id)
    assert second["attempt"] == first["attempt"] + 1
    assert (second["progress"], second["progressMessage"], second["progressAt"]) == (None, None, None)
    assert stored(server, job_id)[:3] == (None, None, None)


def test_a_report_writes_no_event(server: Server, worker: str) -> None:
    """A report is one UPDATE, as a heartbeat is: no job_events row (other servers read the
    jobs their subscribers follow), so a job reporting for hours adds nothing there."""
    job_id = enqueue(server)
    attempt = claim(server, worker, job_id)["attempt"]
    for n in range(1, 4):
        report(server, worker, job_id, attempt, n / 10).ok()
        wait_for_stored(server, job_id, n / 10)
        time.sleep(WINDOW_SECONDS)  # each one stored at once
    rows = server.sql("SELECT kind FROM job_events WHERE job_id = :id ORDER BY id", id=int(job_id))
    assert [kind for (kind,) in rows] == ["ENQUEUED", "CLAIMED"]


# --- the window ------------------------------------------------------------------------------


def test_at_most_one_report_is_stored_per_window_and_the_last_always(server: Server, worker: str) -> None:
    """A burst of reports: each answered with its own value, stored at most once per 250 ms,
    the last one stored at the window's end and delivered to jobUpdated."""
    job_id = enqueue(server)
    attempt = claim(server, worker, job_id)["attempt"]

    async def scenario() -> tuple[int, float, list[dict[str, Any]]]:
        async with open_socket(server, worker) as ws:
            await ws.subscribe("1", JOB_UPDATED, {"id": job_id})
            assert (await ws.data("1"))["jobUpdated"]["progress"] is None
            revision = stored(server, job_id)[4]
            values = [round(0.02 * n, 2) for n in range(1, 41)]
            started = time.monotonic()
            for value in values:
                answer = await asyncio.to_thread(
                    report, server, worker, job_id, attempt, value, f"at {value}"
                )
                assert answer.ok()["reportProgress"]["progress"] == value
            elapsed = time.monotonic() - started
            updates = await ws.updates_until("1", lambda job: job["progress"] == values[-1])
            final = await asyncio.to_thread(wait_for_stored, server, job_id, values[-1])
            await asyncio.sleep(WINDOW_SECONDS * 2)  # nothing is stored after the last
            assert stored(server, job_id) == final
            return final[4] - revision, elapsed, updates

    stores, elapsed, updates = asyncio.run(asyncio.wait_for(scenario(), 60))
    # Each store opens a window of 250 ms, and the last ends at most 250 ms after the last report.
    assert 2 <= stores <= 2 + elapsed / WINDOW_SECONDS, (stores, elapsed)
    assert stored(server, job_id)[:2] == (0.8, "at 0.8")
    assert updates[-1]["progressMessage"] == "at 0.8"
    assert all(u["status"] == "RUNNING" for u in updates)


def test_the_last_report_is_stored_before_the_attempt_ends(server: Server, worker: str) -> None:
    """A report held in its window is stored before the holder's completeJob applies: the
    terminal state jobUpdated ends on carries it."""
    job_id = enqueue(server)
    attempt = claim(server, worker, job_id)["attempt"]

    async def scenario() -> list[dict[str, Any]]:
        async with open_socket(server, worker) as ws:
            await ws.subscribe("1", JOB_UPDATED, {"id": job_id})
            await ws.data("1")
            revision = stored(server, job_id)[4]
            for value in (0.5, 0.9):  # the first stored at once, the second held
                await asyncio.to_thread(report, server, worker, job_id, attempt, value)
            done = await asyncio.to_thread(server.gql, COMPLETE, {"id": job_id, "attempt": attempt}, worker)
            assert done.ok()["completeJob"] == {"status": "COMPLETED", "progress": 0.9}
            assert stored(server, job_id)[4] - revision == 3, "two reports stored, then the completion"
            return await ws.updates_until("1", lambda job: job["status"] == "COMPLETED")

    updates = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert updates[-1]["progress"] == 0.9


def test_job_events_never_delivers_progress(server: Server, worker: str) -> None:
    job_id = enqueue(server)
    attempt = claim(server, worker, job_id)["attempt"]

    async def scenario() -> list[str]:
        async with open_socket(server, server.admin_key) as ws:
            await ws.subscribe("events", JOB_EVENTS)
            await ws.subscribe("job", JOB_UPDATED, {"id": job_id})  # live once its first state comes
            await ws.data("job")
            for value in (0.1, 0.2, 0.3):
                await asyncio.to_thread(report, server, worker, job_id, attempt, value)
            await ws.updates_until("job", lambda job: job["progress"] == 0.3)
            await asyncio.to_thread(server.gql, COMPLETE, {"id": job_id, "attempt": attempt}, worker)
            kinds = []
            while not kinds or kinds[-1] != "COMPLETED":
                event = (await ws.data("events"))["jobEvents"]
                if event["job"]["id"] == job_id:
                    kinds.append(event["kind"])
            return kinds

    assert asyncio.run(asyncio.wait_for(scenario(), 60)) == ["COMPLETED"]


def test_a_server_forgets_the_windows_of_jobs_that_stopped_reporting(tmp_path: Path) -> None:
    """In process, on a real SQLite file: a window lives 250 ms; the windows of jobs that
    report no more are dropped (once a second), not kept for the server's life."""

    async def scenario() -> tuple[int, int, float | None]:
        repository = Repository(migrate(f"sqlite:///{tmp_path / 'q.db'}"), RetryPolicy(10, 3600), "local")
        await repository.open()
        try:
            items = [NewJob("report", {}, Priority.LOW, 0, None, None, payload_json="{}") for _ in range(51)]
            await repository.enqueue(items, "producer")
            jobs = (await repository.claim("worker", ["report"], 51, 60)).jobs
            windows = ProgressWindows(repository, lease_seconds=60)
            for job in jobs[:50]:
                await windows.report(ProgressReport(job.id, "worker", job.attempt, 0.5, None), never_read)
            reporting = windows.remembered
            await asyncio.sleep(1.1 + WINDOW_SECONDS)
            last = jobs[50]
            await windows.report(ProgressReport(last.id, "worker", last.attempt, 0.5, None), never_read)
            after = windows.remembered  # the last job's window only
            await windows.close()
            stored = await repository.get_jobs([last.id])
            return reporting, after, stored[0].progress
        finally:
            await repository.close()

    async def never_read() -> None:
        raise AssertionError("a report stored at once reads nothing")

    assert asyncio.run(scenario()) == (50, 1, 0.5)


# --- across servers ----------------------------------------------------------------------------


@pytest.fixture
def two_servers(start_server: Callable[..., Server]) -> tuple[Server, Server]:
    first = start_server(retry_base_seconds=0)
    second = start_server(database_url=first.database_url, admin_key=first.admin_key, retry_base_seconds=0)
    return first, second


def test_a_report_reaches_job_updated_on_another_server(
    two_servers: tuple[Server, Server], unique: Callable[[str], str]
) -> None:
    """Reported through one server, delivered by the other's jobUpdated (the other reads the
    RUNNING jobs its subscribers follow), the last of a burst included."""
    here, there = two_servers
    worker = here.make_key(unique("worker"), "worker")
    job_id = enqueue(here)
    attempt = claim(here, worker, job_id)["attempt"]

    async def scenario() -> list[dict[str, Any]]:
        async with open_socket(there, there.admin_key) as ws:
            await ws.subscribe("1", JOB_UPDATED, {"id": job_id})
            await ws.data("1")
            await asyncio.to_thread(report, here, worker, job_id, attempt, 0.3, "first")
            first = await ws.updates_until("1", lambda job: job["progress"] == 0.3)
            for n in range(4, 10):
                await asyncio.to_thread(report, here, worker, job_id, attempt, n / 10, f"n={n}")
            return first + await ws.updates_until("1", lambda job: job["progressMessage"] == "n=9")

    updates = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert updates[-1]["progress"] == 0.9 and all(u["status"] == "RUNNING" for u in updates)


def test_a_subscriber_that_came_before_the_claim_gets_the_reports_on_another_server(
    two_servers: tuple[Server, Server], unique: Callable[[str], str]
) -> None:
    """The job is PENDING when the subscriber comes: its CLAIMED event (from the other
    server's commit) makes the subscriber's server follow its progress."""
    here, there = two_servers
    worker = here.make_key(unique("worker"), "worker")
    job_id = enqueue(here)

    async def scenario() -> list[dict[str, Any]]:
        async with open_socket(there, there.admin_key) as ws:
            await ws.subscribe("1", JOB_UPDATED, {"id": job_id})
            assert (await ws.data("1"))["jobUpdated"]["status"] == "PENDING"
            attempt = (await asyncio.to_thread(claim, here, worker, job_id))["attempt"]
            await ws.updates_until("1", lambda job: job["status"] == "RUNNING")
            await asyncio.to_thread(report, here, worker, job_id, attempt, 0.4, "claimed later")
            return await ws.updates_until("1", lambda job: job["progress"] == 0.4)

    updates = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert updates[-1]["progressMessage"] == "claimed later"


def test_a_report_held_while_the_attempt_ends_elsewhere_is_still_stored_on_it(
    two_servers: tuple[Server, Server], unique: Callable[[str], str]
) -> None:
    """The holder reports through one server and completes through the other within the
    window: the held report is stored on the attempt at the window's end, after its end."""
    here, there = two_servers
    worker = here.make_key(unique("worker"), "worker")
    job_id = enqueue(here)
    attempt = claim(here, worker, job_id)["attempt"]
    report(here, worker, job_id, attempt, 0.5).ok()
    report(here, worker, job_id, attempt, 0.9, "held").ok()
    assert there.gql(COMPLETE, {"id": job_id, "attempt": attempt}, key=worker).ok()["completeJob"]["status"]
    progress, message, *_ = wait_for_stored(there, job_id, 0.9)
    assert message == "held"
    assert there.gql(JOB, {"id": job_id}).ok()["job"]["status"] == "COMPLETED"


def test_a_report_held_by_one_server_never_overwrites_a_later_one_another_stored(
    two_servers: tuple[Server, Server], unique: Callable[[str], str]
) -> None:
    """Each server holds reports in its own window: a holder whose reports reach both servers
    (behind a load balancer) keeps the last report it sent, not an older one that one server
    held back and stored when its window ended (the history checker found it: seed 2029 on
    PostgreSQL). The completion through the holding server stores what it still holds first."""
    here, there = two_servers
    worker = here.make_key(unique("worker"), "worker")
    job_id = enqueue(here)
    attempt = claim(here, worker, job_id)["attempt"]
    report(here, worker, job_id, attempt, 0.1).ok()  # stored: opens `here`'s window
    report(here, worker, job_id, attempt, 0.2, "older").ok()  # held by `here`
    report(there, worker, job_id, attempt, 0.3, "last").ok()  # stored at once by `there`
    assert here.gql(COMPLETE, {"id": job_id, "attempt": attempt}, key=worker).ok()["completeJob"]["status"]
    progress, message, *_ = stored(here, job_id)
    assert (progress, message) == (0.3, "last")


def test_reports_through_one_server_are_refused_once_it_hears_the_attempt_ended_through_another(
    two_servers: tuple[Server, Server], unique: Callable[[str], str]
) -> None:
    """A holder that keeps reporting through one server while its attempt is completed
    through the other gets CONFLICT from the moment the first server has the completion's
    event (held reports are checked against the job it last saw until then), and every
    report it was answered is stored on the attempt."""
    here, there = two_servers
    worker = here.make_key(unique("worker"), "worker")
    job_id = enqueue(here)
    attempt = claim(here, worker, job_id)["attempt"]
    answered = []
    for n in range(10):  # every 20 ms: windows stay open, most reports are held
        answered.append(report(here, worker, job_id, attempt, n / 100).ok()["reportProgress"]["progress"])
        time.sleep(0.02)
    assert there.gql(COMPLETE, {"id": job_id, "attempt": attempt}, key=worker).ok()["completeJob"]["status"]
    codes: list[list[str]] = []
    deadline = time.monotonic() + WAIT
    while not codes or codes[-1] != ["CONFLICT"]:
        assert time.monotonic() < deadline, "reports were never refused"
        response = report(here, worker, job_id, attempt, 0.5 + len(codes) / 1000)
        codes.append(response.codes)
        if not response.codes:
            answered.append(response.ok()["reportProgress"]["progress"])
        time.sleep(0.02)
    for _ in range(3):
        assert report(here, worker, job_id, attempt, 0.9).codes == ["CONFLICT"]
    assert wait_for_stored(here, job_id, answered[-1])[0] == answered[-1]


def test_a_held_report_is_dropped_once_the_job_is_claimed_again(
    two_servers: tuple[Server, Server], unique: Callable[[str], str]
) -> None:
    """Progress belongs to the attempt: a report held for attempt 1 is not stored on attempt 2."""
    here, there = two_servers
    worker = here.make_key(unique("worker"), "worker")
    job_id = enqueue(here, maxRetries=1)
    attempt = claim(here, worker, job_id)["attempt"]
    report(here, worker, job_id, attempt, 0.5).ok()
    report(here, worker, job_id, attempt, 0.9).ok()  # held by `here`
    there.gql(FAIL, {"id": job_id, "attempt": attempt}, key=worker).ok()
    assert claim(there, worker, job_id)["attempt"] == attempt + 1
    time.sleep(WINDOW_SECONDS * 3)
    assert stored(there, job_id)[:3] == (None, None, None)
