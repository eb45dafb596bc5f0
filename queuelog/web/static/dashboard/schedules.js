// The Schedules view (#schedules, ADMIN and VIEWER): each schedule's cron, next and last run
// and last job (schedules), with Pause and Resume for ADMIN. Its Delete… buttons open
// schedule-delete.js's confirmation (main.js binds them).
import { setScheduleOptions } from "./job-list.js";
import { PAUSE_SCHEDULE_MUTATION, RESUME_SCHEDULE_MUTATION, SCHEDULES_QUERY } from "./queries.js";
import { $, cell, keepingActionFocus, pausedBadge, scheduleJobsLink, shortId, timeElement } from "./render.js";
import { Stale, call, isAdmin, mayReadSchedules, quietly, state } from "./session.js";

const SCHEDULE_COLUMNS = 8; // without the ADMIN's Actions

export async function loadSchedules() {
  if (!mayReadSchedules()) return;
  const ticket = ++state.schedulesRequest;
  const schedules = (await call(SCHEDULES_QUERY)).schedules;
  if (ticket !== state.schedulesRequest) return; // a newer read, or a write's answer, is newer
  state.schedules = new Map(schedules.map((schedule) => [schedule.name, schedule]));
  setScheduleOptions(schedules.map((schedule) => schedule.name));
  const rows = schedules.map(scheduleRow);
  if (!rows.length) rows.push(noSchedulesRow());
  keepingActionFocus("schedules", "schedule", () => $("schedules").tBodies[0].replaceChildren(...rows));
}

export function noSchedulesRow() {
  const empty = cell("No schedules. An ADMIN creates them with putSchedule (GraphQL or the SDK).");
  empty.colSpan = SCHEDULE_COLUMNS + (isAdmin() ? 1 : 0);
  const row = document.createElement("tr");
  row.append(empty);
  return row;
}

// One schedule as a write answered it: its row alone is redrawn.
function showSchedule(schedule) {
  state.schedulesRequest += 1; // a read sent before this write must not paint the old state
  state.schedules.set(schedule.name, schedule);
  const row = scheduleRowElement(schedule.name);
  if (!row) {
    quietly(loadSchedules()); // not on the page (the list was still loading): read them all
    return;
  }
  const fresh = scheduleRow(schedule);
  keepingActionFocus("schedules", "schedule", () => row.replaceWith(fresh));
}

export function scheduleRowElement(name) {
  return document.querySelector(`#schedules tr[data-schedule="${CSS.escape(name)}"]`);
}

function scheduleRow(schedule) {
  const row = document.createElement("tr");
  row.dataset.schedule = schedule.name;
  const name = document.createElement("th");
  name.scope = "row";
  name.textContent = schedule.name;
  const cron = document.createElement("code");
  cron.textContent = schedule.cron;
  const when = document.createElement("span");
  when.append(cron, ` (${schedule.timezone})`);
  let next = schedule.paused ? "none while paused" : "none";
  if (schedule.nextRunAt) next = timeElement(schedule.nextRunAt);
  row.append(
    name,
    cell(schedule.type),
    cell(when),
    cell(pausedBadge(schedule.paused)),
    cell(next),
    cell(schedule.lastRunAt ? timeElement(schedule.lastRunAt) : "never"),
    cell(lastJobLink(schedule)),
    cell(jobsLink(schedule)),
  );
  if (isAdmin()) row.append(scheduleActions(schedule));
  return row;
}

function lastJobLink(schedule) {
  if (!schedule.lastJobId) return "none";
  const link = document.createElement("a");
  link.href = `#job/${encodeURIComponent(schedule.lastJobId)}`;
  link.textContent = `#${shortId(schedule.lastJobId)}`;
  link.dataset.action = "last-job"; // for keepingActionFocus
  link.setAttribute("aria-label", `Job ${shortId(schedule.lastJobId)}, the last one ${schedule.name} enqueued`);
  return link;
}

function jobsLink(schedule) {
  const link = scheduleJobsLink(schedule.name, "jobs");
  link.dataset.action = "jobs"; // for keepingActionFocus
  return link;
}

function scheduleActions(schedule) {
  const td = document.createElement("td");
  td.className = "row-actions";
  const action = schedule.paused ? "resume" : "pause";
  const toggle = document.createElement("button");
  toggle.type = "button";
  toggle.dataset.action = action;
  toggle.textContent = schedule.paused ? "Resume" : "Pause";
  toggle.setAttribute("aria-label", `${toggle.textContent} schedule ${schedule.name}`);
  toggle.addEventListener("click", () => toggleSchedule(schedule.name, action, toggle));
  const remove = document.createElement("button");
  remove.type = "button";
  remove.className = "secondary";
  remove.dataset.action = "delete";
  remove.textContent = "Delete…";
  remove.setAttribute("aria-label", `Delete schedule ${schedule.name}…`);
  remove.setAttribute("aria-haspopup", "dialog");
  td.append(toggle, " ", remove);
  return td;
}

async function toggleSchedule(name, action, button) {
  button.disabled = true;
  showSchedulesMessage("");
  const operation = action === "pause" ? "pauseSchedule" : "resumeSchedule";
  try {
    const data = await call(action === "pause" ? PAUSE_SCHEDULE_MUTATION : RESUME_SCHEDULE_MUTATION, { name });
    const schedule = data[operation];
    const hadFocus = document.activeElement === button || document.activeElement === document.body;
    showSchedule(schedule);
    // Its button became the other one: the focus moves to it (the old one was disabled).
    const again = scheduleRowElement(name)?.querySelector('button[data-action="pause"], button[data-action="resume"]');
    if (hadFocus && again) again.focus();
    showSchedulesMessage(
      schedule.paused
        ? `${name} paused: it enqueues nothing until it is resumed.`
        : `${name} resumed (the ticks it missed while paused are not enqueued).`,
    );
  } catch (error) {
    if (error instanceof Stale) return;
    showSchedulesMessage(`${action === "pause" ? "Pause" : "Resume"} ${name} refused: ${error.plain}`, "error");
    button.disabled = false;
  }
}

export function showSchedulesMessage(text, kind = "info") {
  $("schedules-message").textContent = text;
  $("schedules-message").dataset.kind = kind;
}
