"""The worker's HTTP client, end to end: aiohttp against a hand-written client and httpx (issue 15).

The worker's two hot calls (`claimJobs`, `completeJobs`) go through `queuelog.sdk.plain_http.
PlainHTTP`, an aiohttp session; until issue 15 that was a hand-written HTTP/1.1 client on
asyncio streams (kept below as `RawHTTP`). The issue's rule: if aiohttp comes within 20% of
it end to end, use aiohttp. This measures that, on the real worker hot loop, with httpx
(what AsyncClient uses for everything else) as a third row.

Each repetition starts a fresh `queuelog serve` (SQLite, or PostgreSQL with --database
postgresql), warms it up (2,000 jobs enqueued, claimed and completed 100 at a time), and
runs each transport once, in turn: N no-op jobs of a type of the transport's own enqueued
first (`enqueueJobs` of 1000, not measured), then one worker process (`Worker(...,
concurrency=C).run_forever()`, an async no-op handler, as `queuelog worker` runs it) whose
`AsyncClient` posts its claims and completions through:

- raw:     `RawHTTP`, the hand-written client, behind PlainHTTP's `post(body, timeout)`;
- aiohttp: queuelog's `PlainHTTP`, what the worker uses;
- httpx:   the `httpx.AsyncClient` that AsyncClient uses for everything else.

The worker stops itself once it has reported N jobs. jobs/s = N / (last finishedAt - first
claimedAt) of its type, read back through the API (the server's clock, start-up left out,
as figure 4); "worker's run" is N / (the worker's run() starting .. its N-th report in).
The worker reports its own CPU per job and the latency of each claim (that returned jobs)
and each completion, as it saw them (transport, server and JSON included); the server's
CPU per job is read from /proc around each run. Every job must be COMPLETED on its first
attempt. The order rotates (raw, aiohttp, httpx; then aiohttp, httpx, raw; ...), so
that the runs compared are seconds apart; the table shows medians over the repetitions,
and for jobs/s the median of the per-repetition ratios.

    .venv/bin/python -m bench.fig_transport               # 5 repetitions of 10,000 jobs
    .venv/bin/python -m bench.fig_transport --reps 15 --json /tmp/transport.json
    .venv/bin/python -m bench.fig_transport --transports raw,aiohttp --database postgresql

The bench process never imports queuelog: the worker runs in its own process
(`python -m bench.fig_transport worker ...`), which does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench._api import Api, claim_and_complete, enqueue_many
from bench._common import (
    PROJECT_DIR,
    PYTHON,
    Cleanup,
    ServerProcess,
    clean_env,
    event_loop_runner,
    machine_line,
    percentile,
    stderr,
    stop_process,
)
from bench._context import Context, Settings
from bench._report import Figure, format_table, ms, num, ratio, rx

TRANSPORTS = ("raw", "aiohttp", "httpx")
DRAIN_TIMEOUT = 300.0
WARMUP_JOBS = 2000
KEEP_RULE = 0.8  # issue 15: aiohttp within 20% of the hand-written client end to end -> use aiohttp


# --- the bench side --------------------------------------------------------------------------


def transport_figure(
    ctx: Context, fig: Figure, transports: Sequence[str] = TRANSPORTS, reps: int = 5
) -> None:
    """`reps` repetitions; each, one server and one end-to-end run per transport, in turn."""
    s = ctx.settings
    runs: dict[str, list[dict[str, Any]]] = {t: [] for t in transports}
    for rep in range(reps):
        order = [transports[(rep + i) % len(transports)] for i in range(len(transports))]
        for transport, result in run_repetition(ctx, order, f"r{rep}").items():
            runs[transport].append(result)
            ctx.log(
                f"rep {rep + 1}/{reps} {transport:8} {result['jobs_per_s']:>9,.0f} jobs/s, "
                f"worker CPU {result['worker_cpu_us_per_job']:.0f} us/job"
            )
    first = transports[0]
    per_rep = {
        t: [ratio(runs[t][i]["jobs_per_s"], runs[first][i]["jobs_per_s"]) for i in range(reps)]
        for t in transports
    }
    summary = {t: _summary(runs[t]) for t in transports}
    base = summary[first]
    fig.add(f"{s.e2e_jobs:,} no-op jobs, worker -c {s.e2e_concurrency}, {reps} reps (medians)")
    for t in transports:
        r = summary[t]
        rep_ratio = statistics.median(x for x in per_rep[t] if x is not None) if t != first else None
        target, met = "", None
        if t == "aiohttp" and first == "raw":
            target, met = f">= {KEEP_RULE:g}x: use it", rep_ratio is not None and rep_ratio >= KEEP_RULE
        other = t != first
        fig.add(
            f"  {t}: jobs/s (server's clock)",
            num(r["jobs_per_s"], 0),
            num(base["jobs_per_s"], 0) if other else "",
            rx(rep_ratio) if rep_ratio is not None else "",
            target,
            met,
        )
        fig.add(
            f"  {t}: jobs/s (worker's run)",
            num(r["worker_jobs_per_s"], 0),
            num(base["worker_jobs_per_s"], 0) if other else "",
            rx(ratio(r["worker_jobs_per_s"], base["worker_jobs_per_s"])) if other else "",
        )
        for what, unit in (("worker", "worker CPU per job, us"), ("server", "server CPU per job, us")):
            key = f"{what}_cpu_us_per_job"
            fig.add(
                f"  {t}: {unit}",
                num(r.get(key), 1),
                num(base.get(key), 1) if other else "",
                rx(ratio(r.get(key), base.get(key))) if other else "",
            )
        for kind in ("claim", "complete"):
            fig.add(
                f"  {t}: {kind} p50 / p99, ms",
                f"{ms(r[f'{kind}_p50_s'])} / {ms(r[f'{kind}_p99_s'])}",
                f"{ms(base[f'{kind}_p50_s'])} / {ms(base[f'{kind}_p99_s'])}" if other else "",
            )
    for t in transports:
        fig.notes.append(
            f"{t} jobs/s per rep: "
            + "  ".join(f"{x['jobs_per_s']:,.0f}" for x in runs[t])
            + ("" if t == first else "; ratio to " + first + ": " + "  ".join(rx(x) for x in per_rep[t]))
        )
    fig.notes.append("ratio of jobs/s: the median of the repetitions' ratios; other ratios: of the medians")
    fig.data = {"jobs": s.e2e_jobs, "concurrency": s.e2e_concurrency, "reps": reps, "runs": runs}
    fig.data["summary"] = summary
    fig.data["ratios_to_" + first] = per_rep


def _summary(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    keys = [k for k, v in runs[0].items() if isinstance(v, int | float) and not isinstance(v, bool)]
    summary: dict[str, float | None] = {}
    for k in keys:
        values = [r[k] for r in runs if r.get(k) is not None]
        summary[k] = statistics.median(values) if values else None
    return summary


def run_repetition(ctx: Context, order: Sequence[str], tag: str) -> dict[str, dict[str, Any]]:
    """One fresh server; for each transport in `order`, N jobs of a type of its own enqueued,
    then one worker on that transport until it has reported N."""
    s = ctx.settings
    types = ",".join(f"noop_{t}" for t in ["warmup", *order])
    server = ctx.queuelog(job_types=types, name=f"queuelog-{tag}")
    try:
        keys = ctx.keys(server, [("bench-producer", "producer"), ("bench-worker", "worker")])
        # A warm-up, so that the first transport in turn does not meet a cold server.
        ctx.run(enqueue_many(server.url, keys["bench-producer"], WARMUP_JOBS, types=("noop_warmup",)))
        ctx.run(claim_and_complete(server.url, keys["bench-worker"], WARMUP_JOBS))
        results = {}
        for transport in order:
            job_type = f"noop_{transport}"
            ctx.run(
                enqueue_many(
                    server.url,
                    keys["bench-producer"],
                    s.e2e_jobs,
                    batch=1000,
                    connections=2,
                    types=(job_type,),
                )
            )
            ctx.maintain(server)
            results[transport] = run_worker(
                ctx, server, keys["bench-worker"], transport, f"{transport}-{tag}"
            )
        return results
    finally:
        server.stop()  # the next repetition gets both cores


def run_worker(ctx: Context, server: ServerProcess, key: str, transport: str, tag: str) -> dict[str, Any]:
    s = ctx.settings
    work = ctx.dir()
    out = work / f"worker-{tag}.json"
    log_path = work / f"worker-{tag}.log"
    env = clean_env(
        {"PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(PROJECT_DIR)]))}
    )
    command = [PYTHON, "-m", "bench.fig_transport", "worker", server.url, key, transport]
    command += [str(s.e2e_jobs), str(s.e2e_concurrency), str(out)]
    server_cpu = server.cpu_seconds()
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            command, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        worker.wait(timeout=DRAIN_TIMEOUT)
    finally:
        stop_process(worker)
    server_after = server.cpu_seconds()
    if worker.returncode != 0 or not out.exists():
        tail = log_path.read_text(errors="replace")[-1500:]
        raise RuntimeError(f"the {transport} worker exited with {worker.returncode}: {tail}")
    seen = json.loads(out.read_text())
    first, last, count, retried = ctx.run(
        _window(server.url, server.admin_key, f"noop_{transport}", s.e2e_jobs)
    )
    if count != s.e2e_jobs or retried:
        raise RuntimeError(f"{transport}: {count} jobs completed (expected {s.e2e_jobs}), {retried} retried")
    seconds = last - first
    return {
        "transport": transport,
        "jobs_per_s": round(s.e2e_jobs / seconds, 1),
        "window_s": round(seconds, 4),
        "worker_jobs_per_s": round(s.e2e_jobs / seen["worker_wall_s"], 1),
        "server_cpu_us_per_job": round((server_after - server_cpu) / s.e2e_jobs * 1e6, 1)
        if server_after is not None and server_cpu is not None
        else None,
    } | seen


TYPE_TIMES_PAGE = (
    "query Times($type: String, $after: String) { jobs(status: COMPLETED, type: $type, first: 100,"
    " after: $after) { nodes { id attempt claimedAt finishedAt } pageInfo { hasNextPage endCursor } } }"
)


async def _window(url: str, admin: str | None, job_type: str, jobs: int) -> tuple[float, float, int, int]:
    first, last, count, retried = float("inf"), float("-inf"), 0, 0
    async with Api(url, admin) as api:
        after = None
        for _ in range(jobs // 100 + 10):
            page = (await api.call(TYPE_TIMES_PAGE, {"type": job_type, "after": after}))["jobs"]
            for job in page["nodes"]:
                first = min(first, datetime.fromisoformat(job["claimedAt"]).timestamp())
                last = max(last, datetime.fromisoformat(job["finishedAt"]).timestamp())
                count += 1
                retried += job["attempt"] != 1
            if not page["pageInfo"]["hasNextPage"]:
                break
            after = page["pageInfo"]["endCursor"]
    return first, last, count, retried


# --- the worker side (its own process; imports queuelog) -------------------------------------


def worker_main(url: str, key: str, transport: str, jobs: int, concurrency: int, out: Path) -> None:
    """Run the worker on `transport` until it has reported `jobs` jobs; write what it saw."""
    from queuelog.client import AsyncClient, ServerUnreachable
    from queuelog.worker import Worker

    class RawTransport(RawHTTP):
        """RawHTTP as a queuelog.sdk.transport.Transport: no answer is ServerUnreachable."""

        async def post(self, body: bytes, timeout: float, *, idempotent: bool = False) -> tuple[int, bytes]:
            try:
                return await super().post(body, timeout, idempotent=idempotent)
            except (OSError, EOFError, ValueError, TimeoutError) as exc:
                raise ServerUnreachable(f"{type(exc).__name__}: {exc}") from exc

        async def aclose(self) -> None:
            self.close()

    claims: list[tuple[float, int]] = []
    completes: list[float] = []

    class TimedClient(AsyncClient):
        async def post_json(self, body: bytes, timeout: float | None = None, **how: Any) -> dict[str, Any]:
            started = time.perf_counter()
            data = await super().post_json(body, timeout, **how)
            elapsed = time.perf_counter() - started
            if "claimJobs" in data:
                claims.append((elapsed, len(data["claimJobs"])))
            elif "completeJobs" in data:
                completes.append(elapsed)
            return data

    client = TimedClient(url, key)
    assert client._plain is not None, "PlainHTTP does not serve this URL"
    if transport == "raw":
        client._plain = RawTransport(client.url, {"Authorization": f"Bearer {key}"})
    elif transport == "httpx":
        client._plain = None  # post_json(plain=True) falls back to httpx; no session was opened
    elif transport != "aiohttp":  # queuelog's own PlainHTTP
        raise SystemExit(f"unknown transport {transport!r}")

    done: dict[str, float] = {}

    class CountingWorker(Worker):
        async def run(self) -> None:
            async def stop_when_done() -> None:
                done["cpu0"], done["t0"] = time.process_time(), time.perf_counter()
                while self.processed < jobs:
                    await asyncio.sleep(0.002)
                done["cpu"], done["wall"] = (
                    time.process_time() - done["cpu0"],
                    time.perf_counter() - done["t0"],
                )
                self.stop()

            watcher = asyncio.ensure_future(stop_when_done())
            try:
                await super().run()
            finally:
                watcher.cancel()

    async def noop(job: Any) -> None:
        return None

    handlers = {f"noop_{transport}": noop}
    CountingWorker(url, key, handlers, concurrency=concurrency, client=client).run_forever()
    if "cpu" not in done:
        raise SystemExit("the worker stopped before reporting every job")
    claim_times = [t for t, n in claims if n]
    out.write_text(
        json.dumps(
            {
                "worker_cpu_us_per_job": round(done["cpu"] / jobs * 1e6, 1),
                "worker_wall_s": round(done["wall"], 4),
                "claims": len(claim_times),
                "jobs_per_claim": round(sum(n for _, n in claims) / max(1, len(claim_times)), 1),
                "completes": len(completes),
                "claim_p50_s": percentile(claim_times, 50),
                "claim_p99_s": percentile(claim_times, 99),
                "complete_p50_s": percentile(completes, 50),
                "complete_p99_s": percentile(completes, 99),
            }
        )
    )


# --- the hand-written client, for comparison -------------------------------------------------

RAW_REUSE_SECONDS = 2.0
RAW_IDLE_CONNECTIONS = 8


class _Unanswered(EOFError):
    """The connection ended before a single byte of the answer came back."""


class RawHTTP:
    """The hand-written HTTP/1.1 client the worker used before aiohttp (queuelog's
    `PlainHTTP` up to issue 15), kept here as the floor aiohttp is measured against: raw
    asyncio streams, kept-alive connections, one resend of an idempotent request whose
    reused connection ended before any answer byte."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"not a plain http URL: {url}")
        self.host = parts.hostname
        self.port = parts.port or 80
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host_header = parts.netloc.rsplit("@", 1)[-1]
        lines = [f"POST {target} HTTP/1.1", f"Host: {host_header}", "Accept: application/json"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self._head = ("\r\n".join(lines) + "\r\nContent-Type: application/json\r\nContent-Length: ").encode(
            "latin-1"
        )
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []

    async def post(self, body: bytes, timeout: float, *, idempotent: bool = False) -> tuple[int, bytes]:
        request = b"%s%d\r\n\r\n%s" % (self._head, len(body), body)
        async with asyncio.timeout(timeout):
            reader, writer, reused = await self._connection()
            try:
                writer.write(request)
                status, keep_alive, content = await self._response(reader)
            except _Unanswered:
                writer.transport.abort()
                if not (reused and idempotent):
                    raise
                reader, writer = await asyncio.open_connection(self.host, self.port)
                try:
                    writer.write(request)
                    status, keep_alive, content = await self._response(reader)
                except BaseException:
                    writer.transport.abort()
                    raise
            except BaseException:
                writer.transport.abort()
                raise
        if keep_alive and len(self._idle) < RAW_IDLE_CONNECTIONS:
            self._idle.append((reader, writer, time.monotonic()))
        else:
            writer.transport.abort()
        return status, content

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bool]:
        now = time.monotonic()
        while self._idle:
            reader, writer, since = self._idle.pop()
            if now - since < RAW_REUSE_SECONDS and not reader.at_eof() and not writer.is_closing():
                return reader, writer, True
            writer.transport.abort()
        reader, writer = await asyncio.open_connection(self.host, self.port)
        return reader, writer, False

    @staticmethod
    async def _response(reader: asyncio.StreamReader) -> tuple[int, bool, bytes]:
        try:
            # One byte first: a reset after part of an answer came must not pass for none.
            first = await reader.readexactly(1)
        except asyncio.IncompleteReadError as exc:
            raise _Unanswered("the connection closed before any answer") from exc
        except ConnectionError as exc:
            raise _Unanswered(f"{type(exc).__name__}: {exc}") from exc
        head = first + await reader.readuntil(b"\r\n\r\n")
        while True:
            status_line, *header_lines = head[:-4].split(b"\r\n")
            version, status_text, *_ = status_line.split(b" ", 2) + [b""]
            status = int(status_text)
            if status >= 200:
                break
            head = await reader.readuntil(b"\r\n\r\n")  # an interim 1xx answer: the real one follows
        headers: dict[bytes, bytes] = {}
        for line in header_lines:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        connection = headers.get(b"connection", b"").lower()
        keep_alive = b"close" not in connection if version == b"HTTP/1.1" else b"keep-alive" in connection
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            chunks = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
                if size == 0:
                    while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                        pass
                    break
                chunks.append(await reader.readexactly(size + 2))
                if not chunks[-1].endswith(b"\r\n"):
                    raise ValueError("malformed chunk")
            return status, keep_alive, b"".join(chunk[:-2] for chunk in chunks)
        length = headers.get(b"content-length")
        if length is not None:
            return status, keep_alive, await reader.readexactly(int(length))
        if status in (204, 304):
            return status, keep_alive, b""
        return status, False, await reader.read()  # the body runs until the server closes

    def close(self) -> None:
        for _, writer, _ in self._idle:
            writer.transport.abort()
        self._idle.clear()


