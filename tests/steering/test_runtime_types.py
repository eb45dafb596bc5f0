"""Job types added at runtime (API.md section 12): `addJobType` and `removeJobType`, on real
servers over HTTP, on SQLite and PostgreSQL.

Proven:
- an added type is accepted at once by the server that added it and by another server on the
  same database, without a restart (polled, bounded: it is in fact the first enqueue after the
  answer); `typeControls` on both lists it, and it can be paused and limited like any other;
  the same over a websocket left open on the other server, where no request reads the types
  generation: an addition is accepted, a removal refused, each within a second;
- removing it: the next enqueue on either server is refused with BAD_USER_INPUT, as for any
  unknown type, also in a batch (refused whole); its existing jobs stay and are claimed,
  listed (by type) and retried; adding it again allows it again;
- a type in the receiving server's QUEUELOG_JOB_TYPES cannot be removed (BAD_USER_INPUT), and
  a server whose own QUEUELOG_JOB_TYPES names a type keeps accepting it after another server
  removed it from the added types; removing a type that was never added answers false;
- `addJobType` answers the type's controls; adding twice changes nothing; each change is one
  log line naming the caller;
- names: 1..100 of A-Z a-z 0-9 _ . : -, else BAD_USER_INPUT naming `type`, with nothing stored;
- `/metrics` on both servers lists an added type with a 0 sample in every per-type series
  docs/monitoring.md names, from the moment it is added, and its job counts once enqueued;
- the job counts (queueStats) match the jobs table throughout.

Roles (ADMIN only) are attacked in tests/security/test_v02_type_allowlist.py.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable, Iterator

import pytest
from api.test_metrics import documented_per_type_series, per_type, scrape
from conftest import Databases, GraphQLResponse, Server, launch_server
from websockets.asyncio.client import ClientConnection, connect
from websockets.typing import Subprotocol

ADD = "mutation($type: String!) { addJobType(type: $type) { type paused running maxRunning } }"
REMOVE = "mutation($type: String!) { removeJobType(type: $type) }"
ENQUEUE = "mutation($type: String!) { enqueueJob(input: {type: $type}) { job { id type status } } }"
ENQUEUE_MANY = "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { job { id } } }"
CONTROLS = "{ typeControls { type paused running } }"
PAUSE = "mutation($type: String!) { pauseType(type: $type) { type paused } }"
RESUME = "mutation($type: String!) { resumeType(type: $type) { type paused } }"
CLAIM = "mutation($type: String!) { claimJobs(limit: 10, types: [$type]) { id attempt type } }"
FAIL = """mutation($id: ID!, $attempt: Int) {
  failJob(id: $id, attempt: $attempt, error: "boom", retryable: false) { status } }"""
RETRY = "mutation($id: ID!) { retryJob(id: $id) { id status } }"
JOBS_OF_TYPE = "query($type: String!) { jobs(type: $type, first: 100) { totalCount nodes { id status } } }"
STATS = "{ queueStats { byType { type counts { pending running completed failed cancelled } } } }"
PROPAGATION_SECONDS = 1.0  # the contract: every server accepts a new type within a second
ENV_TYPES = "email,report"

_names = itertools.count(1)


def fresh_type(prefix: str = "rt") -> str:
    return f"{prefix}.{next(_names)}:v-{time.monotonic_ns() % 1_000_000}"


@pytest.fixture
def pair(databases: Databases, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    """Two servers on one database: `a` with QUEUELOG_JOB_TYPES email,report, `b` with
    email,report,shared."""
    url = databases.migrated()
    a = launch_server(tmp_path_factory.mktemp("a"), database_url=url, job_types=ENV_TYPES)
    try:
        b = launch_server(
            tmp_path_factory.mktemp("b"),
            database_url=url,
            job_types=f"{ENV_TYPES},shared",
            admin_key=a.admin_key,
        )
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


def enqueue(server: Server, job_type: str) -> GraphQLResponse:
    return server.gql(ENQUEUE, {"type": job_type})


def refused(response: GraphQLResponse, code: str, *words: str) -> None:
    assert response.data is None, response.body
    assert response.codes == [code], response.body
    for word in words:
        assert word in response.errors[0]["message"], (word, response.body)


def within_propagation(check: Callable[[], bool], what: str) -> None:
    """Poll `check` until it holds; fail once PROPAGATION_SECONDS have passed since the call
    (a first check that holds passes whatever the machine's load)."""
    deadline = time.monotonic() + PROPAGATION_SECONDS
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {PROPAGATION_SECONDS} s: {what}")
        time.sleep(0.02)


def accepts(server: Server, job_type: str) -> Callable[[], bool]:
    def check() -> bool:
        response = enqueue(server, job_type)
        if response.errors:
            refused(response, "BAD_USER_INPUT", "is not allowed")
            return False
        return bool(response.data["enqueueJob"]["job"]["type"] == job_type)

    return check


def refuses(server: Server, job_type: str) -> Callable[[], bool]:
    def check() -> bool:
        response = enqueue(server, job_type)
        if response.errors:
            refused(response, "BAD_USER_INPUT", "is not allowed")
            return True
        return False

    return check


def control_types(server: Server) -> list[str]:
    return [c["type"] for c in server.gql(CONTROLS).ok()["typeControls"]]


def stats_match_table(server: Server) -> None:
    """queueStats' counts per type are the jobs table's."""
    rows = server.sql("SELECT type, status, count(*) FROM jobs GROUP BY type, status")
    table: dict[str, dict[str, int]] = {}
    for job_type, status, n in rows:
        table.setdefault(job_type, {})[status] = n
    stats = server.gql(STATS).ok()["queueStats"]["byType"]
    counted = {s["type"]: {k: v for k, v in s["counts"].items() if v} for s in stats}
    assert {t: c for t, c in counted.items() if c} == table


def test_an_added_type_is_accepted_by_every_server_and_a_removed_one_refused(
    pair: tuple[Server, Server],
) -> None:
    a, b = pair
    job_type = fresh_type()
    refused(enqueue(b, job_type), "BAD_USER_INPUT", "is not allowed")

    control = a.gql(ADD, {"type": job_type}).ok()["addJobType"]
    assert control == {"type": job_type, "paused": False, "running": 0, "maxRunning": None}
    assert accepts(a, job_type)(), "the server that added it refused it"
    within_propagation(accepts(b, job_type), f"{b.url} accepting {job_type}")
    for server in (a, b):
        assert job_type in control_types(server)
        assert set(ENV_TYPES.split(",")) <= set(control_types(server))
    assert "shared" in control_types(b) and "shared" not in control_types(a)

    # Controlled like any other type, from either server.
    assert b.gql(PAUSE, {"type": job_type}).ok()["pauseType"] == {"type": job_type, "paused": True}
    assert a.gql(RESUME, {"type": job_type}).ok()["resumeType"] == {"type": job_type, "paused": False}

    # Adding again changes nothing.
    assert b.gql(ADD, {"type": job_type}).ok()["addJobType"]["type"] == job_type
    assert b.sql("SELECT count(*) FROM job_types WHERE name = :name", name=job_type) == [(1,)]

    assert b.gql(REMOVE, {"type": job_type}).ok() == {"removeJobType": True}
    assert refuses(b, job_type)(), "the server that removed it still accepts it"
    within_propagation(refuses(a, job_type), f"{a.url} refusing {job_type}")
    response = a.gql(ENQUEUE_MANY, {"inputs": [{"type": "email"}, {"type": job_type}]})
    refused(response, "BAD_USER_INPUT", "is not allowed")
    for server in (a, b):
        assert job_type not in control_types(server)
    assert a.gql(REMOVE, {"type": job_type}).ok() == {"removeJobType": False}

    a.gql(ADD, {"type": job_type}).ok()
    within_propagation(accepts(b, job_type), f"{b.url} accepting {job_type} once added again")

    assert f"job type '{job_type}' added by admin" in a.log()
    assert f"job type '{job_type}' removed by admin" in b.log()
    stats_match_table(a)


def test_a_removed_types_jobs_stay_and_can_be_claimed_listed_and_retried(pair: tuple[Server, Server]) -> None:
    a, b = pair
    job_type = fresh_type("kept")
    a.gql(ADD, {"type": job_type}).ok()
    ids = [accepts_id(a, job_type) for _ in range(3)]
    b.gql(REMOVE, {"type": job_type}).ok()
    within_propagation(refuses(a, job_type), f"{a.url} refusing {job_type}")

    listed = b.gql(JOBS_OF_TYPE, {"type": job_type}).ok()["jobs"]
    assert listed["totalCount"] == 3
    assert sorted(node["id"] for node in listed["nodes"]) == sorted(ids)

    worker = a.make_key(f"rt-worker-{next(_names)}", "worker")
    claimed = a.gql(CLAIM, {"type": job_type}, key=worker).ok()["claimJobs"]
    assert sorted(job["id"] for job in claimed) == sorted(ids)
    failed = claimed[0]
    a.gql(FAIL, {"id": failed["id"], "attempt": failed["attempt"]}, key=worker).ok()
    assert b.gql(RETRY, {"id": failed["id"]}).ok()["retryJob"] == {"id": failed["id"], "status": "PENDING"}
    again = b.gql(CLAIM, {"type": job_type}, key=worker).ok()["claimJobs"]
    assert [job["id"] for job in again] == [failed["id"]]
    stats_match_table(b)


def accepts_id(server: Server, job_type: str) -> str:
    return str(enqueue(server, job_type).ok()["enqueueJob"]["job"]["id"])


def test_a_type_of_a_servers_own_job_types_stays_there(pair: tuple[Server, Server]) -> None:
    a, b = pair
    for server, own in ((a, "email"), (b, "shared")):
        response = server.gql(REMOVE, {"type": own})
        refused(response, "BAD_USER_INPUT", "QUEUELOG_JOB_TYPES")
        assert accepts(server, own)()

    # `shared` is b's own; added for every server, then removed through a.
    refused(enqueue(a, "shared"), "BAD_USER_INPUT", "is not allowed")
    b.gql(ADD, {"type": "shared"}).ok()
    within_propagation(accepts(a, "shared"), f"{a.url} accepting shared")
    assert a.gql(REMOVE, {"type": "shared"}).ok() == {"removeJobType": True}
    assert refuses(a, "shared")()
    assert accepts(b, "shared")(), "b's own QUEUELOG_JOB_TYPES names it"
    assert "shared" in control_types(b) and "shared" not in control_types(a)


NAMES_REFUSED = {
    "empty": "",
    "space": "a b",
    "slash": "a/b",
    "comma": "a,b",
    "quote": "a'b",
    "non-ascii": "r\u00e9sum\u00e9",
    "homoglyph": "\u0435mail",
    "zero-width": "email\u200b",
    "nul": "a\x00b",
    "newline": "a\nb",
    "101 characters": "x" * 101,
}


def test_names_outside_the_rule_are_refused_naming_type(server: Server) -> None:
    for what, name in NAMES_REFUSED.items():
        for query in (ADD, REMOVE):
            refused(server.gql(query, {"type": name}), "BAD_USER_INPUT", "type")
        assert server.sql("SELECT count(*) FROM job_types") == [(0,)], what
    longest = "a.B-c:d_" * 12 + "0123"
    assert len(longest) == 100
    assert server.gql(ADD, {"type": longest}).ok()["addJobType"]["type"] == longest
    assert accepts(server, longest)()
    assert server.gql(REMOVE, {"type": longest}).ok() == {"removeJobType": True}
    assert server.sql("SELECT count(*) FROM job_types") == [(0,)]


def test_metrics_list_an_added_type_with_zeros_from_the_moment_it_is_added(
    pair: tuple[Server, Server],
) -> None:
    a, b = pair
    names = documented_per_type_series()
    job_type = fresh_type("metered")
    for server in (a, b):
        assert not [key for key in per_type(scrape(server)) if key[1] == job_type]
    a.gql(ADD, {"type": job_type}).ok()
    zeros = {(name, job_type): 0.0 for name in names}
    for server in (a, b):
        series = {key: value for key, value in per_type(scrape(server)).items() if key[1] == job_type}
        assert series == zeros, server.url
        statuses = {
            s.labels["status"]
            for s in scrape(server)
            if s.name == "queuelog_type_jobs" and s.labels["type"] == job_type
        }
        assert statuses == {"pending", "running", "completed", "failed", "cancelled"}

    accepts(b, job_type)()
    counted = per_type(scrape(b))
    assert counted[("queuelog_jobs_enqueued_total", job_type)] == 1.0
    assert counted[("queuelog_type_jobs", job_type)] == 1.0
    assert per_type(scrape(a))[("queuelog_type_jobs", job_type)] == 1.0

    a.gql(REMOVE, {"type": job_type}).ok()
    after = scrape(b)
    assert not [s for s in after if s.name == "queuelog_type_paused" and s.labels["type"] == job_type]
    # Its job is still there, and so counted.
    assert per_type(after)[("queuelog_type_jobs", job_type)] == 1.0


def test_type_controls_cost_counts_the_added_types(start_server: Callable[..., Server]) -> None:
    """QUEUELOG_JOB_TYPES no longer bounds typeControls: its cost counts every allowed type."""
    server = start_server(job_types="only", max_cost=30)
    query = "{ typeControls { type paused running } }"  # costs 1 + 3 per type
    assert [c["type"] for c in server.gql(query).ok()["typeControls"]] == ["only"]
    for n in range(8):
        server.gql(ADD, {"type": f"costly.{n}"}).ok()
    assert len(server.gql(query).ok()["typeControls"]) == 9  # 28
    server.gql(ADD, {"type": "costly.8"}).ok()
    refused(server.gql(query), "BAD_USER_INPUT", "cost")  # 31


async def enqueue_over(ws: ClientConnection, op_id: str, job_type: str) -> str | None:
    """Enqueue over the websocket: the job's type, or None when refused as not allowed."""
    payload = {"query": ENQUEUE, "variables": {"type": job_type}}
    await ws.send(json.dumps({"id": op_id, "type": "subscribe", "payload": payload}))
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), 30))
        if message.get("id") == op_id and message["type"] in ("next", "error"):
            break
    errors = message["payload"] if message["type"] == "error" else message["payload"].get("errors")
    if errors:
        assert [e["extensions"]["code"] for e in errors] == ["BAD_USER_INPUT"], message
        assert "is not allowed" in errors[0]["message"], message
        return None
    return str(message["payload"]["data"]["enqueueJob"]["job"]["type"])


