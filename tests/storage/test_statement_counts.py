"""How many SQL statements each GraphQL operation runs, so that an N+1 can never come back.

The app runs in process (httpx over ASGI, lifespan driven by hand) on a real, migrated
SQLite file. Every statement either of the server's two connections (the group-commit
writer and the reader, both stdlib sqlite3) runs during one request is recorded, and each
operation's count is pinned in EXPECTED below. The counts must not grow with the batch
size (1, 10, 100) nor with the number of jobs in the table: the whole scenario runs twice,
on a fresh table and again after a few thousand more jobs in every status, and both runs
must give the pinned counts.

How statements are counted
--------------------------
- `Connection.set_trace_callback` on both connections reports each statement as SQLite
  starts it (SQLITE_TRACE_STMT), with its parameters expanded into the text.
- CPython's sqlite3 fires that callback once per row of an `executemany` (the statement is
  reset and stepped again for every parameter set), and once more per trigger subprogram
  of a statement, repeating the outer statement's text. Neither is a separate statement
  sent by queuelog, and their texts differ row by row (expanded parameters), so texts alone
  cannot tell an `executemany` of N rows from an N+1 loop of `execute`. While recording,
  a profile hook (`sys.setprofile`, which sees calls into C functions) therefore notes each
  call of `execute`/`executemany` on one of the two connections: every trace event inside
  one such call is one statement (its `rows` say how many times SQLite ran it). A loop of
  N `execute` calls is N calls, hence N statements, which is exactly what must be caught.
- Transaction control (BEGIN, SAVEPOINT, RELEASE, ROLLBACK TO, ROLLBACK, COMMIT) is counted
  apart from data statements: the group-commit writer wraps every write request in
  BEGIN IMMEDIATE, SAVEPOINT op, ..., RELEASE op (+ ROLLBACK TO op on a refusal), COMMIT;
  a read of several statements runs inside BEGIN ... COMMIT on the reader.
- Every authenticated request reads the keys generation (one data statement, on the reader,
  outside any transaction); principals are cached, so a key's lookup shows only on its first
  request (see "me (a key's first request)"). Counts include that read.
- Background loops (lease expiry, job expiry, pruning, the schedule ticker) are given an hour-long
  interval, the event tail is off (QUEUELOG_EVENT_FEED=local; with it, each commit also
  reads sqlite_sequence twice to learn its event ids) and the writer is idle before each
  measured request, so nothing else runs while one is recorded.

An assertion that fails prints the statements that ran, labelled by kind and table.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import re
import sqlite3
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from queuelog import ticker
from queuelog.app import QueuelogApp, State, create_app
from queuelog.keys import create_key
from queuelog.model import Role
from queuelog.progress import WINDOW_SECONDS
from queuelog.resolvers.ids import encode_cursor
from queuelog.settings import Settings
from queuelog.storage.engine import create_sync_engine
from queuelog.storage.migrate import upgrade_to_head
from queuelog.storage.sqlite.database import SqliteDatabase

JOB_TYPES = ("email", "report", "noop", "idle")  # nothing ever enqueues "idle"
FILLER_JOBS = 3000
HOUR = 3600

# --- the pinned counts -------------------------------------------------------------------------------
#
# (transaction control, data statements) per operation. Abbreviations in the comments:
#   gen    = SELECT generation FROM key_state (every request with a key: principals are cached)
#   write  = the group commit: BEGIN IMMEDIATE, SAVEPOINT op, ..., RELEASE op, COMMIT (4 control)
#   refuse = BEGIN IMMEDIATE, SAVEPOINT op, ..., ROLLBACK TO op, RELEASE op, COMMIT (5 control)
#   read   = BEGIN ... COMMIT on the reader (2 control)
#   effects = INSERT job_events (one executemany) + upsert job_counts (one executemany),
#            written once per commit after the operations, when some job changed state
#   finish = upsert job_minutes (one executemany), when some job became COMPLETED or FAILED
EXPECTED: dict[str, tuple[int, int]] = {
    # gen
    "me": (0, 1),
    # gen, SELECT api_keys (the key is not cached yet)
    "me (a key's first request)": (0, 2),
    # gen, SELECT api_keys: unknown keys are never cached; 401
    "unknown key": (0, 2),
    # gen; read: SELECT jobs by id
    "job": (2, 2),
    "job (another producer's: null)": (2, 2),
    "job (missing: null)": (2, 2),
    # gen; read: SELECT job_counts (totalCount, and which index to walk), SELECT jobs page
    # (LIMIT first+1) unless the counters say nothing matches: a worker holds no PENDING job.
    **{
        f"jobs[{who}{filters}]": (2, 2 if who == "worker" and "status" in filters else 3)
        for who in ("admin", "producer", "worker", "producer+worker")
        for filters in (
            "",
            ", status",
            ", type",
            ", status, type",
            ", after",
            ", status, after",
            ", type, after",
            ", status, type, after",
        )
    },
    # the same: job_counts is read although totalCount is not selected
    "jobs (totalCount not selected)": (2, 3),
    # the same, then one read of job_events for every Job.events of the page, however many
    # jobs it holds and however many aliases ask (issue 14: batched, not one read per job)
    **{f"jobs with events x{size}": (4, 4) for size in (1, 10, 100)},
    # gen; read: SELECT jobs by id; read: SELECT job_events (the attempts)
    "job with attempts": (4, 3),
    # as jobs with events: one read of job_events for every Job.attempts of the page
    **{f"jobs with attempts x{size}": (4, 4) for size in (1, 10, 100)},
    # gen; read: SELECT job_counts, SELECT type_controls (paused types do not count in the
    # lag), SELECT each pending type's head run_at (ix_jobs_lag, ix_jobs_delayed)
    "queueStats[admin]": (2, 4),
    "queueStats[producer]": (2, 4),
    # gen; read: SELECT job_counts (a worker has no PENDING jobs: no oldest-pending read)
    "queueStats[worker]": (2, 2),
    "queueStats[producer+worker]": (2, 4),
    # gen; write: INSERT jobs; effects
    "enqueueJob": (4, 4),
    "enqueueJob (through Strawberry)": (4, 4),
    # gen; write: INSERT jobs ON CONFLICT DO NOTHING; effects
    "enqueueJob (idempotency key)": (4, 4),
    # gen; write: INSERT jobs ON CONFLICT DO NOTHING (no row), SELECT jobs by key; nothing changed
    "enqueueJob (idempotency key, replay)": (4, 3),
    # gen; refuse: INSERT ON CONFLICT DO NOTHING (no row), SELECT jobs by key -> CONFLICT
    "enqueueJob (idempotency key, conflict)": (5, 3),
    # gen; write: INSERT jobs; effects (a batch of one takes the single-row path)
    "enqueueJobs x1": (4, 4),
    # gen; write: SELECT sqlite_sequence, INSERT jobs (one executemany), SELECT sqlite_sequence;
    # effects
    "enqueueJobs x10": (4, 6),
    "enqueueJobs x100": (4, 6),
    # x1: gen; write: INSERT jobs ON CONFLICT DO NOTHING; effects.
    # x10, x100: gen; write: SELECT the keys already used, SELECT sqlite_sequence, INSERT jobs
    # (one executemany), SELECT sqlite_sequence; effects
    "enqueueJobs with idempotency keys x1": (4, 4),
    "enqueueJobs with idempotency keys x10": (4, 7),
    "enqueueJobs with idempotency keys x100": (4, 7),
    # gen; write: SELECT overdue (leases and timeouts), SELECT job_counts (a claim of any
    # type: which types have PENDING jobs), UPDATE jobs (make due delayed jobs ready),
    # SELECT type_controls, UPDATE jobs ... RETURNING (the claim, one statement for types
    # without controls); effects
    "claimJob": (4, 8),
    # the same without the counters' read: the types are given
    "claimJob (types)": (4, 7),
    # gen; write: SELECT overdue, UPDATE (promote), SELECT type_controls, UPDATE jobs (no row)
    "claimJob (nothing due)": (4, 5),
    "claimJobs x1": (4, 8),
    "claimJobs x10": (4, 8),
    "claimJobs x100": (4, 8),
    "claimJobs (types) x10": (4, 7),
    # the same, plus one executemany UPDATE of the expired leases
    "claimJob after 1 expired lease": (4, 9),
    "claimJob after 10 expired leases": (4, 9),
    # the claim of a job that reported progress in an earlier attempt: the claim's own
    # UPDATE resets it, no statement more
    "claimJob (types, resets progress)": (4, 7),
    # gen; write: UPDATE jobs ... RETURNING (no event, no counter moves)
    "heartbeatJob": (4, 2),
    # gen; write: UPDATE jobs ... RETURNING: a heartbeat's (its event is not stored)
    "reportProgress": (4, 2),
    # gen: checked against the job as the window's store found it (no event of it since);
    # held, stored when the window ends
    "reportProgress (within the window)": (0, 1),
    # gen; refuse: UPDATE jobs (no row), SELECT jobs by id to say why -> NOT_FOUND
    "heartbeatJob (missing)": (5, 3),
    # gen; write: UPDATE jobs ... RETURNING; effects; finish
    "completeJob": (4, 5),
    # gen; refuse: UPDATE jobs (no row), SELECT jobs by id -> CONFLICT
    "completeJob (not held)": (5, 3),
    # gen; write: SELECT jobs by ids (json_each), UPDATE jobs (one executemany); effects; finish
    "completeJobs x1": (4, 6),
    "completeJobs x10": (4, 6),
    "completeJobs x100": (4, 6),
    "completeJobs x10, 2 rejected": (4, 6),
    "completeJobs x100, 2 rejected": (4, 6),
    # gen; write: SELECT jobs by ids; every item rejected, nothing changed
    "completeJobs x1, rejected": (4, 2),
    # gen; write: SELECT jobs by id, UPDATE jobs ... RETURNING; effects
    "failJob (retryable)": (4, 5),
    "failJob (final)": (4, 6),  # and finish
    # gen; write: SELECT jobs by id, UPDATE jobs ... RETURNING; effects
    "cancelJob": (4, 5),
    # gen; refuse: SELECT jobs by id -> CONFLICT
    "cancelJob (not pending)": (5, 2),
    # gen; write: SELECT jobs by id, UPDATE jobs ... RETURNING; the event (no counter moves)
    "cancelJob (running)": (4, 4),
    # gen; write: SELECT jobs by id, UPDATE jobs ... RETURNING; effects (CANCELLED: no finish)
    "failJob (cancel requested)": (4, 5),
    # gen; write: SELECT jobs by id, UPDATE jobs ... RETURNING; effects
    "retryJob": (4, 5),
    # no key, so gen (has a type been added or removed?); read: queueStats's (SELECT
    # job_counts, type_controls, each type's head run_at); read: typeControls (SELECT
    # type_controls, job_counts) for the per-type samples; read: SELECT schedules
    # (queuelog_schedules_broken)
    "GET /metrics": (6, 7),
}

# --- counting ------------------------------------------------------------------------------------------

CONTROL = re.compile(r"\s*(BEGIN|SAVEPOINT|RELEASE|ROLLBACK|COMMIT|END)\b", re.IGNORECASE)
SQL_CALLS = frozenset({"execute", "executemany"})


@dataclass
class Statement:
    connection: str  # "writer" or "reader"
    sql: str  # as SQLite first reported it, parameters expanded
    call: int | None  # the execute/executemany call it came from
    rows: int = 1  # how many times SQLite ran it (rows of an executemany, trigger programs)

    @property
    def control(self) -> bool:
        return CONTROL.match(self.sql) is not None

    @property
    def kind(self) -> str:
        """What it is, without its values: "BEGIN IMMEDIATE", "UPDATE jobs", "SELECT key_state"..."""
        text = " ".join(self.sql.split())
        if self.control:
            words = text.split()
            if words[0].upper() == "ROLLBACK" and len(words) > 2 and words[1].upper() == "TO":
                return " ".join(words[:3])
            return " ".join(words[:2]) if words[0].upper() in ("BEGIN", "SAVEPOINT", "RELEASE") else words[0]
        if found := re.match(r"(INSERT INTO|UPDATE|DELETE FROM)\s+(\w+)", text, re.IGNORECASE):
            kind = f"{found.group(1).split()[0].upper()} {found.group(2)}"
            return kind + " ON CONFLICT" if "ON CONFLICT" in text.upper() else kind
        if found := re.search(r"\bFROM\s+(\w+)", text, re.IGNORECASE):
            return f"SELECT {found.group(1)}"
        return text[:40]

    @property
    def label(self) -> str:
        rows = f" ({self.rows} runs)" if self.rows > 1 else ""
        return f"{self.connection}: {self.kind}{rows}"


@dataclass
class Measured:
    statements: list[Statement]

    @property
    def counts(self) -> tuple[int, int]:
        control = sum(1 for s in self.statements if s.control)
        return control, len(self.statements) - control

    def describe(self) -> str:
        return "\n".join(f"  {s.label}" for s in self.statements)


class StatementLog:
    """Records the statements of both connections while `record()` is open."""

    def __init__(self, writer: sqlite3.Connection, reader: sqlite3.Connection) -> None:
        self._names = {id(writer): "writer", id(reader): "reader"}
        self._call_ids = itertools.count(1)
        self._call: int | None = None
        self._recording: list[Statement] | None = None
        writer.set_trace_callback(functools.partial(self._traced, "writer"))
        reader.set_trace_callback(functools.partial(self._traced, "reader"))

    def _is_sql_call(self, function: Any) -> bool:
        owner = getattr(function, "__self__", None)
        return getattr(function, "__name__", None) in SQL_CALLS and id(owner) in self._names

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "c_call" and self._is_sql_call(arg):
            self._call = next(self._call_ids)
        elif event in ("c_return", "c_exception") and self._is_sql_call(arg):
            self._call = None

    def _traced(self, connection: str, sql: str) -> None:
        recording = self._recording
        if recording is None:
            return
        if self._call is not None and recording and recording[-1].call == self._call:
            recording[-1].rows += 1  # the next row of one executemany, or a trigger program
            return
        recording.append(Statement(connection, sql, self._call))

    @contextlib.contextmanager
    def record(self) -> Iterator[list[Statement]]:
        statements: list[Statement] = []
        previous = sys.getprofile()
        self._recording = statements
        sys.setprofile(self._profile)
        try:
            yield statements
        finally:
            sys.setprofile(previous)
            self._recording = None
            self._call = None


def test_the_counting_itself(tmp_path: Path) -> None:
    """An executemany of N rows is one statement; N execute calls are N; triggers add none."""
    writer = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    reader = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    writer.execute("CREATE TABLE t (a INTEGER)")
    writer.execute("CREATE TABLE audit (a INTEGER)")
    writer.execute("CREATE TRIGGER tr AFTER INSERT ON t BEGIN INSERT INTO audit VALUES (new.a); END")
    log = StatementLog(writer, reader)
    with log.record() as statements:
        writer.execute("BEGIN")
        writer.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(50)])
        for i in range(3):
            writer.execute("INSERT INTO t VALUES (?)", (i,))
        writer.execute("COMMIT")
        reader.execute("SELECT count(*) FROM t").fetchone()
    measured = Measured(statements)
    assert measured.counts == (2, 5), measured.describe()
    # SQLite reports each row three times here: the statement and its trigger's programs.
    assert statements[1].rows == 150
    assert [s.label for s in statements] == [
        "writer: BEGIN",
        "writer: INSERT t (150 runs)",
        "writer: INSERT t (3 runs)",
        "writer: INSERT t (3 runs)",
        "writer: INSERT t (3 runs)",
        "writer: COMMIT",
        "reader: SELECT t",
    ]
    writer.close()
    reader.close()


# --- the app in process --------------------------------------------------------------------------------

ROLES = {
    "admin": [Role.ADMIN],
    "producer": [Role.PRODUCER],
    "other-producer": [Role.PRODUCER],
    "worker": [Role.WORKER],
    "filler": [Role.WORKER],
    "producer+worker": [Role.PRODUCER, Role.WORKER],
}
ROLE_KEY_NAMES = {role: role.replace("+", "-and-") for role in ROLES}

JOB_FIELDS = (
    "id type payload priority status retryCount maxRetries attempt idempotencyKey workerId claimedAt"
    " leaseExpiresAt runAt finishedAt result createdAt updatedAt"
)
ME = "query { me { name roles maxPriority } }"
JOB = f"query($id: ID!) {{ job(id: $id) {{ {JOB_FIELDS} }} }}"
JOBS = (
    "query($status: JobStatus, $type: String, $first: Int!, $after: String) {"
    " jobs(status: $status, type: $type, first: $first, after: $after) {"
    " totalCount pageInfo { hasNextPage endCursor } edges { cursor node { id status } } } }"
)
JOBS_WITHOUT_TOTAL = "query { jobs(first: 20) { nodes { id status } } }"
JOBS_WITH_EVENTS = (
    "query($first: Int!) { jobs(first: $first) { nodes { id"
    " a: events(last: 100) { kind status at } b: events(last: 1) { kind } c: events { kind } } } }"
)
QUEUE_STATS = (
    "query { queueStats { counts { pending running completed failed cancelled }"
    " byType { type counts { pending running completed failed cancelled } } oldestPendingSeconds } }"
)
ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { created job { id status } } }"
ENQUEUE_BY_FRAGMENT = (  # a fragment: not a compiled plan, Strawberry runs it
    "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { ...Made } }"
    " fragment Made on EnqueueJobPayload { created job { id } }"
)
ENQUEUE_MANY = (
    "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { created job { id } } }"
)
CLAIM = f"mutation($types: [String!]) {{ claimJob(types: $types) {{ {JOB_FIELDS} }} }}"
JOB_WITH_ATTEMPTS = (
    "query($id: ID!) { job(id: $id) { id attempts { attempt workerId claimedAt finishedAt outcome error } } }"
)
JOBS_WITH_ATTEMPTS = (
    "query($first: Int!) { jobs(first: $first) { nodes { id"
    " a: attempts(last: 100) { attempt outcome } b: attempts(last: 1) { attempt } } } }"
)
REPORT = (
    "mutation($id: ID!, $attempt: Int!, $progress: Float!) {"
    " reportProgress(id: $id, attempt: $attempt, progress: $progress) { id progress } }"
)
CLAIM_MANY = (
    "mutation($limit: Int!, $types: [String!]) { claimJobs(limit: $limit, types: $types) { id attempt } }"
)
HEARTBEAT = (
    "mutation($id: ID!, $attempt: Int) { heartbeatJob(id: $id, attempt: $attempt) { id leaseExpiresAt } }"
)
COMPLETE = (
    "mutation($id: ID!, $attempt: Int, $result: JSON) {"
    " completeJob(id: $id, attempt: $attempt, result: $result) { id status } }"
)
COMPLETE_MANY = (
    "mutation($items: [CompleteJobInput!]!) {"
    " completeJobs(items: $items) { completed { id status } rejected } }"
)
FAIL = (
    "mutation($id: ID!, $retryable: Boolean!, $attempt: Int) {"
    ' failJob(id: $id, error: "boom", retryable: $retryable, attempt: $attempt) { id status } }'
)
CANCEL = "mutation($id: ID!) { cancelJob(id: $id) { id status } }"
RETRY = "mutation($id: ID!) { retryJob(id: $id) { id status } }"
MISSING_ID = "987654321"


def state_of(app: QueuelogApp) -> State:
    return app.state


class Api:
    """Requests to the in-process app; `measure` records one request's statements."""

    def __init__(self, client: httpx.AsyncClient, db: SqliteDatabase, keys: dict[str, str]) -> None:
        self.client = client
        self.db = db
        self.keys = keys
        self.log = StatementLog(db._writer, db._reader)
        self.results: dict[str, Measured] = {}

    async def post(self, key: str, query: str, variables: dict[str, Any] | None = None) -> httpx.Response:
        return await self.client.post(
            "/graphql",
            json={"query": query, "variables": variables or {}},
            headers={"Authorization": f"Bearer {key}"},
        )

    async def ok(self, who: str, query: str, variables: dict[str, Any] | None = None) -> Any:
        response = await self.post(self.keys[who], query, variables)
        body = response.json()
        assert response.status_code == 200 and not body.get("errors"), body
        return body["data"]

    async def measure(
        self,
        name: str,
        who: str,
        query: str,
        variables: dict[str, Any] | None = None,
        *,
        code: str | None = None,
    ) -> Any:
        await self.db._idle.wait()
        with self.log.record() as statements:
            response = await self.post(self.keys.get(who, who), query, variables)
        body = response.json()
        if code is None:
            assert response.status_code == 200 and not body.get("errors"), (name, body)
        else:
            codes = [e.get("extensions", {}).get("code") for e in body.get("errors", [])]
            assert codes == [code], (name, body)
        assert name not in self.results, name
        self.results[name] = Measured(statements)
        return body.get("data")

    async def measure_get(self, name: str, path: str) -> None:
        await self.db._idle.wait()
        with self.log.record() as statements:
            response = await self.client.get(path)
        assert response.status_code == 200, response.text
        self.results[name] = Measured(statements)

    # --- unmeasured steps ---

    async def enqueue(self, who: str, count: int, job_type: str = "noop", **extra: Any) -> list[str]:
        inputs = [{"type": job_type, "payload": {"n": n}, **extra} for n in range(count)]
        made: list[str] = []
        for start in range(0, count, 1000):
            data = await self.ok(who, ENQUEUE_MANY, {"inputs": inputs[start : start + 1000]})
            made += [item["job"]["id"] for item in data["enqueueJobs"]]
        return made

    async def claim(
        self, count: int, who: str = "worker", types: list[str] | None = None
    ) -> list[dict[str, Any]]:
        held: list[dict[str, Any]] = []
        while len(held) < count:
            limit = min(100, count - len(held))
            held += (await self.ok(who, CLAIM_MANY, {"limit": limit, "types": types}))["claimJobs"]
        assert len(held) == count
        return held


