"""`PlainHTTP`: the worker's hot calls over aiohttp, for plain `http` URLs."""

from __future__ import annotations

import urllib.request
from urllib.parse import urlsplit

import aiohttp

from queuelog.sdk.wire import ServerUnreachable

# A kept-alive connection idle longer than this is not reused: the server may be closing
# it (uvicorn's keep-alive timeout is 5 s), and a request sent into that would be lost.
PLAIN_HTTP_REUSE_SECONDS = 2.0
PLAIN_HTTP_CONNECTIONS = 64


class PlainHTTP:
    """POSTs of JSON to one plain-`http` URL, through one aiohttp session (connections kept
    alive): the worker's `claimJobs`, `completeJobs` and `completeAndClaimJobs`.

    Not httpx (transport.HttpxTransport, every other call): through httpx the worker spends
    about 2.7x the CPU per job and drains about 0.75x the jobs a second (bench/README.md,
    "What the compiled path and the worker's HTTP client buy"). Plain `http` only, with no
    proxy and no credentials in the URL (`usable`). A request that fails or is cancelled
    closes its connection, so a long-polling claim abandoned that way is dropped by the
    server unclaimed. An idle connection is not reused after PLAIN_HTTP_REUSE_SECONDS, nor
    once the server has closed it.

    Resends. A request goes out once, unless the caller passes `idempotent=True`: then, if
    its connection fails before an answer comes whole, it is sent once more on a new
    connection. The server may have applied the first copy, so only requests safe to repeat
    are marked so: `completeJobs`, whose items carry the attempt, so that a second copy
    changes nothing and comes back with those items rejected. A claim is never resent: a
    second copy would claim more jobs while the first copy's stayed RUNNING under this worker,
    unseen, until their lease expired (the worker takes those over instead). aiohttp itself
    never repeats a POST.
    """

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"not a plain http URL: {url}")
        self.url = url
        self._headers = headers | {"Content-Type": "application/json", "Accept": "application/json"}
        self._session: aiohttp.ClientSession | None = None

    @staticmethod
    def usable(url: str) -> bool:
        """A plain http URL, without credentials in it, that no proxy setting of the environment
        applies to."""
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or parts.username is not None:
            return False
        proxies = urllib.request.getproxies()
        if not (proxies.get("http") or proxies.get("all")):
            return True
        return bool(urllib.request.proxy_bypass(parts.hostname))

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:  # here, not in __init__: a session belongs to a running loop
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                connector=aiohttp.TCPConnector(
                    limit=PLAIN_HTTP_CONNECTIONS, keepalive_timeout=PLAIN_HTTP_REUSE_SECONDS
                ),
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                trust_env=False,  # `usable` sent anything a proxy would apply to through httpx
            )
        return self._session

    async def post(self, body: bytes, timeout: float, *, idempotent: bool = False) -> tuple[int, bytes]:
        """Send one POST; returns (status, body). ServerUnreachable when there is no proper
        answer. Only an `idempotent` request is sent a second time (see the class's docstring)."""
        try:
            return await self._post(body, timeout, 2 if idempotent else 1)
        except (aiohttp.ClientError, OSError, ValueError, TimeoutError) as exc:
            raise ServerUnreachable(f"{type(exc).__name__}: {exc}") from exc

    async def _post(self, body: bytes, timeout: float, tries: int) -> tuple[int, bytes]:
        session = self._open()
        for attempt in range(1, tries + 1):
            try:
                async with session.post(
                    self.url, data=body, timeout=aiohttp.ClientTimeout(total=timeout)
                ) as response:
                    return response.status, await response.read()
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, aiohttp.ClientPayloadError):
                if attempt == tries:
                    raise
        raise AssertionError("not reached")

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
