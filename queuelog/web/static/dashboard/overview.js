// The overview above the jobs (queueStats): the counts by status and by type, the age of the
// oldest due pending job, and the throughput per minute as a sparkline.
import { setTypeOptions } from "./job-list.js";
import { COUNTS, STATS_QUERY } from "./queries.js";
import { $, cell, duration } from "./render.js";
import { call } from "./session.js";

export async function loadStats() {
  const stats = (await call(STATS_QUERY)).queueStats;
  for (const name of COUNTS) {
    document.querySelector(`[data-count="${name}"]`).textContent = stats.counts[name].toLocaleString("en");
  }
  const oldest = stats.oldestPendingSeconds;
  $("oldest").textContent = oldest === null ? "none" : duration(oldest);
  const rows = stats.byType.map(({ type, counts }) => {
    const row = document.createElement("tr");
    const name = document.createElement("th");
    name.scope = "row";
    name.textContent = type;
    row.append(name, ...COUNTS.map((c) => cell(counts[c].toLocaleString("en"), "num")));
    return row;
  });
  $("by-type").tBodies[0].replaceChildren(...rows);
  setTypeOptions(stats.byType.map((t) => t.type));
  drawSparkline(stats.throughput);
}

// Jobs finished per minute (queueStats.throughput, oldest first, the current minute last):
// the full minutes as lines, the current one, still filling up, in the caption.
export function drawSparkline(minutes) {
  const full = minutes.slice(0, -1);
  const now = minutes.at(-1);
  const top = Math.max(1, ...full.map((m) => Math.max(m.completed, m.failed)));
  // failed first: where both are zero, completed's line is the one on top
  const lines = ["failed", "completed"].map((series) => {
    const points = full.map((m, i) => `${((i + 0.5) * 300) / full.length},${60 - (m[series] / top) * 56}`);
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", points.join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke-width", "2");
    line.setAttribute("vector-effect", "non-scaling-stroke");
    line.setAttribute("class", series);
    return line;
  });
  $("sparkline").replaceChildren(...lines);
  const total = (series) => full.reduce((sum, m) => sum + m[series], 0).toLocaleString("en");
  $("throughput-text").textContent = now
    ? `Last ${full.length} minutes: ${total("completed")} completed, ${total("failed")} failed ` +
      `(busiest minute: ${top.toLocaleString("en")}). This minute so far: ${now.completed} completed, ` +
      `${now.failed} failed.`
    : "Loading…";
}
