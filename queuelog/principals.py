"""Who is calling: the principal behind an `Authorization: Bearer <key>` value.

Principals are cached in memory by key hash, so most requests cost no key lookup. The
cache is dropped whenever the database's keys generation moves (a trigger bumps it on
every revoke or change of a key, whichever process or tool made it), and that generation
is read on every request: one indexed single-row read, so a revoke takes effect on the
very next request on every server process. A lookup is cached only if the generation has
not moved while it ran (it may have read the key as it was before a revoke).
"""

from __future__ import annotations

from queuelog.auth import Principal, bearer_token, hash_key
from queuelog.storage.repository import Repository

MAX_CACHED_PRINCIPALS = 10_000


class Authenticator:
    def __init__(self, repository: Repository) -> None:
        self._repository = repository
        self._principals: dict[str, Principal] = {}
        self._generation: int | None = None

    def generation(self) -> int:
        """The keys generation as of now; the cache is dropped whenever it has moved."""
        return self._moved_to(self._repository.key_generation())

    async def refresh(self) -> int:
        """`generation`, read from the database now on every backend."""
        return self._moved_to(await self._repository.refresh_key_generation())

    def _moved_to(self, generation: int) -> int:
        if generation != self._generation:
            self._principals.clear()
            self._generation = generation
        return generation

    async def principal_for(self, authorization: str | None) -> Principal | None:
        principal, _ = await self.authenticate(authorization)
        return principal

    async def authenticate(self, authorization: str | None) -> tuple[Principal | None, int]:
        """The principal behind `authorization` (None without a valid key), and the keys
        generation read before its key was looked up: the answer holds as of that generation,
        so a check against any later one must look the key up again."""
        token = bearer_token(authorization)
        if token is None:
            return None, self._generation or 0
        generation = await self.refresh()
        key_hash = hash_key(token)
        principal = self._principals.get(key_hash)
        if principal is None:
            key = await self._repository.find_active_key(key_hash)
            if key is None:
                return None, generation  # unknown keys are not cached: they cost one lookup each
            principal = Principal.from_key(key)
            # A key changed while it was looked up (the generation moved) may have been read
            # as it was before: cached, that answer would outlive a revoke.
            if self._generation == generation:
                if len(self._principals) >= MAX_CACHED_PRINCIPALS:
                    self._principals.clear()
                self._principals[key_hash] = principal
        return principal, generation
