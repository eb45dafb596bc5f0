"""When a failed attempt is retried, and after how long (API.md section 3, "Fail").

A rule of the queue, handed to storage, which applies it to the row it has just read.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from queuelog.model import Job


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential back-off with jitter: d = min(max, base * 2^retry_count), delay in [0.75d, d]."""

    base_seconds: float
    max_seconds: float

    def delay(self, retry_count: int, rng: random.Random = random._inst) -> float:
        exponent = min(retry_count, 62)
        cap = min(self.max_seconds, self.base_seconds * (2**exponent))
        return cap * rng.uniform(0.75, 1.0)

    def retry_delay(self, job: Job, retryable: bool, retry_in: float | None) -> float | None:
        """Seconds until the job runs again, or None when this failure is final."""
        if not retryable or job.retry_count >= job.max_retries:
            return None
        return retry_in if retry_in is not None else self.delay(job.retry_count)
