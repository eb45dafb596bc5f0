"""Keep-alive HTTP load: wrk with a Lua script when it is installed, else this process.

A `Round` is one bounded burst of load against one server: requests answered, wall time,
latency distribution, the server's CPU meanwhile (from /proc) and the load generator's own
CPU. Rounds against two targets alternate (A B, B A, A B, ...) so that drift on a noisy
machine hits both, and `pool` merges one target's rounds.

wrk reports its latency histogram through the Lua `done()` hook as 1000 quantiles (at
0.05 %, 0.15 %, ..., 99.95 %); pooling weights each round's quantiles by its request count,
so pooled percentiles are exact to 0.1 % of rank. The Python fallback (raw asyncio
streams on uvloop, bodies built beforehand) records every latency.
"""

from __future__ import annotations

import asyncio
import json
import resource
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._common import HttpConnection, ServerProcess, cpu_delta, event_loop_runner

QUANTILES = 1000


def wrk_path() -> str | None:
    return shutil.which("wrk")


@dataclass
class Round:
    requests: int
    seconds: float
    # (latency in seconds, weight): every sample with weight 1, or wrk's quantiles
    points: list[tuple[float, float]] = field(default_factory=list)
    server_cpu: float | None = None
    client_cpu: float | None = None
    db_cpu: float | None = None  # PostgreSQL backends of the server's database
    errors: int = 0
    counters: dict[str, int] = field(default_factory=dict)
    first_error: str = ""

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else float("nan")


def weighted_percentile(points: Sequence[tuple[float, float]], p: float) -> float:
    if not points:
        return float("nan")
    ordered = sorted(points)
    total = sum(w for _, w in ordered)
    rank = total * p / 100
    seen = 0.0
    for value, weight in ordered:
        seen += weight
        if seen >= rank:
            return value
    return ordered[-1][0]


def pool(rounds: Sequence[Round]) -> Round:
    counters: dict[str, int] = {}
    for r in rounds:
        for k, v in r.counters.items():
            counters[k] = counters.get(k, 0) + v
    server = [r.server_cpu for r in rounds]
    client = [r.client_cpu for r in rounds]
    db = [r.db_cpu for r in rounds]
    return Round(
        requests=sum(r.requests for r in rounds),
        seconds=sum(r.seconds for r in rounds),
        points=[p for r in rounds for p in r.points],
        server_cpu=None if None in server else sum(x for x in server if x is not None),
        client_cpu=None if None in client else sum(x for x in client if x is not None),
        db_cpu=None if None in db else sum(x for x in db if x is not None),
        errors=sum(r.errors for r in rounds),
        counters=counters,
        first_error=next((r.first_error for r in rounds if r.first_error), ""),
    )


def round_summary(r: Round, ops: int | None = None) -> dict[str, Any]:
    """JSON-ready figures of a (pooled) round; `ops` replaces the request count for rates."""
    count = r.requests if ops is None else ops
    return {
        "requests": r.requests,
        "ops": count,
        "seconds": round(r.seconds, 4),
        "ops_per_s": round(count / r.seconds, 1) if r.seconds > 0 else None,
        "p50_ms": round(weighted_percentile(r.points, 50) * 1000, 3),
        "p90_ms": round(weighted_percentile(r.points, 90) * 1000, 3),
        "p99_ms": round(weighted_percentile(r.points, 99) * 1000, 3),
        "server_cpu_s": r.server_cpu,
        "server_cpu_ms_per_op": round(r.server_cpu * 1000 / count, 4) if r.server_cpu and count else None,
        "client_cpu_s": round(r.client_cpu, 3) if r.client_cpu is not None else None,
        "client_cpu_share": round(r.client_cpu / r.seconds, 3) if r.client_cpu and r.seconds else None,
        "db_cpu_s": round(r.db_cpu, 3) if r.db_cpu is not None else None,
        "db_cpu_ms_per_op": round(r.db_cpu * 1000 / count, 4) if r.db_cpu is not None and count else None,
        "errors": r.errors,
        "counters": r.counters,
    }


# --- wrk -------------------------------------------------------------------------------------

