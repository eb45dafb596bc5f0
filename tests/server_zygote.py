"""Test servers and CLI runs forked from a process that imported queuelog's server once.

Every `queuelog serve` a test started spent about 0.6 s of CPU importing SQLAlchemy,
Strawberry, uvicorn, alembic and queuelog before it answered, and every CLI call up to half
that; with some 460 servers and hundreds of CLI calls in a run, those imports were a third of
the suite's CPU. The zygote, one per test process, imports them once; each server or CLI run
is a fork of it that runs `python -m queuelog` (the module itself, as `-m` runs it) with the
test's arguments, environment, working directory and output files, in a session of its own.
From the CLI's main() on, it runs the same code as a process started on its own; only the
imports are shared. A process whose interpreter settings differ (PYTHON* variables) is not
forked: conftest starts it on its own, as it does `serve --workers 2`.

The zygote is the processes' parent, so it reaps them: `ForkedProcess` answers poll() and
wait() by asking it, and signals the process itself (a pid is not reused before its test has
seen its exit, since only that question reaps it).

Run as a script, this file is the zygote: it reads one JSON request per line on stdin and
answers one JSON line on stdout.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# What a server imports on its way to serving; anything missing here is imported by the
# server itself, as it would be without the zygote.
PRELOADED = (
    "queuelog.cli",
    "queuelog.cli.serve",
    "queuelog.keys",
    "queuelog.app",
    "queuelog.storage.migrate",
    "alembic.command",
    "alembic.runtime.migration",
    "uvicorn.main",
    "uvicorn.config",
    "uvicorn.loops.uvloop",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.websockets.auto",
    "uvicorn.lifespan.on",
    "psycopg",
)


class ForkedProcess:
    """The parts of subprocess.Popen a test uses, for a process the zygote forked."""

    def __init__(self, zygote: Zygote, pid: int, args: list[str]) -> None:
        self._zygote = zygote
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exit_status(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.01)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # until the zygote reaps it, the pid is this server's
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The test process's side: starts the zygote on first use and asks it to fork processes.
    The zygote ends when the test process does (its requests' pipe closes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None

    def can_fork(self, env: dict[str, str]) -> bool:
        """Whether a server with this environment behaves as it would when started on its own:
        the interpreter's own settings (PYTHONPATH, PYTHONHASHSEED, ...) are read at its start,
        so they must be the zygote's."""
        return _python_settings(env) == _python_settings(_zygote_env())

    def spawn(
        self,
        args: list[str],
        *,
        env: dict[str, str],
        cwd: Path,
        log_path: Path,
        stderr_path: Path | None = None,
    ) -> ForkedProcess:
        """Fork a process running `python -m queuelog *args`, its output into `log_path` (its
        standard error into `stderr_path` when given)."""
        request = {"op": "spawn", "args": args, "env": env, "cwd": str(cwd), "stdout": str(log_path)}
        request["stderr"] = str(stderr_path or log_path)
        return ForkedProcess(self, self._ask(request), [sys.executable, "-m", "queuelog", *args])

    def run(
        self, args: list[str], *, env: dict[str, str], cwd: Path, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """`subprocess.run([python, -m, queuelog, *args], capture_output=True, text=True)`, forked."""
        with tempfile.TemporaryDirectory(prefix="queuelog-cli-") as scratch:
            out, err = Path(scratch, "stdout"), Path(scratch, "stderr")
            process = self.spawn(args, env=env, cwd=cwd, log_path=out, stderr_path=err)
            try:
                code = process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise
            return subprocess.CompletedProcess(process.args, code, out.read_text(), err.read_text())

    def exit_status(self, pid: int) -> int | None:
        """The process's returncode as Popen gives it (-N: ended by signal N), None while it runs."""
        result: int | None = self._ask({"op": "poll", "pid": pid})
        return result

    def _ask(self, request: dict[str, Any]) -> Any:
        with self._lock:
            process = self._started()
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(json.dumps(request).encode() + b"\n")
            process.stdin.flush()
            line = process.stdout.readline()
            if not line:
                raise RuntimeError(f"the server zygote ended (exit status {process.wait()})")
            answer = json.loads(line)
            if "error" in answer:
                raise RuntimeError(f"the server zygote could not {request['op']}: {answer['error']}")
            return answer["result"]

    def _started(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_zygote_env()
            )
        return self._process


def _zygote_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}


def _python_settings(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


# --- the zygote itself ------------------------------------------------------------------------


def _serve_requests() -> None:
    import importlib

    for name in PRELOADED:
        with contextlib.suppress(ImportError):  # not installed: the server says so, as without us
            importlib.import_module(name)
    replies = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)  # nothing a module prints may land in the replies
    exits: dict[int, int] = {}
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request["op"] == "spawn":
                result: int | None = _fork(request, keep_closed=(replies.fileno(), null))
            else:
                result = _exit_status(request["pid"], exits)
            reply: dict[str, Any] = {"result": result}
        except Exception as error:  # answered, so the test says what went wrong
            reply = {"error": f"{type(error).__name__}: {error}"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


def _exit_status(pid: int, exits: dict[int, int]) -> int | None:
    if pid not in exits:
        reaped, status = os.waitpid(pid, os.WNOHANG)
        if reaped == 0:
            return None
        exits[pid] = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    return exits[pid]


def _fork(request: dict[str, Any], keep_closed: tuple[int, int]) -> int:
    # Opened before the fork, as Popen's caller opens them: the files exist once spawn answers.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    out = os.open(request["stdout"], flags, 0o644)
    err = out if request["stderr"] == request["stdout"] else os.open(request["stderr"], flags, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        for fd in {out, err}:
            os.close(fd)
        return pid
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # not the zygote's requests
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in {out, err, *keep_closed}:  # the replies' pipe must end with the zygote
            os.close(fd)
        os.chdir(request["cwd"])
        sys.path[0] = os.getcwd()  # as `python -m` has it
        os.environ.clear()
        os.environ.update(request["env"])
        code = _run_cli(request["args"])
    finally:
        os._exit(code)


def _run_cli(args: list[str]) -> int:
    """`python -m queuelog *args` in this process: its exit status, after what an interpreter
    does at exit (atexit, logging's flush, the standard streams' buffers)."""
    import atexit
    import logging
    import runpy
    import traceback

    sys.argv = ["queuelog", *args]
    try:
        runpy.run_module("queuelog", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C of the test run is the tests' to handle
    sys.path[0] = os.getcwd()  # not tests/: what a server imports comes from where it would
    _serve_requests()
