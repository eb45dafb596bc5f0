"""Job handlers for `QUEUELOG_API_KEY=KEY queuelog worker --url URL --handlers handlers:HANDLERS`
(run from this folder; the WORKER key in the environment stays out of `ps`)."""

import asyncio

from queuelog.worker import Discard, Retry


async def send_email(job):
    if "to" not in job.payload:
        raise Discard("no recipient")
    await asyncio.sleep(0.01)  # talk to the mail server here
    return {"sent_to": job.payload["to"]}


def make_report(job):  # sync handlers run in threads
    if job.attempt < 2 and job.payload.get("flaky"):
        raise Retry(after=1)
    return {"rows": 42}


HANDLERS = {"email": send_email, "report": make_report}
