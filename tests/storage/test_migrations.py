"""The Alembic migrations build exactly the schema that queuelog/storage/schema/tables.py describes.

Attacked and proven, on a fresh SQLite file and, when one is reachable, a fresh PostgreSQL
database (QUEUELOG_TEST_POSTGRES_URL, default postgresql://postgres@127.0.0.1:5432/test; a
database with a random name is created for each test and dropped after it):
- upgrading one revision at a time from an empty database to head leaves nothing for
  `alembic.autogenerate.compare_metadata` to report against `tables.metadata` (tables,
  columns, types, nullability, server defaults, indexes, unique constraints);
- what compare_metadata does not look at: every index's full definition (column order, DESC,
  partial-index WHERE clause) equals the one `metadata.create_all` makes on the same kind of
  database, and on SQLite the same tables use AUTOINCREMENT;
- `upgrade_to_head` (what `serve`, `migrate` and `keys` run) does the same, and again is a no-op;
- every downgrade runs, down to an empty database, and upgrading again gives the same schema.

One blind spot of compare_metadata is handled here: on SQLite it cannot compare an index
declared with a text element (`text("priority DESC")` in ix_jobs_claim) and always reports it
as removed and added, even against a database that `create_all` made from the same metadata.
Such a remove/add pair is dropped only when the index's full definition in the database equals
the `create_all` one. (Declaring it as `jobs.c.priority.desc()` would let compare_metadata see it.)
Another: it ignores `ddl_if`, and reports an index or constraint that tables.py creates on the
other kind of database only (ix_jobs_idempotency, ix_jobs_type) as missing; that report is dropped.
"""

from __future__ import annotations

import os
import re
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from conftest import BACKENDS, REQUIRE_POSTGRES
from sqlalchemy import Engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.sql.elements import TextClause

from queuelog.storage.engine import create_sync_engine
from queuelog.storage.migrate import (
    HEAD_REVISION,
    alembic_config,
    is_at_head,
    run_migrations,
    upgrade_to_head,
)
from queuelog.storage.schema.tables import metadata

