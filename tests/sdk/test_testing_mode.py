"""queuelog.testing.LocalQueue: users' handlers run against the real server and worker, in process.

Each test opens its own LocalQueue (the app on a SQLite file of its own, served by uvicorn on
127.0.0.1, drained by queuelog.worker.Worker) and checks what production does: results, a
failure retried until maxRetries and then FAILED with its text, `Retry(after=)` counted
against maxRetries and postponed by its seconds on the queue's clock, `Discard` failing at
once, async handlers, types without a handler never claimed, dependencies run in order (and
cascading a failure), claim order by priority, the `job` object, keys made through the
project's key storage. Back-off is production's (QUEUELOG_RETRY_BASE_SECONDS 10): the queue's
clock moves over it, so the tests wait for none of it. Closing leaves no thread, no file and
no moved clock behind.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from queuelog import clock
from queuelog.client import Client
from queuelog.errors import BadInput, Forbidden
from queuelog.testing import WORKER_KEY_NAME, LocalQueue
from queuelog.worker import Discard, JobContext, Retry

BASE = 10.0  # production's QUEUELOG_RETRY_BASE_SECONDS: the n-th retry waits base * 2^(n-1) * U(0.75, 1)


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Where the LocalQueues of a test put their files (tempfile's directory), empty at the end."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder


def test_a_handler_gets_its_job_and_its_return_value_is_the_result() -> None:
    seen: list[JobContext] = []

    def send(job: JobContext) -> dict[str, Any]:
        seen.append(job)
        return {"sent_to": job.payload["to"], "attempt": job.attempt}

    with LocalQueue({"email": send}) as q:
        job = q.enqueue("email", {"to": "a@example.com"}, priority="HIGH", max_retries=2)
        assert q.get(job.id).status == "PENDING", "nothing runs before run_until_idle"
        assert q.run_until_idle() == 1
        done = q.get(job.id)
        assert (done.status, done.result) == ("COMPLETED", {"sent_to": "a@example.com", "attempt": 1})
        assert (done.attempt, done.retry_count, done.worker_id) == (1, 0, WORKER_KEY_NAME)
        (context,) = seen
        assert (context.id, context.type, context.payload) == (job.id, "email", {"to": "a@example.com"})
        assert (context.priority, context.attempt, context.retry_count) == ("HIGH", 1, 0)
        assert context.max_retries == 2
        assert q.run_until_idle() == 0, "a finished job does not run again"


def test_an_exception_is_retried_with_production_back_off_until_max_retries_then_failed() -> None:
    attempts: list[tuple[int, int, datetime]] = []
    queue_now: list[Callable[[], datetime]] = []  # the LocalQueue's clock, once it is open

    def send(job: JobContext) -> None:
        attempts.append((job.attempt, job.retry_count, queue_now[0]()))
        raise ValueError(f"smtp said no to {job.payload['to']}")

    def report(job: JobContext) -> dict[str, int]:
        if job.attempt < 3:
            raise ConnectionError("try later")
        return {"rows": 42}

    with LocalQueue({"email": send, "report": report}) as q:
        queue_now.append(q.now)
        failing = q.enqueue("email", {"to": "b@example.com"}, max_retries=2)
        recovering = q.enqueue("report", max_retries=2)
        assert q.run_until_idle() == 6
        failed = q.get(failing.id)
        assert failed.status == "FAILED"
        assert failed.error == "ValueError: smtp said no to b@example.com"
        assert (failed.attempt, failed.retry_count) == (3, 2)
        assert [(a, r) for a, r, _ in attempts] == [(1, 0), (2, 1), (3, 2)]
        # Each retry waited production's back-off on the queue's clock (at least 0.75 of it).
        times = [t for _, _, t in attempts]
        assert times[1] - times[0] >= timedelta(seconds=0.75 * BASE)
        assert times[2] - times[1] >= timedelta(seconds=0.75 * BASE * 2)
        completed = q.get(recovering.id)
        assert (completed.status, completed.result, completed.attempt) == ("COMPLETED", {"rows": 42}, 3)


def test_retry_after_postpones_by_its_seconds_and_counts_against_max_retries() -> None:
    def later(job: JobContext) -> str:
        if job.attempt == 1 or job.payload.get("always"):
            raise Retry(after=300, reason="rate limited")
        return "done"

    with LocalQueue({"sync": later}) as q:
        job = q.enqueue("sync", max_retries=3)
        assert q.run_until_idle(move_clock=False) == 1
        waiting = q.get(job.id)
        assert (waiting.status, waiting.retry_count, waiting.attempt) == ("PENDING", 1, 1)
        assert waiting.run_at - q.now() > timedelta(seconds=290)
        assert q.run_until_idle(move_clock=False) == 0, "not due yet"
        q.advance(300)
        assert q.run_until_idle(move_clock=False) == 1
        done = q.get(job.id)
        assert (done.status, done.result, done.attempt, done.retry_count) == ("COMPLETED", "done", 2, 1)

        stubborn = q.enqueue("sync", {"always": True}, max_retries=1)
        started = q.now()
        assert q.run_until_idle() == 2
        gave_up = q.get(stubborn.id)
        assert (gave_up.status, gave_up.error) == ("FAILED", "Retry: rate limited")
        assert (gave_up.attempt, gave_up.retry_count) == (2, 1)
        assert q.now() - started >= timedelta(seconds=300), "the clock moved over the 300 s"


def test_discard_fails_the_job_for_good_at_once() -> None:
    def check(job: JobContext) -> None:
        raise Discard(f"no user {job.payload['user']}")

    with LocalQueue({"welcome": check}) as q:
        job = q.enqueue("welcome", {"user": 7}, max_retries=5)
        assert q.run_until_idle() == 1
        failed = q.get(job.id)
        assert (failed.status, failed.error) == ("FAILED", "no user 7")
        assert (failed.attempt, failed.retry_count) == (1, 0), "not retried, whatever maxRetries says"


def test_async_handlers_run_on_the_workers_event_loop() -> None:
    async def resize(job: JobContext) -> dict[str, int]:
        await asyncio.sleep(0)
        if job.attempt == 1:
            raise TimeoutError("image server slow")
        running = asyncio.get_running_loop().is_running()
        return {"width": job.payload["width"] // 2, "loop_running": int(running)}

    with LocalQueue({"resize": resize}) as q:
        job = q.enqueue("resize", {"width": 640})
        assert q.run_until_idle() == 2
        done = q.get(job.id)
        assert (done.status, done.result, done.attempt) == ("COMPLETED", {"width": 320, "loop_running": 1}, 2)


def test_a_type_without_a_handler_is_never_claimed() -> None:
    with LocalQueue({"email": lambda job: "sent"}, job_types=["report"]) as q:
        report = q.enqueue("report")
        email = q.enqueue("email")
        assert q.run_until_idle() == 1
        assert q.get(email.id).status == "COMPLETED"
        left = q.get(report.id)
        assert (left.status, left.attempt, left.worker_id) == ("PENDING", 0, None)
        with pytest.raises(BadInput):  # not allowed at all: production's allowlist refuses it
            q.enqueue("resize")


def test_a_job_runs_after_the_jobs_it_depends_on_and_reads_their_results() -> None:
    order: list[str] = []

    def fetch(job: JobContext) -> dict[str, str]:
        order.append(f"fetch {job.payload['url']}")
        if job.payload["url"] == "bad":
            raise Discard("404")
        return {"text": f"page at {job.payload['url']}"}

    async def merge(job: JobContext) -> list[str]:
        order.append("merge")
        return [dependency.result["text"] for dependency in await job.dependencies()]

    def count(job: JobContext) -> int:  # sync: dependencies() from the handler's thread
        order.append("count")
        (merged,) = job.dependencies()
        return len(merged.result)

    with LocalQueue({"fetch": fetch, "merge": merge, "count": count}) as q:
        a = q.enqueue("fetch", {"url": "a"})
        b = q.enqueue("fetch", {"url": "b"})
        merge_job = q.enqueue("merge", depends_on=[a, b])
        count_job = q.enqueue("count", depends_on=merge_job, priority="CRITICAL")
        assert q.get(count_job.id).waiting_for == 1
        bad = q.enqueue("fetch", {"url": "bad"})
        orphan = q.enqueue("merge", depends_on=bad)
        assert q.run_until_idle() == 5
        assert sorted(order) == ["count", "fetch a", "fetch b", "fetch bad", "merge"]
        assert order.index("merge") > max(order.index("fetch a"), order.index("fetch b"))
        assert order.index("count") > order.index("merge"), "each ran after what it depends on"
        assert q.get(merge_job.id).result == ["page at a", "page at b"]
        assert q.get(count_job.id).result == 2
        cancelled = q.get(orphan.id)
        assert (cancelled.status, cancelled.error) == ("CANCELLED", f"dependency {bad.id} FAILED")


def test_jobs_are_claimed_by_priority_then_age() -> None:
    order: list[str] = []
    with LocalQueue({"task": lambda job: order.append(job.payload["name"])}, concurrency=1) as q:
        for name, priority in [("low", "LOW"), ("high", "HIGH"), ("critical", "CRITICAL"), ("high2", "HIGH")]:
            q.enqueue("task", {"name": name}, priority=priority)
        assert q.run_until_idle() == 4
    assert order == ["critical", "high", "high2", "low"]


def test_keys_are_made_as_queuelog_keys_create_makes_them() -> None:
    with LocalQueue({"email": lambda job: None}) as q:
        producer_key = q.create_key("shop", "producer")
        with Client(q.url, producer_key) as shop:
            job = shop.enqueue("email", {"to": "c@example.com"}, priority="MEDIUM")
            with pytest.raises(Forbidden):  # above a PRODUCER key's default maxPriority
                shop.enqueue("email", priority="HIGH")
            assert q.run_until_idle() == 1
            assert shop.get(job.id).status == "COMPLETED"
            assert [j.id for j in shop.list()] == [job.id], "a producer sees its own jobs"


def test_handlers_load_from_a_module_as_queuelog_worker_loads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "shop_tasks_for_local_queue.py").write_text(
        textwrap.dedent(
            """
            def invoice(job):
                return {"total": sum(job.payload["lines"])}

            HANDLERS = {"invoice": invoice}
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    with LocalQueue("shop_tasks_for_local_queue:HANDLERS") as q:
        job = q.enqueue("invoice", {"lines": [3, 4]})
        q.run_until_idle()
        assert q.get(job.id).result == {"total": 7}
    with pytest.raises(ValueError, match="no_colon_here"):
        LocalQueue("no_colon_here")
    with pytest.raises(ValueError, match="no_such_module_for_local_queue"):
        LocalQueue("no_such_module_for_local_queue:HANDLERS")
    with pytest.raises(ValueError, match="invoice"):
        LocalQueue({"invoice": "shop_tasks_for_local_queue.invoice"})  # type: ignore[dict-item]


