"""Issue 14 part 1: one request must not freeze the server (QUEUELOG_MAX_COST, batched reads).

The attack, as the review ran it: a job collects 53 events the normal way (a worker fails it
with retry 26 times); its producer sends one `enqueueJobs` of 1,000 inputs that reuse the
job's idempotency key, so each input answers with the existing job, and each answer selects
29 aliases of `events(last: 100) { kind status at }`. Before the fix that took 32 s on SQLite,
answered 121 MB and held every other request (key checks, claims, heartbeats) behind it.

Proven here, on both databases:
- that document is refused before anything runs (data null, BAD_USER_INPUT, the cost and the
  limit in the message, nothing enqueued, not even the batch's one new job), while the same
  document for 2 inputs is answered in full;
- the largest allowed document, a page of 100 jobs with every field and `events(last: 100)`,
  is answered (tests/storage/test_statement_counts.py pins its reads: one of job_events for the whole
  page, however many jobs and aliases);
- the cost counts the request's own variables, exactly, on the compiled path and on
  Strawberry's, over HTTP and for subscriptions (a server with QUEUELOG_MAX_COST=500, where
  `enqueueJobs` answered with `created job { id status type }` costs 1 + 5 per input: 99
  inputs pass, 100 are refused);
- every document the dashboard and the SDK send fits, with each of their variables at its
  largest (the dashboard's word for word from bench/_dashboard.py and its modules; the SDK's
  recorded while it works against a real server).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import DEFAULT_JOB_TYPES, Server, serving
from graphql import FragmentDefinitionNode, OperationDefinitionNode, parse
from websockets.asyncio.client import connect

from bench import _dashboard
from queuelog.client import AsyncClient
from queuelog.graphql_api import build_schema
from queuelog.schema.cost import CostTooHigh
from queuelog.schema.extensions import cost_rule
from queuelog.settings import Settings
from queuelog.worker import Worker

ALIASES = 29
EVENT_ALIASES = " ".join(f"e{n}: events(last: 100) {{ kind status at }}" for n in range(ALIASES))
ATTACK = (
    "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) {"
    f" created job {{ id {EVENT_ALIASES} }} }} }}"
)
EVERY_FIELD = (
    "id type payload priority status retryCount maxRetries attempt idempotencyKey workerId claimedAt"
    " leaseExpiresAt runAt finishedAt result error createdAt updatedAt"
)
LARGEST_PAGE = (
    "query { jobs(first: 100) { totalCount pageInfo { hasNextPage endCursor }"
    f" edges {{ cursor node {{ {EVERY_FIELD} events(last: 100) {{ kind status at }} }} }} }} }}"
)
CLAIM = 'mutation { claimJob(types: ["report"]) { id attempt } }'
FAIL = 'mutation($id: ID!) { failJob(id: $id, error: "boom", retryInSeconds: 0) { status } }'
ENQUEUE_MANY = (
    "mutation($inputs: [EnqueueJobInput!]!) {"
    " enqueueJobs(inputs: $inputs) { created job { id status type } } }"
)


@pytest.fixture(scope="module")
def guarded(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with the default limit (50,000)."""
    with serving(backend, tmp_path_factory, job_types=DEFAULT_JOB_TYPES) as running:
        yield running


