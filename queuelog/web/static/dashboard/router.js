// The address's hash picks the view: `#types` the Types view, `#schedules` the Schedules view,
// anything else the jobs view, with a job open for `#job/<id>` and the list filtered by a
// schedule for `#jobs?schedule=<name>`.
import { closeBulk, updateBulk } from "./bulk.js";
import { closeDetail, followDetail, loadDetail, openDetail } from "./job-detail.js";
import { changePage, setScheduleOptions } from "./job-list.js";
import { closeLimits } from "./limits-form.js";
import { $ } from "./render.js";
import { loadSchedules } from "./schedules.js";
import { mayReadSchedules, quietly, state } from "./session.js";
import { loadTypes } from "./types.js";

// API.md section 10: what a schedule may be called (a link's name that is not one is ignored).
const SCHEDULE_NAME = /^[A-Za-z0-9._-]{1,100}$/;

// `#job/<id>`: the id as the link gives it (text that does not decode is kept as it is).
function hashJobId() {
  const match = /^#job\/(.*)$/.exec(window.location.hash);
  if (!match) return null;
  try {
    return decodeURIComponent(match[1]);
  } catch {
    return match[1];
  }
}

// `#jobs?schedule=<name>`: the job list of that schedule's jobs (the links of the Schedules
// view and of the job detail), or null.
function hashSchedule() {
  const match = /^#jobs\?schedule=(.*)$/.exec(window.location.hash);
  if (!match) return null;
  try {
    return decodeURIComponent(match[1]);
  } catch {
    return match[1];
  }
}

function hashView() {
  const hash = window.location.hash;
  if (hash === "#types") return "types";
  if (hash === "#schedules") return "schedules";
  return "jobs";
}

function showView(view) {
  const changed = view !== state.view;
  state.view = view;
  document.querySelectorAll("[data-view]").forEach((part) => (part.hidden = part.dataset.view !== view));
  document.querySelectorAll("[data-view-link]").forEach((link) => {
    if (link.dataset.viewLink === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  });
  return changed;
}

// Shows the view the hash names; `focus`: the person followed a link, so the focus goes to
// the view's heading (or the job's).
export async function route(focus) {
  if (!state.key) return;
  const changed = showView(hashView());
  if (state.view === "types") {
    closeDetail();
    if (focus) $("types-title").focus();
    await quietly(loadTypes());
    return;
  }
  closeLimits();
  if (state.view === "schedules") {
    closeDetail();
    if (focus) $("schedules-title").focus();
    if (mayReadSchedules()) await quietly(loadSchedules()); // others: the message says why not
    return;
  }
  if (changed) quietly(loadSchedules()); // the schedule filter's names, afresh
  if (hashSchedule() !== null) {
    closeDetail();
    showScheduleJobs(hashSchedule(), focus);
    return;
  }
  const id = hashJobId();
  if (id === null) {
    closeDetail();
    if (focus && changed) $("overview-title").focus();
    return;
  }
  openDetail(id);
  if (focus) $("detail-title").focus();
  const view = state.detailView;
  await quietly(loadDetail(id));
  if (state.socket && view === state.detailView && state.detailId !== null) followDetail(id);
}

// `#jobs?schedule=<name>`: the list of the schedule's jobs from its newest page, the status and
// type filters back to any. The address then says `#jobs` (the filters are not kept in it, as
// the status and type ones never are), so that the same link works again after the filter
// changes. The focus goes to the schedule filter, which names the schedule.
function showScheduleJobs(name, focus) {
  history.replaceState(null, "", "#jobs");
  if (!mayReadSchedules() || !SCHEDULE_NAME.test(name)) {
    if (focus) $("overview-title").focus(); // not this key's, or no schedule's name: the list as it is
    return;
  }
  closeBulk(); // a confirmation open for the old filter is not one for this list
  $("status-filter").value = "";
  $("type-filter").value = "";
  setScheduleOptions([...state.schedules.keys()], name);
  updateBulk();
  changePage([null]);
  if (focus) $("schedule-filter").focus();
}
