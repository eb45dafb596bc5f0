"""How much cron work a piece of code does, counted rather than timed: `CronSteps.install`
replaces the cronsim walker queuelog.cron uses by one that counts every wall-clock
candidate it yields, forwards or backwards. A walk that goes tick by tick over a long span
takes a step per tick (a month of an every-second schedule: 2.6 million); one that goes
field by field takes a few per answer.

Past `limit` steps the walker raises StepsExceeded, so that code which walks ticks fails
at once rather than after minutes.
"""

from __future__ import annotations

from datetime import datetime

import pytest
from cronsim import CronSim

from queuelog import cron


class StepsExceeded(AssertionError):
    pass


class CronSteps:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> CronSteps:
        steps = self

        class Counted(CronSim):
            def __next__(self) -> datetime:
                steps.count += 1
                if steps.count > steps.limit:
                    raise StepsExceeded(f"the cron walk took more than {steps.limit} steps")
                return super().__next__()

        monkeypatch.setattr(cron, "CronSim", Counted)
        return self

    def __repr__(self) -> str:
        return f"CronSteps(count={self.count}, limit={self.limit})"
