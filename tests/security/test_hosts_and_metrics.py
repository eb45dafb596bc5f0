"""Issue 14, part 3: /metrics (and the rest) readable through DNS rebinding.

Attacked, on a server with QUEUELOG_ALLOWED_HOSTS set and QUEUELOG_METRICS_TOKEN set (from the
environment, as recommended): requests whose `Host` is not listed (a rebound name, near misses
of a listed name or wildcard, `localhost`, the bare parent of a wildcard, the name a `www.`
entry would redirect from) to /metrics, /healthz, the dashboard, GraphiQL, an unknown path,
a CORS preflight from an origin CORS allows, POST /graphql without Origin (the short lane,
with a real admin key and a mutation) and with one, and the websocket; /metrics without a
token, with a wrong or near-miss token, another scheme, or an API key; the metrics token used
as an API key; malformed host patterns.

Proven: every unlisted Host gets 400 (never a redirect) and nothing runs, the websocket
handshake is refused with 400; listed hosts (any case, with a port) and wildcard matches are
served; without the setting any Host is served, as before. /metrics answers 401 with
`WWW-Authenticate: Bearer` unless the token is sent as a bearer token, and the token opens
nothing else. /metrics (200 and 401), /healthz and the 401 of /graphql say
`X-Content-Type-Options: nosniff`. A malformed host pattern stops `queuelog serve` with one line.

SQLite only: both checks run in front of every route, before any database access, so the
backend changes nothing they decide; /metrics and /healthz bodies are covered on both backends
by api/test_lifecycle.py and storage/test_counters.py.
"""

from __future__ import annotations

import json
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from cli.test_cli import cli
from conftest import Server, serving
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from queuelog.settings import Settings, SettingsError

TOKEN = "metrics-" + secrets.token_urlsafe(24)
LISTED = "queue.example.com"
# 127.0.0.1: the name the test harness (and a local Prometheus scraping by IP) connects with.
ALLOWED_HOSTS = f"127.0.0.1,{LISTED},*.apps.example.com,www.example.org"
# A frontend allowed by CORS: its preflight would pass CORS, so only the host check refuses it.
FRONTEND = "https://app.example.com"
ENQUEUE = 'mutation { enqueueJob(input: {type: "email"}) { job { id } } }'
ME = "{ me { name } }"
WS_PROTOCOL = "graphql-transport-ws"

UNLISTED_HOSTS = [
    "evil.example",
    f"{LISTED}.evil.example",
    f"evil{LISTED}",
    "localhost",
    "127.0.0.2",
    "apps.example.com",  # a wildcard covers the names under it, not its parent
    "evilapps.example.com",
    "example.org",  # TrustedHostMiddleware would redirect this to www.example.org by default
]
LISTED_HOSTS = [LISTED, "QUEUE.Example.COM", f"{LISTED}:8443", "a.apps.example.com", "b.c.apps.example.com"]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env = {"QUEUELOG_METRICS_TOKEN": TOKEN}
    hosts = {"allowed_hosts": ALLOWED_HOSTS, "cors_origins": FRONTEND}
    with serving("sqlite", tmp_path_factory, env=env, **hosts) as running:
        yield running


@pytest.fixture(scope="module")
def unguarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving("sqlite", tmp_path_factory) as running:
        yield running


def send(server: Server, method: str, path: str, host: str, **kwargs: Any) -> httpx.Response:
    """One request to the server's socket, whatever name `host` claims to be."""
    headers = {"Host": host, **kwargs.pop("headers", {})}
    return httpx.request(method, server.url + path, headers=headers, timeout=30, **kwargs)


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def job_count(server: Server) -> int:
    return server.sql("SELECT count(*) FROM jobs")[0][0]


def ws_handshake(server: Server, host: str, key: str) -> dict[str, Any]:
    """Open the websocket to the server's socket as `host` and send connection_init with `key`;
    the server's first message."""
    port = urlsplit(server.url).port
    netloc = host if ":" in host else f"{host}:{port}"  # the Host header the client sends
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as sock,
        connect(f"ws://{netloc}/graphql", sock=sock, subprotocols=[WS_PROTOCOL], open_timeout=10) as ws,
    ):
        ws.send(json.dumps({"type": "connection_init", "payload": {"authorization": f"Bearer {key}"}}))
        return json.loads(ws.recv(timeout=10))


