"""The job detail's steering (API.md section 12, "Dashboard") in a real browser.

Cancelling a RUNNING job (the worker is told, the job ends CANCELLED on the page live), Run
now on a delayed job, the edit form (updateJob: only the fields changed are sent, an emptied
expiry clears it, the server's refusal names the field), the expiry and progress fields, and
which buttons each role gets. The browser, the per-test context and its watch (no request
leaves 127.0.0.1, no CSP violation, no uncaught script error, a screenshot when a test fails)
and the axe check come from test_browser.py; this module runs its own server, and each test
its own job type, so that no worker of one test claims another's job.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import DEFAULT_JOB_TYPES, Server, launch_server

from browser.test_browser import MISSING, Tab, axe_violations, browser, tab

if MISSING is None:
    from playwright.sync_api import Page, expect

__all__ = ["browser", "tab"]  # fixtures this module uses from test_browser.py

CANCELLED_LIVE = "cancelled-live"
RUN_NOW = "run-now"
EDITED = "edited"
ROLES = "roles"
CLAIMED_MEANWHILE = "claimed-meanwhile"
PROGRESSED = "progressed"
STEER_TYPES = (CANCELLED_LIVE, RUN_NOW, EDITED, ROLES, CLAIMED_MEANWHILE, PROGRESSED)

ENQUEUE = "mutation($i: EnqueueJobInput!) { enqueueJob(input: $i) { job { id } } }"
JOB = "query($id: ID!) { job(id: $id) { status priority maxRetries runAt expiresAt cancelRequested error } }"
CLAIM = "mutation($t: String!) { claimJob(types: [$t]) { id attempt } }"
HEARTBEAT = "mutation($id: ID!, $a: Int!) { heartbeatJob(id: $id, attempt: $a) { cancelRequested } }"
FAIL = "mutation($id: ID!, $a: Int, $e: String!) { failJob(id: $id, attempt: $a, error: $e) { status } }"
PROGRESS = """mutation($id: ID!, $a: Int!, $p: Float!, $m: String) {
  reportProgress(id: $id, attempt: $a, progress: $p, message: $m) { progress } }"""
COMPLETE = "mutation($id: ID!, $a: Int) { completeJob(id: $id, attempt: $a) { status } }"
ACTIONS = "#actions button"


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """This module's server (test_browser's `tab` fixture asks for `web` by name)."""
    types = ",".join([DEFAULT_JOB_TYPES, *STEER_TYPES])
    running = launch_server(tmp_path_factory.mktemp("browser-steer"), job_types=types, retry_base_seconds=0)
    yield running
    running.stop()


# ---- the queue, through the API ---------------------------------------------------------


def enqueue(server: Server, job_type: str, key: str | None = None, **fields: Any) -> str:
    job = {"type": job_type, "payload": {"n": time.monotonic_ns()}, **fields}
    return server.gql(ENQUEUE, {"i": job}, key=key).ok()["enqueueJob"]["job"]["id"]


def job_of(server: Server, job_id: str) -> dict[str, Any]:
    return server.gql(JOB, {"id": job_id}).ok()["job"]


def claimed(server: Server, job_type: str) -> tuple[str, str, int]:
    """A fresh worker claims the one claimable job of `job_type`: (its key, the id, the attempt)."""
    worker = server.make_key(f"worker-{time.monotonic_ns()}", "worker")
    job = server.gql(CLAIM, {"t": job_type}, key=worker).ok()["claimJob"]
    assert job is not None, f"no claimable {job_type} job"
    return worker, job["id"], job["attempt"]


def iso_in(**delta: float) -> str:
    return (datetime.now(UTC) + timedelta(**delta)).isoformat()


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


# ---- the page ---------------------------------------------------------------------------


def open_job(tab: Tab, key: str, job_id: str) -> Page:
    page = tab.sign_in(key, f"/#job/{job_id}")
    expect(page.locator("#detail-title")).to_contain_text(f"Job #{job_id} · ")  # read, not only opened
    expect(page.locator("[data-live]")).to_have_attribute("data-live", "live")
    return page


def detail_values(page: Page) -> dict[str, str]:
    """The job detail's fields, term -> text, read in one go (the pane redraws as it likes)."""
    pairs = page.locator("#detail-fields").evaluate(
        "list => [...list.querySelectorAll('dt')].map(t => [t.innerText, t.nextElementSibling.innerText])"
    )
    return dict(pairs)


