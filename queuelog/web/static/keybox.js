// The key box shared by GraphiQL and the dashboard. A key lives in this tab's sessionStorage
// only: never a cookie (that would let other sites' forms use it), never a URL.
const STORAGE_NAME = "queuelog.key";
// GraphiQL names its entries `graphiql:<name>`. They live in sessionStorage (see
// graphiql-page.js); localStorage is swept too, for what older versions of the page left there.
const GRAPHIQL_PREFIX = "graphiql:";

export function storedKey() {
  try {
    return sessionStorage.getItem(STORAGE_NAME) || "";
  } catch {
    return "";
  }
}

export function storeKey(key) {
  sessionStorage.setItem(STORAGE_NAME, key);
}

// Forgetting the key also forgets what GraphiQL stored while it was in use (tabs, history,
// variables, responses), on whichever page: both pages share this origin's storage.
export function forgetStoredKey() {
  sessionStorage.removeItem(STORAGE_NAME);
  forgetGraphiqlState();
}

export function graphiqlKeys(storage) {
  return Object.keys(storage).filter((name) => name.startsWith(GRAPHIQL_PREFIX));
}

function forgetGraphiqlState() {
  for (const area of ["sessionStorage", "localStorage"]) {
    try {
      const storage = window[area];
      graphiqlKeys(storage).forEach((name) => storage.removeItem(name));
    } catch {
      // storage disabled: nothing was kept there
    }
  }
}

// Binds a form holding <input name="key">: Enter or the button calls onKey(key); the field
// is emptied at once, so that the key is not left on screen or in the form.
export function bindKeyForm(form, onKey) {
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const input = form.elements.namedItem("key");
    const key = input.value.trim();
    input.value = "";
    if (key) onKey(key);
    else input.focus();
  });
}

// A message next to the key box; `kind` is "error" or "info".
export function showMessage(element, text, kind = "info") {
  element.textContent = text;
  element.dataset.kind = kind;
  element.hidden = !text;
}
