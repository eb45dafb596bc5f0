// The signed-in session: the page's state, what the key's roles allow, and `call`, which
// sends one operation with the key.
import { request } from "../api.js";
import { $ } from "./render.js";

export const state = {
  key: "",
  me: null,
  session: 0, // bumped on every sign-in and sign-out: late answers of an old session are dropped
  socket: null,
  timers: [],
  pollTimer: null,
  cursors: [null], // the `after` of each page up to the current one
  nextCursor: null,
  jobsRequest: 0,
  detailId: null,
  detailView: 0, // bumped whenever the detail pane turns to another job (or closes)
  detail: null,
  stopDetailUpdates: null,
  view: "jobs", // "jobs", "types" or "schedules"
  typesRequest: 0,
  controls: new Map(), // type -> its TypeControl, as last read
  editing: null, // the type whose limits form is open
  limitsOpened: null, // the limits form as it was opened: saving sends only what changed
  bulk: null, // the bulk action awaiting confirmation or under way: {action, filter, running}
  schedulesRequest: 0,
  schedules: new Map(), // name -> its Schedule, as last read
  deleting: null, // the schedule whose delete awaits confirmation
  editingJob: null, // the open job's edit form: {id, opened}, the form's values as it was opened
};

export const isAdmin = () => Boolean(state.me) && state.me.roles.includes("ADMIN");
// cancelJob, updateJob and runJobNow: ADMIN on any job, PRODUCER on the jobs it enqueued (the
// only ones it sees).
export const mayCancel = () => isAdmin() || (Boolean(state.me) && state.me.roles.includes("PRODUCER"));
export const mayEdit = mayCancel;
export const PRIORITIES = ["LOW", "MEDIUM", "HIGH", "CRITICAL"];
// The priorities this key may give a job (updateJob refuses any above its maxPriority).
export const allowedPriorities = () => PRIORITIES.slice(0, PRIORITIES.indexOf(state.me.maxPriority) + 1);
// API.md section 10: `schedules` is for ADMIN and VIEWER; other roles are refused it.
export const mayReadSchedules = () => isAdmin() || (Boolean(state.me) && state.me.roles.includes("VIEWER"));

// An answer for a session that has ended: dropped without a word.
export class Stale extends Error {}

// main.js sets it: signing out, which needs every view, cannot be imported here.
let keyRefused = () => {};

export function onKeyRefused(handler) {
  keyRefused = handler;
}

// One operation with the current key. A refused key ends the session (back to the key box).
export async function call(query, variables = {}) {
  const session = state.session;
  try {
    const data = await request(state.key, query, variables);
    if (session !== state.session) throw new Stale();
    showBanner("");
    return data;
  } catch (error) {
    if (error instanceof Stale || session !== state.session) throw new Stale();
    if (error.code === "UNAUTHENTICATED") {
      keyRefused("The server no longer accepts this key (it was revoked, or is unknown). Enter a valid key.");
      throw new Stale();
    }
    if (error.code === "NETWORK" || error.code === "HTTP") showBanner(`Cannot load: ${error.plain}. Retrying…`);
    throw error;
  }
}

export function quietly(promise) {
  return promise.catch((error) => {
    if (!(error instanceof Stale) && error.code !== "NETWORK" && error.code !== "HTTP") {
      showBanner(`The server refused a request: ${error.plain}`);
    }
  });
}

function showBanner(text) {
  $("banner").textContent = text;
  $("banner").hidden = !text;
}
