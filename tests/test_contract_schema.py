"""The served schema is a compatible superset of the shared contract."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from graphql import build_schema, find_breaking_changes

from queuelog.schema import schema

CONTRACT_DIR = Path(__file__).resolve().parents[1].parent / "shared"
CHECKER = CONTRACT_DIR / "tools" / "check_contract.py"
CONTRACT = CONTRACT_DIR / "contract" / "schema.graphql"


def test_schema_has_no_breaking_change_against_contract() -> None:
    if not CONTRACT.exists():
        pytest.skip(f"contract not found at {CONTRACT}")
    changes = find_breaking_changes(build_schema(CONTRACT.read_text()), build_schema(schema.as_str()))
    assert [c.description for c in changes] == []


def test_check_contract_tool_passes_against_running_server(server) -> None:
    if not CHECKER.exists():
        pytest.skip(f"check_contract.py not found at {CHECKER}")
    result = subprocess.run(
        [sys.executable, str(CHECKER), "--url", server.graphql_url, "--key", server.admin_key],
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
