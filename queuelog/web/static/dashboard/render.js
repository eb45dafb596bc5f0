// Small pieces every view draws with: cells, badges, times, links, and the keyboard focus
// kept on a row that a refresh redraws.

export const $ = (id) => document.getElementById(id);

export function cell(content, className) {
  const td = document.createElement("td");
  td.append(content);
  if (className) td.className = className;
  return td;
}

export function statusBadge(status) {
  const badge = document.createElement("span");
  badge.className = `status status-${status}`;
  badge.textContent = status;
  return badge;
}

// A type's or a schedule's pause.
export function pausedBadge(paused) {
  const badge = document.createElement("span");
  badge.className = `status ${paused ? "status-PAUSED" : "status-ACTIVE"}`;
  badge.textContent = paused ? "PAUSED" : "ACTIVE";
  return badge;
}

export function dependencies(count) {
  return `${count.toLocaleString("en")} ${count === 1 ? "dependency" : "dependencies"}`;
}

// A link's id can be any text: only so much of it is shown.
export function shortId(id) {
  return id.length > 40 ? `${id.slice(0, 40)}…` : id;
}

// A link to the job list filtered by schedule `name` (`#jobs?schedule=<name>`).
export function scheduleJobsLink(name, text) {
  const link = document.createElement("a");
  link.href = `#jobs?schedule=${encodeURIComponent(name)}`;
  link.textContent = text;
  link.setAttribute("aria-label", `Jobs of schedule ${name}`);
  return link;
}

export function duration(seconds) {
  const s = Math.abs(seconds);
  if (s < 60) return `${Math.round(s)} s`;
  if (s < 3600) return `${Math.round(s / 60)} min`;
  if (s < 86400) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

export function seconds(count) {
  return `${count.toLocaleString("en")} s`;
}

function relative(iso) {
  const seconds = (Date.parse(iso) - Date.now()) / 1000;
  if (Math.abs(seconds) < 5) return "just now";
  return seconds < 0 ? `${duration(seconds)} ago` : `in ${duration(seconds)}`;
}

export function timeElement(iso) {
  const element = document.createElement("time");
  element.dateTime = iso;
  element.title = new Date(iso).toLocaleString();
  element.textContent = relative(iso);
  return element;
}

export function refreshTimes() {
  document.querySelectorAll("time[datetime]").forEach((t) => (t.textContent = relative(t.dateTime)));
}

// Rows are redrawn on every refresh: a keyboard user's focus stays on the same row's button
// (a pause that became a resume keeps the focus on its replacement). The rows of table
// `tableId` are each named by their `data-<key>` attribute; their focusable parts carry
// `data-action`.
export function keepingActionFocus(tableId, key, redraw) {
  const focused = document.activeElement;
  const row = focused && focused.closest(`#${tableId} tr[data-${key}]`);
  const action = row && focused.dataset.action;
  redraw();
  if (!row || row.isConnected || !action) return;
  const again = document.querySelector(`#${tableId} tr[data-${key}="${CSS.escape(row.dataset[key])}"]`);
  if (!again) return;
  const swapped = { pause: "resume", resume: "pause" }[action];
  const target =
    again.querySelector(`[data-action="${action}"]`) ||
    (swapped && again.querySelector(`[data-action="${swapped}"]`));
  if (target) target.focus();
}
