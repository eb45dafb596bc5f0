// Signing in with a key (the page shows what its roles may see and do, and starts reading)
// and signing out (nothing the key could read stays on the page).
import { request } from "../api.js";
import { forgetStoredKey, showMessage, storeKey } from "../keybox.js";
import { closeBulk, updateBulk } from "./bulk.js";
import { closeDetail } from "./job-detail.js";
import { loadJobs } from "./job-list.js";
import { closeLimits } from "./limits-form.js";
import { closeSocket, openSocket, setLive, stopPolling } from "./live.js";
import { drawSparkline, loadStats } from "./overview.js";
import { SIGN_IN_QUERY } from "./queries.js";
import { $, refreshTimes } from "./render.js";
import { route } from "./router.js";
import { closeScheduleDialog } from "./schedule-delete.js";
import { loadSchedules, showSchedulesMessage } from "./schedules.js";
import { isAdmin, mayCancel, mayReadSchedules, quietly, state } from "./session.js";
import { loadTypes, showTypesMessage } from "./types.js";

const STATS_MS = 10000; // socket up: the counts again (the oldest pending job ages)

export async function signIn(key) {
  showMessage($("key-message"), "");
  let me;
  try {
    me = (await request(key, SIGN_IN_QUERY)).me;
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

export function signOut(message, kind = "error") {
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
