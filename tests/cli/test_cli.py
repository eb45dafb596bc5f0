"""The `queuelog` command line (API.md section 6), run as real subprocesses.

Attacked: `keys create/list/revoke`, `migrate` and `serve` on real SQLite files and
PostgreSQL databases (each such test runs on both), and every way a user can misuse them
(unknown commands, bad flags and values, unknown roles and priorities, unreachable or
nonsense database URLs; on a SQLite file, the misuse being the same on both).

Proven:
- `keys create` prints the key alone on the last line of stdout, the key works against a
  server on the same database at once (also one created while the server runs), and
  `keys revoke` makes it answer 401; roles and priorities are case-insensitive;
- a duplicate name is refused without printing a key; `keys list` shows names, roles,
  priorities and status, never a key or its hash;
- `migrate` (and `keys` on a fresh file) creates the schema at Alembic's head;
- every misuse ends with exactly one stderr line `queuelog: error: ...`, a non-zero exit
  and no traceback (nor a password from the URL);
- `serve` prints a bootstrap ADMIN key on a database that has never had a key, and only then
  (not once every key is revoked: `keys create --role admin` recovers), and servers starting
  together on a fresh PostgreSQL database make one between them.

CLI calls are slow to start (imports), so the independent ones run concurrently.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from conftest import Databases, launch_server, migrate, run_queuelog
from sqlalchemy import inspect, text

from queuelog.storage.engine import create_sync_engine
from queuelog.storage.migrate import alembic_config

Server = Any  # conftest.Server
Result = subprocess.CompletedProcess[str]

KEY_ANYWHERE = re.compile(r"ql_[A-Za-z0-9_-]{20,}")
WHOLE_KEY = re.compile(r"ql_[A-Za-z0-9_-]{40,}")
CLI_TIMEOUT = 60
PARALLEL = 4


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = CLI_TIMEOUT) -> Result:
    """Run `python -m queuelog ARGS` with no QUEUELOG_* variables but those in `env`."""
    return run_queuelog(*args, cwd=cwd, env=env, timeout=timeout)


def cli_many(calls: Sequence[Sequence[str]], cwd: Path) -> list[Result]:
    """Run independent calls concurrently; a call that hangs becomes a failed result."""

    def one(args: Sequence[str]) -> Result:
        try:
            return cli(*args, cwd=cwd)
        except AssertionError as exc:
            return subprocess.CompletedProcess(list(args), -9, "", f"(test) {exc}\n")

    with ThreadPoolExecutor(PARALLEL) as pool:
        return list(pool.map(one, calls))


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def created_key(result: Result) -> str:
    """The key printed by `keys create`: alone on the last line of stdout."""
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines, "keys create printed nothing"
    assert WHOLE_KEY.fullmatch(lines[-1]), f"last line is not a bare key: {lines[-1]!r}"
    assert result.stdout.count(lines[-1]) == 1 and lines[-1] not in result.stderr
    return lines[-1]


def assert_one_line_error(result: Result, fragment: str = "") -> str:
    everything = result.stdout + result.stderr
    assert "Traceback" not in everything, everything
    assert result.returncode != 0, everything
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"want exactly one stderr line, got {len(lines)}:\n{result.stderr}"
    assert lines[0].startswith("queuelog: error:"), lines[0]
    assert fragment.lower() in lines[0].lower(), (fragment, lines[0])
    assert not KEY_ANYWHERE.search(result.stdout), result.stdout
    return lines[0]


def parse_listing(result: Result) -> dict[str, list[str]]:
    """`keys list` as {name: [roles, max priority, created date, created time, status]}."""
    assert result.returncode == 0 and result.stderr == "", result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:2] == ["NAME", "ROLES"], lines[0]
    return {line.split()[0]: line.split()[1:] for line in lines[1:] if line.strip()}


def me(server: Server, key: str) -> dict[str, Any]:
    return server.gql("{ me { name roles maxPriority } }", key=key).ok()["me"]


# --- keys create / list against a CLI-only database ----------------------------------------

CREATE_CASES: list[tuple[str, list[str], str | None, str, str]] = [
    # (name, --role values, --max-priority, roles shown by `keys list`, priority shown: "-"
    # for keys that cannot enqueue)
    ("upper-worker", ["WORKER"], None, "WORKER", "-"),
    ("lower-worker", ["worker"], None, "WORKER", "-"),
    ("mixed-producer", ["Producer"], "HIGH", "PRODUCER", "HIGH"),
    ("lower-producer", ["producer"], "high", "PRODUCER", "HIGH"),
    ("mixed-priority", ["viewer"], "cRiTiCaL", "VIEWER", "-"),
    ("admin-default", ["admin"], None, "ADMIN", "CRITICAL"),
    ("two-roles", ["producer", "WORKER"], "low", "PRODUCER,WORKER", "LOW"),
]


KeyDb = tuple[Result, dict[str, Result], Result]  # the listing, each case's create, the duplicate's
DUPLICATED = CREATE_CASES[0][0]  # the name `keys create` is run with a second time


@pytest.fixture(scope="module")
def key_db(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeyDb]:
    """One database, migrated by the first CREATE_CASES `keys create`, then the other cases and
    a second `keys create` of the first name (as ADMIN) at once, then listed."""
    home = tmp_path_factory.mktemp("keys")
    made = Databases(backend, tmp_path_factory)
    try:
        yield create_and_list(made.fresh(migrated=False), home)
    finally:
        made.drop_all()


def create_and_list(url: str, home: Path) -> KeyDb:
    def create_args(name: str, roles: list[str], priority: str | None) -> list[str]:
        args = ["keys", "create", "--name", name, "--database-url", url]
        for role in roles:
            args += ["--role", role]
        return args + (["--max-priority", priority] if priority else [])

    (first_name, first_roles, first_priority, _, _), *others = CREATE_CASES
    first = cli(*create_args(first_name, first_roles, first_priority), cwd=home)  # migrates the database
    *made, again = cli_many(
        [create_args(name, roles, prio) for name, roles, prio, _, _ in others]
        + [create_args(DUPLICATED, ["admin"], None)],
        home,
    )
    results = dict(zip([c[0] for c in CREATE_CASES], [first, *made], strict=True))
    listing = cli("keys", "list", "--database-url", url, cwd=home)
    return listing, results, again


def test_keys_create_is_case_insensitive(key_db: KeyDb) -> None:
    """Every CREATE_CASES key in one test, for the reason test_misuse_is_one_line_and_non_zero
    gives: one module fixture per xdist worker that draws a case."""
    listing, results, _ = key_db
    rows = parse_listing(listing)
    for name, _roles, _priority, shown_roles, shown_priority in CREATE_CASES:
        created_key(results[name])
        assert results[name].stderr == "", name
        row = rows[name]
        assert row[0] == shown_roles and row[1] == shown_priority and row[-1] == "active", (name, row)


def test_keys_list_never_shows_a_key_or_its_hash(key_db: KeyDb) -> None:
    listing, results, _ = key_db
    keys = [created_key(r) for r in results.values()]
    assert listing.returncode == 0 and listing.stderr == "", listing.stderr
    for name in results:
        assert re.search(rf"^{re.escape(name)}\s", listing.stdout, re.MULTILINE), name
    for key in keys:
        assert key not in listing.stdout and key[3:] not in listing.stdout
        assert hashlib.sha256(key.encode()).hexdigest() not in listing.stdout
    assert not KEY_ANYWHERE.search(listing.stdout)
    assert not re.search(r"[0-9a-f]{32,}", listing.stdout), "something hash-like is listed"
    assert "STATUS" in listing.stdout.splitlines()[0]


def test_duplicate_name_is_refused(key_db: KeyDb) -> None:
    """On key_db's database (its own database and three CLI runs cost 20-25 s per backend in CI)."""
    listing, results, again = key_db
    key = created_key(results[DUPLICATED])
    assert_one_line_error(again, DUPLICATED)
    rows = [line.split() for line in listing.stdout.splitlines()[1:] if line.split()[:1] == [DUPLICATED]]
    assert len(rows) == 1 and rows[0][1] == "WORKER", f"the duplicate changed the first key: {rows}"
    assert key not in again.stdout + again.stderr


