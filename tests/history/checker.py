"""The checker: a recorded history against the contract's rules, every invariant at every
moment it names. Timings never decide: only what could have happened, given the order of
ids and when each operation was sent and answered on the clock client and database share.

Invariants (each rule module says how it reads the history):
- rules_jobs: one-state, event-order, row-matches-events, event-times,
  answers-match-events, claimed-once, idempotency, internal-error, refused-valid-input;
- rules_limits: max-running, max-running-per-key, rate-limit, paused-claim;
- rules_dependencies: claimed-before-dependencies, dependency-times, running-after-drain,
  unclaimable-after-drain, cascade-missed, waiting-for-count;
- rules_state: counters, control-write-lost, subscription-order, subscription-terminal;
- rules_steering (API.md section 12): update-count, update-answer, update-refused,
  update-seen-by-claim, claimed-after-expiry, expired-early, expiry-error, snooze-count,
  snooze-outcome, snooze-run-at, steer-holder, progress-reset, progress-final (and
  rules_dependencies' expiry-missed).
"""

from __future__ import annotations

from history import rules_dependencies, rules_jobs, rules_limits, rules_state, rules_steering
from history.facts import Facts
from history.findings import Findings
from history.model import History

RULES = (
    *rules_jobs.RULES,
    *rules_limits.RULES,
    *rules_dependencies.RULES,
    *rules_state.RULES,
    *rules_steering.RULES,
)


def check(history: History) -> Findings:
    facts = Facts(history)
    found = Findings()
    for rule in RULES:
        rule(facts, found)
    return found
