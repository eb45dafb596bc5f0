"""One enqueue request (queuelog/enqueue_request.py), and everything that must name its fields.

A new enqueue field is a field of EnqueueRequest and of the GraphQL input; these tests name
what else to edit when it is not enough. Proven: the GraphQL input has exactly the request's
fields, with the SDK's defaults; the SDK's `enqueue` takes every field but
`depends_on_items` (enqueue_many's), as do `Client.enqueue` and `LocalQueue.enqueue`, and
`EnqueueItem` names them all; the SDK sends a request as it always
has, byte for byte; a NewJob is the request and what storage derives from it; a replay of an
idempotency key is compared on every field but those docs/api.md says it may change, and the
docs name exactly the fields compared.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import typing
from datetime import datetime, timedelta, timezone
from pathlib import Path

from graphql import GraphQLInputObjectType

from queuelog.client import AsyncClient, Client, Enqueued, EnqueueItem, Job
from queuelog.enqueue_request import REPLAY_MAY_CHANGE, REQUEST_FIELDS, EnqueueRequest
from queuelog.graphql_api import schema
from queuelog.model import JobRequest, NewJob, Priority
from queuelog.sdk.inputs import enqueue_item_request, enqueue_request
from queuelog.storage.operations.enqueue import _SAME_FIELDS
from queuelog.testing import LocalQueue

DOCS = Path(__file__).resolve().parents[2] / "docs"


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def test_the_graphql_input_has_the_requests_fields_with_the_sdks_defaults() -> None:
    graphql_input = schema._schema.type_map["EnqueueJobInput"]
    assert isinstance(graphql_input, GraphQLInputObjectType)
    by_python_name = {
        field.extensions["strawberry-definition"].python_name: (name, field)
        for name, field in graphql_input.fields.items()
    }
    assert set(by_python_name) == set(REQUEST_FIELDS), "queuelog/schema/inputs.py EnqueueJobInput"
    assert all(name == camel(python) for python, (name, _) in by_python_name.items())
    sent_by_default = enqueue_request("t")
    for python, (name, field) in by_python_name.items():
        if python == "type":
            continue
        default = field.default_value
        expected = getattr(sent_by_default, python)
        if isinstance(default, Priority):
            default = default.name
        assert (list(expected) if isinstance(expected, tuple) else expected) == default, name


def test_the_sdk_takes_every_field() -> None:
    taken = set(REQUEST_FIELDS) - {"depends_on_items"}  # enqueue_many's alone
    for enqueue in (enqueue_request, AsyncClient.enqueue, Client.enqueue, LocalQueue.enqueue):
        parameters = [p for p in inspect.signature(enqueue).parameters if p != "self"]
        assert set(parameters) == taken, enqueue.__qualname__
    assert set(typing.get_type_hints(EnqueueItem)) == set(REQUEST_FIELDS), "queuelog/sdk/types.py EnqueueItem"
    assert inspect.iscoroutinefunction(AsyncClient.enqueue)


def sent(request: EnqueueRequest[str, str]) -> str:
    return json.dumps(request.as_input(), ensure_ascii=False, separators=(",", ":"))


def test_the_sdk_sends_a_request_as_it_always_has() -> None:
    moment = datetime(2030, 1, 1, 9, 30, tzinfo=timezone(timedelta(hours=2)))
    job = Job(
        "7",
        "t",
        {},
        "LOW",
        "PENDING",
        0,
        3,
        0,
        None,
        None,
        None,
        None,
        moment,
        None,
        None,
        None,
        moment,
        moment,
    )
    everything = enqueue_request(
        "email",
        {"to": "é"},
        priority="high",
        idempotency_key="k",
        max_retries=0,
        run_at=moment,
        concurrency_key="tenant",
        timeout_seconds=30,
        depends_on=["5", job, Enqueued(job, False)],
    )
    assert sent(everything) == (
        '{"type":"email","payload":{"to":"é"},"priority":"HIGH","maxRetries":0,"idempotencyKey":"k",'
        '"runAt":"2030-01-01T07:30:00+00:00","concurrencyKey":"tenant","timeoutSeconds":30,'
        '"dependsOn":["5","7","7"]}'
    )
    assert sent(enqueue_request("email")) == '{"type":"email","payload":{},"priority":"LOW","maxRetries":3}'
    assert sent(enqueue_request("e", run_at="2030-01-01T09:00:00Z", depends_on=job)) == (
        '{"type":"e","payload":{},"priority":"LOW","maxRetries":3,"runAt":"2030-01-01T09:00:00+00:00",'
        '"dependsOn":["7"]}'
    )
    for positions, listed in ((0, "[0]"), ([0, 1], "[0,1]"), ((), None)):
        item = enqueue_item_request({"type": "b", "depends_on_items": positions})
        tail = f',"dependsOnItems":{listed}}}' if listed else "}"
        assert sent(item) == '{"type":"b","payload":{},"priority":"LOW","maxRetries":3' + tail


def test_a_new_job_is_the_request_and_what_storage_derives_from_it() -> None:
    names = [f.name for f in dataclasses.fields(NewJob)]
    assert names[: len(REQUEST_FIELDS)] == list(REQUEST_FIELDS)
    request = JobRequest("t", {"a": 1}, Priority.HIGH, 2, "key", None, "tenant", 30, (9, 3), ())
    job = NewJob.of(request, '{"a":1}', depends_on=(3, 9))
    assert isinstance(job, EnqueueRequest)
    assert {name: getattr(job, name) for name in REQUEST_FIELDS} == {
        **{name: getattr(request, name) for name in REQUEST_FIELDS},
        "depends_on": (3, 9),
    }
    assert (job.payload_json, job.schedule_name, job.waiting_for) == ('{"a":1}', None, 0)


def test_a_replay_is_compared_on_every_field_it_may_not_change_and_the_docs_name_them() -> None:
    compared_apart = {"payload", "depends_on", "depends_on_items"}  # as JSON, and as sets
    assert set(_SAME_FIELDS) == set(REQUEST_FIELDS) - REPLAY_MAY_CHANGE - compared_apart
    assert set(REQUEST_FIELDS) > REPLAY_MAY_CHANGE
    text = (DOCS / "api.md").read_text()
    paragraph = text.split("### Idempotency", 1)[1].split("\n\n", 2)[1]
    compared = re.search(
        r"returns the existing job\s+with `created: false`, if (.*?) are the same", paragraph, re.S
    )
    assert compared, paragraph
    named = set(re.findall(r"`(\w+)`", compared.group(1)))
    expected = {camel(n) for n in REQUEST_FIELDS if n not in REPLAY_MAY_CHANGE and n != "depends_on_items"}
    assert named == expected, "docs/api.md, Idempotency"
    ignored = re.search(r"\(`(\w+)` is not compared", paragraph)
    assert ignored and {camel(n) for n in REPLAY_MAY_CHANGE} == {ignored.group(1), "idempotencyKey"}
