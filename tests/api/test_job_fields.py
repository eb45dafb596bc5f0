"""A job's fields are declared in few places; these tests keep them from drifting apart.

`storage/schema/tables.py` (columns) and `model.Job` must match exactly (the row decoder is
generated from the table); the GraphQL `Job` type exposes every model field but the
internal `created_by`, plus the relations computed on request (`events` and `attempts`,
which take an argument and read job_events); the Python client's `Job` has exactly the GraphQL fields but
those relations, and its selections are derived from it.

The lists a new column would otherwise need by hand are generated from the table (the
INSERTs, PostgreSQL's arrays, a new job's row and Job: storage/schema/new_job.py) or from the
client's dataclass (`client.Job.from_graphql`); the client-side selections chosen by hand
(the worker's, the dashboard's and the bench's copy of it) are checked here against the
schema, and each failure names the file to fix.
"""

from __future__ import annotations

import dataclasses

from graphql import GraphQLObjectType

from queuelog import model
from queuelog.graphql_api import schema
from queuelog.sdk import types as client
from queuelog.storage.schema.tables import jobs

INTERNAL_FIELDS = {
    "created_by",
    "delayed",
    "timeout_at",
    "dependency_count",
    "has_dependents",
    "revision",
    "enqueued_as",
}
RELATIONS = {"events", "dependsOn", "attempts"}
# Model fields exposed in another form: when cancellation was asked for, as a flag
# (model.Job.cancel_requested).
EXPOSED_AS = {"cancel_requested_at": "cancel_requested"}


def graphql_job_fields() -> dict[str, str]:
    """python name -> GraphQL name of the Job fields that hold the job's own values."""
    job_type = schema._schema.type_map["Job"]
    assert isinstance(job_type, GraphQLObjectType)
    assert set(job_type.fields) >= RELATIONS
    return {
        field.extensions["strawberry-definition"].python_name: name
        for name, field in job_type.fields.items()
        if name not in RELATIONS
    }


def test_the_table_and_the_model_have_the_same_fields() -> None:
    assert [c.name for c in jobs.c] and {c.name for c in jobs.c} == {
        f.name for f in dataclasses.fields(model.Job)
    }


def test_the_graphql_type_exposes_every_model_field_but_the_internal_ones() -> None:
    model_fields = {EXPOSED_AS.get(f.name, f.name) for f in dataclasses.fields(model.Job)}
    assert set(graphql_job_fields()) == model_fields - INTERNAL_FIELDS


def test_the_client_job_has_exactly_the_graphql_fields() -> None:
    assert {f.name for f in dataclasses.fields(client.Job)} == set(graphql_job_fields())


def test_the_client_selections_name_graphql_fields() -> None:
    graphql_names = set(graphql_job_fields().values())
    assert set(client.JOB_FIELDS.split()) == graphql_names
    assert set(client.WORKER_JOB_FIELDS.split()) == graphql_names - {"error"}


# --- the lists derived from the table, and the client-side lists checked against the schema ---


def test_an_enqueue_writes_every_column_but_the_id_and_the_lifecycle_ones() -> None:
    from queuelog.storage.postgres.statements import PostgresStatements
    from queuelog.storage.postgres.statements.sending import INSERT_JOBS_AT_ONCE
    from queuelog.storage.schema.codec import LIFECYCLE_COLUMNS, NEW_JOB_COLUMNS
    from queuelog.storage.sqlite.statements import SqliteStatements

    assert set(NEW_JOB_COLUMNS) == {c.name for c in jobs.c} - {"id"} - LIFECYCLE_COLUMNS
    inserted = ", ".join(NEW_JOB_COLUMNS)
    for statement in (
        SqliteStatements.INSERT_JOB,
        PostgresStatements.INSERT_JOB,
        PostgresStatements.INSERT_JOB_ONCE,
        INSERT_JOBS_AT_ONCE.sql,
    ):
        assert f"INSERT INTO jobs ({inserted})" in statement
    assert [name for name, _ in INSERT_JOBS_AT_ONCE.arrays] == list(NEW_JOB_COLUMNS)


