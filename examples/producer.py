"""Enqueue a few jobs and watch them finish: python producer.py URL KEY"""

import sys
import time

from queuelog.client import Client

url, key = sys.argv[1], sys.argv[2]
with Client(url, key) as queue:
    jobs = [queue.enqueue("email", {"to": f"user{i}@example.com"}) for i in range(3)]
    jobs.append(queue.enqueue("report", {"flaky": True}, idempotency_key="daily-report"))
    while any(queue.get(j.id).status in ("PENDING", "RUNNING") for j in jobs):
        time.sleep(0.5)
    for job in jobs:
        done = queue.get(job.id)
        print(done.id, done.type, done.status, done.result)
