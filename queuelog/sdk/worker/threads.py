"""Daemon threads for sync handlers."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from typing import Any

from queuelog.sdk.worker.job import Handler, JobContext


class HandlerThreads:
    """Threads for sync handlers, each kept for the next job once it is done.

    Not `asyncio.to_thread` or a ThreadPoolExecutor: their threads are joined when the loop
    and the interpreter shut down, so a handler still stuck after the grace period would
    keep the worker from exiting until it returned. A daemon thread is abandoned instead
    (its job has already been failed as retryable). Starting a thread per job would cost
    more than a short handler itself.
    """

    def __init__(self) -> None:
        self._work: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, handler: Handler, context: JobContext) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1
        self._work.put((loop, future, handler, context, contextvars.copy_context()))
        if spawn:
            threading.Thread(target=self._serve, name="queuelog-handler", daemon=True).start()
        return future

    def _serve(self) -> None:
        me = threading.current_thread()
        while True:
            loop, future, handler, context, ctx = self._work.get()
            me.name = f"queuelog-job-{context.id}"
            try:
                result, exc = ctx.run(handler, context), None
            except BaseException as error:
                result, exc = None, error
            me.name = "queuelog-handler"
            with self._lock:  # idle before the loop hears of it, so the next job reuses this thread
                self._idle += 1
            with contextlib.suppress(RuntimeError):  # the loop is gone: the worker has stopped
                loop.call_soon_threadsafe(settle, future, result, exc)
            del loop, future, handler, context, ctx, result, exc


def settle(future: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if future.done():  # cancelled: the grace period is over
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