# name -> (method, path, extra request arguments given the server)
ROUTES: dict[str, tuple[str, str, Any]] = {
    "metrics": ("GET", "/metrics", lambda s: {"headers": bearer(TOKEN)}),
    "healthz": ("GET", "/healthz", lambda s: {}),
    "dashboard": ("GET", "/", lambda s: {}),
    "graphiql": ("GET", "/graphql", lambda s: {}),
    "unknown-path": ("GET", "/no-such-path", lambda s: {}),
    "cors-preflight": (
        "OPTIONS",
        "/graphql",
        lambda s: {"headers": {"Origin": FRONTEND, "Access-Control-Request-Method": "POST"}},
    ),
    "graphql-post-short-lane": (
        "POST",
        "/graphql",
        lambda s: {"headers": bearer(s.admin_key), "json": {"query": ENQUEUE}},
    ),
    "graphql-post-with-origin": (
        "POST",
        "/graphql",
        lambda s: {
            "headers": {**bearer(s.admin_key), "Origin": FRONTEND},
            "json": {"query": ENQUEUE},
        },
    ),
}


@pytest.mark.parametrize("host", UNLISTED_HOSTS)
@pytest.mark.parametrize("route", ROUTES.values(), ids=ROUTES.keys())
def test_an_unlisted_host_gets_400_on_every_path(guarded: Server, route: tuple, host: str) -> None:
    method, path, arguments = route
    before = job_count(guarded)
    response = send(guarded, method, path, host, **arguments(guarded))
    assert response.status_code == 400, (response.status_code, response.headers, response.text[:300])
    assert "location" not in response.headers
    assert "queuelog_jobs" not in response.text
    assert job_count(guarded) == before, "a request from an unlisted host ran"


@pytest.mark.parametrize("host", ["evil.example", "localhost", "example.org"])
def test_a_websocket_from_an_unlisted_host_is_refused(guarded: Server, host: str) -> None:
    with pytest.raises(InvalidStatus) as refused:
        ws_handshake(guarded, host, guarded.admin_key)
    assert refused.value.response.status_code == 400


@pytest.mark.parametrize("host", LISTED_HOSTS)
def test_listed_hosts_and_wildcard_matches_are_served(guarded: Server, host: str) -> None:
    lane = send(guarded, "POST", "/graphql", host, headers=bearer(guarded.admin_key), json={"query": ME})
    assert lane.status_code == 200 and lane.json()["data"] == {"me": {"name": "admin"}}, lane.text
    with_origin = {**bearer(guarded.admin_key), "Origin": f"http://{host}"}
    browser = send(guarded, "POST", "/graphql", host, headers=with_origin, json={"query": ME})
    assert browser.status_code == 200 and browser.json()["data"] == {"me": {"name": "admin"}}, browser.text
    assert send(guarded, "GET", "/healthz", host).json() == {"status": "ok"}
    assert send(guarded, "GET", "/metrics", host, headers=bearer(TOKEN)).status_code == 200
    assert ws_handshake(guarded, host, guarded.admin_key)["type"] == "connection_ack"


@pytest.mark.parametrize("host", ["evil.example", "localhost", LISTED])
def test_without_allowed_hosts_any_host_is_served(unguarded: Server, host: str) -> None:
    lane = send(unguarded, "POST", "/graphql", host, headers=bearer(unguarded.admin_key), json={"query": ME})
    assert lane.status_code == 200 and lane.json()["data"] == {"me": {"name": "admin"}}, lane.text
    assert send(unguarded, "GET", "/healthz", host).json() == {"status": "ok"}
    metrics = send(unguarded, "GET", "/metrics", host)  # no token set: no key needed
    assert metrics.status_code == 200 and "queuelog_jobs{" in metrics.text
    assert ws_handshake(unguarded, host, unguarded.admin_key)["type"] == "connection_ack"


