"""The dashboard's schedules and dependencies (API.md sections 10 and 11) in a real browser.

The Schedules view (schedules, pauseSchedule, resumeSchedule, deleteSchedule after a
confirmation), what each role sees of it, the job list's schedule filter (jobs(scheduleName:),
with the status and type filters and across pages; the bulk actions off while it is set) and
the links to it from the Schedules view and the job detail, and the job detail's and job
list's dependency fields (dependsOn as links, waitingFor, scheduleName). The browser, the per-test context and
its watch (no request leaves 127.0.0.1, no CSP violation, no uncaught script error, a
screenshot when a test fails) and the axe check come from test_browser.py, as in
test_browser_flow.py; this module runs its own server, and each test its own schedules and
job types, so that no test sees another's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import DEFAULT_JOB_TYPES, Server, launch_server

from browser.test_browser import MISSING, Tab, axe_violations, browser, enqueue, tab
from queuelog.model import NewJob, Priority
from queuelog.retry_policy import RetryPolicy
from queuelog.storage.operations.schedules import creator
from queuelog.storage.repository import Repository

if MISSING is None:
    from playwright.sync_api import Page, expect

__all__ = ["browser", "tab"]  # fixtures this module uses from test_browser.py

TICKED = "ticked"
REPORTED = "nightly-report"
CHAINED = "chained"
SWEPT = "swept"
WATCHED = "watched"
SIEVED = "sieved"
SIEVED_TOO = "sieved-too"
LINKED = "linked"
SCHEDULE_TYPES = (TICKED, REPORTED, CHAINED, SWEPT, WATCHED, SIEVED, SIEVED_TOO, LINKED)

SCHEDULE_FIELDS = "name type cron timezone paused nextRunAt lastRunAt lastJobId"
PUT = f"mutation($i: ScheduleInput!) {{ putSchedule(input: $i) {{ {SCHEDULE_FIELDS} }} }}"
SCHEDULES = f"{{ schedules {{ {SCHEDULE_FIELDS} }} }}"
CLAIM = "mutation($t: String!) { claimJob(types: [$t]) { id attempt } }"
COMPLETE = "mutation($id: ID!, $a: Int) { completeJob(id: $id, attempt: $a) { status } }"
# A page of the job list as the API gives it (the dashboard's page size).
JOBS_PAGE = """query($s: String, $st: JobStatus, $t: String, $a: String) {
  jobs(scheduleName: $s, status: $st, type: $t, first: 25, after: $a) {
    totalCount pageInfo { hasNextPage endCursor } nodes { id scheduleName } } }"""
MANY = "mutation($i: [EnqueueJobInput!]!) { enqueueJobs(inputs: $i) { job { id } } }"
BULK_HINT = "Bulk actions filter by status and type only"
# The cells of a schedule row after its name (a <th>): the Actions cell is the ADMIN's alone.
TYPE, CRON, STATE, NEXT_RUN, LAST_RUN, LAST_JOB = range(6)


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """This module's server (test_browser's `tab` fixture asks for `web` by name)."""
    types = ",".join([DEFAULT_JOB_TYPES, *SCHEDULE_TYPES])
    running = launch_server(tmp_path_factory.mktemp("browser-schedules"), job_types=types)
    yield running
    running.stop()


# ---- the queue, through the API ---------------------------------------------------------


def put_schedule(server: Server, name: str, job_type: str, cron: str, **fields: Any) -> dict[str, Any]:
    schedule = {"name": name, "type": job_type, "cron": cron, **fields}
    return server.gql(PUT, {"i": schedule}).ok()["putSchedule"]


def schedules(server: Server) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in server.gql(SCHEDULES).ok()["schedules"]}


def last_job_of(server: Server, name: str, timeout_s: float = 5.0) -> str:
    """The id of the first job the schedule enqueues (it ticks every second)."""
    deadline = time.monotonic() + timeout_s
    while (last := schedules(server)[name]["lastJobId"]) is None:
        assert time.monotonic() < deadline, f"{name} enqueued nothing in {timeout_s} s"
        time.sleep(0.1)
    return last


def jobs_page(
    server: Server,
    schedule: str | None = None,
    status: str | None = None,
    job_type: str | None = None,
    after: str | None = None,
) -> dict[str, Any]:
    variables = {"s": schedule, "st": status, "t": job_type, "a": after}
    return server.gql(JOBS_PAGE, variables).ok()["jobs"]


def ids_of(page: dict[str, Any]) -> list[str]:
    return [node["id"] for node in page["nodes"]]


def ticked_then_paused(server: Server, name: str, job_type: str, jobs: int) -> None:
    """Schedule `name` enqueues a `job_type` job every second until it has `jobs`, then pauses
    (its jobs stay PENDING: no worker claims these types)."""
    put_schedule(server, name, job_type, "* * * * * *")
    deadline = time.monotonic() + jobs + 5
    while jobs_page(server, name)["totalCount"] < jobs:
        assert time.monotonic() < deadline, f"{name} enqueued fewer than {jobs} jobs"
        time.sleep(0.2)
    server.gql("mutation($n: String!) { pauseSchedule(name: $n) { paused } }", {"n": name}).ok()


def complete_one_of(server: Server, job_type: str) -> str:
    """A fresh worker claims one claimable job of `job_type` and completes it: its id."""
    worker = server.make_key(f"worker-{time.monotonic_ns()}", "worker")
    job = server.gql(CLAIM, {"t": job_type}, key=worker).ok()["claimJob"]
    assert job is not None, f"no claimable {job_type} job"
    done = server.gql(COMPLETE, {"id": job["id"], "a": job["attempt"]}, key=worker).ok()
    assert done["completeJob"]["status"] == "COMPLETED"
    return job["id"]


# ---- the page ---------------------------------------------------------------------------


def open_schedules(tab: Tab, key: str | None = None) -> Page:
    """The Schedules view, signed in with `key` first (None: the tab already is)."""
    page = tab.sign_in(key) if key is not None else tab.page
    page.get_by_role("link", name="Schedules").click()
    expect(page.locator("#schedules-title")).to_be_focused()
    expect(page.locator("#schedules tr[data-schedule]")).to_have_count(len(schedules(tab.server)))
    return page


def schedule_row(page: Page, name: str) -> Any:
    return page.locator(f'#schedules tr[data-schedule="{name}"]')


def detail_values(page: Page) -> dict[str, str]:
    """The job detail's fields, term -> text, read in one go (the pane redraws as it likes)."""
    pairs = page.locator("#detail-fields").evaluate(
        "list => [...list.querySelectorAll('dt')].map(t => [t.innerText, t.nextElementSibling.innerText])"
    )
    return dict(pairs)


