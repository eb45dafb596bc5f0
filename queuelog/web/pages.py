"""The two pages and their assets, each answered with a strict Content-Security-Policy."""

from __future__ import annotations

import asyncio
import functools
import gzip
import hashlib
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from queuelog.settings import Settings

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
TEMPLATES = HERE / "templates"

# Scripts and styles only from this origin, no inline script, no eval; data: only for the
# fonts and icons GraphiQL's stylesheet embeds. 'self' in connect-src covers ws:/wss: to this
# host (CSP level 3). Forms never submit anywhere (the key box is handled in script, and
# must never land in a URL even if scripts fail), and no one may frame the pages.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-store",
}
CONTENT_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".md": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
}
GZIP_MIN_BYTES = 1024


def _page(name: str, settings: Settings) -> str:
    """A template, with links to the pages that are on (the page itself marked current)."""
    links = []
    for href, title, on in (
        ("/", "Dashboard", settings.dashboard),
        ("/graphql", "GraphiQL", settings.graphiql),
    ):
        if on:
            current = ' aria-current="page"' if name.startswith(title.lower()) else ""
            links.append(f'<a href="{href}"{current}>{title}</a>')
    return (TEMPLATES / name).read_text().replace("<!--nav-->", " ".join(links))


@functools.cache
def _graphiql_html(settings: Settings) -> str:
    return _page("graphiql.html", settings)


def graphiql_page(settings: Settings) -> HTMLResponse:
    return HTMLResponse(_graphiql_html(settings), headers=PAGE_HEADERS)


@dataclass(frozen=True)
class Asset:
    body: bytes
    gzipped: bytes | None
    etag: str
    content_type: str


class Assets:
    """The files under static/, read (and gzipped) on first use and then held in memory."""

    def __init__(self, root: Path) -> None:
        self.paths = {
            path.relative_to(root).as_posix(): path
            for path in root.rglob("*")
            if path.is_file() and path.suffix in CONTENT_TYPES
        }
        self.loaded: dict[str, Asset] = {}

    def load(self, name: str) -> Asset:
        path = self.paths[name]
        body = path.read_bytes()
        packed = gzip.compress(body, 6, mtime=0) if len(body) >= GZIP_MIN_BYTES else None
        asset = Asset(
            body,
            packed if packed is not None and len(packed) < len(body) else None,
            '"' + hashlib.sha256(body).hexdigest()[:32] + '"',
            CONTENT_TYPES[path.suffix],
        )
        self.loaded[name] = asset
        return asset

    async def endpoint(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in self.paths:
            return Response("Not Found", status_code=404, media_type="text/plain")
        # Off the event loop: gzipping GraphiQL's bundle takes a few hundred milliseconds,
        # which waiting claims and heartbeats on this loop must not feel.
        asset = self.loaded.get(name)
        if asset is None:
            asset = await asyncio.to_thread(self.load, name)
        headers = {
            "ETag": asset.etag,
            "Cache-Control": "no-cache",
            "X-Content-Type-Options": "nosniff",
            "Cross-Origin-Resource-Policy": "same-origin",
            "Vary": "Accept-Encoding",
        }
        if asset.etag in request.headers.get("if-none-match", ""):
            return Response(status_code=304, headers=headers)
        body = asset.body
        if asset.gzipped is not None and "gzip" in request.headers.get("accept-encoding", ""):
            body = asset.gzipped
            headers["Content-Encoding"] = "gzip"
        return Response(body, headers=headers, media_type=asset.content_type)


def routes(settings: Settings) -> list[BaseRoute]:
    """`/static/...` whenever a page is on, and the dashboard at `/` unless QUEUELOG_DASHBOARD
    is off. GraphiQL itself stays at GET /graphql (see graphiql_page)."""
    dashboard = settings.dashboard
    if not (dashboard or settings.graphiql):
        return []
    assets = Assets(STATIC)
    found: list[BaseRoute] = [Route("/static/{name:path}", assets.endpoint, methods=["GET", "HEAD"])]
    if dashboard:
        html = _page("dashboard.html", settings)

        async def dashboard_page(request: Request) -> Response:
            return HTMLResponse(html, headers=PAGE_HEADERS)

        found.append(Route("/", dashboard_page, methods=["GET", "HEAD"]))
    return found
