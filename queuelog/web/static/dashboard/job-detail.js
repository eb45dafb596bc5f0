// The job detail pane (#job/<id>): one job's fields, progress, payload, result, error (ADMIN),
// attempts, timeline and dependencies, read with job(id) and then followed with jobUpdated; its actions
// (job-actions.js) for the roles allowed.
import { renderActions } from "./job-actions.js";
import { renderAttempts } from "./job-attempts.js";
import { closeEdit } from "./job-edit.js";
import { selectRow } from "./job-list.js";
import { progressView } from "./job-progress.js";
import { renderTimeline } from "./job-timeline.js";
import { detailQuery } from "./queries.js";
import { $, dependencies, scheduleJobsLink, seconds, shortId, statusBadge, timeElement } from "./render.js";
import { call, isAdmin, mayReadSchedules, state } from "./session.js";

// The pane turns to job `id`, empty until its answer comes: nothing of the job shown before
// stays under the new heading, and that job's late answers and updates are dropped.
export function openDetail(id) {
  stopFollowing();
  state.detailView += 1;
  state.detailId = id;
  clearDetail();
  selectRow(id);
  $("detail").hidden = false;
  $("workspace").classList.remove("no-detail");
  $("detail-title").textContent = `Job #${shortId(id)}`;
}

export function closeDetail() {
  stopFollowing();
  state.detailView += 1;
  state.detailId = null;
  clearDetail();
  selectRow(null);
  $("detail").hidden = true;
  $("workspace").classList.add("no-detail");
}

// Shown again by renderDetail: while a job loads, and when there is none, the pane is empty.
function clearDetail() {
  state.detail = null;
  closeEdit();
  $("detail-body").hidden = true;
  ["detail-fields", "actions", "timeline"].forEach((part) => $(part).replaceChildren());
  $("attempts").tBodies[0].replaceChildren();
  delete $("actions").dataset.signature;
  $("detail-payload").textContent = "";
  $("detail-result").textContent = "";
  $("detail-error").textContent = "";
  $("detail-error-block").hidden = true;
  showDetailMessage("");
}

export async function loadDetail(id) {
  const view = state.detailView;
  const job = await readJob(id);
  if (view !== state.detailView) return; // the person has moved on to another job
  if (job) renderDetail(job);
  else showNoSuchJob(id);
}

// job(id), or null when there is no such job for this key, which includes an id the server
// cannot even parse ("abc", ""): that error is about the `job` field's one argument.
async function readJob(id) {
  try {
    return (await call(detailQuery("job", isAdmin()), { id })).job;
  } catch (error) {
    if (error.code === "BAD_USER_INPUT" && error.path[0] === "job") return null;
    throw error;
  }
}

function showNoSuchJob(id) {
  clearDetail();
  state.detailId = null; // nothing to refresh or follow
  $("detail-title").textContent = "No such job";
  showDetailMessage(
    id ? `Job #${shortId(id)} does not exist, or this key may not see it.` : "This link names no job.",
  );
}

// jobUpdated: the job as it is now, then after every change, until it is terminal.
export function followDetail(id) {
  stopFollowing();
  const view = state.detailView;
  state.stopDetailUpdates = state.socket.subscribe(
    { query: detailQuery("jobUpdated", isAdmin()), variables: { id } },
    {
      next: (message) => {
        const job = message.data && message.data.jobUpdated;
        if (job && view === state.detailView) renderDetail(job);
      },
      error: () => {},
      complete: () => {},
    },
  );
}

export function stopFollowing() {
  if (state.stopDetailUpdates) state.stopDetailUpdates();
  state.stopDetailUpdates = null;
}