def mutations(tab: Tab, operation: str = "") -> list[str]:
    return [q for q in tab.watch.posted if q.lstrip().startswith("mutation") and operation in q]


def shown_ids(page: Page) -> list[str]:
    return page.locator("#jobs tr[data-job-id]").evaluate_all("rows => rows.map(r => r.dataset.jobId)")


def expect_api_page(page: Page, server: Server, timeout_s: float = 5.0, **query: Any) -> dict[str, Any]:
    """Wait until the list shows exactly the rows of the API's page for `query` (see
    jobs_page), in order, and says how many match; that page."""
    deadline = time.monotonic() + timeout_s
    while True:
        expected = jobs_page(server, **query)
        shown = shown_ids(page)
        summary = page.locator("#jobs-summary").inner_text()
        wanted = f"{expected['totalCount']:,} matching"
        if (shown, summary) == (ids_of(expected), wanted) or time.monotonic() > deadline:
            break
        page.wait_for_timeout(100)
    assert shown == ids_of(expected), query
    assert summary == wanted, query
    return expected


def schedule_cells(page: Page) -> list[str]:
    """The Schedule column of the job list (the fourth)."""
    return page.locator("#jobs tr[data-job-id] td:nth-child(4)").all_inner_texts()


def expect_bulk_off_for_the_schedule(page: Page) -> None:
    for action in ("cancel", "retry"):
        expect(page.locator(f'[data-bulk="{action}"]')).to_be_disabled()
    expect(page.locator("#bulk-hint")).to_contain_text(BULK_HINT)


