// GraphiQL with the key from the key box: HTTP requests carry `Authorization: Bearer <key>`,
// subscriptions send it in the websocket's connection_init payload.
import { request, socketClient } from "./api.js";
import { bindKeyForm, forgetStoredKey, graphiqlKeys, showMessage, storeKey, storedKey } from "./keybox.js";

const DEFAULT_QUERY = `# queuelog's GraphiQL. Enter an API key above; it stays in this tab only.
# Run with Ctrl-Enter. Subscriptions (jobEvents, jobUpdated) use the same key.

query Overview {
  me { name roles }
  queueStats { counts { pending running completed failed cancelled } oldestPendingSeconds }
  jobs(first: 5) { nodes { id type status createdAt } }
}
`;

const form = document.getElementById("key-form");
const message = document.getElementById("key-message");
const forget = document.getElementById("forget");
const root = window.ReactDOM.createRoot(document.getElementById("graphiql"));
let socket = null;
let generation = 0;

function keylessFetcher() {
  return Promise.resolve({
    errors: [{ message: "Enter an API key above: every operation, introspection included, needs one." }],
  });
}

// GraphiQL's storage (tabs, history, variables, responses) in this tab's sessionStorage rather
// than its default, localStorage: it ends with the tab, and "Forget key" clears it (keybox.js).
// Each GraphiQL gets its own; once a newer one is rendered, the old one's late writes (it saves
// its tabs half a second after a change) are dropped, so that a forgotten editor cannot return.
function tabStorage(owner) {
  const current = () => owner === generation;
  return {
    getItem: (name) => sessionStorage.getItem(name),
    setItem: (name, value) => current() && sessionStorage.setItem(name, value),
    removeItem: (name) => current() && sessionStorage.removeItem(name),
    get length() {
      return graphiqlKeys(sessionStorage).length;
    },
    clear: () => current() && graphiqlKeys(sessionStorage).forEach((name) => sessionStorage.removeItem(name)),
  };
}

function render(key) {
  if (socket) socket.dispose();
  socket = key ? socketClient(key, {}, true) : null;
  const fetcher = key
    ? window.GraphiQL.createFetcher({
        url: new URL("/graphql", window.location.href).toString(),
        headers: { Authorization: `Bearer ${key}` },
        wsClient: socket,
      })
    : keylessFetcher;
  generation += 1;
  root.render(
    window.React.createElement(window.GraphiQL, {
      key: generation, // a new key: a new GraphiQL, which loads the schema with it
      fetcher,
      storage: tabStorage(generation),
      defaultQuery: DEFAULT_QUERY,
      shouldPersistHeaders: false, // headers a person types (tokens, often) are never stored
      isHeadersEditorEnabled: true,
      defaultEditorToolsVisibility: false,
    }),
  );
  forget.hidden = !key;
}

async function useKey(key) {
  showMessage(message, "Checking the key…");
  try {
    const data = await request(key, "{ me { name roles } }");
    storeKey(key);
    showMessage(message, `Using the key of ${data.me.name} (${data.me.roles.join(", ")})`);
    render(key);
  } catch (error) {
    if (error.code !== "UNAUTHENTICATED") {
      storeKey(key); // kept: the server may be back in a moment
      render(key);
      showMessage(message, `The key could not be checked: ${error.plain}`, "error");
      return;
    }
    forgetStoredKey();
    render("");
    showMessage(message, `This key cannot be used: ${error.plain}`, "error");
  }
}

// CodeMirror's text areas carry no label: name them for screen readers (and axe).
function labelEditors() {
  for (const textarea of document.querySelectorAll("#graphiql .CodeMirror textarea:not([aria-label])")) {
    const tools = textarea.closest(".graphiql-editor-tool");
    let label = "GraphQL operation";
    if (textarea.closest(".graphiql-response")) label = "Response";
    else if (tools) {
      const editors = [...tools.querySelectorAll(".graphiql-editor")];
      label = editors.indexOf(textarea.closest(".graphiql-editor")) === 0 ? "Variables (JSON)" : "Headers (JSON)";
    }
    textarea.setAttribute("aria-label", label);
  }
}
new MutationObserver(labelEditors).observe(document.getElementById("graphiql"), { childList: true, subtree: true });

bindKeyForm(form, useKey);
forget.addEventListener("click", () => {
  forgetStoredKey(); // and GraphiQL's stored state with it
  render(""); // a fresh GraphiQL, with the default operation and an empty history
  showMessage(message, "Key forgotten. Enter a key to go on.");
  form.elements.namedItem("key").focus();
});

const key = storedKey();
if (key) {
  useKey(key);
} else {
  render("");
  showMessage(message, "Enter an API key to load the schema and run operations.");
}
