// The jobs table (jobs(first: 25), newest first), its filters by status, type and schedule,
// and its pages.
import { JOBS_QUERY } from "./queries.js";
import { $, cell, dependencies, statusBadge, timeElement } from "./render.js";
import { call, mayReadSchedules, quietly, state } from "./session.js";

const PAGE_SIZE = 25;
const JOB_COLUMNS = 8;

export async function loadJobs() {
  const ticket = ++state.jobsRequest;
  const variables = {
    status: $("status-filter").value || null,
    type: $("type-filter").value || null,
    scheduleName: scheduleFilter(),
    first: PAGE_SIZE,
    after: state.cursors.at(-1),
  };
  const { jobs } = await call(JOBS_QUERY, variables);
  if (ticket !== state.jobsRequest) return; // a newer filter or page is on its way
  const rows = jobs.nodes.map(jobRow);
  if (!rows.length) {
    const empty = cell("No jobs match.");
    empty.colSpan = JOB_COLUMNS;
    const row = document.createElement("tr");
    row.append(empty);
    rows.push(row);
  }
  keepingFocus(() => $("jobs").tBodies[0].replaceChildren(...rows));
  state.nextCursor = jobs.pageInfo.hasNextPage ? jobs.pageInfo.endCursor : null;
  const page = state.cursors.length;
  $("jobs-summary").textContent = `${jobs.totalCount.toLocaleString("en")} matching`;
  $("page-number").textContent = `Page ${page}`;
  $("next").disabled = !state.nextCursor;
  $("previous").disabled = page === 1;
  $("newest").disabled = page === 1;
}

export function jobRow(job) {
  const row = document.createElement("tr");
  row.dataset.jobId = job.id;
  if (job.id === state.detailId) row.classList.add("selected");
  const link = document.createElement("a");
  link.href = `#job/${encodeURIComponent(job.id)}`;
  link.textContent = `#${job.id}`;
  const waiting = isWaiting(job);
  const label = `Job ${job.id}, ${job.type}, ${job.status}` + (waiting ? `, waiting for ${dependencies(job.waitingFor)}` : "");
  link.setAttribute("aria-label", label);
  const status = document.createElement("span");
  status.className = "status-cell";
  status.append(statusBadge(job.status));
  if (waiting) status.append(" ", waitingBadge(job.waitingFor));
  row.append(
    cell(link),
    cell(job.type),
    cell(status),
    cell(job.scheduleName || ""),
    cell(job.priority),
    cell(String(job.attempt), "num"),
    cell(timeElement(job.createdAt)),
    cell(timeElement(job.updatedAt)),
  );
  return row;
}

// A PENDING job with dependencies not COMPLETED yet: not claimed whatever its runAt says.
function isWaiting(job) {
  return job.status === "PENDING" && job.waitingFor > 0;
}

function waitingBadge(count) {
  const badge = document.createElement("span");
  badge.className = "waiting";
  badge.textContent = `waiting for ${count.toLocaleString("en")}`;
  badge.title = `${dependencies(count)} not COMPLETED yet: not claimed before they are`;
  return badge;
}

// Rows are redrawn on every refresh: a keyboard user's focus stays on the same job's link.
export function keepingFocus(redraw) {
  const focused = document.activeElement && document.activeElement.closest("#jobs tr[data-job-id]");
  redraw();
  if (focused && !focused.isConnected) {
    const again = document.querySelector(`#jobs tr[data-job-id="${CSS.escape(focused.dataset.jobId)}"] a`);
    if (again) again.focus();
  }
}

// The row of the job open in the detail pane is marked (none: `id` null).
export function selectRow(id) {
  document.querySelectorAll("#jobs tr.selected").forEach((r) => r.classList.remove("selected"));
  const row = id === null ? null : document.querySelector(`#jobs tr[data-job-id="${CSS.escape(id)}"]`);
  if (row) row.classList.add("selected");
}

export function changePage(cursors) {
  state.cursors = cursors;
  quietly(loadJobs());
}

// ---- the filters -----------------------------------------------------------------------

export function setTypeOptions(types) {
  const select = $("type-filter");
  const have = new Set([...select.options].map((o) => o.value));
  for (const type of types.sort()) {
    if (!have.has(type)) select.add(new Option(type, type));
  }
}

// The schedule filter's choices: "any", the schedules as last read, and the one chosen (a
// schedule deleted since still names its jobs). Redrawn only when they change.
export function setScheduleOptions(names, chosen = $("schedule-filter").value) {
  const select = $("schedule-filter");
  const wanted = [...new Set(chosen ? [...names, chosen] : names)].sort();
  const have = [...select.options].slice(1).map((option) => option.value);
  if (have.length !== wanted.length || have.some((name, i) => name !== wanted[i])) {
    select.replaceChildren(new Option("any", ""), ...wanted.map((name) => new Option(name, name)));
  }
  select.value = chosen;
}

// The schedule the list is filtered by, or null: the filter is for ADMIN and VIEWER, who may
// read schedules (a PRODUCER's jobs(scheduleName:) is always empty).
export function scheduleFilter() {
  return (mayReadSchedules() && $("schedule-filter").value) || null;
}
