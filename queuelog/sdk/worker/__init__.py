"""The worker, in River's units (riverqueue/river: producer.go, internal/jobexecutor,
internal/jobcompleter), each a module here, on one event loop:

- lifecycle.Worker starts the others, and on stop drains and returns;
- producer: the claim loop (claims for the free slots, takes over a lost claim's jobs);
- executor: runs each job's handler in a slot, and stops it past its timeout;
- completer: reports each job's end (completions in batches, failures one by one) and lets
  the job go once the report is in;
- heartbeat: extends the leases of the jobs held;
- cancels: hears of cancel requests for the jobs held (a websocket subscription, and the
  heartbeats' answers) and stops their handlers;
- progress: sends what handlers report of their progress, at most 4 times a second a job;
- held: the jobs held (claimed, not yet reported) and the slots, which they all share;
- job: what a handler gets and raises (Retry, Discard, Snooze, JobCancelled); outcomes: how
  its end becomes a report; job_log: a line per finished job.

Two rules hold throughout. Every report carries the attempt its claim returned, so a worker
whose lease expired cannot overwrite the job's next holder. A job stays held, and
heartbeated, until its report is in or given up.
"""