# ---- the Schedules view -----------------------------------------------------------------


def test_the_schedules_view_lists_each_schedule_and_an_admin_pauses_and_resumes_one(tab: Tab) -> None:
    server = tab.server
    nightly = put_schedule(server, "nightly", REPORTED, "0 3 * * *", timezone="Europe/Paris")
    put_schedule(server, "ticking", TICKED, "* * * * * *", overlap="SKIP")  # one job, then skips
    last = last_job_of(server, "ticking")
    ticking = schedules(server)["ticking"]
    page = open_schedules(tab, server.admin_key)
    rows = page.locator("#schedules tr[data-schedule]")
    shown = rows.evaluate_all("rows => rows.map(r => r.dataset.schedule)")
    assert shown == list(schedules(server)), "every schedule, in the server's (name) order"
    expect(page.get_by_role("link", name="Schedules")).to_have_attribute("aria-current", "page")

    row = schedule_row(page, "nightly")
    cells = row.locator("td")
    expect(row.locator("th")).to_have_text("nightly")
    expect(cells.nth(TYPE)).to_have_text(REPORTED)
    expect(cells.nth(CRON)).to_have_text("0 3 * * * (Europe/Paris)")
    expect(cells.nth(STATE)).to_have_text("ACTIVE")
    expect(cells.nth(NEXT_RUN).locator("time")).to_have_attribute("datetime", nightly["nextRunAt"])
    expect(cells.nth(LAST_RUN)).to_have_text("never")
    expect(cells.nth(LAST_JOB)).to_have_text("none")
    ticks = schedule_row(page, "ticking").locator("td")
    expect(ticks.nth(CRON)).to_have_text("* * * * * * (UTC)")
    expect(ticks.nth(LAST_RUN).locator("time")).to_have_attribute("datetime", ticking["lastRunAt"])
    last_link = ticks.nth(LAST_JOB).get_by_role("link")
    expect(last_link).to_have_text(f"#{last}")
    expect(last_link).to_have_attribute("href", f"#job/{last}")
    assert axe_violations(page) == [], "the Schedules view"

    row.locator('button[data-action="pause"]').click()
    resume = row.locator('button[data-action="resume"]')
    expect(resume).to_be_focused()  # the button became the other one and kept the focus
    expect(cells.nth(STATE)).to_have_text("PAUSED")
    expect(cells.nth(NEXT_RUN)).to_have_text("none while paused")
    expect(page.locator("#schedules-message")).to_contain_text("nightly paused")
    stored = schedules(server)["nightly"]
    assert (stored["paused"], stored["nextRunAt"]) == (True, None), stored
    assert row.locator('button[data-action="pause"]').count() == 0

    resume.click()
    expect(row.locator('button[data-action="pause"]')).to_be_focused()
    expect(cells.nth(STATE)).to_have_text("ACTIVE")
    expect(page.locator("#schedules-message")).to_contain_text("nightly resumed")
    stored = schedules(server)["nightly"]
    assert stored["paused"] is False and stored["nextRunAt"] is not None, stored
    expect(cells.nth(NEXT_RUN).locator("time")).to_have_attribute("datetime", stored["nextRunAt"])
    assert len(mutations(tab, "pauseSchedule")) == 1 and len(mutations(tab, "resumeSchedule")) == 1

    # The last job's link opens its detail, which names the schedule (a link to the list of
    # its jobs), and the job list shows the schedule beside the job.
    last_link.click()
    expect(page.locator("#detail-title")).to_contain_text(f"Job #{last} · {TICKED}")
    expect(page.locator("#schedules-view")).to_be_hidden()
    assert detail_values(page)["Schedule"] == "ticking"
    expect(tab.row(last).locator("td").nth(3)).to_have_text("ticking")
    page.locator("#detail-fields").get_by_role("link", name="Jobs of schedule ticking").click()
    schedule_filter = page.locator("select[name=schedule]")
    expect(schedule_filter).to_be_focused()
    expect(schedule_filter).to_have_value("ticking")
    expect(page.locator("#detail")).to_be_hidden()
    assert expect_api_page(page, server, schedule="ticking")["totalCount"] == 1  # SKIP: the one job
    server.gql('mutation { pauseSchedule(name: "ticking") { paused } }').ok()  # quiet from here


