// The limits form of the Types view (setTypeControl, ADMIN only): opened by a type's Edit
// limits button, it sends only the limits the person changed.
import { LIMITS_MUTATION } from "./queries.js";
import { $ } from "./render.js";
import { Stale, call, state } from "./session.js";
import { showControl, showTypesMessage, typeRowElement } from "./types.js";

const LIMIT_INPUTS = [
  "maxRunning",
  "maxRunningPerKey",
  "timeoutSeconds",
  "rateLimit.limit",
  "rateLimit.periodSeconds",
];

function limitInput(name) {
  return $("limits-form").elements.namedItem(name);
}

export function openLimits(type) {
  const control = state.controls.get(type);
  if (!control) return;
  state.editing = type;
  const form = $("limits-form");
  form.dataset.type = type;
  $("limits-title").textContent = `Limits of ${type}`;
  const value = (number) => (number === null || number === undefined ? "" : String(number));
  limitInput("maxRunning").value = value(control.maxRunning);
  limitInput("maxRunningPerKey").value = value(control.maxRunningPerKey);
  limitInput("timeoutSeconds").value = value(control.timeoutSeconds);
  limitInput("rateLimit.limit").value = value(control.rateLimit && control.rateLimit.limit);
  limitInput("rateLimit.periodSeconds").value = value(control.rateLimit && control.rateLimit.periodSeconds);
  limitInput("rateLimit.perKey").checked = Boolean(control.rateLimit && control.rateLimit.perKey);
  state.limitsOpened = limitsInput(type);
  showLimitsMessage("");
  form.hidden = false;
  document.querySelectorAll('#type-controls button[data-action="limits"]').forEach((button) => {
    button.setAttribute("aria-expanded", String(button.closest("tr").dataset.type === type));
  });
  limitInput("maxRunning").focus();
}

// `refocus`: the person closed it, so the focus goes back to the type's Edit button.
export function closeLimits(refocus = false) {
  const type = state.editing;
  state.editing = null;
  $("limits-form").hidden = true;
  showLimitsMessage("");
  document
    .querySelectorAll('#type-controls button[data-action="limits"]')
    .forEach((button) => button.setAttribute("aria-expanded", "false"));
  if (refocus && type) {
    const edit = typeRowElement(type)?.querySelector('button[data-action="limits"]');
    if (edit) edit.focus();
  }
}

class FormProblem extends Error {
  constructor(message, input) {
    super(message);
    this.input = input;
  }
}

function readLimit(name) {
  const input = limitInput(name);
  const label = input.labels[0].textContent;
  if (input.validity.badInput) throw new FormProblem(`${label}: not a number.`, input);
  const text = input.value.trim();
  if (text === "") return null;
  const number = Number(text);
  if (!Number.isInteger(number)) throw new FormProblem(`${label}: a whole number, or empty for no limit.`, input);
  return number;
}

// The form as a TypeControlInput; the server checks the ranges (and says which is wrong).
function limitsInput(type) {
  const limit = readLimit("rateLimit.limit");
  const periodSeconds = readLimit("rateLimit.periodSeconds");
  if ((limit === null) !== (periodSeconds === null)) {
    const empty = limit === null ? "rateLimit.limit" : "rateLimit.periodSeconds";
    throw new FormProblem("Rate limit: give both the number of claims and the period, or neither.", limitInput(empty));
  }
  return {
    type,
    maxRunning: readLimit("maxRunning"),
    maxRunningPerKey: readLimit("maxRunningPerKey"),
    timeoutSeconds: readLimit("timeoutSeconds"),
    rateLimit: limit === null ? null : { limit, periodSeconds, perKey: limitInput("rateLimit.perKey").checked },
  };
}

// Only the limits the person changed: setTypeControl leaves out the rest, so a change another
// admin made while the form was open is kept.
function changedLimits(input, opened) {
  const changed = { type: input.type };
  for (const [name, value] of Object.entries(input)) {
    if (name !== "type" && JSON.stringify(value) !== JSON.stringify(opened[name])) changed[name] = value;
  }
  return changed;
}

export async function saveLimits() {
  const type = state.editing;
  if (!type) return;
  const save = $("limits-save");
  showLimitsMessage("");
  let input;
  try {
    input = changedLimits(limitsInput(type), state.limitsOpened);
  } catch (problem) {
    showLimitsMessage(problem.message, problem.input);
    return;
  }
  save.disabled = true;
  try {
    const control = (await call(LIMITS_MUTATION, { input })).setTypeControl;
    showControl(control);
    if (state.editing === type) closeLimits(true);
    showTypesMessage(`Limits of ${type} saved.`);
  } catch (error) {
    if (error instanceof Stale) return;
    if (state.editing === type) showLimitsMessage(`Not saved: ${error.plain}`, inputNamedIn(error.message));
  } finally {
    save.disabled = false;
  }
}

// The field a server message is about ("maxRunningPerKey must be ...", "... at .rateLimit.limit: ...").
function inputNamedIn(message) {
  const named = LIMIT_INPUTS.filter((name) => new RegExp(`(^|[\\s.'])${name.replace(".", "\\.")}\\b`).test(message));
  named.sort((a, b) => b.length - a.length);
  return named.length ? limitInput(named[0]) : null;
}

// The message under the form; the field it is about (if any) is marked invalid and focused.
function showLimitsMessage(text, input = null) {
  const message = $("limits-message");
  message.textContent = text;
  message.hidden = !text;
  for (const name of LIMIT_INPUTS) {
    const field = limitInput(name);
    field.removeAttribute("aria-invalid");
    field.removeAttribute("aria-describedby");
  }
  if (input) {
    input.setAttribute("aria-invalid", "true");
    input.setAttribute("aria-describedby", "limits-message");
    input.focus();
  }
}
