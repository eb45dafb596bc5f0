"""EXPLAIN of a statement as a queuelog server prepares it on PostgreSQL: its `%(name)s`
parameters numbered in order, PREPAREd, then EXECUTEd with the values as literals (so that
plan_cache_mode decides between the generic and a custom plan, as it does for the server)."""

from __future__ import annotations

import re
from typing import Any


def explain_prepared(connection: Any, sql: str, params: dict[str, Any], explain: str = "EXPLAIN") -> str:
    """PREPARE `sql` on `connection` (after DEALLOCATE ALL) and return `explain` EXECUTE of
    it with `params` as literals: the statement to run for its plan."""
    from psycopg import sql as pgsql

    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    numbered = re.sub(r"%\((\w+)\)s", number, sql).replace("%%", "%")
    connection.execute("DEALLOCATE ALL")
    connection.execute(f"PREPARE shown AS {numbered}")
    values = ", ".join(pgsql.Literal(params[name]).as_string(connection) for name in names)
    return f"{explain} EXECUTE shown({values})"
