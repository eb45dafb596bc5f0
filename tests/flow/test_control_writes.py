"""Control writes on different servers at once never undo each other (API.md section 9).

Two `queuelog serve` processes share one database (SQLite and PostgreSQL); a `pauseType` on
one and a `setTypeControl` on the other run at the same moment. Each changes only its own
fields, so both stay: the type ends paused with the limits set, as both answers said.

On PostgreSQL the moment is forced: the test holds the type's row (`FOR UPDATE`) while both
writes start, waits until both are waiting for that lock, then lets them go. A write that
read the row before it waited and then stored every field would put back what the other
wrote. On SQLite each write holds the write lock for its whole transaction, so the same
rounds there check the outcome without a lock to hold.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import GraphQLResponse, Server
from sqlalchemy import text

TYPES = [f"c{i:02d}" for i in range(10)]
_types = iter(TYPES)
ROUNDS = 4
LOCK_WAIT_TIMEOUT = 30.0

CONTROL_FIELDS = "type paused pausedUntil maxRunning maxRunningPerKey timeoutSeconds"
PAUSE = f"mutation($type: String!) {{ pauseType(type: $type) {{ {CONTROL_FIELDS} }} }}"
RESUME = f"mutation($type: String!) {{ resumeType(type: $type) {{ {CONTROL_FIELDS} }} }}"
SET_CONTROL = f"""mutation($input: TypeControlInput!) {{
  setTypeControl(input: $input) {{ {CONTROL_FIELDS} }} }}"""
TYPE_CONTROLS = f"{{ typeControls {{ {CONTROL_FIELDS} }} }}"
HOLD_ROW = text("SELECT 1 FROM type_controls WHERE type = :type FOR UPDATE")


@pytest.fixture
def two_servers(start_server: Callable[..., Server]) -> Iterator[tuple[Server, Server]]:
    one = start_server(job_types=",".join(TYPES))
    two = start_server(database_url=one.database_url, admin_key=one.admin_key, job_types=",".join(TYPES))
    yield one, two


def control(server: Server, job_type: str) -> dict[str, Any]:
    (found,) = [c for c in server.gql(TYPE_CONTROLS).ok()["typeControls"] if c["type"] == job_type]
    return found


def in_background(call: Callable[[], GraphQLResponse]) -> tuple[threading.Thread, list[GraphQLResponse]]:
    answers: list[GraphQLResponse] = []
    thread = threading.Thread(target=lambda: answers.append(call()), daemon=True)
    thread.start()
    return thread, answers


def waiting_for_locks(server: Server, count: int) -> None:
    """Until `count` sessions on the server's PostgreSQL database wait for a lock."""
    deadline = time.monotonic() + LOCK_WAIT_TIMEOUT
    while True:
        ((waiting,),) = server.sql(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'"
        )
        if waiting >= count:
            return
        assert time.monotonic() < deadline, f"{waiting} of {count} writes waiting for the row lock"
        time.sleep(0.02)


def test_a_pause_and_a_change_of_limits_on_two_servers_at_once_both_stay(
    two_servers: tuple[Server, Server],
) -> None:
    one, two = two_servers
    job_type = next(_types)
    limits = itertools.cycle([3, 5])
    for _ in range(ROUNDS):
        one.gql(RESUME, {"type": job_type}).ok()
        one.gql(SET_CONTROL, {"input": {"type": job_type, "maxRunning": 1, "timeoutSeconds": 60}}).ok()
        wanted = next(limits)
        with one.engine.begin() as holder:
            if one.backend == "postgresql":
                holder.execute(HOLD_ROW, {"type": job_type})
            pausing, paused = in_background(lambda: one.gql(PAUSE, {"type": job_type}))
            setting, set_ = in_background(
                lambda: two.gql(SET_CONTROL, {"input": {"type": job_type, "maxRunning": wanted}})  # noqa: B023
            )
            if one.backend == "postgresql":
                waiting_for_locks(one, 2)
        for thread in (pausing, setting):
            thread.join(timeout=60)
        assert paused[0].ok()["pauseType"]["paused"] is True
        assert set_[0].ok()["setTypeControl"]["maxRunning"] == wanted
        for server in (one, two):
            after = control(server, job_type)
            # The pause stays, and so do the limits setTypeControl did not name
            # (timeoutSeconds left out stays as it was).
            assert after == {
                "type": job_type,
                "paused": True,
                "pausedUntil": None,
                "maxRunning": wanted,
                "maxRunningPerKey": None,
                "timeoutSeconds": 60,
            }, after
