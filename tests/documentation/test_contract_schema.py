"""The served schema is a compatible superset of the shared contract."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from graphql import (
    build_client_schema,
    build_schema,
    find_breaking_changes,
    get_introspection_query,
    print_schema,
)

from queuelog.graphql_api import schema

CONTRACT_DIR = Path(__file__).resolve().parents[3] / "shared"
CHECKER = CONTRACT_DIR / "tools" / "check_contract.py"
CONTRACT = CONTRACT_DIR / "contract" / "schema.graphql"


def test_schema_has_no_breaking_change_against_contract() -> None:
    if not CONTRACT.exists():
        pytest.skip(f"contract not found at {CONTRACT}")
    changes = find_breaking_changes(build_schema(CONTRACT.read_text()), build_schema(schema.as_str()))
    assert [c.description for c in changes] == []


def checker_python() -> str | None:
    """A Python whose graphql-core the shared checker runs on: it edits parsed documents in
    place, which graphql-core 3.3 (strawberry's, in this venv) no longer allows."""
    for python in (sys.executable, shutil.which("python3")):
        if python is None:
            continue
        probe = subprocess.run(
            [python, "-c", "import graphql, sys; sys.exit(graphql.version_info >= (3, 3))"],
            capture_output=True,
        )
        if probe.returncode == 0:
            return python
    return None


def test_check_contract_tool_passes_against_running_server(server, tmp_path: Path) -> None:
    if not CHECKER.exists():
        pytest.skip(f"check_contract.py not found at {CHECKER}")
    python = checker_python()
    if python is None:
        pytest.skip("no Python with graphql-core < 3.3 for check_contract.py (it edits frozen AST nodes)")
    # The served schema as the server answers introspection, handed to the checker as SDL.
    answer = server.gql(get_introspection_query()).ok()
    served = tmp_path / "served.graphql"
    served.write_text(print_schema(build_client_schema(answer)))
    result = subprocess.run(
        [python, str(CHECKER), str(served)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 breaking changes" in result.stdout


def test_introspection_needs_a_key(server) -> None:
    response = server.gql("{ __schema { queryType { name } } }", key="")
    assert response.status == 401
    assert response.codes == ["UNAUTHENTICATED"]