def test_a_job_past_its_timeout_is_failed_as_the_server_fails_it() -> None:
    async def hang(job: JobContext) -> None:
        await asyncio.sleep(3600)

    with LocalQueue({"hang": hang}) as q:
        job = q.enqueue("hang", max_retries=0, timeout_seconds=1)
        assert q.run_until_idle() == 1
        timed_out = q.get(job.id)
        assert (timed_out.status, timed_out.error) == ("FAILED", "timed out")


def test_a_run_that_does_not_finish_ends_with_timeout_error() -> None:
    release = threading.Event()

    def stuck(job: JobContext) -> None:
        release.wait(60)

    with LocalQueue({"stuck": stuck}) as q:
        job = q.enqueue("stuck", max_retries=0)
        try:
            with pytest.raises(TimeoutError, match="not idle in time"):
                q.run_until_idle(timeout=2)  # the claim takes milliseconds: the job is RUNNING by then
        finally:
            release.set()
        # The worker stopped and failed the job it could not finish, as production's does.
        stopped = q.get(job.id)
        assert (stopped.status, stopped.error) == ("FAILED", "worker stopped before the job finished")


def test_closing_leaves_no_thread_no_file_and_the_real_clock(files: Path) -> None:
    real_clock = clock.utcnow
    before = set(threading.enumerate())

    async def twice(job: JobContext) -> None:
        if job.attempt == 1:
            raise Retry(after=3600)

    with LocalQueue({"sync": lambda job: "ok", "async": twice}) as q:
        assert any(files.iterdir()), "the database is in tempfile's directory"
        q.enqueue("sync")
        q.enqueue("async")
        assert q.run_until_idle() == 3
        assert q.now() - clock.utcnow() < timedelta(seconds=1), "the server's clock is the queue's"
        assert q.now() - real_clock() >= timedelta(hours=1) - timedelta(seconds=1)
    assert list(files.iterdir()) == []
    assert clock.utcnow is real_clock
    left = [t for t in threading.enumerate() if t not in before]
    for thread in left:  # a handler's thread ends just after handing its result over
        thread.join(timeout=10)
    assert [t.name for t in left if t.is_alive()] == []
    q.close()  # twice is harmless
    with pytest.raises(RuntimeError, match="closed"):
        q.enqueue("sync")


def test_a_local_queue_never_closed_is_cleaned_up_when_collected(files: Path) -> None:
    real_clock = clock.utcnow
    q = LocalQueue({"sync": lambda job: "ok"})
    q.enqueue("sync")
    q.run_until_idle()
    server = q._held.server_thread
    assert server is not None and server.is_alive()
    del q
    gc.collect()
    assert not server.is_alive()
    assert list(files.iterdir()) == []
    assert clock.utcnow is real_clock


def test_a_process_that_never_closes_its_local_queue_exits_and_leaves_no_file(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        from queuelog.testing import LocalQueue

        q = LocalQueue({"sync": lambda job: "ok"})  # its server thread runs until the end
        print(q._held.folder, flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip())
    assert folder.parent == tmp_path
    assert not folder.exists()
    assert list(tmp_path.iterdir()) == [], "the template's folder is gone too"