def expire_leases_of(database: Path, job_ids: list[str]) -> None:
    """Move these RUNNING jobs' leases into the past, as if their workers had died long ago."""
    with contextlib.closing(sqlite3.connect(database, isolation_level=None, timeout=30)) as conn:
        marks = ",".join("?" * len(job_ids))
        conn.execute(f"UPDATE jobs SET lease_expires_at = 1 WHERE id IN ({marks})", [int(i) for i in job_ids])


def progress_of(database: Path, job_ids: list[str], progress: float) -> None:
    """Give these jobs progress, as a report of an earlier attempt leaves it."""
    with contextlib.closing(sqlite3.connect(database, isolation_level=None, timeout=30)) as conn:
        marks = ",".join("?" * len(job_ids))
        conn.execute(f"UPDATE jobs SET progress = ? WHERE id IN ({marks})", [progress, *map(int, job_ids)])


def read_progress(database: Path, job_id: str) -> float | None:
    with contextlib.closing(sqlite3.connect(database, isolation_level=None, timeout=30)) as conn:
        (progress,) = conn.execute("SELECT progress FROM jobs WHERE id = ?", (int(job_id),)).fetchone()
    return progress


async def one_pass(api: Api, tag: str, database: Path, engine: Any) -> None:
    """Every operation once (most on data made just before, unmeasured), recorded in api.results."""
    await api.enqueue("producer", 500)
    await api.enqueue("other-producer", 5, "email")
    await api.enqueue("producer+worker", 5, "report")
    await api.claim(3, "producer+worker")
    # Every key measured below sees an "email" job, in both passes, so that each of its
    # pages is read (list_jobs skips the read when the counters say nothing matches).
    await api.enqueue("producer+worker", 1, "email")
    await api.enqueue("other-producer", 1, "email")
    await api.claim(1, "worker", ["email"])

    # --- queries ---
    await api.measure("me", "admin", ME)
    name = f"fresh-{tag}"
    _, fresh_key = create_key(engine, name, [Role.VIEWER])
    api.keys[name] = fresh_key
    await api.measure("me (a key's first request)", name, ME)
    await api.measure("unknown key", "ql_" + "x" * 43, ME, code="UNAUTHENTICATED")

    own = await api.enqueue("producer", 1, "email")
    others = await api.enqueue("other-producer", 1, "email")
    await api.measure("job", "admin", JOB, {"id": own[0]})
    hidden = await api.measure("job (another producer's: null)", "producer", JOB, {"id": others[0]})
    assert hidden["job"] is None
    await api.measure("job (missing: null)", "admin", JOB, {"id": MISSING_ID})

    for who in ("admin", "producer", "worker", "producer+worker"):
        for status, job_type in ((None, None), ("PENDING", None), (None, "email"), ("PENDING", "email")):
            filters = "".join(
                f", {f}" for f, value in (("status", status), ("type", job_type)) if value is not None
            )
            variables = {"status": status, "type": job_type, "first": 5, "after": None}
            page = await api.measure(f"jobs[{who}{filters}]", who, JOBS, variables)
            cursor = page["jobs"]["pageInfo"]["endCursor"] or encode_cursor(10**9)
            await api.measure(f"jobs[{who}{filters}, after]", who, JOBS, {**variables, "after": cursor})
    await api.measure("jobs (totalCount not selected)", "admin", JOBS_WITHOUT_TOTAL)
    for size in (1, 10, 100):
        page = await api.measure(f"jobs with events x{size}", "admin", JOBS_WITH_EVENTS, {"first": size})
        nodes = page["jobs"]["nodes"]
        assert len(nodes) == size
        for node in nodes:
            assert node["a"] and [{"kind": e["kind"]} for e in node["a"]] == node["c"]
            assert node["b"] == [{"kind": node["a"][-1]["kind"]}]
    await api.measure("job with attempts", "admin", JOB_WITH_ATTEMPTS, {"id": own[0]})
    for size in (1, 10, 100):
        page = await api.measure(f"jobs with attempts x{size}", "admin", JOBS_WITH_ATTEMPTS, {"first": size})
        assert len(page["jobs"]["nodes"]) == size
    for who in ("admin", "producer", "worker", "producer+worker"):
        await api.measure(f"queueStats[{who}]", who, QUEUE_STATS)

    # --- enqueue ---
    plain = {"type": "email", "payload": {"to": "a@example.com"}}
    await api.measure("enqueueJob", "producer", ENQUEUE, {"input": plain})
    await api.measure("enqueueJob (through Strawberry)", "producer", ENQUEUE_BY_FRAGMENT, {"input": plain})
    keyed = {**plain, "idempotencyKey": f"once-{tag}"}
    made = await api.measure("enqueueJob (idempotency key)", "producer", ENQUEUE, {"input": keyed})
    assert made["enqueueJob"]["created"] is True
    again = await api.measure("enqueueJob (idempotency key, replay)", "producer", ENQUEUE, {"input": keyed})
    assert again["enqueueJob"] == {**made["enqueueJob"], "created": False}
    different = {**keyed, "payload": {"to": "b@example.com"}}
    await api.measure(
        "enqueueJob (idempotency key, conflict)", "producer", ENQUEUE, {"input": different}, code="CONFLICT"
    )
    for size in (1, 10, 100):
        inputs = [{"type": "noop", "payload": {"n": n}} for n in range(size)]
        data = await api.measure(f"enqueueJobs x{size}", "producer", ENQUEUE_MANY, {"inputs": inputs})
        assert len(data["enqueueJobs"]) == size
        inputs = [{**item, "idempotencyKey": f"{tag}-{size}-{n}"} for n, item in enumerate(inputs)]
        name = f"enqueueJobs with idempotency keys x{size}"
        data = await api.measure(name, "producer", ENQUEUE_MANY, {"inputs": inputs})
        assert all(item["created"] for item in data["enqueueJobs"]) and len(data["enqueueJobs"]) == size

    # --- claims ---
    assert (await api.measure("claimJob", "worker", CLAIM))["claimJob"] is not None
    claimed = await api.measure("claimJob (types)", "worker", CLAIM, {"types": ["email"]})
    assert claimed["claimJob"]["type"] == "email"
    nothing = await api.measure("claimJob (nothing due)", "worker", CLAIM, {"types": ["idle"]})
    assert nothing["claimJob"] is None
    for size in (1, 10, 100):
        data = await api.measure(f"claimJobs x{size}", "worker", CLAIM_MANY, {"limit": size})
        assert len(data["claimJobs"]) == size
    data = await api.measure("claimJobs (types) x10", "worker", CLAIM_MANY, {"limit": 10, "types": ["noop"]})
    assert len(data["claimJobs"]) == 10
    for expired in (1, 10):
        stale = await api.claim(expired, "filler")
        expire_leases_of(database, [job["id"] for job in stale])
        name = f"claimJob after {expired} expired lease{'s' if expired > 1 else ''}"
        assert (await api.measure(name, "worker", CLAIM))["claimJob"] is not None

    reported = await api.enqueue("producer", 1, "idle")
    progress_of(database, reported, 0.5)
    data = await api.measure("claimJob (types, resets progress)", "worker", CLAIM, {"types": ["idle"]})
    assert data["claimJob"]["id"] == reported[0]
    assert read_progress(database, reported[0]) is None

    # --- the holder's reports ---
    held = (await api.claim(1))[0]
    await api.measure("heartbeatJob", "worker", HEARTBEAT, {"id": held["id"], "attempt": held["attempt"]})
    report = {"id": held["id"], "attempt": held["attempt"], "progress": 0.25}
    await api.measure("reportProgress", "worker", REPORT, report)
    data = await api.measure(
        "reportProgress (within the window)", "worker", REPORT, {**report, "progress": 0.5}
    )
    assert data["reportProgress"]["progress"] == 0.5
    await asyncio.sleep(WINDOW_SECONDS * 2)  # the held report's write, before the next measurement
    assert read_progress(database, held["id"]) == 0.5
    await api.measure("heartbeatJob (missing)", "worker", HEARTBEAT, {"id": MISSING_ID}, code="NOT_FOUND")
    variables = {"id": held["id"], "attempt": held["attempt"], "result": {"ok": True}}
    await api.measure("completeJob", "worker", COMPLETE, variables)
    await api.measure("completeJob (not held)", "worker", COMPLETE, {"id": held["id"]}, code="CONFLICT")
    for size, rejected in ((1, 0), (10, 0), (100, 0), (10, 2), (100, 2), (1, 1)):
        good = await api.claim(size - rejected) if size > rejected else []
        items = [{"id": job["id"], "attempt": job["attempt"], "result": {"n": 1}} for job in good]
        items += [{"id": MISSING_ID}, {"id": good[0]["id"] if good else held["id"]}][:rejected]
        suffix = "" if not rejected else ", rejected" if rejected == size else f", {rejected} rejected"
        data = await api.measure(f"completeJobs x{size}{suffix}", "worker", COMPLETE_MANY, {"items": items})
        assert len(data["completeJobs"]["completed"]) == size - rejected
        assert len(data["completeJobs"]["rejected"]) == rejected
    retryable, final = await api.claim(2)
    variables = {"id": retryable["id"], "retryable": True}
    data = await api.measure("failJob (retryable)", "worker", FAIL, variables)
    assert data["failJob"]["status"] == "PENDING"
    data = await api.measure("failJob (final)", "worker", FAIL, {"id": final["id"], "retryable": False})
    assert data["failJob"]["status"] == "FAILED"

    # --- producer and admin actions ---
    pending = await api.enqueue("producer", 1, "email")
    await api.measure("cancelJob", "producer", CANCEL, {"id": pending[0]})
    await api.measure("cancelJob (not pending)", "admin", CANCEL, {"id": held["id"]}, code="CONFLICT")
    asked = (await api.claim(1))[0]
    data = await api.measure("cancelJob (running)", "admin", CANCEL, {"id": asked["id"]})
    assert data["cancelJob"]["status"] == "RUNNING"
    variables = {"id": asked["id"], "retryable": True}
    data = await api.measure("failJob (cancel requested)", "worker", FAIL, variables)
    assert data["failJob"]["status"] == "CANCELLED"
    data = await api.measure("retryJob", "admin", RETRY, {"id": final["id"]})
    assert data["retryJob"]["status"] == "PENDING"
    await api.measure_get("GET /metrics", "/metrics")