LUA_DONE = r"""
local bench_threads = {}
function setup(thread) table.insert(bench_threads, thread) end
function done(summary, latency, requests)
  local q = {}
  for k = 0, QUANTILES - 1 do q[#q + 1] = latency:percentile((k + 0.5) * 100 / QUANTILES) end
  local extra = {}
  for _, name in ipairs(BENCH_COUNTERS) do
    local total = 0
    for _, t in ipairs(bench_threads) do total = total + (t:get(name) or 0) end
    extra[#extra + 1] = string.format('"%s":%d', name, total)
  end
  local e = summary.errors
  for _, t in ipairs(bench_threads) do
    local bad = t:get("first_bad")
    if bad and bad ~= "" then
      io.write("BENCH_BAD " .. string.gsub(bad, "\n", " ") .. "\n")
      break
    end
  end
  io.write(string.format(
    'BENCH_WRK {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,' ..
    '"timeout":%d,"quantiles_us":[%s],"counters":{%s}}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    table.concat(q, ","), table.concat(extra, ",")))
end
"""


def lua_string(text: str) -> str:
    """A Lua long-bracket string literal holding `text` verbatim."""
    level = 1
    while f"]{'=' * level}]" in text:
        level += 1
    return f"[{'=' * level}[{text}]{'=' * level}]"


def lua_headers(headers: dict[str, str]) -> str:
    lines = ['wrk.headers["Content-Type"] = "application/json"']
    lines += [f"wrk.headers[ {lua_string(k)} ] = {lua_string(v)}" for k, v in headers.items()]
    return "\n".join(lines)


def static_post_script(body: bytes, headers: dict[str, str]) -> str:
    """Every request the same POST (wrk's fast path: no Lua per request)."""
    return "\n".join(
        [
            'wrk.method = "POST"',
            f"wrk.body = {lua_string(body.decode())}",
            lua_headers(headers),
            f"QUANTILES = {QUANTILES}",
            "BENCH_COUNTERS = {}",
            LUA_DONE,
        ]
    )


def claim_complete_script(
    claim_path: str, claim_body: str, complete_path: str, complete_format: str, headers: dict[str, str]
) -> str:
    """One connection per wrk thread: claim, then complete what it claimed, in turn.

    `complete_format` is a Lua string.format pattern taking the job id and the attempt (%s, %s).
    """
    return "\n".join(
        [
            'wrk.method = "POST"',
            lua_headers(headers),
            f"QUANTILES = {QUANTILES}",
            'BENCH_COUNTERS = {"claimed", "empty", "completed", "bad"}',
            f"local claim_path, complete_path = {lua_string(claim_path)}, {lua_string(complete_path)}",
            f"local claim_body = {lua_string(claim_body)}",
            f"local complete_format = {lua_string(complete_format)}",
            "held_id, held_attempt = nil, nil",
            "claimed, empty, completed, bad = 0, 0, 0, 0",
            'first_bad = ""',
            r"""
function request()
  if held_id then
    return wrk.format(nil, complete_path, nil, string.format(complete_format, held_id, held_attempt))
  end
  return wrk.format(nil, claim_path, nil, claim_body)
end
function response(status, headers, body)
  local failed = status ~= 200 or string.find(body, '"errors"', 1, true) ~= nil
  if failed and first_bad == "" then first_bad = status .. " " .. string.sub(body, 1, 300) end
  if held_id then
    held_id = nil
    if failed then bad = bad + 1 else completed = completed + 1 end
    return
  end
  if failed then bad = bad + 1 return end
  local id = string.match(body, '"id":"?(%d+)')
  if id then
    held_id = id
    held_attempt = string.match(body, '"attempt":(%d+)')
    claimed = claimed + 1
  else
    empty = empty + 1
  end
end
""",
            LUA_DONE,
        ]
    )


