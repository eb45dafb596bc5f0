"""The one table `python -m bench` prints, and its JSON."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Row:
    """One line of the table: a measure of queuelog beside its baseline from the same run.

    `ratio` is always queuelog / baseline of the quantity on the line (a rate: higher is
    better for queuelog; a latency, CPU or memory: lower is better). `met` is None where
    the line has no target.
    """

    label: str
    queuelog: str = ""
    baseline: str = ""
    ratio: str = ""
    target: str = ""
    met: bool | None = None


@dataclass
class Figure:
    name: str  # the --only name
    number: int
    title: str
    baseline: str  # what the baseline column holds, one line
    rows: list[Row] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)  # every raw number, for the JSON
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None

    def add(
        self,
        label: str,
        queuelog: str = "",
        baseline: str = "",
        ratio: str = "",
        target: str = "",
        met: bool | None = None,
    ) -> Row:
        row = Row(label, queuelog, baseline, ratio, target, met)
        self.rows.append(row)
        return row

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "number": self.number,
            "title": self.title,
            "baseline": self.baseline,
            "rows": [asdict(r) for r in self.rows],
            "targets_met": [r.met for r in self.rows if r.met is not None],
            "data": self.data,
            "notes": self.notes,
            "seconds": round(self.seconds, 1),
            "error": self.error,
        }


# --- formatting numbers ----------------------------------------------------------------------


def ok(value: float | None) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def num(value: float | None, digits: int = 0, unit: str = "") -> str:
    if not ok(value):
        return "-"
    assert value is not None
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}" if unit else text


def ms(value_s: float | None) -> str:
    """Seconds shown as milliseconds with sensible precision."""
    if not ok(value_s):
        return "-"
    assert value_s is not None
    v = value_s * 1000
    digits = 3 if v < 1 else 2 if v < 10 else 1 if v < 1000 else 0
    return f"{v:,.{digits}f}"


def ratio(a: float | None, b: float | None) -> float | None:
    if not ok(a) or not ok(b) or not b:
        return None
    assert a is not None and b is not None
    return a / b


def rx(value: float | None) -> str:
    if not ok(value):
        return "-"
    assert value is not None
    return f"{value:.2f}x" if value < 100 else f"{value:,.0f}x"


def mb(value_bytes: float | None) -> str:
    return num(value_bytes / 2**20, 1, "MB") if ok(value_bytes) and value_bytes is not None else "-"


# --- the table -------------------------------------------------------------------------------

WIDTHS = (50, 22, 22, 14, 16, 3)


def _line(cells: tuple[str, ...]) -> str:
    label, *rest = cells
    out = f"{label:<{WIDTHS[0]}}"
    for cell, width in zip(rest, WIDTHS[1:], strict=True):
        out += f" {cell:>{width}}" if width != WIDTHS[4] else f"  {cell:<{width}}"
    return out.rstrip()


def format_table(heading: str, figures: list[Figure]) -> str:
    header = _line(("figure", "queuelog", "baseline (same run)", "ratio", "target", "met"))
    lines = [heading, "=" * len(header), header, "-" * len(header)]
    for fig in figures:
        title = f"{fig.number} {fig.title}  [{fig.seconds:.0f} s]"
        lines.append(title)
        lines.append(f"  baseline: {fig.baseline}")
        if fig.error:
            lines.append(f"  FAILED: {fig.error}")
        for row in fig.rows:
            met = "" if row.met is None else ("yes" if row.met else "NO")
            lines.append(_line(("  " + row.label, row.queuelog, row.baseline, row.ratio, row.target, met)))
        for note in fig.notes:
            lines.append(f"  note: {note}")
        lines.append("")
    lines.append(
        "ratio = queuelog / baseline of the line's quantity (rates: higher is better; latency, CPU, memory:\n"
        "lower is better). Every baseline ran in this same run, on this machine, at about the same time."
    )
    return "\n".join(lines)