# --- command line ----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["worker"]:
        url, key, transport, jobs, concurrency, out = argv[1:7]
        worker_main(url, key, transport, int(jobs), int(concurrency), Path(out))
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m bench.fig_transport",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per run (10000)")
    parser.add_argument("--concurrency", type=int, default=64, help="the worker's concurrency (64)")
    parser.add_argument("--reps", type=int, default=5, help="alternating repetitions (5)")
    parser.add_argument(
        "--transports",
        default=",".join(TRANSPORTS),
        help="comma-separated, the first is the reference of the ratios (raw,aiohttp,httpx)",
    )
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--json", metavar="PATH", help="write every number as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the temp directory (logs, databases)")
    args = parser.parse_args(argv)
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    if not transports or any(t not in TRANSPORTS for t in transports):
        parser.error(f"--transports: choose from {', '.join(TRANSPORTS)}")
    if not 1 <= args.reps <= 50 or not 100 <= args.jobs <= 1_000_000 or not 1 <= args.concurrency <= 1000:
        parser.error("--reps 1..50, --jobs 100..1000000, --concurrency 1..1000")
    settings = Settings.make(True, e2e_jobs=args.jobs, e2e_concurrency=args.concurrency)
    settings.database = args.database
    fig = Figure(
        name="transport",
        number=15,
        title="the worker's HTTP client, end to end",
        baseline=f"{transports[0]} (the first transport), same repetition",
    )
    machine = machine_line()
    started = time.perf_counter()
    with Cleanup(keep=args.keep) as cleanup, event_loop_runner() as runner, contextlib.ExitStack() as stack:
        ctx = Context(settings=settings, root=cleanup.workdir, stack=stack, name="transport", runner=runner)
        try:
            transport_figure(ctx, fig, transports, args.reps)
        except Exception as exc:
            fig.error = f"{type(exc).__name__}: {str(exc).strip()[:1500]}"
            raise
        finally:
            fig.seconds = time.perf_counter() - started
            heading = f"python -m bench.fig_transport ({args.database}; {machine}; {fig.seconds:.0f} s)"
            print(format_table(heading, [fig]), flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(fig.to_dict(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        stderr("interrupted")
        sys.exit(130)
