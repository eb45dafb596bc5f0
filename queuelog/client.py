"""Python clients for producers, tools and workers (API.md section 7).

    from queuelog.client import Client
    with Client("http://127.0.0.1:8000") as queue:  # the key from $QUEUELOG_API_KEY
        job = queue.enqueue("email", {"to": "a@example.com"})

`Client(url, key)` takes it as an argument instead; with neither, construction raises
`MissingKey` (a ValueError). `AsyncClient` has the same methods as coroutines; `Client`
runs one on a private event loop thread. Contract errors are raised as
`queuelog.errors.QueuelogError` subclasses carrying `.code` (`Forbidden`, `BadInput`,
`Conflict`, `NotFound`, ...); a server that cannot be reached raises `ServerUnreachable`.

Flow control (API.md sections 9 and 11), with an ADMIN key:

    queue.pause_type("email", until=partner_retry_at)   # no claims of "email" until then
    queue.set_type_control("email", max_running=5, rate_limit=(100, 60))  # the others stay
    queue.type_controls()                                # [TypeControl(type="email", ...), ...]
    queue.cancel_jobs(status="PENDING", type="email")    # every matching job, chunk by chunk

Dependencies and schedules (API.md sections 10 and 11):

    fetch = queue.enqueue("fetch", {"url": url})
    queue.enqueue("parse", depends_on=[fetch])           # claimed once `fetch` is COMPLETED
    queue.enqueue_many([                                 # a whole graph, all or nothing
        {"type": "fetch", "payload": {"url": a}},
        {"type": "fetch", "payload": {"url": b}},
        {"type": "merge", "depends_on_items": [0, 1]},   # waits for the two above
    ])
    queue.put_schedule("nightly", "report", "0 3 * * *", timezone="Europe/Paris")  # ADMIN
    queue.schedules()                                    # [Schedule(name="nightly", ...), ...]
"""

from __future__ import annotations

import asyncio
import builtins
import enum
import functools
import json
import os
import ssl
import threading
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict, TypeVar
from urllib.parse import urlsplit

import aiohttp
import httpx

try:  # faster parsing of responses (a claim of 100 jobs is ~20 kB); the json module otherwise
    import orjson
except ImportError:  # pragma: no cover - depends on what is installed
    orjson = None  # type: ignore[assignment]

from queuelog.errors import (
    BadInput,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    QueuelogError,
    Unauthenticated,
    echo,
)

T = TypeVar("T")
API_KEY_VARIABLE = "QUEUELOG_API_KEY"
DEFAULT_TIMEOUT = 30.0
PAGE_SIZE = 100
# A kept-alive connection idle longer than this is not reused: the server may be closing
# it (uvicorn's keep-alive timeout is 5 s), and a request sent into that would be lost.
PLAIN_HTTP_REUSE_SECONDS = 2.0
PLAIN_HTTP_CONNECTIONS = 64


class ServerError(QueuelogError):
    code = "INTERNAL_SERVER_ERROR"


class ServerUnreachable(QueuelogError):
    """The request did not get an answer (connection refused, timeout, bad gateway...)."""

    code = "UNREACHABLE"


class MissingKey(ValueError):
    """No API key was given and QUEUELOG_API_KEY is not set (or is empty)."""


def resolve_key(key: str | None) -> str:
    """`key`, or $QUEUELOG_API_KEY when it is None: a key in the environment, unlike one in
    a command's arguments, is not shown to every user of the host by `ps`."""
    if key is None:
        key = os.environ.get(API_KEY_VARIABLE)
    if not key:
        raise MissingKey(f"no API key: pass one, or set {API_KEY_VARIABLE}")
    return key


ERRORS_BY_CODE: dict[str, type[QueuelogError]] = {
    cls.code: cls
    for cls in (Unauthenticated, Forbidden, BadInput, PayloadTooLarge, NotFound, Conflict, ServerError)
}

JSON_HEADERS = {"Content-Type": "application/json"}
COMPLETE_MANY = (
    "mutation($items: [CompleteJobInput!]!) { completeJobs(items: $items) {"
    " completed { id status } rejected } }"
)
# Only what the worker needs back from a batch: the completed jobs cost the server a Job
# object each to render, and the worker reads nothing from them.
COMPLETE_MANY_REJECTED = "mutation($items: [CompleteJobInput!]!) { completeJobs(items: $items) { rejected } }"
_COMPLETE_MANY_REJECTED_BODY_START = (
    b'{"query":' + json.dumps(COMPLETE_MANY_REJECTED).encode() + b',"variables":{"items":['
)


def _first_message(content: bytes) -> str:
    try:
        return str(decode_json(content)["errors"][0]["message"])
    except (ValueError, KeyError, IndexError, TypeError):
        return "service unavailable"