POSTGRES_URL = os.environ.get("QUEUELOG_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
# psycopg wants a libpq URL: no SQLAlchemy driver suffix (postgresql+psycopg://).
LIBPQ_URL = make_url(POSTGRES_URL).set(drivername="postgresql").render_as_string(hide_password=False)
VERSION_TABLE = "alembic_version"


# --- fresh databases -------------------------------------------------------------------------------


def postgres_unavailable() -> str | None:
    """Why PostgreSQL cannot be used here, or None when it can."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed"
    try:
        with psycopg.connect(LIBPQ_URL, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except Exception as error:  # any failure to connect means: not here
        return f"no PostgreSQL at {make_url(POSTGRES_URL).render_as_string()} ({type(error).__name__})"
    return None


@pytest.fixture(scope="module")
def postgres_reason() -> str | None:
    return postgres_unavailable()


@pytest.fixture(params=BACKENDS)
def new_database(
    request: pytest.FixtureRequest, tmp_path: Path, postgres_reason: str | None
) -> Iterator[Callable[[], Engine]]:
    """A factory of engines on empty databases of one kind, all dropped after the test
    (the kinds of QUEUELOG_TEST_BACKENDS; PostgreSQL down: skipped, or failed when
    QUEUELOG_TEST_REQUIRE_POSTGRES=1)."""
    kind = request.param
    if kind == "postgresql" and postgres_reason is not None:
        if REQUIRE_POSTGRES:
            pytest.fail(
                f"PostgreSQL comparison impossible: {postgres_reason} and QUEUELOG_TEST_REQUIRE_POSTGRES=1"
            )
        pytest.skip(f"PostgreSQL comparison skipped: {postgres_reason}")
    engines: list[Engine] = []
    created: list[str] = []

    def make() -> Engine:
        if kind == "sqlite":
            url = f"sqlite:///{tmp_path / f'db-{len(engines)}.sqlite'}"
        else:
            import psycopg

            name = f"queuelog_migrations_{uuid.uuid4().hex[:16]}"
            with psycopg.connect(LIBPQ_URL, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            created.append(name)
            url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
        engine = create_sync_engine(url)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.dispose()
    if created:
        import psycopg

        with psycopg.connect(LIBPQ_URL, autocommit=True) as conn:
            for name in created:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- alembic, the way the project runs it ----------------------------------------------------------


def revisions_base_to_head() -> list[str]:
    script = ScriptDirectory.from_config(alembic_config())
    heads = script.get_heads()
    assert len(heads) == 1, f"the migrations have {len(heads)} heads: {heads}"
    return [rev.revision for rev in reversed(list(script.walk_revisions("base", "heads")))]


def run_alembic(engine: Engine, action: Callable[..., None], target: str) -> None:
    """`command.upgrade`/`downgrade` as storage/migrate.py runs them."""
    run_migrations(engine, action, target)


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def compare_with_metadata(engine: Engine) -> list[Any]:
    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"compare_type": True, "compare_server_default": True}
        )
        return compare_metadata(context, metadata)


def tables_of(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


# --- what compare_metadata does not see ------------------------------------------------------------


def normalized(sql: str) -> str:
    sql = re.sub(r"\s+", " ", sql).strip()
    sql = re.sub(r"\s*([(),])\s*", r"\1", sql)
    return sql.replace('"', "")


def index_definitions(engine: Engine) -> dict[str, str]:
    """Every index the database holds (constraint-backed ones excluded), as the database states it."""
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            rows = connection.execute(
                text("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
            ).all()
        else:
            rows = connection.execute(
                text(
                    "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
                    "AND indexname NOT IN (SELECT conname FROM pg_constraint)"
                )
            ).all()
    return {name: normalized(sql) for name, sql in rows}


def autoincrement_tables(engine: Engine) -> set[str]:
    with closing(sqlite3.connect(make_url(str(engine.url)).database or "")) as conn:
        rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    return {name for name, sql in rows if "AUTOINCREMENT" in sql.upper()}


def reference_schema(make: Callable[[], Engine]) -> Engine:
    """A database that `metadata.create_all` built: what tables.py says, with no migration."""
    engine = make()
    metadata.create_all(engine)
    return engine


TEXTUAL_INDEXES = {
    index.name
    for table in metadata.tables.values()
    for index in table.indexes
    if any(isinstance(element, TextClause) for element in index.expressions)
}


def only_for_another_dialect(diff: Any, dialect: str) -> bool:
    """An index or constraint that tables.py creates on another kind of database only
    (`.ddl_if(dialect=...)`), reported missing: compare_metadata does not look at ddl_if."""
    if not (isinstance(diff, tuple) and diff[0] in ("add_index", "add_constraint")):
        return False
    condition = DIALECT_OF.get(diff[1].name)  # the diff holds a copy, without its ddl_if
    return condition is not None and condition not in (None, dialect)


# name -> the only dialect it is created on, for tables.py's indexes and constraints with ddl_if.
DIALECT_OF = {
    item.name: item._ddl_if.dialect
    for table in metadata.tables.values()
    for item in (*table.indexes, *table.constraints)
    if item._ddl_if is not None and isinstance(item.name, str)
}


def differences_from_tables_py(engine: Engine, make: Callable[[], Engine]) -> list[Any]:
    """compare_metadata's differences, then those of full index definitions (and AUTOINCREMENT)."""
    reference = reference_schema(make)
    migrated_indexes = index_definitions(engine)
    reference_indexes = index_definitions(reference)
    same_definition = {
        name for name in TEXTUAL_INDEXES if migrated_indexes.get(name, "") == reference_indexes.get(name)
    }
    differences = [
        diff
        for diff in compare_with_metadata(engine)
        if not (
            isinstance(diff, tuple)
            and diff[0] in ("add_index", "remove_index")
            and diff[1].name in same_definition
        )
        and not only_for_another_dialect(diff, engine.dialect.name)
    ]
    for name in sorted(set(migrated_indexes) | set(reference_indexes)):
        if migrated_indexes.get(name) != reference_indexes.get(name):
            differences.append(
                (
                    "index definition",
                    name,
                    migrated_indexes.get(name),
                    "tables.py:",
                    reference_indexes.get(name),
                )
            )
    if engine.dialect.name == "sqlite" and autoincrement_tables(engine) != autoincrement_tables(reference):
        differences.append(
            (
                "AUTOINCREMENT tables",
                autoincrement_tables(engine),
                "tables.py:",
                autoincrement_tables(reference),
            )
        )
    return differences


def assert_schema_is_tables_py(engine: Engine, make: Callable[[], Engine]) -> None:
    differences = differences_from_tables_py(engine, make)
    assert differences == [], (
        f"{engine.dialect.name}: the migrated schema differs from tables.py:\n"
        + "\n".join(map(repr, differences))
    )
    assert tables_of(engine) == set(metadata.tables) | {VERSION_TABLE}


# --- the tests -------------------------------------------------------------------------------------


def test_there_is_one_line_of_migrations() -> None:
    revisions = revisions_base_to_head()
    assert revisions, "no migrations"
    assert len(set(revisions)) == len(revisions)
    # upgrade_to_head skips alembic when the database is at HEAD_REVISION: a new migration
    # that forgot to move it would never run on an existing database.
    assert revisions[-1] == HEAD_REVISION, "storage/migrate.py's HEAD_REVISION is not the newest migration"


def test_upgrading_through_every_migration_yields_tables_py(new_database: Callable[[], Engine]) -> None:
    engine = new_database()
    for revision in revisions_base_to_head():
        run_alembic(engine, command.upgrade, revision)
        assert current_revision(engine) == revision
    assert_schema_is_tables_py(engine, new_database)


def test_upgrade_to_head_as_serve_runs_it_yields_tables_py(new_database: Callable[[], Engine]) -> None:
    engine = new_database()
    assert not is_at_head(engine)
    upgrade_to_head(engine)
    assert is_at_head(engine)
    upgrade_to_head(engine)  # a second run is a no-op
    assert current_revision(engine) == revisions_base_to_head()[-1]
    assert_schema_is_tables_py(engine, new_database)


def test_every_downgrade_runs_and_upgrading_again_yields_tables_py(
    new_database: Callable[[], Engine],
) -> None:
    engine = new_database()
    revisions = revisions_base_to_head()
    upgrade_to_head(engine)
    for revision, below in zip(reversed(revisions), [*reversed(revisions[:-1]), None], strict=True):
        assert current_revision(engine) == revision
        run_alembic(engine, command.downgrade, below or "base")
    assert current_revision(engine) is None
    assert tables_of(engine) <= {VERSION_TABLE}, f"left behind at base: {tables_of(engine)}"

    upgrade_to_head(engine)
    assert current_revision(engine) == revisions[-1]
    assert_schema_is_tables_py(engine, new_database)


# --- building an index without stopping the queue (PostgreSQL) -----------------------------------

# The concurrent builds, (the revision before, the migration, the index): 0011's (dropped
# again by 0013) and 0013's.
CONCURRENT_BUILDS = [
    ("0010", "0011", "ix_jobs_pending_creator"),
    ("0012", "0013", "ix_jobs_creator_status"),
    ("0012", "0013", "ix_jobs_worker_status"),
]
FIRST_CONCURRENT_BUILD_BEFORE = "0010"
HEAD_INDEXES = ("ix_jobs_creator_status", "ix_jobs_worker_status")
FILL_JOBS = """
INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, attempt, run_at,
                  created_by, worker_id, created_at, updated_at)
SELECT 'noop', '{}', 10, 'pending', 0, 3, 0, now(), 'p' || (g % 50), 'w' || (g % 7), now(), now()
FROM generate_series(1, 200000) AS g
"""
INDEX_IS_VALID = "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(:name)"


def index_is_valid(engine: Engine, name: str) -> bool | None:
    with engine.connect() as connection:
        return connection.execute(text(INDEX_IS_VALID), {"name": name}).scalar()


def postgres_only(engine: Engine) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("CREATE INDEX CONCURRENTLY: PostgreSQL's")


def test_servers_upgrading_together_wait_for_the_concurrent_index_build(
    new_database: Callable[[], Engine],
) -> None:
    """Migrations 0011 and 0013 build their indexes CONCURRENTLY, outside any transaction, so
    the migration lock is held on the session. Servers that start meanwhile must wait for it
    without holding a snapshot: the build waits for every older snapshot, and a server
    waiting in pg_advisory_lock holds one (a deadlock, or a build that fails). All of them
    start, the schema is tables.py's once."""
    import threading

    engine = new_database()
    postgres_only(engine)
    run_migrations(engine, command.upgrade, FIRST_CONCURRENT_BUILD_BEFORE)
    with engine.begin() as connection:
        connection.execute(text(FILL_JOBS))
    errors: list[BaseException] = []

    def start() -> None:
        try:
            upgrade_to_head(engine)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    servers = [threading.Thread(target=start) for _ in range(3)]
    for server in servers:
        server.start()
    for server in servers:
        server.join(timeout=120)
    assert not errors and not any(s.is_alive() for s in servers), errors
    assert all(index_is_valid(engine, name) is True for name in HEAD_INDEXES)
    assert current_revision(engine) == HEAD_REVISION
    assert_schema_is_tables_py(engine, new_database)


@pytest.mark.parametrize(("before", "migration", "index"), CONCURRENT_BUILDS)
def test_an_interrupted_concurrent_build_is_built_again(
    new_database: Callable[[], Engine], before: str, migration: str, index: str
) -> None:
    """A build CONCURRENTLY that was interrupted (the server killed, the connection lost)
    leaves an invalid index, which IF NOT EXISTS would keep for good: the migration drops it
    and builds it again; the schema at head is tables.py's."""
    engine = new_database()
    postgres_only(engine)
    run_migrations(engine, command.upgrade, before)
    with engine.begin() as connection:
        connection.execute(text(f"CREATE INDEX {index} ON jobs (created_by)"))
        connection.execute(
            text(f"UPDATE pg_index SET indisvalid = false WHERE indexrelid = '{index}'::regclass")
        )
    run_migrations(engine, command.upgrade, migration)
    assert index_is_valid(engine, index) is True
    upgrade_to_head(engine)
    assert_schema_is_tables_py(engine, new_database)
