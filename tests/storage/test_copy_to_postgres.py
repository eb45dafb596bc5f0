"""`queuelog copy-database`: a SQLite queue, built by a real server, moved to PostgreSQL.

The source is made through the API of a real `queuelog serve` on SQLite and the `queuelog`
command beside it: keys of every role (one PRODUCER+WORKER key that works its own jobs, one
revoked), jobs in every status (held, completed with results, failed with errors, waiting for
a retry, delayed, cancelled, retried by the admin, waiting for another job), idempotency
keys, single and batch enqueues; type controls (a rate limit, maxRunning and
maxRunningPerKey, a rate limit per key with the claims inside its window, a type paused
`--until` by `queuelog types pause`); schedules (one that has fired and was paused since, one
waiting for its next tick). Every view of it is recorded through the API, the server is
stopped, and the `queuelog` command copies it into a fresh PostgreSQL database (created empty
for the test, dropped after).

Proven:
- every table of the migrated database is copied row for row, or is one of NOT_COPIED, which
  says why (derived from the copied rows, or the target's own; copy.py names the same tables
  with the same reasons): the tables are read from both databases' catalogues, and each
  copied one must hold rows in the source, so a table added later that copy-database
  forgets fails here; JSON text byte for byte, timestamps to the microsecond; job_counts
  equals a full count of the copied jobs;
- a server on the copy answers every job, every key's job list, `totalCount`s, `queueStats`,
  `typeControls`, `schedules` and `me` exactly as the SQLite server did; the old keys
  authenticate with the same roles and the revoked one stays revoked; the held job can
  still be completed with its attempt;
- new jobs, events and keys get ids above the old ones (also above a pruned job's id), and an
  idempotent replay of an old key returns the old job;
- the source is not written (its file is byte for byte the same);
- a finished job's timeout and lease, which older versions left set, are not copied (a
  RUNNING job's are): the copied RUNNING job times out on PostgreSQL;
- the copy goes one way: SQLite to PostgreSQL (the reverse is refused, see MISUSE);
- a target that holds keys or jobs is refused (`--replace` empties it, in the transaction),
  and a copy that fails midway leaves the target exactly as it was, sequences included;
- a bad URL, an unreachable database, a missing source file: one stderr line, exit 1, no
  traceback, no password.

Tests needing PostgreSQL skip, saying why, when it does not answer (they fail instead with
QUEUELOG_TEST_REQUIRE_POSTGRES=1).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    POSTGRES_URL,
    REQUIRE_POSTGRES,
    Server,
    launch_server,
    postgres_admin,
    postgres_unreachable,
    run_queuelog,
)
from sqlalchemy import Table

from queuelog import keys as key_admin
from queuelog.sdk import types as client
from queuelog.storage import copy
from queuelog.storage.copy import copy_database
from queuelog.storage.engine import create_sync_engine
from queuelog.storage.migrate import upgrade_to_head
from queuelog.storage.schema.tables import api_keys, job_events, jobs, metadata, schedules, type_controls
from queuelog.storage.schema.types import JsonDocument, UtcTimestamp, to_micros

CLI_TIMEOUT = 120
JOB_FIELDS = client.JOB_FIELDS  # every field, `error` included (admin only)
PUBLIC_FIELDS = client.WORKER_JOB_FIELDS  # every field but `error`
STATUSES = ["PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"]
COUNTS = "counts { pending running completed failed cancelled }"
STATS = f"{{ queueStats {{ {COUNTS} byType {{ type {COUNTS} }} oldestPendingSeconds }} }}"
ENQUEUE = f"""mutation($input: EnqueueJobInput!) {{
  enqueueJob(input: $input) {{ created job {{ {PUBLIC_FIELDS} }} }} }}"""
ENQUEUE_MANY = f"""mutation($inputs: [EnqueueJobInput!]!) {{
  enqueueJobs(inputs: $inputs) {{ created job {{ {PUBLIC_FIELDS} }} }} }}"""
CLAIM = f"mutation($types: [String!]) {{ claimJob(types: $types) {{ {PUBLIC_FIELDS} }} }}"
COMPLETE = f"""mutation($id: ID!, $attempt: Int, $result: JSON) {{
  completeJob(id: $id, attempt: $attempt, result: $result) {{ {PUBLIC_FIELDS} }} }}"""
FAIL = f"""mutation($id: ID!, $attempt: Int, $error: String!, $retryable: Boolean!, $in: Int) {{
  failJob(id: $id, attempt: $attempt, error: $error, retryable: $retryable, retryInSeconds: $in) {{
    {PUBLIC_FIELDS} }} }}"""
CANCEL = "mutation($id: ID!) { cancelJob(id: $id) { id status } }"
RETRY = "mutation($id: ID!) { retryJob(id: $id) { id status } }"
ME = "{ me { name roles maxPriority } }"
TYPE_CONTROLS = """{ typeControls { type paused pausedUntil maxRunning maxRunningPerKey
  rateLimit { limit periodSeconds perKey } timeoutSeconds running } }"""
SCHEDULES = """{ schedules { name type cron timezone payload priority maxRetries misfire overlap
  paused nextRunAt lastRunAt lastJobId } }"""
SET_CONTROL = "mutation($i: TypeControlInput!) { setTypeControl(input: $i) { type } }"
PUT_SCHEDULE = "mutation($i: ScheduleInput!) { putSchedule(input: $i) { name } }"
PAUSE_SCHEDULE = "mutation($n: String!) { pauseSchedule(name: $n) { paused lastJobId } }"
JOB_TYPES = "email,report,resize,noop"  # the servers' allowlist (conftest's default)

# The tables copy-database leaves out, and why; every other table is copied row for row.
NOT_COPIED = {
    "alembic_version": "the schema's revision: the CLI migrates both ends to head before copying",
    "job_counts": "derived: recounted from the copied jobs, as the server counts them",
    "key_state": "the target servers' key-cache generation, moved by its triggers: the source's is no use",
}

# Payloads and results whose JSON text must survive byte for byte: key order, number forms,
# escapes and characters outside the BMP.
PAYLOAD = {
    "to": "a@example.com",
    "z": 1,
    "a": [1.5, 2e-07, 12345678901234567890, -0.0, None, True],
    "text": 'é ☃ 𝄞 "quoted" \\ back\nslash \u0001',
}
RESULT = {"sent": True, "nested": {"b": 1, "a": [None, False]}, "big": 1e300, "unicode": "ü€𝄞"}


@dataclass(frozen=True)
class Key:
    name: str
    secret: str


@dataclass
class OldQueue:
    """The SQLite queue and everything its server answered before it was stopped."""

    path: Path
    keys: dict[str, Key]
    revoked: Key
    views: dict[str, Any]
    ids: dict[str, str]  # what each job is for -> its id
    welcome: dict[str, Any]  # the input of an enqueue with an idempotency key

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"


# --- PostgreSQL ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def postgres() -> None:
    reason = postgres_unreachable()
    if reason is not None:
        if REQUIRE_POSTGRES:
            pytest.fail(reason + " and QUEUELOG_TEST_REQUIRE_POSTGRES=1")
        pytest.skip(reason)


_database_numbers = iter(range(1, 1_000_000))


@pytest.fixture
def new_database(postgres: None) -> Iterator[Callable[[], str]]:
    """Make fresh, empty PostgreSQL databases (not migrated); all are dropped after the test."""
    made: list[str] = []

    def make() -> str:
        name = f"queuelog_copy_{os.getpid()}_{next(_database_numbers)}"
        postgres_admin(f'CREATE DATABASE "{name}"')
        made.append(name)
        return POSTGRES_URL.rsplit("/", 1)[0] + "/" + name

    yield make
    for name in made:
        postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url) as connection:
        return [tuple(row) for row in connection.execute(sql)]  # type: ignore[arg-type]


def sqlite_rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as connection:
        return [tuple(row) for row in connection.execute(sql)]


def stored_rows(table: Table, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows as SQLite stores them: timestamps as integer microseconds, JSON as its text."""
    kinds = [c.type for c in table.c]
    return [
        tuple(
            to_micros(v) if isinstance(t, UtcTimestamp) and v is not None else v
            for t, v in zip(kinds, row, strict=True)
        )
        for row in rows
    ]


