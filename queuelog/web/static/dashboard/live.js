// Live updates: the websocket (jobEvents for everything, jobUpdated for the open job) and the
// #live badge; while the socket is down, everything on screen is polled every POLL_MS.
import { KEY_REFUSED, socketClient } from "../api.js";
import { followDetail, loadDetail, stopFollowing } from "./job-detail.js";
import { jobRow, keepingFocus, loadJobs } from "./job-list.js";
import { loadStats } from "./overview.js";
import { EVENTS_SUBSCRIPTION, KEY_CHECK_QUERY } from "./queries.js";
import { refreshSoon } from "./refresh.js";
import { $ } from "./render.js";
import { loadSchedules } from "./schedules.js";
import { call, quietly, state } from "./session.js";
import { loadTypes } from "./types.js";

const POLL_MS = 3000; // socket down: everything on screen, this often

export function openSocket() {
  const session = state.session;
  state.socket = socketClient(state.key, {
    connected: () => {
      if (session !== state.session) return;
      setLive(true);
      refreshAll(); // whatever happened while the socket was away
    },
    closed: (event) => {
      if (session !== state.session) return;
      setLive(false);
      // Refused: is it the key? `call` signs out if so; otherwise keep polling.
      if (event && event.code === KEY_REFUSED) quietly(call(KEY_CHECK_QUERY));
    },
  });
  state.socket.subscribe(
    { query: EVENTS_SUBSCRIPTION },
    {
      next: (message) => session === state.session && message.data && onEvent(message.data.jobEvents),
      // The client gave up (a close code it never retries): a new socket, a little later.
      error: () => {
        if (session !== state.session) return;
        setLive(false);
        setTimeout(() => session === state.session && reopenSocket(), POLL_MS);
      },
      complete: () => {},
    },
  );
  if (state.detailId) followDetail(state.detailId);
}

function reopenSocket() {
  closeSocket();
  openSocket();
}

export function closeSocket() {
  stopFollowing();
  if (state.socket) state.socket.dispose();
  state.socket = null;
  setLive(false);
}

export function setLive(live) {
  const badge = $("live");
  badge.dataset.live = live ? "live" : "reconnecting";
  badge.textContent = live ? "Live" : `Reconnecting… (refreshing every ${POLL_MS / 1000} s)`;
  if (live) stopPolling();
  else if (state.key && !state.pollTimer) state.pollTimer = setInterval(refreshAll, POLL_MS);
}

export function stopPolling() {
  clearInterval(state.pollTimer);
  state.pollTimer = null;
}

function refreshAll() {
  quietly(loadStats());
  quietly(loadJobs());
  if (state.detailId) quietly(loadDetail(state.detailId));
  if (state.view === "types") quietly(loadTypes());
  if (state.view === "schedules") quietly(loadSchedules());
}

function onEvent(event) {
  const { job } = event;
  const row = document.querySelector(`#jobs tr[data-job-id="${CSS.escape(job.id)}"]`);
  if (row) keepingFocus(() => row.replaceWith(jobRow(job)));
  refreshSoon();
}
