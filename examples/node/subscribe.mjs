// Follow queuelog's job events from Node: one JSON line per event on stdout.
//
//   npm ci
//   QUEUELOG_API_KEY=<key> node subscribe.mjs [URL] [COUNT]
//
// URL is the server (default http://127.0.0.1:8000); COUNT stops after that many events
// (default: until Ctrl-C). Any key may subscribe and sees the jobs its role may see.
// docs/http.md explains it; tests/documentation/test_reference_docs.py runs it against a real server.
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

const base = process.argv[2] ?? 'http://127.0.0.1:8000';
const count = process.argv[3] === undefined ? Infinity : Number(process.argv[3]);
const key = process.env.QUEUELOG_API_KEY;
if (!key) {
  console.error('set QUEUELOG_API_KEY to an API key');
  process.exit(2);
}

// http://host:8000 -> ws://host:8000/graphql, https -> wss
const url = base.replace(/^http/, 'ws').replace(/\/(graphql)?\/?$/, '') + '/graphql';

const client = createClient({
  url,
  webSocketImpl: WebSocket, // Node only: a browser has WebSocket built in
  connectionParams: { authorization: `Bearer ${key}` },
  retryAttempts: 0, // a refused key closes with 4403: say so rather than retry
  on: { connected: () => console.error(`connected to ${url}`) },
});

const query = `subscription {
  jobEvents { kind at job { id type status } }
}`;

let seen = 0;
const unsubscribe = client.subscribe(
  { query },
  {
    next: ({ data, errors }) => {
      if (errors) {
        console.error(JSON.stringify(errors));
        return;
      }
      console.log(JSON.stringify(data.jobEvents));
      seen += 1;
      if (seen >= count) {
        unsubscribe();
        client.dispose();
      }
    },
    error: (error) => {
      // The socket closed (a CloseEvent: 4403 is a refused or revoked key), or the server
      // ended the subscription with GraphQL errors (an array, each with extensions.code).
      const why = Array.isArray(error)
        ? error.map((e) => `${e.extensions?.code}: ${e.message}`).join('; ')
        : `closed ${error.code} ${error.reason}`;
      console.error(`subscription ended: ${why}`);
      process.exitCode = 1;
      client.dispose();
    },
    complete: () => client.dispose(),
  },
);
