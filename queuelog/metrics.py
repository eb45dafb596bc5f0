"""Prometheus metrics: job counters from the event stream, status gauges at scrape time."""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from queuelog.model import ALL_JOBS, EventKind, JobEvent, JobStatus
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
            "queuelog_oldest_pending_seconds", "Age of the oldest due PENDING job", registry=self.registry
        )
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

    def observe_request(self, path: str, method: str, seconds: float) -> None:
        self.request_latency.labels(path, method).observe(seconds)

    async def response(self, request: Request, repository: Repository, token: str) -> Response:
        """GET /metrics: the scrape, or 401 (before reading anything) without the token."""
        if not token_accepted(request.headers.get("authorization"), token):
            headers = {**NOSNIFF, "WWW-Authenticate": "Bearer"}
            return PlainTextResponse(UNAUTHORIZED, status_code=401, headers=headers)
        return Response(await self.render(repository), media_type=CONTENT_TYPE, headers=NOSNIFF)

    async def render(self, repository: Repository) -> bytes:
        stats = await repository.queue_stats(ALL_JOBS)
        for status in JobStatus:
            self.by_status.labels(status.value).set(getattr(stats.counts, status.value))
        self.oldest_pending.set(stats.oldest_pending_seconds or 0)
        return generate_latest(self.registry)
