"""Check a saved history again: `cd tests && python -m history PATH.json`."""

from __future__ import annotations

import sys
from pathlib import Path

from history.checker import check
from history.model import History
from history.report import render, summary


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m history HISTORY.json", file=sys.stderr)
        return 2
    path = Path(argv[0])
    history = History.load(path)
    found = check(history)
    print(
        render(history, found, path)
        if not found.ok
        else f"history seed {history.seed}: every invariant holds"
    )
    print(summary(found))
    return 0 if found.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
