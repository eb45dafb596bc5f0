"""The Python SDK: the clients and the worker that `queuelog.client` and `queuelog.worker`
export (docs/python.md). Importing this package imports nothing else; each module is what
its name says:

- types.py: what the calls return and take (Job, TypeControl, Schedule, ...);
- wire.py: JSON bodies, and an answer turned into its data or its error;
- transport.py, plain_http.py: the `Transport` interface, over httpx and over aiohttp;
- websocket.py: subscriptions over the server's websocket (graphql-transport-ws);
- session.py: one server and one key; producer_calls.py, steering_calls.py,
  watch_calls.py, flow_control_calls.py, schedule_calls.py and worker_calls.py extend it
  with a group of calls each, and async_client.py joins them into AsyncClient;
  sync_client.py makes Client of it;
- inputs.py: arguments turned into the API's inputs, checked before sending;
- worker/: the worker (its own docstring).
"""