@pytest.fixture(scope="module")
def tight(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with QUEUELOG_MAX_COST=500, where the exact count shows."""
    with serving(backend, tmp_path_factory, job_types=DEFAULT_JOB_TYPES, max_cost=500) as running:
        yield running


def job_with_53_events(server: Server, producer: str, worker: str, key: str) -> str:
    """Enqueued, then claimed and failed with retry 26 times: 1 + 26 + 25 + 1 events."""
    made = server.gql(
        "mutation($i: EnqueueJobInput!) { enqueueJob(input: $i) { job { id } } }",
        {"i": {"type": "report", "idempotencyKey": key, "maxRetries": 25}},
        producer,
    ).ok()["enqueueJob"]["job"]["id"]
    for _ in range(26):
        claimed = server.gql(CLAIM, key=worker).ok()["claimJob"]
        assert claimed["id"] == made, claimed
        server.gql(FAIL, {"id": made}, worker).ok()
    return made


def test_the_reviews_attack_is_refused_before_anything_runs(
    guarded: Server, unique: Callable[[str], str]
) -> None:
    producer = guarded.make_key(unique("producer"), "producer")
    worker = guarded.make_key(unique("worker"), "worker")
    key = unique("welcome")
    job_id = job_with_53_events(guarded, producer, worker, key)
    history = guarded.gql(
        "query($id: ID!) { job(id: $id) { status events(last: 100) { kind } } }", {"id": job_id}, producer
    ).ok()["job"]
    assert history["status"] == "FAILED" and len(history["events"]) == 53

    fresh = unique("fresh")
    inputs = [{"type": "report", "idempotencyKey": key, "maxRetries": 25}] * 999
    inputs.append({"type": "report", "idempotencyKey": fresh})
    started = time.perf_counter()
    refused = guarded.gql(ATTACK, {"inputs": inputs}, producer)
    print(f"\n{guarded.backend}: the attack refused in {(time.perf_counter() - started) * 1000:.1f} ms")
    assert refused.status == 200
    assert refused.data is None and refused.codes == ["BAD_USER_INPUT"], refused.body
    message = refused.errors[0]["message"]
    assert "8,732,001" in message and "50,000" in message, message
    assert not guarded.sql("SELECT id FROM jobs WHERE idempotency_key = :k", k=fresh)  # nothing ran

    small = guarded.gql(ATTACK, {"inputs": inputs[:2]}, producer).ok()["enqueueJobs"]
    assert [item["created"] for item in small] == [False, False]
    for item in small:
        assert item["job"]["id"] == job_id
        lists = [item["job"][f"e{n}"] for n in range(ALIASES)]
        assert all(events == lists[0] for events in lists) and len(lists[0]) == 53
        assert lists[0][0]["kind"] == "ENQUEUED" and lists[0][-1]["kind"] == "FAILED"


def test_the_largest_allowed_document_is_answered(guarded: Server, unique: Callable[[str], str]) -> None:
    producer = guarded.make_key(unique("producer"), "producer")
    inputs = [{"type": "email", "payload": {"n": n}} for n in range(100)]
    guarded.gql(ENQUEUE_MANY, {"inputs": inputs}, producer).ok()
    page = guarded.gql(LARGEST_PAGE).ok()["jobs"]
    assert len(page["edges"]) == 100
    for edge in page["edges"]:
        assert edge["node"]["events"] and edge["node"]["events"][0]["kind"] == "ENQUEUED"
    doubled = LARGEST_PAGE.replace(
        " edges {", f" nodes {{ {EVERY_FIELD} events(last: 100) {{ kind status at }} }} edges {{"
    )
    assert guarded.gql(doubled).codes == ["BAD_USER_INPUT"]


@pytest.mark.parametrize("count, allowed", [(99, True), (100, False)])
def test_a_batch_counts_once_per_input_from_its_variables(
    tight: Server, unique: Callable[[str], str], count: int, allowed: bool
) -> None:
    producer = tight.make_key(unique("producer"), "producer")
    before = tight.sql("SELECT count(*) FROM jobs")[0][0]
    answer = tight.gql(ENQUEUE_MANY, {"inputs": [{"type": "email"}] * count}, producer)
    after = tight.sql("SELECT count(*) FROM jobs")[0][0]
    if allowed:
        assert len(answer.ok()["enqueueJobs"]) == count and after == before + count
    else:
        assert answer.data is None and answer.codes == ["BAD_USER_INPUT"], answer.body
        assert "501" in answer.errors[0]["message"] and "500" in answer.errors[0]["message"]
        assert after == before


# (document, variables, allowed): the compiled path plans a document once, with every variable
# at its bound; one that could go over runs Strawberry's way, which counts the request's own.
CLAIMS = [
    ("mutation($n: Int!) { claimJobs(limit: $n) { a: id b: id c: id d: id e: id } }", {"n": 100}, False),
    ("mutation($n: Int!) { claimJobs(limit: $n) { a: id b: id c: id d: id e: id } }", {"n": 10}, True),
    ("mutation { claimJobs(limit: 100) { a: id b: id c: id d: id e: id } }", {}, False),
    ("mutation { claimJobs(limit: 99) { a: id b: id c: id d: id e: id } }", {}, True),
    ('mutation($n: Int!) { claimJobs(limit: $n, types: ["resize"]) { id type } }', {"n": 100}, True),
]


@pytest.mark.parametrize("document, variables, allowed", CLAIMS)
def test_claims_are_counted_by_their_limit_on_both_paths(
    tight: Server, unique: Callable[[str], str], document: str, variables: dict[str, Any], allowed: bool
) -> None:
    worker = tight.make_key(unique("worker"), "worker")
    answer = tight.gql(document, variables, worker)
    if allowed:
        assert answer.ok()["claimJobs"] is not None
    else:
        assert answer.data is None and answer.codes == ["BAD_USER_INPUT"], answer.body
        assert "over the limit of 500" in answer.errors[0]["message"]
    assert "Traceback" not in tight.log()


def test_a_subscription_is_held_to_the_limit_per_event(tight: Server, unique: Callable[[str], str]) -> None:
    viewer = tight.make_key(unique("viewer"), "viewer")
    fits = "subscription { jobEvents { kind job { id a: events(last: 100) { kind status } } } }"  # 205
    over = (  # 1 + 1 + 1 + 1 + 3 x 201 = 607
        "subscription { jobEvents { kind job { id a: events(last: 100) { kind status }"
        " b: events(last: 100) { kind status } c: events(last: 100) { kind status } } } }"
    )
    producer = tight.make_key(unique("producer"), "producer")

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        async with connect(tight.ws_url, subprotocols=["graphql-transport-ws"], proxy=None) as ws:  # type: ignore[list-item]
            init = {"type": "connection_init", "payload": {"authorization": f"Bearer {viewer}"}}
            await ws.send(json.dumps(init))
            assert json.loads(await ws.recv())["type"] == "connection_ack"
            for op_id, query in (("over", over), ("fits", fits)):
                await ws.send(json.dumps({"id": op_id, "type": "subscribe", "payload": {"query": query}}))
            refusal = json.loads(await asyncio.wait_for(ws.recv(), 10))
            for _ in range(20):  # "fits" starts listening at some point: enqueue until it hears
                await asyncio.to_thread(
                    tight.gql, 'mutation { enqueueJob(input: {type: "noop"}) { job { id } } }', None, producer
                )
                with contextlib.suppress(TimeoutError):
                    while True:  # the refusal may be followed by its "complete"
                        delivered = json.loads(await asyncio.wait_for(ws.recv(), 0.5))
                        if delivered["id"] == "fits":
                            return refusal, delivered
            pytest.fail("the subscription that fits never delivered an event")

    refusal, delivered = asyncio.run(scenario())
    assert refusal["id"] == "over", refusal
    codes = (
        [e["extensions"]["code"] for e in refusal["payload"]]
        if refusal["type"] == "error"
        else [e["extensions"]["code"] for e in refusal["payload"].get("errors", [])]
    )
    assert codes == ["BAD_USER_INPUT"], refusal
    assert delivered["id"] == "fits" and delivered["type"] == "next", delivered
    event = delivered["payload"]["data"]["jobEvents"]
    assert event["kind"] == "ENQUEUED" and event["job"]["a"][0]["kind"] == "ENQUEUED"


# --- the documents queuelog's own clients send all fit -------------------------------------------

DASHBOARD = Path(__file__).parents[2] / "queuelog" / "web" / "static" / "dashboard"


def dashboard_subscriptions() -> list[str]:
    """The page's subscriptions, with its field lists filled in (they are JS template strings)."""
    source = "\n".join(path.read_text() for path in sorted(DASHBOARD.glob("*.js")))
    fields = {"ROW_FIELDS": _dashboard.ROW_FIELDS, "fields": _dashboard.DETAIL_FIELDS + " error"}
    documents = []
    for template in re.findall(r"`(subscription [^`]*)`", source):
        documents.append(re.sub(r"\$\{(\w+)\}", lambda m: fields[m.group(1)], template))
    assert len(documents) >= 2, documents
    return documents


SCHEDULES = 1000  # `schedules` costs by how many there are: the dashboard's fits with this many
TYPES = 1000  # so does `typeControls`, by the allowed types (an ADMIN may add any number)


def cost_of(document: str, settings: Settings) -> int:
    parsed = parse(document)
    operation = next(d for d in parsed.definitions if isinstance(d, OperationDefinitionNode))
    fragments = {d.name.value: d for d in parsed.definitions if isinstance(d, FragmentDefinitionNode)}
    schema = build_schema(settings)._schema
    real_sizes = {"Query.schedules": SCHEDULES, "Query.typeControls": TYPES}
    return cost_rule(settings).check(schema, operation, fragments, None, real_sizes)


def test_the_dashboards_documents_fit_with_every_variable_at_its_largest() -> None:
    settings = Settings(job_types=tuple(f"type-{n}" for n in range(50)))
    documents = sorted(_dashboard.QUERIES) + dashboard_subscriptions()
    costs = {document: cost_of(document, settings) for document in documents}
    assert max(costs.values()) <= settings.max_cost // 2, costs


def test_the_sdks_and_workers_documents_fit(
    guarded: Server, unique: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every document the SDK sends while a producer and a worker use it, at its largest."""
    sent: list[str] = []
    original = AsyncClient.post_json

    async def recording(self: AsyncClient, body: bytes, *args: Any, **kwargs: Any) -> dict[str, Any]:
        head = body.split(b',"variables"', 1)[0] + b"}"
        sent.append(json.loads(head)["query"])
        return await original(self, body, *args, **kwargs)

    monkeypatch.setattr(AsyncClient, "post_json", recording)
    producer = guarded.make_key(unique("producer"), "producer")
    worker_key = guarded.make_key(unique("worker"), "worker")

    async def scenario() -> None:
        admin = AsyncClient(guarded.url, guarded.admin_key)
        client = AsyncClient(guarded.url, producer)
        done = asyncio.Event()
        seen: list[str] = []

        def handle(job: Any) -> dict[str, Any]:
            seen.append(job.id)
            if len(seen) == 3:
                done.set()
            if job.payload.get("fail"):
                raise ValueError("fails once")
            return {"ok": True}

        made = await client.enqueue("resize", {"fail": True}, max_retries=0)
        others = await client.enqueue_many([{"type": "resize", "payload": {"n": n}} for n in range(2)])
        worker = Worker(guarded.url, worker_key, handlers={"resize": handle})
        running = asyncio.create_task(worker.run())
        await asyncio.wait_for(done.wait(), 30)
        ids = [made.id, *(answer.job.id for answer in others)]
        deadline = time.monotonic() + 30
        while True:  # the worker has reported every outcome (failJob, completeJobs)
            statuses = [getattr(await admin.get(job_id), "status", None) for job_id in ids]
            if statuses == ["FAILED", "COMPLETED", "COMPLETED"]:
                break
            assert time.monotonic() < deadline, statuses
            await asyncio.sleep(0.05)
        worker.stop()
        await asyncio.wait_for(running, 30)
        assert (await client.get(made.id)) is not None
        assert [job async for job in client.list(type="resize")]
        await client.stats()
        await admin.retry(made.id)
        await client.cancel(made.id)
        await client.aclose()
        await admin.aclose()

    asyncio.run(scenario())
    settings = Settings(job_types=tuple(DEFAULT_JOB_TYPES.split(",")))
    kinds = {re.search(r"\{\s*(\w+)", document).group(1) for document in sent}  # type: ignore[union-attr]
    assert {
        "enqueueJob",
        "enqueueJobs",
        "claimJobs",
        "job",
        "jobs",
        "queueStats",
        "retryJob",
        "cancelJob",
    } <= kinds
    # A worker whose claims come back short carries its completions in completeAndClaimJobs.
    assert kinds & {"completeJobs", "completeJob", "completeAndClaimJobs"} and "failJob" in kinds, kinds
    for document in set(sent):
        try:
            assert cost_of(document, settings) <= settings.max_cost // 2, document
        except CostTooHigh:
            pytest.fail(f"over the limit: {document}")
