"""Shared helpers of `python -m bench`.

- starting real server processes (`queuelog serve`, any app under uvicorn, `queuelog
  worker`) on temp SQLite files and free loopback ports, and stopping them again;
- creating API keys with the `queuelog keys create` command;
- a small keep-alive HTTP/1.1 client on raw asyncio streams (the load generator when wrk
  is missing, and the driver of every sequential measurement);
- percentiles, and CPU and memory of processes read from /proc;
- py-spy around a measured part.

Only loopback addresses are used; every loop in the suite is bounded in count and time.
"""

from __future__ import annotations

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

BENCH_DIR = Path(__file__).resolve().parent
PROJECT_DIR = BENCH_DIR.parent
PYTHON = sys.executable
HOST = "127.0.0.1"
STARTUP_TIMEOUT = 60.0
KEY_PATTERN = re.compile(r"ql_[A-Za-z0-9_-]{20,}")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


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


def process_memory(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) of a process in bytes: its resident memory now and at its peak."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    values = {}
    for line in status.splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(rest.split()[0]) * 1024
    if len(values) != 2:
        return None
    return values["VmRSS"], values["VmHWM"]


def child_pids(pid: int) -> list[int]:
    """Direct children of `pid`: /proc/PID/task/*/children, else a scan of every PPid."""
    children_files = list(Path(f"/proc/{pid}/task").glob("*/children"))
    if children_files:
        found: list[int] = []
        for path in children_files:
            with contextlib.suppress(OSError):
                found.extend(int(x) for x in path.read_text().split())
        return found
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def tree_cpu_seconds(pid: int) -> float | None:
    """User + system CPU of `pid` and its live descendants, all threads; None if `pid` is gone."""
    own = process_cpu_seconds(pid)
    if own is None:
        return None
    total, todo = own, child_pids(pid)
    while todo:
        child = todo.pop()
        total += process_cpu_seconds(child) or 0.0
        todo.extend(child_pids(child))
    return total


def cpu_delta(before: dict[int, float] | None, after: dict[int, float] | None) -> float | None:
    """CPU that processes used between two {pid: CPU seconds} snapshots; a process that
    appeared meanwhile counts whole, one that exited meanwhile is lost (None: no snapshot)."""
    if before is None or after is None:
        return None
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def percentile(samples: Sequence[float], p: float) -> float:
    """Linear-interpolated percentile (numpy's default); nan for no samples."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
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
    whole_tree: bool = False  # count the CPU of its child processes too (`serve --workers N`)
    database_url: str = ""
    # PostgreSQL: {backend pid: CPU seconds} of the backends of its database (bench/_pg.py)
    database_cpu: Callable[[], dict[int, float] | None] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu_seconds(self) -> float | None:
        if self.whole_tree:
            return tree_cpu_seconds(self.process.pid)
        return process_cpu_seconds(self.process.pid)

    def memory(self) -> tuple[int, int] | None:
        return process_memory(self.process.pid)

    def db_cpu_snapshot(self) -> dict[int, float] | None:
        """CPU so far of each PostgreSQL backend of its database; None on SQLite (in-process)."""
        if self.database_cpu is None:
            return None
        try:
            return self.database_cpu()
        except Exception:  # a figure goes on without this line
            return None

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
            env=clean_env(env),
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
    wait: bool = True,
) -> ServerProcess:
    """`python -m queuelog serve` on a free port; waits for /healthz and reads the admin key.

    `wrapper` is prepended to the command (e.g. a profiler: `py-spy record -o x.svg --`).
    With wait=False it returns at once: call `queuelog_ready` before using the server.
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
    server.database_url = database_url
    if wait:
        queuelog_ready(server)
    return server


def queuelog_ready(server: ServerProcess) -> ServerProcess:
    """Wait for /healthz of a fresh `queuelog serve` and read the ADMIN key it printed."""
    wait_healthy(server)
    found = KEY_PATTERN.search(server.log())
    if found is None:
        server.stop()
        raise RuntimeError(f"{server.name} printed no bootstrap ADMIN key (not a fresh database?)")
    server.admin_key = found.group(0)
    return server


def start_uvicorn(
    workdir: Path,
    app: str,
    *,
    app_dir: Path = BENCH_DIR,
    env: Mapping[str, str] | None = None,
    name: str,
    wait: bool = True,
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
    if wait:
        wait_healthy(server)
    return server


def queuelog_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "queuelog", *args], capture_output=True, text=True, env=clean_env(), check=False
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
            env=clean_env(),
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
        return await self.request(
            b"POST "
            + path.encode()
            + b" HTTP/1.1\r\n"
            + self._prefix
            + f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

    async def get(self, path: str) -> tuple[int, bytes]:
        return await self.request(b"GET " + path.encode() + b" HTTP/1.1\r\n" + self._prefix + b"\r\n")

    async def request(self, raw: bytes) -> tuple[int, bytes]:
        """Send one raw HTTP/1.1 request; returns the status and the whole body."""
        reader, writer = await self._connect()
        writer.write(raw)
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


def machine_line() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start"
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


# --- queuelog workers ------------------------------------------------------------------------

NOOP_HANDLERS = '''"""No-op handlers for `python -m bench` (written into its temp directory)."""


async def noop(job):
    return None


HANDLERS = {"noop": noop}
'''


def start_worker(
    workdir: Path, url: str, key: str, concurrency: int, log_name: str = "worker"
) -> subprocess.Popen[bytes]:
    """`python -m queuelog worker --handlers bench_noop:HANDLERS --concurrency C` (async no-op)."""
    (workdir / "bench_noop.py").write_text(NOOP_HANDLERS)
    with (workdir / f"{log_name}.log").open("wb") as log_file:
        return subprocess.Popen(
            [PYTHON, "-m", "queuelog", "worker", "--url", url, "--key", key]
            + ["--handlers", "bench_noop:HANDLERS", "--concurrency", str(concurrency)],
            cwd=workdir,
            env=clean_env(),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_process(process: subprocess.Popen[Any], timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL after `timeout` seconds; a no-op for a process already gone."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
