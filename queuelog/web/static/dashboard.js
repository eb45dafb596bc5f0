// The jobs dashboard: a client of the public GraphQL API, with the key's own permissions.
// Reads only queueStats, jobs(first <= 50) and job(id) with its events, which the server
// answers from counters and indexes however many jobs there are, typeControls while the Types
// view is open and schedules while the Schedules view is (and, for the job list's schedule
// filter, at sign-in and on coming back to the jobs); listens on the websocket (jobEvents for
// everything, jobUpdated for the open job) and polls while the socket is down. Three views:
// jobs (#jobs, #job/<id>, #jobs?schedule=<name> for one schedule's jobs), types (#types) and
// schedules (#schedules); flow-control actions (pause, limits, bulk cancel and retry) and
// schedule actions (pause, resume, delete) for the roles allowed.
import { KEY_REFUSED, request, socketClient } from "./api.js";
import { bindKeyForm, forgetStoredKey, showMessage, storeKey, storedKey } from "./keybox.js";

const PAGE_SIZE = 25;
const POLL_MS = 3000; // socket down: everything on screen, this often
const STATS_MS = 10000; // socket up: the counts again (the oldest pending job ages)
const REFRESH_GAP_MS = 400; // events: at most one refresh per this
const SPARK_MINUTES = 30; // full minutes drawn; queueStats.throughput also gives the current one
const TIMELINE_EVENTS = 50; // Job.events(last:): the newest this many transitions of the open job
const BULK_LIMIT = 500; // cancelJobs/retryJobs: jobs per call, the progress shown between calls
const COUNTS = ["pending", "running", "completed", "failed", "cancelled"];
const ROW_FIELDS = "id type status priority attempt createdAt updatedAt scheduleName waitingFor";
// The job's own values, then its relations (read from other tables): events and dependsOn.
const DETAIL_FIELDS =
  "id type payload priority status retryCount maxRetries attempt idempotencyKey workerId " +
  "claimedAt leaseExpiresAt runAt finishedAt result createdAt updatedAt concurrencyKey timeoutSeconds " +
  "waitingFor scheduleName " +
  `events(last: ${TIMELINE_EVENTS}) { kind status at } dependsOn`;
const COUNT_FIELDS = COUNTS.join(" ");
const STATS_QUERY = `query Stats { queueStats { counts { ${COUNT_FIELDS} } oldestPendingSeconds
  byType { type counts { ${COUNT_FIELDS} } } throughput(minutes: ${SPARK_MINUTES + 1}) { at completed failed } } }`;
const JOBS_QUERY = `query Jobs($status: JobStatus, $type: String, $scheduleName: String, $first: Int!, $after: String) {
  jobs(status: $status, type: $type, scheduleName: $scheduleName, first: $first, after: $after) {
    totalCount pageInfo { hasNextPage endCursor } nodes { ${ROW_FIELDS} } } }`;
const EVENTS_SUBSCRIPTION = `subscription Events { jobEvents { kind at job { ${ROW_FIELDS} } } }`;
const CONTROL_FIELDS =
  "type paused pausedUntil running maxRunning maxRunningPerKey rateLimit { limit periodSeconds perKey } timeoutSeconds";
const TYPES_QUERY = `query Types { typeControls { ${CONTROL_FIELDS} } }`;
const PAUSE_MUTATION = `mutation Pause($type: String!) { pauseType(type: $type) { ${CONTROL_FIELDS} } }`;
const RESUME_MUTATION = `mutation Resume($type: String!) { resumeType(type: $type) { ${CONTROL_FIELDS} } }`;
const LIMITS_MUTATION = `mutation Limits($input: TypeControlInput!) {
  setTypeControl(input: $input) { ${CONTROL_FIELDS} } }`;
const SCHEDULE_FIELDS = "name type cron timezone paused nextRunAt lastRunAt lastJobId";
const SCHEDULES_QUERY = `query Schedules { schedules { ${SCHEDULE_FIELDS} } }`;
const PAUSE_SCHEDULE_MUTATION = `mutation PauseSchedule($name: String!) {
  pauseSchedule(name: $name) { ${SCHEDULE_FIELDS} } }`;
const RESUME_SCHEDULE_MUTATION = `mutation ResumeSchedule($name: String!) {
  resumeSchedule(name: $name) { ${SCHEDULE_FIELDS} } }`;
const DELETE_SCHEDULE_MUTATION = "mutation DeleteSchedule($name: String!) { deleteSchedule(name: $name) }";
const SCHEDULE_COLUMNS = 8; // without the ADMIN's Actions
// API.md section 10: what a schedule may be called (a link's name that is not one is ignored).
const SCHEDULE_NAME = /^[A-Za-z0-9._-]{1,100}$/;
const JOB_COLUMNS = 8;
// The bulk actions: the statuses each may change, its mutation, and how the page words it.
const BULK = {
  cancel: { statuses: ["PENDING"], mutation: "cancelJobs", verb: "Cancel", doing: "Cancelling", done: "cancelled" },
  retry: {
    statuses: ["FAILED", "CANCELLED"],
    mutation: "retryJobs",
    verb: "Retry",
    doing: "Retrying",
    done: "retried",
  },
};

const $ = (id) => document.getElementById(id);
const state = {
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
};

// ---- talking to the server -------------------------------------------------------------

class Stale extends Error {}

// One operation with the current key. A refused key ends the session (back to the key box).
async function call(query, variables = {}) {
  const session = state.session;
  try {
    const data = await request(state.key, query, variables);
    if (session !== state.session) throw new Stale();
    showBanner("");
    return data;
  } catch (error) {
    if (error instanceof Stale || session !== state.session) throw new Stale();
    if (error.code === "UNAUTHENTICATED") {
      signOut("The server no longer accepts this key (it was revoked, or is unknown). Enter a valid key.");
      throw new Stale();
    }
    if (error.code === "NETWORK" || error.code === "HTTP") showBanner(`Cannot load: ${error.plain}. Retrying…`);
    throw error;
  }
}