def encode_json(value: Any) -> bytes:
    """A request body as httpx's `json=` would send it: compact UTF-8, NaN and Infinity refused."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def decode_json(content: bytes) -> Any:
    """Parse a response body (ValueError when it is not JSON)."""
    if orjson is not None:
        try:
            return orjson.loads(content)
        except orjson.JSONDecodeError:
            pass  # an integer wider than 64 bits, say, which the json module reads
    return json.loads(content)


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    type: str
    payload: dict[str, Any]
    priority: str
    status: str
    retry_count: int
    max_retries: int
    attempt: int
    idempotency_key: str | None
    worker_id: str | None
    claimed_at: datetime | None
    lease_expires_at: datetime | None
    run_at: datetime
    finished_at: datetime | None
    result: Any
    error: str | None
    created_at: datetime
    updated_at: datetime
    concurrency_key: str | None = None
    timeout_seconds: int | None = None
    waiting_for: int = 0
    schedule_name: str | None = None

    @classmethod
    def from_graphql(cls, data: dict[str, Any]) -> Job:
        """From a selection of JOB_FIELDS or WORKER_JOB_FIELDS (`error` may be absent, as may
        any field whose annotation allows None); timestamps are parsed."""
        values: dict[str, Any] = {}
        for name, key, is_time, optional in _JOB_FROM_GRAPHQL:
            value = data.get(key) if optional else data[key]
            values[name] = _time(value) if is_time else value
        return cls(**values)


def _graphql_name(field_name: str) -> str:
    head, *rest = field_name.split("_")
    return head + "".join(part.title() for part in rest)


# (field, GraphQL name, a timestamp?, may be absent or null?) for each field of Job; the
# annotations are text here (`from __future__ import annotations`).
_JOB_FROM_GRAPHQL = tuple(
    (
        f.name,
        _graphql_name(f.name),
        str(f.type).startswith("datetime"),
        "None" in str(f.type) or f.type == "Any",
    )
    for f in fields(Job)
)


# The selection is the Job dataclass's fields (tests/test_job_fields.py keeps those equal to
# the schema's). Workers ask for everything but `error`, which only ADMIN keys may read
# (any other key would get a FORBIDDEN error per job for it).
JOB_FIELDS = " ".join(_graphql_name(f.name) for f in fields(Job))
WORKER_JOB_FIELDS = " ".join(_graphql_name(f.name) for f in fields(Job) if f.name != "error")


@dataclass(frozen=True, slots=True)
class Enqueued:
    job: Job
    created: bool


# What `depends_on` takes: jobs (or what enqueue_many returned for them), or their ids; one
# alone, or a sequence of them.
JobRef = str | Job | Enqueued
JobRefs = JobRef | Sequence[JobRef]


@dataclass(frozen=True, slots=True)
class Completed:
    completed: list[str]
    rejected: list[str]


@dataclass(frozen=True, slots=True)
class QueueStats:
    counts: dict[str, int]
    by_type: dict[str, dict[str, int]]
    oldest_pending_seconds: float | None


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most `limit` claims of a type in any window of `period_seconds` (a sliding window);
    `per_key`: each concurrencyKey on its own (jobs without a key share one limit)."""

    limit: int
    period_seconds: int
    per_key: bool = False


RateLimitSpec = RateLimit | tuple[int, int] | tuple[int, int, bool]


@dataclass(frozen=True, slots=True)
class TypeControl:
    """How claims treat one job type (API.md section 9), with its RUNNING count."""

    type: str
    paused: bool
    paused_until: datetime | None
    max_running: int | None
    max_running_per_key: int | None
    rate_limit: RateLimit | None
    timeout_seconds: int | None
    running: int

    @classmethod
    def from_graphql(cls, data: dict[str, Any]) -> TypeControl:
        rate = data.get("rateLimit")
        return cls(
            type=data["type"],
            paused=data["paused"],
            paused_until=_time(data.get("pausedUntil")),
            max_running=data.get("maxRunning"),
            max_running_per_key=data.get("maxRunningPerKey"),
            rate_limit=RateLimit(rate["limit"], rate["periodSeconds"], rate["perKey"]) if rate else None,
            timeout_seconds=data.get("timeoutSeconds"),
            running=data["running"],
        )


@dataclass(frozen=True, slots=True)
class Schedule:
    """A cron schedule (API.md section 10); `next_run_at` is None while paused, `last_run_at`
    and `last_job_id` until its first job."""

    name: str
    type: str
    cron: str
    timezone: str
    payload: dict[str, Any]
    priority: str
    max_retries: int
    misfire: str
    overlap: str
    paused: bool
    next_run_at: datetime | None
    last_run_at: datetime | None
    last_job_id: str | None

    @classmethod
    def from_graphql(cls, data: dict[str, Any]) -> Schedule:
        return cls(
            name=data["name"],
            type=data["type"],
            cron=data["cron"],
            timezone=data["timezone"],
            payload=data["payload"],
            priority=data["priority"],
            max_retries=data["maxRetries"],
            misfire=data["misfire"],
            overlap=data["overlap"],
            paused=data["paused"],
            next_run_at=_time(data.get("nextRunAt")),
            last_run_at=_time(data.get("lastRunAt")),
            last_job_id=data.get("lastJobId"),
        )


SCHEDULE_FIELDS = " ".join(_graphql_name(f.name) for f in fields(Schedule))


class EnqueueItem(TypedDict):
    """One item of `enqueue_many`: enqueue()'s arguments as keys, plus `depends_on_items`, the
    0-based indexes of earlier items of the same call that this job waits for. A plain dict
    with these keys does as well; this type only lets a type checker check the keys."""

    type: str
    payload: NotRequired[dict[str, Any] | None]
    priority: NotRequired[str]
    idempotency_key: NotRequired[str | None]
    max_retries: NotRequired[int]
    run_at: NotRequired[datetime | str | None]
    concurrency_key: NotRequired[str | None]
    timeout_seconds: NotRequired[int | None]
    depends_on: NotRequired[JobRefs]
    depends_on_items: NotRequired[Sequence[int] | int]


TYPE_CONTROL_FIELDS = (
    "type paused pausedUntil maxRunning maxRunningPerKey rateLimit { limit periodSeconds perKey }"
    " timeoutSeconds running"
)
# A caller's loop ends when a call changes nothing this many times in a row, even if the
# server still says `more` (jobs it may not change, or ones changed by others meanwhile).
BULK_IDLE_ROUNDS = 3


def graphql_url(url: str) -> str:
    """Accept the server's base URL or its /graphql endpoint."""
    url = url.rstrip("/")
    return url if url.endswith("/graphql") else url + "/graphql"


def _is_hidden_error_field(error: dict[str, Any]) -> bool:
    """Non-admin keys get null plus FORBIDDEN for `Job.error`; that is not a failure."""
    path = error.get("path") or []
    code = (error.get("extensions") or {}).get("code")
    return bool(path) and path[-1] == "error" and code == "FORBIDDEN"


def raise_for_errors(errors: list[dict[str, Any]]) -> None:
    for error in errors:
        if _is_hidden_error_field(error):
            continue
        code = (error.get("extensions") or {}).get("code", "INTERNAL_SERVER_ERROR")
        raise ERRORS_BY_CODE.get(code, ServerError)(error.get("message", "unknown error"))


