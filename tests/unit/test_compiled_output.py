"""The compiled path's generated serializer (queuelog/compiled/output.py) answers regular
objects itself and hands only the irregular ones to the precise path.

A regular object may hold null in a nullable field: the worker's claim selection asks for
`concurrencyKey` and `timeoutSeconds`, which most jobs leave null. Until this test, any
such null sent every claimed job down the precise (interpreted) path, about 5 us of server
CPU per job end to end, with byte-identical answers, so no equivalence test could see it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from graphql import OperationDefinitionNode, parse

from queuelog.compiled.output import Irregular, ValuePlan, fast, plan_value
from queuelog.graphql_api import schema
from queuelog.model import Job, JobStatus, Priority
from queuelog.sdk.worker.producer import CLAIM_FIELDS

NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def claim_plan(fields: str) -> ValuePlan:
    """The plan of `claimJobs`'s answer for this selection."""
    document = parse(f"mutation {{ claimJobs(limit: 2) {{ {fields} }} }}")
    operation = document.definitions[0]
    assert isinstance(operation, OperationDefinitionNode)
    (root,) = operation.selection_set.selections
    graphql_schema = schema._schema
    mutation = graphql_schema.mutation_type
    assert mutation is not None
    return plan_value(graphql_schema, mutation.fields["claimJobs"].type, root.selection_set)  # type: ignore[attr-defined]


def job(**changes: Any) -> Job:
    values: dict[str, Any] = {
        "id": 7,
        "type": "email",
        "payload": {"to": "a@example.com"},
        "priority": Priority.HIGH,
        "status": JobStatus.RUNNING,
        "retry_count": 0,
        "max_retries": 3,
        "attempt": 1,
        "idempotency_key": None,
        "worker_id": "w",
        "claimed_at": NOW,
        "lease_expires_at": NOW,
        "run_at": NOW,
        "finished_at": None,
        "result": None,
        "error": None,
        "created_by": "p",
        "created_at": NOW,
        "updated_at": NOW,
    }
    values.update(changes)
    return Job(**values)


def test_the_workers_claim_with_null_nullable_fields_is_answered_fast() -> None:
    plan = claim_plan(CLAIM_FIELDS)
    answer = fast(plan, [job(), job(id=8, concurrency_key="tenant-1", timeout_seconds=30)])
    assert answer[0]["id"] == "7"
    assert answer[0]["concurrencyKey"] is None and answer[0]["timeoutSeconds"] is None
    assert answer[0]["claimedAt"] == "2030-01-02T03:04:05+00:00"
    assert (answer[1]["concurrencyKey"], answer[1]["timeoutSeconds"]) == ("tenant-1", 30)


REGULAR = ["id type", "id concurrencyKey", "__typename id idempotencyKey finishedAt"]


@pytest.mark.parametrize("fields", REGULAR)
def test_objects_whose_nulls_are_all_in_nullable_fields_are_regular(fields: str) -> None:
    assert fast(claim_plan(fields), [job()])[0]["id"] == "7"


@pytest.mark.parametrize("fields", ["id type", "type concurrencyKey", "concurrencyKey type timeoutSeconds"])
def test_null_in_a_non_null_field_is_irregular(fields: str) -> None:
    """Only the precise path words a null where the schema promises a value."""
    broken = job(type=None)
    with pytest.raises(Irregular):
        fast(claim_plan(fields), [broken])
