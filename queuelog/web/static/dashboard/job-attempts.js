// The open job's attempts (Job.attempts, oldest first): each claim, its worker, when it started
// and ended, how it ended and, for ADMIN (the one role that may read it), its error.
import { ATTEMPTS } from "./queries.js";
import { $, cell, timeElement } from "./render.js";
import { isAdmin } from "./session.js";

export function renderAttempts(job) {
  const attempts = job.attempts || [];
  $("attempts-error-head").hidden = !isAdmin();
  $("attempts").tBodies[0].replaceChildren(...attempts.map(attemptRow));
  $("attempts").hidden = !attempts.length;
  const older = attempts.length ? attempts[0].attempt - 1 : 0; // only the newest ATTEMPTS are read
  const note = $("attempts-note");
  if (!attempts.length) note.textContent = "Never claimed yet.";
  else if (older > 0) note.textContent = `${older.toLocaleString("en")} older attempts are not shown.`;
  else note.textContent = "";
  note.hidden = !note.textContent;
}

function attemptRow(attempt) {
  const row = document.createElement("tr");
  row.dataset.attempt = String(attempt.attempt);
  const number = document.createElement("th");
  number.scope = "row";
  number.className = "num";
  number.textContent = String(attempt.attempt);
  const outcome = document.createElement("span");
  outcome.className = `outcome outcome-${attempt.outcome}`;
  outcome.textContent = attempt.outcome;
  row.append(
    number,
    cell(attempt.workerId),
    cell(timeElement(attempt.claimedAt)),
    cell(attempt.finishedAt ? timeElement(attempt.finishedAt) : "not yet"),
    cell(outcome),
  );
  if (isAdmin()) row.append(cell(attempt.error || "none", "attempt-error"));
  return row;
}
