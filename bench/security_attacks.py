"""The denial-of-service attacks of issues 14 and 30, measured on one or more checkouts of queuelog.

    .venv/bin/python -m bench.security_attacks --code-dir /tmp/before --code-dir /work/main
    .venv/bin/python -m bench.security_attacks --database sqlite          # this checkout only
    .venv/bin/python -m bench.security_attacks --only size                # issue 30's only

1. The cost attack: one `enqueueJobs` of 1,000 inputs that all name the same idempotency key
   (so all answer the same job), each answer selecting 29 aliases of `events(last: 100)`, on a
   job with 53 events (26 failures) and on one with 1 event. Measured: the request's wall
   time and answer size, the server's RSS before / after / peak (VmHWM), its CPU, and the
   latency of a VIEWER's `{ me { name } }` sent every 50 ms on another connection.
2. The subscription amplification: one websocket with 20 `jobEvents` subscriptions, each
   selecting those 29 aliases, while a producer enqueues 1,000 `noop` jobs (10 x 100).
   Measured: the server's CPU over the 15 s from the first enqueue, with and without the
   subscriber, and the events the socket received meanwhile.
3. Answers too large (QUEUELOG_MAX_RESPONSE_BYTES): a producer stores 100 jobs with 64 KB
   payloads, completed with 64 KB results (and, where the attack needs them, 100 schedules
   with 64 KB payloads, 100 FAILED jobs with 2,000-character errors, 100 more PENDING jobs);
   then one request asks for far more than that (30 aliases of a page of payloads, ...).
   Measured: its wall time and answer size, the serving process's RSS before and after and
   its peak during the request (VmHWM, reset first through /proc/PID/clear_refs), its CPU,
   and the latency of another producer's `enqueueJob` sent every 50 ms meanwhile. Target,
   not a pass/fail: under 2 s and 100 MB over the RSS before, each.

Each measurement gets its own `queuelog serve` on a fresh database (a SQLite file in the
temp directory, or a PostgreSQL database created and dropped on --postgres-url's cluster),
started from the code dir given (`PYTHONPATH=DIR python -m queuelog serve ...`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import _pg
from bench._api import ENQUEUE, ENQUEUE_MANY, Api, job_input
from bench._common import (
    PROJECT_DIR,
    PYTHON,
    Cleanup,
    HttpConnection,
    ServerProcess,
    bearer,
    child_pids,
    clean_env,
    cpu_delta,
    event_loop_runner,
    graphql_body,
    graphql_data,
    machine_line,
    make_keys,
    percentile,
    process_cpu_seconds,
    process_memory,
    stderr,
)
from bench._context import Context, Settings

ALIASES = " ".join(f"e{i}: events(last: 100) {{ kind status at }}" for i in range(29))
ATTACK = (
    "mutation Attack($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) "
    "{ created job { id " + ALIASES + " } } }"
)
SUBSCRIPTION = "subscription Amplify { jobEvents { kind job { id " + ALIASES + " } } }"
WELCOME = {"type": "report", "idempotencyKey": "welcome", "maxRetries": 25}
CLAIM_REPORT = 'mutation Claim { claimJob(types: ["report"]) { id } }'
FAIL = 'mutation Fail($id: ID!) { failJob(id: $id, error: "boom", retryInSeconds: 0) { id status } }'
HISTORY = "query History($id: ID!) { job(id: $id) { status events(last: 100) { kind } } }"
PING = graphql_body("{ me { name } }")
PING_INTERVAL = 0.05
SUBSCRIPTIONS = 20
WINDOW = 15.0
MB = 1024 * 1024
KEYS = [
    ("attack-producer", "producer"),
    ("attack-worker", "worker"),
    ("attack-viewer", "viewer"),
    ("attack-admin", "admin"),
    ("attack-bystander", "producer"),
]

Row = dict[str, Any]
# (heading, key, format): the columns of each table; ratios are taken of every numeric one.
COST_COLUMNS = (
    ("wall s", "seconds", "{:.2f}"),
    ("answer bytes", "bytes", "{:,.0f}"),
    ("events in it", "events", "{:,.0f}"),
    ("RSS before/after/peak MB", ("rss_before", "rss_after", "rss_peak"), "{:.0f}"),
    ("server CPU s", "cpu", "{:.2f}"),
    ("PG CPU s", "db_cpu", "{:.2f}"),
    ("ping p50 idle ms", "ping_idle", "{:.1f}"),
    ("ping p50/max ms", ("ping_p50", "ping_max"), "{:.0f}"),
    ("pings", "pings", "{:.0f}"),
)
SUB_COLUMNS = (
    ("server CPU s in 15 s", "cpu", "{:.2f}"),
    ("PG CPU s", "db_cpu", "{:.2f}"),
    ("enqueue s", "enqueue", "{:.2f}"),
    ("events received (of 20,000)", "received", "{:,.0f}"),
    ("server CPU ms per event", "cpu_per_event", "{:.2f}"),
)


# --- the servers ----------------------------------------------------------------------------


@contextlib.contextmanager
def running(code_dir: Path, cwd: Path) -> Iterator[None]:
    """Subprocesses started inside run `code_dir`'s queuelog: PYTHONPATH (clean_env copies
    os.environ) and a working directory without queuelog in it (`python -m` puts its cwd
    first on sys.path, before PYTHONPATH, and make_keys runs its commands in ours)."""
    old_path, old_cwd = os.environ.get("PYTHONPATH"), os.getcwd()
    os.environ["PYTHONPATH"] = str(code_dir)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        if old_path is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old_path


def check_code_dir(code_dir: Path) -> str:
    """A label for `code_dir` (`name@commit`); fails unless its queuelog imports from it."""
    with running(code_dir, Path("/")):
        done = subprocess.run(
            [PYTHON, "-c", "import queuelog.app, queuelog.cli; print(queuelog.app.__file__)"],
            capture_output=True,
            text=True,
            env=clean_env(),
        )
    found = done.stdout.strip()
    if done.returncode != 0 or not Path(found).resolve().is_relative_to(code_dir):
        raise SystemExit(f"PYTHONPATH={code_dir}: queuelog.app is {found or done.stderr.strip()[-500:]}")
    described = subprocess.run(
        ["git", "-C", str(code_dir), "describe", "--always", "--dirty"], capture_output=True, text=True
    ).stdout.strip()
    return f"{code_dir.name}@{described}" if described else code_dir.name


def serving_pid(server: ServerProcess) -> int:
    """The process that holds the server's listening socket (uvicorn may serve from a child)."""
    port = f"{server.port:04X}"
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[1].endswith(":" + port) and fields[3] == "0A":  # 0A: LISTEN
                    inodes.add(f"socket:[{fields[9]}]")
    tree, todo = [], [server.pid]
    while todo:
        tree.append(todo.pop())
        todo.extend(child_pids(tree[-1]))
    for pid in reversed(tree):  # children first
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) in inodes for fd in Path(f"/proc/{pid}/fd").iterdir()):
                return pid
    return server.pid


