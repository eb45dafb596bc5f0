"""Figure 12: scaling out on PostgreSQL, 1, 2 and 3 servers on one database (issue 31).

PostgreSQL only. Each configuration of N servers (`--scale-servers`, default 1,2,3), and
one of a working server beside LISTENING servers that nobody calls (L), runs on a fresh
database, in alternating order over `--scale-rounds` rounds (1 2 3 L, then L 3 2 1, ...);
the first count's runs are the baseline of the others. The listening servers still read
back every job the working one changes (storage/listener.py): their CPU per job, and their
backends', is what each more server costs, measured apart.

1. N `queuelog serve` on the database; the type `noop` paused (`pauseType`); one `python -m
   queuelog worker --concurrency 64` per server, each with a WORKER key of its own, started
   and left to long-poll, so that their start-up is not measured.
2. enqueue: J no-op jobs (`--scale-jobs`) by `enqueueJobs` of 100 from this process, two
   connections per server. jobs/s = J / the phase's wall time; latency: each call's.
3. VACUUM ANALYZE (as figure 4 after its fill), then drain: `resumeType`, and the workers
   drain the jobs. jobs/s = J / (last `finishedAt` - first `claimedAt`), the database's
   clock, as figure 4 reads it; latency: each job's `finishedAt - claimedAt` (the claim's
   commit to the completion's, which holds the wait for a write batch).

For each phase, from /proc, before and after it: the CPU of the servers, of the workers,
of the PostgreSQL backends connected to the database (as figure 4; each server's apart, by
the application_name its URL gives its connections), and of the cluster's
shared processes (walwriter, checkpointer, background writer, launchers, the postmaster:
shared with whatever else runs on the cluster, so an upper bound); each per job. Write
transactions per phase come from the `xmin` of the phase's `job_events` rows (each commit
of a write batch that records events stamps its rows with its own transaction id, and
sends one NOTIFY): jobs per commit, exactly, whatever else the cluster runs.

Before the configurations, the ceilings that the capacity model names, on a database of
their own: commits per second of 8 connections, each committing one INSERT at a time,
plain, with a `pg_notify` in each transaction (PostgreSQL serialises the commits of
notifying transactions, cluster-wide, on one lock held until the commit has been flushed),
and with queuelog's controlled-claim advisory lock (`pg_advisory_xact_lock`), taken first;
and one connection alone (the time of one commit). Alternating, two rounds each.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bench import _pg
from bench._api import ENQUEUE_MANY, TIMES_PAGE, Api, chunks, job_input
from bench._common import (
    ServerProcess,
    cpu_delta,
    make_keys,
    percentile,
    process_cpu_seconds,
    queuelog_ready,
    start_queuelog,
    start_worker,
    stop_process,
    wait_healthy,
)
from bench._context import Context
from bench._report import Figure, num, ratio, rx

ENQUEUE_BATCH = 100
CONNECTIONS_PER_SERVER = 2
WORKER_CONCURRENCY = 64
WORKER_SETTLE_SECONDS = 3.0
DRAIN_TIMEOUT = 300.0
PAUSE = 'mutation Pause { pauseType(type: "noop") { paused } }'
RESUME = 'mutation Resume { resumeType(type: "noop") { paused } }'
# The configuration that prices what one more server costs the others: one server with its
# worker and producers, and LISTENING servers that nobody calls, which still read back every
# job the first one changes (storage/listener.py).
LISTENING = 2
CEILING_CONNECTIONS = 8
CEILING_SECONDS = 3.0
CONTROLLED_CLAIM_LOCK = 7160419  # postgres_statements.LOCK_CONTROLLED_CLAIMS's number
# Write transactions that recorded events, by kind of event, from the rows' xmin.
COMMITS_BY_PHASE = (
    "SELECT count(DISTINCT xmin::text) FILTER (WHERE kind = 'ENQUEUED'),"
    " count(DISTINCT xmin::text) FILTER (WHERE kind <> 'ENQUEUED'),"
    " count(*) FILTER (WHERE kind = 'ENQUEUED'), count(*) FILTER (WHERE kind <> 'ENQUEUED')"
    " FROM job_events"
)


def _parse_time(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@dataclass
class Cpu:
    """CPU seconds of every process a phase involves, snapshotted before and after it."""

    servers: list[ServerProcess]
    workers: list[Any]
    database: str
    base_url: str
    _before: dict[str, Any] = field(default_factory=dict)

    def _snapshot(self) -> dict[str, Any]:
        return {
            "servers": [s.cpu_seconds() or 0.0 for s in self.servers],
            "workers": [process_cpu_seconds(w.pid) or 0.0 for w in self.workers],
            "backends": _pg.backend_cpu_by_application(self.base_url, self.database) or {},
            "shared": _pg.shared_process_cpu(self.base_url),
            "bench": process_cpu_seconds(os.getpid()) or 0.0,
            "at": time.perf_counter(),
        }

    def start(self) -> None:
        self._before = self._snapshot()

    def stop(self, jobs: int) -> dict[str, Any]:
        """CPU used since start: seconds, µs per job, and each server's share of a core. The
        backends of each server are those of its application_name (its URL names it)."""
        after, before = self._snapshot(), self._before
        wall = after["at"] - before["at"]
        servers = [a - b for a, b in zip(after["servers"], before["servers"], strict=True)]
        workers = [a - b for a, b in zip(after["workers"], before["workers"], strict=True)]
        by_name = {
            name: cpu_delta(before["backends"].get(name, {}), pids) or 0.0
            for name, pids in after["backends"].items()
        }
        backends = sum(by_name.values())
        per_server = [by_name.get(server.name, 0.0) for server in self.servers]
        shared = cpu_delta(before["shared"], after["shared"]) or 0.0
        bench = after["bench"] - before["bench"]

        def per_job(seconds: float) -> float:
            return round(seconds / jobs * 1e6, 1)

        return {
            "wall_s": round(wall, 3),
            "server_cpu_s": [round(s, 3) for s in servers],
            "worker_cpu_s": [round(w, 3) for w in workers],
            "backends_cpu_s": round(backends, 3),
            "backends_by_server_cpu_s": [round(b, 3) for b in per_server],
            "shared_cpu_s": round(shared, 3),
            "bench_cpu_s": round(bench, 3),
            "server_us_per_job": per_job(sum(servers)),
            "worker_us_per_job": per_job(sum(workers)),
            "postgres_us_per_job": per_job(backends),
            "server_us_per_job_each": [per_job(s) for s in servers],
            "postgres_us_per_job_each": [per_job(b) for b in per_server],
            "shared_us_per_job": per_job(shared),
            "bench_us_per_job": per_job(bench),
            "server_share_of_core": [round(s / wall, 2) for s in servers] if wall > 0 else [],
            "cores_used": round((sum(servers) + sum(workers) + backends + shared + bench) / wall, 2)
            if wall > 0
            else None,
        }


def scale_figure(ctx: Context, fig: Figure) -> None:
    if not ctx.settings.postgres:
        raise RuntimeError("figure 12 (scale) is PostgreSQL's: run it with --database postgresql")
    s = ctx.settings
    ceilings = commit_ceilings(ctx)
    configurations = [(n, 0) for n in s.scale_servers] + [(1, LISTENING)]
    order: list[tuple[int, int]] = []
    for round_number in range(s.scale_rounds):
        order.extend(configurations if round_number % 2 == 0 else reversed(configurations))
    runs: dict[str, list[dict[str, Any]]] = {_label(*c): [] for c in configurations}
    for working, listening in order:
        label = _label(working, listening)
        ctx.log(f"{label}, {s.scale_jobs:,} jobs (load average {os.getloadavg()[0]:.1f})")
        try:
            runs[label].append(one_configuration(ctx, working, listening))
        except Exception as exc:  # one run lost (the shared cluster restarted...): the others stand
            failure = f"{label}: {type(exc).__name__}: {str(exc)[:300]}"
            ctx.log(f"  failed, going on: {failure}")
            fig.notes.append(f"a run failed and is left out: {failure}")
    runs = {label: these for label, these in runs.items() if these}
    if not runs:
        raise RuntimeError("every configuration failed (see the notes)")
    report(fig, s.scale_jobs, runs, ceilings)
    fig.data = {
        "jobs": s.scale_jobs,
        "order": [_label(*c) for c in order],
        "runs": runs,
        "ceilings": ceilings,
    }


def _label(working: int, listening: int) -> str:
    text = f"{working} server{'s' if working > 1 else ''}"
    return f"{text} + {listening} listening" if listening else text


# --- one configuration ---------------------------------------------------------------------


def one_configuration(ctx: Context, n: int, listening: int = 0) -> dict[str, Any]:
    """N servers, each with a worker and enqueued through, and `listening` more that nobody
    calls; every figure of the configuration."""
    s = ctx.settings
    with contextlib.ExitStack() as stack:
        url = _pg.create_database(s.postgres_url, f"scale_{n}_{listening}")
        stack.callback(_pg.drop_database, s.postgres_url, url)
        everyone = _start_servers(ctx, stack, url, n + listening)
        servers = everyone[:n]
        keys = make_keys(url, [("producer", "producer")] + [(f"worker-{i}", "worker") for i in range(n)])
        admin = servers[0].admin_key
        assert admin is not None
        ctx.run(_call(servers[0].url, admin, PAUSE))
        workers = []
        for i, server in enumerate(servers):
            worker = start_worker(
                ctx.dir(), server.url, keys[f"worker-{i}"], WORKER_CONCURRENCY, log_name=f"worker-n{n}-{i}"
            )
            stack.callback(stop_process, worker)
            workers.append(worker)
        time.sleep(WORKER_SETTLE_SECONDS)  # imported, connected, long-polling the paused type
        for worker in workers:
            if worker.poll() is not None:
                raise RuntimeError(f"a worker exited with {worker.returncode}")
        cpu = Cpu(everyone, workers, _pg.database_name(url), s.postgres_url)

        cpu.start()
        latencies = ctx.run(_enqueue(servers, keys["producer"], s.scale_jobs))
        enqueue = cpu.stop(s.scale_jobs)
        enqueue["call_p50_ms"] = round(percentile(latencies, 50) * 1e3, 2)
        enqueue["call_p99_ms"] = round(percentile(latencies, 99) * 1e3, 2)
        enqueue["jobs_per_s"] = round(s.scale_jobs / enqueue["wall_s"], 1)
        _pg.vacuum_analyze(url)

        cpu.start()
        ctx.run(_call(servers[0].url, admin, RESUME))
        ctx.run(_wait_drained(servers[0].url, admin, s.scale_jobs, workers))
        drain = cpu.stop(s.scale_jobs)
        held = ctx.run(_held_times(servers[0].url, admin, s.scale_jobs))
        drain["jobs_per_s"] = held["jobs_per_s"]
        drain["held_p50_ms"] = round(percentile(held["held"], 50) * 1e3, 2)
        drain["held_p99_ms"] = round(percentile(held["held"], 99) * 1e3, 2)
        commits = _commits(url)
        enqueue["commits"], drain["commits"] = commits["enqueue"], commits["drain"]
        enqueue["jobs_per_commit"] = round(s.scale_jobs / max(commits["enqueue"], 1), 1)
        drain["jobs_per_commit"] = round(s.scale_jobs / max(commits["drain"], 1), 1)
        drain["events_per_commit"] = round(commits["drain_events"] / max(commits["drain"], 1), 1)
        ctx.log(
            f"  {_label(n, listening)}: enqueue {enqueue['jobs_per_s']:,.0f} jobs/s,"
            f" drain {drain['jobs_per_s']:,.0f} jobs/s; drain CPU per job: servers"
            f" {drain['server_us_per_job']} µs, workers {drain['worker_us_per_job']} µs,"
            f" PostgreSQL {drain['postgres_us_per_job']} µs"
            f" (+{drain['shared_us_per_job']} µs shared); {drain['jobs_per_commit']} jobs per commit"
        )
        return {
            "servers": n,
            "listening": listening,
            "load_average": os.getloadavg()[0],
            "enqueue": enqueue,
            "drain": drain,
        }


def _start_servers(ctx: Context, stack: contextlib.ExitStack, url: str, n: int) -> list[ServerProcess]:
    """N `queuelog serve` on one database: the first migrates it and prints the ADMIN key.
    Each names its connections after itself (application_name), for their backends' CPU."""
    first = start_queuelog(ctx.dir(), _named(url, f"scale-n{n}-0"), name=f"scale-n{n}-0", wait=False)
    stack.callback(first.stop)
    queuelog_ready(first)
    servers = [first]
    for i in range(1, n):
        other = start_queuelog(ctx.dir(), _named(url, f"scale-n{n}-{i}"), name=f"scale-n{n}-{i}", wait=False)
        stack.callback(other.stop)
        servers.append(other)
    for other in servers[1:]:
        wait_healthy(other)
        other.admin_key = first.admin_key
    return servers


