"""Prometheus metrics: job counters from the event stream, request latency by path and by
GraphQL operation, status and queue-lag gauges at scrape time. docs/monitoring.md lists them."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from queuelog.errors import DatabaseUnavailable
from queuelog.model import ALL_JOBS, EventKind, JobEvent, JobStatus, QueueStats, TypeControl
from queuelog.storage.repository import Repository

log = logging.getLogger("queuelog.metrics")
# The allowlist at scrape time (queuelog.allowlist.Allowlist.current).
AllowedTypes = Callable[[], Awaitable[Collection[str]]]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
NOSNIFF = {"X-Content-Type-Options": "nosniff"}
UNAUTHORIZED = "a valid metrics token is required: Authorization: Bearer <QUEUELOG_METRICS_TOKEN>\n"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

# The ASGI scope entry naming a POST /graphql request's operation, set once its document is
# known to be valid (compiled/http.py, schema/extensions.py's OperationName) and read by the
# request's timing.
OPERATION = "queuelog.operation"
# Operation labels: every root field of the schema has its own; names chosen by clients
# (operationName, several root fields in one document) get one each up to this many per
# process, then "other", as does a request refused before a valid document was read.
MAX_CHOSEN_OPERATIONS = 50
MAX_OPERATION_LABEL = 64
OTHER = "other"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def operation_name(name: str | None, root_fields: Sequence[str]) -> str | None:
    """What an operation is called in the metrics: its name (operationName, else the one in
    the document), else its root fields' names (aliases aside: clients choose those), sorted,
    joined by ','. compiled/http.py takes the same for its single-field documents."""
    if name:
        return name
    if len(root_fields) == 1:
        return root_fields[0]
    return ",".join(sorted(set(root_fields))) or None


def token_accepted(authorization: str | None, token: str) -> bool:
    """Whether `authorization` is `Bearer <token>`, compared in constant time; anything is
    accepted when no token is set. API keys are no metrics tokens: they open nothing here."""
    if not token:
        return True
    scheme, _, credentials = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    # Bytes: compare_digest refuses str holding non-ASCII. Starlette decodes header values
    # as latin-1, so encoding back gives the bytes the client sent.
    return hmac.compare_digest(credentials.strip().encode("latin-1"), token.encode())


class Metrics:
    def __init__(self, job_types: Sequence[str] = (), *, root_fields: Collection[str]) -> None:
        """`root_fields`: the schema's Query and Mutation fields, each an operation label of its
        own (not one of the MAX_CHOSEN_OPERATIONS names that clients choose)."""
        self.registry = CollectorRegistry()
        self._root_fields = frozenset(root_fields)

        def counter(name: str, what: str) -> Counter:
            return Counter(f"queuelog_jobs_{name}", what, ["type"], registry=self.registry)

        self.enqueued = counter("enqueued", "Jobs enqueued")
        self.claimed = counter("claimed", "Jobs claimed by workers")
        self.completed = counter("completed", "Jobs completed")
        self.failed = counter("failed", "Jobs that failed for good")
        self.retried = counter("retried", "Failed attempts sent back to PENDING (incl. expired leases)")
        self.lease_expired = counter("lease_expired", "Leases that expired")
        self.expired = counter("expired", "PENDING jobs cancelled because their expiresAt came")
        self.by_status = Gauge("queuelog_jobs", "Jobs by status", ["status"], registry=self.registry)
        self.oldest_pending = Gauge(
            "queuelog_oldest_pending_seconds",
            "Queue lag: how long the longest-waiting claimable job has been due (now - runAt)",
            registry=self.registry,
        )
        self.held_back = Counter(
            "queuelog_claims_held_back",
            "Claims in which a control (pause, limit, rate limit) held back every job of the type",
            ["type"],
            registry=self.registry,
        )

        def per_type(name: str, what: str) -> Gauge:
            return Gauge(f"queuelog_type_{name}", what, ["type"], registry=self.registry)

        self.type_paused = per_type("paused", "1 while the type is paused (API.md section 9)")
        self.type_running = per_type("running", "Jobs of the type RUNNING now")
        # Limits: a sample only for the types that have one set.
        self.type_limits = {
            "max_running": per_type("max_running", "maxRunning of the type"),
            "max_running_per_key": per_type("max_running_per_key", "maxRunningPerKey of the type"),
            "rate_limit": per_type("rate_limit", "Claims allowed per rate period"),
            "rate_period_seconds": per_type("rate_period_seconds", "The rate limit's window"),
            "timeout_seconds": per_type("timeout_seconds", "The type's default job timeout"),
        }
        self.type_jobs = Gauge(
            "queuelog_type_jobs", "Jobs of the type by status", ["type", "status"], registry=self.registry
        )
        self.type_oldest_pending = per_type(
            "oldest_pending_seconds",
            "The type's queue lag: how long its longest-waiting claimable job has been due; 0 when none",
        )
        self.schedules_broken = Gauge(
            "queuelog_schedules_broken",
            "Schedules stopped because their cron expression or time zone no longer parses",
            registry=self.registry,
        )
        self.database_up = Gauge(
            "queuelog_database_up",
            "1 when this scrape's reads of the database succeeded, 0 when the database was unavailable",
            registry=self.registry,
        )
        self.request_latency = Histogram(
            "queuelog_http_request_duration_seconds",
            "HTTP request latency",
            ["path", "method"],
            registry=self.registry,
            buckets=LATENCY_BUCKETS,
        )
        self.operation_latency = Histogram(
            "queuelog_graphql_request_duration_seconds",
            "POST /graphql latency by operation: its name, else its root field(s); 'other' past "
            f"{MAX_CHOSEN_OPERATIONS} names chosen by clients, or when no valid document was read",
            ["operation"],
            registry=self.registry,
            buckets=LATENCY_BUCKETS,
        )
        # Each request looks up its series here: labels() costs a lock and a tuple per call.
        self._paths: dict[tuple[str, str], Histogram] = {}
        self._operations: dict[str | None, Histogram] = {None: self.operation_latency.labels(OTHER)}
        self._chosen_operations = 0
        self._by_kind = {
            EventKind.ENQUEUED: self.enqueued,
            EventKind.CLAIMED: self.claimed,
            EventKind.COMPLETED: self.completed,
            EventKind.FAILED: self.failed,
            EventKind.RETRYING: self.retried,
            EventKind.EXPIRED: self.expired,
        }
        self._type_counters = (
            self.enqueued,
            self.claimed,
            self.completed,
            self.failed,
            self.retried,
            self.lease_expired,
            self.expired,
            self.held_back,
        )
        self._counted_types: set[str] = set()
        self.count_types(job_types)

    def count_types(self, types: Sequence[str]) -> None:
        """Give these types a sample of 0 in every per-type counter: an alert on a type that
        has had no failure yet sees 0, not "no data"."""
        for job_type in types:
            if job_type not in self._counted_types:
                self._counted_types.add(job_type)
                for counter in self._type_counters:
                    counter.labels(job_type)

    def observe_events(self, events: Sequence[JobEvent]) -> None:
        # Summed first: one labels().inc() per counter and type, not per event.
        increments: dict[tuple[Counter, str], int] = {}
        counters: tuple[Counter, ...]
        for event in events:
            job_type = event.job.type
            if event.kind is EventKind.LEASE_EXPIRED:
                retried = event.job.status is JobStatus.PENDING
                counters = (self.lease_expired, self.retried if retried else self.failed)
            else:
                counter = self._by_kind.get(event.kind)
                counters = (counter,) if counter is not None else ()
            for counter in counters:
                increments[counter, job_type] = increments.get((counter, job_type), 0) + 1
        for (counter, job_type), n in increments.items():
            counter.labels(job_type).inc(n)

    def observe_held(self, types: Sequence[str]) -> None:
        for job_type in types:
            self.held_back.labels(job_type).inc()

    def observe_request(self, path: str, method: str, seconds: float, operation: str | None = None) -> None:
        """One HTTP request's latency; a POST /graphql's also by `operation` (scope[OPERATION])."""
        timed = self._paths.get((path, method))
        if timed is None:
            timed = self._path_series(path, method)
        timed.observe(seconds)
        if path == "/graphql" and method == "POST":
            timed = self._operations.get(operation)
            if timed is None:
                timed = self._operation_series(operation)
            timed.observe(seconds)

    def _path_series(self, path: str, method: str) -> Histogram:
        # Methods are the client's to choose: anything unusual is "other", and not kept.
        if method not in METHODS:
            return self.request_latency.labels(path, OTHER)
        timed = self._paths[path, method] = self.request_latency.labels(path, method)
        return timed

    def _operation_series(self, operation: str | None) -> Histogram:
        if operation is None or len(operation) > MAX_OPERATION_LABEL:
            return self._operations[None]
        if operation not in self._root_fields:
            if self._chosen_operations >= MAX_CHOSEN_OPERATIONS:
                return self._operations[None]
            self._chosen_operations += 1
        timed = self._operations[operation] = self.operation_latency.labels(operation)
        return timed

    async def response(
        self, request: Request, repository: Repository, token: str, allowed: AllowedTypes | None = None
    ) -> Response:
        """GET /metrics: the scrape, or 401 (before reading anything) without the token."""
        if not token_accepted(request.headers.get("authorization"), token):
            headers = {**NOSNIFF, "WWW-Authenticate": "Bearer"}
            return PlainTextResponse(UNAUTHORIZED, status_code=401, headers=headers)
        return Response(await self.render(repository, allowed), media_type=CONTENT_TYPE, headers=NOSNIFF)

    async def render(self, repository: Repository, allowed: AllowedTypes | None = None) -> bytes:
        """The scrape. When the database is unavailable it still answers, with
        queuelog_database_up 0, this process's counters, and no database-read gauges.
        `allowed`: the allowlist now, types added at runtime included (read at each scrape, so
        an added type has its zero samples from the moment it is added)."""
        try:
            types = sorted(await allowed()) if allowed is not None else []
            self.count_types(types)
            stats = await repository.queue_stats(ALL_JOBS)
            controls = await repository.type_controls(types) if types else []
            broken_schedules = await repository.broken_schedules()
        except DatabaseUnavailable as exc:
            log.warning("metrics: %s", exc.message)
            self._database_unavailable()
        except Exception:
            log.exception("metrics: the database could not be read")
            self._database_unavailable()
        else:
            self.database_up.set(1)
            self._set_stats(stats, types)
            self._set_type_controls(controls, repository.now())
            self.schedules_broken.set(broken_schedules)
        return generate_latest(self.registry)

    def _database_unavailable(self) -> None:
        self.database_up.set(0)
        read = (self.by_status, self.type_jobs, self.type_oldest_pending, self.type_paused, self.type_running)
        for gauge in (*read, *self.type_limits.values()):
            gauge.clear()
        # unknown (an unlabelled gauge always has a sample)
        self.oldest_pending.set(float("nan"))
        self.schedules_broken.set(float("nan"))

    def _set_stats(self, stats: QueueStats, types: Sequence[str]) -> None:
        for status in JobStatus:
            self.by_status.labels(status.value).set(getattr(stats.counts, status.value))
        self.oldest_pending.set(stats.oldest_pending_seconds or 0)
        # The allowlist's types, and any other type that still has jobs.
        self.type_jobs.clear()
        self.type_oldest_pending.clear()
        for job_type in sorted({*types, *stats.by_type}):
            counts = stats.by_type.get(job_type)
            for status in JobStatus:
                n = getattr(counts, status.value) if counts is not None else 0
                self.type_jobs.labels(job_type, status.value).set(n)
            self.type_oldest_pending.labels(job_type).set(stats.oldest_pending_by_type.get(job_type, 0))

    def _set_type_controls(self, controls: Sequence[TypeControl], now: datetime) -> None:
        # A limit cleared since the last scrape has no sample, nor has a type removed since.
        for gauge in (self.type_paused, self.type_running, *self.type_limits.values()):
            gauge.clear()
        for control in controls:
            self.type_paused.labels(control.type).set(int(control.paused_at(now)))
            self.type_running.labels(control.type).set(control.running)
            rate = control.rate_limit
            limits = {
                "max_running": control.max_running,
                "max_running_per_key": control.max_running_per_key,
                "rate_limit": rate.limit if rate is not None else None,
                "rate_period_seconds": rate.period_seconds if rate is not None else None,
                "timeout_seconds": control.timeout_seconds,
            }
            for name, value in limits.items():
                if value is not None:
                    self.type_limits[name].labels(control.type).set(value)
