"""What the repository and the event feeds need of a database, whichever it is.

`Database` is implemented by SQLite's (sqlite/database.py) and PostgreSQL's
(postgres/database.py): the group commit's writes (group_commit.py), reads on a connection
of the database's own, and what differs between them, as capabilities (`can`) rather than
as which class it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from queuelog.storage.group_commit import OwnEvents, ParkedClaim
from queuelog.storage.schema.codec import RemoteEvent
from queuelog.storage.statements import Capabilities, Statements
from queuelog.storage.transaction import WriteTx

T = TypeVar("T")
# What a listener hands on: the events of a notification; a range of event ids (after,
# through] that may have gone unheard.
Heard = Callable[[list[RemoteEvent]], None]
Missed = Callable[[int, int], None]

# A feed of other servers' events starts once every transaction running at its start has
# ended, waiting at most this long, and looking this often: what committed before is history.
STARTUP_SETTLE_SECONDS = 2.0
SETTLE_POLL_SECONDS = 0.01
# The pauses of a listener after failures in a row (to reconnect, or to read again).
RECONNECT_SECONDS = (0.1, 0.25, 0.5, 1.0, 2.0)


def retry_delay(failures: int) -> float:
    """The pause after this many failures in a row: growing, then RECONNECT_SECONDS's last."""
    return RECONNECT_SECONDS[min(failures, len(RECONNECT_SECONDS) - 1)]


class Listening(Protocol):
    """Other servers' commits being heard (Database.listen)."""

    def wait_listening(self, timeout: float) -> bool:
        """Whether it listens, within `timeout` seconds."""
        ...

    async def close(self) -> None: ...


class Database(Protocol):
    @property
    def sql(self) -> type[Statements]: ...
    @property
    def can(self) -> Capabilities: ...

    # Set when an event tail runs (feeds/tail.py): the ids of the events this process writes.
    own_events: OwnEvents | None
    # Set once a transaction of this process left dependents to settle later
    # (operations/settlements.py).
    settlements_left: asyncio.Event

    def now(self) -> datetime:
        """The time by the clock this database's writes use (queuelog/clock.py)."""
        ...

    async def write(
        self,
        operation: Callable[[WriteTx], T],
        last: bool = False,
        lane: bool = False,
        makes_ready: bool = False,
    ) -> T:
        """`operation` run in a write batch, once it has committed (group_commit.py)."""
        ...

    def park(
        self, operation: Callable[[WriteTx], T], types: Sequence[str] | None, found: Callable[[T], bool]
    ) -> ParkedClaim[T]: ...

    async def leave(self, parked: ParkedClaim[T]) -> T | None: ...

    async def read(self, function: Callable[..., T], *args: Any) -> T:
        """`function(connection, *args)`, all its statements in one snapshot."""
        ...

    async def read_one(self, sql: str, parameters: Any = ()) -> Any:
        """The first row of one statement."""
        ...

    def read_one_now(self, sql: str, parameters: Any = ()) -> Any:
        """`read_one` on the caller's thread: a round trip's wait for the event loop, but where
        reads run on it anyway (`can.runs_on_the_loop`)."""
        ...

    def others_wrote(self) -> bool:
        """Whether another process may have committed since the last call (where it cannot
        tell cheaply: always)."""
        ...

    def listen(self, heard: Heard, missed: Missed) -> Listening:
        """Hear other servers' events as they commit (`can.notifies`): the events of each to
        `heard`, and each range of event ids (after, through] that may have gone unheard to
        `missed` (postgres/notifications.py)."""
        ...

    async def vacuum_where_due(self) -> list[str]:
        """VACUUM and ANALYZE what autovacuum would have, where it does not run
        (`can.vacuums`); the statements run."""
        ...

    async def close(self) -> None: ...
