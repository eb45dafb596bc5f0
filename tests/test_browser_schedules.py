"""The dashboard's schedules and dependencies (API.md sections 10 and 11) in a real browser.

The Schedules view (schedules, pauseSchedule, resumeSchedule, deleteSchedule after a
confirmation), what each role sees of it, and the job detail's and job list's dependency
fields (dependsOn as links, waitingFor, scheduleName). The browser, the per-test context and
its watch (no request leaves 127.0.0.1, no CSP violation, no uncaught script error, a
screenshot when a test fails) and the axe check come from test_browser.py, as in
test_browser_flow.py; this module runs its own server, and each test its own schedules and
job types, so that no test sees another's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import DEFAULT_JOB_TYPES, Server, launch_server
from test_browser import MISSING, Tab, axe_violations, browser, enqueue, tab

if MISSING is None:
    from playwright.sync_api import Page, expect

__all__ = ["browser", "tab"]  # fixtures this module uses from test_browser.py

TICKED = "ticked"
REPORTED = "nightly-report"
CHAINED = "chained"
SWEPT = "swept"
WATCHED = "watched"
SCHEDULE_TYPES = (TICKED, REPORTED, CHAINED, SWEPT, WATCHED)

SCHEDULE_FIELDS = "name type cron timezone paused nextRunAt lastRunAt lastJobId"
PUT = f"mutation($i: ScheduleInput!) {{ putSchedule(input: $i) {{ {SCHEDULE_FIELDS} }} }}"
SCHEDULES = f"{{ schedules {{ {SCHEDULE_FIELDS} }} }}"
CLAIM = "mutation($t: String!) { claimJob(types: [$t]) { id attempt } }"
COMPLETE = "mutation($id: ID!, $a: Int) { completeJob(id: $id, attempt: $a) { status } }"
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

    # The last job's link opens its detail, which names the schedule (a link back to the view),
    # and the job list shows the schedule beside the job.
    last_link.click()
    expect(page.locator("#detail-title")).to_contain_text(f"Job #{last} · {TICKED}")
    expect(page.locator("#schedules-view")).to_be_hidden()
    assert detail_values(page)["Schedule"] == "ticking"
    expect(tab.row(last).locator("td").nth(3)).to_have_text("ticking")
    page.locator("#detail-fields").get_by_role("link", name="Schedule ticking").click()
    expect(page.locator("#schedules-title")).to_be_focused()
    expect(page.locator("#detail")).to_be_hidden()
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
    page.get_by_role("link", name="Jobs").click()
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

    # A producer may not read schedules: no link, and at #schedules a message, not a refusal.
    page.click("#forget")
    producer = server.make_key(f"producer-{time.monotonic_ns()}", "producer")
    sent = len(tab.watch.posted)
    page = tab.sign_in(producer)
    expect(page.get_by_role("link", name="Types")).to_be_visible()
    expect(page.get_by_role("link", name="Schedules")).to_be_hidden()
    page.evaluate("() => { window.location.hash = '#schedules'; }")
    expect(page.locator("#schedules-message")).to_have_text(
        "Schedules are shown to ADMIN and VIEWER keys only; this key is PRODUCER."
    )
    expect(page.locator("#schedules")).to_be_hidden()
    expect(page.locator("#banner")).to_be_hidden()
    page.wait_for_timeout(200)
    assert not [q for q in tab.watch.posted[sent:] if "schedules" in q], "the page never asks"


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