def test_a_new_jobs_row_and_job_come_from_the_table() -> None:
    from datetime import UTC, datetime

    from queuelog.storage.schema.codec import LIFECYCLE_COLUMNS, NEW_JOB_COLUMNS
    from queuelog.storage.schema.new_job import new_job, row_values
    from queuelog.storage.schema.types import to_micros

    now = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    item = model.NewJob("email", {"to": "a"}, model.Priority.HIGH, 3, "key-1", payload_json='{"to":"a"}')
    row = row_values(item, "producer", to_micros(now))
    assert list(row) == list(NEW_JOB_COLUMNS)
    assert row["payload"] == '{"to":"a"}' and row["priority"] == 20 and row["run_at"] == to_micros(now)
    job = new_job(7, item, "producer", now)
    # NULL, or the default its row and the model share (snooze_count: 0)
    defaults = {
        f.name: None if f.default is dataclasses.MISSING else f.default for f in dataclasses.fields(model.Job)
    }
    assert {column: getattr(job, column) for column in LIFECYCLE_COLUMNS} == {
        c: defaults[c] for c in LIFECYCLE_COLUMNS
    }
    assert job.snooze_count == 0
    assert (job.id, job.idempotency_key, job.run_at, job.status) == (7, "key-1", now, model.JobStatus.PENDING)


def test_a_column_that_no_enqueue_fills_is_named_at_import() -> None:
    import pytest

    from queuelog.storage.schema import new_job

    with pytest.raises(RuntimeError, match=r"jobs.some_new_column: model.NewJob has no field"):
        new_job._from_new_job("some_new_column")


def test_the_client_reads_every_field_of_its_job_from_its_graphql_name() -> None:
    from datetime import datetime

    names = graphql_job_fields()
    data: dict[str, object] = {name: f"value of {field}" for field, name in names.items()}
    times = {f.name for f in dataclasses.fields(client.Job) if str(f.type).startswith("datetime")}
    for field in times:
        data[names[field]] = "2026-01-02T03:04:05Z"
    job = client.Job.from_graphql(data)
    for field in names:
        expected = (
            datetime.fromisoformat("2026-01-02T03:04:05+00:00") if field in times else data[names[field]]
        )
        assert getattr(job, field) == expected, field
    del data["error"]  # a worker's selection
    assert client.Job.from_graphql(data).error is None


def test_the_worker_claims_the_fields_of_its_job_context_and_the_lease() -> None:
    from queuelog.sdk.worker.job import JobContext
    from queuelog.sdk.worker.producer import CLAIM_FIELDS

    claimed = CLAIM_FIELDS.split()
    context = [client.graphql_name(f.name) for f in dataclasses.fields(JobContext)]
    where = "queuelog/sdk/worker/producer.py CLAIM_FIELDS"
    assert claimed == [*context, "claimedAt", "leaseExpiresAt"], where
    assert set(claimed) <= set(graphql_job_fields().values()), where
    JobContext.from_graphql({name: 1 for name in claimed})  # reads nothing else


def _javascript_string(source: str, name: str) -> str:
    """The value of `const NAME = "..." + `...`;`: its literals joined (templates as written)."""
    import re

    match = re.search(rf"const {name} =\s*(.*?);\n", source, re.DOTALL)
    assert match, name
    return "".join(
        quoted or template for quoted, template in re.findall(r'"([^"]*)"|`([^`]*)`', match.group(1))
    )


def test_the_dashboard_asks_for_job_fields_and_shows_only_what_it_asked_for() -> None:
    """The dashboard shows a chosen set of fields (a new column need not appear there); each
    must be a field of the schema's Job, and each one its script reads must be asked for."""
    import re
    from pathlib import Path

    from bench import _dashboard

    dashboard = Path(__file__).parents[2] / "queuelog/web/static/dashboard"
    queries = (dashboard / "queries.js").read_text()
    timeline = re.search(r"const TIMELINE_EVENTS = (\d+);", queries)
    assert timeline
    row = _javascript_string(queries, "ROW_FIELDS")
    detail = _javascript_string(queries, "DETAIL_FIELDS").replace("${TIMELINE_EVENTS}", timeline.group(1))
    asked = set(row.split()) | set(detail.split("events(")[0].split()) | {"error"}  # error: ADMIN's detail
    assert asked <= set(graphql_job_fields().values()), ("queuelog/web/static/dashboard/queries.js", asked)
    modules = sorted(dashboard.glob("*.js"))
    assert modules, dashboard
    read = set(re.findall(r"\bjob\.([a-zA-Z]+)", "\n".join(path.read_text() for path in modules))) - RELATIONS
    assert read <= asked, ("queuelog/web/static/dashboard/ reads fields it never asks for", read - asked)
    assert (row, detail) == (_dashboard.ROW_FIELDS, _dashboard.DETAIL_FIELDS), "bench/_dashboard.py"
    attempt_fields = _javascript_string(queries, "ATTEMPT_FIELDS")
    assert set(attempt_fields.split()) < set(schema._schema.type_map["JobAttempt"].fields), "queries.js"
    assert attempt_fields == _dashboard.ATTEMPT_FIELDS, "bench/_dashboard.py"
