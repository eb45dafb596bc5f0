"""A claim of a type with per-key limits reads what it claims, not every key (API.md section 9).

With thousands of concurrency keys (tenants), a claim used to read each key's head in its
own statements (626 statements for a claim of 10 among 20,000 keys, under the lock every
server's counted claims share). It now walks the type's keyed jobs in claim order with the
full keys left out, and only when one key's backlog fills that walk does it read the heads of
all keys, in one statement. These tests run the storage layer in process on a real SQLite
file and a real PostgreSQL database, count the statements each claim sends, and check that
the claim takes the right jobs, in claim order, within every per-key limit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

from conftest import Databases

from queuelog.model import NewJob, Priority
from queuelog.retry_policy import RetryPolicy
from queuelog.storage.operations import flow
from queuelog.storage.repository import Repository
from queuelog.storage.transaction import WriteTx

TYPE = "email"


def keyed(key: str | None, priority: Priority = Priority.MEDIUM) -> NewJob:
    return NewJob(TYPE, {}, priority, 0, None, None, payload_json="{}", concurrency_key=key)


@contextlib.contextmanager
def counting_statements() -> Iterator[list[str]]:
    """Every statement a write transaction sends meanwhile (a pipeline's counted one by one)."""
    sent: list[str] = []
    execute, together = WriteTx.execute, WriteTx.execute_together

    def counted_execute(self: WriteTx, sql: str, parameters: Any = ()) -> Any:
        sent.append(sql)
        return execute(self, sql, parameters)

    def counted_together(self: WriteTx, statements: Any) -> Any:
        sent.extend(sql for sql, _ in statements)
        return together(self, statements)

    WriteTx.execute = counted_execute  # type: ignore[method-assign]
    WriteTx.execute_together = counted_together  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        WriteTx.execute, WriteTx.execute_together = execute, together  # type: ignore[method-assign]


async def opened(url: str) -> Repository:
    repository = Repository(url, RetryPolicy(10, 3600), event_feed="local")
    await repository.open()
    return repository


async def enqueue(repository: Repository, jobs: list[NewJob]) -> list[int]:
    ids: list[int] = []
    for start in range(0, len(jobs), 1000):
        outcomes = await repository.enqueue(jobs[start : start + 1000], "producer")
        ids += [o.job.id for o in outcomes]
    return ids


def test_a_per_key_claim_among_20000_keys_sends_a_handful_of_statements(databases: Databases) -> None:
    async def scenario() -> None:
        repository = await opened(databases.migrated())
        try:
            ids = await enqueue(repository, [keyed(f"tenant-{i:05d}") for i in range(20_000)])
            await repository.update_type_control(TYPE, max_running_per_key=1)
            with counting_statements() as sent:
                claimed = (await repository.claim("w", [TYPE], 10, 60)).jobs
            assert [j.id for j in claimed] == ids[:10]
            print(f"\n{databases.backend}: {len(sent)} statements for a claim of 10 among 20,000 keys")
            assert len(sent) <= 10, sent
            # The same keys are full now: the next claim takes the next 10 keys, still cheap.
            with counting_statements() as sent:
                claimed = (await repository.claim("w", [TYPE], 10, 60)).jobs
            assert [j.id for j in claimed] == ids[10:20]
            assert len(sent) <= 10, sent
        finally:
            await repository.close()

    asyncio.run(scenario())


def test_one_keys_backlog_ahead_of_the_others_still_yields_the_claim_order(databases: Databases) -> None:
    """A noisy tenant's 600 oldest jobs fill the walk: the claim reads each key's head
    instead, in one statement, and takes the noisy key's head and then the other keys'."""

    async def scenario() -> None:
        repository = await opened(databases.migrated())
        try:
            noisy = await enqueue(repository, [keyed("noisy")] * 600)
            quiet = await enqueue(repository, [keyed(f"quiet-{i:03d}") for i in range(300)])
            unkeyed = await enqueue(repository, [keyed(None)] * 3)
            await repository.update_type_control(TYPE, max_running_per_key=1)
            with counting_statements() as sent:
                claimed = (await repository.claim("w", [TYPE], 10, 60)).jobs
            # claim order: the noisy head (oldest), then the oldest of the others
            assert [j.id for j in claimed] == [noisy[0], *quiet[:9]]
            assert len(sent) <= 12, sent
            again = (await repository.claim("w", [TYPE], 10, 60)).jobs
            assert [j.id for j in again] == quiet[9:19]
            # a key with room for two, under the fallback: its two oldest, in claim order
            await repository.update_type_control(TYPE, max_running_per_key=2)
            more = (await repository.claim("w", [TYPE], 300, 60)).jobs
            taken = Counter(j.concurrency_key for j in more)
            assert taken["noisy"] == 1  # one RUNNING already: room for one more
            assert set(unkeyed) <= {j.id for j in more}
            assert all(n <= 2 for key, n in taken.items() if key is not None)
            assert [j.id for j in more if j.concurrency_key == "noisy"] == [noisy[1]]
        finally:
            await repository.close()

    asyncio.run(scenario())


def test_the_walk_is_bounded_by_the_claims_limit() -> None:
    assert flow.keyed_walk_rows(1) < flow.keyed_walk_rows(100) <= 500