def table_rows(url_or_path: str | Path, table: Table) -> list[tuple[Any, ...]]:
    """Every row of `table` in key order, in SQLite's stored form, read straight from the database."""
    order = ", ".join(c.name for c in table.primary_key)
    sql = f"SELECT {', '.join(c.name for c in table.c)} FROM {table.name} ORDER BY {order}"
    if isinstance(url_or_path, Path):
        return sqlite_rows(url_or_path, sql)
    return stored_rows(table, pg_rows(url_or_path, sql))


def full_count(rows: list[tuple[Any, ...]]) -> Counter[tuple[str, str, str, str]]:
    """job_counts as it must be: jobs counted by scope ('*', 'p' creator, 'w' worker, 's'
    both the same), type and status. `rows` are jobs rows in table order."""
    names = [c.name for c in jobs.c]
    counts: Counter[tuple[str, str, str, str]] = Counter()
    for row in rows:
        job = dict(zip(names, row, strict=True))
        kind, status, creator, worker = job["type"], job["status"], job["created_by"], job["worker_id"]
        counts["*", "", kind, status] += 1
        counts["p", creator, kind, status] += 1
        if worker is not None:
            counts["w", worker, kind, status] += 1
            if worker == creator:
                counts["s", worker, kind, status] += 1
    return counts