def test_an_admin_deletes_a_schedule_only_after_confirming(tab: Tab) -> None:
    server = tab.server
    put_schedule(server, "sweep-a", SWEPT, "@daily")
    put_schedule(server, "sweep-b", SWEPT, "*/5 * * * *", timezone="Asia/Tokyo")
    page = open_schedules(tab, server.admin_key)
    row = schedule_row(page, "sweep-a")
    delete = row.locator('button[data-action="delete"]')
    dialog = page.get_by_role("dialog")

    # Back, and Escape, change nothing.
    delete.click()
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("heading")).to_have_text("Delete schedule sweep-a?")
    text = page.locator("#schedule-dialog-text")
    expect(text).to_contain_text(f"sweep-a will enqueue no more {SWEPT} jobs")
    expect(text).to_contain_text("The jobs it already enqueued stay")
    back = dialog.get_by_role("button", name="Back")
    expect(back).to_be_focused()
    back.click()
    expect(dialog).to_be_hidden()
    expect(delete).to_be_focused()
    delete.press("Enter")
    expect(dialog).to_be_visible()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(delete).to_be_focused()
    page.wait_for_timeout(200)
    assert "sweep-a" in schedules(server) and mutations(tab, "deleteSchedule") == []

    delete.click()
    confirm = dialog.get_by_role("button", name="Delete sweep-a")
    expect(confirm).to_be_visible()
    assert axe_violations(page) == [], "the Schedules view with the confirmation open"
    confirm.click()
    expect(dialog).to_be_hidden()
    expect(row).to_have_count(0)
    message = page.locator("#schedules-message")
    expect(message).to_have_text("Schedule sweep-a deleted; the jobs it enqueued stay.")
    expect(schedule_row(page, "sweep-b").locator('button[data-action="delete"]')).to_be_focused()
    assert "sweep-a" not in schedules(server) and "sweep-b" in schedules(server)
    assert len(mutations(tab, "deleteSchedule")) == 1
    # Read afresh (another view, then back), it stays gone.
    page.get_by_role("link", name="Jobs", exact=True).click()
    page.get_by_role("link", name="Schedules").click()
    expect(page.locator("#schedules tr[data-schedule]")).to_have_count(len(schedules(server)))
    expect(row).to_have_count(0)


def test_a_viewer_sees_the_schedules_without_buttons_and_a_producer_is_told_they_are_not_its(
    tab: Tab,
) -> None:
    server = tab.server
    put_schedule(server, "watched-hourly", WATCHED, "@hourly")
    viewer = server.make_key(f"viewer-{time.monotonic_ns()}", "viewer")
    page = open_schedules(tab, viewer)
    expect(schedule_row(page, "watched-hourly").locator("td").nth(STATE)).to_have_text("ACTIVE")
    assert page.locator("#schedules button").count() == 0
    expect(page.get_by_role("columnheader", name="Actions")).to_have_count(0)
    assert axe_violations(page) == [], "the Schedules view as a viewer"
    assert mutations(tab) == [], "a viewer's page sends no mutation"
    page.get_by_role("link", name="Jobs", exact=True).click()
    expect(page.locator("select[name=schedule]")).to_be_visible()  # a viewer filters by schedule too
    expect(page.locator('select[name=schedule] option[value="watched-hourly"]')).to_be_attached()

    # A producer may not read schedules: no link, and at #schedules a message, not a refusal.
    page.click("#forget")
    producer = server.make_key(f"producer-{time.monotonic_ns()}", "producer")
    sent = len(tab.watch.posted)
    page = tab.sign_in(producer)
    expect(page.get_by_role("link", name="Types")).to_be_visible()
    expect(page.get_by_role("link", name="Schedules")).to_be_hidden()
    expect(page.locator("select[name=schedule]")).to_be_hidden()  # a producer sees no schedule's jobs
    page.evaluate("() => { window.location.hash = '#schedules'; }")
    expect(page.locator("#schedules-message")).to_have_text(
        "Schedules are shown to ADMIN and VIEWER keys only; this key is PRODUCER."
    )
    expect(page.locator("#schedules")).to_be_hidden()
    expect(page.locator("#banner")).to_be_hidden()
    page.wait_for_timeout(200)
    assert not [q for q in tab.watch.posted[sent:] if "schedules" in q], "the page never asks"


