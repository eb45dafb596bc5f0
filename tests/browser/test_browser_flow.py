"""The dashboard's flow-control parts (API.md section 11) in a real browser (issue 16).

The Types view (typeControls, pause and resume, limits editing), "cancel matching" and
"retry matching" on the filtered job list, and the job detail's concurrencyKey and timeout.
The browser, the per-test context and its watch (no request leaves 127.0.0.1, no CSP
violation, no uncaught script error, a screenshot when a test fails) and the axe check come
from test_browser.py; this module runs its own server, whose job types each test has to
itself, so that bulk actions and pauses in one test never touch another's jobs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import DEFAULT_JOB_TYPES, Server, launch_server

from browser.test_browser import MISSING, Tab, axe_violations, browser, enqueue, expect_rows, status_of, tab

if MISSING is None:
    from playwright.sync_api import Page, expect

__all__ = ["browser", "tab"]  # fixtures this module uses from test_browser.py

PAUSING = "pausing"
EXPIRING = "expiring"
LIMITED = "limited"
EDITED = "edited"
VIEWED = "viewed"
BULK_CANCEL = "bulk-cancel"
BULK_MANY = "bulk-many"
BULK_RETRY = "bulk-retry"
PRODUCED = "produced"
FLOW_TYPES = (PAUSING, EXPIRING, LIMITED, EDITED, VIEWED, BULK_CANCEL, BULK_MANY, BULK_RETRY, PRODUCED)

TYPE_CONTROLS = """{ typeControls { type paused pausedUntil running maxRunning maxRunningPerKey
  rateLimit { limit periodSeconds perKey } timeoutSeconds } }"""
COUNT = "query($s: JobStatus, $t: String) { jobs(status: $s, type: $t, first: 1) { totalCount } }"
MANY = "mutation($i: [EnqueueJobInput!]!) { enqueueJobs(inputs: $i) { created } }"


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """This module's server (test_browser's `tab` fixture asks for `web` by name)."""
    types = ",".join([DEFAULT_JOB_TYPES, *FLOW_TYPES])
    running = launch_server(tmp_path_factory.mktemp("browser-flow"), job_types=types, retry_base_seconds=0)
    yield running
    running.stop()


# ---- the queue, through the API ---------------------------------------------------------


def controls(server: Server) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in server.gql(TYPE_CONTROLS).ok()["typeControls"]}


def count(server: Server, status: str | None, job_type: str | None) -> int:
    return server.gql(COUNT, {"s": status, "t": job_type}).ok()["jobs"]["totalCount"]


def enqueue_many(server: Server, job_type: str, n: int, key: str | None = None) -> None:
    inputs = [{"type": job_type, "payload": {"n": i}} for i in range(n)]
    assert server.gql(MANY, {"i": inputs}, key=key).ok()["enqueueJobs"]


def failed_jobs(server: Server, job_type: str, n: int) -> list[str]:
    """`n` FAILED jobs of `job_type` (a fresh worker claims and fails each, no retries)."""
    worker = server.make_key(f"worker-{time.monotonic_ns()}", "worker")
    claim = "mutation($t: String!) { claimJob(types: [$t]) { id } }"
    fail = 'mutation($id: ID!) { failJob(id: $id, error: "broken", retryable: false) { status } }'
    ids = [enqueue(server, job_type, maxRetries=0) for _ in range(n)]
    for _ in ids:
        claimed = server.gql(claim, {"t": job_type}, key=worker).ok()["claimJob"]["id"]
        assert server.gql(fail, {"id": claimed}, key=worker).ok()["failJob"]["status"] == "FAILED"
    return ids


def cancel(server: Server, job_id: str) -> None:
    server.gql("mutation($id: ID!) { cancelJob(id: $id) { status } }", {"id": job_id}).ok()


# ---- the page ---------------------------------------------------------------------------


def open_types(tab: Tab, key: str | None = None) -> Page:
    """The Types view, signed in with `key` first (None: the tab already is)."""
    page = tab.sign_in(key) if key is not None else tab.page
    page.get_by_role("link", name="Types").click()
    expect(page.locator("#types-title")).to_be_focused()
    expect(page.locator("#type-controls tr[data-type]")).to_have_count(len(controls(tab.server)))
    return page


def type_row(page: Page, job_type: str) -> Any:
    return page.locator(f'#type-controls tr[data-type="{job_type}"]')


def bulk_mutations(tab: Tab, operation: str) -> list[str]:
    return [q for q in tab.watch.posted if q.lstrip().startswith("mutation") and operation in q]


def filter_list(page: Page, status: str, job_type: str) -> None:
    page.select_option("select[name=status]", status)
    expect(page.locator(f'select[name=type] option[value="{job_type}"]')).to_be_attached()
    page.select_option("select[name=type]", job_type)


# ---- the Types view ---------------------------------------------------------------------


def test_types_view_lists_every_type_and_an_admin_pauses_and_resumes_one(tab: Tab) -> None:
    server = tab.server
    page = open_types(tab, server.admin_key)
    shown = page.locator("#type-controls tr[data-type]").evaluate_all("rows => rows.map(r => r.dataset.type)")
    assert shown == list(controls(server)), "every allowlisted type, in the server's order"
    expect(page.get_by_role("link", name="Types")).to_have_attribute("aria-current", "page")
    row = type_row(page, PAUSING)
    expect(row.locator("td").nth(0)).to_have_text("ACTIVE")
    expect(row.locator("td").nth(1)).to_have_text("0")  # running
    expect(row.locator("td").nth(2)).to_have_text("no limit")

    row.locator('button[data-action="pause"]').click()
    resume = row.locator('button[data-action="resume"]')
    expect(resume).to_be_focused()  # the button became the other one and kept the focus
    expect(row.locator("td").nth(0)).to_have_text("PAUSED")
    expect(page.locator("#types-message")).to_contain_text(f"{PAUSING} paused")
    assert controls(server)[PAUSING]["paused"] is True
    assert row.locator('button[data-action="pause"]').count() == 0

    resume.click()
    expect(row.locator('button[data-action="pause"]')).to_be_focused()
    expect(row.locator("td").nth(0)).to_have_text("ACTIVE")
    assert controls(server)[PAUSING]["paused"] is False

    # A pause with an end (set through the API) shows when it ends; other views see it too.
    until = "2099-01-01T00:00:00Z"
    server.gql(f'mutation {{ pauseType(type: "{PAUSING}", until: "{until}") {{ paused }} }}').ok()
    page.get_by_role("link", name="Jobs").click()
    expect(page.locator("#overview-title")).to_be_focused()
    expect(page.locator("#types-view")).to_be_hidden()
    page.get_by_role("link", name="Types").click()
    expect(row.locator("td").nth(0)).to_contain_text("PAUSED until")
    ends = row.locator("td").nth(0).locator("time")
    expect(ends).to_have_attribute("datetime", "2099-01-01T00:00:00+00:00")
    row.locator('button[data-action="resume"]').click()
    expect(row.locator("td").nth(0)).to_have_text("ACTIVE")
    after = controls(server)[PAUSING]
    assert (after["paused"], after["pausedUntil"]) == (False, None)


def test_a_pause_with_an_end_shows_active_once_it_has_ended(tab: Tab) -> None:
    server = tab.server
    page = open_types(tab, server.admin_key)
    row = type_row(page, EXPIRING)
    ends = datetime.now(UTC) + timedelta(seconds=3)
    pause = "mutation($t: String!, $u: DateTime) { pauseType(type: $t, until: $u) { paused } }"
    assert server.gql(pause, {"t": EXPIRING, "u": ends.isoformat()}).ok()["pauseType"]["paused"] is True
    page.get_by_role("link", name="Jobs").click()
    page.get_by_role("link", name="Types").click()  # read afresh
    expect(row.locator("td").nth(0)).to_contain_text("PAUSED until")
    time.sleep(max(0.0, (ends - datetime.now(UTC)).total_seconds()) + 1.5)  # API.md: ends within a second
    worker = server.make_key(f"worker-{time.monotonic_ns()}", "worker")
    enqueue(server, EXPIRING)
    claim = "mutation($t: String!) { claimJob(types: [$t]) { id } }"
    assert server.gql(claim, {"t": EXPIRING}, key=worker).ok()["claimJob"] is not None, "claims go on"
    page.get_by_role("link", name="Jobs").click()
    page.get_by_role("link", name="Types").click()
    expect(row.locator("td").nth(0)).to_have_text("ACTIVE")
    assert row.locator('button[data-action="pause"]').count() == 1


def test_a_viewer_sees_the_types_but_no_pause_limits_or_bulk_controls(tab: Tab) -> None:
    server = tab.server
    server.gql(f'mutation {{ setTypeControl(input: {{type: "{VIEWED}", maxRunning: 4}}) {{ type }} }}').ok()
    enqueue(server, VIEWED)
    viewer = server.make_key(f"viewer-{time.monotonic_ns()}", "viewer")
    page = tab.sign_in(viewer)
    expect(page.locator("[data-bulk]")).to_have_count(2)
    expect(page.locator("[data-bulk]:visible")).to_have_count(0)
    filter_list(page, "PENDING", VIEWED)
    expect(page.locator("[data-bulk]:visible")).to_have_count(0)

    open_types(tab)
    expect(type_row(page, VIEWED).locator("td").nth(2)).to_have_text("4")
    assert page.locator("#type-controls button").count() == 0
    expect(page.get_by_role("columnheader", name="Actions")).to_have_count(0)
    mutations = [q for q in tab.watch.posted if q.lstrip().startswith("mutation")]
    assert mutations == [], "a viewer's page sends no mutation"


def test_limits_round_trip_and_an_out_of_range_value_shows_the_servers_error(tab: Tab) -> None:
    server = tab.server
    page = open_types(tab, server.admin_key)
    row = type_row(page, LIMITED)
    edit = row.locator('button[data-action="limits"]')
    edit.click()
    form = page.locator("#limits-form")
    expect(form).to_be_visible()
    expect(page.locator("#limits-title")).to_have_text(f"Limits of {LIMITED}")
    expect(page.get_by_label("Max running", exact=True)).to_be_focused()
    expect(edit).to_have_attribute("aria-expanded", "true")

    page.get_by_label("Max running", exact=True).fill("3")
    page.get_by_label("Max running per concurrency key").fill("2")
    page.get_by_label("Timeout (seconds)").fill("45")
    page.get_by_label("Claims").fill("10")
    page.get_by_label("per seconds").fill("60")
    page.get_by_label("for each concurrency key on its own").check()
    page.get_by_role("button", name="Save limits").click()
    expect(form).to_be_hidden()
    expect(edit).to_be_focused()
    expect(page.locator("#types-message")).to_have_text(f"Limits of {LIMITED} saved.")
    stored = controls(server)[LIMITED]
    assert stored["maxRunning"] == 3 and stored["maxRunningPerKey"] == 2 and stored["timeoutSeconds"] == 45
    assert stored["rateLimit"] == {"limit": 10, "periodSeconds": 60, "perKey": True}
    cells = row.locator("td").all_inner_texts()
    assert cells[2:6] == ["3", "2", "10 per 60 s per key", "45 s"], cells

    # Opened again, the form holds the stored limits; an out-of-range value is the server's to refuse.
    edit.click()
    expect(page.get_by_label("Max running per concurrency key")).to_have_value("2")
    expect(page.get_by_label("for each concurrency key on its own")).to_be_checked()
    too_big = page.get_by_label("Max running per concurrency key")
    too_big.fill("100001")
    page.get_by_role("button", name="Save limits").click()
    message = page.locator("#limits-message")
    expect(message).to_have_text(
        "Not saved: BAD_USER_INPUT: maxRunningPerKey must be between 1 and 100000, or null"
    )
    expect(too_big).to_have_attribute("aria-invalid", "true")
    expect(too_big).to_be_focused()
    assert controls(server)[LIMITED]["maxRunningPerKey"] == 2, "nothing changed"
    assert axe_violations(page) == [], "the Types view with the limits form and its error"

    page.get_by_label("Timeout (seconds)").fill("0")
    too_big.fill("2")
    page.get_by_role("button", name="Save limits").click()
    expect(message).to_contain_text("BAD_USER_INPUT: timeoutSeconds must be between 1 and 86400")
    expect(page.get_by_label("Timeout (seconds)")).to_have_attribute("aria-invalid", "true")
    expect(too_big).not_to_have_attribute("aria-invalid", "true")
    # Half a rate limit is the page's own refusal: nothing is sent.
    page.get_by_label("Timeout (seconds)").fill("")
    page.get_by_label("per seconds").fill("")

    def saves() -> int:  # the page's own polls (stats, the job list) go on meanwhile
        return sum("setTypeControl" in posted for posted in tab.watch.posted)

    sent = saves()
    page.get_by_role("button", name="Save limits").click()
    expect(message).to_contain_text("give both the number of claims and the period, or neither")
    assert saves() == sent

    # Empty fields clear the limits.
    for label in ("Max running", "Max running per concurrency key", "Claims"):
        page.get_by_label(label, exact=True).fill("")
    page.get_by_role("button", name="Save limits").click()
    expect(form).to_be_hidden()
    stored = controls(server)[LIMITED]
    limits = ("maxRunning", "maxRunningPerKey", "rateLimit", "timeoutSeconds")
    assert [stored[k] for k in limits] == [None] * 4, stored
    expect(row.locator("td").nth(2)).to_have_text("no limit")
    assert axe_violations(page) == [], "the Types view"


def test_saving_the_limits_form_keeps_what_another_admin_changed_meanwhile(tab: Tab) -> None:
    server = tab.server
    set_limits = "mutation($i: TypeControlInput!) { setTypeControl(input: $i) { type } }"
    server.gql(set_limits, {"i": {"type": EDITED, "maxRunning": 2, "timeoutSeconds": 30}}).ok()
    page = open_types(tab, server.admin_key)
    type_row(page, EDITED).locator('button[data-action="limits"]').click()
    expect(page.get_by_label("Max running", exact=True)).to_have_value("2")

    # Another admin raises maxRunning while this form is open; this one changes only the timeout.
    server.gql(set_limits, {"i": {"type": EDITED, "maxRunning": 7}}).ok()
    page.get_by_label("Timeout (seconds)").fill("90")
    page.get_by_role("button", name="Save limits").click()
    expect(page.locator("#limits-form")).to_be_hidden()
    stored = controls(server)[EDITED]
    assert (stored["maxRunning"], stored["timeoutSeconds"]) == (7, 90), stored
    expect(type_row(page, EDITED).locator("td").nth(2)).to_have_text("7")


# ---- bulk actions on the filtered list --------------------------------------------------


def test_bulk_cancel_states_the_matching_count_and_cancels_them_all(tab: Tab) -> None:
    server = tab.server
    enqueue_many(server, BULK_CANCEL, 29)
    cancel(server, enqueue(server, BULK_CANCEL))  # already CANCELLED: not counted
    untouched = enqueue(server, "email")
    page = tab.sign_in(server.admin_key)
    cancel_button = page.locator('[data-bulk="cancel"]')
    expect(cancel_button).to_be_disabled()  # no filter: "every job" is not a bulk action
    expect(page.locator("#bulk-hint")).to_contain_text("Choose a status or a type")
    filter_list(page, "", BULK_CANCEL)
    expect(page.locator("#jobs-summary")).to_have_text("30 matching")

    # First the count; Back changes nothing.
    cancel_button.click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("heading")).to_have_text("Cancel 29 jobs?")
    expect(page.locator("#bulk-dialog-text")).to_contain_text(f"29 PENDING jobs match type {BULK_CANCEL}")
    expect(dialog.get_by_role("button", name="Back")).to_be_focused()
    dialog.get_by_role("button", name="Back").click()
    expect(dialog).to_be_hidden()
    expect(cancel_button).to_be_focused()
    cancel_button.press("Enter")
    expect(dialog).to_be_visible()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    page.wait_for_timeout(200)
    assert count(server, "PENDING", BULK_CANCEL) == 29 and bulk_mutations(tab, "cancelJobs") == []

    cancel_button.click()
    expect(dialog.get_by_role("button", name="Cancel 29 jobs")).to_be_visible()
    assert axe_violations(page) == [], "the dashboard with the confirmation open"
    dialog.get_by_role("button", name="Cancel 29 jobs").click()
    expect(page.locator("#bulk-progress")).to_have_text("Done: 29 jobs cancelled.")
    assert count(server, "PENDING", BULK_CANCEL) == 0
    assert count(server, "CANCELLED", BULK_CANCEL) == 30
    assert status_of(server, untouched) == "PENDING", "another type's job"
    assert len(bulk_mutations(tab, "cancelJobs")) == 1
    expect(page.locator("#jobs tbody .status")).to_have_count(25)
    expect(page.locator("#jobs tbody .status").first).to_have_text("CANCELLED")  # the list refreshed
    deadline = time.monotonic() + 5
    while set(page.locator("#jobs tbody .status").all_inner_texts()) != {"CANCELLED"}:
        assert time.monotonic() < deadline, page.locator("#jobs tbody .status").all_inner_texts()
        page.wait_for_timeout(50)
    expect(cancel_button).to_be_focused()

    # Nothing left to cancel: said so, no confirmation.
    cancel_button.click()
    expect(page.locator("#bulk-progress")).to_contain_text("No jobs match")
    expect(dialog).to_be_hidden()


def test_bulk_cancel_of_more_than_one_call_loops_until_more_is_false(tab: Tab) -> None:
    server = tab.server
    enqueue_many(server, BULK_MANY, 612)  # the page cancels 500 a call
    page = tab.sign_in(server.admin_key)
    filter_list(page, "PENDING", BULK_MANY)
    page.locator('[data-bulk="cancel"]').click()
    dialog = page.get_by_role("dialog")
    expect(page.locator("#bulk-dialog-text")).to_contain_text(
        f"612 PENDING jobs match status PENDING, type {BULK_MANY}"
    )
    dialog.get_by_role("button", name="Cancel 612 jobs").click()
    expect(page.locator("#bulk-progress")).to_have_text("Done: 612 jobs cancelled.")
    assert len(bulk_mutations(tab, "cancelJobs")) == 2, "500, then the rest, until `more` is false"
    assert count(server, "PENDING", BULK_MANY) == 0
    assert count(server, "CANCELLED", BULK_MANY) == 612


def test_bulk_retry_for_an_admin_retries_the_failed_and_cancelled_matches(tab: Tab) -> None:
    server = tab.server
    failed = failed_jobs(server, BULK_RETRY, 3)
    cancelled = [enqueue(server, BULK_RETRY) for _ in range(2)]
    for job_id in cancelled:
        cancel(server, job_id)
    pending = enqueue(server, BULK_RETRY)
    page = tab.sign_in(server.admin_key)
    filter_list(page, "FAILED", BULK_RETRY)
    expect_rows(page, list(reversed(failed)))
    retry = page.locator('[data-bulk="retry"]')
    retry.click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_role("heading")).to_have_text("Retry 3 jobs?")
    expect(page.locator("#bulk-dialog-text")).to_contain_text(
        f"3 FAILED jobs match status FAILED, type {BULK_RETRY}"
    )
    dialog.get_by_role("button", name="Retry 3 jobs").click()
    expect(page.locator("#bulk-progress")).to_have_text("Done: 3 jobs retried.")
    assert [status_of(server, j) for j in failed] == ["PENDING"] * 3
    assert [status_of(server, j) for j in cancelled] == ["CANCELLED"] * 2, "the filter said FAILED"
    expect(page.locator("#jobs-summary")).to_have_text("0 matching")

    # Any status: FAILED and CANCELLED both count, each told.
    page.select_option("select[name=status]", "")
    retry.click()
    expect(page.locator("#bulk-dialog-text")).to_contain_text("2 jobs (0 FAILED, 2 CANCELLED) match")
    dialog.get_by_role("button", name="Retry 2 jobs").click()
    expect(page.locator("#bulk-progress")).to_have_text("Done: 2 jobs retried.")
    assert [status_of(server, j) for j in [*failed, *cancelled, pending]] == ["PENDING"] * 6
    page.select_option("select[name=status]", "COMPLETED")
    expect(retry).to_be_disabled()
    expect(page.locator('[data-bulk="cancel"]')).to_be_disabled()
    expect(page.locator("#bulk-hint")).to_contain_text("Only PENDING jobs can be cancelled")


def test_a_producer_sees_cancel_matching_but_not_retry_and_cancels_only_its_own(tab: Tab) -> None:
    server = tab.server
    producer = server.make_key(f"producer-{time.monotonic_ns()}", "producer")
    enqueue_many(server, PRODUCED, 3, key=producer)
    others = [enqueue(server, PRODUCED) for _ in range(2)]  # the admin's
    page = tab.sign_in(producer)
    expect(page.locator('[data-bulk="cancel"]')).to_be_visible()
    expect(page.locator('[data-bulk="retry"]')).to_be_hidden()
    assert page.get_by_role("button", name="Retry matching").count() == 0
    filter_list(page, "PENDING", PRODUCED)
    page.locator('[data-bulk="cancel"]').click()
    expect(page.locator("#bulk-dialog-text")).to_contain_text(
        "3 PENDING jobs match status PENDING, type produced"
    )
    expect(page.locator("#bulk-dialog-text")).to_contain_text("among the jobs you enqueued")
    page.get_by_role("dialog").get_by_role("button", name="Cancel 3 jobs").click()
    expect(page.locator("#bulk-progress")).to_have_text("Done: 3 jobs cancelled.")
    assert count(server, "CANCELLED", PRODUCED) == 3
    assert [status_of(server, j) for j in others] == ["PENDING", "PENDING"], "not the producer's"
    assert bulk_mutations(tab, "retryJobs") == []


def test_the_job_detail_shows_its_concurrency_key_and_timeout(tab: Tab) -> None:
    server = tab.server
    keyed = enqueue(server, "report", concurrencyKey="tenant-7", timeoutSeconds=45)
    plain = enqueue(server, "report")
    page = tab.sign_in(server.admin_key, f"/#job/{keyed}")
    fields = page.locator("#detail-fields")
    expect(fields).to_contain_text("tenant-7")
    terms = fields.locator("dt").all_inner_texts()
    values = dict(zip(terms, fields.locator("dd").all_inner_texts(), strict=True))
    assert values["Concurrency key"] == "tenant-7" and values["Timeout"] == "45 s", values
    page.evaluate("hash => { window.location.hash = hash; }", f"#job/{plain}")
    expect(page.locator("#detail-title")).to_contain_text(f"Job #{plain}")
    expect(fields).to_contain_text("not set (the type's, if any)")
    terms = fields.locator("dt").all_inner_texts()
    values = dict(zip(terms, fields.locator("dd").all_inner_texts(), strict=True))
    assert values["Concurrency key"] == "none", values
    assert json.dumps(values)  # every field rendered as text
