"""What the tests of expiry, snooze and edits (API.md section 12) share: a pair of servers on
one database, each test's own keys and job types, the documents they send, and the checks
that a job ended once and the counters match the table.

On PostgreSQL the pair is two `queuelog serve` processes; on SQLite, two processes on one
file (its event tail carries each one's events to the other). A test talks to either.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import Databases, GraphQLResponse, Server, launch_server

from queuelog import keys as key_admin
from queuelog.model import Role
from queuelog.storage.engine import create_sync_engine

TYPES = [f"s{i:02d}" for i in range(60)]
_types = iter(TYPES)
_names = itertools.count(1)
DEADLINE = 30.0  # a wait that has not ended by then has hung; time never decides a pass

JOB_FIELDS = (
    "id type status priority maxRetries retryCount attempt workerId runAt expiresAt snoozeCount"
    " claimedAt finishedAt leaseExpiresAt idempotencyKey waitingFor"
)
ENQUEUE = f"""mutation($input: EnqueueJobInput!) {{
  enqueueJob(input: $input) {{ created job {{ {JOB_FIELDS} }} }} }}"""
ENQUEUE_MANY = f"""mutation($inputs: [EnqueueJobInput!]!) {{
  enqueueJobs(inputs: $inputs) {{ created job {{ {JOB_FIELDS} }} }} }}"""
CLAIM = f"""mutation($limit: Int!, $types: [String!], $wait: Int, $lease: Int) {{
  claimJobs(limit: $limit, types: $types, waitSeconds: $wait, leaseSeconds: $lease) {{ {JOB_FIELDS} }} }}"""
COMPLETE = "mutation($id: ID!, $attempt: Int) { completeJob(id: $id, attempt: $attempt) { id status } }"
FAIL = """mutation($id: ID!, $attempt: Int, $retryIn: Int, $retryable: Boolean! = true) {
  failJob(id: $id, error: "boom", attempt: $attempt, retryInSeconds: $retryIn, retryable: $retryable) {
    id status retryCount runAt } }"""
SNOOZE = f"""mutation($id: ID!, $attempt: Int!, $seconds: Int!) {{
  snoozeJob(id: $id, attempt: $attempt, seconds: $seconds) {{ {JOB_FIELDS} }} }}"""
UPDATE = f"""mutation($id: ID!, $input: UpdateJobInput!) {{
  updateJob(id: $id, input: $input) {{ {JOB_FIELDS} }} }}"""
RUN_NOW = f"mutation($id: ID!) {{ runJobNow(id: $id) {{ {JOB_FIELDS} }} }}"
JOB = f"""query($id: ID!) {{ job(id: $id) {{ {JOB_FIELDS} error events {{ kind status at }} }} }}"""
STATS = "{ queueStats { byType { type counts { pending running completed failed cancelled } } } }"
PAUSE = "mutation($type: String!) { pauseType(type: $type) { paused } }"
RESUME = "mutation($type: String!) { resumeType(type: $type) { paused } }"
CONTROL = "mutation($input: TypeControlInput!) { setTypeControl(input: $input) { type } }"

Job = dict[str, Any]


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def from_now(seconds: float) -> str:
    return iso(datetime.now(UTC) + timedelta(seconds=seconds))


def parse(value: str) -> datetime:
    return datetime.fromisoformat(value)


def refused(response: GraphQLResponse, code: str, *words: str) -> None:
    """The operation was refused with `code`, its message naming each of `words`."""
    assert response.codes == [code], response.body
    assert response.data is None, response.body
    message = response.errors[0]["message"]
    for word in words:
        assert word in message, (word, message)


def wait_until(check: Callable[[], Any], what: str, deadline: float = DEADLINE) -> Any:
    """`check()`'s first true answer, asked every 50 ms; fails after `deadline` seconds."""
    end = time.monotonic() + deadline
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > end:
            raise AssertionError(f"still not {what} after {deadline} s")
        time.sleep(0.05)


@dataclass
class Pair:
    """Two servers on one database, and the admin key both accept."""

    servers: tuple[Server, Server]
    admin_key: str

    @property
    def first(self) -> Server:
        return self.servers[0]

    def key(self, *roles: str, max_priority: str | None = None) -> str:
        return self.first.make_key(f"{roles[0].lower()}-{next(_names)}", *roles, max_priority=max_priority)


def start_pair(databases: Databases, tmp: pytest.TempPathFactory, **settings: Any) -> Pair:
    """Two servers on a fresh migrated database (the admin key made first, so that no two
    servers race to make it), allowing TYPES."""
    url = databases.migrated()
    engine = create_sync_engine(url)
    try:
        _, admin_key = key_admin.create_key(engine, "admin", [Role.ADMIN])
    finally:
        engine.dispose()
    settings.setdefault("job_types", ",".join(TYPES))
    started: list[Server] = []
    try:
        for _ in range(2):
            started.append(
                launch_server(tmp.mktemp("server"), database_url=url, admin_key=admin_key, **settings)
            )
    except BaseException:
        for server in started:
            server.stop()
        raise
    return Pair((started[0], started[1]), admin_key)


