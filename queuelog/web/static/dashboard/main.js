// The jobs dashboard: a client of the public GraphQL API, with the key's own permissions.
// Reads only queueStats, jobs(first <= 50) and job(id) with its events, which the server
// answers from counters and indexes however many jobs there are, typeControls while the Types
// view is open and schedules while the Schedules view is (and, for the job list's schedule
// filter, at sign-in and on coming back to the jobs); listens on the websocket (jobEvents for
// everything, jobUpdated for the open job) and polls while the socket is down. Three views:
// jobs (#jobs, #job/<id>, #jobs?schedule=<name> for one schedule's jobs), types (#types) and
// schedules (#schedules); job actions (cancel, run now, edit, retry), flow-control actions
// (pause, limits, bulk cancel and retry) and schedule actions (pause, resume, delete) for the
// roles allowed.
//
// This module binds the page's controls and signs in with the key the tab holds; each part of
// the page has a module of its own beside it (README: "Dashboard and GraphiQL").
import { bindKeyForm, storedKey } from "../keybox.js";
import { askBulk, closeBulk, runBulk, updateBulk } from "./bulk.js";
import { closeDetail } from "./job-detail.js";
import { closeEdit, saveEdit } from "./job-edit.js";
import { changePage } from "./job-list.js";
import { closeLimits, openLimits, saveLimits } from "./limits-form.js";
import { $ } from "./render.js";
import { route } from "./router.js";
import { askDeleteSchedule, closeScheduleDialog, deleteSchedule } from "./schedule-delete.js";
import { onKeyRefused, state } from "./session.js";
import { signIn, signOut } from "./sign-in.js";

onKeyRefused(signOut);
bindKeyForm($("key-form"), signIn);
$("forget").addEventListener("click", () => signOut("Key forgotten: this tab no longer holds it.", "info"));
$("filters").addEventListener("submit", (event) => event.preventDefault());
for (const id of ["status-filter", "type-filter", "schedule-filter"]) {
  $(id).addEventListener("change", () => {
    updateBulk();
    changePage([null]);
  });
}
document.querySelectorAll("[data-bulk]").forEach((button) => {
  button.addEventListener("click", () => askBulk(button.dataset.bulk));
});
$("bulk-confirm").addEventListener("click", () => runBulk());
$("bulk-back").addEventListener("click", () => closeBulk());
$("bulk-dialog").addEventListener("close", () => {
  if (state.bulk && !state.bulk.running) state.bulk = null; // Escape, or Back
});
// The rows' own buttons: each row's Edit limits and Delete… (their tables redraw the rows).
$("type-controls").addEventListener("click", (event) => {
  const edit = event.target.closest('button[data-action="limits"]');
  if (edit) openLimits(edit.closest("tr").dataset.type);
});
$("schedules").addEventListener("click", (event) => {
  const remove = event.target.closest('button[data-action="delete"]');
  if (remove) askDeleteSchedule(remove.closest("tr").dataset.schedule);
});
$("limits-form").addEventListener("submit", (event) => {
  event.preventDefault();
  saveLimits();
});
$("limits-close").addEventListener("click", () => closeLimits(true));
$("edit-form").addEventListener("submit", (event) => {
  event.preventDefault();
  saveEdit();
});
$("edit-close").addEventListener("click", () => closeEdit(true));
$("schedule-delete-confirm").addEventListener("click", () => deleteSchedule());
$("schedule-delete-back").addEventListener("click", () => closeScheduleDialog(true));
$("schedule-dialog").addEventListener("cancel", (event) => {
  event.preventDefault(); // Escape: the same as Back
  closeScheduleDialog(true);
});
$("schedule-dialog").addEventListener("close", () => {
  state.deleting = null; // however it closed, nothing awaits confirmation
});
$("next").addEventListener("click", () => state.nextCursor && changePage([...state.cursors, state.nextCursor]));
$("previous").addEventListener("click", () => state.cursors.length > 1 && changePage(state.cursors.slice(0, -1)));
$("newest").addEventListener("click", () => changePage([null]));
$("close-detail").addEventListener("click", (event) => {
  event.preventDefault();
  const opened = state.detailId;
  history.pushState(null, "", window.location.pathname);
  closeDetail();
  const link = opened && document.querySelector(`#jobs tr[data-job-id="${CSS.escape(opened)}"] a`);
  if (link) link.focus();
});
window.addEventListener("hashchange", () => route(true));

const saved = storedKey();
if (saved) signIn(saved);
else $("key-input").focus();