# --- migrate -------------------------------------------------------------------------------


def schema_of(url: str) -> tuple[set[str], list[str]]:
    engine = create_sync_engine(url)
    try:
        tables = set(inspect(engine).get_table_names())
        with engine.connect() as connection:
            versions = [r[0] for r in connection.execute(text("SELECT version_num FROM alembic_version"))]
    finally:
        engine.dispose()
    return tables, versions


def blank_database(tmp_path: Path, databases: Databases) -> str:
    """An empty database: on SQLite a file in `tmp_path`, to see what else is written there."""
    return (
        sqlite_url(tmp_path / "fresh.db")
        if databases.backend == "sqlite"
        else databases.fresh(migrated=False)
    )


HEAD = ScriptDirectory.from_config(alembic_config()).get_current_head()


def test_migrate_and_keys_create_the_schema(tmp_path: Path, databases: Databases) -> None:
    """`migrate` with the URL as a flag and from the environment, and `keys list`, each on a
    blank database of its own, run at once (as three tests they cost 5-25 s each in CI)."""
    homes = {via: tmp_path / via for via in ("flag", "env", "keys")}
    urls = {}
    for via, home in homes.items():
        home.mkdir()
        urls[via] = blank_database(home, databases)
    runs = {
        "flag": lambda: cli("migrate", "--database-url", urls["flag"], cwd=homes["flag"]),
        "env": lambda: cli("migrate", cwd=homes["env"], env={"QUEUELOG_DATABASE_URL": urls["env"]}),
        "keys": lambda: cli("keys", "list", "--database-url", urls["keys"], cwd=homes["keys"]),
    }
    with ThreadPoolExecutor(len(runs)) as pool:
        started = {via: pool.submit(run) for via, run in runs.items()}
        results = {via: future.result() for via, future in started.items()}

    for via in ("flag", "env"):
        result = results[via]
        assert result.returncode == 0 and "Traceback" not in result.stderr, (via, result.stderr)
        tables, versions = schema_of(urls[via])
        assert {"jobs", "job_events", "api_keys", "alembic_version"} <= tables, via
        assert versions == [HEAD], via
        written = {p.name for p in homes[via].iterdir()}
        assert written <= {"fresh.db", "fresh.db-wal", "fresh.db-shm"}, f"migrate wrote elsewhere: {written}"
    # a second run on a current database changes nothing
    before = schema_of(urls["flag"])
    again = cli("migrate", "--database-url", urls["flag"], cwd=homes["flag"])
    assert again.returncode == 0, again.stderr
    assert schema_of(urls["flag"]) == before
    written = {p.name for p in homes["flag"].iterdir()}
    assert written <= {"fresh.db", "fresh.db-wal", "fresh.db-shm"}, f"migrate wrote elsewhere: {written}"

    # `keys` on a fresh database migrates it
    assert results["keys"].returncode == 0, results["keys"].stderr
    tables, versions = schema_of(urls["keys"])
    assert {"jobs", "job_events", "api_keys"} <= tables and versions == [HEAD]