function quietly(promise) {
  return promise.catch((error) => {
    if (!(error instanceof Stale) && error.code !== "NETWORK" && error.code !== "HTTP") {
      showBanner(`The server refused a request: ${error.plain}`);
    }
  });
}

const isAdmin = () => Boolean(state.me) && state.me.roles.includes("ADMIN");
const mayCancel = () => isAdmin() || (Boolean(state.me) && state.me.roles.includes("PRODUCER"));
// API.md section 10: `schedules` is for ADMIN and VIEWER; other roles are refused it.
const mayReadSchedules = () => isAdmin() || (Boolean(state.me) && state.me.roles.includes("VIEWER"));

// ---- signing in and out ----------------------------------------------------------------

async function signIn(key) {
  showMessage($("key-message"), "");
  let me;
  try {
    me = (await request(key, "query Me { me { name roles } }")).me;
  } catch (error) {
    if (error.code === "UNAUTHENTICATED") forgetStoredKey();
    const reason = error.code === "UNAUTHENTICATED" ? "the server does not accept it (unknown or revoked)" : error.plain;
    showMessage($("key-message"), `This key cannot be used: ${reason}.`, "error");
    $("key-input").focus();
    return;
  }
  storeKey(key);
  state.session += 1;
  Object.assign(state, { key, me, cursors: [null], view: null }); // view: the first route shows one afresh
  $("signin").hidden = true;
  $("app").hidden = false;
  $("forget").hidden = false;
  $("live").hidden = false;
  $("who").textContent = `${me.name} (${me.roles.join(", ")})`;
  $("bulk").hidden = !mayCancel();
  document.querySelector('[data-bulk="cancel"]').hidden = !mayCancel();
  document.querySelector('[data-bulk="retry"]').hidden = !isAdmin();
  $("type-actions-head").hidden = !isAdmin();
  $("schedule-actions-head").hidden = !isAdmin();
  $("schedules-link").hidden = !mayReadSchedules();
  $("schedules").hidden = !mayReadSchedules();
  $("schedule-filter-box").hidden = !mayReadSchedules();
  showSchedulesMessage(
    mayReadSchedules()
      ? ""
      : `Schedules are shown to ADMIN and VIEWER keys only; this key is ${me.roles.join(", ")}.`,
  );
  updateBulk();
  setLive(false);
  openSocket();
  state.timers.push(
    setInterval(() => {
      quietly(loadStats());
      if (state.view === "types") quietly(loadTypes());
      if (state.view === "schedules") quietly(loadSchedules());
    }, STATS_MS),
  );
  state.timers.push(setInterval(refreshTimes, 10000));
  await Promise.all([quietly(loadStats()), quietly(loadJobs()), route(false)]);
}

function signOut(message, kind = "error") {
  state.session += 1;
  forgetStoredKey();
  closeSocket();
  state.timers.forEach(clearInterval);
  state.timers = [];
  stopPolling();
  closeDetail();
  closeBulk();
  closeLimits();
  closeScheduleDialog();
  Object.assign(state, { key: "", me: null, controls: new Map(), schedules: new Map() });
  // Nothing the key could read stays on the page.
  document.querySelectorAll("[data-count]").forEach((cell) => (cell.textContent = "–"));
  $("by-type").tBodies[0].replaceChildren();
  $("jobs").tBodies[0].replaceChildren();
  $("type-controls").tBodies[0].replaceChildren();
  $("schedules").tBodies[0].replaceChildren();
  showTypesMessage("");
  showSchedulesMessage("");
  $("bulk-progress").textContent = "";
  drawSparkline([]);
  state.nextCursor = null;
  $("next").disabled = true; // until the next key's first page says whether more follow
  $("previous").disabled = true;
  $("status-filter").value = "";
  $("type-filter").replaceChildren(new Option("any", ""));
  $("schedule-filter").replaceChildren(new Option("any", ""));
  $("schedule-filter-box").hidden = true;
  $("app").hidden = true;
  $("forget").hidden = true;
  $("live").hidden = true;
  $("who").textContent = "";
  $("signin").hidden = false;
  showMessage($("key-message"), message, kind);
  $("key-input").focus();
}

// ---- live updates ----------------------------------------------------------------------

