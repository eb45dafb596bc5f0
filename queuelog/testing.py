"""Run your job handlers against a real queue inside your own tests (docs/testing.md).

    from queuelog.testing import LocalQueue

    with LocalQueue({"email": send_email}) as q:     # or LocalQueue("myapp.tasks:HANDLERS")
        job = q.enqueue("email", {"to": "a@example.com"}, max_retries=2)
        q.run_until_idle()                            # the worker runs until nothing is left to do
        assert q.get(job.id).status == "COMPLETED"

Nothing is imitated: a LocalQueue is production's code in this process. The ASGI app
(queuelog.app) serves a SQLite file of its own, in a temporary directory, through uvicorn on a
free 127.0.0.1 port in a background thread; the keys are made by the key storage that
`queuelog keys create` uses; `run_until_idle` runs `queuelog.worker.Worker`, which claims,
heartbeats and reports over HTTP as `queuelog worker` does. So results, retries, `Retry`,
`Discard`, maxRetries, priorities, dependencies and the handler's `job` are the server's and
the worker's own behaviour, not a copy of it that could drift.

Two things are arranged for tests:

- Jobs run only inside `run_until_idle()`, so a test sees each job PENDING until it asks for
  the work to be done (as with Celery's eager mode, but through the real queue).
- The queue's clock (`queuelog.clock.utcnow`, where all of the server's times come from on
  SQLite) is real time plus an offset that only grows. When nothing is running and nothing is
  due, `run_until_idle` moves it to the next job's `runAt`: a retry's back-off, a
  `Retry(after=...)`, a delayed job. Back-off keeps production's values (the default
  QUEUELOG_RETRY_BASE_SECONDS of 10, doubled at each retry, with jitter), and every attempt
  counts against maxRetries as in production, yet waiting for them takes no time. Setting
  the retry base to 0 instead would run retries at once too, but would hide the delays (and
  not help with `Retry(after=...)` or `runAt` at all). `run_until_idle(move_clock=False)`
  runs only what is due now; `advance(seconds)` moves the clock by hand; `now()` reads it.
  The offset is shared by the LocalQueues open in one process and dropped when the last one
  closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import inspect
import os
import shutil
import socket
import sqlite3
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import uvicorn

from queuelog import clock, keys
from queuelog.app import QueuelogApp, create_app
from queuelog.cli import CommandError, load_handlers
from queuelog.client import Client, Job
from queuelog.model import JobStatus, Role
from queuelog.settings import Settings
from queuelog.storage.engine import create_sync_engine
from queuelog.storage.migrate import upgrade_to_head
from queuelog.storage.schema.types import from_micros
from queuelog.worker import Handler, JobContext, Worker

ADMIN_KEY_NAME = "test-admin"  # what `q.client` uses: sees every job and its `error`
WORKER_KEY_NAME = "test-worker"  # the worker's key: every job it ran has this workerId
START_TIMEOUT = 30.0  # a hung start, not a slow one: the server starts in well under a second
POLL_SECONDS = 0.002  # how often run_until_idle reads the jobs table (one indexed statement)
STOP_GRACE_SECONDS = 1.0  # only a run that timed out has handlers left when the worker stops
SERVER_STOP_SECONDS = 5  # connections still open when the LocalQueue closes (a client of the test's own)
P = ParamSpec("P")
R = TypeVar("R")


# --- the migrated database, made once per process ----------------------------------------


@dataclass(frozen=True)
class _Template:
    image: bytes  # a migrated database with the two keys, as sqlite3's serialize() gives it
    admin_key: str
    worker_key: str


_template: _Template | None = None
_template_lock = threading.Lock()


def _migrated_template() -> _Template:
    """A database migrated by Alembic (as `queuelog migrate` does) with an ADMIN and a WORKER
    key, made once per process and kept in memory: each LocalQueue starts from a copy, which
    takes a few milliseconds where migrating takes a few hundred."""
    global _template
    with _template_lock:
        if _template is None:
            with tempfile.TemporaryDirectory(prefix="queuelog-template-") as folder:
                path = os.path.join(folder, "queuelog.db")
                _create_private(path)
                engine = create_sync_engine(f"sqlite:///{path}")
                try:
                    upgrade_to_head(engine)
                    _, admin_key = keys.create_key(engine, ADMIN_KEY_NAME, [Role.ADMIN])
                    _, worker_key = keys.create_key(engine, WORKER_KEY_NAME, [Role.WORKER])
                finally:
                    engine.dispose()
                source = sqlite3.connect(path)
                memory = sqlite3.connect(":memory:")
                try:
                    source.backup(memory)  # the WAL's pages too
                    image = memory.serialize()
                finally:
                    source.close()
                    memory.close()
            _template = _Template(image, admin_key, worker_key)
        return _template


def _create_private(path: str, content: bytes = b"") -> None:
    """Create `path` readable by its owner only, as the server wants its database (0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(content)


# --- the clock ---------------------------------------------------------------------------


class _QueueClock:
    """`queuelog.clock.utcnow` while a LocalQueue is open: real time plus an offset that only
    grows (so the queue's time never goes back). Restored when the last LocalQueue closes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offset = timedelta(0)
        self._users = 0
        self._real: Callable[[], datetime] = clock.utcnow

    def now(self) -> datetime:
        return self._real() + self._offset

    def acquire(self) -> None:
        with self._lock:
            if self._users == 0:
                self._real = clock.utcnow
                clock.utcnow = self.now
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0:
                clock.utcnow = self._real
                self._offset = timedelta(0)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("the queue's clock only moves forward")
        with self._lock:
            self._offset += timedelta(seconds=seconds)

    def move_to(self, moment: datetime) -> None:
        """Make it at least `moment` now (and from now on)."""
        with self._lock:
            self._offset = max(self._offset, moment - self._real())


_clock = _QueueClock()


# --- sync handlers -------------------------------------------------------------------------


def _in_own_thread(handler: Handler) -> Handler:
    """A sync handler as the worker runs it (in a thread of its own, with the caller's context
    variables, no event loop), but in a thread that ends when the handler returns.

    The worker keeps its handler threads for its next jobs; each `run_until_idle` has a worker
    of its own, and a test suite must not collect idle threads by the hundred. A handler that
    never returns leaves a daemon thread, as in the worker. One difference: past its job's
    timeout such a handler's slot is freed at once (the worker sees an async handler, and
    cancels it), where the worker keeps a sync handler's slot until it returns.
    """

    async def run(job: JobContext) -> Any:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        context = contextvars.copy_context()

        def settle(result: Any, error: BaseException | None) -> None:
            if done.done():  # cancelled: the worker stopped waiting for it
                return
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(result)

        def target() -> None:
            error: BaseException | None = None
            try:
                result = context.run(handler, job)
            except (KeyboardInterrupt, SystemExit) as exc:
                # Raised in the task awaiting it, these would stop the worker's event loop; the
                # worker fails the job instead (its text then starts "RuntimeError: ").
                result, error = None, RuntimeError(f"{type(exc).__name__}: {exc}")
            except BaseException as exc:
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop is gone: the worker has stopped
                loop.call_soon_threadsafe(settle, result, error)

        threading.Thread(target=target, name=f"queuelog-job-{job.id}", daemon=True).start()
        result = await done
        if inspect.isawaitable(result):  # as the worker does: awaited on its loop
            return await result
        return result

    return run


def _load_handlers(handlers: Mapping[str, Handler] | str) -> dict[str, Handler]:
    if isinstance(handlers, str):
        try:
            return dict(load_handlers(handlers))  # as `queuelog worker --handlers` loads them
        except CommandError as exc:
            raise ValueError(str(exc)) from None
    if not handlers:
        raise ValueError("a LocalQueue needs at least one handler")
    given: Mapping[str, object] = handlers  # what the caller passed, whatever its type says
    bad = [str(name) for name, handler in given.items() if not callable(handler)]
    if bad:
        raise ValueError(f"handlers for {', '.join(bad)} are not callable")
    return dict(handlers)


# --- the queue -----------------------------------------------------------------------------


def _on_client(
    method: Callable[Concatenate[Client, P], R], doc: str
) -> Callable[Concatenate[LocalQueue, P], R]:
    """A LocalQueue method that is Client's `method`, called on the LocalQueue's client."""

    def call(queue: LocalQueue, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(queue.client, *args, **kwargs)

    call.__name__ = method.__name__
    call.__qualname__ = f"LocalQueue.{method.__name__}"
    call.__doc__ = inspect.cleandoc(doc)
    vars(call)["__signature__"] = inspect.signature(method)
    return call


@dataclass
class _Held:
    """What a LocalQueue holds, all released by `release`: called by close(), or when a
    LocalQueue that was never closed is garbage-collected or the interpreter exits."""

    folder: str
    clock: bool = False
    server: uvicorn.Server | None = None
    server_thread: threading.Thread | None = None
    client: Client | None = None
    reader: sqlite3.Connection | None = None

    def release(self) -> None:
        try:
            if self.client is not None:
                self.client.close()
            if self.server is not None:
                self.server.should_exit = True
            if self.server_thread is not None:
                self.server_thread.join()
            if self.reader is not None:
                self.reader.close()
        finally:
            if self.clock:
                _clock.release()
            shutil.rmtree(self.folder, ignore_errors=True)


class LocalQueue:
    """A private queuelog (server, database, keys) and its worker, in this process.

    `handlers`: `{job_type: handler}`, or "module:attr" as `queuelog worker --handlers`
    takes it. Their types are allowed (QUEUELOG_JOB_TYPES) and claimed; `job_types` allows
    more types, which can be enqueued but are never claimed. `concurrency` is the worker's.
    `settings` overrides the server's settings (`queuelog.settings.Settings` field names,
    e.g. `{"max_payload_bytes": 1024}`); the defaults are production's, except that the
    database is the LocalQueue's own and no other process reads it (QUEUELOG_EVENT_FEED=local).

    The constructor starts it; `close()` (or leaving the `with` block) stops the server and
    deletes its files.
    """

    def __init__(
        self,
        handlers: Mapping[str, Handler] | str,
        *,
        job_types: Iterable[str] = (),
        concurrency: int = 4,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.handlers = _load_handlers(handlers)
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.concurrency = concurrency
        overrides = dict(settings or {})
        for owned in ("database_url", "job_types"):
            if owned in overrides:
                raise ValueError(f"a LocalQueue sets {owned} itself (job types: the job_types argument)")
        self.url = ""  # http://127.0.0.1:PORT once started
        folder = tempfile.mkdtemp(prefix="queuelog-test-")
        self._database = os.path.join(folder, "queuelog.db")
        self._held = _Held(folder)
        self._closing = weakref.finalize(self, self._held.release)
        self._app: QueuelogApp | None = None
        self._server_loop: asyncio.AbstractEventLoop | None = None
        self._running = threading.Lock()
        try:
            self.settings = Settings(
                database_url=f"sqlite:///{self._database}",
                job_types=tuple(dict.fromkeys([*self.handlers, *job_types])),
                event_feed="local",
            ).replace(**overrides)
            template = _migrated_template()
            _create_private(self._database, template.image)
            self._worker_key = template.worker_key
            _clock.acquire()
            self._held.clock = True
            self._start_server()
            self._held.client = Client(self.url, template.admin_key)
        except BaseException:
            self.close()
            raise

    # --- lifecycle ---------------------------------------------------------------------------

    def _start_server(self) -> None:
        app = self._app = create_app(self.settings)
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        config = uvicorn.Config(
            app,
            lifespan="on",
            log_config=None,  # the application's logging is left as it is
            access_log=False,
            proxy_headers=False,
            ws_max_size=self.settings.max_body_bytes,  # as `queuelog serve` runs it
            timeout_graceful_shutdown=SERVER_STOP_SECONDS,
        )
        server = self._held.server = uvicorn.Server(config)
        loop = self._server_loop = _new_event_loop()

        def serve() -> None:
            try:
                _run_to_end(loop, server.serve(sockets=[listener]))
            finally:
                listener.close()

        # A daemon: a LocalQueue never closed must not keep the interpreter from exiting (its
        # finalizer stops the server at exit; non-daemon threads are waited for before that).
        thread = threading.Thread(target=serve, name="queuelog-local-server", daemon=True)
        self._held.server_thread = thread
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the LocalQueue's server did not start (the log above says why)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the LocalQueue's server did not start within {START_TIMEOUT:.0f}s")
            time.sleep(POLL_SECONDS)
        # The app freezes the garbage collector's view of the heap as it starts (a long-lived
        # server's tail latency); in a test process that would keep every earlier test's
        # cyclic garbage for good.
        gc.unfreeze()

    def close(self) -> None:
        """Stop the server, then delete the database and its folder. Safe to call twice."""
        self._closing()

    @property
    def closed(self) -> bool:
        return not self._closing.alive

    def __enter__(self) -> LocalQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- producing and reading -------------------------------------------------------------

    @property
    def client(self) -> Client:
        """A `queuelog.client.Client` with the LocalQueue's ADMIN key: every method of the SDK,
        including `error`, which only ADMIN keys may read."""
        if self._held.client is None or self.closed:
            raise RuntimeError("this LocalQueue is closed")
        return self._held.client

    enqueue = _on_client(
        Client.enqueue,
        """`Client.enqueue` with the ADMIN key (so any priority). `run_at` is on the queue's
        clock: write `q.now() + timedelta(...)`.""",
    )

    def get(self, id: str) -> Job:
        """The job as the server has it, `error` included. Unlike `Client.get`, a job that does
        not exist raises LookupError rather than returning None (a test wants the job)."""
        job = self.client.get(id)
        if job is None:
            raise LookupError(f"no job {id}")
        return job

    def create_key(self, name: str, *roles: str, max_priority: str | None = None) -> str:
        """A new key, as `queuelog keys create --name NAME --role ROLE ...` makes it; for code
        under test that enqueues with a PRODUCER key, say: `Client(q.url, q.create_key(...))`."""
        engine = create_sync_engine(self.settings.database_url)
        try:
            _, plaintext = keys.create_key(
                engine,
                name,
                [keys.parse_role(role) for role in roles],
                keys.parse_priority(max_priority) if max_priority else None,
            )
        finally:
            engine.dispose()
        return plaintext

    # --- time ------------------------------------------------------------------------------

    def now(self) -> datetime:
        """The queue's clock: what `runAt`, leases and back-off are measured by."""
        return _clock.now()

    def advance(self, seconds: float) -> None:
        """Move the queue's clock forward; jobs due by then run at the next `run_until_idle`."""
        _clock.advance(seconds)
        self._wake_claims()

    def _wake_claims(self) -> None:
        """A claim long-polling on the server sleeps until the next runAt as the clock stood:
        have it look again now (it would at its next recheck, within half a second)."""
        loop, app = self._server_loop, self._app
        if loop is not None and app is not None:
            with contextlib.suppress(RuntimeError):  # the server has stopped
                loop.call_soon_threadsafe(app.state.services.signal.notify)

    # --- running ---------------------------------------------------------------------------

    def run_until_idle(self, *, move_clock: bool = True, timeout: float = 60.0) -> int:
        """Run the worker until no job of the handled types is RUNNING or due; returns how many
        attempts it ran (handler calls, whatever their outcome).

        `move_clock`: when nothing else is left, move the queue's clock to the next runAt (a
        retry's back-off, `Retry(after=...)`, a delayed job) and go on, until no job waits for
        its time either. False: run what is due now, and stop. Jobs waiting for dependencies
        that will not complete, and jobs of paused types, are not waited for.

        `timeout`: seconds of real time before giving up with TimeoutError (a handler that
        never returns, jobs that keep enqueuing more).
        """
        with self._running:
            paused = {control.type for control in self.client.type_controls() if control.paused}
            claimable = [name for name in self.handlers if name not in paused]
            handlers = {name: h if _is_async(h) else _in_own_thread(h) for name, h in self.handlers.items()}
            worker = Worker(
                self.url, self._worker_key, handlers, concurrency=self.concurrency, grace=STOP_GRACE_SECONDS
            )
            loop = _new_event_loop()
            failed: list[BaseException] = []

            def work() -> None:
                try:
                    _run_to_end(loop, worker.run())
                except BaseException as exc:
                    failed.append(exc)

            thread = threading.Thread(target=work, name="queuelog-local-worker")
            thread.start()
            try:
                self._wait_until_idle(claimable, move_clock, time.monotonic() + timeout, thread)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop is closed: the worker has ended
                    loop.call_soon_threadsafe(worker.stop)
                thread.join()
            if failed:
                raise RuntimeError(f"the worker stopped: {failed[0]!r}") from failed[0]
            return worker.processed

    def _wait_until_idle(
        self, claimable: list[str], move_clock: bool, deadline: float, thread: threading.Thread
    ) -> None:
        while thread.is_alive():  # else: it failed, and run_until_idle says why
            running, settling, next_due = self._snapshot(claimable)
            if not running and not settling and (next_due is None or next_due > _clock.now()):
                if next_due is None or not move_clock:
                    return
                _clock.move_to(next_due)
                self._wake_claims()
                continue
            if time.monotonic() > deadline:
                due = f", one due since {next_due.isoformat()}" if next_due is not None else ""
                raise TimeoutError(f"the LocalQueue was not idle in time: {running} job(s) RUNNING{due}")
            time.sleep(POLL_SECONDS)

    def _snapshot(self, claimable: list[str]) -> tuple[int, int, datetime | None]:
        """How many jobs of the handled types are RUNNING, how many finished jobs' dependents
        are still being released or cancelled in chunks (storage/operations/settlements.py), and the
        earliest runAt of the PENDING jobs of the claimable ones that wait for no dependency:
        in one statement, so of one state of the database (two reads could miss a job going
        from one to the other)."""
        if self._held.reader is None:
            uri = Path(self._database).as_uri() + "?mode=ro"
            self._held.reader = sqlite3.connect(uri, uri=True, check_same_thread=False)
        handled = list(self.handlers)
        row = self._held.reader.execute(
            "SELECT (SELECT count(*) FROM jobs WHERE status = ? AND type IN ({})),"
            " (SELECT count(*) FROM dependency_settlements),"
            " (SELECT min(run_at) FROM jobs WHERE status = ? AND waiting_for = 0 AND type IN ({}))".format(
                ",".join("?" * len(handled)), ",".join("?" * len(claimable)) or "NULL"
            ),
            [JobStatus.RUNNING.value, *handled, JobStatus.PENDING.value, *claimable],
        ).fetchone()
        running, settling, due = row
        return running, settling, (None if due is None else from_micros(due))


def _is_async(handler: Handler) -> bool:
    return inspect.iscoroutinefunction(handler)  # as the worker tells them apart


def _new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop where it is installed, as `queuelog serve` and `queuelog worker` use."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _run_to_end(loop: asyncio.AbstractEventLoop, main: Coroutine[Any, Any, Any]) -> None:
    """Run `main` on `loop` in this thread, then close the loop as asyncio.run does: what is
    left cancelled, and the default executor's threads joined (so none outlive the queue)."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(main)
    finally:
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
