// The Types view (#types): each job type's pause, running count and limits (typeControls),
// with Pause and Resume for ADMIN. Its Edit limits buttons open limits-form.js's form (main.js
// binds them).
import { PAUSE_MUTATION, RESUME_MUTATION, TYPES_QUERY } from "./queries.js";
import { $, cell, keepingActionFocus, pausedBadge, seconds, timeElement } from "./render.js";
import { Stale, call, isAdmin, state } from "./session.js";

export async function loadTypes() {
  const ticket = ++state.typesRequest;
  const controls = (await call(TYPES_QUERY)).typeControls;
  if (ticket !== state.typesRequest) return; // a newer read, or a write's answer, is newer
  state.controls = new Map(controls.map((control) => [control.type, control]));
  keepingTypeFocus(() => $("type-controls").tBodies[0].replaceChildren(...controls.map(typeRow)));
}

// One type's control as a write answered it: its row alone is redrawn.
export function showControl(control) {
  state.typesRequest += 1; // a read sent before this write must not paint the old state
  state.controls.set(control.type, control);
  const row = typeRowElement(control.type);
  const fresh = typeRow(control);
  keepingTypeFocus(() => (row ? row.replaceWith(fresh) : $("type-controls").tBodies[0].append(fresh)));
}

export function typeRowElement(type) {
  return document.querySelector(`#type-controls tr[data-type="${CSS.escape(type)}"]`);
}

function typeRow(control) {
  const row = document.createElement("tr");
  row.dataset.type = control.type;
  const name = document.createElement("th");
  name.scope = "row";
  name.textContent = control.type;
  row.append(
    name,
    cell(pauseState(control)),
    cell(control.running.toLocaleString("en"), "num"),
    cell(limitText(control.maxRunning), "num"),
    cell(limitText(control.maxRunningPerKey), "num"),
    cell(rateText(control.rateLimit)),
    cell(control.timeoutSeconds === null ? "none" : seconds(control.timeoutSeconds), "num"),
  );
  if (isAdmin()) row.append(typeActions(control));
  return row;
}

function pauseState(control) {
  const badge = pausedBadge(control.paused);
  if (!control.paused || !control.pausedUntil) return badge;
  const until = document.createElement("span");
  until.append(badge, " until ", timeElement(control.pausedUntil));
  return until;
}

function limitText(value) {
  return value === null ? "no limit" : value.toLocaleString("en");
}

function rateText(rate) {
  if (!rate) return "no limit";
  return `${rate.limit.toLocaleString("en")} per ${seconds(rate.periodSeconds)}${rate.perKey ? " per key" : ""}`;
}

function typeActions(control) {
  const td = document.createElement("td");
  td.className = "row-actions";
  const action = control.paused ? "resume" : "pause";
  const toggle = document.createElement("button");
  toggle.type = "button";
  toggle.dataset.action = action;
  toggle.textContent = control.paused ? "Resume" : "Pause";
  toggle.setAttribute("aria-label", `${toggle.textContent} ${control.type}`);
  toggle.addEventListener("click", () => togglePause(control.type, action, toggle));
  const edit = document.createElement("button");
  edit.type = "button";
  edit.className = "secondary";
  edit.dataset.action = "limits";
  edit.textContent = "Edit limits";
  edit.setAttribute("aria-label", `Edit limits of ${control.type}`);
  edit.setAttribute("aria-controls", "limits-form");
  edit.setAttribute("aria-expanded", String(state.editing === control.type));
  td.append(toggle, " ", edit);
  return td;
}

function keepingTypeFocus(redraw) {
  keepingActionFocus("type-controls", "type", redraw);
}

async function togglePause(type, action, button) {
  button.disabled = true;
  showTypesMessage("");
  try {
    const data = await call(action === "pause" ? PAUSE_MUTATION : RESUME_MUTATION, { type });
    const control = data[action === "pause" ? "pauseType" : "resumeType"];
    const hadFocus = document.activeElement === button || document.activeElement === document.body;
    showControl(control);
    // Its button became the other one: the focus moves to it (the old one was disabled).
    const again = typeRowElement(type)?.querySelector('button[data-action="pause"], button[data-action="resume"]');
    if (hadFocus && again) again.focus();
    showTypesMessage(control.paused ? `${type} paused: its jobs are not claimed.` : `${type} resumed.`);
  } catch (error) {
    if (error instanceof Stale) return;
    showTypesMessage(`${action === "pause" ? "Pause" : "Resume"} ${type} refused: ${error.plain}`, "error");
    button.disabled = false;
  }
}

export function showTypesMessage(text, kind = "info") {
  $("types-message").textContent = text;
  $("types-message").dataset.kind = kind;
}