def _named(url: str, name: str) -> str:
    return f"{url}?application_name={name}"


async def _call(url: str, key: str, query: str, variables: dict[str, Any] | None = None) -> Any:
    async with Api(url, key) as api:
        return await api.call(query, variables)


async def _enqueue(servers: Sequence[ServerProcess], key: str, count: int) -> list[float]:
    """`count` jobs by enqueueJobs of ENQUEUE_BATCH, CONNECTIONS_PER_SERVER connections per
    server, all drawing from one list of batches; each call's latency, in seconds."""
    batches = iter(chunks(range(count), ENQUEUE_BATCH))
    latencies: list[float] = []

    async def producer(url: str) -> None:
        async with Api(url, key) as api:
            for ids in batches:
                inputs = [job_input(i) for i in ids]
                started = time.perf_counter()
                answer = (await api.call(ENQUEUE_MANY, {"inputs": inputs}))["enqueueJobs"]
                latencies.append(time.perf_counter() - started)
                if len(answer) != len(inputs):
                    raise RuntimeError(f"enqueueJobs answered {len(answer)} of {len(inputs)} jobs")

    await asyncio.gather(*(producer(s.url) for s in servers for _ in range(CONNECTIONS_PER_SERVER)))
    return latencies


async def _wait_drained(url: str, admin: str, jobs: int, workers: Sequence[Any]) -> None:
    async with Api(url, admin) as api:
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while True:
            counts = await api.counts()
            if counts["completed"] >= jobs:
                return
            if counts["failed"] or counts["cancelled"]:
                raise RuntimeError(f"jobs did not complete: {counts}")
            if any(w.poll() is not None for w in workers):
                raise RuntimeError("a worker exited during the drain")
            if time.monotonic() > deadline:
                raise RuntimeError(f"not drained after {DRAIN_TIMEOUT:.0f} s: {counts}")
            await asyncio.sleep(0.1)