# ---- the job list filtered by a schedule -------------------------------------------------


def enqueue_as_schedule(server: Server, name: str, job_type: str, count: int) -> list[int]:
    """`count` jobs of `job_type` enqueued as schedule `name`'s ticks would be (its creator,
    its name), through the storage layer beside the server, so that the counters that
    `jobs(scheduleName:)` reads hold them too."""
    jobs = [
        NewJob(
            job_type,
            {"n": n},
            Priority.MEDIUM,
            0,
            None,
            None,
            payload_json=f'{{"n":{n}}}',
            schedule_name=name,
        )
        for n in range(count)
    ]

    async def enqueued() -> list[int]:
        repository = Repository(server.database_url, RetryPolicy(10, 3600), event_feed="local")
        await repository.open()
        try:
            outcomes = await repository.enqueue(jobs, creator(name))
        finally:
            await repository.close()
        return [outcome.job.id for outcome in outcomes]

    # on a thread of its own: playwright's sync API keeps an event loop running on this one
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, enqueued()).result()


def test_the_schedule_filter_lists_exactly_that_schedules_jobs_with_the_other_filters_and_pages(
    tab: Tab,
) -> None:
    """Two schedules of one type, jobs of that type from no schedule, and more of a second type
    put into the first schedule's jobs in the database (a schedule enqueues a job a second: 30
    would take half a minute), so that its jobs fill two pages."""
    server = tab.server
    ticked_then_paused(server, "sieve-a", SIEVED, 3)
    ticked_then_paused(server, "sieve-b", SIEVED, 2)
    loose = [enqueue(server, SIEVED) for _ in range(3)]
    tagged = enqueue_as_schedule(server, "sieve-a", SIEVED_TOO, 27)
    cancelled = ids_of(jobs_page(server, "sieve-a", job_type=SIEVED))[:2]
    for job_id in cancelled:
        server.gql("mutation($id: ID!) { cancelJob(id: $id) { status } }", {"id": job_id}).ok()

    page = tab.sign_in(server.admin_key)
    schedule_filter = page.locator("select[name=schedule]")
    expect(schedule_filter).to_be_visible()
    expect(schedule_filter).to_have_value("")
    expect(schedule_filter.locator('option[value="sieve-b"]')).to_be_attached()
    options = schedule_filter.locator("option").evaluate_all("os => os.map(o => [o.value, o.text])")
    assert options[0] == ["", "any"], options
    assert [value for value, _ in options[1:]] == sorted(schedules(server)), "every schedule, by name"
    expect(page.locator('[data-bulk="cancel"]')).to_be_disabled()  # no filter yet: the usual hint
    expect(page.locator("#bulk-hint")).to_contain_text("Choose a status or a type")

    # One schedule: its jobs alone, newest first, both pages of them, as jobs(scheduleName:).
    page.select_option("select[name=schedule]", "sieve-a")
    first = expect_api_page(page, server, schedule="sieve-a")
    assert first["totalCount"] >= 30 and first["pageInfo"]["hasNextPage"], first["totalCount"]
    assert set(schedule_cells(page)) == {"sieve-a"}
    expect_bulk_off_for_the_schedule(page)
    assert axe_violations(page) == [], "the job list filtered by a schedule"
    page.click("#next")
    expect(page.locator("#page-number")).to_have_text("Page 2")
    second = expect_api_page(page, server, schedule="sieve-a", after=first["pageInfo"]["endCursor"])
    assert set(schedule_cells(page)) == {"sieve-a"}
    assert len(ids_of(first)) + len(ids_of(second)) == first["totalCount"], "two pages hold them all"
    assert not set(ids_of(first)) & set(ids_of(second))
    assert {str(t) for t in tagged} <= set(ids_of(first)) | set(ids_of(second))
    page.click("#previous")
    expect(page.locator("#page-number")).to_have_text("Page 1")
    expect_api_page(page, server, schedule="sieve-a")

    # With a status, then a type: both narrow the schedule's jobs; each starts at page 1.
    page.click("#next")
    expect(page.locator("#page-number")).to_have_text("Page 2")
    page.select_option("select[name=status]", "CANCELLED")
    expect(page.locator("#page-number")).to_have_text("Page 1")
    expect_api_page(page, server, schedule="sieve-a", status="CANCELLED")
    assert sorted(shown_ids(page)) == sorted(cancelled)
    expect_bulk_off_for_the_schedule(page)  # even though "retry matching" would fit the status
    page.select_option("select[name=status]", "")
    expect(page.locator(f'select[name=type] option[value="{SIEVED}"]')).to_be_attached()
    page.select_option("select[name=type]", SIEVED)
    ticked = expect_api_page(page, server, schedule="sieve-a", job_type=SIEVED)
    assert not set(ids_of(ticked)) & set(loose), "jobs of the type from no schedule are not among them"
    assert not set(ids_of(ticked)) & {str(t) for t in tagged}

    # The other schedule of the same type; then any schedule: the type's jobs, bulk back on.
    page.select_option("select[name=schedule]", "sieve-b")
    expect_api_page(page, server, schedule="sieve-b", job_type=SIEVED)
    assert set(schedule_cells(page)) == {"sieve-b"}
    expect_bulk_off_for_the_schedule(page)
    page.select_option("select[name=schedule]", "")
    everything = expect_api_page(page, server, job_type=SIEVED)
    assert set(loose) <= set(ids_of(everything))
    expect(page.locator('[data-bulk="cancel"]')).to_be_enabled()
    expect(page.locator("#bulk-hint")).to_have_text("")
    assert mutations(tab, "cancelJobs") == [] and mutations(tab, "retryJobs") == []


