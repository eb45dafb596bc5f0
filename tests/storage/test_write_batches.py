"""A group-commit batch of many operations: each in its own savepoint, on both databases.

The writer is held busy by one slow operation while the others queue, so they all run in
the next batch, one transaction. Among them: an operation refused after its statements ran,
one that fails before sending any, one that writes and then fails, and an idempotency key
given twice. Each caller must get its own outcome, and the database must hold exactly what
the successful operations wrote: rows, counters and events (PostgreSQL sends a batch's
SAVEPOINT and RELEASE with the next operation's first statement, not on their own).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from conftest import Databases

from queuelog.errors import NotFound
from queuelog.model import ALL_JOBS, JobStatus, NewJob, Priority, RateLimit
from queuelog.retry_policy import RetryPolicy
from queuelog.storage.operations import claims, enqueue
from queuelog.storage.operations.running import complete
from queuelog.storage.postgres import database as postgres
from queuelog.storage.postgres.connection import conninfo
from queuelog.storage.postgres.statements.plans import OPEN_WRITE_BATCH
from queuelog.storage.repository import Repository
from queuelog.storage.transaction import WriteTx

WORKER = "worker-1"


def new_job(key: str | None = None) -> NewJob:
    return NewJob(
        "email", {"to": "ü@example.org"}, Priority.MEDIUM, 0, key, None, payload_json='{"to":"ü@example.org"}'
    )


class Failed(Exception):
    pass


def hold_writer(tx: WriteTx) -> None:
    time.sleep(0.5)  # on the writer's thread: what is written meanwhile waits, then goes together


async def in_one_batch(db: Any, *writes: Awaitable[Any]) -> list[Any]:
    """Hold the writer busy, then send `writes`: they queue meanwhile and run in the next
    batch, one transaction, in their order (with WRITE_CONNECTIONS at 1 on PostgreSQL)."""
    holding = asyncio.ensure_future(db.write(hold_writer))
    await asyncio.sleep(0.1)  # the slow batch is under way
    outcomes = await asyncio.gather(*writes)
    await holding
    return list(outcomes)


def claim_email(repository: Repository) -> Callable[[WriteTx], Any]:
    """A write claiming one `email` job for WORKER: the jobs it claimed."""

    def claim(tx: WriteTx) -> Any:
        return claims.claim(tx, WORKER, ["email"], 1, 60, repository._delay).jobs

    return claim


def test_one_batch_keeps_exactly_what_its_successful_operations_wrote(
    databases: Databases, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = databases.migrated()
    monkeypatch.setattr(postgres, "WRITE_CONNECTIONS", 1)  # one batch at a time, as on SQLite
    batches: list[int] = []

    def seen(tx: WriteTx) -> None:
        batches.append(id(tx))

    def fail_before_any_statement(tx: WriteTx) -> None:
        seen(tx)
        raise Failed("before any statement")

    def write_then_fail(job_id: int) -> Any:
        def operation(tx: WriteTx) -> None:
            seen(tx)
            complete(tx, WORKER, job_id, {"by": "the failing operation"}, None)
            raise Failed("after writing")

        return operation

    def tracked(operation: Any) -> Any:
        def run(tx: WriteTx) -> Any:
            seen(tx)
            return operation(tx)

        return run

    async def scenario() -> tuple[list[Any], Repository]:
        repository = Repository(url, RetryPolicy(10, 3600))
        await repository.open()
        await repository.enqueue([new_job(), new_job(), new_job()], "producer")
        first, second, third = (await repository.claim(WORKER, None, 3, 60)).jobs
        db = repository._db
        holding = asyncio.ensure_future(db.write(hold_writer))
        await asyncio.sleep(0.1)  # the slow batch is under way
        outcomes = await asyncio.gather(
            db.write(tracked(lambda tx: complete(tx, WORKER, first.id, {"n": 1}, None))),
            db.write(fail_before_any_statement),  # right after a write: its savepoint is the one undone
            db.write(tracked(lambda tx: complete(tx, "someone-else", second.id, None, None))),
            db.write(write_then_fail(third.id)),
            db.write(tracked(lambda tx: complete(tx, WORKER, third.id, {"n": 3}, None))),
            db.write(tracked(lambda tx: enqueue.enqueue(tx, [new_job("once")], "producer", ALL_JOBS))),
            db.write(tracked(lambda tx: enqueue.enqueue(tx, [new_job("once")], "producer", ALL_JOBS))),
            return_exceptions=True,
        )
        await holding
        return [first.id, second.id, third.id, *outcomes], repository

    async def check() -> None:
        (first, second, third, *outcomes), repository = await scenario()
        try:
            completed_first, before, refused, after, completed_third, keyed, again = outcomes
            assert len(batches) == 7 and len(set(batches)) == 1, "the seven operations ran in one batch"
            assert completed_first.status is JobStatus.COMPLETED and completed_first.result == {"n": 1}
            assert isinstance(refused, NotFound)  # not that worker's job
            assert isinstance(before, Failed) and str(before) == "before any statement"
            assert isinstance(after, Failed) and str(after) == "after writing"
            assert completed_third.status is JobStatus.COMPLETED and completed_third.result == {"n": 3}
            assert keyed[0].created and not again[0].created
            assert again[0].job.id == keyed[0].job.id

            jobs = {job_id: await repository.get_job(job_id, ALL_JOBS) for job_id in (first, second, third)}
            assert jobs[first].status is JobStatus.COMPLETED  # type: ignore[union-attr]
            assert jobs[second].status is JobStatus.RUNNING  # type: ignore[union-attr]
            assert jobs[third].result == {"n": 3}  # type: ignore[union-attr]
            stats = await repository.queue_stats(ALL_JOBS)
            assert (stats.counts.pending, stats.counts.running, stats.counts.completed) == (1, 1, 2)
            assert stats.by_type["email"].completed == 2
            history = await repository.events_of_jobs([second, third], 10)
            assert [event.kind.value for event in history[third]] == ["ENQUEUED", "CLAIMED", "COMPLETED"]
            assert [event.kind.value for event in history[second]] == ["ENQUEUED", "CLAIMED"]
        finally:
            await repository.close()

    asyncio.run(check())


def test_controlled_claims_in_one_batch_count_what_the_batch_did_before_them(
    databases: Databases, monkeypatch: pytest.MonkeyPatch
) -> None:
    """maxRunning and a rate limit, with the batch's own completion and claims not yet in the
    counters or rate_claims (PostgreSQL counts these quotas in the claim statement itself)."""
    url = databases.migrated()
    monkeypatch.setattr(postgres, "WRITE_CONNECTIONS", 1)
    batches: list[int] = []

    def seen(tx: WriteTx) -> None:
        batches.append(id(tx))

    def typed(job_type: str) -> NewJob:
        return NewJob(job_type, {}, Priority.MEDIUM, 0, None, None, payload_json="{}")

    async def scenario() -> None:
        repository = Repository(url, RetryPolicy(10, 3600))
        await repository.open()
        try:
            await repository.update_type_control("email", max_running=2)
            await repository.update_type_control("report", rate_limit=RateLimit(3, 3600, False))
            await repository.enqueue([typed("email")] * 5 + [typed("report")] * 6, "producer")
            running = (await repository.claim(WORKER, ["email"], 5, 60)).jobs
            assert len(running) == 2  # maxRunning
            db = repository._db
            holding = asyncio.ensure_future(db.write(hold_writer))
            await asyncio.sleep(0.1)
            _, completed, *claims, _ = await asyncio.gather(
                db.write(seen),
                db.write(lambda tx: complete(tx, WORKER, running[0].id, None, None)),
                repository.claim(WORKER, ["email"], 5, 60),  # the completion above freed one slot
                repository.claim(WORKER, ["email"], 5, 60),  # which the claim above took
                repository.claim(WORKER, ["report"], 2, 60),
                repository.claim(WORKER, ["report"], 2, 60),  # the window holds 3
                repository.claim(WORKER, ["report"], 2, 60),
                db.write(seen, last=True),
            )
            await holding
            assert len(batches) == 2 and batches[0] == batches[1], "all in one batch"
            assert completed.status is JobStatus.COMPLETED
            assert [len(claimed.jobs) for claimed in claims] == [1, 0, 2, 1, 0]
            stamps = [job.claimed_at for claimed in claims for job in claimed.jobs]
            assert stamps == sorted(stamps)  # claimed in the batch's order, each after the last

            # Committed: the counts and the window are what the batch left.
            stats = await repository.queue_stats(ALL_JOBS)
            assert stats.by_type["email"].running == 2 and stats.by_type["email"].completed == 1
            assert stats.by_type["report"].running == 3 and stats.by_type["report"].pending == 3
            held = await repository.claim(WORKER, ["report", "email"], 5, 60)
            assert held.jobs == [] and sorted(held.held) == ["email", "report"]
            assert held.wake_at is not None and held.wake_at > stamps[2]  # the window's first claim + 1 h
        finally:
            await repository.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_claim_after_another_in_its_batch_sees_a_pause_another_server_made_between_them(
    databases: Databases, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claims in one batch after the first skip the promotion when the controls it read bind
    none of their types, and read the controls again beside their own claim statement. A pause
    committed by another server between two claims of the batch must still hold back the
    second: its claim is undone and run again, and claims nothing."""
    import psycopg

    url = databases.migrated()
    monkeypatch.setattr(postgres, "WRITE_CONNECTIONS", 1)  # one batch at a time

    def pause_elsewhere(tx: WriteTx) -> None:  # another server's pauseType, committed meanwhile
        with psycopg.connect(conninfo(url), autocommit=True) as other:
            other.execute("INSERT INTO type_controls (type, paused, updated_at) VALUES ('email', 1, now())")

    async def scenario() -> tuple[list[Any], list[Any], int]:
        repository = Repository(url, RetryPolicy(10, 3600))
        await repository.open()
        try:
            await repository.enqueue([new_job() for _ in range(4)], "producer")
            db = repository._db

            claim = claim_email(repository)
            first, _, second = await in_one_batch(
                db, db.write(claim), db.write(pause_elsewhere), db.write(claim)
            )
            running = (await repository.queue_stats(ALL_JOBS)).counts.running
            return first, second, running
        finally:
            await repository.close()

    first, second, running = asyncio.run(scenario())
    assert len(first) == 1
    assert second == []  # the type was paused before the second claim's statement
    assert running == 1


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_rate_limited_claim_after_another_in_its_batch_sees_a_limit_lowered_between_them(
    databases: Databases, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claims of a rate-limited type after the first in a batch count on the window the first
    read under the controlled-claim lock, and skip the promotion: they read nothing before
    their claim statement. Only controlled claims add to a window, and they wait for the lock,
    so the window cannot have moved; the controls can. A limit lowered by another server
    between two claims of the batch must still hold back the second: its claim is undone and
    run again with the new limit."""
    import psycopg

    from queuelog.storage.operations import flow

    url = databases.migrated()
    monkeypatch.setattr(postgres, "WRITE_CONNECTIONS", 1)  # one batch at a time
    known_window_plans: list[int] = []
    plan_on_known_windows = flow._plan_on_known_windows

    def counted(tx: WriteTx, *args: Any) -> flow.ClaimPlan:
        known_window_plans.append(id(tx))
        return plan_on_known_windows(tx, *args)

    monkeypatch.setattr(flow, "_plan_on_known_windows", counted)

    def lower_elsewhere(tx: WriteTx) -> None:  # another server's setTypeControl, committed meanwhile
        with psycopg.connect(conninfo(url), autocommit=True) as other:
            other.execute("UPDATE type_controls SET rate_limit = 1 WHERE type = 'email'")

    async def scenario() -> tuple[list[Any], list[Any], list[Any], int]:
        repository = Repository(url, RetryPolicy(10, 3600))
        await repository.open()
        try:
            await repository.update_type_control("email", rate_limit=RateLimit(10, 3600, False))
            await repository.enqueue([new_job() for _ in range(6)], "producer")
            db = repository._db

            claim = claim_email(repository)
            first, second, _, third = await in_one_batch(
                db, db.write(claim), db.write(claim), db.write(lower_elsewhere), db.write(claim)
            )
            running = (await repository.queue_stats(ALL_JOBS)).counts.running
            return first, second, third, running
        finally:
            await repository.close()

    first, second, third, running = asyncio.run(scenario())
    assert len(first) == 1 and len(second) == 1  # within the limit of 10
    # The second claim planned on the window the first read; so did the third, then it ran
    # again on the lowered limit (a fresh read, under the lock it still holds).
    assert len(known_window_plans) == 2 and len(set(known_window_plans)) == 1
    assert third == []  # two claims in the window, the limit now 1
    assert running == 2


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_batch_of_completions_and_claims_runs_in_one_plan_mode(
    databases: Databases, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claims run with generic plans (GENERIC_PLANS), set by a SET LOCAL sent with the
    batch's BEGIN; other statements switch to the server's mode with a SET LOCAL sent with
    them. The statements of completions, claims and the batch's side tables all run
    generic: a batch switching back and forth sent 2.9 SET LOCAL or RESET statements per
    claim and completion, each one more for the driver and the server."""
    import psycopg

    url = databases.migrated()
    monkeypatch.setattr(postgres, "WRITE_CONNECTIONS", 1)  # one batch at a time
    sent: list[str] = []
    execute = psycopg.Connection.execute

    def counted(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return execute(self, query, *args, **kwargs)

    async def scenario() -> tuple[list[int], list[str]]:
        repository = Repository(url, RetryPolicy(10, 3600))
        await repository.open()
        try:
            await repository.enqueue([new_job() for _ in range(8)], "producer")
            running = (await repository.claim(WORKER, ["email"], 4, 60)).jobs
            db = repository._db
            monkeypatch.setattr(psycopg.Connection, "execute", counted)
            holding = asyncio.ensure_future(db.write(hold_writer))
            await asyncio.sleep(0.1)  # the slow batch is under way: the next ones go together
            sent.clear()

            def mode(tx: WriteTx) -> str:  # as the batch left it (raw: no switch of its own)
                shown = "SELECT current_setting('plan_cache_mode') || ' jit ' || current_setting('jit')"
                return str(tx.connection.raw.execute(shown).fetchone()[0])  # type: ignore[attr-defined]

            *outcomes, mode_after = await asyncio.gather(
                *(repository.complete(WORKER, job.id, {"ok": True}, job.attempt) for job in running),
                *(repository.claim(WORKER, ["email"], 1, 60) for _ in range(4)),
                db.write(mode, last=True),
            )
            await holding
            assert mode_after == "force_generic_plan jit off"
            batch_sent = list(sent)
            # A statement outside GENERIC_PLANS runs in the server's own mode.
            other = await db.write(
                lambda tx: tx.execute("SELECT current_setting('plan_cache_mode')").fetchone()[0]
            )
            assert other == "auto"
            return [len(claimed.jobs) for claimed in outcomes[len(running) :]], batch_sent
        finally:
            await repository.close()

    claimed, batch_sent = asyncio.run(scenario())
    assert claimed == [1, 1, 1, 1]
    switches = [
        query for query in batch_sent if "plan_cache_mode" in query and "current_setting" not in query
    ]
    assert switches == [OPEN_WRITE_BATCH]  # with BEGIN and the clock's read, once