# name -> the Authorization header (None: no header), given the server
WRONG_CREDENTIALS: dict[str, Any] = {
    "no-header": lambda s: None,
    "empty": lambda s: "",
    "bearer-without-token": lambda s: "Bearer",
    "wrong-token": lambda s: "Bearer not-the-token",
    "token-plus-char": lambda s: f"Bearer {TOKEN}x",
    "token-truncated": lambda s: f"Bearer {TOKEN[:-1]}",
    "token-without-scheme": lambda s: TOKEN,
    "token-as-basic": lambda s: f"Basic {TOKEN}",
    "admin-api-key": lambda s: f"Bearer {s.admin_key}",
    "non-ascii": lambda s: "Bearer t\u00e9st".encode("latin-1"),
}


@pytest.mark.parametrize("credentials", WRONG_CREDENTIALS.values(), ids=WRONG_CREDENTIALS.keys())
def test_metrics_without_the_token_is_401(guarded: Server, credentials: Any) -> None:
    authorization = credentials(guarded)
    headers = {} if authorization is None else {"Authorization": authorization}
    response = httpx.get(f"{guarded.url}/metrics", headers=headers, timeout=30)
    assert response.status_code == 401, (response.status_code, response.text[:300])
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert "queuelog_" not in response.text


@pytest.mark.parametrize("scheme", ["Bearer", "bearer"])  # auth schemes are case-insensitive
def test_metrics_with_the_token_is_the_prometheus_text(guarded: Server, scheme: str) -> None:
    response = httpx.get(f"{guarded.url}/metrics", headers={"Authorization": f"{scheme} {TOKEN}"}, timeout=30)
    assert response.status_code == 200, response.text[:300]
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert response.headers["x-content-type-options"] == "nosniff"
    assert 'queuelog_jobs{status="pending"}' in response.text


def test_the_metrics_token_is_no_api_key(guarded: Server) -> None:
    response = guarded.gql(ME, key=TOKEN)
    assert response.status == 401 and response.codes == ["UNAUTHENTICATED"], response.body


def test_other_json_answers_say_nosniff(unguarded: Server) -> None:
    assert httpx.get(f"{unguarded.url}/metrics", timeout=30).headers["x-content-type-options"] == "nosniff"
    assert httpx.get(f"{unguarded.url}/healthz", timeout=30).headers["x-content-type-options"] == "nosniff"
    refused = httpx.post(unguarded.graphql_url, json={"query": ME}, timeout=30)
    assert refused.status_code == 401 and refused.headers["x-content-type-options"] == "nosniff"


def test_serve_help_shows_both_flags_and_prefers_the_variable_for_the_token(tmp_path: Path) -> None:
    shown = " ".join(cli("serve", "--help", cwd=tmp_path).stdout.split())
    assert "--allowed-hosts ALLOWED_HOSTS default: $QUEUELOG_ALLOWED_HOSTS or (empty)" in shown
    assert "--metrics-token METRICS_TOKEN default: $QUEUELOG_METRICS_TOKEN or (empty)" in shown
    assert "prefer $QUEUELOG_METRICS_TOKEN: a flag's value shows in ps" in shown


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("foo*.example.com", "wildcards look like *.example.com"),
        ("*example.com", "wildcards look like *.example.com"),
        ("queue.example.com:8000", "no port here (IPv6 in brackets: [::1])"),
        ("::1", "no port here (IPv6 in brackets: [::1])"),
    ],
)
def test_a_malformed_host_pattern_is_refused_naming_the_variable(pattern: str, message: str) -> None:
    with pytest.raises(SettingsError) as refused:
        Settings(allowed_hosts=("a.example", pattern))
    assert str(refused.value) == f"QUEUELOG_ALLOWED_HOSTS: {pattern!r}: {message}"


def test_a_malformed_host_pattern_stops_serve_with_one_line(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'queuelog.db'}"
    ran = cli("serve", "--database-url", database, "--allowed-hosts", "*example.com", cwd=tmp_path)
    assert ran.returncode == 1, (ran.stdout, ran.stderr)
    assert not (tmp_path / "queuelog.db").exists()  # refused before the database is touched
    expected = "queuelog: error: QUEUELOG_ALLOWED_HOSTS: '*example.com': wildcards look like *.example.com"
    assert ran.stderr.strip() == expected