def test_the_schedules_views_jobs_link_and_the_job_details_open_the_list_of_its_jobs(tab: Tab) -> None:
    server = tab.server
    ticked_then_paused(server, "linked-a", LINKED, 2)
    ticked_then_paused(server, "linked-b", LINKED, 2)
    page = tab.sign_in(server.admin_key)
    page.select_option("select[name=status]", "FAILED")  # the link shows all the schedule's jobs
    page = open_schedules(tab)
    jobs_cell = schedule_row(page, "linked-a").locator("td").nth(LAST_JOB + 1)
    link = jobs_cell.get_by_role("link", name="Jobs of schedule linked-a")
    expect(link).to_have_text("jobs")
    expect(link).to_have_attribute("href", "#jobs?schedule=linked-a")
    assert axe_violations(page) == [], "the Schedules view with its jobs links"

    link.click()
    schedule_filter = page.locator("select[name=schedule]")
    expect(schedule_filter).to_be_focused()
    expect(schedule_filter).to_have_value("linked-a")
    expect(page.locator("#schedules-view")).to_be_hidden()
    expect(page.get_by_role("link", name="Jobs", exact=True)).to_have_attribute("aria-current", "page")
    expect(page.locator("select[name=status]")).to_have_value("")
    listed = expect_api_page(page, server, schedule="linked-a")
    assert listed["totalCount"] >= 2 and set(schedule_cells(page)) == {"linked-a"}
    expect_bulk_off_for_the_schedule(page)
    assert page.evaluate("() => window.location.hash") == "#jobs"  # the same link works again
    assert axe_violations(page) == [], "the job list a schedule's link opened"

    # The job detail's Schedule value links to the same list (whatever the filter was).
    page.select_option("select[name=schedule]", "linked-b")
    newest = expect_api_page(page, server, schedule="linked-b")
    job_id = ids_of(newest)[0]
    page.locator(f'#jobs tr[data-job-id="{job_id}"] a').click()
    expect(page.locator("#detail-title")).to_have_text(f"Job #{job_id} · {LINKED}")
    assert detail_values(page)["Schedule"] == "linked-b"
    page.select_option("select[name=schedule]", "")
    page.locator("#detail-fields").get_by_role("link", name="Jobs of schedule linked-b").click()
    expect(schedule_filter).to_have_value("linked-b")
    expect(page.locator("#detail")).to_be_hidden()
    expect_api_page(page, server, schedule="linked-b")

    # Back to the Schedules view, then its link again: the list follows it again.
    page.go_back()
    expect(page.locator("#detail-title")).to_have_text(f"Job #{job_id} · {LINKED}")
    open_schedules(tab).locator('#schedules tr[data-schedule="linked-a"] a[data-action="jobs"]').click()
    expect(schedule_filter).to_have_value("linked-a")
    expect_api_page(page, server, schedule="linked-a")

    # A link naming no possible schedule is ignored: no filter, no refusal on the page.
    page.evaluate("() => { window.location.hash = '#jobs?schedule=' + encodeURIComponent('no such/name'); }")
    expect(page.locator("#overview-title")).to_be_focused()
    expect(schedule_filter).to_have_value("linked-a")
    page.wait_for_timeout(200)
    expect(page.locator("#banner")).to_be_hidden()