async def within_propagation_over(ws: ClientConnection, job_type: str, accepted: bool) -> None:
    deadline = time.monotonic() + PROPAGATION_SECONDS
    for attempt in itertools.count():
        if (
            await enqueue_over(ws, f"poll-{job_type}-{accepted}-{attempt}", job_type) is not None
        ) == accepted:
            return
        if time.monotonic() > deadline:
            pytest.fail(
                f"not within {PROPAGATION_SECONDS} s over a websocket: {job_type} accepted={accepted}"
            )
        await asyncio.sleep(0.02)


def test_a_websocket_left_open_on_another_server_follows_additions_and_removals(
    pair: tuple[Server, Server],
) -> None:
    a, b = pair
    job_type = fresh_type("socket")

    async def scenario() -> None:
        protocol = Subprotocol("graphql-transport-ws")
        async with connect(b.ws_url, subprotocols=[protocol], proxy=None, open_timeout=10) as ws:
            init = {"type": "connection_init", "payload": {"authorization": f"Bearer {b.admin_key}"}}
            await ws.send(json.dumps(init))
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "connection_ack"
            assert await enqueue_over(ws, "before", job_type) is None
            await asyncio.to_thread(lambda: a.gql(ADD, {"type": job_type}).ok())
            await within_propagation_over(ws, job_type, accepted=True)
            await asyncio.to_thread(lambda: a.gql(REMOVE, {"type": job_type}).ok())
            await within_propagation_over(ws, job_type, accepted=False)

    asyncio.run(scenario())
