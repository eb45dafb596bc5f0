// A refresh after jobs changed (an event on the socket, an action's answer): what is on screen
// and moves with the jobs, at most once per REFRESH_GAP_MS however many events come.
import { loadJobs } from "./job-list.js";
import { loadStats } from "./overview.js";
import { loadSchedules } from "./schedules.js";
import { quietly, state } from "./session.js";
import { loadTypes } from "./types.js";

const REFRESH_GAP_MS = 400;

// Leading and trailing: the first event refreshes at once, a burst at most every `gap` ms.
function throttled(action, gap) {
  let last = 0;
  let timer = null;
  return () => {
    if (timer) return;
    timer = setTimeout(() => {
      timer = null;
      last = Date.now();
      action();
    }, Math.max(0, last + gap - Date.now()));
  };
}

export const refreshSoon = throttled(() => {
  quietly(loadStats());
  if (state.cursors.length === 1) quietly(loadJobs()); // the newest page: new jobs appear
  if (state.view === "types") quietly(loadTypes()); // running counts move with the jobs
  if (state.view === "schedules") quietly(loadSchedules()); // a tick's job is its last job
}, REFRESH_GAP_MS);