# ---- dependencies in the job detail and the job list ------------------------------------


def test_the_job_detail_links_its_dependencies_and_says_how_many_it_waits_for(tab: Tab) -> None:
    server = tab.server
    first, second = enqueue(server, CHAINED), enqueue(server, CHAINED)
    waiting = enqueue(server, CHAINED, dependsOn=[first, second])
    done = complete_one_of(server, CHAINED)  # one of the two; the waiting job is not claimable
    other = second if done == first else first
    assert done in (first, second)

    page = tab.sign_in(server.admin_key, f"/#job/{waiting}")
    expect(page.locator("#detail-title")).to_have_text(f"Job #{waiting} · {CHAINED}")  # loaded
    links = page.locator("#detail-fields a[data-dependency]")
    expect(links).to_have_count(2)
    hrefs = links.evaluate_all("all => all.map(a => a.getAttribute('href'))")
    assert hrefs == [f"#job/{first}", f"#job/{second}"]
    assert links.all_inner_texts() == [f"#{first}", f"#{second}"]
    values = detail_values(page)
    assert "1 of 2 dependencies not COMPLETED yet" in values["Waiting for"], values
    assert values["Schedule"] == "none", values

    # The list shows the waiting job apart from the ones due now.
    page.select_option("select[name=type]", CHAINED)
    expect(page.locator("#jobs tr[data-job-id]")).to_have_count(3)
    expect(tab.row(waiting).locator(".waiting")).to_have_text("waiting for 1")
    expect(tab.row(waiting).locator(".status")).to_have_text("PENDING")
    expect(tab.row(other).locator(".waiting")).to_have_count(0)
    expect(tab.row(waiting).get_by_role("link")).to_have_attribute(
        "aria-label", f"Job {waiting}, {CHAINED}, PENDING, waiting for 1 dependency"
    )
    assert axe_violations(page) == [], "the job detail with its dependencies"

    # A dependency's link opens it; it waits for nothing.
    links.filter(has_text=f"#{other}").click()
    expect(page.locator("#detail-title")).to_have_text(f"Job #{other} · {CHAINED}")
    values = detail_values(page)
    assert (values["Depends on"], values["Waiting for"]) == ("nothing", "nothing"), values

    # Once the last dependency completes, the waiting job waits for nothing (read afresh),
    # and the list drops its badge (the COMPLETED event refreshes it).
    assert complete_one_of(server, CHAINED) == other
    page.go_back()
    expect(page.locator("#detail-title")).to_contain_text(f"Job #{waiting}")
    expect(page.locator("#detail-fields")).to_contain_text("nothing: all 2 are COMPLETED")
    expect(tab.row(waiting).locator(".waiting")).to_have_count(0)