# --- misuse: one line, non-zero, no traceback ----------------------------------------------

DB = "{db}"  # replaced by a migrated temporary database
NO_DIR = "sqlite:////nonexistent-dir/x.db"
PG_DOWN = "postgresql://nobody@127.0.0.1:1/db"
PG_DOWN_PASSWORD = "postgresql://nobody:s3cr3t-pw@127.0.0.1:1/db"

MISUSE: list[tuple[str, list[str], str]] = [
    # (id, arguments, a fragment the message must contain)
    ("no-command", [], "COMMAND"),
    ("unknown-command", ["frobnicate"], "frobnicate"),
    ("keys-no-action", ["keys"], "ACTION"),
    ("keys-create-missing-name", ["keys", "create", "--role", "worker", "--database-url", DB], "--name"),
    (
        "keys-create-unknown-role",
        ["keys", "create", "--name", "x", "--role", "wizard", "--database-url", DB],
        "wizard",
    ),
    (
        "keys-create-bad-priority",
        [
            "keys",
            "create",
            "--name",
            "x",
            "--role",
            "producer",
            "--max-priority",
            "urgent",
            "--database-url",
            DB,
        ],
        "urgent",
    ),
    (
        "keys-create-bad-name",
        ["keys", "create", "--name", "no spaces/here", "--role", "worker", "--database-url", DB],
        "name",
    ),
    ("keys-list-bad-flag", ["keys", "list", "--all"], "--all"),
    ("keys-revoke-unknown", ["keys", "revoke", "ghost", "--database-url", DB], "ghost"),
    ("migrate-no-such-dir", ["migrate", "--database-url", NO_DIR], "nonexistent-dir"),
    (
        "keys-create-no-such-dir",
        ["keys", "create", "--name", "x", "--role", "worker", "--database-url", NO_DIR],
        "nonexistent-dir",
    ),
    ("migrate-postgres-down", ["migrate", "--database-url", PG_DOWN], "127.0.0.1"),
    ("keys-list-postgres-down-password", ["keys", "list", "--database-url", PG_DOWN_PASSWORD], "127.0.0.1"),
    ("migrate-garbage-url", ["migrate", "--database-url", "not a url at all"], "not a url"),
    ("migrate-unsupported-url", ["migrate", "--database-url", "mysql://u@localhost/db"], "mysql"),
    ("serve-lease-0", ["serve", "--lease-seconds", "0", "--database-url", DB], "QUEUELOG_LEASE_SECONDS"),
    ("serve-max-depth-abc", ["serve", "--max-depth", "abc", "--database-url", DB], "QUEUELOG_MAX_DEPTH"),
    ("serve-port-abc", ["serve", "--port", "abc", "--database-url", DB], "--port"),
    ("serve-workers-0", ["serve", "--workers", "0", "--database-url", DB], "--workers"),
    ("serve-garbage-url", ["serve", "--database-url", "garbage"], "garbage"),
    ("serve-postgres-down", ["serve", "--database-url", PG_DOWN], "127.0.0.1"),
    ("serve-postgres-down-password", ["serve", "--database-url", PG_DOWN_PASSWORD], "127.0.0.1"),
    ("serve-no-such-dir", ["serve", "--database-url", NO_DIR], "nonexistent-dir"),
]


