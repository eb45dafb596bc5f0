"""The HTTP surface around GraphQL: GraphiQL on GET, CORS for browser frontends, /healthz.

Proven against real `queuelog serve` processes:
- GET /graphql with a browser's Accept header serves GraphiQL, with no key needed (it
  runs nothing), and QUEUELOG_GRAPHIQL=false turns it off;
- CORS: with QUEUELOG_CORS_ORIGINS empty no origin is granted; with an origin listed, its
  preflight allows the Authorization header and its responses carry the grant, while
  other origins get none;
- /healthz says ok without a key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
from conftest import Server, serving

ALLOWED = "https://app.example"
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


@pytest.fixture(scope="module")
def cors_server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory, cors_origins=ALLOWED) as running:
        yield running


def preflight(server: Server, origin: str) -> httpx.Response:
    return httpx.options(
        server.graphql_url,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
        },
        timeout=10,
    )


def post_from(server: Server, origin: str) -> httpx.Response:
    return httpx.post(
        server.graphql_url,
        json={"query": "{ me { name } }"},
        headers={"Origin": origin, "Authorization": f"Bearer {server.admin_key}"},
        timeout=10,
    )


def test_graphiql_is_served_on_get_without_a_key(server: Server) -> None:
    response = httpx.get(server.graphql_url, headers={"Accept": BROWSER_ACCEPT}, timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert "graphiql" in response.text.lower()


def test_graphiql_can_be_turned_off(start_server: Callable[..., Server]) -> None:
    server = start_server(graphiql=False)
    response = httpx.get(server.graphql_url, headers={"Accept": BROWSER_ACCEPT}, timeout=10)
    assert response.status_code == 404
    assert "graphiql" not in response.text.lower()
    assert server.gql("{ me { name } }").ok()["me"]["name"] == "admin", "POST still works"


def test_the_dashboard_is_served_at_the_root_and_can_be_turned_off(
    server: Server, start_server: Callable[..., Server]
) -> None:
    page = httpx.get(server.url + "/", headers={"Accept": BROWSER_ACCEPT}, timeout=10)
    assert page.status_code == 200 and 'name="key"' in page.text
    off = start_server(dashboard=False)
    response = httpx.get(off.url + "/", headers={"Accept": BROWSER_ACCEPT}, timeout=10)
    assert response.status_code == 404
    assert 'name="key"' not in response.text
    assert off.gql("{ me { name } }").ok()["me"]["name"] == "admin", "the API still works"


def test_no_origin_is_granted_by_default(server: Server) -> None:
    assert "access-control-allow-origin" not in preflight(server, ALLOWED).headers
    response = post_from(server, ALLOWED)
    assert "access-control-allow-origin" not in response.headers


def test_a_listed_origin_may_call_with_its_key(cors_server: Server) -> None:
    allowed = preflight(cors_server, ALLOWED)
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == ALLOWED
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    response = post_from(cors_server, ALLOWED)
    assert response.headers["access-control-allow-origin"] == ALLOWED
    assert response.json()["data"]["me"]["name"] == "admin"


@pytest.mark.parametrize("origin", ["https://evil.example", "https://app.example.evil.example"])
def test_other_origins_are_not_granted(cors_server: Server, origin: str) -> None:
    refused = preflight(cors_server, origin)
    assert refused.status_code == 400
    assert "access-control-allow-origin" not in refused.headers
    assert "access-control-allow-origin" not in post_from(cors_server, origin).headers


def test_healthz_needs_no_key(server: Server) -> None:
    response = httpx.get(f"{server.url}/healthz", timeout=10)
    assert (response.status_code, response.json()) == (200, {"status": "ok"})
