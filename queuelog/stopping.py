"""A server stopping: what waits ends at once, rather than when uvicorn gives up on it.

On SIGTERM or SIGINT uvicorn stops accepting connections, then waits for the open ones to
finish (up to `timeout_graceful_shutdown`), and only after that runs the lifespan's
shutdown. A claim long-polling for 30 s would hold the stop that long and then be cancelled
in the middle of its request: a 500 for the worker and a traceback in the log. So the app
hears of the signal itself, as it arrives: `on_stop_signals` runs a callback in the event
loop besides the handler uvicorn installed, and `Stopping` is what the waits watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
Handler = Callable[[int, FrameType | None], Any]


class Stopping:
    """Set once, when the server begins to stop."""

    def __init__(self) -> None:
        self._set = False
        self._future: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        if self._future is not None and not self._future.done():
            self._future.set_result(None)

    def future(self) -> asyncio.Future[None]:
        """Done once the server is stopping: one future for every waiter to pass to
        `asyncio.wait` (which never cancels it)."""
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
            if self._set:
                self._future.set_result(None)
        return self._future


@contextlib.contextmanager
def on_stop_signals(callback: Callable[[], None]) -> Iterator[None]:
    """While inside, a SIGTERM or SIGINT also runs `callback` in the running loop, after
    the handler already installed for it (uvicorn's, which begins its graceful shutdown).

    A signal without a Python handler (default or ignored) is left alone, as is a loop that
    does not run in the main thread (signals reach only that one): the callback then never
    runs, and the stop goes as uvicorn alone would take it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    installed: dict[signal.Signals, tuple[Handler, Handler]] = {}
    for stop_signal in STOP_SIGNALS:
        previous = signal.getsignal(stop_signal)
        if callable(previous):
            handler = _also_calling(loop, callback, previous)
            signal.signal(stop_signal, handler)
            installed[stop_signal] = (handler, previous)
    try:
        yield
    finally:
        for stop_signal, (handler, previous) in installed.items():
            if signal.getsignal(stop_signal) is handler:  # not replaced since: put the old one back
                signal.signal(stop_signal, previous)


def _also_calling(
    loop: asyncio.AbstractEventLoop, callback: Callable[[], None], previous: Handler
) -> Handler:
    def handler(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nothing left to tell
            loop.call_soon_threadsafe(callback)
        previous(signum, frame)

    return handler
