"""Figure 5: dispatch latency to a long-polling worker.

One connection long-polls `claimJob(waitSeconds: 20)` (worker key) on an empty queue; 50 ms
later (so that the claim is parked on the server) another connection sends one
`enqueueJob`. The sample is the time from writing that enqueue request to receiving the
claim's answer, which must be the job just enqueued. The baseline is the bare Starlette
app's `/claim` long poll (an asyncio future that `/enqueue` resolves after its INSERT).
Samples alternate between the two servers. On `--database postgresql` both run on
PostgreSQL (the baseline is `_baseline_pg_app.py`, whose long poll is the same future).
The enqueue's own answer time is shown as context: a dispatch cannot beat the commit.
"""

from __future__ import annotations

import asyncio
import re
import time

from bench._api import CLAIM, ENQUEUE
from bench._common import HttpConnection, bearer, graphql_body, percentile
from bench._context import Context
from bench._report import Figure, ms, ratio, rx

PARK_SECONDS = 0.05
P50_TARGET = 0.005
P99_TARGET = 0.025
ID_PATTERN = re.compile(rb'"id":"?(\d+)')


class Target:
    def __init__(
        self, url: str, claim_path: str, enqueue_path: str, claim_key: str | None, enqueue_key: str | None
    ):
        self.poller = HttpConnection(url, bearer(claim_key) if claim_key else {})
        self.producer = HttpConnection(url, bearer(enqueue_key) if enqueue_key else {})
        self.claim_path, self.enqueue_path = claim_path, enqueue_path
        self.dispatch: list[float] = []
        self.enqueued: list[float] = []
        self.problems: list[str] = []

    async def sample(self, i: int) -> None:
        claim_body = graphql_body(CLAIM, {"waitSeconds": 20})
        enqueue_body = graphql_body(ENQUEUE, {"input": {"type": "noop", "payload": {"n": i}}})
        claimed_at: list[float] = []

        async def claim() -> bytes:
            status, answer = await self.poller.post(self.claim_path, claim_body)
            claimed_at.append(time.perf_counter())
            if status != 200 or b'"errors"' in answer:
                raise RuntimeError(f"claim answered {status}: {answer[:200]!r}")
            return answer

        claiming = asyncio.create_task(claim())
        await asyncio.sleep(PARK_SECONDS)
        if claiming.done():
            answer = await claiming
            self.problems.append(f"the long poll answered before any enqueue: {answer[:200]!r}")
            return
        started = time.perf_counter()
        status, enqueue_answer = await self.producer.post(self.enqueue_path, enqueue_body)
        enqueued = time.perf_counter()
        answer = await asyncio.wait_for(claiming, 30)
        if status != 200 or b'"errors"' in enqueue_answer:
            self.problems.append(f"enqueue answered {status}: {enqueue_answer[:200]!r}")
            return
        job_id = _first_id(enqueue_answer)
        if job_id is None or _first_id(answer) != job_id:
            self.problems.append(f"claimed {answer[:120]!r} after enqueueing {enqueue_answer[:120]!r}")
            return
        self.dispatch.append(claimed_at[0] - started)
        self.enqueued.append(enqueued - started)

    async def close(self) -> None:
        await self.poller.close()
        await self.producer.close()


def _first_id(answer: bytes) -> str | None:
    found = ID_PATTERN.search(answer)
    return found.group(1).decode() if found else None


def dispatch_figure(ctx: Context, fig: Figure) -> None:
    s = ctx.settings
    queuelog, baseline = ctx.pair(ctx.baseline_db())
    keys = ctx.keys(queuelog, [("bench-producer", "producer"), ("bench-worker", "worker")])
    targets = {
        "queuelog": Target(
            queuelog.url, "/graphql", "/graphql", keys["bench-worker"], keys["bench-producer"]
        ),
        "baseline": Target(baseline.url, "/claim", "/enqueue", None, None),
    }

    async def run() -> None:
        try:
            for target in targets.values():  # warm-up, not counted
                for i in range(3):
                    await target.sample(-1 - i)
                target.dispatch.clear()
                target.enqueued.clear()
            for i in range(s.dispatch_samples):
                for target in targets.values():
                    await target.sample(i)
        finally:
            for target in targets.values():
                await target.close()

    with ctx.profile(queuelog):
        ctx.run(run())
    q, b = targets["queuelog"], targets["baseline"]
    qp = {p: percentile(q.dispatch, p) for p in (50, 90, 99)}
    bp = {p: percentile(b.dispatch, p) for p in (50, 90, 99)}
    fig.add(
        f"dispatch p50, ms ({len(q.dispatch)} samples)",
        ms(qp[50]),
        ms(bp[50]),
        rx(ratio(qp[50], bp[50])),
        "<= 5 ms",
        met=bool(q.dispatch) and qp[50] <= P50_TARGET,
    )
    fig.add(
        "dispatch p99, ms",
        ms(qp[99]),
        ms(bp[99]),
        rx(ratio(qp[99], bp[99])),
        "<= 25 ms",
        met=bool(q.dispatch) and qp[99] <= P99_TARGET,
    )
    fig.add(
        "  enqueue answered, p50 / p99 ms",
        f"{ms(percentile(q.enqueued, 50))} / {ms(percentile(q.enqueued, 99))}",
        f"{ms(percentile(b.enqueued, 50))} / {ms(percentile(b.enqueued, 99))}",
    )
    for name, target in targets.items():
        if target.problems:
            fig.notes.append(f"{name}: {len(target.problems)} bad samples; first: {target.problems[0]}")
    fig.data = {
        name: {
            "samples": len(t.dispatch),
            **{f"p{p}_ms": round(percentile(t.dispatch, p) * 1000, 3) for p in (50, 90, 99)},
            "max_ms": round(max(t.dispatch) * 1000, 3) if t.dispatch else None,
            "enqueue_p50_ms": round(percentile(t.enqueued, 50) * 1000, 3),
            "problems": t.problems[:5],
            "bad_samples": len(t.problems),
        }
        for name, t in targets.items()
    }