async def fill(api: Api) -> None:
    """A few thousand more jobs, in every status and of two creators and two workers."""
    await api.enqueue("producer", FILLER_JOBS // 2, "email")
    await api.enqueue("other-producer", FILLER_JOBS // 2, "report")
    done = await api.claim(300, "filler")
    completed, failed = done[:200], done[200:250]
    for start in range(0, len(completed), 100):
        items = [{"id": job["id"], "attempt": job["attempt"]} for job in completed[start : start + 100]]
        await api.ok("filler", COMPLETE_MANY, {"items": items})
    for job in failed:
        await api.ok("filler", FAIL, {"id": job["id"], "retryable": False})
    for job_id in await api.enqueue("producer", 50, "email"):
        await api.ok("producer", CANCEL, {"id": job_id})
    await api.claim(100, "worker")  # left RUNNING, held by the measured worker


async def measure_everything(directory: Path) -> dict[str, dict[str, Measured]]:
    database = directory / "queuelog.db"
    url = f"sqlite:///{database}"
    engine = create_sync_engine(url)
    try:
        upgrade_to_head(engine)
        keys = {who: create_key(engine, ROLE_KEY_NAMES[who], roles)[1] for who, roles in ROLES.items()}
        settings = Settings(
            database_url=url,
            job_types=JOB_TYPES,
            lease_check_seconds=HOUR,
            expiry_check_seconds=HOUR,
            prune_interval_seconds=HOUR,
            # No event tail: its polls (every 50 ms) would land among a request's statements.
            event_feed="local",
        )
        app = create_app(settings)
        async with app.starlette.router.lifespan_context(app.starlette):
            db = state_of(app).services.repository._db
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://queuelog") as client:
                api = Api(client, db, keys)
                for who in keys:  # warm the principal cache; the start-up maintenance runs meanwhile
                    await api.ok(who, ME)
                await asyncio.sleep(0.05)
                await db._idle.wait()
                passes: dict[str, dict[str, Measured]] = {}
                await one_pass(api, "fresh", database, engine)
                passes["fresh table"], api.results = api.results, {}
                await fill(api)
                await one_pass(api, "filled", database, engine)
                passes[f"+{FILLER_JOBS} jobs"] = api.results
                return passes
    finally:
        engine.dispose()


def measure(directory: Path) -> dict[str, dict[str, Measured]]:
    # The schedule ticker looks for due schedules every second: an hour here, like the other
    # background loops, so that its read never lands among a request's statements.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ticker, "LOOK_AGAIN_SECONDS", HOUR)
        return asyncio.run(measure_everything(directory))


# --- the tests -----------------------------------------------------------------------------------------
#
# One test, not one per operation: the measurement takes seconds, and under `pytest -n` every
# process that drew one of a hundred cases made it again. Each check below still names what
# it checks, and all that fail are reported together.

BATCHES = {
    "enqueueJobs": ["enqueueJobs x10", "enqueueJobs x100"],
    "claimJobs": ["claimJobs x1", "claimJobs x10", "claimJobs x100", "claimJob"],
    "completeJobs": ["completeJobs x1", "completeJobs x10", "completeJobs x100"],
    "completeJobs with rejections": [
        "completeJobs x10",
        "completeJobs x10, 2 rejected",
        "completeJobs x100, 2 rejected",
    ],
    # keyed enqueue batches do not grow
    "enqueueJobs with idempotency keys": [
        "enqueueJobs with idempotency keys x10",
        "enqueueJobs with idempotency keys x100",
    ],
    # expiring stale leases before a claim is one executemany, however many expired
    "claimJob after expired leases": ["claimJob after 1 expired lease", "claimJob after 10 expired leases"],
    # resetting progress is part of the claim's own UPDATE
    "claimJob of a job with progress": ["claimJob (types)", "claimJob (types, resets progress)"],
    "jobs with attempts": ["jobs with attempts x1", "jobs with attempts x10", "jobs with attempts x100"],
}


def every_operation_was_measured_and_is_pinned(measured: dict[str, dict[str, Measured]]) -> None:
    for table, results in measured.items():
        assert sorted(results) == sorted(EXPECTED), (table, sorted(set(results) ^ set(EXPECTED)))


def statement_count(measured: dict[str, dict[str, Measured]], operation: str) -> None:
    """The pinned (control, data) count, on a fresh table and with thousands more jobs."""
    for table, results in measured.items():
        result = results[operation]
        assert result.counts == EXPECTED[operation], (
            f"{operation} on the {table}: (control, data) = {result.counts}, pinned "
            f"{EXPECTED[operation]}; it ran:\n{result.describe()}"
        )


def same_statements(measured: dict[str, dict[str, Measured]], operations: list[str]) -> None:
    for table, results in measured.items():
        labels = {name: [(s.connection, s.kind) for s in results[name].statements] for name in operations}
        first = labels[operations[0]]
        for name in operations[1:]:
            assert labels[name] == first, (
                f"on the {table}, {name} ran other statements than {operations[0]}:\n"
                f"{results[name].describe()}\nvs\n{results[operations[0]].describe()}"
            )


def the_size_of_the_table_changes_no_count(measured: dict[str, dict[str, Measured]]) -> None:
    fresh, filled = measured.values()
    changed = {
        name: (fresh[name].counts, filled[name].counts)
        for name in fresh
        if fresh[name].counts != filled[name].counts
    }
    assert not changed, changed


def test_statement_counts(tmp_path: Path) -> None:
    """Every operation's pinned count; batches run the same statements whatever their size;
    the size of the table changes no count."""
    measured = measure(tmp_path)
    checks: list[tuple[str, Callable[[], None]]] = [
        (
            "every operation was measured and is pinned",
            lambda: every_operation_was_measured_and_is_pinned(measured),
        ),
        *((f"statement count of {op}", functools.partial(statement_count, measured, op)) for op in EXPECTED),
        *(
            (
                f"{name}: the same statements whatever the size",
                functools.partial(same_statements, measured, ops),
            )
            for name, ops in BATCHES.items()
        ),
        ("the size of the table changes no count", lambda: the_size_of_the_table_changes_no_count(measured)),
    ]
    failures = []
    for name, check in checks:
        try:
            check()
        except Exception as failure:  # an AssertionError, or a KeyError for an operation not measured
            failures.append(f"--- {name} ---\n{type(failure).__name__}: {failure}")
    assert not failures, f"{len(failures)} of {len(checks)} checks failed:\n" + "\n".join(failures)