async def _held_times(url: str, admin: str, jobs: int) -> dict[str, Any]:
    """Every completed job's claimedAt and finishedAt, through the API: the drain's window
    (jobs/s) and each job's time from its claim to its completion."""
    first, last, held, retried = float("inf"), float("-inf"), [], 0
    async with Api(url, admin) as api:
        after = None
        for _ in range(jobs // 100 + 10):
            page = (await api.call(TIMES_PAGE, {"after": after}))["jobs"]
            for job in page["nodes"]:
                claimed, finished = _parse_time(job["claimedAt"]), _parse_time(job["finishedAt"])
                first, last = min(first, claimed), max(last, finished)
                held.append(finished - claimed)
                retried += job["attempt"] != 1
            if not page["pageInfo"]["hasNextPage"]:
                break
            after = page["pageInfo"]["endCursor"]
    if len(held) != jobs or retried:
        raise RuntimeError(f"{len(held)} completed jobs read back (expected {jobs}), {retried} retried")
    window = last - first
    return {"jobs_per_s": round(jobs / window, 1) if window > 0 else None, "held": held}


def _commits(url: str) -> dict[str, int]:
    with contextlib.closing(_pg.psycopg().connect(url, autocommit=True)) as conn:
        enqueue, drain, enqueue_events, drain_events = conn.execute(COMMITS_BY_PHASE).fetchone()
    return {
        "enqueue": enqueue,
        "drain": drain,
        "enqueue_events": enqueue_events,
        "drain_events": drain_events,
    }


# --- the ceilings ----------------------------------------------------------------------------


def commit_ceilings(ctx: Context) -> dict[str, Any]:
    """Commits/s of CEILING_CONNECTIONS connections committing one INSERT at a time: plain,
    with pg_notify, with the controlled-claim lock; and of one connection, plain."""
    s = ctx.settings
    url = _pg.create_database(s.postgres_url, "scale_ceilings")
    try:
        with contextlib.closing(_pg.psycopg().connect(url, autocommit=True)) as conn:
            conn.execute("CREATE TABLE probe (id bigserial PRIMARY KEY, v int NOT NULL)")
        rates: dict[str, list[float]] = {"plain": [], "notify": [], "lock": [], "one": []}
        for round_number in range(2):
            modes = ["plain", "notify", "lock", "one"]
            for mode in modes if round_number == 0 else reversed(modes):
                connections = 1 if mode == "one" else CEILING_CONNECTIONS
                rates[mode].append(_commit_rate(url, mode, connections, CEILING_SECONDS))
    finally:
        _pg.drop_database(s.postgres_url, url)
    medians = {mode: statistics.median(values) for mode, values in rates.items()}
    ctx.log(
        "commits/s, {} connections: plain {plain:,.0f}, with pg_notify {notify:,.0f}, with the"
        " controlled-claim lock {lock:,.0f}; one connection {one:,.0f}".format(CEILING_CONNECTIONS, **medians)
    )
    return {"rounds": rates, "median": medians, "connections": CEILING_CONNECTIONS}


def _commit_rate(url: str, mode: str, connections: int, seconds: float) -> float:
    statements = ["INSERT INTO probe (v) VALUES (1)"]
    if mode == "notify":
        statements.append("SELECT pg_notify('queuelog_probe', 'x')")
    if mode == "lock":
        statements.insert(0, f"SELECT pg_advisory_xact_lock({CONTROLLED_CLAIM_LOCK})")
    psycopg = _pg.psycopg()
    opened = [psycopg.connect(url) for _ in range(connections)]
    counts = [0] * connections
    start = threading.Barrier(connections + 1)
    stop_at = [0.0]

    def loop(index: int) -> None:
        conn = opened[index]
        start.wait()
        while time.monotonic() < stop_at[0]:
            for statement in statements:
                conn.execute(statement)
            conn.commit()
            counts[index] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(connections)]
    try:
        for thread in threads:
            thread.start()
        stop_at[0] = time.monotonic() + seconds
        started = time.monotonic()
        start.wait()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
    finally:
        for conn in opened:
            conn.close()
    return sum(counts) / elapsed


