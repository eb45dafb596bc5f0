"""QUEUELOG_COMPILED=false (`serve --no-compiled`) sends every POST through Strawberry.

The two paths answer alike (tests/api/test_compiled_equivalence.py) except for the documented
byte-level differences; KNOWN-1 there, non-ASCII text written raw by the compiled path and
\\u-escaped by Strawberry's, is what shows here which path answered, on a real server.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from conftest import Server

from queuelog.settings import Settings

ENQUEUE = "mutation($i: EnqueueJobInput!) { enqueueJob(input: $i) { job { id payload } } }"


def enqueue_raw(server: Server) -> bytes:
    key = server.make_key("switch-producer", "producer")
    answer = httpx.post(
        server.graphql_url,
        json={"query": ENQUEUE, "variables": {"i": {"type": "email", "payload": {"to": "zoé"}}}},
        headers={"Authorization": f"Bearer {key}"},
        timeout=10,
    )
    assert answer.status_code == 200
    assert answer.json()["data"]["enqueueJob"]["job"]["payload"] == {"to": "zoé"}
    return answer.content


def test_the_compiled_path_answers_by_default(start_server: Callable[..., Server]) -> None:
    raw = enqueue_raw(start_server())
    assert "zoé".encode() in raw and b"\\u00e9" not in raw


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_compiled_false_sends_every_request_through_strawberry(
    start_server: Callable[..., Server], how: str
) -> None:
    if how == "flag":
        server = start_server(compiled=False)
    else:
        server = start_server(env={"QUEUELOG_COMPILED": "false"})
    raw = enqueue_raw(server)
    assert b"zo\\u00e9" in raw and "zoé".encode() not in raw


def test_the_setting_reads_like_every_other_boolean() -> None:
    assert Settings.from_env({}).compiled is True
    assert Settings.from_env({"QUEUELOG_COMPILED": "false"}).compiled is False
    assert Settings.from_env({"QUEUELOG_COMPILED": "off"}, compiled=True).compiled is True
