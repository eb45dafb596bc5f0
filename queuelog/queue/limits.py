"""The queue's input limits and how often waiting claims look again (API.md section 3)."""

MAX_RETRIES_LIMIT = 25
MAX_ENQUEUE_BATCH = 1000
MAX_CLAIM_BATCH = 100
MAX_COMPLETE_BATCH = 100
MAX_PAGE = 100
MAX_HISTORY = 100
MAX_THROUGHPUT_MINUTES = 24 * 60  # as long as job_minutes keeps them (counters.MINUTES_KEPT)
MAX_WAIT_SECONDS = 30
MAX_LEASE_SECONDS = 86400
MAX_RETRY_IN_SECONDS = 86400
MAX_IDEMPOTENCY_KEY = 255
MAX_CONCURRENCY_KEY = 255
MAX_CONTROL_LIMIT = 100_000
MAX_BULK = 10_000
MAX_RATE_PERIOD = 86400
MAX_TIMEOUT_SECONDS = 86400
MAX_DEPENDENCIES = 100
MAX_SNOOZE_SECONDS = 86400
MAX_PROGRESS_MESSAGE = 200
# A waiting claim re-checks the database at least this often, so that work enqueued by
# another server process is found even though only this process's enqueues signal it.
CROSS_PROCESS_RECHECK_SECONDS = 0.5
