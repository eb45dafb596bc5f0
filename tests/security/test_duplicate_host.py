"""Two Host headers: the host check read the first, so a listed name first and any other
second was served (200), while a proxy in front, or a log, could go by the second.

Attacked, over raw sockets (clients refuse to send two Host headers): requests with two Host
headers (listed then unlisted, unlisted then listed, the same listed name twice, two listed
names) on a server with QUEUELOG_ALLOWED_HOSTS set and on one without it, to the short lane
(POST /graphql without Origin, with an admin key and an enqueue), POST /graphql with an
Origin, /healthz, /metrics, the dashboard, and the websocket handshake.

Proven: each is refused with 400 (RFC 9112, section 3.2) and runs nothing (no job is
enqueued); one Host header is served as before on both servers (positive control).

SQLite only: the check runs in front of every route, before any database access, so the
backend changes nothing it decides.
"""

from __future__ import annotations

import base64
import json
import os
import socket
from collections.abc import Iterator, Sequence
from urllib.parse import urlsplit

import pytest
from conftest import Server, serving

LISTED = "queue.example.com"
ENQUEUE = json.dumps({"query": 'mutation { enqueueJob(input: {type: "email"}) { job { id } } }'}).encode()
HOST_PAIRS = {
    "listed-then-unlisted": (LISTED, "evil.example"),
    "unlisted-then-listed": ("evil.example", LISTED),
    "same-listed-twice": (LISTED, LISTED),
    "two-listed": (LISTED, "127.0.0.1"),
}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving("sqlite", tmp_path_factory, allowed_hosts=f"127.0.0.1,{LISTED}") as running:
        yield running


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving("sqlite", tmp_path_factory) as running:
        yield running


def raw_request(
    server: Server,
    method: str,
    path: str,
    hosts: Sequence[str],
    headers: Sequence[str] = (),
    body: bytes = b"",
) -> tuple[int, bytes]:
    """Send one HTTP/1.1 request with these Host headers; the status and the whole answer."""
    port = urlsplit(server.url).port
    assert port is not None
    upgrade = any(header.startswith("Connection:") for header in headers)
    lines = [f"{method} {path} HTTP/1.1", *(f"Host: {host}" for host in hosts), *headers]
    if not upgrade:
        lines.append("Connection: close")
    if body:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
            if upgrade and b"\r\n\r\n" in answer:
                break  # a websocket that opened stays open: its handshake answer is enough
    status = int(answer.split(b" ", 2)[1])
    return status, answer


def websocket_headers() -> list[str]:
    key = base64.b64encode(os.urandom(16)).decode()
    return [
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Protocol: graphql-transport-ws",
    ]


def attempts(server: Server) -> dict[str, tuple[str, str, list[str], bytes]]:
    bearer = f"Authorization: Bearer {server.admin_key}"
    return {
        "short lane": ("POST", "/graphql", [bearer], ENQUEUE),
        "with origin": ("POST", "/graphql", [bearer, f"Origin: http://{LISTED}"], ENQUEUE),
        "healthz": ("GET", "/healthz", [], b""),
        "metrics": ("GET", "/metrics", [], b""),
        "dashboard": ("GET", "/", [], b""),
        "websocket": ("GET", "/graphql", websocket_headers(), b""),
    }


def job_count(server: Server) -> int:
    return server.sql("SELECT count(*) FROM jobs")[0][0]


@pytest.mark.parametrize("hosts", HOST_PAIRS.values(), ids=HOST_PAIRS.keys())
@pytest.mark.parametrize("which", ["guarded", "unguarded"])
def test_two_host_headers_are_refused_with_400(
    request: pytest.FixtureRequest, which: str, hosts: tuple[str, str]
) -> None:
    server: Server = request.getfixturevalue(which)
    before = job_count(server)
    for name, (method, path, headers, body) in attempts(server).items():
        status, answer = raw_request(server, method, path, hosts, headers, body)
        assert status == 400, (name, answer[:300])
        assert b"jobs" not in answer.split(b"\r\n\r\n", 1)[-1], (name, answer[:300])
    assert job_count(server) == before, "a request with two Host headers ran"


@pytest.mark.parametrize("which", ["guarded", "unguarded"])
def test_one_host_header_is_served(request: pytest.FixtureRequest, which: str) -> None:
    server: Server = request.getfixturevalue(which)
    before = job_count(server)
    expected = {"short lane": 200, "with origin": 200, "healthz": 200, "metrics": 200, "dashboard": 200}
    for name, (method, path, headers, body) in attempts(server).items():
        status, answer = raw_request(server, method, path, [LISTED], headers, body)
        assert status == expected.get(name, 101), (name, answer[:300])
    assert job_count(server) == before + 2