def readings(server: ServerProcess, pid: int) -> tuple[tuple[int, int] | None, float | None, Any]:
    """(VmRSS, VmHWM), CPU seconds of the serving process, and its PostgreSQL backends' CPU."""
    return process_memory(pid), process_cpu_seconds(pid), server.db_cpu_snapshot()


def difference(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


# --- 1. the cost attack ---------------------------------------------------------------------


@dataclass(frozen=True)
class Bound:
    """A figure known only from one side: the request had no answer when we gave up on it."""

    sign: str  # ">" or "<"
    value: float


async def pinger(
    url: str, key: str, timeout: float, out: list[list[float]], stop: asyncio.Event, body: bytes = PING
) -> None:
    """`body` (`{ me { name } }`) every 50 ms (at once after a late answer), each [sent,
    answered]; a ping still unanswered stays [sent] (a timeout reconnects)."""
    conn = HttpConnection(url, bearer(key))
    try:
        next_at = time.perf_counter()
        while not stop.is_set():
            ping = [time.perf_counter()]
            out.append(ping)
            try:
                graphql_data(*await asyncio.wait_for(conn.post("/graphql", body), timeout))
                ping.append(time.perf_counter())
            except TimeoutError:
                await conn.close()
            next_at = max(next_at + PING_INTERVAL, time.perf_counter())
            await asyncio.sleep(next_at - time.perf_counter())
    finally:
        await conn.close()


async def cost_attack(
    server: ServerProcess, pid: int, keys: dict[str, str], failures: int, timeout: float
) -> Row:
    async with Api(server.url, keys["producer"]) as producer, Api(server.url, keys["worker"]) as worker:
        job = (await producer.call(ENQUEUE, {"input": WELCOME}))["enqueueJob"]["job"]["id"]
        for _ in range(failures):
            claimed = (await worker.call(CLAIM_REPORT))["claimJob"]
            if claimed is None or claimed["id"] != job:
                raise RuntimeError(f"claimJob answered {claimed}, not job {job}")
            await worker.call(FAIL, {"id": job})
        history = (await producer.call(HISTORY, {"id": job}))["job"]
    if len(history["events"]) != 2 * failures + 1:
        raise RuntimeError(f"job {job} after {failures} failures: {history}")

    body = graphql_body(ATTACK, {"inputs": [WELCOME] * 1000})
    pings: list[list[float]] = []
    stop = asyncio.Event()
    ping_task = asyncio.create_task(pinger(server.url, keys["viewer"], timeout, pings, stop))
    attack = HttpConnection(server.url, bearer(keys["producer"]))
    row: Row = {}
    try:
        await asyncio.sleep(1.0)  # idle pings first
        rss_before, cpu_before, db_before = readings(server, pid)
        started = time.perf_counter()
        try:
            status, answer = await asyncio.wait_for(attack.post("/graphql", body), timeout)
        except TimeoutError:
            status, answer = 0, b""
            row["note"] = f"no answer in {timeout:.0f} s (the figures are at that moment)"
        ended = time.perf_counter()
        rss_after, cpu_after, db_after = readings(server, pid)
    finally:
        stop.set()
        await attack.close()
        await stop_task(ping_task, wait=5.0)
    during = [p for p in pings if p[0] < ended and (len(p) == 1 or p[1] > started)]
    latencies = sorted(((p[1] if len(p) == 2 else ended) - p[0]) * 1000 for p in during)
    slowest = max(latencies, default=float("nan"))
    idle = [(p[1] - p[0]) * 1000 for p in pings if len(p) == 2 and p[1] <= started]
    row |= {
        "seconds": ended - started if status else Bound(">", ended - started),
        "bytes": len(answer) if status else None,
        "events": answer.count(b'"kind"') if status else None,
        "rss_before": rss_before[0] / MB if rss_before else None,
        "rss_after": rss_after[0] / MB if rss_after else None,
        "rss_peak": rss_after[1] / MB if rss_after else None,
        "cpu": difference(cpu_before, cpu_after),
        "db_cpu": cpu_delta(db_before, db_after),
        "ping_idle": percentile(idle, 50),
        "ping_p50": percentile(latencies, 50),
        "ping_max": Bound(">", slowest) if any(len(p) == 1 for p in during) else slowest,
        "pings": len(during),
    }
    if status and (status != 200 or b'"errors"' in answer):
        errors = json.loads(answer).get("errors") if len(answer) < MB else None
        row["note"] = f"HTTP {status}: " + (errors[0]["message"] if errors else "errors in the answer")
    return row


# --- 2. the subscription amplification ------------------------------------------------------


async def stop_task(task: asyncio.Task[Any], wait: float = 0.0) -> None:
    """Let `task` end within `wait` seconds, else cancel it; its errors are dropped."""
    await asyncio.wait([task], timeout=wait)
    task.cancel()
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await task


async def drain(ws: Any, counts: dict[str, Any]) -> None:
    async for raw in ws:
        message = json.loads(raw)
        if message.get("type") == "ping":
            await ws.send(json.dumps({"type": "pong"}))
        elif message.get("type") == "next" and not message["payload"].get("errors"):
            counts["received"] += 1
        else:
            counts["other"] += 1
            counts.setdefault("first_other", str(message)[:200])


async def amplification(
    server: ServerProcess, pid: int, keys: dict[str, str], subscriptions: int, timeout: float
) -> Row:
    import websockets

    counts: dict[str, Any] = {"received": 0, "other": 0}
    async with contextlib.AsyncExitStack() as stack:
        if subscriptions:
            uri = server.url.replace("http://", "ws://") + "/graphql"
            ws = await stack.enter_async_context(
                websockets.connect(uri, subprotocols=["graphql-transport-ws"], max_size=None, open_timeout=30)
            )
            init = {"type": "connection_init", "payload": {"authorization": f"Bearer {keys['viewer']}"}}
            await ws.send(json.dumps(init))
            ack = json.loads(await asyncio.wait_for(ws.recv(), 30))
            if ack.get("type") != "connection_ack":
                raise RuntimeError(f"no connection_ack: {ack}")
            for n in range(subscriptions):
                subscribe = {"id": str(n), "type": "subscribe", "payload": {"query": SUBSCRIPTION}}
                await ws.send(json.dumps(subscribe))
            drainer = asyncio.create_task(drain(ws, counts))
            stack.push_async_callback(stop_task, drainer)
            await asyncio.sleep(1.0)  # the subscriptions are set up before the first enqueue
        producer = await stack.enter_async_context(Api(server.url, keys["producer"]))

        async def enqueue() -> float:
            for batch in range(10):
                inputs = [job_input(batch * 100 + i) for i in range(100)]
                await asyncio.wait_for(producer.call(ENQUEUE_MANY, {"inputs": inputs}), timeout)
            return time.monotonic() - started

        cpu_before, db_before = process_cpu_seconds(pid), server.db_cpu_snapshot()
        started = time.monotonic()
        enqueuing = asyncio.create_task(enqueue())
        await asyncio.sleep(WINDOW)
        cpu_after, db_after = process_cpu_seconds(pid), server.db_cpu_snapshot()
        received = counts["received"]
        enqueue_seconds = await enqueuing
    cpu = difference(cpu_before, cpu_after)
    row: Row = {
        "cpu": cpu,
        "db_cpu": cpu_delta(db_before, db_after),
        "enqueue": enqueue_seconds,
        "received": received if subscriptions else None,
        "cpu_per_event": cpu * 1000 / received if subscriptions and received and cpu is not None else None,
    }
    if counts["other"]:
        row["note"] = f"{counts['other']} other messages, first {counts['first_other']}"
    return row


# --- 3. answers too large -------------------------------------------------------------------

BLOB = 65_000  # characters: payloads and results of 65,011 bytes, under the 64 KiB limit
PER_REQUEST = 15  # 64 KB items per request, under the 1 MiB body limit
CRON_NEVER_SOON = "0 0 1 1 *"
FILL_ENQUEUE = "mutation Fill($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) { job { id } } }"
FILL_CLAIM = 'mutation FillClaim { claimJobs(limit: 100, types: ["report"]) { id attempt } }'
FILL_COMPLETE = (
    "mutation FillComplete($items: [CompleteJobInput!]!) { completeJobs(items: $items) { rejected } }"
)
FILL_FAIL = "mutation FillFail($id: ID!, $e: String!) { failJob(id: $id, error: $e) { status } }"
FILL_SCHEDULE = "mutation FillSchedule($s: ScheduleInput!) { putSchedule(input: $s) { name } }"
BYSTANDER = graphql_body(
    'mutation Bystander { enqueueJob(input: {type: "noop", payload: {n: 1}}) { job { id } } }'
)
SIZE_TARGET_SECONDS = 2.0
SIZE_TARGET_MB = 100.0


def repeated(count: int, selection: str, prefix: str = "a") -> str:
    return " ".join(f"{prefix}{n}: {selection}" for n in range(count))


@dataclass(frozen=True)
class SizeAttack:
    role: str
    document: str
    needs: frozenset[str] = frozenset()  # "errors", "schedules", "pending": more to store first


SIZE_ATTACKS: dict[str, SizeAttack] = {
    "30 x jobs(first: 100) { nodes { payload } }": SizeAttack(
        "producer", "query A { " + repeated(30, "jobs(first: 100) { nodes { payload } }") + " }"
    ),
    "30 x jobs(first: 100) { nodes { result } }": SizeAttack(
        "producer", "query A { " + repeated(30, "jobs(first: 100) { nodes { result } }") + " }"
    ),
    "jobs(first: 100) { nodes { 29 x payload } } (compiled)": SizeAttack(
        "producer", "query A { jobs(first: 100) { nodes { " + repeated(29, "payload", "p") + " } } }"
    ),
    "jobs(first: 100) { nodes and edges { payload result } }": SizeAttack(
        "producer",
        "query A { jobs(first: 100) { nodes { payload result } edges { node { payload result } } } }",
    ),
    "VIEWER: 30 x schedules { payload }": SizeAttack(
        "viewer", "query A { " + repeated(30, "schedules { payload }") + " }", frozenset({"schedules"})
    ),
    "ADMIN: 30 x jobs(status: FAILED) { nodes { error } }": SizeAttack(
        "admin",
        "query A { " + repeated(30, "jobs(first: 100, status: FAILED) { nodes { error } }") + " }",
        frozenset({"errors"}),
    ),
    "30 x job(id) { payload result }": SizeAttack(
        "producer", "query A($id: ID!) { " + repeated(30, "job(id: $id) { payload result }") + " }"
    ),
    "allowed: one full page { id payload result }": SizeAttack(
        "producer", "query A { jobs(first: 100) { nodes { id payload result } } }"
    ),
    "mutation, not cut: claimJobs(limit: 100) { 29 x payload }": SizeAttack(
        "worker",
        'mutation A { claimJobs(limit: 100, types: ["report"]) { ' + repeated(29, "payload", "p") + " } }",
        frozenset({"pending"}),
    ),
}
SIZE_COLUMNS = (
    ("wall s", "seconds", "{:.2f}"),
    ("answer bytes", "bytes", "{:,.0f}"),
    ("RSS before/after MB", ("rss_before", "rss_after"), "{:.0f}"),
    ("peak - before MB", "peak_growth", "{:.0f}"),
    ("server CPU s", "cpu", "{:.2f}"),
    ("PG CPU s", "db_cpu", "{:.2f}"),
    ("bystander enqueue p50/max ms", ("ping_p50", "ping_max"), "{:.0f}"),
    ("< 2 s, < 100 MB", "met", "{}"),
)


def blob(tag: str) -> dict[str, str]:
    return {"blob": (tag * BLOB)[:BLOB]}


async def enqueue_large(api: Api, count: int, **fields: Any) -> list[str]:
    ids: list[str] = []
    while len(ids) < count:
        size = min(PER_REQUEST, count - len(ids))
        inputs = [
            {"type": "report", "payload": blob(f"payload {len(ids) + n} "), **fields} for n in range(size)
        ]
        ids += [a["job"]["id"] for a in (await api.call(FILL_ENQUEUE, {"inputs": inputs}))["enqueueJobs"]]
    return ids


async def fill(server: ServerProcess, keys: dict[str, str], needs: frozenset[str]) -> dict[str, Any]:
    """100 COMPLETED jobs of the producer with 64 KB payloads and results; then what `needs`
    asks for. The variables the attack's document takes."""
    async with contextlib.AsyncExitStack() as stack:
        api = {role: await stack.enter_async_context(Api(server.url, keys[role])) for role in keys}
        job_ids = await enqueue_large(api["producer"], 100)
        claimed = (await api["worker"].call(FILL_CLAIM))["claimJobs"]
        for start in range(0, len(claimed), PER_REQUEST):
            items = [
                {"id": c["id"], "attempt": c["attempt"], "result": blob(f"result {c['id']} ")}
                for c in claimed[start : start + PER_REQUEST]
            ]
            await api["worker"].call(FILL_COMPLETE, {"items": items})
        if "errors" in needs:  # 100 FAILED jobs with errors of QUEUELOG_MAX_ERROR_CHARS (2000)
            await enqueue_large(api["admin"], 100, maxRetries=0)
            for job in (await api["worker"].call(FILL_CLAIM))["claimJobs"]:
                await api["worker"].call(FILL_FAIL, {"id": job["id"], "e": "e" * 2000})
        if "schedules" in needs:
            for n in range(100):
                schedule = {
                    "name": f"big-{n}",
                    "type": "report",
                    "cron": CRON_NEVER_SOON,
                    "payload": blob("s"),
                }
                await api["admin"].call(FILL_SCHEDULE, {"s": schedule})
        if "pending" in needs:
            await enqueue_large(api["producer"], 100)
    return {"id": job_ids[0]}


def reset_peak(pid: int) -> bool:
    """Set the process's VmHWM back to its VmRSS (Linux: `5` to /proc/PID/clear_refs)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


async def size_attack(
    server: ServerProcess, pid: int, keys: dict[str, str], attack: SizeAttack, timeout: float
) -> Row:
    variables = await fill(server, keys, attack.needs)
    uses_id = "$id" in attack.document
    body = graphql_body(attack.document, variables if uses_id else None)
    pings: list[list[float]] = []
    stop = asyncio.Event()
    ping_task = asyncio.create_task(pinger(server.url, keys["bystander"], timeout, pings, stop, BYSTANDER))
    request = HttpConnection(server.url, bearer(keys[attack.role]))
    row: Row = {}
    try:
        await asyncio.sleep(1.0)  # the bystander's idle enqueues first
        peak_reset = reset_peak(pid)
        rss_before, cpu_before, db_before = readings(server, pid)
        started = time.perf_counter()
        try:
            status, answer = await asyncio.wait_for(request.post("/graphql", body), timeout)
        except TimeoutError:
            status, answer = 0, b""
            row["note"] = f"no answer in {timeout:.0f} s (the figures are at that moment)"
        ended = time.perf_counter()
        rss_after, cpu_after, db_after = readings(server, pid)
    finally:
        stop.set()
        await request.close()
        await stop_task(ping_task, wait=5.0)
    during = [p for p in pings if p[0] < ended and (len(p) == 1 or p[1] > started)]
    latencies = sorted(((p[1] if len(p) == 2 else ended) - p[0]) * 1000 for p in during)
    slowest = max(latencies, default=float("nan"))
    peak_growth = (rss_after[1] - rss_before[0]) / MB if peak_reset and rss_before and rss_after else None
    seconds = ended - started
    row |= {
        "seconds": seconds if status else Bound(">", seconds),
        "bytes": len(answer) if status else None,
        "rss_before": rss_before[0] / MB if rss_before else None,
        "rss_after": rss_after[0] / MB if rss_after else None,
        "peak_growth": peak_growth,
        "cpu": difference(cpu_before, cpu_after),
        "db_cpu": cpu_delta(db_before, db_after),
        "ping_p50": percentile(latencies, 50),
        "ping_max": Bound(">", slowest) if any(len(p) == 1 for p in during) else slowest,
        "met": "yes"
        if status and seconds < SIZE_TARGET_SECONDS and (peak_growth or 0) < SIZE_TARGET_MB
        else "NO",
    }
    if status and len(answer) < 4096:
        errors = json.loads(answer).get("errors")
        row["note"] = f"HTTP {status}: " + (errors[0]["message"] if errors else "answered")
    elif status:
        row["note"] = f"HTTP {status}: answered in full"
    if not peak_reset:
        row["note"] = row.get("note", "") + " (VmHWM could not be reset: no peak figure)"
    return row


# --- running and the table ------------------------------------------------------------------

KINDS = ("cost", "subs", "size")
Measure = Callable[..., Any]  # (server, serving pid, {role: key}, timeout=) -> a coroutine of a Row
MEASUREMENTS: list[tuple[str, str, Measure]] = [
    ("cost", "job with 1 event", functools.partial(cost_attack, failures=0)),
    ("cost", "job with 53 events", functools.partial(cost_attack, failures=26)),
    ("subs", "no subscriber", functools.partial(amplification, subscriptions=0)),
    ("subs", f"{SUBSCRIPTIONS} subscriptions", functools.partial(amplification, subscriptions=SUBSCRIPTIONS)),
    *(("size", name, functools.partial(size_attack, attack=attack)) for name, attack in SIZE_ATTACKS.items()),
]


def cell(row: Row, key: str | tuple[str, ...], fmt: str) -> str:
    out = []
    for value in (row.get(k) for k in ((key,) if isinstance(key, str) else key)):
        sign, number = (value.sign, value.value) if isinstance(value, Bound) else ("", value)
        out.append("-" if number is None or number != number else sign + fmt.format(number))
    return "/".join(out)


def ratio_row(old: Row, new: Row, columns: Sequence[tuple[str, Any, str]]) -> Row:
    """new / old of every figure both have; a bound on either side bounds the ratio."""
    out: Row = {}
    for _, key, _ in columns:
        for k in (key,) if isinstance(key, str) else key:
            a, b = old.get(k), new.get(k)
            if isinstance(a, Bound) and isinstance(b, Bound) or a is None or b is None:
                continue
            if isinstance(a, str) or isinstance(b, str):  # a verdict, not a figure
                continue
            if isinstance(a, Bound) and a.value:
                out[k] = Bound("<" if a.sign == ">" else ">", b / a.value)
            elif isinstance(b, Bound) and a:
                out[k] = Bound(b.sign, b.value / a)
            elif a and a == a and b == b:
                out[k] = b / a
    return out


def table(title: str, rows: list[Row], columns: Sequence[tuple[str, Any, str]]) -> str:
    lines = [["code", "database", "measurement", *(c[0] for c in columns)]]
    for row in rows:
        lines.append(
            [row["code"], row["database"], row["measurement"], *(cell(row, k, f) for _, k, f in columns)]
        )
        if "ratio" in row:
            lines.append(["  new/old", "", "", *(cell(row["ratio"], k, "{:.3g}x") for _, k, _ in columns)])
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    text = [title]
    for line in lines:
        text.append(
            "  ".join(
                c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True))
            )
        )
    notes = [
        f"  note: {r['code']}, {r['database']}, {r['measurement']}: {r['note']}" for r in rows if "note" in r
    ]
    return "\n".join(text + notes)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.security_attacks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--database",
        choices=("sqlite", "postgresql"),
        action="append",
        help="where the servers keep their jobs; repeatable (default: both)",
    )
    parser.add_argument(
        "--code-dir",
        action="append",
        type=Path,
        metavar="DIR",
        help="a checkout of queuelog to measure; repeatable, oldest first: ratios are last / first "
        "(default: this one)",
    )
    parser.add_argument(
        "--postgres-url",
        default=_pg.DEFAULT_URL,
        metavar="URL",
        help=f"databases are created and dropped on this cluster (default {_pg.DEFAULT_URL})",
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds to wait for any one request (default 120)"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=KINDS,
        help="run only these attacks; repeatable (default: all): cost, subs (amplification), "
        "size (answers too large)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the temp directory (server logs, databases)"
    )
    return parser.parse_args(argv)


def measure(ctx: Context, row: Row, run: Measure, timeout: float) -> Row:
    """One measurement on a server of its own, started from the code dir on PYTHONPATH."""
    stderr(f"... {row['code']}, {row['database']}: {row['measurement']}")
    try:
        server = ctx.queuelog(job_types="report,noop")
        keys = make_keys(server.database_url, KEYS)
        row |= ctx.run(
            run(
                server,
                serving_pid(server),
                {name.removeprefix("attack-"): keys[name] for name, _ in KEYS},
                timeout=timeout,
            )
        )
    except Exception as exc:  # the other measurements still run
        row["note"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
    stderr(f"    {row}")
    return row


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    code_dirs = [d.resolve() for d in args.code_dir or [PROJECT_DIR]]
    labels = {d: check_code_dir(d) for d in code_dirs}
    rows: list[Row] = []
    heading = f"python -m bench.security_attacks ({machine_line()}; request timeout {args.timeout:.0f} s)"
    try:
        with Cleanup(keep=args.keep) as cleanup, event_loop_runner() as runner:
            for database in args.database or ["sqlite", "postgresql"]:
                if database == "postgresql":
                    heading += f"; PostgreSQL {_pg.server_version(args.postgres_url)}"
                settings = Settings.make(quick=True, database=database, postgres_url=args.postgres_url)
                for kind, measurement, run in MEASUREMENTS:
                    if args.only and kind not in args.only:
                        continue
                    measured = []
                    for code_dir in code_dirs:  # old and new side by side, measurement by measurement
                        row = {
                            "kind": kind,
                            "code": labels[code_dir],
                            "database": database,
                            "measurement": measurement,
                        }
                        name = f"{len(rows) + len(measured)}-{code_dir.name}-{database}-{kind}"
                        with running(code_dir, cleanup.workdir), contextlib.ExitStack() as stack:
                            ctx = Context(
                                settings, cleanup.workdir, stack, name=name, runner=runner, keep=args.keep
                            )
                            measured.append(measure(ctx, row, run, args.timeout))
                    if len(measured) > 1:
                        columns = {"cost": COST_COLUMNS, "subs": SUB_COLUMNS, "size": SIZE_COLUMNS}[kind]
                        measured[-1]["ratio"] = ratio_row(measured[0], measured[-1], columns)
                    rows += measured
    finally:
        print(heading)
        cost = [r for r in rows if r["kind"] == "cost"]
        print(table("1. cost attack: one enqueueJobs of 1,000 x 29 events(last: 100)", cost, COST_COLUMNS))
        subs = [r for r in rows if r["kind"] == "subs"]
        title = f"2. subscription amplification: 1,000 noop jobs enqueued, CPU over {WINDOW:.0f} s"
        print(table(title, subs, SUB_COLUMNS))
        size = [r for r in rows if r["kind"] == "size"]
        title = "3. answers too large: 100 jobs with 64 KB payloads and results (100 schedules, 100 errors)"
        print(table(title, size, SIZE_COLUMNS))
    return 1 if any(str(r.get("note", "")).startswith("failed") for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
