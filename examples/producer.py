"""Enqueue a few jobs and watch them finish: QUEUELOG_API_KEY=KEY python producer.py URL

The key is read from QUEUELOG_API_KEY, which other users of the machine cannot see;
`python producer.py URL KEY` works too, but shows the key to anyone running `ps`.
"""

import sys
import time

from queuelog.client import Client

url = sys.argv[1]
key = sys.argv[2] if len(sys.argv) > 2 else None  # None: Client takes $QUEUELOG_API_KEY
with Client(url, key) as queue:
    jobs = [queue.enqueue("email", {"to": f"user{i}@example.com"}) for i in range(3)]
    jobs.append(queue.enqueue("report", {"flaky": True}, idempotency_key="daily-report"))
    while any(queue.get(j.id).status in ("PENDING", "RUNNING") for j in jobs):
        time.sleep(0.5)
    for job in jobs:
        done = queue.get(job.id)
        print(done.id, done.type, done.status, done.result)
