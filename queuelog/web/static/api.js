// The public GraphQL API over HTTP and over the websocket (graphql-transport-ws), with a key.

export class ApiError extends Error {
  constructor(message, code, path = []) {
    super(message);
    this.code = code;
    this.path = path; // the field the error is about, if it is about one: ["job"]
  }

  // "CONFLICT: job 3 is not PENDING": the contract's code, then the server's own words.
  get plain() {
    return this.code ? `${this.code}: ${this.message}` : this.message;
  }
}

// POST one operation; answers `data`, or throws ApiError with the first error's code.
export async function request(key, query, variables = {}) {
  let response;
  try {
    response = await fetch("/graphql", {
      method: "POST",
      credentials: "omit",
      cache: "no-store",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${key}` },
      body: JSON.stringify({ query, variables }),
    });
  } catch {
    throw new ApiError("the server cannot be reached", "NETWORK");
  }
  let body;
  try {
    body = await response.json();
  } catch {
    throw new ApiError(`the server answered HTTP ${response.status} without a GraphQL body`, "HTTP");
  }
  const errors = body.errors || [];
  if (errors.length) {
    const code = (errors[0].extensions && errors[0].extensions.code) || "";
    throw new ApiError(errors[0].message, response.status === 401 ? "UNAUTHENTICATED" : code, errors[0].path);
  }
  return body.data;
}

export function websocketUrl() {
  const url = new URL("/graphql", window.location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  return url.toString();
}

// The server closes a socket with 4403 when its key is refused or revoked.
export const KEY_REFUSED = 4403;

// A graphql-ws client that sends the key in connection_init and keeps reconnecting (with
// back-off) unless the key is refused. `on` takes graphql-ws events (connected, closed, ...).
export function socketClient(key, on = {}, lazy = false) {
  const client = window.graphqlWs.createClient({
    url: websocketUrl(),
    connectionParams: { authorization: `Bearer ${key}` },
    lazy,
    keepAlive: 10000,
    retryAttempts: Infinity,
    retryWait: (retries) =>
      new Promise((resolve) => setTimeout(resolve, Math.min(500 * 2 ** retries, 8000) * (0.75 + Math.random() / 4))),
    shouldRetry: (event) => !(event && event.code === KEY_REFUSED),
    on,
  });
  return closingQuietly(client);
}

// Disposing of a graphql-ws (5.16) client while its socket connects (the key forgotten at once)
// leaves uncaught errors: dispose() rejects if that connection fails, and if it succeeds, the
// client's subscriptions try to send on the socket dispose() has just closed. So dispose()
// ends the subscriptions first and swallows its own failure: the socket is gone either way.
function closingQuietly(client) {
  const { subscribe, dispose } = client;
  const open = new Set();
  client.subscribe = (payload, sink) => {
    const unsubscribe = subscribe(payload, sink);
    const end = () => {
      open.delete(end);
      unsubscribe();
    };
    open.add(end);
    return end;
  };
  client.dispose = () => {
    open.forEach((end) => end());
    return Promise.resolve(dispose()).catch(() => {});
  };
  return client;
}