# --- the table -------------------------------------------------------------------------------


def _median(runs: Sequence[dict[str, Any]], phase: str, name: str) -> float | None:
    values = [r[phase][name] for r in runs if r[phase].get(name) is not None]
    return statistics.median(values) if values else None


def _each(runs: Sequence[dict[str, Any]], phase: str, name: str, digits: int = 0) -> str:
    return ", ".join(f"{r[phase][name]:,.{digits}f}" for r in runs)


def _percentiles(runs: Sequence[dict[str, Any]], phase: str, low: str, high: str) -> str:
    return f"{num(_median(runs, phase, low), 1)} / {num(_median(runs, phase, high), 1)}"


@dataclass
class Lines:
    """The lines of one configuration, beside the baseline's (none for the baseline itself)."""

    fig: Figure
    these: Sequence[dict[str, Any]]
    base: Sequence[dict[str, Any]]

    def value(self, text: str, phase: str, name: str, digits: int = 0) -> None:
        mine = _median(self.these, phase, name)
        if self.these is self.base:
            self.fig.add(f"  {text}", num(mine, digits))
            return
        theirs = _median(self.base, phase, name)
        self.fig.add(f"  {text}", num(mine, digits), num(theirs, digits), rx(ratio(mine, theirs)))

    def percentiles(self, text: str, phase: str, low: str, high: str) -> None:
        mine = _percentiles(self.these, phase, low, high)
        theirs = "" if self.these is self.base else _percentiles(self.base, phase, low, high)
        self.fig.add(f"  {text}", mine, theirs)


