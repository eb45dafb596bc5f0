"""The job types a server accepts (V-02, API.md sections 3 and 12): its QUEUELOG_JOB_TYPES
plus the types an ADMIN added at runtime, which every server on the database shares.

No server polls the table of added types. Each write to it moves `types_generation`
(a trigger), and every request with a key already reads that generation with the keys
generation (one single-row read, principals.py): the added types are read again only when
it has moved, so an addition or a removal reaches every server by its next request. A type
missing from the allowlist is looked up in the table before it is refused all the same
(operations over a websocket go by a generation up to 0.5 s old), by a read that the misses
of MISS_READ_SECONDS share. Callers without a request of their own (the metrics scrape)
read the generation first (`fresh`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Collection, Iterable

from queuelog.errors import BadInput, echo
from queuelog.settings import env_name
from queuelog.shared_reads import Recent
from queuelog.storage.repository import Repository

JOB_TYPE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
# A type missing from the allowlist is looked up in the table, by one read that the misses of
# this long share: refused enqueues of made-up types cannot make a read each.
MISS_READ_SECONDS = 0.1
AddedTypes = tuple[int, list[str]]  # the types generation, and the added types as of it


def check_job_type_name(name: str) -> None:
    """A type addJobType may add: 1..100 of A-Z a-z 0-9 _ . : - (BAD_USER_INPUT naming `type`)."""
    if not JOB_TYPE_NAME.fullmatch(name):
        raise BadInput("type: a job type is 1 to 100 characters of A-Z a-z 0-9 _ . : -")


class Allowlist:
    def __init__(self, configured: Iterable[str], repository: Repository) -> None:
        self.configured = frozenset(configured)
        self._repository = repository
        self._types = self.configured
        self._added: tuple[str, ...] = ()
        self._generation: int | None = None  # of the added types held; None: never read
        # A read under way, and the types generation it is sure to see (at least).
        self._reading: tuple[int, asyncio.Future[AddedTypes]] | None = None
        self._misses = Recent(repository.added_job_types, MISS_READ_SECONDS)

    @property
    def types(self) -> frozenset[str]:
        """The allowlist as last read (`current` brings it up to date)."""
        return self._types

    @property
    def added(self) -> tuple[str, ...]:
        """The added types as last read, in name order."""
        return self._added

    async def current(self, wanted: Collection[str] = (), *, fresh: bool = False) -> frozenset[str]:
        """The allowlist now: read again when the types generation has moved since the last
        read, and looked up before a type of `wanted` is found missing from it. `fresh`: read
        the generation now (a caller that has not just read it with its key)."""
        if fresh:
            await self._repository.refresh_key_generation()
        needed = self._repository.types_generation()
        if self._generation is None or self._generation < needed:
            return await self._read_since(needed)
        if self._types.issuperset(wanted):
            return self._types
        return self._install(await self._misses.get())

    async def _read_since(self, needed: int) -> frozenset[str]:
        """Read the added types, sharing a read under way that is sure to see `needed`: the
        requests that all learn of one change at once make one read between them."""
        reading = self._reading
        if reading is None or reading[0] < needed or reading[1].done():
            reading = (needed, asyncio.ensure_future(self._repository.added_job_types()))
            self._reading = reading
        return self._install(await asyncio.shield(reading[1]))

    def _install(self, read: AddedTypes) -> frozenset[str]:
        """The allowlist as of `read`, which becomes the one held unless a newer one is."""
        generation, names = read
        types = self.configured.union(names)
        # Reads that overlap may end in any order: an older one never replaces a newer one.
        if self._generation is None or generation >= self._generation:
            self._generation, self._added, self._types = generation, tuple(names), types
        return types

    def check(self, job_type: str, allowed: frozenset[str], field: str = "type") -> None:
        """Refuse a type outside `allowed` (what `current` answered), as for any unknown type."""
        if not allowed:
            raise BadInput(
                f"no job types are allowed: set {env_name('job_types')} on the server,"
                " or add one with addJobType"
            )
        if job_type not in allowed:
            raise BadInput(f"job type {echo(job_type)} is not allowed")
