// The open job's timeline: the transitions the server recorded (Job.events, oldest first),
// and when a job not due yet becomes claimable.
import { TIMELINE_EVENTS } from "./queries.js";
import { $, timeElement } from "./render.js";

// Claims are numbered by counting back from the job's attempt, so the numbers hold when older
// events are cut off.
export function renderTimeline(job) {
  const events = job.events || [];
  let attempt = job.attempt - events.filter((e) => e.kind === "CLAIMED").length;
  const lastClaim = events.map((e) => e.kind).lastIndexOf("CLAIMED");
  const entries = events.map((event, index) => {
    let label = event.kind;
    if (event.kind === "CLAIMED") {
      attempt += 1;
      label = `CLAIMED (attempt ${attempt})`;
      if (index === lastClaim && job.workerId) label += ` by ${job.workerId}`;
    }
    return { label, detail: `→\u00a0${event.status}`, at: event.at };
  });
  if (job.status === "PENDING" && Date.parse(job.runAt) > Date.now()) {
    entries.push({ label: "DUE", detail: "claimable from then", at: job.runAt });
  }
  const items = entries.map((entry) => {
    const item = document.createElement("li");
    const kind = document.createElement("span");
    kind.className = "kind";
    kind.textContent = entry.label;
    const when = document.createElement("span");
    when.className = "when";
    when.append(" · ", timeElement(entry.at), ` · ${entry.detail}`);
    item.append(kind, when);
    return item;
  });
  if (events.length >= TIMELINE_EVENTS) {
    const older = document.createElement("li");
    older.className = "hint";
    older.textContent = `Older transitions are not shown (the newest ${TIMELINE_EVENTS} are).`;
    items.unshift(older);
  }
  $("timeline").replaceChildren(...items);
}
