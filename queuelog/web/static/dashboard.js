// The jobs dashboard: a client of the public GraphQL API, with the key's own permissions.
// Reads only queueStats, jobs(first <= 50) and job(id) with its events, which the server
// answers from counters and indexes however many jobs there are; listens on the websocket
// (jobEvents for everything, jobUpdated for the open job) and polls while the socket is down.
import { KEY_REFUSED, request, socketClient } from "./api.js";
import { bindKeyForm, forgetStoredKey, showMessage, storeKey, storedKey } from "./keybox.js";

const PAGE_SIZE = 25;
const POLL_MS = 3000; // socket down: everything on screen, this often
const STATS_MS = 10000; // socket up: the counts again (the oldest pending job ages)
const REFRESH_GAP_MS = 400; // events: at most one refresh per this
const SPARK_MINUTES = 30; // full minutes drawn; queueStats.throughput also gives the current one
const TIMELINE_EVENTS = 50; // Job.events(last:): the newest this many transitions of the open job
const COUNTS = ["pending", "running", "completed", "failed", "cancelled"];
const ROW_FIELDS = "id type status priority attempt createdAt updatedAt";
const DETAIL_FIELDS =
  "id type payload priority status retryCount maxRetries attempt idempotencyKey workerId " +
  "claimedAt leaseExpiresAt runAt finishedAt result createdAt updatedAt " +
  `events(last: ${TIMELINE_EVENTS}) { kind status at }`;
const COUNT_FIELDS = COUNTS.join(" ");
const STATS_QUERY = `query Stats { queueStats { counts { ${COUNT_FIELDS} } oldestPendingSeconds
  byType { type counts { ${COUNT_FIELDS} } } throughput(minutes: ${SPARK_MINUTES + 1}) { at completed failed } } }`;
const JOBS_QUERY = `query Jobs($status: JobStatus, $type: String, $first: Int!, $after: String) {
  jobs(status: $status, type: $type, first: $first, after: $after) {
    totalCount pageInfo { hasNextPage endCursor } nodes { ${ROW_FIELDS} } } }`;
const EVENTS_SUBSCRIPTION = `subscription Events { jobEvents { kind at job { ${ROW_FIELDS} } } }`;

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

const isAdmin = () => state.me.roles.includes("ADMIN");
const mayCancel = () => isAdmin() || state.me.roles.includes("PRODUCER");

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
  Object.assign(state, { key, me, cursors: [null] });
  $("signin").hidden = true;
  $("app").hidden = false;
  $("forget").hidden = false;
  $("live").hidden = false;
  $("who").textContent = `${me.name} (${me.roles.join(", ")})`;
  setLive(false);
  openSocket();
  state.timers.push(setInterval(() => quietly(loadStats()), STATS_MS));
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
  Object.assign(state, { key: "", me: null });
  // Nothing the key could read stays on the page.
  document.querySelectorAll("[data-count]").forEach((cell) => (cell.textContent = "–"));
  $("by-type").tBodies[0].replaceChildren();
  $("jobs").tBodies[0].replaceChildren();
  drawSparkline([]);
  state.nextCursor = null;
  $("next").disabled = true; // until the next key's first page says whether more follow
  $("previous").disabled = true;
  $("status-filter").value = "";
  $("type-filter").replaceChildren(new Option("any", ""));
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
    first: PAGE_SIZE,
    after: state.cursors.at(-1),
  };
  const { jobs } = await call(JOBS_QUERY, variables);
  if (ticket !== state.jobsRequest) return; // a newer filter or page is on its way
  const rows = jobs.nodes.map(jobRow);
  if (!rows.length) {
    const empty = cell("No jobs match.");
    empty.colSpan = 7;
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
  link.setAttribute("aria-label", `Job ${job.id}, ${job.type}, ${job.status}`);
  row.append(
    cell(link),
    cell(job.type),
    cell(statusBadge(job.status)),
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

async function route(focus) {
  const id = hashJobId();
  if (!state.key) return;
  if (id === null) {
    closeDetail();
    return;
  }
  openDetail(id);
  if (focus) $("detail-title").focus();
  const view = state.detailView;
  await quietly(loadDetail(id));
  if (state.socket && view === state.detailView && state.detailId !== null) followDetail(id);
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
for (const id of ["status-filter", "type-filter"]) {
  $(id).addEventListener("change", () => changePage([null]));
}
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
