"""Print the GraphQL schema the server serves, as SDL.

    python -m queuelog.graphql_api.export                      # to stdout
    python -m queuelog.graphql_api.export docs/schema.graphql  # to a file

The schema is built by `build_schema`, as the server builds it (settings change its limits,
never its types), and printed by Strawberry. docs/schema.graphql is this command's output;
tests/documentation/test_reference_docs.py fails when the two differ.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from queuelog.graphql_api import build_schema
from queuelog.settings import Settings

REGENERATE = "python -m queuelog.graphql_api.export docs/schema.graphql"
HEADER = (
    "# The GraphQL schema queuelog serves, printed by Strawberry. Do not edit: regenerate it with\n"
    f"#   {REGENERATE}\n"
    "# What it means: docs/api.md.\n\n"
)


def served_sdl() -> str:
    """The served schema's SDL, with the header that says where it comes from."""
    return HEADER + build_schema(Settings()).as_str() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) > 1 or (args and args[0].startswith("-")):
        print("usage: python -m queuelog.graphql_api.export [PATH]", file=sys.stderr)
        return 2
    text = served_sdl()
    if not args:
        sys.stdout.write(text)
        return 0
    try:
        Path(args[0]).write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"queuelog.graphql_api.export: cannot write {args[0]}: {exc.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
