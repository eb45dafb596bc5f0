// "Cancel matching…" and "Retry matching…" on the filtered job list (cancelJobs, retryJobs):
// a count of the matching jobs, a confirmation in #bulk-dialog that states it, then the calls
// with their progress.
import { loadDetail } from "./job-detail.js";
import { loadJobs, scheduleFilter } from "./job-list.js";
import { loadStats } from "./overview.js";
import { bulkMutation, matchingQuery } from "./queries.js";
import { $ } from "./render.js";
import { Stale, call, isAdmin, mayCancel, quietly, state } from "./session.js";

const BULK_LIMIT = 500; // cancelJobs/retryJobs: jobs per call, the progress shown between calls
// The bulk actions: the statuses each may change, its mutation, and how the page words it.
const BULK = {
  cancel: { statuses: ["PENDING"], mutation: "cancelJobs", verb: "Cancel", doing: "Cancelling", done: "cancelled" },
  retry: {
    statuses: ["FAILED", "CANCELLED"],
    mutation: "retryJobs",
    verb: "Retry",
    doing: "Retrying",
    done: "retried",
  },
};

// The list's filter as cancelJobs/retryJobs take it, or null when it names neither a status
// nor a type (the server refuses such a filter: "everything" is not a bulk action here).
// JobFilter has no schedule: while the list is filtered by one, the bulk actions are off
// (updateBulk), since they would act on more jobs than the list shows.
function listFilter() {
  const status = $("status-filter").value || null;
  const type = $("type-filter").value || null;
  return status || type ? { status, type } : null;
}

// The statuses of matching jobs that `action` would change (none: the filter excludes them).
function bulkStatuses(action, filter) {
  return BULK[action].statuses.filter((s) => !filter.status || filter.status === s);
}

// Each bulk button is on when the list's filter can match jobs it may change (and no bulk
// action is under way); the hint says why not otherwise.
export function updateBulk() {
  const filter = listFilter();
  const running = Boolean(state.bulk && state.bulk.running);
  const bySchedule = scheduleFilter() !== null;
  const shown = [...document.querySelectorAll("[data-bulk]")].filter((button) => !button.hidden);
  const usable = (button) => filter !== null && bulkStatuses(button.dataset.bulk, filter).length > 0;
  shown.forEach((button) => (button.disabled = running || bySchedule || !usable(button)));
  let hint = "";
  if (running || !shown.length) hint = "";
  else if (bySchedule) hint = "Bulk actions filter by status and type only: set Schedule to any to use them.";
  else if (filter === null) hint = "Choose a status or a type to act on every matching job.";
  else if (!shown.some(usable)) {
    hint = isAdmin()
      ? "Only PENDING jobs can be cancelled, and only FAILED or CANCELLED ones retried."
      : "Only PENDING jobs can be cancelled.";
  }
  $("bulk-hint").textContent = hint;
}

function describeFilter(filter) {
  const parts = [];
  if (filter.status) parts.push(`status ${filter.status}`);
  if (filter.type) parts.push(`type ${filter.type}`);
  return parts.join(", ");
}

// First the count (jobs(status:, type:) { totalCount } for each status the action changes),
// then a confirmation that states it.
export async function askBulk(action) {
  const filter = listFilter();
  if (!filter || state.bulk) return; // one at a time (a second click while counting does nothing)
  if (scheduleFilter() !== null) return; // the buttons are off: never more jobs than the list shows
  const statuses = bulkStatuses(action, filter);
  state.bulk = { action, filter, running: false };
  $("bulk-progress").textContent = "Counting matching jobs…";
  let total;
  let parts;
  try {
    const data = await call(matchingQuery(statuses), { type: filter.type });
    parts = statuses.map((s, i) => [s, data[`s${i}`].totalCount]);
    total = parts.reduce((sum, [, n]) => sum + n, 0);
  } catch (error) {
    state.bulk = null;
    if (!(error instanceof Stale)) $("bulk-progress").textContent = `Cannot count matching jobs: ${error.plain}`;
    return;
  }
  if (scheduleFilter() !== null) {
    state.bulk = null; // the list turned to one schedule's jobs while counting: no confirmation
    $("bulk-progress").textContent = "";
    return;
  }
  const words = BULK[action];
  if (total === 0) {
    state.bulk = null;
    const verb = words.verb.toLowerCase();
    $("bulk-progress").textContent = `No jobs match (${describeFilter(filter)}): nothing to ${verb}.`;
    return;
  }
  $("bulk-progress").textContent = "";
  const jobs = (n) => `${n.toLocaleString("en")} ${n === 1 ? "job" : "jobs"}`;
  // "12 PENDING jobs match ...", or with two statuses "5 jobs (3 FAILED, 2 CANCELLED) match ..."
  const matching =
    parts.length > 1
      ? `${jobs(total)} (${parts.map(([s, n]) => `${n.toLocaleString("en")} ${s}`).join(", ")})`
      : `${total.toLocaleString("en")} ${parts[0][0]} ${total === 1 ? "job" : "jobs"}`;
  $("bulk-dialog-title").textContent = `${words.verb} ${jobs(total)}?`;
  $("bulk-dialog-text").textContent =
    `${matching} ${total === 1 ? "matches" : "match"} ${describeFilter(filter)}` +
    (mayCancel() && !isAdmin() ? " among the jobs you enqueued" : "") +
    `. ${words.verb} ${total === 1 ? "it" : "them all"}? Jobs that change status meanwhile are left alone.`;
  $("bulk-confirm").textContent = `${words.verb} ${jobs(total)}`;
  $("bulk-dialog").showModal();
}

export function closeBulk() {
  if (state.bulk && !state.bulk.running) state.bulk = null;
  if ($("bulk-dialog").open) $("bulk-dialog").close();
}

// cancelJobs/retryJobs, BULK_LIMIT jobs a call, until `more` is false; the count so far shown.
export async function runBulk() {
  const bulk = state.bulk;
  if (!bulk || bulk.running) return;
  if (scheduleFilter() !== null) {
    closeBulk(); // the list turned to one schedule's jobs meanwhile: not what was confirmed
    return;
  }
  bulk.running = true;
  $("bulk-dialog").close();
  updateBulk();
  const words = BULK[bulk.action];
  const operation = words.mutation;
  const mutation = bulkMutation(operation);
  const button = document.querySelector(`[data-bulk="${bulk.action}"]`);
  const progress = $("bulk-progress");
  let done = 0;
  progress.textContent = `${words.doing} matching jobs…`;
  try {
    for (;;) {
      const answer = (await call(mutation, { filter: bulk.filter, limit: BULK_LIMIT }))[operation];
      done += answer.count;
      if (!answer.more) break;
      progress.textContent = `${words.doing} matching jobs… ${done.toLocaleString("en")} ${words.done} so far.`;
    }
    progress.textContent = `Done: ${done.toLocaleString("en")} ${done === 1 ? "job" : "jobs"} ${words.done}.`;
  } catch (error) {
    if (error instanceof Stale) return;
    progress.textContent = `Stopped after ${done.toLocaleString("en")} ${words.done}: ${error.plain}`;
  } finally {
    if (state.bulk === bulk) state.bulk = null;
    updateBulk();
  }
  // The buttons were off while it ran, which took the focus from the one that started it.
  if (!document.activeElement || document.activeElement === document.body) button.focus();
  quietly(loadStats());
  quietly(loadJobs());
  if (state.detailId) quietly(loadDetail(state.detailId));
}