def _enqueue_input(
    type: str,
    payload: dict[str, Any] | None = None,
    *,
    priority: str = "LOW",
    idempotency_key: str | None = None,
    max_retries: int = 3,
    run_at: datetime | str | None = None,
    concurrency_key: str | None = None,
    timeout_seconds: int | None = None,
    depends_on: JobRefs = (),
    depends_on_items: Sequence[int] | int = (),
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": type,
        "payload": payload if payload is not None else {},
        "priority": priority.upper(),
        "maxRetries": max_retries,
    }
    if idempotency_key is not None:
        item["idempotencyKey"] = idempotency_key
    if run_at is not None:
        item["runAt"] = moment_text(run_at)
    if concurrency_key is not None:
        item["concurrencyKey"] = concurrency_key
    if timeout_seconds is not None:
        item["timeoutSeconds"] = timeout_seconds
    # Sent only when given, so that an enqueue without them also suits a server without them.
    if dependencies := _job_ids(depends_on):
        item["dependsOn"] = dependencies
    if isinstance(depends_on_items, int):
        depends_on_items = (depends_on_items,)
    if depends_on_items:
        item["dependsOnItems"] = list(depends_on_items)
    return item


def _job_ids(jobs: JobRefs) -> builtins.list[str]:
    """The ids of `depends_on`'s jobs; TypeError for anything but ids, Jobs and Enqueued."""
    if isinstance(jobs, str | Job | Enqueued):
        jobs = (jobs,)
    ids: builtins.list[str] = []
    for job in jobs:
        if isinstance(job, str):
            ids.append(job)
        elif isinstance(job, Job):
            ids.append(job.id)
        elif isinstance(job, Enqueued):
            ids.append(job.job.id)
        else:
            raise TypeError(f"depends_on takes job ids, Job or Enqueued objects, not {type(job).__name__}")
    return ids


def moment_text(value: datetime | str, name: str = "run_at") -> str:
    """A moment (`run_at`, `until`, `created_before`) as the API takes it, in UTC: from an
    aware datetime, or an ISO-8601 string with an offset ("2030-01-01T09:00:00+02:00",
    "2030-01-01T07:00:00Z"). A time without an offset is refused (ValueError) rather than
    guessed: it names a different moment in each time zone. TypeError for anything but a
    datetime or a string."""
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"{name} {echo(value)} is not an ISO-8601 time such as 2030-01-01T09:00:00Z "
                "or 2030-01-01T09:00:00+02:00"
            ) from None
        if moment.utcoffset() is None:
            raise ValueError(
                f"{name} {echo(value)} has no UTC offset, so it could be any time zone's: add one, "
                "e.g. 2030-01-01T09:00:00Z (UTC) or 2030-01-01T09:00:00+02:00"
            )
    elif isinstance(value, datetime):
        moment = value
        if moment.utcoffset() is None:
            raise ValueError(
                f"{name} {moment.isoformat()} is a naive datetime (no tzinfo), so it could be any "
                "time zone's: pass an aware one, e.g. datetime(2030, 1, 1, 9, tzinfo=UTC) or "
                "datetime.now(UTC) + timedelta(hours=1)"
            )
    else:
        raise TypeError(
            f"{name} takes an aware datetime or an ISO-8601 string with an offset, not {type(value).__name__}"
        )
    try:
        return moment.astimezone(UTC).isoformat()
    except OverflowError:
        raise ValueError(f"{name} {moment.isoformat()} is out of range in UTC") from None


class Unchanged(enum.Enum):
    """The type of `UNCHANGED`, `set_type_control`'s default: a limit left out stays as it is."""

    UNCHANGED = "UNCHANGED"


UNCHANGED = Unchanged.UNCHANGED


def _type_control_input(type: str, limits: dict[str, Any]) -> dict[str, Any]:
    """A TypeControlInput naming only the limits given: None clears one, UNCHANGED leaves it out."""
    item: dict[str, Any] = {"type": type}
    for name, value in limits.items():
        if value is UNCHANGED:
            continue
        item[name] = _rate_limit_input(value) if name == "rateLimit" else value
    return item


def _rate_limit_input(rate_limit: RateLimitSpec | None) -> dict[str, Any] | None:
    if rate_limit is None:
        return None
    if isinstance(rate_limit, RateLimit):
        rate = rate_limit
    elif len(rate_limit) in (2, 3):  # a tuple (or a list: JSON gives those)
        rate = RateLimit(*rate_limit)
    else:
        raise TypeError(
            "rate_limit is a RateLimit, (limit, period_seconds) or (limit, period_seconds, per_key)"
        )
    return {"limit": rate.limit, "periodSeconds": rate.period_seconds, "perKey": rate.per_key}


def _job_filter(
    status: str | None, type: str | None, concurrency_key: str | None, created_before: datetime | str | None
) -> dict[str, Any]:
    job_filter: dict[str, Any] = {}
    if status is not None:
        job_filter["status"] = status.upper()
    if type is not None:
        job_filter["type"] = type
    if concurrency_key is not None:
        job_filter["concurrencyKey"] = concurrency_key
    if created_before is not None:
        job_filter["createdBefore"] = moment_text(created_before, "created_before")
    return job_filter


