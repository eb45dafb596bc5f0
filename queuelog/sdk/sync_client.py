"""`Client`: AsyncClient's calls, blocking, run on a private event-loop thread.

Each method is taken whole from AsyncClient (`get = blocking(AsyncClient.get)`), so its
parameters, defaults, types and docstring are the async method's, for mypy, IDEs and
`help()` alike: a call added to AsyncClient is one line here, and the two cannot drift.
`blocking(method, then)` also passes the answer through `then` (enqueue's job gets this
client's blocking `wait`), and takes `then`'s return type.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import Future
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from queuelog.sdk.async_client import AsyncClient
from queuelog.sdk.session import DEFAULT_TIMEOUT, resolve_key
from queuelog.sdk.types import EnqueuedJob, Job, JobWaiter
from queuelog.sdk.wire import Data

# How long an interrupted call may take to end once cancelled (its cleanup, a socket's close).
INTERRUPTED_CALL_GRACE = 5.0

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


def _as_sync(method: Callable[..., Any], function: Callable[..., Any], returns: Any = None) -> None:
    """Give `function` the name, docstring and signature of AsyncClient's `method` (its
    annotations evaluated, as `inspect.signature(..., eval_str=True)` reads them)."""
    functools.update_wrapper(function, method, assigned=("__name__", "__doc__"), updated=())
    function.__qualname__ = f"Client.{method.__name__}"
    signature = inspect.signature(method, eval_str=True)
    if returns is not None:
        signature = signature.replace(return_annotation=returns)
    vars(function)["__signature__"] = signature


class blocking(Generic[P, R]):
    """`Client.NAME = blocking(AsyncClient.NAME)`: the coroutine method, run to its end; with
    `then`, its answer passed through `then(client, answer)`."""

    @overload
    def __init__(
        self: blocking[P, R], method: Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, R]]
    ) -> None: ...

    @overload
    def __init__(
        self: blocking[P, R],
        method: Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]],
        then: Callable[[Client, T], R],
    ) -> None: ...

    def __init__(
        self,
        method: Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, Any]],
        then: Callable[[Client, Any], Any] | None = None,
    ) -> None:
        def call(client: Client, *args: P.args, **kwargs: P.kwargs) -> Any:
            answer = client._call(method(client._async, *args, **kwargs))
            return answer if then is None else then(client, answer)

        returns = None
        if then is not None:  # its return annotation only: the others name Client, not made yet
            returns = eval(then.__annotations__["return"], then.__globals__)  # noqa: S307
        _as_sync(method, call, returns)
        self._function = call

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Callable[Concatenate[Client, P], R]: ...

    @overload
    def __get__(self, client: Client, owner: type[Any]) -> Callable[P, R]: ...

    def __get__(self, client: Client | None, owner: type[Any]) -> Callable[..., R]:
        if client is None:
            return self._function
        return types.MethodType(self._function, client)


class blocking_iterator(Generic[P, R]):
    """`blocking` for an async generator method: an iterator that fetches as it goes."""

    def __init__(self, method: Callable[Concatenate[AsyncClient, P], AsyncIterator[R]]) -> None:
        def call(client: Client, *args: P.args, **kwargs: P.kwargs) -> Iterator[R]:
            items = method(client._async, *args, **kwargs)
            try:
                while True:
                    try:
                        yield client._call(items.__anext__())
                    except StopAsyncIteration:
                        return
            finally:  # left early (a break, an exception): close it, and what it holds open
                closing = getattr(items, "aclose", None)
                if closing is not None and client._loop.is_running():
                    client._call(closing())

        returned = inspect.signature(method, eval_str=True).return_annotation
        _as_sync(method, call, types.GenericAlias(Iterator, returned.__args__[:1]))  # an item type only
        self._function = call

    @overload
    def __get__(self, client: None, owner: type[Any]) -> Callable[Concatenate[Client, P], Iterator[R]]: ...

    @overload
    def __get__(self, client: Client, owner: type[Any]) -> Callable[P, Iterator[R]]: ...

    def __get__(self, client: Client | None, owner: type[Any]) -> Callable[..., Iterator[R]]:
        if client is None:
            return self._function
        return types.MethodType(self._function, client)


def _waits_blocking(client: Client, job: EnqueuedJob[Any]) -> EnqueuedJob[Job]:
    """enqueue's job, whose `wait` is this client's: blocking, like every call of Client."""
    return job.with_waiter(JobWaiter(client.wait))


class Client:
    """The synchronous client: AsyncClient's methods, run on a private event-loop thread.

    One Client may be shared by any number of threads (a web application's module-level
    client): each call hands its coroutine to the loop thread and waits for its own answer.
    """

    def __init__(self, url: str, key: str | None = None, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        """`key` defaults to $QUEUELOG_API_KEY; with neither, MissingKey."""
        key = resolve_key(key)  # before the loop thread starts: a missing key leaves none behind
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="queuelog-client", daemon=True)
        self._thread.start()
        self._async = self._call(self._make(url, key, timeout))

    @staticmethod
    async def _make(url: str, key: str, timeout: float) -> AsyncClient:
        return AsyncClient(url, key, timeout=timeout)

    def _call(self, coroutine: Awaitable[R]) -> R:
        ended = threading.Event()

        async def tracked() -> R:
            try:
                return await coroutine
            finally:
                ended.set()

        future: Future[R] = asyncio.run_coroutine_threadsafe(tracked(), self._loop)
        try:
            return future.result()
        except BaseException:
            # Interrupted while the loop thread still runs the call (Ctrl-C in a blocking wait,
            # watch or subscribe): cancel it and let it end, so that what it holds (a
            # subscription's generator, its websocket) can be closed next, not found running.
            if not future.done():
                future.cancel()
                ended.wait(INTERRUPTED_CALL_GRACE)
            raise

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_running():
            self._call(self._async.aclose())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        self._loop.close()

    def execute(self, query: str, variables: dict[str, Any] | None = None) -> Data:
        """Run one operation: its `data` (a dict, whose `refused` names the `error` fields
        withheld from this key), or the contract error raised for any other GraphQL error
        (docs/python.md, "What execute raises")."""
        return self._call(self._async.execute(query, variables))

    # Producers and readers.
    enqueue = blocking(AsyncClient.enqueue, _waits_blocking)
    enqueue_many = blocking(AsyncClient.enqueue_many)
    get = blocking(AsyncClient.get)
    list = blocking_iterator(AsyncClient.list)
    cancel = blocking(AsyncClient.cancel)
    cancel_job = blocking(AsyncClient.cancel_job)
    retry = blocking(AsyncClient.retry)
    stats = blocking(AsyncClient.stats)
    # Steering and following a job.
    update_job = blocking(AsyncClient.update_job)
    run_job_now = blocking(AsyncClient.run_job_now)
    wait = blocking(AsyncClient.wait)
    watch = blocking_iterator(AsyncClient.watch)
    subscribe = blocking_iterator(AsyncClient.subscribe)
    # Flow control.
    type_controls = blocking(AsyncClient.type_controls)
    pause_type = blocking(AsyncClient.pause_type)
    resume_type = blocking(AsyncClient.resume_type)
    set_type_control = blocking(AsyncClient.set_type_control)
    cancel_jobs = blocking(AsyncClient.cancel_jobs)
    retry_jobs = blocking(AsyncClient.retry_jobs)
    add_job_type = blocking(AsyncClient.add_job_type)
    remove_job_type = blocking(AsyncClient.remove_job_type)
    # Schedules.
    schedules = blocking(AsyncClient.schedules)
    put_schedule = blocking(AsyncClient.put_schedule)
    delete_schedule = blocking(AsyncClient.delete_schedule)
    pause_schedule = blocking(AsyncClient.pause_schedule)
    resume_schedule = blocking(AsyncClient.resume_schedule)
    run_schedule_now = blocking(AsyncClient.run_schedule_now)