@pytest.fixture(scope="module")
def misuse_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Result]:
    home = tmp_path_factory.mktemp("misuse")
    url = sqlite_url(home / "x.db")
    migrate(url)  # here: one CLI start fewer (the migrate command is tested above)
    calls = [[url if arg == DB else arg for arg in args] for _, args, _ in MISUSE]
    return dict(zip([case_id for case_id, _, _ in MISUSE], cli_many(calls, home), strict=True))


def test_misuse_is_one_line_and_non_zero(misuse_results: dict[str, Result]) -> None:
    """Every MISUSE case in one test. The module fixture runs them all at once; as one test
    per case, each xdist worker that drew a case ran the whole set again (a CI run spent
    100-140 s in that set-up on each of eight workers)."""
    failures = []
    for case_id, _, fragment in MISUSE:
        try:
            line = assert_one_line_error(misuse_results[case_id], fragment)
            assert "s3cr3t-pw" not in line, "the database password leaked into the error"
            assert "sqlalchemy" not in line.lower() and 'File "' not in line
        except AssertionError as failure:
            failures.append(f"{case_id}: {failure}")
    assert not failures, "\n".join(failures)


# --- keys against a running server ---------------------------------------------------------


def test_created_keys_work_on_a_server_and_revoke_cuts_them_off(
    tmp_path: Path, databases: Databases, start_server: Callable[..., Server]
) -> None:
    url = databases.fresh(migrated=False)  # the first `keys create` migrates it

    def run(*args: str) -> Result:
        return cli(*args, "--database-url", url, cwd=tmp_path)

    def run_all(*calls: list[str]) -> list[Result]:  # independent calls at once
        return cli_many([[*args, "--database-url", url] for args in calls], tmp_path)

    boss = created_key(run("keys", "create", "--name", "boss", "--role", "ADMIN"))
    with ThreadPoolExecutor(1) as pool:  # the server starts while w1 is made
        making = pool.submit(run, "keys", "create", "--name", "w1", "--role", "worker")
        server = start_server(database_url=url, admin_key=boss)
        worker = created_key(making.result())
    assert not KEY_ANYWHERE.search(server.log()), "serve printed a key although active keys exist"

    assert me(server, boss) == {"name": "boss", "roles": ["ADMIN"], "maxPriority": "CRITICAL"}
    assert me(server, worker) == {"name": "w1", "roles": ["WORKER"], "maxPriority": "MEDIUM"}
    assert server.gql("mutation { claimJob { id } }", key=worker).ok() == {"claimJob": None}

    # A key created while the server runs works at once, with its roles and priority; w1 is
    # revoked meanwhile, and is refused at once.
    made, revoked = run_all(
        ["keys", "create", "--name", "p1", "--role", "PRODUCER", "--max-priority", "high"],
        ["keys", "revoke", "w1"],
    )
    producer = created_key(made)
    assert me(server, producer) == {"name": "p1", "roles": ["PRODUCER"], "maxPriority": "HIGH"}
    enqueued = server.gql(
        'mutation { enqueueJob(input: {type: "noop", priority: HIGH}) { created } }', key=producer
    )
    assert enqueued.ok() == {"enqueueJob": {"created": True}}

    assert revoked.returncode == 0 and revoked.stderr == "", revoked.stderr
    refused = server.gql("{ me { name } }", key=worker)
    assert refused.status == 401 and refused.codes == ["UNAUTHENTICATED"], refused.body
    assert me(server, producer)["name"] == "p1", "revoking one key touched another"
    assert me(server, boss)["name"] == "boss", "revoking one key touched another"  # made before it

    again, listed = run_all(["keys", "revoke", "w1"], ["keys", "list"])
    assert_one_line_error(again, "w1")  # already revoked
    rows = parse_listing(listed)
    assert {name: row[-1] for name, row in rows.items()} == {
        "boss": "active",
        "w1": "revoked",
        "p1": "active",
    }
    assert rows["p1"][:2] == ["PRODUCER", "HIGH"]