function openSocket() {
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
      if (event && event.code === KEY_REFUSED) quietly(call("query Me { me { name } }"));
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

function closeSocket() {
  stopFollowing();
  if (state.socket) state.socket.dispose();
  state.socket = null;
  setLive(false);
}

function setLive(live) {
  const badge = $("live");
  badge.dataset.live = live ? "live" : "reconnecting";
  badge.textContent = live ? "Live" : `Reconnecting… (refreshing every ${POLL_MS / 1000} s)`;
  if (live) stopPolling();
  else if (state.key && !state.pollTimer) state.pollTimer = setInterval(refreshAll, POLL_MS);
}

function stopPolling() {
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

const refreshSoon = throttled(() => {
  quietly(loadStats());
  if (state.cursors.length === 1) quietly(loadJobs()); // the newest page: new jobs appear
  if (state.view === "types") quietly(loadTypes()); // running counts move with the jobs
  if (state.view === "schedules") quietly(loadSchedules()); // a tick's job is its last job
}, REFRESH_GAP_MS);

function onEvent(event) {
  const { job } = event;
  const row = document.querySelector(`#jobs tr[data-job-id="${CSS.escape(job.id)}"]`);
  if (row) keepingFocus(() => row.replaceWith(jobRow(job)));
  refreshSoon();
}

// ---- overview --------------------------------------------------------------------------

async function loadStats() {
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

function setTypeOptions(types) {
  const select = $("type-filter");
  const have = new Set([...select.options].map((o) => o.value));
  for (const type of types.sort()) {
    if (!have.has(type)) select.add(new Option(type, type));
  }
}

// The schedule filter's choices: "any", the schedules as last read, and the one chosen (a
// schedule deleted since still names its jobs). Redrawn only when they change.
function setScheduleOptions(names, chosen = $("schedule-filter").value) {
  const select = $("schedule-filter");
  const wanted = [...new Set(chosen ? [...names, chosen] : names)].sort();
  const have = [...select.options].slice(1).map((option) => option.value);
  if (have.length !== wanted.length || have.some((name, i) => name !== wanted[i])) {
    select.replaceChildren(new Option("any", ""), ...wanted.map((name) => new Option(name, name)));
  }
  select.value = chosen;
}

// The schedule the list is filtered by, or null: the filter is for ADMIN and VIEWER, who may
// read schedules (a PRODUCER's jobs(scheduleName:) is always empty).
function scheduleFilter() {
  return (mayReadSchedules() && $("schedule-filter").value) || null;
}

// Jobs finished per minute (queueStats.throughput, oldest first, the current minute last):
// the full minutes as lines, the current one, still filling up, in the caption.
function drawSparkline(minutes) {
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

// ---- the jobs table --------------------------------------------------------------------

async function loadJobs() {
  const ticket = ++state.jobsRequest;
  const variables = {
    status: $("status-filter").value || null,
    type: $("type-filter").value || null,
    scheduleName: scheduleFilter(),
    first: PAGE_SIZE,
    after: state.cursors.at(-1),
  };
  const { jobs } = await call(JOBS_QUERY, variables);
  if (ticket !== state.jobsRequest) return; // a newer filter or page is on its way
  const rows = jobs.nodes.map(jobRow);
  if (!rows.length) {
    const empty = cell("No jobs match.");
    empty.colSpan = JOB_COLUMNS;
    const row = document.createElement("tr");
    row.append(empty);
    rows.push(row);
  }
  keepingFocus(() => $("jobs").tBodies[0].replaceChildren(...rows));
  state.nextCursor = jobs.pageInfo.hasNextPage ? jobs.pageInfo.endCursor : null;
  const page = state.cursors.length;
  $("jobs-summary").textContent = `${jobs.totalCount.toLocaleString("en")} matching`;
  $("page-number").textContent = `Page ${page}`;
  $("next").disabled = !state.nextCursor;
  $("previous").disabled = page === 1;
  $("newest").disabled = page === 1;
}

function jobRow(job) {
  const row = document.createElement("tr");
  row.dataset.jobId = job.id;
  if (job.id === state.detailId) row.classList.add("selected");
  const link = document.createElement("a");
  link.href = `#job/${encodeURIComponent(job.id)}`;
  link.textContent = `#${job.id}`;
  const waiting = isWaiting(job);
  const label = `Job ${job.id}, ${job.type}, ${job.status}` + (waiting ? `, waiting for ${dependencies(job.waitingFor)}` : "");
  link.setAttribute("aria-label", label);
  const status = document.createElement("span");
  status.className = "status-cell";
  status.append(statusBadge(job.status));
  if (waiting) status.append(" ", waitingBadge(job.waitingFor));
  row.append(
    cell(link),
    cell(job.type),
    cell(status),
    cell(job.scheduleName || ""),
    cell(job.priority),
    cell(String(job.attempt), "num"),
    cell(timeElement(job.createdAt)),
    cell(timeElement(job.updatedAt)),
  );
  return row;
}

// Rows are redrawn on every refresh: a keyboard user's focus stays on the same job's link.
function keepingFocus(redraw) {
  const focused = document.activeElement && document.activeElement.closest("#jobs tr[data-job-id]");
  redraw();
  if (focused && !focused.isConnected) {
    const again = document.querySelector(`#jobs tr[data-job-id="${CSS.escape(focused.dataset.jobId)}"] a`);
    if (again) again.focus();
  }
}

function changePage(cursors) {
  state.cursors = cursors;
  quietly(loadJobs());
}

// ---- one job ---------------------------------------------------------------------------

function detailQuery(operation) {
  const fields = DETAIL_FIELDS + (isAdmin() ? " error" : ""); // `error` is ADMIN's alone
  if (operation === "job") return `query Job($id: ID!) { job(id: $id) { ${fields} } }`;
  if (operation === "jobUpdated") return `subscription Job($id: ID!) { jobUpdated(id: $id) { ${fields} } }`;
  return `mutation Act($id: ID!) { ${operation}(id: $id) { ${fields} } }`;
}

// `#job/<id>`: the id as the link gives it (text that does not decode is kept as it is).
function hashJobId() {
  const match = /^#job\/(.*)$/.exec(window.location.hash);
  if (!match) return null;
  try {
    return decodeURIComponent(match[1]);
  } catch {
    return match[1];
  }
}

// `#jobs?schedule=<name>`: the job list of that schedule's jobs (the links of the Schedules
// view and of the job detail), or null.
function hashSchedule() {
  const match = /^#jobs\?schedule=(.*)$/.exec(window.location.hash);
  if (!match) return null;
  try {
    return decodeURIComponent(match[1]);
  } catch {
    return match[1];
  }
}

// `#types`: the Types view; `#schedules`: the Schedules view; anything else: the jobs view
// (with a job open for `#job/<id>`, filtered by a schedule for `#jobs?schedule=<name>`).
function hashView() {
  const hash = window.location.hash;
  if (hash === "#types") return "types";
  if (hash === "#schedules") return "schedules";
  return "jobs";
}

function showView(view) {
  const changed = view !== state.view;
  state.view = view;
  document.querySelectorAll("[data-view]").forEach((part) => (part.hidden = part.dataset.view !== view));
  document.querySelectorAll("[data-view-link]").forEach((link) => {
    if (link.dataset.viewLink === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  });
  return changed;
}

async function route(focus) {
  if (!state.key) return;
  const changed = showView(hashView());
  if (state.view === "types") {
    closeDetail();
    if (focus) $("types-title").focus();
    await quietly(loadTypes());
    return;
  }
  closeLimits();
  if (state.view === "schedules") {
    closeDetail();
    if (focus) $("schedules-title").focus();
    if (mayReadSchedules()) await quietly(loadSchedules()); // others: the message says why not
    return;
  }
  if (changed) quietly(loadSchedules()); // the schedule filter's names, afresh
  if (hashSchedule() !== null) {
    closeDetail();
    showScheduleJobs(hashSchedule(), focus);
    return;
  }
  const id = hashJobId();
  if (id === null) {
    closeDetail();
    if (focus && changed) $("overview-title").focus();
    return;
  }
  openDetail(id);
  if (focus) $("detail-title").focus();
  const view = state.detailView;
  await quietly(loadDetail(id));
  if (state.socket && view === state.detailView && state.detailId !== null) followDetail(id);
}

// `#jobs?schedule=<name>`: the list of the schedule's jobs from its newest page, the status and
// type filters back to any. The address then says `#jobs` (the filters are not kept in it, as
// the status and type ones never are), so that the same link works again after the filter
// changes. The focus goes to the schedule filter, which names the schedule.
function showScheduleJobs(name, focus) {
  history.replaceState(null, "", "#jobs");
  if (!mayReadSchedules() || !SCHEDULE_NAME.test(name)) {
    if (focus) $("overview-title").focus(); // not this key's, or no schedule's name: the list as it is
    return;
  }
  closeBulk(); // a confirmation open for the old filter is not one for this list
  $("status-filter").value = "";
  $("type-filter").value = "";
  setScheduleOptions([...state.schedules.keys()], name);
  updateBulk();
  changePage([null]);
  if (focus) $("schedule-filter").focus();
}

// The pane turns to job `id`, empty until its answer comes: nothing of the job shown before
// stays under the new heading, and that job's late answers and updates are dropped.
function openDetail(id) {
  stopFollowing();
  state.detailView += 1;
  state.detailId = id;
  clearDetail();
  selectRow(id);
  $("detail").hidden = false;
  $("workspace").classList.remove("no-detail");
  $("detail-title").textContent = `Job #${shortId(id)}`;
}

function closeDetail() {
  stopFollowing();
  state.detailView += 1;
  state.detailId = null;
  clearDetail();
  selectRow(null);
  $("detail").hidden = true;
  $("workspace").classList.add("no-detail");
}

// Shown again by renderDetail: while a job loads, and when there is none, the pane is empty.
function clearDetail() {
  state.detail = null;
  $("detail-body").hidden = true;
  ["detail-fields", "actions", "timeline"].forEach((part) => $(part).replaceChildren());
  delete $("actions").dataset.signature;
  $("detail-payload").textContent = "";
  $("detail-result").textContent = "";
  $("detail-error").textContent = "";
  $("detail-error-block").hidden = true;
  showDetailMessage("");
}

function selectRow(id) {
  document.querySelectorAll("#jobs tr.selected").forEach((r) => r.classList.remove("selected"));
  const row = id === null ? null : document.querySelector(`#jobs tr[data-job-id="${CSS.escape(id)}"]`);
  if (row) row.classList.add("selected");
}

// A link's id can be any text: only so much of it is shown.
function shortId(id) {
  return id.length > 40 ? `${id.slice(0, 40)}…` : id;
}

async function loadDetail(id) {
  const view = state.detailView;
  const job = await readJob(id);
  if (view !== state.detailView) return; // the person has moved on to another job
  if (job) renderDetail(job);
  else showNoSuchJob(id);
}

// job(id), or null when there is no such job for this key, which includes an id the server
// cannot even parse ("abc", ""): that error is about the `job` field's one argument.
async function readJob(id) {
  try {
    return (await call(detailQuery("job"), { id })).job;
  } catch (error) {
    if (error.code === "BAD_USER_INPUT" && error.path[0] === "job") return null;
    throw error;
  }
}

function showNoSuchJob(id) {
  clearDetail();
  state.detailId = null; // nothing to refresh or follow
  $("detail-title").textContent = "No such job";
  showDetailMessage(
    id ? `Job #${shortId(id)} does not exist, or this key may not see it.` : "This link names no job.",
  );
}

// jobUpdated: the job as it is now, then after every change, until it is terminal.
function followDetail(id) {
  stopFollowing();
  const view = state.detailView;
  state.stopDetailUpdates = state.socket.subscribe(
    { query: detailQuery("jobUpdated"), variables: { id } },
    {
      next: (message) => {
        const job = message.data && message.data.jobUpdated;
        if (job && view === state.detailView) renderDetail(job);
      },
      error: () => {},
      complete: () => {},
    },
  );
}

function stopFollowing() {
  if (state.stopDetailUpdates) state.stopDetailUpdates();
  state.stopDetailUpdates = null;
}

function renderDetail(job) {
  state.detail = job;
  $("detail-body").hidden = false;
  $("detail-title").textContent = `Job #${job.id} · ${job.type}`;
  const fields = [
    ["Status", statusBadge(job.status)],
    ["Priority", job.priority],
    ["Attempts", String(job.attempt)],
    ["Retries", `${job.retryCount} of ${job.maxRetries}`],
    ["Worker", job.workerId || "none"],
    ["Lease expires", job.leaseExpiresAt ? timeElement(job.leaseExpiresAt) : "no lease"],
    ["Claimed", job.claimedAt ? timeElement(job.claimedAt) : "never"],
    ["Runs at", timeElement(job.runAt)],
    ["Finished", job.finishedAt ? timeElement(job.finishedAt) : "not yet"],
    ["Created", timeElement(job.createdAt)],
    ["Updated", timeElement(job.updatedAt)],
    ["Idempotency key", job.idempotencyKey || "none"],
    ["Concurrency key", job.concurrencyKey || "none"],
    ["Timeout", job.timeoutSeconds === null ? "not set (the type's, if any)" : seconds(job.timeoutSeconds)],
    ["Schedule", scheduleOf(job)],
    ["Depends on", dependencyLinks(job.dependsOn)],
    ["Waiting for", waitingText(job)],
  ];
  $("detail-fields").replaceChildren(
    ...fields.flatMap(([name, value]) => {
      const term = document.createElement("dt");
      term.textContent = name;
      const description = document.createElement("dd");
      description.append(value);
      return [term, description];
    }),
  );
  $("detail-payload").textContent = JSON.stringify(job.payload, null, 2);
  $("detail-result").textContent = job.result === null ? "none" : JSON.stringify(job.result, null, 2);
  $("detail-error-block").hidden = !isAdmin();
  if (isAdmin()) $("detail-error").textContent = job.error || "none";
  renderActions(job);
  renderTimeline(job);
}

// A PENDING job with dependencies not COMPLETED yet: not claimed whatever its runAt says.
function isWaiting(job) {
  return job.status === "PENDING" && job.waitingFor > 0;
}

function dependencies(count) {
  return `${count.toLocaleString("en")} ${count === 1 ? "dependency" : "dependencies"}`;
}

function waitingBadge(count) {
  const badge = document.createElement("span");
  badge.className = "waiting";
  badge.textContent = `waiting for ${count.toLocaleString("en")}`;
  badge.title = `${dependencies(count)} not COMPLETED yet: not claimed before they are`;
  return badge;
}

// The schedule that enqueued the job: for the keys that may filter by it, a link to the list
// of its jobs.
function scheduleOf(job) {
  if (!job.scheduleName) return "none";
  if (!mayReadSchedules()) return job.scheduleName;
  return scheduleJobsLink(job.scheduleName, job.scheduleName);
}

// A link to the job list filtered by schedule `name` (`#jobs?schedule=<name>`).
function scheduleJobsLink(name, text) {
  const link = document.createElement("a");
  link.href = `#jobs?schedule=${encodeURIComponent(name)}`;
  link.textContent = text;
  link.setAttribute("aria-label", `Jobs of schedule ${name}`);
  return link;
}

// Job.dependsOn: each a link to that job's detail. (The API has no field for the jobs that
// wait for this one, so dependents are not listed.)
function dependencyLinks(ids) {
  if (!ids.length) return "nothing";
  const list = document.createElement("ul");
  list.className = "inline-list";
  list.append(
    ...ids.map((id) => {
      const link = document.createElement("a");
      link.href = `#job/${encodeURIComponent(id)}`;
      link.textContent = `#${shortId(id)}`;
      link.setAttribute("aria-label", `Job ${shortId(id)}`);
      link.dataset.dependency = id;
      const item = document.createElement("li");
      item.append(link);
      return item;
    }),
  );
  return list;
}

function waitingText(job) {
  const total = job.dependsOn.length;
  if (!total) return "nothing";
  if (job.waitingFor === 0) return `nothing: ${total === 1 ? "its dependency is" : `all ${total} are`} COMPLETED`;
  const text = `${job.waitingFor.toLocaleString("en")} of ${dependencies(total)} not COMPLETED yet`;
  return job.status === "PENDING" ? `${text}: not claimed before they are` : text;
}

function renderActions(job) {
  const wanted = [];
  if (mayCancel() && job.status === "PENDING") wanted.push(["Cancel job", "cancelJob"]);
  if (isAdmin() && (job.status === "FAILED" || job.status === "CANCELLED")) wanted.push(["Retry job", "retryJob"]);
  // The same buttons stay in place (and keep the focus) while the job does not change.
  const signature = JSON.stringify([job.id, wanted]);
  const actions = $("actions");
  if (actions.dataset.signature === signature) return;
  actions.dataset.signature = signature;
  actions.replaceChildren(...wanted.map(([label, operation]) => actionButton(label, operation, job.id)));
}

function actionButton(label, operation, id) {
  const button = document.createElement("button");
  button.type = "button";
  button.textContent = label;
  button.addEventListener("click", async () => {
    const view = state.detailView;
    button.disabled = true;
    showDetailMessage("");
    try {
      const job = (await call(detailQuery(operation), { id }))[operation];
      if (view === state.detailView) {
        renderDetail(job);
        if (state.socket) followDetail(job.id); // a retried job changes again
      }
      refreshSoon();
    } catch (error) {
      if (error instanceof Stale) return;
      showDetailMessage(`${label} refused: ${error.plain}`);
      button.disabled = false;
    }
  });
  return button;
}

function showDetailMessage(text) {
  $("detail-message").textContent = text;
  $("detail-message").hidden = !text;
}

// The transitions the server recorded (Job.events, oldest first). Claims are numbered by
// counting back from the job's attempt, so the numbers hold when older events are cut off.
function renderTimeline(job) {
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

// ---- the Types view (typeControls) -----------------------------------------------------

async function loadTypes() {
  const ticket = ++state.typesRequest;
  const controls = (await call(TYPES_QUERY)).typeControls;
  if (ticket !== state.typesRequest) return; // a newer read, or a write's answer, is newer
  state.controls = new Map(controls.map((control) => [control.type, control]));
  keepingTypeFocus(() => $("type-controls").tBodies[0].replaceChildren(...controls.map(typeRow)));
}

// One type's control as a write answered it: its row alone is redrawn.
function showControl(control) {
  state.typesRequest += 1; // a read sent before this write must not paint the old state
  state.controls.set(control.type, control);
  const row = typeRowElement(control.type);
  const fresh = typeRow(control);
  keepingTypeFocus(() => (row ? row.replaceWith(fresh) : $("type-controls").tBodies[0].append(fresh)));
}

function typeRowElement(type) {
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

function pausedBadge(paused) {
  const badge = document.createElement("span");
  badge.className = `status ${paused ? "status-PAUSED" : "status-ACTIVE"}`;
  badge.textContent = paused ? "PAUSED" : "ACTIVE";
  return badge;
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
  edit.addEventListener("click", () => openLimits(control.type));
  td.append(toggle, " ", edit);
  return td;
}

// Rows are redrawn on every refresh: a keyboard user's focus stays on the same type's button
// (a pause that became a resume keeps the focus on its replacement).
function keepingTypeFocus(redraw) {
  keepingActionFocus("type-controls", "type", redraw);
}

// The same for the rows of table `tableId`, each named by its `data-<key>` attribute; the
// focusable parts of a row carry `data-action`.
function keepingActionFocus(tableId, key, redraw) {
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

function showTypesMessage(text, kind = "info") {
  $("types-message").textContent = text;
  $("types-message").dataset.kind = kind;
}

// ---- limits form (setTypeControl) ------------------------------------------------------

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

function openLimits(type) {
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
function closeLimits(refocus = false) {
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

async function saveLimits() {
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

// ---- the Schedules view (schedules) -----------------------------------------------------

async function loadSchedules() {
  if (!mayReadSchedules()) return;
  const ticket = ++state.schedulesRequest;
  const schedules = (await call(SCHEDULES_QUERY)).schedules;
  if (ticket !== state.schedulesRequest) return; // a newer read, or a write's answer, is newer
  state.schedules = new Map(schedules.map((schedule) => [schedule.name, schedule]));
  setScheduleOptions(schedules.map((schedule) => schedule.name));
  const rows = schedules.map(scheduleRow);
  if (!rows.length) rows.push(noSchedulesRow());
  keepingActionFocus("schedules", "schedule", () => $("schedules").tBodies[0].replaceChildren(...rows));
}

function noSchedulesRow() {
  const empty = cell("No schedules. An ADMIN creates them with putSchedule (GraphQL or the SDK).");
  empty.colSpan = SCHEDULE_COLUMNS + (isAdmin() ? 1 : 0);
  const row = document.createElement("tr");
  row.append(empty);
  return row;
}

// One schedule as a write answered it: its row alone is redrawn.
function showSchedule(schedule) {
  state.schedulesRequest += 1; // a read sent before this write must not paint the old state
  state.schedules.set(schedule.name, schedule);
  const row = scheduleRowElement(schedule.name);
  if (!row) {
    quietly(loadSchedules()); // not on the page (the list was still loading): read them all
    return;
  }
  const fresh = scheduleRow(schedule);
  keepingActionFocus("schedules", "schedule", () => row.replaceWith(fresh));
}

function scheduleRowElement(name) {
  return document.querySelector(`#schedules tr[data-schedule="${CSS.escape(name)}"]`);
}

function scheduleRow(schedule) {
  const row = document.createElement("tr");
  row.dataset.schedule = schedule.name;
  const name = document.createElement("th");
  name.scope = "row";
  name.textContent = schedule.name;
  const cron = document.createElement("code");
  cron.textContent = schedule.cron;
  const when = document.createElement("span");
  when.append(cron, ` (${schedule.timezone})`);
  let next = schedule.paused ? "none while paused" : "none";
  if (schedule.nextRunAt) next = timeElement(schedule.nextRunAt);
  row.append(
    name,
    cell(schedule.type),
    cell(when),
    cell(pausedBadge(schedule.paused)),
    cell(next),
    cell(schedule.lastRunAt ? timeElement(schedule.lastRunAt) : "never"),
    cell(lastJobLink(schedule)),
    cell(jobsLink(schedule)),
  );
  if (isAdmin()) row.append(scheduleActions(schedule));
  return row;
}

function lastJobLink(schedule) {
  if (!schedule.lastJobId) return "none";
  const link = document.createElement("a");
  link.href = `#job/${encodeURIComponent(schedule.lastJobId)}`;
  link.textContent = `#${shortId(schedule.lastJobId)}`;
  link.dataset.action = "last-job"; // for keepingActionFocus
  link.setAttribute("aria-label", `Job ${shortId(schedule.lastJobId)}, the last one ${schedule.name} enqueued`);
  return link;
}

function jobsLink(schedule) {
  const link = scheduleJobsLink(schedule.name, "jobs");
  link.dataset.action = "jobs"; // for keepingActionFocus
  return link;
}

function scheduleActions(schedule) {
  const td = document.createElement("td");
  td.className = "row-actions";
  const action = schedule.paused ? "resume" : "pause";
  const toggle = document.createElement("button");
  toggle.type = "button";
  toggle.dataset.action = action;
  toggle.textContent = schedule.paused ? "Resume" : "Pause";
  toggle.setAttribute("aria-label", `${toggle.textContent} schedule ${schedule.name}`);
  toggle.addEventListener("click", () => toggleSchedule(schedule.name, action, toggle));
  const remove = document.createElement("button");
  remove.type = "button";
  remove.className = "secondary";
  remove.dataset.action = "delete";
  remove.textContent = "Delete…";
  remove.setAttribute("aria-label", `Delete schedule ${schedule.name}…`);
  remove.setAttribute("aria-haspopup", "dialog");
  remove.addEventListener("click", () => askDeleteSchedule(schedule.name));
  td.append(toggle, " ", remove);
  return td;
}

async function toggleSchedule(name, action, button) {
  button.disabled = true;
  showSchedulesMessage("");
  const operation = action === "pause" ? "pauseSchedule" : "resumeSchedule";
  try {
    const data = await call(action === "pause" ? PAUSE_SCHEDULE_MUTATION : RESUME_SCHEDULE_MUTATION, { name });
    const schedule = data[operation];
    const hadFocus = document.activeElement === button || document.activeElement === document.body;
    showSchedule(schedule);
    // Its button became the other one: the focus moves to it (the old one was disabled).
    const again = scheduleRowElement(name)?.querySelector('button[data-action="pause"], button[data-action="resume"]');
    if (hadFocus && again) again.focus();
    showSchedulesMessage(
      schedule.paused
        ? `${name} paused: it enqueues nothing until it is resumed.`
        : `${name} resumed (the ticks it missed while paused are not enqueued).`,
    );
  } catch (error) {
    if (error instanceof Stale) return;
    showSchedulesMessage(`${action === "pause" ? "Pause" : "Resume"} ${name} refused: ${error.plain}`, "error");
    button.disabled = false;
  }
}

function askDeleteSchedule(name) {
  const schedule = state.schedules.get(name);
  if (!schedule || state.deleting) return;
  state.deleting = name;
  showSchedulesMessage("");
  $("schedule-dialog-title").textContent = `Delete schedule ${name}?`;
  const last = schedule.lastJobId ? ` (the newest is #${shortId(schedule.lastJobId)})` : "";
  $("schedule-dialog-text").textContent =
    `${name} will enqueue no more ${schedule.type} jobs (${schedule.cron}, ${schedule.timezone}). ` +
    `The jobs it already enqueued stay${last}. Only putSchedule can create it again.`;
  $("schedule-delete-confirm").textContent = `Delete ${name}`;
  $("schedule-dialog").showModal();
}

// `refocus`: back to the schedule's Delete button (Back, or Escape).
function closeScheduleDialog(refocus = false) {
  const name = state.deleting;
  state.deleting = null;
  if ($("schedule-dialog").open) $("schedule-dialog").close();
  const button = refocus && name && scheduleRowElement(name)?.querySelector('button[data-action="delete"]');
  if (button) button.focus();
}

async function deleteSchedule() {
  const name = state.deleting;
  if (!name) return;
  state.deleting = null;
  $("schedule-dialog").close();
  const row = scheduleRowElement(name);
  // After it goes, the focus moves to the next schedule's Delete (or the one before, or the heading).
  const neighbour = row && (row.nextElementSibling || row.previousElementSibling);
  const neighbourName = neighbour ? neighbour.dataset.schedule : undefined;
  row?.querySelectorAll("button").forEach((button) => (button.disabled = true));
  try {
    const deleted = (await call(DELETE_SCHEDULE_MUTATION, { name })).deleteSchedule;
    state.schedulesRequest += 1; // a read sent before this write must not paint it again
    state.schedules.delete(name);
    scheduleRowElement(name)?.remove();
    if (!state.schedules.size) $("schedules").tBodies[0].replaceChildren(noSchedulesRow());
    const next = neighbourName && scheduleRowElement(neighbourName)?.querySelector('button[data-action="delete"]');
    if (next) next.focus();
    else $("schedules-title").focus();
    showSchedulesMessage(
      deleted
        ? `Schedule ${name} deleted; the jobs it enqueued stay.`
        : `Schedule ${name} was already gone (deleted elsewhere).`,
    );
    quietly(loadSchedules());
  } catch (error) {
    if (error instanceof Stale) return;
    row?.querySelectorAll("button").forEach((button) => (button.disabled = false));
    showSchedulesMessage(`Delete ${name} refused: ${error.plain}`, "error");
  }
}

function showSchedulesMessage(text, kind = "info") {
  $("schedules-message").textContent = text;
  $("schedules-message").dataset.kind = kind;
}

// ---- bulk cancel and retry on the filtered list ----------------------------------------

// The list's filter as cancelJobs/retryJobs take it, or null when it names neither a status
// nor a type (the server refuses such a filter: "everything" is not a bulk action here).
// JobFilter has no schedule: while the list is filtered by one, the bulk actions are off
// (updateBulk), since they would act on more jobs than the list shows.
function listFilter() {
  const status = $("status-filter").value || null;
  const type = $("type-filter").value || null;
  return status || type ? { status, type } : null;
}

// The statuses of matching jobs that `action` would change (none: the filter excludes them).
function bulkStatuses(action, filter) {
  return BULK[action].statuses.filter((s) => !filter.status || filter.status === s);
}

// Each bulk button is on when the list's filter can match jobs it may change (and no bulk
// action is under way); the hint says why not otherwise.
function updateBulk() {
  const filter = listFilter();
  const running = Boolean(state.bulk && state.bulk.running);
  const bySchedule = scheduleFilter() !== null;
  const shown = [...document.querySelectorAll("[data-bulk]")].filter((button) => !button.hidden);
  const usable = (button) => filter !== null && bulkStatuses(button.dataset.bulk, filter).length > 0;
  shown.forEach((button) => (button.disabled = running || bySchedule || !usable(button)));
  let hint = "";
  if (running || !shown.length) hint = "";
  else if (bySchedule) hint = "Bulk actions filter by status and type only: set Schedule to any to use them.";
  else if (filter === null) hint = "Choose a status or a type to act on every matching job.";
  else if (!shown.some(usable)) {
    hint = isAdmin()
      ? "Only PENDING jobs can be cancelled, and only FAILED or CANCELLED ones retried."
      : "Only PENDING jobs can be cancelled.";
  }
  $("bulk-hint").textContent = hint;
}

function describeFilter(filter) {
  const parts = [];
  if (filter.status) parts.push(`status ${filter.status}`);
  if (filter.type) parts.push(`type ${filter.type}`);
  return parts.join(", ");
}

// First the count (jobs(status:, type:) { totalCount } for each status the action changes),
// then a confirmation that states it.
async function askBulk(action) {
  const filter = listFilter();
  if (!filter || state.bulk) return; // one at a time (a second click while counting does nothing)
  if (scheduleFilter() !== null) return; // the buttons are off: never more jobs than the list shows
  const statuses = bulkStatuses(action, filter);
  const counts = statuses.map((s, i) => `s${i}: jobs(status: ${s}, type: $type, first: 1) { totalCount }`);
  state.bulk = { action, filter, running: false };
  $("bulk-progress").textContent = "Counting matching jobs…";
  let total;
  let parts;
  try {
    const data = await call(`query Matching($type: String) { ${counts.join(" ")} }`, { type: filter.type });
    parts = statuses.map((s, i) => [s, data[`s${i}`].totalCount]);
    total = parts.reduce((sum, [, n]) => sum + n, 0);
  } catch (error) {
    state.bulk = null;
    if (!(error instanceof Stale)) $("bulk-progress").textContent = `Cannot count matching jobs: ${error.plain}`;
    return;
  }
  if (scheduleFilter() !== null) {
    state.bulk = null; // the list turned to one schedule's jobs while counting: no confirmation
    $("bulk-progress").textContent = "";
    return;
  }
  const words = BULK[action];
  if (total === 0) {
    state.bulk = null;
    const verb = words.verb.toLowerCase();
    $("bulk-progress").textContent = `No jobs match (${describeFilter(filter)}): nothing to ${verb}.`;
    return;
  }
  $("bulk-progress").textContent = "";
  const jobs = (n) => `${n.toLocaleString("en")} ${n === 1 ? "job" : "jobs"}`;
  // "12 PENDING jobs match ...", or with two statuses "5 jobs (3 FAILED, 2 CANCELLED) match ..."
  const matching =
    parts.length > 1
      ? `${jobs(total)} (${parts.map(([s, n]) => `${n.toLocaleString("en")} ${s}`).join(", ")})`
      : `${total.toLocaleString("en")} ${parts[0][0]} ${total === 1 ? "job" : "jobs"}`;
  $("bulk-dialog-title").textContent = `${words.verb} ${jobs(total)}?`;
  $("bulk-dialog-text").textContent =
    `${matching} ${total === 1 ? "matches" : "match"} ${describeFilter(filter)}` +
    (mayCancel() && !isAdmin() ? " among the jobs you enqueued" : "") +
    `. ${words.verb} ${total === 1 ? "it" : "them all"}? Jobs that change status meanwhile are left alone.`;
  $("bulk-confirm").textContent = `${words.verb} ${jobs(total)}`;
  $("bulk-dialog").showModal();
}

function closeBulk() {
  if (state.bulk && !state.bulk.running) state.bulk = null;
  if ($("bulk-dialog").open) $("bulk-dialog").close();
}

// cancelJobs/retryJobs, BULK_LIMIT jobs a call, until `more` is false; the count so far shown.
async function runBulk() {
  const bulk = state.bulk;
  if (!bulk || bulk.running) return;
  if (scheduleFilter() !== null) {
    closeBulk(); // the list turned to one schedule's jobs meanwhile: not what was confirmed
    return;
  }
  bulk.running = true;
  $("bulk-dialog").close();
  updateBulk();
  const words = BULK[bulk.action];
  const operation = words.mutation;
  const mutation = `mutation Bulk($filter: JobFilter!, $limit: Int!) {
  ${operation}(filter: $filter, limit: $limit) { count more } }`;
  const button = document.querySelector(`[data-bulk="${bulk.action}"]`);
  const progress = $("bulk-progress");
  let done = 0;
  progress.textContent = `${words.doing} matching jobs…`;
  try {
    for (;;) {
      const answer = (await call(mutation, { filter: bulk.filter, limit: BULK_LIMIT }))[operation];
      done += answer.count;
      if (!answer.more) break;
      progress.textContent = `${words.doing} matching jobs… ${done.toLocaleString("en")} ${words.done} so far.`;
    }
    progress.textContent = `Done: ${done.toLocaleString("en")} ${done === 1 ? "job" : "jobs"} ${words.done}.`;
  } catch (error) {
    if (error instanceof Stale) return;
    progress.textContent = `Stopped after ${done.toLocaleString("en")} ${words.done}: ${error.plain}`;
  } finally {
    if (state.bulk === bulk) state.bulk = null;
    updateBulk();
  }
  // The buttons were off while it ran, which took the focus from the one that started it.
  if (!document.activeElement || document.activeElement === document.body) button.focus();
  quietly(loadStats());
  quietly(loadJobs());
  if (state.detailId) quietly(loadDetail(state.detailId));
}

// ---- small pieces ----------------------------------------------------------------------

function cell(content, className) {
  const td = document.createElement("td");
  td.append(content);
  if (className) td.className = className;
  return td;
}

function statusBadge(status) {
  const badge = document.createElement("span");
  badge.className = `status status-${status}`;
  badge.textContent = status;
  return badge;
}

function duration(seconds) {
  const s = Math.abs(seconds);
  if (s < 60) return `${Math.round(s)} s`;
  if (s < 3600) return `${Math.round(s / 60)} min`;
  if (s < 86400) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

function seconds(count) {
  return `${count.toLocaleString("en")} s`;
}

function relative(iso) {
  const seconds = (Date.parse(iso) - Date.now()) / 1000;
  if (Math.abs(seconds) < 5) return "just now";
  return seconds < 0 ? `${duration(seconds)} ago` : `in ${duration(seconds)}`;
}

function timeElement(iso) {
  const element = document.createElement("time");
  element.dateTime = iso;
  element.title = new Date(iso).toLocaleString();
  element.textContent = relative(iso);
  return element;
}

function refreshTimes() {
  document.querySelectorAll("time[datetime]").forEach((t) => (t.textContent = relative(t.dateTime)));
}

function showBanner(text) {
  $("banner").textContent = text;
  $("banner").hidden = !text;
}

// ---- wiring ----------------------------------------------------------------------------

bindKeyForm($("key-form"), signIn);
$("forget").addEventListener("click", () => signOut("Key forgotten: this tab no longer holds it.", "info"));
$("filters").addEventListener("submit", (event) => event.preventDefault());
for (const id of ["status-filter", "type-filter", "schedule-filter"]) {
  $(id).addEventListener("change", () => {
    updateBulk();
    changePage([null]);
  });
}
document.querySelectorAll("[data-bulk]").forEach((button) => {
  button.addEventListener("click", () => askBulk(button.dataset.bulk));
});
$("bulk-confirm").addEventListener("click", () => runBulk());
$("bulk-back").addEventListener("click", () => closeBulk());
$("bulk-dialog").addEventListener("close", () => {
  if (state.bulk && !state.bulk.running) state.bulk = null; // Escape, or Back
});
$("limits-form").addEventListener("submit", (event) => {
  event.preventDefault();
  saveLimits();
});
$("limits-close").addEventListener("click", () => closeLimits(true));
$("schedule-delete-confirm").addEventListener("click", () => deleteSchedule());
$("schedule-delete-back").addEventListener("click", () => closeScheduleDialog(true));
$("schedule-dialog").addEventListener("cancel", (event) => {
  event.preventDefault(); // Escape: the same as Back
  closeScheduleDialog(true);
});
$("schedule-dialog").addEventListener("close", () => {
  state.deleting = null; // however it closed, nothing awaits confirmation
});
$("next").addEventListener("click", () => state.nextCursor && changePage([...state.cursors, state.nextCursor]));
$("previous").addEventListener("click", () => state.cursors.length > 1 && changePage(state.cursors.slice(0, -1)));
$("newest").addEventListener("click", () => changePage([null]));
$("close-detail").addEventListener("click", (event) => {
  event.preventDefault();
  const opened = state.detailId;
  history.pushState(null, "", window.location.pathname);
  closeDetail();
  const link = opened && document.querySelector(`#jobs tr[data-job-id="${CSS.escape(opened)}"] a`);
  if (link) link.focus();
});
window.addEventListener("hashchange", () => route(true));

const saved = storedKey();
if (saved) signIn(saved);
else $("key-input").focus();
