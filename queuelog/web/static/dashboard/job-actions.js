// The job detail's buttons, for the roles allowed: Cancel (a PENDING job, or a RUNNING one whose
// cancellation is not requested yet), Run now and Edit… (a PENDING job), Retry (ADMIN, a FAILED
// or CANCELLED job). Each mutation answers the job, which the detail then shows.
import { closeEdit, isEditOpen, openEdit } from "./job-edit.js";
import { detailQuery } from "./queries.js";
import { refreshSoon } from "./refresh.js";
import { $ } from "./render.js";
import { Stale, call, isAdmin, mayCancel, mayEdit, state } from "./session.js";

// [label, data-action, mutation]; "edit" opens the form rather than sending anything.
function wantedActions(job) {
  const wanted = [];
  if (mayEdit() && job.status === "PENDING") {
    wanted.push(["Run now", "run-now", "runJobNow"], ["Edit…", "edit", null]);
  }
  const cancellable = job.status === "PENDING" || (job.status === "RUNNING" && !job.cancelRequested);
  if (mayCancel() && cancellable) wanted.push(["Cancel job", "cancel", "cancelJob"]);
  if (isAdmin() && (job.status === "FAILED" || job.status === "CANCELLED")) {
    wanted.push(["Retry job", "retry", "retryJob"]);
  }
  return wanted;
}

// `shown(job)`: paints the job a mutation answered (and follows it afresh: a retried job changes
// again); `message(text)`: says why an action failed.
export function renderActions(job, shown, message) {
  const wanted = wantedActions(job);
  if (isEditOpen() && !wanted.some(([, action]) => action === "edit")) {
    closeEdit();
    message(`The job is ${job.status} now: it can no longer be edited.`);
  }
  // The same buttons stay in place (and keep the focus) while the job does not change.
  const signature = JSON.stringify([job.id, wanted]);
  const actions = $("actions");
  if (actions.dataset.signature === signature) return;
  actions.dataset.signature = signature;
  actions.replaceChildren(
    ...wanted.map(([label, action, operation]) =>
      operation ? actionButton(label, action, operation, job.id, shown, message) : editButton(label, shown),
    ),
  );
}

function editButton(label, shown) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "secondary";
  button.textContent = label;
  button.dataset.action = "edit";
  button.setAttribute("aria-controls", "edit-form");
  button.setAttribute("aria-expanded", String(isEditOpen()));
  button.addEventListener("click", () => (isEditOpen() ? closeEdit(true) : openEdit(state.detail, shown)));
  return button;
}

function actionButton(label, action, operation, id, shown, message) {
  const button = document.createElement("button");
  button.type = "button";
  button.textContent = label;
  button.dataset.action = action;
  button.addEventListener("click", async () => {
    const view = state.detailView;
    button.disabled = true;
    message("");
    try {
      const job = (await call(detailQuery(operation, isAdmin()), { id }))[operation];
      if (view === state.detailView) {
        shown(job);
        if (!button.isConnected) $("detail-title").focus(); // the action is done: its button is gone
      }
      refreshSoon();
    } catch (error) {
      if (error instanceof Stale) return;
      message(`${label} refused: ${error.plain}`);
      button.disabled = false;
    }
  });
  return button;
}
