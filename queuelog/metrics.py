"""Prometheus metrics: job counters from the event stream, status gauges at scrape time."""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from queuelog.model import ALL_JOBS, EventKind, JobEvent, JobStatus, TypeControl
from queuelog.storage.repository import Repository

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
NOSNIFF = {"X-Content-Type-Options": "nosniff"}
UNAUTHORIZED = "a valid metrics token is required: Authorization: Bearer <QUEUELOG_METRICS_TOKEN>\n"


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
    def __init__(self) -> None:
        self.registry = CollectorRegistry()

        def counter(name: str, what: str) -> Counter:
            return Counter(f"queuelog_jobs_{name}", what, ["type"], registry=self.registry)

        self.enqueued = counter("enqueued", "Jobs enqueued")
        self.claimed = counter("claimed", "Jobs claimed by workers")
        self.completed = counter("completed", "Jobs completed")
        self.failed = counter("failed", "Jobs that failed for good")
        self.retried = counter("retried", "Failed attempts sent back to PENDING (incl. expired leases)")
        self.lease_expired = counter("lease_expired", "Leases that expired")
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
        self.request_latency = Histogram(
            "queuelog_http_request_duration_seconds",
            "HTTP request latency",
            ["path", "method"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self._by_kind = {
            EventKind.ENQUEUED: self.enqueued,
            EventKind.CLAIMED: self.claimed,
            EventKind.COMPLETED: self.completed,
            EventKind.FAILED: self.failed,
            EventKind.RETRYING: self.retried,
        }

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

    def observe_request(self, path: str, method: str, seconds: float) -> None:
        self.request_latency.labels(path, method).observe(seconds)

    async def response(
        self, request: Request, repository: Repository, token: str, types: Sequence[str] = ()
    ) -> Response:
        """GET /metrics: the scrape, or 401 (before reading anything) without the token."""
        if not token_accepted(request.headers.get("authorization"), token):
            headers = {**NOSNIFF, "WWW-Authenticate": "Bearer"}
            return PlainTextResponse(UNAUTHORIZED, status_code=401, headers=headers)
        return Response(await self.render(repository, types), media_type=CONTENT_TYPE, headers=NOSNIFF)

    async def render(self, repository: Repository, types: Sequence[str] = ()) -> bytes:
        stats = await repository.queue_stats(ALL_JOBS)
        for status in JobStatus:
            self.by_status.labels(status.value).set(getattr(stats.counts, status.value))
        self.oldest_pending.set(stats.oldest_pending_seconds or 0)
        if types:
            self._set_type_controls(await repository.type_controls(types), repository.now())
        return generate_latest(self.registry)

    def _set_type_controls(self, controls: Sequence[TypeControl], now: datetime) -> None:
        for gauge in self.type_limits.values():
            gauge.clear()  # a limit cleared since the last scrape has no sample
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