@dataclass
class Kit:
    """One test's view of a server (or a pair): its own keys and job types."""

    server: Server
    producer: str
    worker: str
    admin: str

    @classmethod
    def on(cls, server: Server) -> Kit:
        return cls(
            server,
            server.make_key(f"producer-{next(_names)}", "PRODUCER"),
            server.make_key(f"worker-{next(_names)}", "WORKER"),
            server.admin_key,
        )

    def key(self, *roles: str, max_priority: str | None = None) -> str:
        """A new key of these roles, under a name no other test uses."""
        name = f"{roles[0].lower()}-{next(_names)}"
        return self.server.make_key(name, *roles, max_priority=max_priority)

    @staticmethod
    def type() -> str:
        """A job type no other test of the session's module uses."""
        return next(_types)

    def gql(self, query: str, variables: dict[str, Any] | None = None, key: str | None = None) -> Any:
        return self.server.gql(query, variables, key=key).ok()

    def try_enqueue(self, job_type: str, key: str | None = None, **fields: Any) -> GraphQLResponse:
        return self.server.gql(ENQUEUE, {"input": {"type": job_type, **fields}}, key=key or self.producer)

    def enqueue(self, job_type: str, key: str | None = None, **fields: Any) -> Job:
        return self.try_enqueue(job_type, key, **fields).ok()["enqueueJob"]["job"]

    def claim(self, job_type: str, limit: int = 1, key: str | None = None, **more: Any) -> list[Job]:
        variables = {"limit": limit, "types": [job_type], **more}
        return self.gql(CLAIM, variables, key=key or self.worker)["claimJobs"]

    def claim_one(self, job_type: str, key: str | None = None) -> Job:
        (job,) = self.claim(job_type, key=key)
        return job

    def complete(self, job: Job, key: str | None = None) -> Job:
        variables = {"id": job["id"], "attempt": job["attempt"]}
        return self.gql(COMPLETE, variables, key=key or self.worker)["completeJob"]

    def try_snooze(self, job: Job, seconds: int, key: str | None = None, attempt: int | None = None) -> Any:
        variables = {
            "id": job["id"],
            "attempt": job["attempt"] if attempt is None else attempt,
            "seconds": seconds,
        }
        return self.server.gql(SNOOZE, variables, key=key or self.worker)

    def try_update(self, job_id: str, key: str | None = None, **fields: Any) -> GraphQLResponse:
        return self.server.gql(UPDATE, {"id": job_id, "input": fields}, key=key or self.producer)

    def try_run_now(self, job_id: str, key: str | None = None) -> GraphQLResponse:
        return self.server.gql(RUN_NOW, {"id": job_id}, key=key or self.producer)

    def job(self, job_id: str) -> Job:
        """The job as an ADMIN sees it, its error and events with it."""
        return self.gql(JOB, {"id": job_id}, key=self.admin)["job"]

    def kinds(self, job_id: str) -> list[str]:
        return [event["kind"] for event in self.job(job_id)["events"]]

    def expired(self, job_id: str) -> bool:
        return self.job(job_id)["status"] == "CANCELLED"


def counts_match_the_table(server: Server, types: list[str]) -> dict[str, dict[str, int]]:
    """queueStats' counts of these types, checked equal to the jobs table's."""
    stats = server.gql(STATS).ok()["queueStats"]["byType"]
    answered = {entry["type"]: entry["counts"] for entry in stats if entry["type"] in types}
    rows = server.sql(
        "SELECT type, status, count(*) FROM jobs WHERE type IN :types GROUP BY type, status", types=types
    )
    table: dict[str, dict[str, int]] = {}
    for job_type, status, n in rows:
        table.setdefault(
            job_type, dict.fromkeys(("pending", "running", "completed", "failed", "cancelled"), 0)
        )
        table[job_type][status] = n
    assert answered == table, (answered, table)
    return table


def events_of(server: Server, job_ids: list[str]) -> dict[str, list[tuple[str, str]]]:
    """Every job's recorded events (kind, status), oldest first, read from the table."""
    rows = server.sql(
        "SELECT job_id, kind, status FROM job_events WHERE job_id IN :ids ORDER BY id",
        ids=[int(i) for i in job_ids],
    )
    found: dict[str, list[tuple[str, str]]] = {job_id: [] for job_id in job_ids}
    for job_id, kind, status in rows:
        found[str(job_id)].append((kind, status))
    return found


def pairs(databases: Databases, tmp: pytest.TempPathFactory, **settings: Any) -> Iterator[Pair]:
    """A Pair for one test, both servers stopped after (fixture body)."""
    pair = start_pair(databases, tmp, **settings)
    try:
        yield pair
    finally:
        for server in pair.servers:
            server.stop()
