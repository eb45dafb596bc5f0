"""GraphiQL and the dashboard in a real browser (issue 8): Debian's chromium driven by playwright.

One `queuelog serve` (SQLite) and one browser for the module; each test gets a fresh
browser context, so a fresh sessionStorage. Every request that is not to 127.0.0.1 is
aborted and recorded, and each test ends by asserting that none was attempted, that no
Content-Security-Policy violation and no uncaught script error happened. A failing test
leaves a screenshot (its path is printed). axe-core (tests/vendor/, for the tests only)
checks the pages for serious accessibility violations.

Without playwright or /usr/bin/chromium the browser tests skip and say why, unless
QUEUELOG_TEST_REQUIRE_BROWSER=1 (CI), where they fail; the first test (headers, over plain
HTTP) runs either way.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest
from conftest import DEFAULT_JOB_TYPES, Server, launch_server

from queuelog import keys as key_admin
from queuelog.storage.engine import create_sync_engine
from queuelog.web.pages import STATIC

CHROMIUM = "/usr/bin/chromium"
REQUIRE_BROWSER = os.environ.get("QUEUELOG_TEST_REQUIRE_BROWSER") == "1"
AXE = Path(__file__).parents[1] / "vendor" / "axe.min.js"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
]
LOCAL = re.compile(r"^(https?|wss?)://127\.0\.0\.1[:/]")
NOT_LOCAL_WS = re.compile(r"^wss?://(?!127\.0\.0\.1[:/])")
LOCAL_WS = re.compile(r"^ws://127\.0\.0\.1[:/]")
DOOMED = "doomed"  # a job type only the failing helper claims


def _missing_browser() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing (apt-get install -y chromium)"
    return None


MISSING = _missing_browser()
if MISSING and REQUIRE_BROWSER:
    raise RuntimeError(f"{MISSING}, and QUEUELOG_TEST_REQUIRE_BROWSER=1")
if MISSING is None:
    from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

    # Playwright's 5 s default wait is too short on a loaded 2-core CI machine (six xdist
    # workers, their servers, PostgreSQL and chromium): waits that passed alone ran out there.
    # A wait ends as soon as its condition holds, so a longer ceiling costs nothing when green.
    expect.set_options(timeout=15_000)


# ---- fixtures ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = launch_server(
        tmp_path_factory.mktemp("browser"), job_types=f"{DEFAULT_JOB_TYPES},{DOOMED}", retry_base_seconds=0
    )
    yield running
    running.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if MISSING is not None:
        pytest.skip(MISSING)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@dataclass
class Watch:
    """What a page did that it must not: requests elsewhere, CSP violations, script errors."""

    outside: list[str] = field(default_factory=list)
    csp: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    posted: list[str] = field(default_factory=list)  # GraphQL documents sent over HTTP
    ws_sent: list[str] = field(default_factory=list)  # frames sent over the websocket


@dataclass
class Tab:
    page: Page
    context: BrowserContext
    watch: Watch
    server: Server

    def open(self, path: str = "/") -> Page:
        self.page.goto(self.server.url + path)
        return self.page

    def sign_in(self, key: str, path: str = "/") -> Page:
        page = self.open(path)
        page.fill("input[name=key]", key)
        page.press("input[name=key]", "Enter")
        expect(page.locator("#app")).to_be_visible()
        return page

    def row(self, job_id: str) -> Any:
        return self.page.locator(f'tr[data-job-id="{job_id}"]')


def watch_context(context: BrowserContext, watch: Watch) -> None:
    def route(route: Any) -> None:
        if LOCAL.match(route.request.url):
            route.continue_()
        else:
            watch.outside.append(route.request.url)
            route.abort()

    def outside_socket(socket: Any) -> None:
        watch.outside.append(socket.url)
        socket.close()

    context.route("**/*", route)
    context.route_web_socket(NOT_LOCAL_WS, outside_socket)


def watch_page(page: Page, watch: Watch) -> None:
    def console(message: Any) -> None:
        if "Content Security Policy" in message.text:
            watch.csp.append(message.text)

    def request(request: Any) -> None:
        if request.method == "POST" and request.url.endswith("/graphql"):
            watch.posted.append(json.loads(request.post_data or "{}").get("query", ""))

    page.on("console", console)
    page.on("pageerror", lambda error: watch.errors.append(str(error)))
    page.on("request", request)
    page.on("websocket", lambda ws: ws.on("framesent", lambda frame: watch.ws_sent.append(str(frame))))


def screenshot_on_failure(page: Page, name: str, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (re.sub(r"[^\w.-]+", "_", name) + ".png")
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture
def tab(
    browser: Browser, web: Server, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Tab]:
    watch = Watch()
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, service_workers="block")
    context.set_default_timeout(10_000)
    watch_context(context, watch)
    page = context.new_page()
    watch_page(page, watch)
    failed_before = request.session.testsfailed
    yield Tab(page, context, watch, web)
    try:
        if request.session.testsfailed > failed_before:
            directory = tmp_path_factory.getbasetemp() / "screenshots"
            path = screenshot_on_failure(page, request.node.name, directory)
            reporter = request.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"\nscreenshot of the failed {request.node.name}: {path}")
        assert watch.outside == [], "requests left 127.0.0.1"
        assert watch.csp == [], "Content-Security-Policy violations"
        assert watch.errors == [], "uncaught script errors"
    finally:
        context.close()


# ---- the queue, through the API ---------------------------------------------------------

ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { job { id } } }"
THROUGHPUT = "{ queueStats { throughput(minutes: 31) { completed failed } } }"


def enqueue(server: Server, job_type: str = "email", **fields: Any) -> str:
    job = {"type": job_type, "payload": {"to": "a@example.com"}, **fields}
    return server.gql(ENQUEUE, {"input": job}).ok()["enqueueJob"]["job"]["id"]


def failed_job(server: Server, error: str) -> str:
    """A FAILED job whose error is `error` (older due DOOMED jobs, e.g. retried ones, fail too)."""
    worker = server.make_key(f"worker-{time.monotonic_ns()}", "worker")
    job_id = enqueue(server, DOOMED, maxRetries=0)
    claim = f'mutation {{ claimJob(types: ["{DOOMED}"]) {{ id }} }}'
    fail = "mutation($id: ID!, $e: String!) { failJob(id: $id, error: $e, retryable: false) { status } }"
    while True:
        claimed = server.gql(claim, key=worker).ok()["claimJob"]["id"]
        assert server.gql(fail, {"id": claimed, "e": error}, key=worker).ok()["failJob"]["status"] == "FAILED"
        if claimed == job_id:
            return job_id


def complete_one(server: Server) -> None:
    worker = server.make_key(f"worker-{time.monotonic_ns()}", "worker")
    job = server.gql("mutation { claimJob { id attempt } }", key=worker).ok()["claimJob"]
    done = "mutation($id: ID!, $a: Int) { completeJob(id: $id, attempt: $a) { status } }"
    assert server.gql(done, {"id": job["id"], "a": job["attempt"]}, key=worker).ok()["completeJob"]["status"]


def status_of(server: Server, job_id: str) -> str:
    return server.gql("query($id: ID!) { job(id: $id) { status } }", {"id": job_id}).ok()["job"]["status"]


PAGE = """query($status: JobStatus, $type: String, $after: String) {
  jobs(status: $status, type: $type, first: 25, after: $after) { nodes { id } pageInfo { endCursor } } }"""


def api_page(server: Server, **variables: Any) -> tuple[list[str], str]:
    """The ids of a page as the API gives them (the dashboard's page size), and its endCursor."""
    jobs = server.gql(PAGE, variables).ok()["jobs"]
    return [n["id"] for n in jobs["nodes"]], jobs["pageInfo"]["endCursor"]


def page_ids(server: Server, **variables: Any) -> list[str]:
    return api_page(server, **variables)[0]


def shown_ids(page: Page) -> list[str]:
    return page.locator("#jobs tr[data-job-id]").evaluate_all("rows => rows.map(r => r.dataset.jobId)")


def expect_rows(page: Page, ids: list[str], timeout_s: float = 5.0) -> None:
    """Wait until the table shows exactly these rows, in order. Waiting on the first row alone
    races: the newest job can head the list both before and after a filter applies."""
    deadline = time.monotonic() + timeout_s
    while shown_ids(page) != ids and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    assert shown_ids(page) == ids


def run_in_graphiql(page: Page, document: str) -> None:
    editor = page.locator(".graphiql-query-editor .CodeMirror")
    editor.evaluate("(element, text) => element.CodeMirror.setValue(text)", document)
    # GraphiQL parses the editor's text a moment later; its fetcher needs that parse to
    # send a subscription over the websocket.
    editor.evaluate(
        """(element, text) => new Promise((resolve) => {
            const parsed = () => element.CodeMirror.documentAST?.loc?.source?.body === text;
            const check = () => (parsed() ? resolve() : setTimeout(check, 20));
            check();
        })""",
        document,
    )
    page.click(".graphiql-execute-button")


STORED = "() => [localStorage, sessionStorage].flatMap(s => Object.keys(s).map(k => `${k}=${s.getItem(k)}`))"


def stored_entries(page: Page, marker: str) -> list[str]:
    """Every localStorage and sessionStorage entry (key=value) that holds `marker`."""
    return [entry for entry in page.evaluate(STORED) if marker in entry]


def run_marked_operation_in_graphiql(tab: Tab, marker: str) -> Page:
    """Sign in on GraphiQL and run an operation whose text and variables carry `marker`, then
    wait until GraphiQL has stored it (its tabs are written half a second after a change)."""
    page = tab.open("/graphql")
    page.fill("input[name=key]", tab.server.admin_key)
    page.press("input[name=key]", "Enter")
    expect(page.locator("#key-message")).to_contain_text("Using the key of admin")
    variables = page.locator('textarea[aria-label="Variables (JSON)"]')
    variables.evaluate(
        "(t, text) => t.closest('.CodeMirror').CodeMirror.setValue(text)", json.dumps({"note": marker})
    )
    run_in_graphiql(page, f"# {marker}\nquery Marked {{ me {{ name }} }}")
    expect(page.locator(".graphiql-response")).to_contain_text('"name": "admin"')
    deadline = time.monotonic() + 5
    while len(stored_entries(page, marker)) < 2 and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    return page


def editor_texts(page: Page) -> str:
    """What GraphiQL's editors hold: operation, variables, headers and response."""
    return page.locator(".CodeMirror").evaluate_all("es => es.map(e => e.CodeMirror.getValue()).join('\\n')")


def assert_graphiql_shows_no_trace(page: Page, marker: str) -> None:
    """GraphiQL, opened afresh: neither its editors nor its history hold `marker`."""
    page.goto(page.url.split("#")[0])
    expect(page.locator(".graphiql-container")).to_be_visible()
    editors = editor_texts(page)
    assert "query Overview" in editors and marker not in editors
    page.get_by_role("button", name="Show History").click()
    expect(page.locator(".graphiql-history")).to_be_visible()
    assert marker not in page.locator(".graphiql-history").inner_text()
    assert stored_entries(page, marker) == []


def axe_violations(page: Page) -> list[dict[str, Any]]:
    """Serious and critical axe-core violations (WCAG 2 A/AA rules) on the page as it is.

    One rule is left out inside GraphiQL's editors: CodeMirror's scroll box is not itself
    focusable, but the editor's own text area beside it takes the keyboard focus and
    scrolls it with the caret.
    """
    page.evaluate(AXE.read_text() + "\n;undefined")
    return page.evaluate(
        """async () => {
            const found = await axe.run(document, {runOnly: ['wcag2a', 'wcag2aa', 'best-practice']});
            const exempt = (v, n) => v.id === 'scrollable-region-focusable'
                && n.target.join(' ').includes('CodeMirror-scroll');
            return found.violations
                .filter(v => ['serious', 'critical'].includes(v.impact))
                .map(v => ({id: v.id, impact: v.impact,
                            nodes: v.nodes.filter(n => !exempt(v, n)).map(n => n.target.join(' '))}))
                .filter(v => v.nodes.length);
        }"""
    )


# ---- over plain HTTP --------------------------------------------------------------------


def assert_modules_served(web: Server, entries: set[str]) -> None:
    waiting, served = sorted(entries), set()
    while waiting:
        path = waiting.pop()
        if path in served:
            continue
        module = httpx.get(web.url + path, timeout=10)
        assert module.status_code == 200, path
        assert module.headers["content-type"] == "text/javascript; charset=utf-8", path
        assert module.headers["cache-control"] == "no-cache" and module.headers["etag"], path
        served.add(path)
        imported = re.findall(r'^import [^;]* from "(\.{1,2}/[^"]+)";$', module.text, re.MULTILINE)
        waiting.extend(urljoin(path, target) for target in imported)
    dashboard = {f"/static/dashboard/{module.name}" for module in (STATIC / "dashboard").glob("*.js")}
    assert dashboard and dashboard <= served, ("not imported by the page", dashboard - served)


def test_pages_and_assets_come_from_the_app_with_strict_headers(web: Server, tmp_path: Path) -> None:
    modules: set[str] = set()
    for path in ("/", "/graphql"):
        page = httpx.get(web.url + path, headers={"Accept": "text/html"}, timeout=10)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'self';" in policy and "unsafe" not in policy
        assert "form-action 'none'" in policy and "frame-ancestors 'none'" in policy
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["cache-control"] == "no-store"
        assert not re.search(r"<script(?![^>]*\bsrc=)", page.text), "no inline script"
        assert not re.search(r"\bstyle=", page.text), "no inline style"
        references = [r for r in re.findall(r'(?:src|href)="([^"]*)"', page.text) if r != "#"]
        assert references and all(r.startswith("/") and not r.startswith("//") for r in references)
        for reference in references:
            assert httpx.get(web.url + reference, timeout=10).status_code == 200, reference
        modules.update(re.findall(r'<script src="([^"]+)" type="module">', page.text))
    # Each module the pages import, and each one those import, is served as it is (no build
    # step) and cached as the rest of /static/ is: revalidated by its ETag.
    assert_modules_served(web, modules)

    script = web.url + "/static/vendor/graphiql.min.js"
    packed = httpx.get(script, headers={"Accept-Encoding": "gzip"}, timeout=10)
    assert packed.headers["content-encoding"] == "gzip"
    assert packed.headers["content-type"] == "text/javascript; charset=utf-8"
    assert int(packed.headers["content-length"]) < len(packed.content) / 2  # decoded by httpx
    again = httpx.get(script, headers={"If-None-Match": packed.headers["etag"]}, timeout=10)
    assert again.status_code == 304 and again.content == b""
    for hidden in ("/static/../pages.py", "/static/vendor/licenses/react-LICENSE", "/static/nothing.js"):
        assert httpx.get(web.url + hidden, timeout=10).status_code == 404, hidden

    off = launch_server(tmp_path, graphiql=False)
    try:
        dashboard = httpx.get(off.url + "/", timeout=10).text
        assert 'href="/graphql"' not in dashboard and 'name="key"' in dashboard
    finally:
        off.stop()


# ---- GraphiQL ---------------------------------------------------------------------------


def test_graphiql_loads_offline_sends_the_key_and_runs_a_query_and_a_subscription(tab: Tab) -> None:
    server = tab.server
    page = tab.open("/graphql")
    expect(page.locator(".graphiql-container")).to_be_visible()
    page.fill("input[name=key]", server.admin_key)
    page.press("input[name=key]", "Enter")
    expect(page.locator("#key-message")).to_contain_text("Using the key of admin")
    run_in_graphiql(page, "{ me { name roles } }")
    expect(page.locator(".graphiql-response")).to_contain_text('"name": "admin"')

    job_id = enqueue(server)
    run_in_graphiql(page, f'subscription {{ jobUpdated(id: "{job_id}") {{ id status }} }}')
    expect(page.locator(".graphiql-response")).to_contain_text('"status": "PENDING"')
    server.gql(f'mutation {{ cancelJob(id: "{job_id}") {{ status }} }}').ok()
    expect(page.locator(".graphiql-response")).to_contain_text('"status": "CANCELLED"')
    assert any(server.admin_key in frame for frame in tab.watch.ws_sent), "the key went in connection_init"

    # The key lives in this tab's sessionStorage only: no cookie, no localStorage, no URL.
    stored = page.evaluate("() => sessionStorage.getItem('queuelog.key')")
    assert stored == server.admin_key
    assert tab.context.cookies() == []
    assert server.admin_key not in page.evaluate("() => JSON.stringify(localStorage)")
    assert server.admin_key not in page.url
    page.click("#forget")
    assert page.evaluate("() => sessionStorage.getItem('queuelog.key')") is None
    assert server.admin_key not in page.evaluate("() => JSON.stringify(sessionStorage)")


def test_forgetting_the_key_in_graphiql_clears_its_stored_history_tabs_and_variables(tab: Tab) -> None:
    marker = f"payload-marker-{time.monotonic_ns()}"
    page = run_marked_operation_in_graphiql(tab, marker)
    stored = stored_entries(page, marker)
    assert any(entry.startswith("graphiql:queries=") for entry in stored), stored  # the history
    assert page.evaluate("m => Object.values(localStorage).some(v => v.includes(m))", marker) is False, (
        "GraphiQL keeps its state in this tab (sessionStorage), not in localStorage"
    )

    # An edit just before Forget: GraphiQL saves its tabs half a second after a change.
    page.locator(".graphiql-query-editor .CodeMirror").evaluate(
        "(element, text) => element.CodeMirror.setValue(text)", f"# {marker}, edited"
    )
    page.click("#forget")
    expect(page.locator("#key-message")).to_contain_text("Key forgotten")
    expect(page.locator(".graphiql-query-editor")).to_contain_text("query Overview")  # a fresh editor
    assert marker not in editor_texts(page)
    deadline = time.monotonic() + 1.5  # the old editor's delayed saves must not bring it back
    while time.monotonic() < deadline:
        assert stored_entries(page, marker) == []
        page.wait_for_timeout(25)
    assert_graphiql_shows_no_trace(page, marker)


def test_forgetting_the_key_on_the_dashboard_clears_graphiqls_stored_state_too(tab: Tab) -> None:
    marker = f"payload-marker-{time.monotonic_ns()}"
    page = run_marked_operation_in_graphiql(tab, marker)
    assert stored_entries(page, marker)
    # What an older GraphiQL (or version of this page) left in localStorage goes as well.
    page.evaluate("m => localStorage.setItem('graphiql:queries', JSON.stringify([{query: m}]))", marker)
    page.click('nav a[href="/"]')
    expect(page.locator("#app")).to_be_visible()  # the same tab: the key came along
    page.click("#forget")
    expect(page.locator("#signin")).to_be_visible()
    assert stored_entries(page, marker) == []
    page.goto(tab.server.url + "/graphql")
    assert_graphiql_shows_no_trace(page, marker)


def test_graphiql_page_has_a_strict_policy_and_no_serious_accessibility_violations(tab: Tab) -> None:
    response = tab.page.goto(tab.server.url + "/graphql")
    assert response is not None
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe" not in policy and "default-src 'none'" in policy
    expect(tab.page.locator(".graphiql-container")).to_be_visible()
    assert axe_violations(tab.page) == [], json.dumps(axe_violations(tab.page), indent=1)


# ---- the dashboard ----------------------------------------------------------------------


def test_dashboard_signs_in_with_a_key_shows_counts_and_forgets_the_key(tab: Tab) -> None:
    server = tab.server
    for job_type in ("email", "report", "report"):
        enqueue(server, job_type)
    complete_one(server)
    page = tab.open("/")
    expect(page.locator("#signin")).to_be_visible()
    page.fill("input[name=key]", "ql_not-a-key-at-all-000000000")
    page.press("input[name=key]", "Enter")
    expect(page.locator("#key-message")).to_contain_text("cannot be used")

    page.fill("input[name=key]", server.admin_key)
    page.press("input[name=key]", "Enter")
    stats = server.gql(
        "{ queueStats { counts { pending cancelled } byType { type counts { pending } } } }"
    ).ok()["queueStats"]
    expect(page.locator('[data-count="pending"]')).to_have_text(str(stats["counts"]["pending"]))
    expect(page.locator('[data-count="cancelled"]')).to_have_text(str(stats["counts"]["cancelled"]))
    report = next(t for t in stats["byType"] if t["type"] == "report")
    expect(page.locator("#by-type tr", has_text="report").locator("td").first).to_have_text(
        str(report["counts"]["pending"])
    )
    expect(page.locator("#who")).to_have_text("admin (ADMIN)")
    expect(page.locator("#oldest")).not_to_have_text("–")

    # The sparkline: the server's per-minute counts, 30 full minutes drawn and the current one
    # told. Compared over all 31 minutes, which the minute turning over does not change here
    # (the server is younger than half an hour).
    minutes = server.gql(THROUGHPUT).ok()["queueStats"]["throughput"]
    told = page.locator("#throughput-text")
    expect(told).to_have_text(re.compile(r"Last 30 minutes: [\d,]+ completed, [\d,]+ failed .*so far"))
    shown = re.findall(r"([\d,]+) (?:completed|failed)", told.inner_text())
    numbers = [int(n.replace(",", "")) for n in shown]
    assert numbers[0] + numbers[2] == sum(m["completed"] for m in minutes) > 0
    assert numbers[1] + numbers[3] == sum(m["failed"] for m in minutes)
    points = page.locator("#sparkline polyline").evaluate_all("lines => lines.map(l => l.points.length)")
    assert points == [30, 30]

    page.click("#forget")
    expect(page.locator("#signin")).to_be_visible()
    expect(page.locator("#key-message")).to_contain_text("Key forgotten")
    assert page.evaluate("() => sessionStorage.length") == 0
    assert page.locator("tr[data-job-id]").count() == 0, "nothing the key could read stays on the page"
    assert page.locator("#sparkline polyline").evaluate_all("ls => ls.map(l => l.points.length)") == [0, 0]
    expect(page.locator("#throughput-text")).to_have_text("Loading…")


@pytest.mark.parametrize("then", ["acknowledged", "dropped"])
def test_forgetting_the_key_while_the_socket_connects_raises_no_script_error(tab: Tab, then: str) -> None:
    # The websocket goes to a stand-in that answers connection_init only once Forget is clicked.
    sockets: list[Any] = []
    tab.context.route_web_socket(LOCAL_WS, lambda socket: sockets.append(socket))
    page = tab.sign_in(tab.server.admin_key)
    deadline = time.monotonic() + 5
    while not sockets and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    page.click("#forget")
    expect(page.locator("#signin")).to_be_visible()
    for socket in sockets:
        if then == "acknowledged":
            socket.send(json.dumps({"type": "connection_ack"}))
        else:
            socket.close(code=1011)
    page.wait_for_timeout(500)
    assert sockets and tab.watch.errors == []


def test_a_job_enqueued_by_another_client_appears_live_within_a_second(tab: Tab) -> None:
    page = tab.sign_in(tab.server.admin_key)
    expect(page.locator("[data-live]")).to_have_attribute("data-live", "live")
    page.evaluate("() => { window.notReloaded = true; }")
    counted = page.locator('[data-count="pending"]')
    expect(counted).to_have_text(re.compile(r"^\d+$"))  # "–" until the first stats arrive
    pending = counted.inner_text()
    job_id = enqueue(tab.server, "report")
    # Quiet, the row shows within about 0.5 s (the event, then one refresh at most every
    # 400 ms). A loaded CI machine gets 3 s: still only the push can do it, since while the
    # socket is up the page never polls the list and polls the counts every 10 s.
    expect(tab.row(job_id)).to_be_visible(timeout=3000)
    expect(page.locator('[data-count="pending"]')).to_have_text(str(int(pending) + 1), timeout=3000)
    assert page.evaluate("() => window.notReloaded") is True


def test_status_and_type_filters_and_cursor_paging(tab: Tab) -> None:
    server = tab.server
    inputs = [{"type": ("email", "report", "resize")[i % 3], "payload": {"n": i}} for i in range(60)]
    many = "mutation($i: [EnqueueJobInput!]!) { enqueueJobs(inputs: $i) { created } }"
    server.gql(many, {"i": inputs}).ok()
    cancelled = [enqueue(server, "noop") for _ in range(3)]
    for job_id in cancelled:
        server.gql(f'mutation {{ cancelJob(id: "{job_id}") {{ status }} }}').ok()
    page = tab.sign_in(server.admin_key)

    first, cursor = api_page(server)
    expect(page.locator("#jobs tr[data-job-id]")).to_have_count(25)
    assert shown_ids(page) == first, "newest first, as the API pages them"
    options = page.locator("select[name=status] option").evaluate_all("os => os.map(o => o.value)")
    assert options == ["", "PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"]

    page.click("#next")
    expect(page.locator("#page-number")).to_have_text("Page 2")
    second = page_ids(server, after=cursor)
    expect_rows(page, second)
    assert max(map(int, second)) < min(map(int, first)), "the next page holds older jobs"
    page.click("#previous")
    expect(page.locator("#page-number")).to_have_text("Page 1")
    expect_rows(page, first)

    page.select_option("select[name=status]", "CANCELLED")
    expect_rows(page, page_ids(server, status="CANCELLED"))
    assert set(cancelled) <= set(shown_ids(page))
    statuses = page.locator("#jobs tbody .status").all_inner_texts()
    assert statuses and set(statuses) == {"CANCELLED"}

    page.select_option("select[name=status]", "")
    page.select_option("select[name=type]", "resize")
    expect_rows(page, page_ids(server, type="resize"))
    types = page.locator("#jobs tbody tr td:nth-child(2)").all_inner_texts()
    assert set(types) == {"resize"}


def test_admin_retries_a_failed_job_from_its_detail(tab: Tab) -> None:
    server = tab.server
    job_id = failed_job(server, "SMTP timeout after 30 s")
    page = tab.sign_in(server.admin_key, f"/#job/{job_id}")
    detail = page.locator("#detail")
    expect(detail).to_contain_text("FAILED")
    expect(page.locator("#detail-error")).to_have_text("SMTP timeout after 30 s")
    timeline = page.locator("#timeline li .kind")
    claimed = re.compile(r"^CLAIMED \(attempt 1\) by worker-\d+$")
    expect(timeline).to_have_text(["ENQUEUED", claimed, "FAILED"])  # Job.events, as recorded
    expect(detail.get_by_role("button", name="Cancel job")).to_have_count(0)
    page.get_by_role("button", name="Retry job").click()
    expect(page.locator("#detail-fields")).to_contain_text("PENDING")
    # The retried job has no worker any more; the claim keeps its attempt number.
    expect(timeline).to_have_text(["ENQUEUED", "CLAIMED (attempt 1)", "FAILED", "RETRIED"])
    expect(page.get_by_role("button", name="Retry job")).to_have_count(0)
    assert status_of(server, job_id) == "PENDING"
    assert any(re.search(r"\berror\b", q) for q in tab.watch.posted), "an admin's detail asks for the error"


def test_a_producer_sees_its_own_jobs_and_cancels_one_but_never_retries(tab: Tab) -> None:
    server = tab.server
    name = f"producer-{time.monotonic_ns()}"
    producer = server.make_key(name, "producer")
    own = [
        server.gql(ENQUEUE, {"input": {"type": "email"}}, key=producer).ok()["enqueueJob"]["job"]["id"]
        for _ in range(2)
    ]
    enqueue(server)  # the admin's: not the producer's to see
    page = tab.sign_in(producer)
    expect(page.locator("#who")).to_have_text(f"{name} (PRODUCER)")
    expect_rows(page, list(reversed(own)))
    expect(page.locator('[data-count="pending"]')).to_have_text("2")

    tab.row(own[0]).get_by_role("link").click()
    page.get_by_role("button", name="Cancel job").click()
    expect(page.locator("#detail-fields")).to_contain_text("CANCELLED")
    expect(page.locator("#actions button")).to_have_count(0)  # Retry is the ADMIN's alone
    expect(page.locator("#detail-error-block")).to_be_hidden()
    assert status_of(server, own[0]) == "CANCELLED"
    expect(page.locator('[data-count="cancelled"]')).to_have_text("1")
    assert not [d for d in tab.watch.posted if re.search(r"\berror\b", d)], "Job.error is never requested"


def test_a_viewer_sees_no_cancel_or_retry_and_no_error(tab: Tab) -> None:
    server = tab.server
    failed = failed_job(server, "token=hunter2 leaked nothing")
    pending = enqueue(server)
    viewer = server.make_key(f"viewer-{time.monotonic_ns()}", "viewer")
    page = tab.sign_in(viewer, f"/#job/{failed}")
    expect(page.locator("#detail-fields")).to_contain_text("FAILED")
    expect(page.locator("#detail-error-block")).to_be_hidden()
    page.goto(f"{server.url}/#job/{pending}")
    expect(page.locator("#detail-fields")).to_contain_text("PENDING")
    expect(page.locator("#timeline")).to_contain_text("ENQUEUED")
    expect(page.locator("#actions button")).to_have_count(0)
    assert page.get_by_role("button", name=re.compile("Cancel|Retry")).count() == 0
    assert "leaked nothing" not in page.content()
    documents = tab.watch.posted + tab.watch.ws_sent
    assert any("jobUpdated" in d for d in tab.watch.ws_sent), "the detail follows the job live"
    assert not [d for d in documents if re.search(r"\berror\b", d)], "Job.error is never requested"


def test_a_link_to_no_such_job_shows_nothing_of_the_job_open_before(tab: Tab) -> None:
    server = tab.server
    marker = f"payload-marker-{time.monotonic_ns()}"
    job_id = enqueue(server, "report", payload={"note": marker})
    page = tab.sign_in(server.admin_key, f"/#job/{job_id}")
    detail = page.locator("#detail")
    expect(page.locator("#detail-payload")).to_contain_text(marker)
    expect(detail.get_by_role("button", name="Cancel job")).to_be_visible()
    missing = str(int(job_id) + 10**9)  # well formed, and no job has it
    for target in ("abc", missing, "", "%E0%A4%A", job_id + "x"):
        page.evaluate("hash => { window.location.hash = hash; }", f"#job/{target}")
        expect(page.locator("#detail-title")).to_have_text("No such job")
        expect(page.locator("#detail-message")).to_contain_text(
            "no job" if target == "" else "may not see it"
        )
        assert_nothing_of(page, job_id, marker)
    assert not page.locator("#banner").is_visible(), "no such job is not an error of the server's"
    assert axe_violations(page) == [], "the dashboard saying no such job"

    page.evaluate("hash => { window.location.hash = hash; }", f"#job/{job_id}")
    expect(page.locator("#detail-payload")).to_contain_text(marker)
    expect(page.locator("#detail-message")).to_be_hidden()


def assert_nothing_of(page: Page, job_id: str, marker: str) -> None:
    """The detail pane shows no field, timeline, action, id or payload of job `job_id`."""
    text = page.locator("#detail").inner_text()
    assert marker not in text and "report" not in text
    assert not re.search(rf"#{job_id}\b", text), text
    for part in ("#detail-fields", "#timeline", "#actions"):
        assert page.locator(f"{part} > *").count() == 0, part
    assert page.locator("#detail-payload").inner_text() == ""


def test_a_slow_answer_for_one_job_never_paints_it_under_another(tab: Tab) -> None:
    server = tab.server
    marker = f"payload-marker-{time.monotonic_ns()}"
    first = enqueue(server, "report", payload={"note": marker})
    second = enqueue(server, "email", payload={"note": "the second job"})
    page = tab.sign_in(server.admin_key, f"/#job/{first}")
    expect(page.locator("#detail-payload")).to_contain_text(marker)
    expect(page.locator("[data-live]")).to_have_attribute("data-live", "live")
    held: list[Any] = []

    def hold_job_reads(route: Any) -> None:
        document = json.loads(route.request.post_data or "{}").get("query", "")
        if document.startswith("query Job("):
            held.append(route)
        else:
            route.continue_()

    page.route("**/graphql", hold_job_reads)
    page.evaluate("hash => { window.location.hash = hash; }", f"#job/{second}")
    expect(page.locator("#detail-title")).to_contain_text(f"Job #{second}")
    assert_nothing_of(page, first, marker)  # while the second job loads

    page.evaluate("hash => { window.location.hash = hash; }", f"#job/{first}")
    page.evaluate("hash => { window.location.hash = hash; }", f"#job/{second}")
    deadline = time.monotonic() + 5
    while len(held) < 3 and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    reads = {
        job_id: [r for r in held if r.request.post_data_json["variables"]["id"] == job_id]
        for job_id in (first, second)
    }
    assert reads[first] and len(reads[second]) >= 2, reads
    for route in reads[second]:  # the second job's reads answer first ...
        answer_now(page, route)
    expect(page.locator("#detail-payload")).to_contain_text("the second job")
    for route in reads[first]:  # ... and the first job's come late
        answer_now(page, route)
    page.wait_for_timeout(200)
    expect(page.locator("#detail-title")).to_contain_text(f"Job #{second} · email")
    assert marker not in page.locator("#detail").inner_text()


def answer_now(page: Page, route: Any) -> None:
    """Let a held request through and wait until the page has its answer."""
    with page.expect_response(lambda response: response.request == route.request):
        route.continue_()


def test_while_the_socket_is_down_the_page_polls_and_shows_refusals_plainly(tab: Tab) -> None:
    server = tab.server
    # The websocket goes to a stand-in that never answers: the page must fall back on polling.
    tab.context.route_web_socket(LOCAL_WS, lambda socket: None)
    page = tab.sign_in(server.admin_key)
    expect(page.locator("[data-live]")).to_have_attribute("data-live", "reconnecting")
    expect(page.locator("[data-live]")).to_contain_text("Reconnecting")
    job_id = enqueue(server)
    expect(tab.row(job_id)).to_be_visible(timeout=9000)

    tab.row(job_id).get_by_role("link").click()
    cancel = page.get_by_role("button", name="Cancel job")
    expect(cancel).to_be_visible()
    # From the next poll on, only the page's own mutation reaches the server, so that the page
    # still believes the job PENDING when another client has cancelled it.
    stopped: list[str] = []

    def only_mutations(route: Any) -> None:
        document = json.loads(route.request.post_data or "{}").get("query", "")
        if document.startswith("mutation"):
            route.continue_()
            return
        stopped.append(document)
        route.abort()

    page.route("**/graphql", only_mutations)
    deadline = time.monotonic() + 10
    while not any(d.startswith("query Job(") for d in stopped) and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert any(d.startswith("query Job(") for d in stopped), "the page polls job(id) while the socket is down"
    server.gql(f'mutation {{ cancelJob(id: "{job_id}") {{ status }} }}').ok()
    cancel.click()
    expect(page.locator("#detail-message")).to_contain_text("Cancel job refused: CONFLICT")
    expect(page.locator("#banner")).to_contain_text("Cannot load")


def test_a_revoked_key_drops_the_page_back_to_the_key_box(tab: Tab) -> None:
    server = tab.server
    name = f"doomed-viewer-{time.monotonic_ns()}"
    key = server.make_key(name, "viewer")
    page = tab.sign_in(key)
    expect(page.locator("[data-live]")).to_have_attribute("data-live", "live")
    engine = create_sync_engine(server.database_url)
    try:
        key_admin.revoke_key(engine, name)
    finally:
        engine.dispose()
    expect(page.locator("#signin")).to_be_visible()
    expect(page.locator("#key-message")).to_contain_text("no longer accepts this key")
    expect(page.locator("#app")).to_be_hidden()
    assert page.evaluate("() => sessionStorage.getItem('queuelog.key')") is None
    assert page.locator("tr[data-job-id]").count() == 0


def test_every_query_the_dashboard_sends_is_one_the_bench_times(tab: Tab) -> None:
    """Figure 6 of `python -m bench` times the dashboard's reads on a big queue (issue 8:
    each within 50 ms at 1M jobs) from bench/_dashboard.py: those must be what the page sends."""
    from bench._dashboard import DETAIL, DETAIL_ADMIN, JOBS, QUERIES, STATS, normalized

    server = tab.server
    job_id = failed_job(server, "disk full")
    for _ in range(30):
        enqueue(server, "report")
    viewer = server.make_key(f"viewer-{time.monotonic_ns()}", "viewer")
    for key in (server.admin_key, viewer):  # an ADMIN's detail also asks for the error
        page = tab.sign_in(key, f"/#job/{job_id}")
        expect(page.locator("#detail-fields")).to_contain_text("FAILED")
        page.click("#next")
        expect(page.locator("#page-number")).to_have_text("Page 2")
        page.select_option("select[name=status]", "FAILED")
        page.select_option("select[name=type]", "report")
        expect(page.locator("#jobs-summary")).to_have_text("0 matching")
        page.click("#forget")
    sent = {normalized(q) for q in tab.watch.posted if not q.lstrip().startswith("mutation")}
    known = {normalized(q) for q in QUERIES}
    assert sent <= known, sent - known
    assert {normalized(q) for q in (DETAIL, DETAIL_ADMIN, JOBS, STATS)} <= sent, "every view was opened"


def test_dashboard_works_from_the_keyboard_and_has_no_serious_accessibility_violations(tab: Tab) -> None:
    server = tab.server
    failed_job(server, "disk full")
    page = tab.open("/")
    assert axe_violations(page) == [], "the key box"
    # Focus starts in the key box: type, Enter, then Tab to the first job and open it.
    page.keyboard.type(server.admin_key)
    page.keyboard.press("Enter")
    expect(page.locator("[data-live]")).to_have_attribute("data-live", "live")
    expect(page.locator("#jobs tr[data-job-id]").first).to_be_visible()
    first = shown_ids(page)[0]
    page.locator("select[name=type]").focus()
    for _ in range(20):
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.closest('tr')?.dataset.jobId") == first:
            break
    else:
        pytest.fail("Tab never reached the first job's link")
    page.keyboard.press("Enter")
    expect(page.locator("#detail-title")).to_be_focused()
    expect(page.locator("#detail-title")).to_contain_text(f"Job #{first}")
    assert axe_violations(page) == [], "the dashboard with a job open"


def test_a_failing_test_leaves_a_screenshot(tab: Tab, tmp_path: Path) -> None:
    page = tab.open("/")
    path = screenshot_on_failure(page, "test_example[sqlite]", tmp_path)
    assert path.name == "test_example_sqlite_.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