def _mean_each(runs: Sequence[dict[str, Any]], phase: str, name: str, servers: slice) -> float | None:
    """The median over runs of the mean over `servers` of a per-server list."""
    values = [statistics.mean(r[phase][name][servers]) for r in runs if r[phase][name][servers]]
    return statistics.median(values) if values else None


def report(fig: Figure, jobs: int, runs: dict[str, list[dict[str, Any]]], ceilings: dict[str, Any]) -> None:
    base_label, base = next(iter(runs.items()))  # the first count given (1 by default)
    for label, these in runs.items():
        if these[0]["listening"]:
            _listening_lines(fig, label, these, base_label, base)
            continue
        heading = f"{label}, a worker each: {jobs:,} jobs, medians of {len(these)} runs"
        fig.add(heading, "", "" if these is base else base_label)
        lines = Lines(fig, these, base)
        lines.value("drain, jobs/s", "drain", "jobs_per_s")
        lines.percentiles("drain, claim to completion p50 / p99, ms", "drain", "held_p50_ms", "held_p99_ms")
        lines.value("drain CPU per job, µs: servers", "drain", "server_us_per_job", 1)
        lines.value("  workers", "drain", "worker_us_per_job", 1)
        lines.value("  PostgreSQL (the database's backends)", "drain", "postgres_us_per_job", 1)
        lines.value("  PostgreSQL's shared processes (at most)", "drain", "shared_us_per_job", 1)
        lines.value("drain, jobs per commit", "drain", "jobs_per_commit", 1)
        lines.value("enqueueJobs of 100, jobs/s", "enqueue", "jobs_per_s")
        lines.percentiles("  enqueueJobs call p50 / p99, ms", "enqueue", "call_p50_ms", "call_p99_ms")
        lines.value("enqueue CPU per job, µs: servers", "enqueue", "server_us_per_job", 1)
        lines.value("  PostgreSQL (the database's backends)", "enqueue", "postgres_us_per_job", 1)
        lines.value("enqueue, jobs per commit", "enqueue", "jobs_per_commit", 1)
        fig.notes.append(
            f"{label}, each run: drain jobs/s {_each(these, 'drain', 'jobs_per_s')};"
            f" drain PostgreSQL µs/job {_each(these, 'drain', 'postgres_us_per_job', 1)};"
            f" drain server µs/job {_each(these, 'drain', 'server_us_per_job', 1)};"
            f" cores used in the drain {_each(these, 'drain', 'cores_used', 2)};"
            f" enqueue jobs/s {_each(these, 'enqueue', 'jobs_per_s')}"
        )
    _ceiling_lines(fig, ceilings)