class PlainHTTP:
    """POSTs of JSON to one plain-`http` URL, through one aiohttp session (connections kept
    alive): the worker's two hot calls, `claimJobs` and `completeJobs`.

    Not httpx, which AsyncClient uses for everything else: end to end (`python -m
    bench.fig_transport`, one worker draining no-op jobs from a server on the same host),
    the worker spent about 2.7x the CPU per job through httpx and drained about 0.75x the
    jobs a second. The hand-written HTTP/1.1 client on asyncio streams that this replaced
    spent about 0.75x aiohttp's CPU per job (22 against 29.5 us), but the worker drained as
    many jobs a second through aiohttp (0.93x-1.08x of it), so it was not worth its code
    (issue 15's rule: aiohttp within 20% end to end, use it). Plain `http`
    only, with no proxy and no credentials in the URL (`usable`): anything else goes through
    httpx. A request that fails or is cancelled closes its connection, so a long-polling
    claim abandoned that way is dropped by the server unclaimed. An idle connection is not
    reused after PLAIN_HTTP_REUSE_SECONDS, nor once the server has closed it.

    Resends. A request goes out once, unless the caller passes `idempotent=True`: then, if
    its connection fails before an answer comes whole (the server closed a kept-alive
    connection as the request went out, say), it is sent once more on a new connection.
    Nothing proves the server had not read and applied the first copy (it may have closed
    after committing, or a proxy may have dropped the answer), so only requests that are
    safe to repeat are marked so: the worker's `completeJobs`, whose items carry the
    attempt, so that a second copy changes nothing and comes back with those items rejected
    (the worker then asks whether they are COMPLETED at that attempt, and logs them
    completed if so). `claimJobs` is never resent: a second copy would claim more jobs while
    the first copy's stayed RUNNING under this worker, unseen, until their lease expired. A
    claim whose answer is lost raises instead, and the worker takes over what it may have
    claimed (`queuelog.worker`). aiohttp itself never repeats a POST.
    """

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"not a plain http URL: {url}")
        self.url = url
        self._headers = headers | {"Content-Type": "application/json", "Accept": "application/json"}
        self._session: aiohttp.ClientSession | None = None

    @staticmethod
    def usable(url: str) -> bool:
        """A plain http URL, without credentials in it, that no proxy setting of the environment
        applies to."""
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.username is not None:
            return False
        proxies = urllib.request.getproxies()
        if not (proxies.get("http") or proxies.get("all")):
            return True
        return bool(urllib.request.proxy_bypass(parts.hostname))

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:  # here, not in __init__: a session belongs to a running loop
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                connector=aiohttp.TCPConnector(
                    limit=PLAIN_HTTP_CONNECTIONS, keepalive_timeout=PLAIN_HTTP_REUSE_SECONDS
                ),
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,  # `usable` sent anything a proxy would apply to through httpx
            )
        return self._session

    async def post(self, body: bytes, timeout: float, *, idempotent: bool = False) -> tuple[int, bytes]:
        """Send one POST; returns (status, body). Raises aiohttp.ClientError, OSError or
        TimeoutError when there is no proper answer. Only an `idempotent` request is sent a
        second time (see the class's docstring)."""
        session = self._open()
        tries = 2 if idempotent else 1
        for attempt in range(1, tries + 1):
            try:
                async with session.post(
                    self.url, data=body, timeout=aiohttp.ClientTimeout(total=timeout)
                ) as response:
                    return response.status, await response.read()
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, aiohttp.ClientPayloadError):
                if attempt == tries:
                    raise
        raise AssertionError("not reached")

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default TLS context, made once per process: loading the CA bundle costs about
    45 ms, which every new client (a test's, a short script's) paid otherwise."""
    return httpx.create_ssl_context()


class AsyncClient:
    def __init__(
        self,
        url: str,
        key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`key` defaults to $QUEUELOG_API_KEY; with neither, MissingKey."""
        key = resolve_key(key)
        self.url = graphql_url(url)
        self.timeout = timeout
        self._http = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {key}"},
            timeout=timeout,
            transport=transport,
            verify=_tls_context(),
            limits=httpx.Limits(max_keepalive_connections=32, max_connections=64),
        )
        self._plain: PlainHTTP | None = None
        if transport is None and PlainHTTP.usable(self.url):
            try:
                self._plain = PlainHTTP(self.url, {"Authorization": f"Bearer {key}"})
            except (ValueError, UnicodeError):
                self._plain = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._plain is not None:
            await self._plain.aclose()
        await self._http.aclose()

    async def execute(
        self, query: str, variables: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Run one operation; returns `data` or raises the contract error."""
        return await self.post_json(encode_json({"query": query, "variables": variables or {}}), timeout)

    async def post_json(
        self, body: bytes, timeout: float | None = None, *, plain: bool = False, idempotent: bool = False
    ) -> dict[str, Any]:
        """`execute` for a request body already encoded as JSON ({"query": ..., "variables": ...}).

        With `plain`, the request goes through `PlainHTTP` when the URL allows it (the
        worker's hot calls), else through httpx. `idempotent`: repeating the request is
        harmless, so PlainHTTP may send it again when a kept-alive connection dies under it.
        """
        if plain and self._plain is not None:
            try:
                status, content = await self._plain.post(
                    body, self.timeout if timeout is None else timeout, idempotent=idempotent
                )
            except (aiohttp.ClientError, OSError, ValueError, TimeoutError) as exc:
                raise ServerUnreachable(f"{type(exc).__name__}: {exc}") from exc
        else:
            try:
                response = await self._http.post(
                    self.url,
                    content=body,
                    headers=JSON_HEADERS,
                    timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout,
                )
            except httpx.HTTPError as exc:
                raise ServerUnreachable(f"{type(exc).__name__}: {exc}") from exc
            status, content = response.status_code, response.content
        if status >= 500 and status != 503:
            raise ServerUnreachable(f"HTTP {status} from {self.url}")
        if status == 503:  # the server is up, its database is not: try again, like unreachable
            raise ServerUnreachable(f"HTTP 503 from {self.url}: {_first_message(content)}")
        try:
            answer = decode_json(content)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise ServerUnreachable(f"HTTP {status}: not a GraphQL response")
        raise_for_errors(answer.get("errors") or [])
        if status == 413:
            raise PayloadTooLarge("request body too large")
        return answer.get("data") or {}

    # --- producers and tools ---------------------------------------------------------------

    async def enqueue(
        self,
        type: str,
        payload: dict[str, Any] | None = None,
        *,
        priority: str = "LOW",
        idempotency_key: str | None = None,
        max_retries: int = 3,
        run_at: datetime | str | None = None,
        concurrency_key: str | None = None,
        timeout_seconds: int | None = None,
        depends_on: JobRefs = (),
    ) -> Job:
        """Enqueue one job. `run_at`: not claimed before then; an aware datetime, or an
        ISO-8601 string with an offset ("2030-01-01T09:00:00Z", "...+02:00"). `depends_on`:
        the jobs it waits for (ids, Job or Enqueued objects; one or a sequence): it stays
        PENDING, with `waiting_for` > 0, and is claimed only once every one of them is
        COMPLETED.

        Raises BadInput (a type outside the allowlist, bad arguments, over 100 dependencies),
        NotFound (a dependency this key cannot see), Conflict (a dependency already FAILED or
        CANCELLED; an idempotency key reused with other input), Forbidden, PayloadTooLarge,
        Unauthenticated, ServerUnreachable; before sending, TypeError for a dependency that is
        not an id or a job, or a run_at that is neither a datetime nor a string, and ValueError
        for a run_at without an offset (a naive datetime) or not in ISO 8601.
        """
        item = _enqueue_input(
            type,
            payload,
            priority=priority,
            idempotency_key=idempotency_key,
            max_retries=max_retries,
            run_at=run_at,
            concurrency_key=concurrency_key,
            timeout_seconds=timeout_seconds,
            depends_on=depends_on,
        )
        data = await self.execute(
            "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) "
            f"{{ job {{ {JOB_FIELDS} }} }} }}",
            {"input": item},
        )
        return Job.from_graphql(data["enqueueJob"]["job"])

    async def enqueue_many(self, items: Sequence[EnqueueItem | dict[str, Any]]) -> list[Enqueued]:
        """Enqueue several jobs at once, all or nothing; the answers come in the items' order.

        Each item is a dict of enqueue()'s arguments (`{"type": "email", "payload": {...},
        "depends_on": [job]}`, see EnqueueItem), plus `depends_on_items`: the 0-based indexes
        of earlier items of this call that the job waits for, so a whole graph goes in at
        once. A chain: `[{"type": "a"}, {"type": "b", "depends_on_items": [0]}, {"type": "c",
        "depends_on_items": [1]}]`; a fan-in: `[{"type": "part"}, {"type": "part"}, {"type":
        "join", "depends_on_items": [0, 1]}]`.

        Raises what enqueue() raises, for any item (then none is enqueued); BadInput also for
        an index that is not of an earlier item; TypeError for a key enqueue() does not take.
        """
        inputs = [_enqueue_input(**item) for item in items]
        data = await self.execute(
            "mutation($inputs: [EnqueueJobInput!]!) { enqueueJobs(inputs: $inputs) "
            f"{{ created job {{ {JOB_FIELDS} }} }} }}",
            {"inputs": inputs},
        )
        return [Enqueued(Job.from_graphql(e["job"]), e["created"]) for e in data["enqueueJobs"]]

    async def get(self, id: str) -> Job | None:
        data = await self.execute(f"query($id: ID!) {{ job(id: $id) {{ {JOB_FIELDS} }} }}", {"id": id})
        return Job.from_graphql(data["job"]) if data.get("job") else None

    async def list(self, status: str | None = None, type: str | None = None) -> AsyncIterator[Job]:
        """Every job visible to this key, newest first, fetching page after page."""
        after: str | None = None
        while True:
            data = await self.execute(
                "query($status: JobStatus, $type: String, $first: Int!, $after: String) {"
                " jobs(status: $status, type: $type, first: $first, after: $after) {"
                f" nodes {{ {JOB_FIELDS} }} pageInfo {{ hasNextPage endCursor }} }} }}",
                {
                    "status": status.upper() if status else None,
                    "type": type,
                    "first": PAGE_SIZE,
                    "after": after,
                },
            )
            page = data["jobs"]
            for node in page["nodes"]:
                yield Job.from_graphql(node)
            if not page["pageInfo"]["hasNextPage"]:
                return
            after = page["pageInfo"]["endCursor"]

    async def cancel(self, id: str) -> Job:
        data = await self.execute(
            f"mutation($id: ID!) {{ cancelJob(id: $id) {{ {JOB_FIELDS} }} }}", {"id": id}
        )
        return Job.from_graphql(data["cancelJob"])

    async def retry(self, id: str) -> Job:
        data = await self.execute(
            f"mutation($id: ID!) {{ retryJob(id: $id) {{ {JOB_FIELDS} }} }}", {"id": id}
        )
        return Job.from_graphql(data["retryJob"])

    async def stats(self) -> QueueStats:
        counts = "pending running completed failed cancelled"
        data = await self.execute(
            f"{{ queueStats {{ counts {{ {counts} }} byType {{ type counts {{ {counts} }} }} "
            "oldestPendingSeconds } }"
        )
        stats = data["queueStats"]
        return QueueStats(
            counts=stats["counts"],
            by_type={t["type"]: t["counts"] for t in stats["byType"]},
            oldest_pending_seconds=stats["oldestPendingSeconds"],
        )

    # --- flow control (API.md sections 9 and 11) --------------------------------------------

    async def type_controls(self) -> builtins.list[TypeControl]:
        """Every allowlisted job type with its controls and RUNNING count, in type order.

        Raises Unauthenticated (a bad key), ServerUnreachable.
        """
        data = await self.execute(f"{{ typeControls {{ {TYPE_CONTROL_FIELDS} }} }}")
        return [TypeControl.from_graphql(c) for c in data["typeControls"]]

    async def pause_type(self, type: str, until: datetime | str | None = None) -> TypeControl:
        """ADMIN: claim no job of `type` (on any server) until `resume_type`, or until `until`
        when given (an aware datetime or an ISO-8601 string with an offset). Enqueues go on;
        RUNNING jobs finish. Returns the type's controls once the pause is stored.

        Raises Forbidden (not an ADMIN key), BadInput (a type outside the server's allowlist),
        Unauthenticated, ServerUnreachable; before sending, ValueError for an `until` without
        an offset (a naive datetime).
        """
        data = await self.execute(
            f"mutation($type: String!, $until: DateTime) {{ pauseType(type: $type, until: $until)"
            f" {{ {TYPE_CONTROL_FIELDS} }} }}",
            {"type": type, "until": moment_text(until, "until") if until is not None else None},
        )
        return TypeControl.from_graphql(data["pauseType"])

    async def resume_type(self, type: str) -> TypeControl:
        """ADMIN: end the type's pause; claims waiting for it wake.

        Raises Forbidden, BadInput (a type outside the allowlist), Unauthenticated,
        ServerUnreachable.
        """
        data = await self.execute(
            f"mutation($type: String!) {{ resumeType(type: $type) {{ {TYPE_CONTROL_FIELDS} }} }}",
            {"type": type},
        )
        return TypeControl.from_graphql(data["resumeType"])

    async def set_type_control(
        self,
        type: str,
        *,
        max_running: int | None | Unchanged = UNCHANGED,
        max_running_per_key: int | None | Unchanged = UNCHANGED,
        rate_limit: RateLimitSpec | None | Unchanged = UNCHANGED,
        timeout_seconds: int | None | Unchanged = UNCHANGED,
    ) -> TypeControl:
        """ADMIN: change the limits given and return the type's control. A limit left out stays
        as it is; `None` clears it. Pausing is separate (`pause_type`).

        `rate_limit`: a RateLimit, `(limit, period_seconds)` or `(limit, period_seconds,
        per_key)`. Raises TypeError for any other shape (before sending), BadInput (a type
        outside the allowlist, a number out of range), Forbidden, Unauthenticated,
        ServerUnreachable.
        """
        item = _type_control_input(
            type,
            {
                "maxRunning": max_running,
                "maxRunningPerKey": max_running_per_key,
                "rateLimit": rate_limit,
                "timeoutSeconds": timeout_seconds,
            },
        )
        data = await self.execute(
            "mutation($input: TypeControlInput!) { setTypeControl(input: $input)"
            f" {{ {TYPE_CONTROL_FIELDS} }} }}",
            {"input": item},
        )
        return TypeControl.from_graphql(data["setTypeControl"])

    async def cancel_jobs(
        self,
        status: str | None = None,
        type: str | None = None,
        concurrency_key: str | None = None,
        created_before: datetime | str | None = None,
        *,
        chunk: int = 1000,
    ) -> int:
        """Cancel the PENDING jobs that match every filter given and that this key may cancel
        (ADMIN: any; PRODUCER: its own), oldest first, `chunk` (1..10000) a call, calling
        again while the server says more match. Returns how many were cancelled.

        Jobs enqueued while it runs are cancelled too when they match: pass
        `created_before` to leave them be. Raises BadInput (neither status nor type, a
        chunk out of range), Forbidden (a key that may cancel nothing), Unauthenticated,
        ServerUnreachable (after some calls may have applied: call again to go on); before
        sending, ValueError for a `created_before` without an offset (a naive datetime).
        """
        return await self._bulk("cancelJobs", status, type, concurrency_key, created_before, chunk)

    async def retry_jobs(
        self,
        status: str | None = None,
        type: str | None = None,
        concurrency_key: str | None = None,
        created_before: datetime | str | None = None,
        *,
        chunk: int = 1000,
    ) -> int:
        """ADMIN: retry the FAILED or CANCELLED jobs that match every filter given, as `retry`
        does, oldest first, `chunk` (1..10000) a call, calling again while the server says
        more match. Returns how many were retried.

        A job that fails again while the loop runs may be retried again (and counted
        twice). Raises BadInput (neither status nor type, a chunk out of range), Forbidden
        (not ADMIN), Unauthenticated, ServerUnreachable (after some calls may have applied);
        ValueError for a naive `created_before`, as in cancel_jobs.
        """
        return await self._bulk("retryJobs", status, type, concurrency_key, created_before, chunk)

    async def _bulk(
        self,
        mutation: str,
        status: str | None,
        type: str | None,
        concurrency_key: str | None,
        created_before: datetime | str | None,
        chunk: int,
    ) -> int:
        query = (
            f"mutation($filter: JobFilter!, $limit: Int!) {{ {mutation}(filter: $filter, limit: $limit)"
            " { count more } }"
        )
        variables = {"filter": _job_filter(status, type, concurrency_key, created_before), "limit": chunk}
        total = idle = 0
        while True:
            outcome = (await self.execute(query, variables))[mutation]
            total += outcome["count"]
            idle = 0 if outcome["count"] else idle + 1
            if not outcome["more"] or idle >= BULK_IDLE_ROUNDS:
                return total

    # --- schedules (API.md section 10) -----------------------------------------------------

    async def schedules(self) -> builtins.list[Schedule]:
        """ADMIN and VIEWER: every schedule, in name order.

        Raises Forbidden (another role), Unauthenticated, ServerUnreachable.
        """
        data = await self.execute(f"{{ schedules {{ {SCHEDULE_FIELDS} }} }}")
        return [Schedule.from_graphql(s) for s in data["schedules"]]

    async def put_schedule(
        self,
        name: str,
        type: str,
        cron: str,
        timezone: str = "UTC",
        payload: dict[str, Any] | None = None,
        *,
        priority: str = "LOW",
        max_retries: int = 3,
        misfire: str = "RUN_ONCE",
        overlap: str = "ALLOW",
    ) -> Schedule:
        """ADMIN: create the schedule `name`, or replace the one with that name. Each tick of
        `cron` (read in the IANA `timezone`) enqueues one job of `type` with `payload`,
        `priority` and `max_retries`. `misfire`: "RUN_ONCE" (one job for the newest tick
        missed while no server ran) or "SKIP"; `overlap`: "ALLOW" or "SKIP" (no job for a tick
        while the previous tick's job is PENDING or RUNNING).

        Raises BadInput (a bad cron expression, time zone or name, a type outside the
        allowlist: the message names the field), Forbidden, Unauthenticated,
        ServerUnreachable.
        """
        item = {
            "name": name,
            "type": type,
            "cron": cron,
            "timezone": timezone,
            "payload": payload if payload is not None else {},
            "priority": priority.upper(),
            "maxRetries": max_retries,
            "misfire": misfire.upper(),
            "overlap": overlap.upper(),
        }
        data = await self.execute(
            f"mutation($input: ScheduleInput!) {{ putSchedule(input: $input) {{ {SCHEDULE_FIELDS} }} }}",
            {"input": item},
        )
        return Schedule.from_graphql(data["putSchedule"])

    async def delete_schedule(self, name: str) -> bool:
        """ADMIN: delete the schedule; False when there was none by that name. The jobs it
        already enqueued stay.

        Raises BadInput (a malformed name), Forbidden, Unauthenticated, ServerUnreachable.
        """
        data = await self.execute("mutation($name: String!) { deleteSchedule(name: $name) }", {"name": name})
        return bool(data["deleteSchedule"])

    async def pause_schedule(self, name: str) -> Schedule:
        """ADMIN: stop the schedule's ticks until `resume_schedule`.

        Raises NotFound (no such schedule), BadInput (a malformed name), Forbidden,
        Unauthenticated, ServerUnreachable.
        """
        data = await self.execute(
            f"mutation($name: String!) {{ pauseSchedule(name: $name) {{ {SCHEDULE_FIELDS} }} }}",
            {"name": name},
        )
        return Schedule.from_graphql(data["pauseSchedule"])

    async def resume_schedule(self, name: str) -> Schedule:
        """ADMIN: restart the schedule's ticks from now on (the ticks missed while paused
        enqueue nothing).

        Raises NotFound (no such schedule), BadInput (a malformed name), Forbidden,
        Unauthenticated, ServerUnreachable.
        """
        data = await self.execute(
            f"mutation($name: String!) {{ resumeSchedule(name: $name) {{ {SCHEDULE_FIELDS} }} }}",
            {"name": name},
        )
        return Schedule.from_graphql(data["resumeSchedule"])

    # --- workers ---------------------------------------------------------------------------

    async def claim(
        self,
        limit: int = 1,
        *,
        types: Sequence[str] | None = None,
        lease_seconds: int | None = None,
        wait_seconds: int = 0,
    ) -> builtins.list[Job]:
        data = await self.execute(
            "mutation($limit: Int!, $types: [String!], $lease: Int, $wait: Int) {"
            " claimJobs(limit: $limit, types: $types, leaseSeconds: $lease, waitSeconds: $wait)"
            f" {{ {WORKER_JOB_FIELDS} }} }}",
            {
                "limit": limit,
                "types": list(types) if types is not None else None,
                "lease": lease_seconds,
                "wait": wait_seconds,
            },
            timeout=DEFAULT_TIMEOUT + wait_seconds,
        )
        return [Job.from_graphql(j) for j in data["claimJobs"]]

    async def claim_data(
        self,
        limit: int,
        fields: str,
        *,
        types: Sequence[str] | None = None,
        wait_seconds: int = 0,
    ) -> builtins.list[dict[str, Any]]:
        """`claim`, returning the claimed jobs as GraphQL objects with only `fields` selected
        (camelCase, nothing converted): what the worker reads of every job, and no more."""
        query = (
            "mutation($limit: Int!, $types: [String!], $wait: Int) {"
            f" claimJobs(limit: $limit, types: $types, waitSeconds: $wait) {{ {fields} }} }}"
        )
        variables = {
            "limit": limit,
            "types": list(types) if types is not None else None,
            "wait": wait_seconds,
        }
        data = await self.post_json(
            encode_json({"query": query, "variables": variables}),
            self.timeout + wait_seconds,
            plain=True,
        )
        return data["claimJobs"]

    async def heartbeat(self, id: str, attempt: int, lease_seconds: int | None = None) -> Job:
        data = await self.execute(
            "mutation($id: ID!, $attempt: Int, $lease: Int) {"
            f" heartbeatJob(id: $id, attempt: $attempt, leaseSeconds: $lease) {{ {WORKER_JOB_FIELDS} }} }}",
            {"id": id, "attempt": attempt, "lease": lease_seconds},
        )
        return Job.from_graphql(data["heartbeatJob"])

    async def complete(self, id: str, attempt: int, result: Any = None) -> Job:
        data = await self.execute(
            "mutation($id: ID!, $attempt: Int, $result: JSON) {"
            f" completeJob(id: $id, attempt: $attempt, result: $result) {{ {WORKER_JOB_FIELDS} }} }}",
            {"id": id, "attempt": attempt, "result": result},
        )
        return Job.from_graphql(data["completeJob"])

    async def complete_many(self, items: Sequence[tuple[str, int, Any]]) -> Completed:
        """Complete (id, attempt, result) items in one call; the rejected ids come back."""
        data = await self.execute(
            COMPLETE_MANY, {"items": [{"id": i, "attempt": a, "result": r} for i, a, r in items]}
        )
        outcome = data["completeJobs"]
        return Completed(completed=[j["id"] for j in outcome["completed"]], rejected=outcome["rejected"])

    async def complete_encoded(self, items: Sequence[bytes]) -> builtins.list[str]:
        """`complete_many` for items already encoded as JSON `CompleteJobInput` objects
        (`{"id":..,"attempt":..,"result":..}`); returns only the rejected ids."""
        body = b"".join((_COMPLETE_MANY_REJECTED_BODY_START, b",".join(items), b"]}}"))
        # Safe to repeat: a second copy of an item that applied is rejected and changes nothing.
        data = await self.post_json(body, plain=True, idempotent=True)
        return data["completeJobs"]["rejected"]

    async def complete_and_claim_data(
        self, items: Sequence[bytes], limit: int, fields: str, *, types: Sequence[str] | None = None
    ) -> tuple[builtins.list[str], builtins.list[dict[str, Any]]]:
        """`completeAndClaimJobs` for items encoded as in `complete_encoded`: the rejected ids,
        and the jobs claimed after the completions (GraphQL objects with only `fields`). Not
        repeated on a lost answer (a claim is not safe to repeat): the caller decides."""
        query = (
            "mutation($items: [CompleteJobInput!]!, $limit: Int!, $types: [String!]) {"
            " completeAndClaimJobs(items: $items, limit: $limit, types: $types) {"
            f" rejected claimed {{ {fields} }} }} }}"
        )
        rest = encode_json({"limit": limit, "types": list(types) if types is not None else None})
        body = b"".join(
            (
                b'{"query":',
                encode_json(query),
                b',"variables":{"items":[',
                b",".join(items),
                b"],",
                rest[1:],
                b"}",
            )
        )
        data = (await self.post_json(body, plain=True))["completeAndClaimJobs"]
        return data["rejected"], data["claimed"]

    async def running_data(self, fields: str) -> Sequence[dict[str, Any]]:
        """Every RUNNING job this key may see (a WORKER key: those held under its name), as
        GraphQL objects with only `fields` selected; page after page."""
        found: builtins.list[dict[str, Any]] = []
        after: str | None = None
        while True:
            data = await self.execute(
                "query($first: Int!, $after: String) { jobs(status: RUNNING, first: $first, after: $after) {"
                f" nodes {{ {fields} }} pageInfo {{ hasNextPage endCursor }} }} }}",
                {"first": PAGE_SIZE, "after": after},
            )
            page = data["jobs"]
            found.extend(page["nodes"])
            if not page["pageInfo"]["hasNextPage"]:
                return found
            after = page["pageInfo"]["endCursor"]

    async def job_state(self, id: str) -> tuple[str, int] | None:
        """(status, attempt) of a job this key may see, or None."""
        data = await self.execute("query($id: ID!) { job(id: $id) { status attempt } }", {"id": id})
        job = data.get("job")
        return (job["status"], job["attempt"]) if job else None

    async def fail(
        self,
        id: str,
        attempt: int,
        error: str,
        *,
        retryable: bool = True,
        retry_in_seconds: int | None = None,
    ) -> Job:
        data = await self.execute(
            "mutation($id: ID!, $attempt: Int, $error: String!, $retryable: Boolean!, $in: Int) {"
            " failJob(id: $id, attempt: $attempt, error: $error, retryable: $retryable,"
            f" retryInSeconds: $in) {{ {WORKER_JOB_FIELDS} }} }}",
            {"id": id, "attempt": attempt, "error": error, "retryable": retryable, "in": retry_in_seconds},
        )
        return Job.from_graphql(data["failJob"])


class Client:
    """The synchronous client: AsyncClient's methods, run on a private event-loop thread."""

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

    def _call(self, coroutine: Awaitable[T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)  # type: ignore[arg-type]
        return future.result()

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

    def execute(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._call(self._async.execute(query, variables))

    def enqueue(
        self,
        type: str,
        payload: dict[str, Any] | None = None,
        *,
        priority: str = "LOW",
        idempotency_key: str | None = None,
        max_retries: int = 3,
        run_at: datetime | str | None = None,
        concurrency_key: str | None = None,
        timeout_seconds: int | None = None,
        depends_on: JobRefs = (),
    ) -> Job:
        """See AsyncClient.enqueue: `depends_on` takes ids, Job or Enqueued objects."""
        return self._call(
            self._async.enqueue(
                type,
                payload,
                priority=priority,
                idempotency_key=idempotency_key,
                max_retries=max_retries,
                run_at=run_at,
                concurrency_key=concurrency_key,
                timeout_seconds=timeout_seconds,
                depends_on=depends_on,
            )
        )

    def enqueue_many(self, items: Sequence[EnqueueItem | dict[str, Any]]) -> list[Enqueued]:
        """See AsyncClient.enqueue_many: dicts of enqueue()'s arguments, plus
        `depends_on_items` (indexes of earlier items); all or nothing."""
        return self._call(self._async.enqueue_many(items))

    def get(self, id: str) -> Job | None:
        return self._call(self._async.get(id))

    def list(self, status: str | None = None, type: str | None = None) -> Iterator[Job]:
        pages = self._async.list(status=status, type=type)
        while True:
            try:
                yield self._call(pages.__anext__())
            except StopAsyncIteration:
                return

    def cancel(self, id: str) -> Job:
        return self._call(self._async.cancel(id))

    def retry(self, id: str) -> Job:
        return self._call(self._async.retry(id))

    def stats(self) -> QueueStats:
        return self._call(self._async.stats())

    def type_controls(self) -> builtins.list[TypeControl]:
        """See AsyncClient.type_controls."""
        return self._call(self._async.type_controls())

    def pause_type(self, type: str, until: datetime | str | None = None) -> TypeControl:
        """See AsyncClient.pause_type (Forbidden, BadInput, Unauthenticated, ServerUnreachable)."""
        return self._call(self._async.pause_type(type, until))

    def resume_type(self, type: str) -> TypeControl:
        """See AsyncClient.resume_type (Forbidden, BadInput, Unauthenticated, ServerUnreachable)."""
        return self._call(self._async.resume_type(type))

    def set_type_control(
        self,
        type: str,
        *,
        max_running: int | None | Unchanged = UNCHANGED,
        max_running_per_key: int | None | Unchanged = UNCHANGED,
        rate_limit: RateLimitSpec | None | Unchanged = UNCHANGED,
        timeout_seconds: int | None | Unchanged = UNCHANGED,
    ) -> TypeControl:
        """See AsyncClient.set_type_control: a limit left out stays, None clears one. Raises
        TypeError, BadInput, Forbidden, Unauthenticated, ServerUnreachable."""
        return self._call(
            self._async.set_type_control(
                type,
                max_running=max_running,
                max_running_per_key=max_running_per_key,
                rate_limit=rate_limit,
                timeout_seconds=timeout_seconds,
            )
        )

    def cancel_jobs(
        self,
        status: str | None = None,
        type: str | None = None,
        concurrency_key: str | None = None,
        created_before: datetime | str | None = None,
        *,
        chunk: int = 1000,
    ) -> int:
        """See AsyncClient.cancel_jobs: the total cancelled (BadInput, Forbidden,
        Unauthenticated, ServerUnreachable)."""
        return self._call(self._async.cancel_jobs(status, type, concurrency_key, created_before, chunk=chunk))

    def retry_jobs(
        self,
        status: str | None = None,
        type: str | None = None,
        concurrency_key: str | None = None,
        created_before: datetime | str | None = None,
        *,
        chunk: int = 1000,
    ) -> int:
        """See AsyncClient.retry_jobs: the total retried (BadInput, Forbidden,
        Unauthenticated, ServerUnreachable)."""
        return self._call(self._async.retry_jobs(status, type, concurrency_key, created_before, chunk=chunk))

    def schedules(self) -> builtins.list[Schedule]:
        """See AsyncClient.schedules (Forbidden, Unauthenticated, ServerUnreachable)."""
        return self._call(self._async.schedules())

    def put_schedule(
        self,
        name: str,
        type: str,
        cron: str,
        timezone: str = "UTC",
        payload: dict[str, Any] | None = None,
        *,
        priority: str = "LOW",
        max_retries: int = 3,
        misfire: str = "RUN_ONCE",
        overlap: str = "ALLOW",
    ) -> Schedule:
        """See AsyncClient.put_schedule: creates or replaces. Raises BadInput (naming the field:
        `cron`, `timezone`, `name`...), Forbidden, Unauthenticated, ServerUnreachable."""
        return self._call(
            self._async.put_schedule(
                name,
                type,
                cron,
                timezone,
                payload,
                priority=priority,
                max_retries=max_retries,
                misfire=misfire,
                overlap=overlap,
            )
        )

    def delete_schedule(self, name: str) -> bool:
        """See AsyncClient.delete_schedule: False when there was none (Forbidden,
        Unauthenticated, ServerUnreachable)."""
        return self._call(self._async.delete_schedule(name))

    def pause_schedule(self, name: str) -> Schedule:
        """See AsyncClient.pause_schedule (NotFound, Forbidden, Unauthenticated, ServerUnreachable)."""
        return self._call(self._async.pause_schedule(name))

    def resume_schedule(self, name: str) -> Schedule:
        """See AsyncClient.resume_schedule (NotFound, Forbidden, Unauthenticated, ServerUnreachable)."""
        return self._call(self._async.resume_schedule(name))
