// The job detail's edit form (updateJob, a PENDING job, ADMIN or its PRODUCER): when it runs,
// its priority, its retries and when it expires. Times are typed in the browser's time zone and
// sent in UTC; only the fields the person changed are sent.
import { detailQuery } from "./queries.js";
import { refreshSoon } from "./refresh.js";
import { $ } from "./render.js";
import { Stale, allowedPriorities, call, isAdmin, state } from "./session.js";

const EDIT_INPUTS = ["runAt", "priority", "maxRetries", "expiresAt"];

function editInput(name) {
  return $("edit-form").elements.namedItem(name);
}

export const isEditOpen = () => state.editingJob !== null;

// `shown(job)`: paints the job updateJob answers.
export function openEdit(job, shown) {
  editInput("runAt").value = localInputValue(job.runAt);
  const priorities = allowedPriorities();
  if (!priorities.includes(job.priority)) priorities.push(job.priority); // kept as it is, or lowered
  editInput("priority").replaceChildren(...priorities.map((name) => new Option(name, name)));
  editInput("priority").value = job.priority;
  editInput("maxRetries").value = String(job.maxRetries);
  editInput("expiresAt").value = job.expiresAt ? localInputValue(job.expiresAt) : "";
  $("edit-zone").textContent = Intl.DateTimeFormat().resolvedOptions().timeZone;
  state.editingJob = { id: job.id, opened: formTexts(), shown };
  showEditMessage("");
  $("edit-form").hidden = false;
  setExpanded(true);
  editInput("runAt").focus();
}

// `refocus`: the person closed it, so the focus goes back to the Edit button.
export function closeEdit(refocus = false) {
  state.editingJob = null;
  $("edit-form").hidden = true;
  showEditMessage("");
  setExpanded(false);
  const edit = document.querySelector('#actions button[data-action="edit"]');
  if (refocus && edit) edit.focus();
}

function setExpanded(open) {
  const edit = document.querySelector('#actions button[data-action="edit"]');
  if (edit) edit.setAttribute("aria-expanded", String(open));
}

// An ISO time as a datetime-local input holds it: the browser's local time, to the second.
function localInputValue(iso) {
  const time = new Date(iso);
  const two = (n) => String(n).padStart(2, "0");
  const day = `${time.getFullYear()}-${two(time.getMonth() + 1)}-${two(time.getDate())}`;
  return `${day}T${two(time.getHours())}:${two(time.getMinutes())}:${two(time.getSeconds())}`;
}

function formTexts() {
  return Object.fromEntries(EDIT_INPUTS.map((name) => [name, editInput(name).value]));
}

class FormProblem extends Error {
  constructor(message, input) {
    super(message);
    this.input = input;
  }
}

function label(name) {
  return editInput(name).labels[0].textContent;
}

// A datetime-local value (local time) as UTC ISO text; empty: null.
function readTime(name) {
  const input = editInput(name);
  if (input.validity.badInput) throw new FormProblem(`${label(name)}: not a date and time.`, input);
  return input.value === "" ? null : new Date(input.value).toISOString();
}

function readValue(name) {
  if (name === "priority") return editInput("priority").value;
  if (name !== "maxRetries") return readTime(name);
  const input = editInput(name);
  const number = Number(input.value.trim());
  if (input.validity.badInput || input.value.trim() === "" || !Number.isInteger(number)) {
    throw new FormProblem(`${label(name)}: a whole number from 0 to 25.`, input);
  }
  return number;
}

// The UpdateJobInput of the fields changed since the form opened (an emptied expiry clears it);
// the server checks the ranges and the times, and says which field is wrong.
function changedInput(opened) {
  const texts = formTexts();
  const input = {};
  for (const name of EDIT_INPUTS) {
    if (texts[name] !== opened[name]) input[name] = readValue(name);
  }
  if (input.runAt === null) throw new FormProblem(`${label("runAt")}: a job always has one.`, editInput("runAt"));
  return input;
}

export async function saveEdit() {
  const editing = state.editingJob;
  if (!editing) return;
  showEditMessage("");
  let input;
  try {
    input = changedInput(editing.opened);
  } catch (problem) {
    showEditMessage(problem.message, problem.input);
    return;
  }
  if (!Object.keys(input).length) {
    showEditMessage("Nothing to save: no field was changed.");
    return;
  }
  const save = $("edit-save");
  save.disabled = true;
  try {
    const job = (await call(detailQuery("updateJob", isAdmin()), { id: editing.id, input })).updateJob;
    if (state.editingJob !== editing) return; // closed, or another job opened, meanwhile
    closeEdit(true);
    editing.shown(job);
    refreshSoon();
  } catch (error) {
    if (error instanceof Stale) return;
    if (state.editingJob === editing) showEditMessage(`Not saved: ${error.plain}`, inputNamedIn(error.message));
  } finally {
    save.disabled = false;
  }
}

// The field a server message starts with ("expiresAt must be later than runAt").
function inputNamedIn(message) {
  const name = EDIT_INPUTS.find((field) => message.startsWith(`${field} `));
  return name ? editInput(name) : null;
}

// The message under the form; the field it is about (if any) is marked invalid and focused.
function showEditMessage(text, input = null) {
  const message = $("edit-message");
  message.textContent = text;
  message.hidden = !text;
  for (const name of EDIT_INPUTS) {
    editInput(name).removeAttribute("aria-invalid");
    editInput(name).removeAttribute("aria-describedby");
  }
  if (input) {
    input.setAttribute("aria-invalid", "true");
    input.setAttribute("aria-describedby", "edit-message");
    input.focus();
  }
}