def _listening_lines(
    fig: Figure, label: str, these: list[dict[str, Any]], base_label: str, base: list[dict[str, Any]]
) -> None:
    """The working server beside the lone server, and what each listening server spent."""
    fig.add(f"{label}: only the first is called, medians of {len(these)} runs", "", base_label)
    for phase in ("drain", "enqueue"):
        for what, name in (
            ("server", "server_us_per_job_each"),
            ("server's PostgreSQL backends", "postgres_us_per_job_each"),
        ):
            working = _mean_each(these, phase, name, slice(0, 1))
            alone = _mean_each(base, phase, name, slice(0, 1))
            fig.add(
                f"  {phase}, the working {what}, µs per job",
                num(working, 1),
                num(alone, 1),
                rx(ratio(working, alone)),
            )
            heard = _mean_each(these, phase, name, slice(1, None))
            fig.add(f"  {phase}, each listening {what}, µs per job", num(heard, 1))


def _ceiling_lines(fig: Figure, ceilings: dict[str, Any]) -> None:
    median = ceilings["median"]
    plain = num(median["plain"], 0, "plain")
    fig.add(
        f"commits/s, {ceilings['connections']} connections, one INSERT each: with pg_notify",
        num(median["notify"], 0),
        plain,
        rx(ratio(median["notify"], median["plain"])),
    )
    fig.add(
        "  with the controlled-claim lock (pg_advisory_xact_lock)",
        num(median["lock"], 0),
        plain,
        rx(ratio(median["lock"], median["plain"])),
    )
    fig.add("  one connection alone, plain (the time of one commit)", num(median["one"], 0))
    rounds = "; ".join(
        f"{mode} {', '.join(f'{v:,.0f}' for v in values)}" for mode, values in ceilings["rounds"].items()
    )
    fig.notes.append(f"commits/s, each round: {rounds}")