# --- serve's bootstrap key -----------------------------------------------------------------


def key_rows(url: str) -> list[tuple[str, bool]]:
    """Every row of api_keys, oldest first: (name, revoked)."""
    engine = create_sync_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT name, revoked_at FROM api_keys ORDER BY id")).all()
    finally:
        engine.dispose()
    return [(name, revoked_at is not None) for name, revoked_at in rows]


def test_serve_prints_a_bootstrap_key_only_on_a_database_that_never_had_one(
    tmp_path: Path, databases: Databases, start_server: Callable[..., Server]
) -> None:
    url = databases.fresh(migrated=False)  # `serve` migrates it
    first = start_server(database_url=url)  # fails unless a key is printed
    log = first.log()
    assert set(KEY_ANYWHERE.findall(log)) == {first.admin_key} and log.count(first.admin_key) == 1, log
    assert me(first, first.admin_key) == {"name": "admin", "roles": ["ADMIN"], "maxPriority": "CRITICAL"}
    first.stop()

    second = start_server(database_url=url, admin_key=first.admin_key)
    assert not KEY_ANYWHERE.search(second.log()), "a second start printed a new key"
    assert me(second, first.admin_key)["name"] == "admin"
    second.stop()

    # Every key revoked: the next start makes none (a key printed to the log at each restart
    # would be one for whoever reads the logs). The CLI is the way back in.
    assert cli("keys", "revoke", "admin", "--database-url", url, cwd=tmp_path).returncode == 0
    third = start_server(database_url=url, admin_key=first.admin_key)
    log = third.log()
    assert "queuelog serving" in log, log
    assert not KEY_ANYWHERE.search(log) and "ADMIN key" not in log, log
    assert key_rows(url) == [("admin", True)]
    assert third.gql("{ me { name } }", key=first.admin_key).status == 401

    recovered = created_key(
        cli("keys", "create", "--name", "ops", "--role", "admin", "--database-url", url, cwd=tmp_path)
    )
    assert me(third, recovered) == {"name": "ops", "roles": ["ADMIN"], "maxPriority": "CRITICAL"}
    assert key_rows(url) == [("admin", True), ("ops", False)]
    third.stop()
    fourth = start_server(database_url=url, admin_key=recovered)
    assert not KEY_ANYWHERE.search(fourth.log()), fourth.log()
    assert me(fourth, recovered)["name"] == "ops"


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_servers_starting_together_on_a_fresh_database_make_one_bootstrap_key(
    tmp_path: Path, databases: Databases
) -> None:
    """Both servers are held at their first read of api_keys (the test holds the table
    locked until both wait there), then let go at once: each finds no key, and both try to
    make one."""
    import psycopg

    url = databases.fresh()
    placeholder = "ql_" + "x" * 40  # launch_server wants a key; which server prints one is read below
    homes = [tmp_path / "one", tmp_path / "two"]
    for home in homes:
        home.mkdir()
    with psycopg.connect(url) as holder, ThreadPoolExecutor(2) as pool:
        holder.execute("LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE")
        starting = [
            pool.submit(launch_server, home, database_url=url, admin_key=placeholder) for home in homes
        ]
        deadline = time.monotonic() + 60
        while waiting_on_api_keys(url) < 2:
            assert time.monotonic() < deadline, "the servers never reached api_keys"
            assert not any(future.done() for future in starting), [f.exception() for f in starting]
            time.sleep(0.05)
        holder.commit()
        started = [future.exception() or future.result() for future in starting]
    servers = [server for server in started if not isinstance(server, BaseException)]
    try:
        assert len(servers) == 2, started  # a server that crashed on the race raised here
        logs = [server.log() for server in servers]
        printed = [key for log in logs for key in KEY_ANYWHERE.findall(log)]
        assert len(printed) == 1, logs
        assert not any("Traceback" in log for log in logs), logs
        assert key_rows(url) == [("admin", False)]
        for server in servers:
            assert me(server, printed[0])["name"] == "admin"
    finally:
        for server in servers:
            server.stop()


def waiting_on_api_keys(url: str) -> int:
    """How many sessions wait for a lock on api_keys."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_locks WHERE relation = 'api_keys'::regclass AND NOT granted"
        ).fetchone()
    assert row is not None
    return int(row[0])
