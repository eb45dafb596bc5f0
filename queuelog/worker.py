"""The worker (docs/python.md, "Worker"), where the docs import it from; it lives in
queuelog/sdk/worker/. Handlers raise Retry, Discard or Snooze, and stop on JobCancelled.

    from queuelog.worker import Worker, Retry, Discard, Snooze

    def send_email(job):                # or: async def send_email(job)
        if not job.payload.get("to"):
            raise Discard("no recipient")  # fails for good
        return {"sent": True}           # becomes the job's result

    Worker("http://127.0.0.1:8000", handlers={"email": send_email}).run_forever()
"""

from queuelog.sdk.worker.job import Discard, Handler, JobCancelled, JobContext, Retry, Snooze
from queuelog.sdk.worker.lifecycle import KeyRefused, Worker

__all__ = ["Discard", "Handler", "JobCancelled", "JobContext", "KeyRefused", "Retry", "Snooze", "Worker"]
