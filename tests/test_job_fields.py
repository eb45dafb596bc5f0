"""A job's fields are declared in few places; these tests keep them from drifting apart.

`storage/tables.py` (columns) and `model.Job` must match exactly (the row decoder is
generated from the table); the GraphQL `Job` type exposes every model field but the
internal `created_by`, plus the relations computed on request (`events`, which takes an
argument and reads job_events); the Python client's `Job` has exactly the GraphQL fields but
those relations, and its selections are derived from it.
"""

from __future__ import annotations

import dataclasses

from graphql import GraphQLObjectType

from queuelog import client, model
from queuelog.schema import schema
from queuelog.storage.tables import jobs

INTERNAL_FIELDS = {"created_by"}
RELATIONS = {"events"}


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
    model_fields = {f.name for f in dataclasses.fields(model.Job)}
    assert set(graphql_job_fields()) == model_fields - INTERNAL_FIELDS


def test_the_client_job_has_exactly_the_graphql_fields() -> None:
    assert {f.name for f in dataclasses.fields(client.Job)} == set(graphql_job_fields())


def test_the_client_selections_name_graphql_fields() -> None:
    graphql_names = set(graphql_job_fields().values())
    assert set(client.JOB_FIELDS.split()) == graphql_names
    assert set(client.WORKER_JOB_FIELDS.split()) == graphql_names - {"error"}