def run_wrk(
    server: ServerProcess,
    path: str,
    script: str,
    *,
    connections: int,
    threads: int,
    seconds: int,
    workdir: Path,
) -> Round:
    script_path = workdir / f"wrk-{server.name}-{time.monotonic_ns()}.lua"
    script_path.write_text(script)
    exe = wrk_path()
    assert exe is not None
    command = [exe, "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s", "--timeout", "30s"]
    command += ["-s", str(script_path), f"{server.url}{path}"]
    db_before = server.db_cpu_snapshot()
    cpu_before = server.cpu_seconds()
    usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60, check=False)
    usage_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_after = server.cpu_seconds()
    db_after = server.db_cpu_snapshot()
    line = next((x for x in done.stdout.splitlines() if x.startswith("BENCH_WRK ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(
            f"wrk failed ({done.returncode}): {done.stderr.strip()[-500:]} {done.stdout[-500:]}"
        )
    data = json.loads(line[len("BENCH_WRK ") :])
    requests = int(data["requests"])
    weight = requests / QUANTILES
    errors = sum(int(data[k]) for k in ("connect", "read", "write", "status", "timeout"))
    counters = {k: int(v) for k, v in data["counters"].items()}
    errors += counters.get("bad", 0)
    error_counts = {k: data[k] for k in ("connect", "read", "write", "status", "timeout")}
    bad = next((x for x in done.stdout.splitlines() if x.startswith("BENCH_BAD ")), None)
    return Round(
        requests=requests,
        seconds=int(data["duration_us"]) / 1e6,
        points=[(q / 1e6, weight) for q in data["quantiles_us"]] if requests else [],
        server_cpu=cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None,
        client_cpu=(usage_after.ru_utime + usage_after.ru_stime)
        - (usage_before.ru_utime + usage_before.ru_stime),
        db_cpu=cpu_delta(db_before, db_after),
        errors=errors,
        counters=counters,
        first_error=(bad[len("BENCH_BAD ") :] if bad else f"wrk errors: {error_counts}") if errors else "",
    )


# --- the Python fallback ---------------------------------------------------------------------


def run_python(
    server: ServerProcess,
    step: Callable[[HttpConnection, dict[str, Any], dict[str, int]], Any],
    *,
    headers: dict[str, str],
    connections: int,
    seconds: float,
    max_requests: int = 10_000_000,
) -> Round:
    """`connections` keep-alive connections each run `step` in a loop until time is up.

    `step(conn, state, counters)` sends one request and returns its latency in seconds, or
    raises; `state` is per connection, `counters` shared.
    """
    latencies: list[float] = []
    counters: dict[str, int] = {}
    problems: list[str] = []

    async def connection(deadline: float) -> None:
        conn = HttpConnection(server.url, headers)
        state: dict[str, Any] = {}
        try:
            while time.perf_counter() < deadline and len(latencies) < max_requests:
                try:
                    latencies.append(await step(conn, state, counters))
                except Exception as exc:  # counted, reported, and the connection goes on
                    problems.append(f"{type(exc).__name__}: {exc}"[:300])
                    await conn.close()
                    if len(problems) > 1000:
                        return
        finally:
            await conn.close()

    async def main() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(connection(started + seconds) for _ in range(connections)))
        return time.perf_counter() - started

    db_before = server.db_cpu_snapshot()
    cpu_before = server.cpu_seconds()
    client_before = time.process_time()
    with event_loop_runner() as runner:
        elapsed = runner.run(main())
    client_cpu = time.process_time() - client_before
    cpu_after = server.cpu_seconds()
    db_after = server.db_cpu_snapshot()
    return Round(
        requests=len(latencies),
        seconds=elapsed,
        points=[(x, 1.0) for x in latencies],
        server_cpu=cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None,
        client_cpu=client_cpu,
        db_cpu=cpu_delta(db_before, db_after),
        errors=len(problems) + counters.get("bad", 0),
        counters=counters,
        first_error=problems[0] if problems else "",
    )


def static_post_step(path: str, body: bytes, check: bytes) -> Callable[..., Any]:
    """A step that POSTs `body` and counts an answer without `check` in it as bad."""

    async def step(conn: HttpConnection, state: dict[str, Any], counters: dict[str, int]) -> float:
        started = time.perf_counter()
        status, answer = await conn.post(path, body)
        elapsed = time.perf_counter() - started
        if status != 200 or b'"errors"' in answer or check not in answer:
            counters["bad"] = counters.get("bad", 0) + 1
        return elapsed

    return step


def alternate(
    targets: dict[str, Callable[[int], Round]], rounds: int, pause: float = 0.3
) -> dict[str, list[Round]]:
    """`rounds` rounds per target, in the order A B, B A, A B, ...; `run(i)` does round i."""
    names = list(targets)
    done: dict[str, list[Round]] = {name: [] for name in names}
    for i in range(rounds):
        for name in names if i % 2 == 0 else names[::-1]:
            done[name].append(targets[name](i))
            time.sleep(pause)
    return done
