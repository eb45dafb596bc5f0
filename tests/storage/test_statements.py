"""Each database defines every statement of statements.py, under the same names, taking the
same parameters: an operation asks for a statement by name and passes one set of values. The
statements only some databases have are those their capabilities name."""

from __future__ import annotations

import itertools
import re

import pytest

from queuelog.storage.postgres.connection import POSTGRES
from queuelog.storage.postgres.statements import PostgresStatements, PostgresWriterStatements
from queuelog.storage.postgres.statements.sending import AT_ONCE
from queuelog.storage.sqlite.connection import SQLITE
from queuelog.storage.sqlite.statements import SqliteStatements
from queuelog.storage.statements import (
    ONLY_WHERE,
    STATUS_VALUES_IN_ORDER,
    BulkWalk,
    Statements,
    statement_names,
)

DATABASES = [SqliteStatements, PostgresStatements, PostgresWriterStatements]
CAPABILITIES = {SqliteStatements: SQLITE, PostgresStatements: POSTGRES, PostgresWriterStatements: POSTGRES}
SQLITE_PARAMETER = re.compile(r"(?<![:\w]):(\w+)")
POSTGRES_PARAMETER = re.compile(r"%\((\w+)\)s")
# list_jobs: (by_creator, by_worker, the statuses of its parts, job_type, after)
LIST_SHAPES = [
    (by_creator, by_worker, statuses, job_type, after)
    for by_creator, by_worker, job_type, after in itertools.product((False, True), repeat=4)
    for statuses in ((), ("pending",), ("running", "completed"))
]
# scope_page: (by_worker, the statuses of its parts, job_type)
SCOPE_SHAPES = [
    (by_worker, statuses, job_type)
    for by_worker, job_type in itertools.product((False, True), repeat=2)
    for statuses in (("pending",), ("completed",), ("running", "completed", "failed"), STATUS_VALUES_IN_ORDER)
]
MATCH_SHAPES = [(walk, *flags) for walk in BulkWalk for flags in itertools.product((False, True), repeat=5)]
HELD_SHAPES = list(itertools.product((False, True), repeat=2))
# Per-type statements: (number of types) -> SQL. SQLite names each type's parameters
# (`type0`, `quota0`, `key0`, ...), PostgreSQL takes them as arrays (`types`, `quotas`, `keys`).
PER_TYPE = {
    "claim_jobs",
    "claim_within_quotas",
    "promote_due",
    "ready_heads",
    "key_heads",
    "next_due",
    "oldest_due",
    "oldest_due_of",
}
NUMBERED = re.compile(r"^([a-z]+)\d+$")


def _sqlite_parameters(sql: str) -> set[str]:
    return {NUMBERED.sub(r"\1s", name) for name in SQLITE_PARAMETER.findall(sql)}


@pytest.mark.parametrize("database", DATABASES, ids=lambda d: d.__name__)
def test_every_name_is_defined(database: type[Statements]) -> None:
    for name in statement_names():
        if name in ONLY_WHERE and not hasattr(database, name):
            continue  # test_only_a_database_with_the_capability_has_the_statement
        statement = getattr(database, name)
        if name == "list_jobs":
            assert all(statement(*shape).startswith("SELECT") for shape in LIST_SHAPES)
        elif name == "scope_page":
            assert all(statement(*shape).startswith("SELECT") for shape in SCOPE_SHAPES)
        elif name == "match_jobs":
            assert all(statement(*shape).strip().startswith("WITH") for shape in MATCH_SHAPES)
        elif name == "held_schedule_jobs":
            assert all(statement(*shape).startswith("SELECT") for shape in HELD_SHAPES)
        elif name in PER_TYPE:
            assert all(statement(n).strip() for n in (1, 2, 5)), name
        else:
            assert isinstance(statement, str) and statement.strip(), name