function renderDetail(job) {
  state.detail = job;
  $("detail-body").hidden = false;
  $("detail-title").textContent = `Job #${job.id} · ${job.type}`;
  const fields = [
    ["Status", statusOf(job)],
    ["Progress", progressView(job)],
    ["Priority", job.priority],
    ["Attempts", String(job.attempt)],
    ["Retries", `${job.retryCount} of ${job.maxRetries}`],
    ["Snoozes", String(job.snoozeCount)],
    ["Worker", job.workerId || "none"],
    ["Lease expires", job.leaseExpiresAt ? timeElement(job.leaseExpiresAt) : "no lease"],
    ["Claimed", job.claimedAt ? timeElement(job.claimedAt) : "never"],
    ["Runs at", timeElement(job.runAt)],
    ["Expires", expiryOf(job)],
    ["Finished", job.finishedAt ? timeElement(job.finishedAt) : "not yet"],
    ["Created", timeElement(job.createdAt)],
    ["Updated", timeElement(job.updatedAt)],
    ["Idempotency key", job.idempotencyKey || "none"],
    ["Concurrency key", job.concurrencyKey || "none"],
    ["Timeout", job.timeoutSeconds === null ? "not set (the type's, if any)" : seconds(job.timeoutSeconds)],
    ["Schedule", scheduleOf(job)],
    ["Depends on", dependencyLinks(job.dependsOn)],
    ["Waiting for", waitingText(job)],
  ];
  $("detail-fields").replaceChildren(
    ...fields.flatMap(([name, value]) => {
      const term = document.createElement("dt");
      term.textContent = name;
      const description = document.createElement("dd");
      description.append(value);
      return [term, description];
    }),
  );
  $("detail-payload").textContent = JSON.stringify(job.payload, null, 2);
  $("detail-result").textContent = job.result === null ? "none" : JSON.stringify(job.result, null, 2);
  $("detail-error-block").hidden = !isAdmin();
  if (isAdmin()) $("detail-error").textContent = job.error || "none";
  renderActions(job, showActedOn, showDetailMessage);
  renderAttempts(job);
  renderTimeline(job);
}

// The job as an action on it answered: shown, and followed afresh (a retried job changes again).
function showActedOn(job) {
  renderDetail(job);
  if (state.socket) followDetail(job.id);
}

function statusOf(job) {
  const badge = statusBadge(job.status);
  if (!job.cancelRequested || job.status !== "RUNNING") return badge;
  const status = document.createElement("span");
  status.append(badge, " · cancellation requested");
  return status;
}

// expiresAt: a PENDING job not claimed by then is CANCELLED instead.
function expiryOf(job) {
  if (!job.expiresAt) return "never";
  const expiry = document.createElement("span");
  expiry.append(timeElement(job.expiresAt));
  if (job.status === "PENDING") expiry.append(" (cancelled if not claimed by then)");
  return expiry;
}

// The schedule that enqueued the job: for the keys that may filter by it, a link to the list
// of its jobs.
function scheduleOf(job) {
  if (!job.scheduleName) return "none";
  if (!mayReadSchedules()) return job.scheduleName;
  return scheduleJobsLink(job.scheduleName, job.scheduleName);
}

// Job.dependsOn: each a link to that job's detail. (The API has no field for the jobs that
// wait for this one, so dependents are not listed.)
function dependencyLinks(ids) {
  if (!ids.length) return "nothing";
  const list = document.createElement("ul");
  list.className = "inline-list";
  list.append(
    ...ids.map((id) => {
      const link = document.createElement("a");
      link.href = `#job/${encodeURIComponent(id)}`;
      link.textContent = `#${shortId(id)}`;
      link.setAttribute("aria-label", `Job ${shortId(id)}`);
      link.dataset.dependency = id;
      const item = document.createElement("li");
      item.append(link);
      return item;
    }),
  );
  return list;
}

function waitingText(job) {
  const total = job.dependsOn.length;
  if (!total) return "nothing";
  if (job.waitingFor === 0) return `nothing: ${total === 1 ? "its dependency is" : `all ${total} are`} COMPLETED`;
  const text = `${job.waitingFor.toLocaleString("en")} of ${dependencies(total)} not COMPLETED yet`;
  return job.status === "PENDING" ? `${text}: not claimed before they are` : text;
}

function showDetailMessage(text) {
  $("detail-message").textContent = text;
  $("detail-message").hidden = !text;
}
