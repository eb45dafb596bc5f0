"""Jittered exponential back-off, for a server that does not answer."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

BACKOFF_START = 0.2
BACKOFF_MAX = 15.0


@dataclass
class Backoff:
    delay: float = BACKOFF_START
    failures: int = field(default=0)

    def next(self) -> float:
        """The pause before the next try: half to all of a delay that doubles each time."""
        self.failures += 1
        pause = self.delay * random.uniform(0.5, 1.0)
        self.delay = min(BACKOFF_MAX, self.delay * 2)
        return pause

    def reset(self) -> None:
        self.delay, self.failures = BACKOFF_START, 0