def actions_of(page: Page) -> list[str]:
    return page.locator(ACTIONS).evaluate_all("buttons => buttons.map(b => b.dataset.action)")


def expect_actions(page: Page, actions: list[str], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while actions_of(page) != actions and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    assert actions_of(page) == actions


def mutations(tab: Tab, operation: str) -> list[str]:
    return [q for q in tab.watch.posted if q.lstrip().startswith("mutation") and f"{operation}(" in q]


def local_input_as_utc(page: Page, text: str) -> datetime:
    """The instant a datetime-local value names in the page's time zone."""
    return instant(page.evaluate("text => new Date(text).toISOString()", text).replace("Z", "+00:00"))


# ---- cancel a RUNNING job -----------------------------------------------------------------


def test_an_admin_cancels_a_running_job_and_the_page_follows_it_to_cancelled(tab: Tab) -> None:
    server = tab.server
    job_id = enqueue(server, CANCELLED_LIVE)
    worker, claimed_id, attempt = claimed(server, CANCELLED_LIVE)
    assert claimed_id == job_id
    page = open_job(tab, server.admin_key, job_id)
    expect(page.locator("#detail-fields")).to_contain_text("RUNNING")
    expect_actions(page, ["cancel"])  # no Run now or Edit on a RUNNING job

    page.locator('#actions button[data-action="cancel"]').click()
    expect(page.locator("#detail-fields")).to_contain_text("RUNNING · cancellation requested")
    expect_actions(page, [])  # asked once: a second request would change nothing
    expect(page.locator("#detail-title")).to_be_focused()  # not lost with the button
    stored = job_of(server, job_id)
    assert (stored["status"], stored["cancelRequested"]) == ("RUNNING", True), stored
    beat = server.gql(HEARTBEAT, {"id": job_id, "a": attempt}, key=worker).ok()["heartbeatJob"]
    assert beat["cancelRequested"] is True, "the holder is told"
    assert len(mutations(tab, "cancelJob")) == 1

    # The holder stops: the job ends CANCELLED, and the page hears it over jobUpdated.
    ended = server.gql(FAIL, {"id": job_id, "a": attempt, "e": "stopped"}, key=worker).ok()["failJob"]
    assert ended == {"status": "CANCELLED"}
    expect(page.locator("#detail-fields dd").first).to_have_text("CANCELLED")
    expect(page.locator("#detail-error")).to_have_text("cancelled while running")
    expect_actions(page, ["retry"])  # an ADMIN may run it again
    assert job_of(server, job_id)["status"] == "CANCELLED"


# ---- run now and edit a PENDING job --------------------------------------------------------


def test_run_now_makes_a_delayed_job_due_and_a_worker_claims_it(tab: Tab) -> None:
    server = tab.server
    producer = server.make_key(f"producer-{time.monotonic_ns()}", "producer")
    job_id = enqueue(server, RUN_NOW, key=producer, runAt=iso_in(hours=2))
    page = open_job(tab, producer, job_id)
    expect_actions(page, ["run-now", "edit", "cancel"])
    expect(page.locator("#timeline li .kind")).to_have_text(["ENQUEUED", "DUE"])  # due in 2 h
    assert detail_values(page)["Runs at"] == "in 2 h"
    worker = server.make_key(f"worker-{time.monotonic_ns()}", "worker")
    assert server.gql(CLAIM, {"t": RUN_NOW}, key=worker).ok()["claimJob"] is None, "not due yet"

    before = datetime.now(UTC)
    page.locator('#actions button[data-action="run-now"]').click()
    expect(page.locator("#timeline li .kind")).to_have_text(["ENQUEUED", "UPDATED"])
    assert re.fullmatch(r"just now|\d+ s ago", detail_values(page)["Runs at"])
    run_at = instant(job_of(server, job_id)["runAt"])
    assert before - timedelta(seconds=5) <= run_at <= datetime.now(UTC) + timedelta(seconds=5), run_at
    assert len(mutations(tab, "runJobNow")) == 1
    assert server.gql(CLAIM, {"t": RUN_NOW}, key=worker).ok()["claimJob"]["id"] == job_id
    # The claim reaches the page live: a RUNNING job has no Run now or Edit any more.
    expect(page.locator("#detail-fields dd").first).to_have_text("RUNNING")
    expect_actions(page, ["cancel"])


def recording_edits(page: Page) -> list[dict[str, Any]]:
    """From now on, the `input` of each updateJob the page sends, in order."""
    inputs: list[dict[str, Any]] = []

    def request(request: Any) -> None:
        if request.method == "POST" and request.url.endswith("/graphql"):
            body = json.loads(request.post_data or "{}")
            if body.get("query", "").startswith("mutation Edit("):
                inputs.append(body["variables"]["input"])

    page.on("request", request)
    return inputs


def test_editing_priority_and_expiry_sends_only_those_and_an_emptied_expiry_clears_it(tab: Tab) -> None:
    server = tab.server
    run_at = iso_in(hours=3)
    job_id = enqueue(server, EDITED, runAt=run_at, maxRetries=4)
    page = open_job(tab, server.admin_key, job_id)
    sent = recording_edits(page)
    assert detail_values(page)["Expires"] == "never"
    edit = page.locator('#actions button[data-action="edit"]')
    form = page.locator("#edit-form")
    expect(edit).to_have_attribute("aria-expanded", "false")
    edit.click()
    expect(form).to_be_visible()
    expect(edit).to_have_attribute("aria-expanded", "true")
    expect(page.locator("#edit-run-at")).to_be_focused()
    expect(page.locator("#edit-priority option")).to_have_text(["LOW", "MEDIUM", "HIGH", "CRITICAL"])
    expect(page.locator("#edit-max-retries")).to_have_value("4")
    expect(page.locator("#edit-expires-at")).to_have_value("")
    assert axe_violations(page) == [], "the job detail with its edit form open"

    # An expiry before the job's run time: the server's refusal, on the field it names.
    page.select_option("#edit-priority", "HIGH")
    page.fill("#edit-expires-at", local_input(page, iso_in(hours=1)))
    page.click("#edit-save")
    message = page.locator("#edit-message")
    expect(message).to_contain_text("Not saved: BAD_USER_INPUT: expiresAt must be later than runAt")
    expect(page.locator("#edit-expires-at")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#edit-expires-at")).to_be_focused()
    assert job_of(server, job_id)["priority"] == "LOW", "nothing applied"

    expires_text = local_input(page, iso_in(days=2))
    page.fill("#edit-expires-at", expires_text)
    page.click("#edit-save")
    expect(form).to_be_hidden()
    expect(edit).to_be_focused()
    expect(page.locator("#detail-fields")).to_contain_text("HIGH")
    expect(page.locator("#timeline li .kind")).to_have_text(["ENQUEUED", "UPDATED", "DUE"])
    stored = job_of(server, job_id)
    assert stored["priority"] == "HIGH" and stored["maxRetries"] == 4, stored
    assert instant(stored["expiresAt"]) == local_input_as_utc(page, expires_text), stored
    assert instant(stored["runAt"]) == instant(run_at), "the run time was not touched"
    assert detail_values(page)["Expires"] == "in 2 d (cancelled if not claimed by then)"
    expires_utc = local_input_as_utc(page, expires_text).isoformat(timespec="milliseconds")
    assert sent[-1] == {"priority": "HIGH", "expiresAt": expires_utc.replace("+00:00", "Z")}, sent

    # Opened again, the form holds the job as it is now; emptying the expiry clears it.
    edit.click()
    expect(page.locator("#edit-priority")).to_have_value("HIGH")
    expect(page.locator("#edit-expires-at")).to_have_value(expires_text)
    page.fill("#edit-expires-at", "")
    page.click("#edit-save")
    expect(form).to_be_hidden()
    expect(page.locator("#detail-fields")).to_contain_text("never")
    assert job_of(server, job_id)["expiresAt"] is None
    assert sent[-1] == {"expiresAt": None}, sent
    assert len(sent) == 3, "the refused edit, the saved one, the cleared expiry"


def local_input(page: Page, iso: str) -> str:
    """An instant as the page's datetime-local inputs show it: local time, to the second."""
    return page.evaluate(
        """iso => {
            const t = new Date(iso);
            const two = (n) => String(n).padStart(2, "0");
            return `${t.getFullYear()}-${two(t.getMonth() + 1)}-${two(t.getDate())}` +
                `T${two(t.getHours())}:${two(t.getMinutes())}:${two(t.getSeconds())}`;
        }""",
        iso,
    )


def test_the_edit_form_closes_when_the_job_is_claimed_meanwhile(tab: Tab) -> None:
    server = tab.server
    job_id = enqueue(server, CLAIMED_MEANWHILE)
    page = open_job(tab, server.admin_key, job_id)
    page.locator('#actions button[data-action="edit"]').click()
    expect(page.locator("#edit-form")).to_be_visible()
    page.select_option("#edit-priority", "CRITICAL")
    claimed(server, CLAIMED_MEANWHILE)
    expect(page.locator("#edit-form")).to_be_hidden()
    message = "The job is RUNNING now: it can no longer be edited."
    expect(page.locator("#detail-message")).to_have_text(message)
    expect_actions(page, ["cancel"])
    assert mutations(tab, "updateJob") == []


# ---- the buttons per role -------------------------------------------------------------------


def test_each_role_gets_the_buttons_it_may_use_and_no_other(tab: Tab) -> None:
    server = tab.server
    name = f"producer-{time.monotonic_ns()}"
    producer = server.make_key(name, "producer")  # maxPriority MEDIUM
    viewer = server.make_key(f"viewer-{time.monotonic_ns()}", "viewer")
    running = enqueue(server, ROLES, key=producer)
    worker, claimed_id, _ = claimed(server, ROLES)
    assert claimed_id == running
    pending = enqueue(server, ROLES, key=producer, runAt=iso_in(hours=1))
    others = enqueue(server, ROLES, runAt=iso_in(hours=1))  # the admin's: not the producer's to see
    expected = {
        server.admin_key: {running: ["cancel"], pending: ["run-now", "edit", "cancel"]},
        producer: {running: ["cancel"], pending: ["run-now", "edit", "cancel"]},
        viewer: {running: [], pending: []},
        worker: {running: []},  # a worker sees only the jobs it holds or held
    }
    for key, jobs in expected.items():
        for job_id, actions in jobs.items():
            page = open_job(tab, key, job_id)
            status = "RUNNING" if job_id == running else "PENDING"
            expect(page.locator("#detail-fields dd").first).to_have_text(status)
            expect_actions(page, actions)
            page.click("#forget")

    page = open_job(tab, producer, pending)
    page.locator('#actions button[data-action="edit"]').click()
    expect(page.locator("#edit-priority option")).to_have_text(["LOW", "MEDIUM"])  # up to its maxPriority
    page.evaluate("hash => { window.location.hash = hash; }", f"#job/{others}")
    expect(page.locator("#detail-title")).to_have_text("No such job")
    expect(page.locator("#edit-form")).to_be_hidden()
    assert actions_of(page) == []
    assert [q for q in tab.watch.posted if q.lstrip().startswith("mutation")] == [], "nothing was sent"


# ---- progress and attempts ------------------------------------------------------------------


def report(server: Server, worker: str, job_id: str, attempt: int, progress: float, message: str) -> None:
    variables = {"id": job_id, "a": attempt, "p": progress, "m": message}
    assert server.gql(PROGRESS, variables, key=worker).ok()["reportProgress"]["progress"] == progress


def attempt_rows(page: Page) -> list[list[str]]:
    """Each attempt row: its data-attempt, then its cells' text, "time" for a cell showing one."""
    return page.locator("#attempts tr[data-attempt]").evaluate_all(
        "rows => rows.map(r => [r.dataset.attempt, "
        "...[...r.cells].map(c => c.querySelector('time') ? 'time' : c.innerText)])"
    )


def expect_attempt_rows(page: Page, expected: list[list[str]], timeout_s: float = 10.0) -> None:
    """Wait until the attempts table shows `expected` (see attempt_rows): per row its number,
    worker, claimed, finished, outcome and, for ADMIN, error."""
    deadline = time.monotonic() + timeout_s
    while (shown := attempt_rows(page)) != expected and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert shown == expected


def progress_bar(page: Page) -> Any:
    return page.locator("#detail-fields progress[data-progress]")


def test_the_progress_bar_and_the_attempts_follow_the_job_live(tab: Tab) -> None:
    server = tab.server
    job_id = enqueue(server, PROGRESSED, maxRetries=2)
    page = open_job(tab, server.admin_key, job_id)
    expect(page.locator("#attempts-note")).to_have_text("Never claimed yet.")
    expect(page.locator("#attempts")).to_be_hidden()
    assert detail_values(page)["Progress"] == "not reported"

    first, _, attempt = claimed(server, PROGRESSED)
    first_name = server.gql("{ me { name } }", key=first).ok()["me"]["name"]
    expect_attempt_rows(page, [["1", "1", first_name, "time", "not yet", "RUNNING", "none"]])
    report(server, first, job_id, attempt, 0.5, "half the rows")
    expect(progress_bar(page)).to_have_js_property("value", 0.5)
    expect(page.locator("#detail-fields")).to_contain_text("50 % · half the rows")
    failed = server.gql(FAIL, {"id": job_id, "a": attempt, "e": "disk full on /tmp"}, key=first).ok()
    assert failed["failJob"]["status"] == "PENDING"  # a retry left
    expect_attempt_rows(page, [["1", "1", first_name, "time", "time", "RETRIED", "disk full on /tmp"]])

    # The second claim starts its own progress: the first attempt's is gone.
    second, _, attempt = claimed(server, PROGRESSED)
    second_name = server.gql("{ me { name } }", key=second).ok()["me"]["name"]
    expect(progress_bar(page)).to_have_count(0)
    assert detail_values(page)["Progress"] == "not reported"
    report(server, second, job_id, attempt, 0.25, "a quarter")
    expect(progress_bar(page)).to_have_js_property("value", 0.25)
    report(server, second, job_id, attempt, 0.75, "three quarters")
    expect(progress_bar(page)).to_have_js_property("value", 0.75)
    expect(page.locator("#detail-fields")).to_contain_text("75 % · three quarters")
    assert (
        server.gql(COMPLETE, {"id": job_id, "a": attempt}, key=second).ok()["completeJob"]["status"]
        == "COMPLETED"
    )
    expect_attempt_rows(
        page,
        [
            ["1", "1", first_name, "time", "time", "RETRIED", "disk full on /tmp"],
            ["2", "2", second_name, "time", "time", "COMPLETED", "none"],
        ],
    )
    expect(progress_bar(page)).to_have_js_property("value", 0.75)  # the last attempt's, kept
    assert axe_violations(page) == [], "the job detail with its progress and attempts"

    # A producer sees its job's attempts without their errors, which its page never asks for.
    page.click("#forget")
    sent_before = (len(tab.watch.posted), len(tab.watch.ws_sent))
    producer = server.make_key(f"producer-{time.monotonic_ns()}", "producer")
    own = enqueue(server, PROGRESSED, key=producer, maxRetries=2)
    worker, _, attempt = claimed(server, PROGRESSED)
    worker_name = server.gql("{ me { name } }", key=worker).ok()["me"]["name"]
    server.gql(FAIL, {"id": own, "a": attempt, "e": "token=hunter2 refused"}, key=worker).ok()
    page = open_job(tab, producer, own)
    expect_attempt_rows(page, [["1", "1", worker_name, "time", "time", "RETRIED"]])
    expect(page.locator("#attempts-error-head")).to_be_hidden()
    assert "hunter2" not in page.content()
    documents = tab.watch.posted[sent_before[0] :] + tab.watch.ws_sent[sent_before[1] :]
    assert any("attempts(" in d for d in documents), "the producer's page reads the attempts"
    assert not [d for d in documents if re.search(r"\berror\b", d)], "no error is ever asked for"
