"""The Python client (`queuelog.client.Client` and `AsyncClient`) against a real server process.

Attacked: every producer/tool method of both clients (enqueue with its defaults, priority,
idempotency key and delay; enqueue_many; get; list over several pages with filters; cancel;
retry; stats), the URL forms they accept, and the mapping of contract refusals to one
exception family carrying `.code` (FORBIDDEN, BAD_USER_INPUT, NOT_FOUND, CONFLICT,
UNAUTHENTICATED). A server that is not listening must raise `ServerUnreachable`, never a raw
httpx exception, and the FORBIDDEN that a non-admin key gets for `Job.error` must come back
as `error=None`, not as an exception. Every behaviour runs through the sync `Client` and,
separately, through `AsyncClient` driven on an event loop of the test's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from conftest import Server, free_port

from queuelog.client import AsyncClient, Client, Data, Job, ServerUnreachable
from queuelog.errors import (
    BadInput,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    QueuelogError,
    Unauthenticated,
)
from queuelog.sdk.wire import PAGE_SIZE

# Jobs of this type are only ever created by `finish()`, which claims them at once, so a
# worker key's claim in this module never picks up another test's job.
WORKED_TYPE = "resize"
CLAIM = "mutation($types: [String!]) { claimJobs(limit: 100, types: $types) { id attempt } }"
COMPLETE = (
    "mutation($id: ID!, $attempt: Int) { completeJob(id: $id, attempt: $attempt, result: {n: 1}) { id } }"
)
FAIL = """mutation($id: ID!, $attempt: Int) {
  failJob(id: $id, attempt: $attempt, error: "disk full", retryable: false) { id status }
}"""


class AsyncFacade:
    """Drives an `AsyncClient` on a private event loop, so tests can call it like `Client`.

    The coroutines are awaited for real (nothing of `Client` is reused); `list` collects the
    async iterator into a list.
    """

    def __init__(self, url: str, key: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = self.run(self._make(url, key))

    @staticmethod
    async def _make(url: str, key: str) -> AsyncClient:
        return AsyncClient(url, key)

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coroutine)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.client, name)
        return lambda *args, **kwargs: self.run(method(*args, **kwargs))

    def list(self, status: str | None = None, type: str | None = None) -> list[Job]:
        async def collect() -> list[Job]:
            return [job async for job in self.client.list(status=status, type=type)]

        return self.run(collect())

    def close(self) -> None:
        self.run(self.client.aclose())
        self.loop.close()


Opener = Callable[..., Any]


@pytest.fixture(params=["sync", "async"])
def open_client(request: pytest.FixtureRequest, server: Server) -> Iterator[Opener]:
    """open_client(key, url=None) -> a Client, or an AsyncFacade over an AsyncClient."""
    opened: list[Any] = []

    def open_(key: str, url: str | None = None) -> Any:
        url = url or server.url
        client = Client(url, key) if request.param == "sync" else AsyncFacade(url, key)
        opened.append(client)
        return client

    yield open_
    for client in opened:
        client.close()


@pytest.fixture
def producer(server: Server, unique: Callable[[str], str], open_client: Opener) -> Any:
    """A client for a fresh PRODUCER key (maxPriority MEDIUM) that sees only its own jobs."""
    return open_client(server.make_key(unique("producer"), "producer"))


@pytest.fixture
def admin(server: Server, open_client: Opener) -> Any:
    return open_client(server.admin_key)


def finish(server: Server, job_id: str, worker_key: str, *, fail: bool = False) -> None:
    """Claim the one pending WORKED_TYPE job (it must be `job_id`) and complete or fail it."""
    claimed = server.gql(CLAIM, {"types": [WORKED_TYPE]}, key=worker_key).ok()["claimJobs"]
    assert [j["id"] for j in claimed] == [job_id], claimed
    server.gql(
        FAIL if fail else COMPLETE, {"id": job_id, "attempt": claimed[0]["attempt"]}, key=worker_key
    ).ok()


@pytest.fixture
def worker_key(server: Server, unique: Callable[[str], str]) -> str:
    return server.make_key(unique("worker"), "worker")


# --- enqueue ---------------------------------------------------------------------------------


def test_enqueue_defaults(producer: Any) -> None:
    before = datetime.now(UTC)
    job = producer.enqueue("email")
    assert isinstance(job, Job)
    assert (job.type, job.payload, job.priority, job.status) == ("email", {}, "LOW", "PENDING")
    assert (job.max_retries, job.retry_count, job.attempt) == (3, 0, 0)
    assert job.idempotency_key is None and job.worker_id is None and job.result is None
    assert job.error is None and job.finished_at is None and job.claimed_at is None
    assert job.id.isdigit()
    assert job.created_at.tzinfo is not None
    assert before - timedelta(seconds=5) <= job.run_at <= datetime.now(UTC) + timedelta(seconds=5)


def test_enqueue_with_every_argument(producer: Any) -> None:
    run_at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    job = producer.enqueue(
        "report", {"rows": [1, 2], "name": "zoë"}, priority="medium", max_retries=7, run_at=run_at
    )
    assert (job.payload, job.priority, job.max_retries) == ({"rows": [1, 2], "name": "zoë"}, "MEDIUM", 7)
    assert job.run_at == run_at
    fetched = producer.get(job.id)
    assert fetched == job


def test_naive_run_at_is_refused(producer: Any) -> None:
    """A naive datetime names a different moment in each time zone: refused, not guessed
    (it was taken as UTC once); so is an ISO string without an offset. An aware one or a
    string with an offset is taken (tests/documentation/test_newcomer_behaviour.py has every form)."""
    naive = datetime.now(UTC).replace(tzinfo=None, microsecond=0) + timedelta(minutes=30)
    with pytest.raises(ValueError, match="naive"):
        producer.enqueue("email", run_at=naive)
    with pytest.raises(ValueError, match="offset"):
        producer.enqueue("email", run_at=naive.isoformat())
    job = producer.enqueue("email", run_at=naive.isoformat() + "Z")
    assert job.run_at == naive.replace(tzinfo=UTC)


def test_idempotency_key_returns_the_same_job(producer: Any) -> None:
    first = producer.enqueue("email", {"to": "a@example.com"}, idempotency_key="welcome-a")
    again = producer.enqueue("email", {"to": "a@example.com"}, idempotency_key="welcome-a")
    assert again.id == first.id
    assert again.idempotency_key == "welcome-a"
    with pytest.raises(Conflict) as refused:
        producer.enqueue("email", {"to": "b@example.com"}, idempotency_key="welcome-a")
    assert refused.value.code == "CONFLICT"


def test_enqueue_many(producer: Any) -> None:
    kept = producer.enqueue("noop", idempotency_key="batch-kept")
    outcomes = producer.enqueue_many(
        [
            {"type": "email", "payload": {"i": 1}},
            {"type": "report", "priority": "MEDIUM", "max_retries": 0},
            {"type": "noop", "idempotency_key": "batch-kept"},
        ]
    )
    assert [o.created for o in outcomes] == [True, True, False]
    assert outcomes[2].job.id == kept.id
    assert (outcomes[0].job.type, outcomes[0].job.payload) == ("email", {"i": 1})
    assert (outcomes[1].job.priority, outcomes[1].job.max_retries) == ("MEDIUM", 0)
    assert len({o.job.id for o in outcomes}) == 3


def test_enqueue_many_is_all_or_nothing(producer: Any) -> None:
    with pytest.raises(BadInput):
        producer.enqueue_many([{"type": "email"}, {"type": "not-a-type"}])
    assert list(producer.list()) == []


# --- reading ---------------------------------------------------------------------------------


def test_get_returns_none_for_missing_and_invisible_jobs(
    server: Server, unique: Callable[[str], str], open_client: Opener, producer: Any
) -> None:
    other = open_client(server.make_key(unique("producer"), "producer"))
    theirs = other.enqueue("email")
    assert other.get(theirs.id) is not None
    assert producer.get(theirs.id) is None
    assert producer.get("999999999") is None


def test_list_follows_pages_and_filters(producer: Any) -> None:
    emails, reports = 150, 80
    assert emails + reports > 2 * PAGE_SIZE
    created = producer.enqueue_many(
        [{"type": "email", "payload": {"i": i}} for i in range(emails)]
        + [{"type": "report", "payload": {"i": i}} for i in range(reports)]
    )
    cancelled = {producer.cancel(o.job.id).id for o in created[:5]}

    everything = list(producer.list())
    ids = [int(job.id) for job in everything]
    assert len(ids) == len(set(ids)) == emails + reports
    assert ids == sorted(ids, reverse=True), "newest first"
    assert set(ids) == {int(o.job.id) for o in created}

    assert {j.id for j in producer.list(type="email")} == {o.job.id for o in created[:emails]}
    assert {j.id for j in producer.list(status="CANCELLED")} == cancelled
    pending_emails = list(producer.list(status="pending", type="email"))
    assert len(pending_emails) == emails - len(cancelled)
    assert all(j.status == "PENDING" and j.type == "email" for j in pending_emails)
    assert list(producer.list(type="resize")) == []


def test_stats_counts_the_callers_jobs(producer: Any) -> None:
    jobs = [producer.enqueue("email"), producer.enqueue("email"), producer.enqueue("noop")]
    producer.cancel(jobs[2].id)
    stats = producer.stats()
    assert stats.counts == {"pending": 2, "running": 0, "completed": 0, "failed": 0, "cancelled": 1}
    assert stats.by_type["email"]["pending"] == 2
    assert stats.by_type["noop"]["cancelled"] == 1
    assert stats.oldest_pending_seconds is not None and stats.oldest_pending_seconds >= 0


@pytest.mark.parametrize(
    "suffix", ["", "/", "/graphql", "/graphql/"], ids=["base", "slash", "graphql", "graphql-slash"]
)
def test_url_with_or_without_graphql(
    server: Server, unique: Callable[[str], str], open_client: Opener, suffix: str
) -> None:
    client = open_client(server.make_key(unique("producer"), "producer"), server.url + suffix)
    job = client.enqueue("noop")
    assert client.get(job.id) == job


# --- cancel and retry ------------------------------------------------------------------------


def test_cancel_a_pending_job(producer: Any) -> None:
    job = producer.enqueue("email")
    cancelled = producer.cancel(job.id)
    assert (cancelled.id, cancelled.status) == (job.id, "CANCELLED")
    assert cancelled.finished_at is not None
    assert producer.get(job.id).status == "CANCELLED"


def test_retry_brings_failed_and_cancelled_jobs_back(server: Server, admin: Any, worker_key: str) -> None:
    failed = admin.enqueue(WORKED_TYPE, priority="CRITICAL", max_retries=2)
    finish(server, failed.id, worker_key, fail=True)
    assert admin.get(failed.id).error == "disk full"
    retried = admin.retry(failed.id)
    assert (retried.status, retried.retry_count, retried.attempt) == ("PENDING", 0, 1)
    again = admin.retry(admin.cancel(retried.id).id)
    assert again.status == "PENDING"
    admin.cancel(again.id)  # leave no pending WORKED_TYPE job behind


# --- refusals --------------------------------------------------------------------------------


def test_priority_over_the_keys_maximum_is_forbidden(producer: Any) -> None:
    with pytest.raises(Forbidden) as refused:
        producer.enqueue("email", priority="HIGH")
    assert refused.value.code == "FORBIDDEN"
    assert "HIGH" in str(refused.value)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda c: c.enqueue("not-allowed"), id="type-not-allowed"),
        pytest.param(lambda c: c.enqueue("email", max_retries=26), id="max-retries"),
        pytest.param(lambda c: c.enqueue("email", idempotency_key=""), id="empty-idempotency-key"),
        pytest.param(lambda c: c.get("abc"), id="bad-id"),
    ],
)
def test_bad_input(producer: Any, call: Callable[[Any], Any]) -> None:
    with pytest.raises(BadInput) as refused:
        call(producer)
    assert refused.value.code == "BAD_USER_INPUT"


def test_oversized_payload_is_payload_too_large(producer: Any) -> None:
    # Only the payload limit (65536 bytes): a body over QUEUELOG_MAX_BODY_BYTES is answered
    # 413 before it is read, so the connection is often reset under the client's upload
    # and the client sees ServerUnreachable instead (a server-side issue, reported).
    with pytest.raises(PayloadTooLarge) as refused:
        producer.enqueue("email", {"blob": "x" * 70_000})
    assert refused.value.code == "PAYLOAD_TOO_LARGE"
    assert list(producer.list()) == []


def test_cancel_of_a_missing_job_is_not_found(producer: Any) -> None:
    with pytest.raises(NotFound) as refused:
        producer.cancel("987654321")
    assert refused.value.code == "NOT_FOUND"


def test_cancel_of_a_completed_job_is_a_conflict(server: Server, admin: Any, worker_key: str) -> None:
    job = admin.enqueue(WORKED_TYPE, priority="CRITICAL")
    finish(server, job.id, worker_key)
    assert admin.get(job.id).status == "COMPLETED"
    with pytest.raises(Conflict) as refused:
        admin.cancel(job.id)
    assert refused.value.code == "CONFLICT"
    assert admin.get(job.id).status == "COMPLETED"


@pytest.mark.parametrize(
    "role, call",
    [
        pytest.param("producer", lambda c, job: c.retry(job.id), id="producer-retry"),
        pytest.param("viewer", lambda c, job: c.enqueue("email"), id="viewer-enqueue"),
        pytest.param("viewer", lambda c, job: c.cancel(job.id), id="viewer-cancel"),
    ],
)
def test_role_refusals_are_forbidden(
    server: Server,
    unique: Callable[[str], str],
    open_client: Opener,
    admin: Any,
    role: str,
    call: Callable[[Any, Job], Any],
) -> None:
    job = admin.cancel(admin.enqueue("email").id)
    client = open_client(server.make_key(unique(role), role))
    with pytest.raises(Forbidden):
        call(client, job)


def test_retry_of_a_pending_job_is_a_conflict(admin: Any) -> None:
    job = admin.enqueue("email")
    with pytest.raises(Conflict):
        admin.retry(job.id)
    admin.cancel(job.id)


@pytest.mark.parametrize("key", ["ql_" + "x" * 40, "not-even-a-key"], ids=["unknown", "malformed"])
def test_bad_key_is_unauthenticated(open_client: Opener, key: str) -> None:
    client = open_client(key)
    with pytest.raises(Unauthenticated) as refused:
        client.enqueue("email")
    assert refused.value.code == "UNAUTHENTICATED"
    with pytest.raises(Unauthenticated):
        client.stats()


def test_revoked_key_is_unauthenticated(
    server: Server, unique: Callable[[str], str], open_client: Opener
) -> None:
    from queuelog import keys
    from queuelog.storage.engine import create_sync_engine

    name = unique("producer")
    client = open_client(server.make_key(name, "producer"))
    client.enqueue("email")
    engine = create_sync_engine(server.database_url)
    try:
        keys.revoke_key(engine, name)
    finally:
        engine.dispose()
    with pytest.raises(Unauthenticated):
        client.enqueue("email")


@pytest.mark.parametrize(
    "call",
    [lambda c: c.enqueue("email"), lambda c: c.get("1"), lambda c: list(c.list()), lambda c: c.stats()],
    ids=["enqueue", "get", "list", "stats"],
)
def test_server_not_listening_is_unreachable(open_client: Opener, call: Callable[[Any], Any]) -> None:
    key = "ql_" + "x" * 40
    client = open_client(key, f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ServerUnreachable) as refused:
        call(client)
    assert key not in str(refused.value)
    assert isinstance(refused.value, QueuelogError)
    assert not isinstance(refused.value, httpx.HTTPError)
    assert refused.value.code == "UNREACHABLE"


# --- Job.error for non-admins ----------------------------------------------------------------


def test_non_admin_sees_error_as_none_without_raising(
    server: Server, unique: Callable[[str], str], open_client: Opener, admin: Any, worker_key: str
) -> None:
    name = unique("producer")
    producer = open_client(server.make_key(name, "producer", max_priority="high"))
    job = producer.enqueue(WORKED_TYPE, priority="HIGH", max_retries=0)
    finish(server, job.id, worker_key, fail=True)

    assert admin.get(job.id).error == "disk full"
    seen = producer.get(job.id)
    assert (seen.status, seen.error) == ("FAILED", None)
    listed = list(producer.list(status="FAILED"))
    assert [(j.id, j.error) for j in listed] == [(job.id, None)]
    viewer = open_client(server.make_key(unique("viewer"), "viewer"))
    assert viewer.get(job.id).error is None
    assert producer.cancel(producer.enqueue("email").id).error is None


def test_execute_raises_every_error_but_the_withheld_error_fields(
    server: Server, unique: Callable[[str], str], open_client: Opener, admin: Any, worker_key: str
) -> None:
    producer = open_client(server.make_key(unique("producer"), "producer"))
    job = producer.enqueue(WORKED_TYPE, max_retries=0)
    finish(server, job.id, worker_key, fail=True)
    read = "query($id: ID!) { job(id: $id) { id status error attempts { attempt error } } }"

    data = producer.execute(read, {"id": job.id})
    assert data == {
        "job": {"id": job.id, "status": "FAILED", "error": None, "attempts": [{"attempt": 1, "error": None}]}
    }
    assert isinstance(data, dict) and data.refused == ("job.error", "job.attempts.0.error")
    assert isinstance(data, Data)
    seen = admin.execute(read, {"id": job.id})
    assert (seen["job"]["error"], seen["job"]["attempts"][0]["error"], seen.refused) == (
        "disk full",
        "disk full",
        (),
    )
    assert producer.execute("{ me { name } }").refused == ()

    # Any other error raises, even beside data: a field the role may not read, an unknown
    # field, a missing job behind a mutation, a bad argument.
    with pytest.raises(Forbidden):
        producer.execute("query($id: ID!) { job(id: $id) { id } schedules { name } }", {"id": job.id})
    with pytest.raises(QueuelogError):
        producer.execute("{ me { name noSuchField } }")
    with pytest.raises(NotFound):
        producer.execute('mutation { cancelJob(id: "987654321") { id error } }')
    with pytest.raises(BadInput):
        producer.execute('mutation { enqueueJob(input: {type: "sms"}) { job { id error } } }')


# --- AsyncClient specifics -------------------------------------------------------------------


def test_async_client_runs_calls_concurrently(server: Server, unique: Callable[[str], str]) -> None:
    key = server.make_key(unique("producer"), "producer")

    async def scenario() -> tuple[list[Job], list[Job]]:
        async with AsyncClient(server.url, key) as client:
            enqueued = await asyncio.gather(*(client.enqueue("noop", {"i": i}) for i in range(20)))
            listed = [job async for job in client.list(type="noop")]
            return list(enqueued), listed

    enqueued, listed = asyncio.run(scenario())
    assert sorted(j.payload["i"] for j in enqueued) == list(range(20))
    assert {j.id for j in listed} == {j.id for j in enqueued}