def test_both_databases_take_the_same_parameters() -> None:
    for name in statement_names():
        if name == "list_jobs":
            pairs = [(SqliteStatements.list_jobs(*s), PostgresStatements.list_jobs(*s)) for s in LIST_SHAPES]
        elif name == "scope_page":
            pairs = [
                (SqliteStatements.scope_page(*s), PostgresStatements.scope_page(*s)) for s in SCOPE_SHAPES
            ]
        elif name == "match_jobs":
            pairs = [
                (SqliteStatements.match_jobs(*s), PostgresStatements.match_jobs(*s)) for s in MATCH_SHAPES
            ]
        elif name == "held_schedule_jobs":
            pairs = [
                (SqliteStatements.held_schedule_jobs(*s), PostgresStatements.held_schedule_jobs(*s))
                for s in HELD_SHAPES
            ]
        elif name in PER_TYPE:
            pairs = [
                (getattr(SqliteStatements, name)(n), getattr(PostgresStatements, name)(n)) for n in (1, 3)
            ]
        elif name == "COMPLETE_MANY":  # PostgreSQL's only: SQLite reads, then COMPLETE_CHECKED
            assert set(POSTGRES_PARAMETER.findall(PostgresStatements.COMPLETE_MANY)) == {
                "id",
                "attempt",
                "result",
                "worker",
                "now",
            }
            continue
        elif name in ("WALK_IN_INDEX_ORDER", "EVENT_HORIZON", "LOCK_CONTROLLED_CLAIMS"):
            assert not POSTGRES_PARAMETER.findall(getattr(PostgresStatements, name))  # PostgreSQL's only
            continue
        elif name == "PROMOTE_PENDING":  # PostgreSQL's only: it takes promote_due's `now`
            assert set(POSTGRES_PARAMETER.findall(PostgresStatements.PROMOTE_PENDING)) == {"now"}
            continue
        else:
            pairs = [(getattr(SqliteStatements, name), getattr(PostgresStatements, name))]
        for sqlite, postgres in pairs:
            assert _sqlite_parameters(sqlite) == set(POSTGRES_PARAMETER.findall(postgres)), name


@pytest.mark.parametrize("database", DATABASES, ids=lambda d: d.__name__)
def test_only_a_database_with_the_capability_has_the_statement(database: type[Statements]) -> None:
    can = CAPABILITIES[database]
    for name, capability in ONLY_WHERE.items():
        assert hasattr(database, name) is getattr(can, capability), name
    assert not SQLITE.concurrent_writes and POSTGRES.concurrent_writes


def test_a_database_without_a_statement_fails_when_it_is_defined() -> None:
    with pytest.raises(TypeError, match=r"missing statements \['ACTIVE_KEY', 'ADD_TO_COUNT', "):

        class Partial(Statements):
            PING = "SELECT 1"


def test_a_statement_no_database_declares_fails_when_it_is_defined() -> None:
    with pytest.raises(TypeError, match=r"undeclared \['CLAIM_EVERYTHING'\]"):

        class Extra(SqliteStatements):
            CLAIM_EVERYTHING = "UPDATE jobs SET status = 'running'"


def _texts(database: type[Statements]) -> list[tuple[str, str]]:
    """(name, SQL) of every statement of `database`, in each of its shapes."""
    texts = []
    for name in statement_names():
        statement = getattr(database, name, None)
        if name == "list_jobs":
            texts += [(name, statement(*shape)) for shape in LIST_SHAPES]
        elif name == "match_jobs":
            texts += [(name, statement(*shape)) for shape in MATCH_SHAPES]
        elif name in PER_TYPE:
            texts += [(name, statement(n)) for n in (1, 3)]
        elif isinstance(statement, str):
            texts.append((name, statement))
    return texts


UPDATE_OF_JOBS = re.compile(r"\bUPDATE\s+jobs\s+SET\b(.*?)(\bWHERE\b|$)", re.IGNORECASE | re.DOTALL)


@pytest.mark.parametrize("database", DATABASES, ids=lambda d: d.__name__)
def test_every_update_of_a_job_adds_one_to_its_revision(database: type[Statements]) -> None:
    """Subscriptions order a job's states by `revision`: an UPDATE that left it alone would
    make two states of one job look alike (jobUpdated would drop the later one)."""
    texts = _texts(database)
    if database is PostgresStatements:  # executemany's one-statement forms
        texts += [(f"{form.sql[:30]}... (at once)", form.sql) for form in AT_ONCE.values()]
    updates = [(name, m.group(1)) for name, sql in texts for m in UPDATE_OF_JOBS.finditer(sql)]
    assert len(updates) >= 15
    for name, assignments in updates:
        assert re.search(r"\brevision\s*=\s*\(?\s*(jobs\.)?revision\s*\+\s*1\b", assignments), name


@pytest.mark.parametrize("database", [SqliteStatements, PostgresStatements], ids=lambda d: d.__name__)
def test_a_page_writes_only_status_values_into_its_text(database: type[Statements]) -> None:
    with pytest.raises(ValueError, match="not a status"):
        database.scope_page(False, ("pending' OR '1' = '1",), False)
