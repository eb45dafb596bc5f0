"""What the checker found: each invariant's checks counted, each violation kept."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Violation:
    invariant: str
    message: str
    jobs: tuple[int, ...] = ()


@dataclass
class Findings:
    violations: list[Violation] = field(default_factory=list)
    checks: Counter[str] = field(default_factory=Counter)

    def check(self, invariant: str, holds: bool) -> bool:
        """Count one check of `invariant`; whether it held (then `fail` says how it did not):
        `if not out.check(NAME, ok): out.fail(NAME, message, jobs)`."""
        self.checks[invariant] += 1
        return holds

    def fail(self, invariant: str, message: str, jobs: Iterable[int] = ()) -> None:
        self.violations.append(Violation(invariant, message, tuple(sorted(set(jobs)))))

    @property
    def ok(self) -> bool:
        return not self.violations

    def failed(self) -> Counter[str]:
        return Counter(v.invariant for v in self.violations)