def counter_rows(rows: list[tuple[Any, ...]]) -> Counter[tuple[str, str, str, str]]:
    return Counter({(s, name, t, st): n for s, name, t, st, n in rows if n})


def pg_tables(url: str) -> set[str]:
    """The tables the PostgreSQL database holds, from its catalogue."""
    return {
        name
        for (name,) in pg_rows(url, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
    }


def sqlite_tables(path: Path) -> set[str]:
    """The tables the SQLite file holds, but SQLite's own (sqlite_sequence, sqlite_stat1...)."""
    rows = sqlite_rows(
        path, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    )
    return {name for (name,) in rows}


def every_table(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table the PostgreSQL database holds, by table."""
    return {name: pg_rows(url, f"SELECT * FROM {name}") for name in sorted(pg_tables(url))}


def assert_every_table_copied(source: Path, target: str) -> None:
    """Each table of the migrated databases (their catalogues, not a list written here) holds
    in `target` the rows it holds in `source`, unless NOT_COPIED names it; each copied one
    holds rows in the source, or its comparison would prove nothing."""
    tables = pg_tables(target)
    assert tables == sqlite_tables(source)
    assert set(NOT_COPIED) <= tables, set(NOT_COPIED) - tables
    for name in sorted(tables - set(NOT_COPIED)):
        assert name in metadata.tables, f"{name} is in the database but not in tables.py"
        table = metadata.tables[name]
        rows = table_rows(source, table)
        assert rows, f"the source holds no {name} rows: fill it in old_queue, or this proves nothing"
        assert table_rows(target, table) == rows, f"{name} was not copied row for row"
    copied_counts = counter_rows(pg_rows(target, "SELECT scope, name, type, status, n FROM job_counts"))
    assert copied_counts == full_count(table_rows(target, jobs))
    assert copied_counts == counter_rows(
        sqlite_rows(source, "SELECT scope, name, type, status, n FROM job_counts")
    )
    assert copy.NOT_COPIED == NOT_COPIED, "copy.py and this test disagree on what is not copied"


# --- the CLI ---------------------------------------------------------------------------------

Result = subprocess.CompletedProcess[str]


def queuelog(*args: str, cwd: Path) -> Result:
    """`python -m queuelog ARGS`, with no QUEUELOG_* variables."""
    return run_queuelog(*args, cwd=cwd, timeout=CLI_TIMEOUT)


def copy_command(source: str, target: str, *extra: str, cwd: Path) -> Result:
    return queuelog("copy-database", "--from", source, "--to", target, *extra, cwd=cwd)


def assert_one_line_error(result: Result, fragment: str) -> str:
    everything = result.stdout + result.stderr
    assert "Traceback" not in everything, everything
    assert result.returncode == 1, everything
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"want exactly one stderr line:\n{result.stderr}"
    assert lines[0].startswith("queuelog: error: "), lines[0]
    assert fragment.lower() in lines[0].lower(), (fragment, lines[0])
    return lines[0]


# --- the old queue ---------------------------------------------------------------------------


def gql(server: Server, query: str, variables: dict[str, Any] | None = None, key: Key | None = None) -> Any:
    return server.gql(query, variables, key=key.secret if key else None).ok()


def views(server: Server, keys: dict[str, Key], ids: dict[str, str]) -> dict[str, Any]:
    """Everything the API answers about the queue, per key: what must read the same after the move."""
    seen: dict[str, Any] = {}
    for role, key in keys.items():
        fields = JOB_FIELDS if role == "admin" else PUBLIC_FIELDS
        view: dict[str, Any] = {"me": gql(server, ME, key=key)["me"]}
        view["typeControls"] = gql(server, TYPE_CONTROLS, key=key)["typeControls"]
        if role in ("admin", "viewer"):
            view["schedules"] = gql(server, SCHEDULES, key=key)["schedules"]
        stats = gql(server, STATS, key=key)["queueStats"]
        view["pending_due"] = stats.pop("oldestPendingSeconds") is not None
        view["stats"] = stats
        for status in [None, *STATUSES]:
            page = gql(
                server,
                f"query($s: JobStatus) {{ jobs(status: $s, first: 100) {{ totalCount"
                f" edges {{ cursor }} nodes {{ {fields} }} pageInfo {{ hasNextPage }} }} }}",
                {"s": status},
                key=key,
            )["jobs"]
            assert not page["pageInfo"]["hasNextPage"]
            view[f"jobs {status}"] = page
        view["by id"] = {
            job_id: server.gql(
                f"query($id: ID!) {{ job(id: $id) {{ {fields} }} }}", {"id": job_id}, key.secret
            ).body
            for job_id in ids.values()
        }
        seen[role] = view
    return seen


def enqueue(server: Server, key: Key, **job: Any) -> dict[str, Any]:
    job.setdefault("type", "email")
    answer = gql(server, ENQUEUE, {"input": job}, key=key)["enqueueJob"]
    assert answer["created"]
    return answer["job"]


def claim(server: Server, worker: Key, job_type: str, want: str) -> dict[str, Any]:
    job = gql(server, CLAIM, {"types": [job_type]}, key=worker)["claimJob"]
    assert job is not None and job["id"] == want, job
    return job


@pytest.fixture(scope="module")
def old_queue(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OldQueue]:
    home = tmp_path_factory.mktemp("old")
    path = home / "old.db"
    server = launch_server(home, database_url=f"sqlite:///{path}")
    try:
        keys = {
            "admin": Key("admin", server.admin_key),
            "mailer": Key("mailer", server.make_key("mailer", "producer", max_priority="high")),
            "reporter": Key("reporter", server.make_key("reporter", "producer")),
            "worker": Key("worker-1", server.make_key("worker-1", "worker")),
            "both": Key("selfie", server.make_key("selfie", "producer", "worker")),
            "viewer": Key("viewer", server.make_key("viewer", "viewer")),
        }
        revoked = Key("retired", server.make_key("retired", "producer"))
        mailer, reporter, worker, both = (keys[r] for r in ("mailer", "reporter", "worker", "both"))
        ids: dict[str, str] = {}
        later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
        welcome = {"type": "email", "payload": PAYLOAD, "priority": "HIGH", "idempotencyKey": "welcome-1"}

        # A partner API's limits, and a rate limit per key whose window outlasts the test:
        # the claims below leave their rows in rate_claims.
        partner = {"maxRunning": 5, "maxRunningPerKey": 3, "timeoutSeconds": 3600}
        gql(
            server,
            SET_CONTROL,
            {"i": {"type": "email", **partner, "rateLimit": {"limit": 10, "periodSeconds": 1}}},
        )
        daily = {"limit": 100, "periodSeconds": 86400, "perKey": True}
        gql(server, SET_CONTROL, {"i": {"type": "report", "rateLimit": daily}})

        ids["completed"] = enqueue(server, mailer, **welcome)["id"]
        claim(server, worker, "email", ids["completed"])
        gql(server, COMPLETE, {"id": ids["completed"], "attempt": 1, "result": RESULT}, key=worker)

        running = {"payload": {"n": 2}, "idempotencyKey": "welcome-2", "concurrencyKey": "partner-a"}
        ids["running"] = enqueue(server, mailer, **running)["id"]
        claim(server, worker, "email", ids["running"])

        report = {"type": "report", "payload": {"month": "2026-11"}, "concurrencyKey": "acme"}
        ids["failed"] = enqueue(server, reporter, **report)["id"]
        claim(server, worker, "report", ids["failed"])
        error = "disk full writing /var/tmp/report.csv (errno 28)"
        failed = {"id": ids["failed"], "attempt": 1, "error": error, "retryable": False}
        gql(server, FAIL, failed, key=worker)

        ids["retrying"] = enqueue(server, reporter, type="report", payload={"month": "2026-10"})["id"]
        claim(server, worker, "report", ids["retrying"])
        retrying = {"id": ids["retrying"], "attempt": 1, "error": "timeout", "retryable": True, "in": 3600}
        gql(server, FAIL, retrying, key=worker)

        ids["delayed"] = enqueue(server, mailer, payload={"n": 3}, runAt=later, priority="LOW")["id"]
        ids["cancelled"] = enqueue(server, mailer, type="resize", payload={"w": 64})["id"]
        gql(server, CANCEL, {"id": ids["cancelled"]}, key=mailer)

        ids["own running"] = enqueue(server, both, type="noop", payload={"self": 1})["id"]
        claim(server, both, "noop", ids["own running"])
        ids["own completed"] = enqueue(server, both, type="noop", payload={"self": 2})["id"]
        claim(server, both, "noop", ids["own completed"])
        gql(server, COMPLETE, {"id": ids["own completed"], "attempt": 1, "result": None}, key=both)

        ids["retried"] = enqueue(server, keys["admin"], type="noop", priority="CRITICAL", maxRetries=0)["id"]
        claim(server, worker, "noop", ids["retried"])
        gql(server, FAIL, {"id": ids["retried"], "attempt": 1, "error": "no", "retryable": False}, key=worker)
        gql(server, RETRY, {"id": ids["retried"]})

        batch = [
            {"type": "report", "payload": {"part": i}, "idempotencyKey": f"batch-{i}", "maxRetries": i}
            for i in range(3)
        ]
        for i, answer in enumerate(gql(server, ENQUEUE_MANY, {"inputs": batch}, key=reporter)["enqueueJobs"]):
            ids[f"batch {i}"] = answer["job"]["id"]
        ids["by revoked key"] = enqueue(server, revoked, payload={"old": True}, idempotencyKey="old-1")["id"]
        ids["waiting"] = enqueue(server, mailer, payload={"then": 1}, dependsOn=[ids["delayed"]])["id"]
        ids["released"] = enqueue(server, mailer, payload={"then": 2}, dependsOn=[ids["completed"]])["id"]

        leap_day = {"name": "leap-day", "type": "email", "cron": "0 0 29 2 *", "timezone": "Europe/Paris"}
        leap_day |= {"payload": {"z": 1, "a": "é"}, "priority": "HIGH", "maxRetries": 5, "misfire": "SKIP"}
        gql(server, PUT_SCHEDULE, {"i": leap_day})
        every_second = {"name": "every-second", "type": "resize", "cron": "* * * * * *", "overlap": "SKIP"}
        gql(server, PUT_SCHEDULE, {"i": every_second})
        deadline = time.monotonic() + 30
        while gql(server, SCHEDULES)["schedules"][0]["lastJobId"] is None:  # every-second, by name
            assert time.monotonic() < deadline, "the every-second schedule never fired"
            time.sleep(0.2)
        ids["tick"] = gql(server, PAUSE_SCHEDULE, {"n": "every-second"})["pauseSchedule"]["lastJobId"]

        until = (datetime.now(UTC) + timedelta(days=1)).replace(microsecond=0)
        paused = queuelog(
            "types", "pause", "resize", "--until", until.isoformat(), "--database-url", f"sqlite:///{path}",
            "--job-types", JOB_TYPES, cwd=home,
        )  # fmt: skip
        assert paused.returncode == 0, paused.stdout + paused.stderr
        controls = {c["type"]: c for c in gql(server, TYPE_CONTROLS)["typeControls"]}
        email = controls["email"]
        assert {k: email[k] for k in partner} == partner, email
        assert email["rateLimit"] == {"limit": 10, "periodSeconds": 1, "perKey": False}, email
        assert controls["report"]["rateLimit"] == daily, controls["report"]
        assert controls["resize"]["paused"], controls["resize"]
        assert datetime.fromisoformat(controls["resize"]["pausedUntil"]) == until, controls["resize"]
        added = sqlite3.connect(path)  # a type added at runtime (addJobType)
        try:
            with added:
                added.execute("INSERT INTO job_types VALUES ('thumbnail', 'ops', 1)")
        finally:
            added.close()

        statuses = {
            gql(server, "query($id: ID!) { job(id: $id) { status } }", {"id": i})["job"]["status"]
            for i in ids.values()
        }
        assert statuses == set(STATUSES)
        engine = create_sync_engine(server.database_url)
        try:
            key_admin.revoke_key(engine, revoked.name)
        finally:
            engine.dispose()
        assert server.gql(ME, key=revoked.secret).status == 401
        recorded = views(server, keys, ids)
    finally:
        server.stop()
    # A server stopped in the middle of settling a completed job's dependents leaves the rest
    # to do in dependency_settlements (storage/operations/settlements.py); this one's walk is at its end.
    with closing(sqlite3.connect(path)) as db, db:
        highest = db.execute("SELECT max(id) FROM jobs").fetchone()[0]
        db.execute(
            "INSERT INTO dependency_settlements (job_id, error, passed, reaches) VALUES (?, NULL, ?, ?)",
            (int(ids["completed"]), highest, highest),
        )
    yield OldQueue(path, keys, revoked, recorded, ids, welcome)


# --- the move --------------------------------------------------------------------------------


def test_a_copied_queue_reads_back_identical(
    old_queue: OldQueue, new_database: Callable[[], str], tmp_path: Path
) -> None:
    target = new_database()
    source_bytes = hashlib.sha256(old_queue.path.read_bytes()).hexdigest()
    started = time.monotonic()
    result = copy_command(old_queue.url, target, cwd=tmp_path)
    took = time.monotonic() - started
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert hashlib.sha256(old_queue.path.read_bytes()).hexdigest() == source_bytes, "the source changed"

    # The rows, straight from both databases: every table.
    assert_every_table_copied(old_queue.path, target)
    n_jobs, n_events, n_keys, n_controls, n_schedules = (
        len(table_rows(old_queue.path, t)) for t in (jobs, job_events, api_keys, type_controls, schedules)
    )
    assert result.stdout.startswith(
        f"copied {n_jobs} jobs, {n_events} job events, {n_keys} API keys, {n_controls} type controls"
        f" and {n_schedules} schedules to {target}"
    ), result.stdout
    json_columns = [c.name for c in jobs.c if isinstance(c.type, JsonDocument)]
    raw = f"SELECT id, {', '.join(json_columns)} FROM jobs ORDER BY id"
    assert pg_rows(target, raw) == sqlite_rows(old_queue.path, raw)  # the JSON text, byte for byte

    # A server on the copy answers as the old one did, to every key.
    home = tmp_path / "new"
    home.mkdir()
    server = launch_server(home, database_url=target, admin_key=old_queue.keys["admin"].secret)
    try:
        assert "ADMIN key" not in server.log(), "a bootstrap key was made: the old admin key was not seen"
        # The limits and schedules first (views() reads them too, among much else).
        assert gql(server, TYPE_CONTROLS)["typeControls"] == old_queue.views["admin"]["typeControls"]
        assert gql(server, SCHEDULES)["schedules"] == old_queue.views["admin"]["schedules"]
        assert views(server, old_queue.keys, old_queue.ids) == old_queue.views
        refused = server.gql(ME, key=old_queue.revoked.secret)
        assert refused.status == 401 and refused.codes == ["UNAUTHENTICATED"], refused.body

        mailer, worker = old_queue.keys["mailer"], old_queue.keys["worker"]
        replay = gql(server, ENQUEUE, {"input": old_queue.welcome}, key=mailer)["enqueueJob"]
        assert not replay["created"] and replay["job"]["id"] == old_queue.ids["completed"]
        assert replay["job"]["payload"] == PAYLOAD and replay["job"]["result"] == RESULT

        highest = max(int(i) for i in old_queue.ids.values())
        new = enqueue(server, mailer, payload={"after": "move"}, idempotencyKey="welcome-1-new")
        assert int(new["id"]) > highest
        # The held job is still held: its worker completes it with the same attempt.
        done = gql(server, COMPLETE, {"id": old_queue.ids["running"], "attempt": 1, "result": 7}, key=worker)
        assert done["completeJob"]["status"] == "COMPLETED"
        server.make_key("newcomer", "viewer")
    finally:
        server.stop()
    old_events, old_keys = (table_rows(old_queue.path, t) for t in (job_events, api_keys))
    new_events = [row for row in table_rows(target, job_events) if row[0] > old_events[-1][0]]
    assert new_events and {row[1] for row in new_events} == {int(new["id"]), int(old_queue.ids["running"])}
    assert table_rows(target, api_keys)[-1][:2] == (old_keys[-1][0] + 1, "newcomer")
    print(
        f"\ncopy-database: {n_jobs} jobs, {n_events} events, {n_keys} keys in {took:.2f}s (CLI, with startup)"
    )


def test_pruned_ids_waiting_jobs_and_schedules_carry_over(
    new_database: Callable[[], str], tmp_path: Path
) -> None:
    """The ids of pruned jobs are not given out again; the dependency edges and the schedules
    are copied: a job that waited for another on SQLite is released when that one completes
    on PostgreSQL, and the schedule is there. One source server, one copy and one target
    server for both (as two tests they cost 12-38 s each in CI)."""
    path = tmp_path / "graph.db"
    server = launch_server(
        tmp_path, database_url=f"sqlite:///{path}", retention_seconds=0, prune_interval_seconds=1
    )
    try:
        producer = Key("p", server.make_key("p", "producer"))
        first = enqueue(server, producer)["id"]
        then = enqueue(server, producer, dependsOn=[first])
        assert then["status"] == "PENDING"
        put = "mutation($i: ScheduleInput!) { putSchedule(input: $i) { name } }"
        gql(
            server,
            put,
            {"i": {"name": "nightly", "type": "email", "cron": "0 3 * * *", "timezone": "Europe/Paris"}},
        )
        gone = enqueue(server, producer)["id"]  # the highest id, pruned
        gql(server, CANCEL, {"id": gone}, key=producer)
        deadline = time.monotonic() + 30
        while gql(server, "query($id: ID!) { job(id: $id) { id } }", {"id": gone})["job"] is not None:
            assert time.monotonic() < deadline, "the cancelled job was never pruned"
            time.sleep(0.2)
        admin = server.admin_key
    finally:
        server.stop()
    assert [row[0] for row in table_rows(path, jobs)] == [int(first), int(then["id"])]

    target = new_database()
    result = copy_command(f"sqlite:///{path}", target, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith(f"new jobs start at id {int(gone) + 1}"), result.stdout
    home = tmp_path / "new"
    home.mkdir()
    server = launch_server(home, database_url=target, admin_key=admin)
    try:
        assert int(enqueue(server, producer, type="noop")["id"]) == int(gone) + 1
        schedules = gql(server, "{ schedules { name cron timezone paused nextRunAt } }")["schedules"]
        assert [(s["name"], s["cron"], s["timezone"], s["paused"]) for s in schedules] == [
            ("nightly", "0 3 * * *", "Europe/Paris", False)
        ]
        job = "query($id: ID!) { job(id: $id) { waitingFor dependsOn } }"
        assert gql(server, job, {"id": then["id"]})["job"] == {"waitingFor": 1, "dependsOn": [first]}
        worker = Key("w", server.make_key("w", "worker"))
        claim(server, worker, "email", first)
        complete = "mutation($id: ID!) { completeJob(id: $id) { status } }"
        gql(server, complete, {"id": first}, key=worker)
        claim(server, worker, "email", then["id"])
    finally:
        server.stop()


SEQUENCES = "SELECT sequencename, last_value FROM pg_sequences WHERE schemaname = current_schema() ORDER BY 1"


def test_a_running_job_times_out_on_the_copy_whatever_finished_jobs_kept(
    new_database: Callable[[], str], tmp_path: Path
) -> None:
    """Older versions left the timeout set on the jobs they completed on SQLite. Copied as
    they were, more of them than PostgreSQL's overdue probe reads at a time, all overdue
    before the held job, hid it: it never timed out. The copy carries the lease and timeout
    of a RUNNING job only, and the held job times out on PostgreSQL."""
    path = tmp_path / "timeouts.db"
    server = launch_server(tmp_path, database_url=f"sqlite:///{path}")
    try:
        producer = Key("p", server.make_key("p", "producer"))
        worker = Key("w", server.make_key("w", "worker"))
        many = "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { created } }"
        gql(server, many, {"inputs": [{"type": "email", "timeoutSeconds": 1}] * 600}, key=producer)
        claim_many = 'mutation { claimJobs(limit: 100, types: ["email"]) { id attempt } }'
        complete_many = """mutation($items: [CompleteJobInput!]!) {
          completeJobs(items: $items) { rejected } }"""
        for _ in range(6):
            items = gql(server, claim_many, key=worker)["claimJobs"]
            assert gql(server, complete_many, {"items": items}, key=worker)["completeJobs"]["rejected"] == []
        held = enqueue(server, producer, type="report", timeoutSeconds=1, maxRetries=0)
        claim(server, worker, "report", held["id"])
        admin = server.admin_key
    finally:
        server.stop()
    with closing(sqlite3.connect(path)) as source:  # as an older version left them
        source.execute("UPDATE jobs SET timeout_at = claimed_at + 1000000 WHERE status = 'completed'")
        source.commit()
    running = "SELECT id, lease_expires_at, timeout_at FROM jobs WHERE status = 'running'"
    (source_running,) = sqlite_rows(path, running)
    assert source_running[0] == int(held["id"]) and None not in source_running

    target = new_database()
    result = copy_command(f"sqlite:///{path}", target, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert pg_rows(
        target,
        "SELECT count(*) FROM jobs WHERE status <> 'running'"
        " AND (timeout_at IS NOT NULL OR lease_expires_at IS NOT NULL)",
    ) == [(0,)]
    ((job_id, lease, timeout),) = pg_rows(target, running)
    assert (job_id, to_micros(lease), to_micros(timeout)) == source_running, "a RUNNING job keeps both"

    home = tmp_path / "new"
    home.mkdir()
    server = launch_server(home, database_url=target, admin_key=admin)
    try:
        job = "query($id: ID!) { job(id: $id) { status error } }"
        deadline = time.monotonic() + 30
        while (seen := gql(server, job, {"id": held["id"]})["job"])["status"] == "RUNNING":
            assert time.monotonic() < deadline, "the copied RUNNING job never timed out"
            time.sleep(0.2)
        assert seen == {"status": "FAILED", "error": "timed out"}
    finally:
        server.stop()


def sequences(url: str) -> list[tuple[Any, ...]]:
    """Every id sequence of the database and its last value (None: none given out yet)."""
    return pg_rows(url, SEQUENCES)


def test_a_target_that_holds_keys_is_refused_unless_replaced_and_a_failed_copy_changes_nothing(
    old_queue: OldQueue, new_database: Callable[[], str], tmp_path: Path
) -> None:
    """Two stories on one target (as two tests they cost 25-35 s each in CI, and each xdist
    worker that drew one built old_queue again)."""
    target = new_database()
    made = queuelog(
        "keys", "create", "--name", "early", "--role", "viewer", "--database-url", target, cwd=tmp_path
    )
    assert made.returncode == 0, made.stderr
    before_refusal = every_table(target)

    refused = copy_command(old_queue.url, target, cwd=tmp_path)
    assert_one_line_error(refused, "already holds rows (api_keys: 1)")
    assert "--replace" in refused.stderr and refused.stdout == ""
    assert every_table(target) == before_refusal

    # --replace, here through the Python API, fetching the source three rows at a time.
    source, engine = create_sync_engine(old_queue.url), create_sync_engine(target)
    try:
        copied = copy_database(source, engine, replace=True, batch_rows=3)
    finally:
        source.dispose()
        engine.dispose()
    assert_every_table_copied(old_queue.path, target)
    for name, n in copied.rows.items():
        assert n == len(table_rows(old_queue.path, metadata.tables[name])), name

    # A copy that fails midway leaves this target as it was, sequences included.
    before = every_table(target)
    before_sequences = sequences(target)
    # A source PostgreSQL cannot take: an event kind longer than its column (SQLite does not
    # check lengths), after jobs and keys that would already have replaced the target's.
    bad = tmp_path / "bad.db"
    shutil.copy(old_queue.path, bad)  # keeps the 0600 mode: a looser copy gets a warning line
    with closing(sqlite3.connect(bad)) as connection, connection:
        connection.execute("UPDATE jobs SET id = id + 1000")
        connection.execute(
            "INSERT INTO job_events (job_id, kind, status, at) VALUES (1, ?, 'pending', 0)", ("X" * 40,)
        )
    result = copy_command(f"sqlite:///{bad}", target, "--replace", cwd=tmp_path)
    assert_one_line_error(result, "copy failed, the target is unchanged: value too long")
    assert every_table(target) == before
    assert sequences(target) == before_sequences


# --- misuse ----------------------------------------------------------------------------------

PG_DOWN = "postgresql://nobody:s3cr3t-pw@127.0.0.1:1/db"
SOURCE = "{source}"  # replaced by a migrated SQLite file
MISSING = "{missing}"  # replaced by a path in an existing directory, with no file
OTHER = "{other}"  # replaced by another application's SQLite database
GARBAGE = "{garbage}"  # replaced by a file that is no database at all
MISUSE: list[tuple[str, list[str], str]] = [
    ("to-garbage", ["--from", SOURCE, "--to", "not a url at all"], "not a url"),
    ("to-mysql", ["--from", SOURCE, "--to", "mysql://u@localhost/db"], "mysql"),
    ("to-sqlite", ["--from", SOURCE, "--to", SOURCE], "PostgreSQL"),
    ("to-unreachable", ["--from", SOURCE, "--to", PG_DOWN], "127.0.0.1"),
    ("from-postgres", ["--from", PG_DOWN, "--to", PG_DOWN], "SQLite"),
    ("from-garbage", ["--from", "::", "--to", PG_DOWN], "::"),
    ("from-memory", ["--from", "sqlite://", "--to", PG_DOWN], "no SQLite file"),
    ("from-missing", ["--from", MISSING, "--to", PG_DOWN], "no SQLite database at"),
    ("from-not-a-queue", ["--from", OTHER, "--to", PG_DOWN], "not a queuelog database"),
    ("from-not-sqlite", ["--from", GARBAGE, "--to", PG_DOWN], "not a queuelog database"),
    ("no-to", ["--from", SOURCE], "--to"),
]


@pytest.fixture(scope="module")
def misuse(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Result]:
    home = tmp_path_factory.mktemp("misuse")
    source = f"sqlite:///{home / 'source.db'}"
    engine = create_sync_engine(source)  # migrated here: one CLI start fewer (cli/test_cli.py runs migrate)
    try:
        upgrade_to_head(engine)
    finally:
        engine.dispose()
    with closing(sqlite3.connect(home / "other.db")) as connection, connection:
        connection.execute("CREATE TABLE notes (body TEXT)")
    (home / "garbage.db").write_bytes(b"not a database\n" * 1000)
    untouched = {name: (home / name).read_bytes() for name in ("other.db", "garbage.db")}
    fill = {
        SOURCE: source,
        **{v: f"sqlite:///{home / (v.strip('{}') + '.db')}" for v in (MISSING, OTHER, GARBAGE)},
    }
    calls = [["copy-database", *(fill.get(a, a) for a in args)] for _, args, _ in MISUSE]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda args: queuelog(*args, cwd=home), calls))
    assert not (home / "missing.db").exists(), "a missing source file was created"
    assert {name: (home / name).read_bytes() for name in untouched} == untouched, "a non-queue file changed"
    return dict(zip([case for case, _, _ in MISUSE], results, strict=True))


def test_misuse_is_one_line_and_non_zero(misuse: dict[str, Result]) -> None:
    """Every MISUSE case in one test: as one test per case, each xdist worker that drew a
    case ran the whole module fixture again."""
    failures = []
    for case, _, fragment in MISUSE:
        result = misuse[case]
        try:
            if case == "no-to":  # argparse's usage error
                assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
                assert "Traceback" not in result.stderr and fragment in result.stderr, result.stderr
                continue
            line = assert_one_line_error(result, fragment)
            assert "s3cr3t-pw" not in line, "a password leaked into the error"
        except AssertionError as failure:
            failures.append(f"{case}: {failure}")
    assert not failures, "\n".join(failures)
