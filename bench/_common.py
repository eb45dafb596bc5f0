"""Shared helpers for the benchmarks in this directory.

- starting real server processes (`queuelog serve`, or any app under uvicorn) on a temp
  SQLite file and a free loopback port, and stopping them again;
- creating API keys with the `queuelog keys create` command;
- a small keep-alive HTTP/1.1 client on raw asyncio streams (cheap enough that the
  load generator is not what limits a single server process);
- latency percentiles, CPU accounting of the server process, and the report table.

Only loopback addresses are used, and every load is bounded in request count.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

BENCH_DIR = Path(__file__).resolve().parent
PROJECT_DIR = BENCH_DIR.parent
PYTHON = sys.executable
HOST = "127.0.0.1"
STARTUP_TIMEOUT = 60.0
KEY_PATTERN = re.compile(r"ql_[A-Za-z0-9_-]{20,}")
PERCENTILES = (50, 90, 99)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

T = TypeVar("T")


# --- processes -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process and all its threads (Linux /proc), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; fields after it are space-separated.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
    env.update(extra or {})
    return env


@dataclass
class ServerProcess:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    admin_key: str | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def cpu_seconds(self) -> float | None:
        return process_cpu_seconds(self.process.pid)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _launch(name: str, command: Sequence[str], workdir: Path, env: Mapping[str, str] | None) -> ServerProcess:
    port_arg = command[list(command).index("--port") + 1]
    log_path = workdir / f"{name}-{port_arg}.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            list(command),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=_clean_env(env),
            cwd=workdir,
            start_new_session=True,  # Ctrl-C on the benchmark does not hit the servers first
        )
    return ServerProcess(name, int(port_arg), process, log_path)


def wait_healthy(server: ServerProcess, path: str = "/healthz", timeout: float = STARTUP_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited with {server.process.returncode}:\n{server.log()}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, server.port), timeout=1) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode())
            if s.recv(64).startswith(b"HTTP/1.1 200"):
                return
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"{server.name} did not become healthy:\n{server.log()}")
        time.sleep(0.05)


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def start_queuelog(
    workdir: Path,
    database_url: str,
    *,
    job_types: str = "noop",
    extra_args: Sequence[str] = (),
    wrapper: Sequence[str] = (),
    name: str = "queuelog",
) -> ServerProcess:
    """`python -m queuelog serve` on a free port; waits for /healthz and reads the admin key.

    `wrapper` is prepended to the command (e.g. a profiler: `py-spy record -o x.svg --`).
    """
    port = free_port()
    command = [
        *wrapper,
        PYTHON,
        "-m",
        "queuelog",
        "serve",
        "--port",
        str(port),
        "--database-url",
        database_url,
        "--job-types",
        job_types,
        "--log-level",
        "warning",
        *extra_args,
    ]
    server = _launch(name, command, workdir, None)
    wait_healthy(server)
    found = KEY_PATTERN.search(server.log())
    if found is None:
        server.stop()
        raise RuntimeError(f"{name} printed no bootstrap ADMIN key (not a fresh database?)")
    server.admin_key = found.group(0)
    return server


def start_uvicorn(
    workdir: Path, app: str, *, app_dir: Path = BENCH_DIR, env: Mapping[str, str] | None = None, name: str
) -> ServerProcess:
    """`python -m uvicorn --factory app` served the way `queuelog serve` serves queuelog.

    Same uvicorn defaults as `queuelog serve` (loop and http "auto": uvloop and httptools
    when installed), log level warning, no proxy headers, one process.
    """
    port = free_port()
    command = [
        PYTHON,
        "-m",
        "uvicorn",
        app,
        "--factory",
        "--app-dir",
        str(app_dir),
        "--host",
        HOST,
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--no-proxy-headers",
    ]
    server = _launch(name, command, workdir, env)
    wait_healthy(server)
    return server


def queuelog_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "queuelog", *args], capture_output=True, text=True, env=_clean_env(), check=False
    )


def migrate(database_url: str) -> None:
    """Bring a database to queuelog's schema (the baselines use queuelog's own tables)."""
    done = queuelog_cli("migrate", "--database-url", database_url)
    if done.returncode != 0:
        raise RuntimeError(f"queuelog migrate failed: {done.stderr.strip()}")


def make_keys(database_url: str, specs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Create keys with `queuelog keys create --name N --role R`; returns {name: key}.

    The commands run at once (each is a Python start-up); the key is the last stdout line.
    """
    running = {
        name: subprocess.Popen(
            [PYTHON, "-m", "queuelog", "keys", "create", "--name", name, "--role", role]
            + ["--database-url", database_url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_clean_env(),
        )
        for name, role in specs
    }
    created: dict[str, str] = {}
    for name, process in running.items():
        out, err = process.communicate(timeout=120)
        lines = out.strip().splitlines()
        if process.returncode != 0 or not lines or not KEY_PATTERN.fullmatch(lines[-1].strip()):
            raise RuntimeError(f"queuelog keys create --name {name} failed: {err.strip() or out.strip()}")
        created[name] = lines[-1].strip()
    return created


class Cleanup(contextlib.ExitStack):
    """Stops every server it was given and removes the temp directory, whatever happens."""

    def __init__(self, keep: bool = False) -> None:
        super().__init__()
        self._tmp = tempfile.mkdtemp(prefix="queuelog-bench-")
        self.workdir = Path(self._tmp)
        self._keep = keep
        if not keep:
            self.callback(_rmtree, self.workdir)

    def server(self, server: ServerProcess) -> ServerProcess:
        self.callback(server.stop)
        return server

    def __enter__(self) -> Cleanup:
        super().__enter__()
        # SIGTERM (e.g. from a timeout) unwinds like Ctrl-C, so the finally blocks run.
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self._keep:
            print(f"kept server logs and databases in {self.workdir}", file=sys.stderr)
        return bool(super().__exit__(*exc))


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# --- the HTTP client -------------------------------------------------------------------------


class HttpError(Exception):
    pass


class HttpConnection:
    """One keep-alive HTTP/1.1 connection; requests on it are sequential."""

    def __init__(self, url: str, headers: Mapping[str, str] | None = None) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or HOST
        self.port = parts.port or 80
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self._prefix = f"Host: {self.host}:{self.port}\r\n{extra}".encode("latin-1")
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is None or self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
            sock = self._writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self._reader, self._writer

    async def post(self, path: str, body: bytes, content_type: str = "application/json") -> tuple[int, bytes]:
        reader, writer = await self._connect()
        writer.write(
            b"POST "
            + path.encode()
            + b" HTTP/1.1\r\n"
            + self._prefix
            + f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        at = lower.find(b"\r\ncontent-length:")
        if at >= 0:
            end = lower.index(b"\r\n", at + 2)
            payload = await reader.readexactly(int(lower[at + 17 : end]))
        elif b"\r\ntransfer-encoding: chunked" in lower:
            payload = await self._read_chunked(reader)
        else:
            raise HttpError(f"response without a length: {head!r}")
        if b"\r\nconnection: close" in lower:
            await self.close()
        return status, payload

    @staticmethod
    async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
        chunks: list[bytes] = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            chunk = await reader.readexactly(size + 2)
            if size == 0:
                return b"".join(chunks)
            chunks.append(chunk[:-2])

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
        self._reader = self._writer = None


def graphql_body(query: str, variables: Mapping[str, Any] | None = None) -> bytes:
    return json.dumps({"query": query, "variables": dict(variables or {})}, separators=(",", ":")).encode()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def graphql_data(status: int, body: bytes) -> Any:
    """The `data` of a GraphQL response; raises on an HTTP error or GraphQL errors."""
    if status != 200:
        raise HttpError(f"HTTP {status}: {body[:300]!r}")
    document = json.loads(body)
    if document.get("errors"):
        raise HttpError(f"GraphQL errors: {json.dumps(document['errors'])[:300]}")
    return document["data"]


def event_loop_runner() -> asyncio.Runner:
    """An asyncio runner on uvloop when it is installed (it is, with uvicorn[standard])."""
    try:
        import uvloop
    except ImportError:
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


# --- measuring -------------------------------------------------------------------------------


@dataclass
class Measurement:
    """`ops` operations (requests, or jobs) in `seconds` of wall time, and per-call latencies."""

    label: str
    ops: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    server_cpu: float | None = None  # CPU seconds the server process used meanwhile
    client_cpu: float | None = None  # CPU seconds this process used meanwhile
    calls: int | None = None

    @property
    def throughput(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else float("nan")

    def percentile(self, p: float) -> float:
        return percentile(self.latencies, p)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "ops": self.ops,
            "seconds": round(self.seconds, 6),
            "ops_per_s": round(self.throughput, 2),
            "calls": self.calls if self.calls is not None else len(self.latencies),
            **{f"p{p}_ms": round(self.percentile(p) * 1000, 3) for p in PERCENTILES},
            "server_cpu_s": self.server_cpu,
            "client_cpu_s": self.client_cpu,
        }


def percentile(samples: Sequence[float], p: float) -> float:
    """Linear-interpolated percentile (numpy's default); nan for no samples."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def merge(label: str, parts: Sequence[Measurement]) -> Measurement:
    """Several rounds of one target as one: summed ops and time, pooled latencies."""

    def total(values: Sequence[float | None]) -> float | None:
        return None if any(v is None for v in values) else sum(v for v in values if v is not None)

    return Measurement(
        label=label,
        ops=sum(m.ops for m in parts),
        seconds=sum(m.seconds for m in parts),
        latencies=[x for m in parts for x in m.latencies],
        server_cpu=total([m.server_cpu for m in parts]),
        client_cpu=total([m.client_cpu for m in parts]),
        calls=sum(m.calls if m.calls is not None else len(m.latencies) for m in parts),
    )


async def measured(
    label: str, work: Callable[[], Awaitable[tuple[int, list[float]]]], server: ServerProcess
) -> Measurement:
    """Run `work` against `server` and time it, with the server's and this process's CPU.

    `work` returns the number of operations done and the latency of each call.
    """
    cpu_before = server.cpu_seconds()
    client_before = time.process_time()
    started = time.perf_counter()
    ops, latencies = await work()
    seconds = time.perf_counter() - started
    client_cpu = time.process_time() - client_before
    cpu_after = server.cpu_seconds()
    server_cpu = cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None
    return Measurement(label, ops, seconds, latencies, server_cpu, client_cpu)


def measured_in_process(label: str, work: Callable[[], tuple[int, list[float]]]) -> Measurement:
    """Time an in-process baseline; its CPU time is reported as the "server" CPU."""
    cpu_before = time.process_time()
    started = time.perf_counter()
    ops, latencies = work()
    seconds = time.perf_counter() - started
    return Measurement(label, ops, seconds, latencies, server_cpu=time.process_time() - cpu_before)


async def timed(call: Awaitable[T], latencies: list[float]) -> T:
    started = time.perf_counter()
    try:
        return await call
    finally:
        latencies.append(time.perf_counter() - started)


# --- reporting -------------------------------------------------------------------------------


@dataclass
class Comparison:
    """One operation measured on the subject (queuelog) and on its baseline in the same run."""

    title: str
    subject: Measurement
    baseline: Measurement
    unit: str = "ops/s"
    note: str = ""

    @property
    def throughput_ratio(self) -> float:
        """Baseline throughput / queuelog throughput: how many times slower queuelog is."""
        return self.baseline.throughput / self.subject.throughput

    def latency_ratio(self, p: float) -> float:
        return self.subject.percentile(p) / self.baseline.percentile(p)

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "unit": self.unit,
            "subject": self.subject.to_dict(),
            "baseline": self.baseline.to_dict(),
            "throughput_ratio_baseline_over_subject": round(self.throughput_ratio, 3),
            **{f"p{p}_ratio_subject_over_baseline": round(self.latency_ratio(p), 3) for p in PERCENTILES},
        }


def _fmt(value: float | None, digits: int = 2, suffix: str = "") -> str:
    if value is None or value != value:  # None or nan
        return "-"
    return f"{value:,.{digits}f}{suffix}"


def _cpu_per_op_ms(m: Measurement) -> float | None:
    return m.server_cpu * 1000 / m.ops if m.server_cpu is not None and m.ops else None


def _client_share(m: Measurement) -> float | None:
    return 100 * m.client_cpu / m.seconds if m.client_cpu is not None and m.seconds > 0 else None


def format_report(heading: str, comparisons: Sequence[Comparison]) -> str:
    """A plain-text table: per comparison a baseline row, a queuelog row and a ratio row.

    Ratios are "how many times worse queuelog is": baseline ops/s over queuelog ops/s, and
    queuelog latency over baseline latency (1.00x = parity, 2.00x = half as fast).
    """
    header = (
        f"{'':<28} {'throughput':>16} {'calls':>7} "
        + " ".join(f"{f'p{p} ms':>9}" for p in PERCENTILES)
        + f" {'srv CPU/op':>11} {'client CPU':>10}"
    )
    lines = [heading, "=" * len(header), header, "-" * len(header)]
    for c in comparisons:
        lines.append(c.title + (f"  ({c.note})" if c.note else ""))
        for m in (c.baseline, c.subject):
            calls = m.calls if m.calls is not None else len(m.latencies)
            lines.append(
                f"  {m.label:<26} {_fmt(m.throughput, 1):>10} {c.unit:<5} {calls:>7} "
                + " ".join(f"{_fmt(m.percentile(p) * 1000, 2):>9}" for p in PERCENTILES)
                + f" {_fmt(_cpu_per_op_ms(m), 3, ' ms'):>11} {_fmt(_client_share(m), 0, '%'):>10}"
            )
        lines.append(
            f"  {'ratio (queuelog cost)':<26} {_fmt(c.throughput_ratio, 2, 'x'):>16} {'':>7} "
            + " ".join(f"{_fmt(c.latency_ratio(p), 2, 'x'):>9}" for p in PERCENTILES)
            + f" {_fmt(_ratio(_cpu_per_op_ms(c.subject), _cpu_per_op_ms(c.baseline)), 2, 'x'):>11}"
        )
        lines.append("")
    lines.append(
        "ratio = baseline throughput / queuelog throughput, and queuelog / baseline for latency and\n"
        "server CPU per op: 1.00x is parity, higher is worse. srv CPU/op: CPU time of the server\n"
        "process (all threads) per op; client CPU: this load generator's CPU share of wall time."
    )
    return "\n".join(lines)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def print_report(heading: str, comparisons: Sequence[Comparison], json_path: str | None = None) -> None:
    print(format_report(heading, comparisons), flush=True)
    if json_path:
        Path(json_path).write_text(json.dumps([c.to_dict() for c in comparisons], indent=2) + "\n")
        print(f"wrote {json_path}")


def machine_line() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start"
    )


def common_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    parser.add_argument(
        "--keep", action="store_true", help="keep the temp directory (server logs, databases) afterwards"
    )


def stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    started = time.perf_counter()
    stderr(f"... {name}")
    yield
    stderr(f"    {name}: {time.perf_counter() - started:.1f} s")


@contextlib.contextmanager
def py_spy(pid: int | None, output: str | None, rate: int = 200) -> Iterator[None]:
    """Sample process `pid` with py-spy (all threads, native off) while the block runs.

    Writes a flamegraph SVG, or collapsed stacks ("raw" text, greppable) when `output` ends
    in .txt. py-spy is optional: `pip install py-spy` into the venv. No-op when output is None.
    """
    if output is None or pid is None:
        yield
        return
    exe = shutil.which("py-spy") or str(Path(PYTHON).with_name("py-spy"))
    if not Path(exe).exists():
        raise SystemExit("py-spy is not installed: .venv/bin/pip install py-spy")
    fmt = "raw" if output.endswith(".txt") else "flamegraph"
    command = [exe, "record", "--pid", str(pid), "--rate", str(rate), "--format", fmt, "--output", output]
    sampler = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)  # let it attach before the load starts
    try:
        yield
    finally:
        sampler.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            _, err = sampler.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            sampler.kill()
            _, err = sampler.communicate()
        if sampler.returncode not in (0, -signal.SIGINT) or not Path(output).exists():
            stderr(f"py-spy failed ({sampler.returncode}): {err.decode(errors='replace')[-500:]}")
        else:
            stderr(f"py-spy profile of pid {pid} written to {output}")
