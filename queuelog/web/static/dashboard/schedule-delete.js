// Deleting a schedule (deleteSchedule, ADMIN only), after a confirmation in #schedule-dialog
// that says what goes and what stays.
import { DELETE_SCHEDULE_MUTATION } from "./queries.js";
import { $, shortId } from "./render.js";
import { loadSchedules, noSchedulesRow, scheduleRowElement, showSchedulesMessage } from "./schedules.js";
import { Stale, call, quietly, state } from "./session.js";

export function askDeleteSchedule(name) {
  const schedule = state.schedules.get(name);
  if (!schedule || state.deleting) return;
  state.deleting = name;
  showSchedulesMessage("");
  $("schedule-dialog-title").textContent = `Delete schedule ${name}?`;
  const last = schedule.lastJobId ? ` (the newest is #${shortId(schedule.lastJobId)})` : "";
  $("schedule-dialog-text").textContent =
    `${name} will enqueue no more ${schedule.type} jobs (${schedule.cron}, ${schedule.timezone}). ` +
    `The jobs it already enqueued stay${last}. Only putSchedule can create it again.`;
  $("schedule-delete-confirm").textContent = `Delete ${name}`;
  $("schedule-dialog").showModal();
}

// `refocus`: back to the schedule's Delete button (Back, or Escape).
export function closeScheduleDialog(refocus = false) {
  const name = state.deleting;
  state.deleting = null;
  if ($("schedule-dialog").open) $("schedule-dialog").close();
  const button = refocus && name && scheduleRowElement(name)?.querySelector('button[data-action="delete"]');
  if (button) button.focus();
}

export async function deleteSchedule() {
  const name = state.deleting;
  if (!name) return;
  state.deleting = null;
  $("schedule-dialog").close();
  const row = scheduleRowElement(name);
  // After it goes, the focus moves to the next schedule's Delete (or the one before, or the heading).
  const neighbour = row && (row.nextElementSibling || row.previousElementSibling);
  const neighbourName = neighbour ? neighbour.dataset.schedule : undefined;
  row?.querySelectorAll("button").forEach((button) => (button.disabled = true));
  try {
    const deleted = (await call(DELETE_SCHEDULE_MUTATION, { name })).deleteSchedule;
    state.schedulesRequest += 1; // a read sent before this write must not paint it again
    state.schedules.delete(name);
    scheduleRowElement(name)?.remove();
    if (!state.schedules.size) $("schedules").tBodies[0].replaceChildren(noSchedulesRow());
    const next = neighbourName && scheduleRowElement(neighbourName)?.querySelector('button[data-action="delete"]');
    if (next) next.focus();
    else $("schedules-title").focus();
    showSchedulesMessage(
      deleted
        ? `Schedule ${name} deleted; the jobs it enqueued stay.`
        : `Schedule ${name} was already gone (deleted elsewhere).`,
    );
    quietly(loadSchedules());
  } catch (error) {
    if (error instanceof Stale) return;
    row?.querySelectorAll("button").forEach((button) => (button.disabled = false));
    showSchedulesMessage(`Delete ${name} refused: ${error.plain}`, "error");
  }
}
