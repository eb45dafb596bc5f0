"""Errors that send a client's input back whole: a 100 KB time zone came back in the answer.

Attacked, on a real server (SQLite and PostgreSQL): 100 KB of text as a schedule's time zone
and cron expression, a job type (enqueueJob, pauseType), a job id, a field name, an argument
name, a variable name, an enum value (literal and variable), an Int and a DateTime variable,
an input object's field name, a string where a name belongs, the name of an operation too
deep for QUEUELOG_MAX_DEPTH, an
`operationName` the document lacks (over HTTP and over the websocket); through the CLI, a key
name, a role, a database URL and a `--until`. In process: `echo` and `shorten_echoes`.

Proven: every error message quotes at most MAX_ECHOED (100) characters of the input, with
`...` after; each is still the contract's code (BAD_USER_INPUT, NOT_FOUND, or HTTP 400 for the
unknown operation over HTTP); the unknown operation over the websocket is BAD_USER_INPUT, not
an INTERNAL_SERVER_ERROR with a traceback; the CLI ends in one line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli.test_cli import assert_one_line_error, cli
from conftest import Server
from websockets.sync.client import connect

from queuelog.errors import MAX_ECHOED, echo, shorten_echoes

HUGE = 100_000
X = "x" * HUGE
SCHEDULE = "mutation($s: ScheduleInput!) { putSchedule(input: $s) { name } }"
# name -> (query, variables, expected code)
ATTACKS: dict[str, tuple[str, dict[str, Any], str]] = {
    "time zone": (
        SCHEDULE,
        {"s": {"name": "n", "type": "email", "cron": "* * * * *", "timezone": X}},
        "BAD_USER_INPUT",
    ),
    "cron expression": (
        SCHEDULE,
        {"s": {"name": "n", "type": "email", "cron": X[:200], "timezone": "UTC"}},
        "BAD_USER_INPUT",
    ),
    "cron field": (
        SCHEDULE,
        {"s": {"name": "n", "type": "email", "cron": "* * * * " + "X" * 150, "timezone": "UTC"}},
        "BAD_USER_INPUT",
    ),
    "enqueued type": (
        "mutation($t: String!) { enqueueJob(input: {type: $t}) { job { id } } }",
        {"t": X},
        "BAD_USER_INPUT",
    ),
    "paused type": ("mutation($t: String!) { pauseType(type: $t) { type } }", {"t": X}, "BAD_USER_INPUT"),
    "job id": ("query($id: ID!) { job(id: $id) { id } }", {"id": X}, "BAD_USER_INPUT"),
    "field name": ("{ " + X + " }", {}, "BAD_USER_INPUT"),
    "argument name": ("{ jobs(" + X + ": 1) { totalCount } }", {}, "BAD_USER_INPUT"),
    "variable name": ("query($" + X + ": Int) { me { name } }", {}, "BAD_USER_INPUT"),
    "enum literal": ("{ jobs(status: " + X.upper() + ") { totalCount } }", {}, "BAD_USER_INPUT"),
    "enum variable": ("query($s: JobStatus) { jobs(status: $s) { totalCount } }", {"s": X}, "BAD_USER_INPUT"),
    "int variable": ("query($f: Int!) { jobs(first: $f) { totalCount } }", {"f": X}, "BAD_USER_INPUT"),
    "datetime variable": (
        'mutation($t: DateTime) { enqueueJob(input: {type: "email", runAt: $t}) { job { id } } }',
        {"t": X},
        "BAD_USER_INPUT",
    ),
    "input field name": (SCHEDULE, {"s": {X: 1}}, "BAD_USER_INPUT"),
    "string token": ('{ me "' + X + '" }', {}, "BAD_USER_INPUT"),
}


def longest_run(text: str, char: str = "x") -> int:
    runs = re.findall(f"{re.escape(char)}+", text, flags=re.IGNORECASE)
    return max((len(run) for run in runs), default=0)


@pytest.mark.parametrize(("query", "variables", "code"), ATTACKS.values(), ids=ATTACKS.keys())
def test_an_error_quotes_at_most_100_characters_of_the_input(
    server: Server, query: str, variables: dict[str, Any], code: str
) -> None:
    response = server.gql(query, variables)
    assert response.errors and set(response.codes) == {code}, str(response.body)[:2000]
    for error in response.errors:
        message = error["message"]
        assert longest_run(message) <= MAX_ECHOED, message[:300]
        assert len(message) < 1000, message[:300]


def test_a_deep_query_names_its_operation_in_at_most_100_characters(server: Server) -> None:
    nested = "job(id: 1) { " * 12 + "id" + " }" * 12
    response = server.gql(f"query D{'x' * 500} {{ {nested} }}")
    assert response.codes and set(response.codes) == {"BAD_USER_INPUT"}, str(response.body)[:2000]
    (message,) = [e["message"] for e in response.errors if "levels deep" in e["message"]]
    assert message.startswith(f"'D{'x' * (MAX_ECHOED - 1)}'... is "), message


def test_an_unknown_operation_name_is_cut_over_http_and_refused_over_the_websocket(server: Server) -> None:
    name = "Z" * HUGE
    response = httpx.post(
        server.graphql_url,
        json={"query": "query Q { me { name } }", "operationName": name},
        headers={"Authorization": f"Bearer {server.admin_key}"},
        timeout=30,
    )
    assert response.status_code == 400 and longest_run(response.text, "Z") == MAX_ECHOED, response.text[:300]
    before = server.log()
    with connect(server.ws_url, subprotocols=["graphql-transport-ws"], open_timeout=10, max_size=None) as ws:
        ws.send(
            json.dumps(
                {"type": "connection_init", "payload": {"authorization": f"Bearer {server.admin_key}"}}
            )
        )
        assert json.loads(ws.recv(timeout=10))["type"] == "connection_ack"
        query = "subscription Q { jobEvents { kind } }"
        ws.send(
            json.dumps({"id": "1", "type": "subscribe", "payload": {"query": query, "operationName": name}})
        )
        reply = json.loads(ws.recv(timeout=10))
    assert reply["type"] in ("error", "next"), reply
    errors = reply["payload"] if reply["type"] == "error" else reply["payload"]["errors"]
    assert [e["extensions"]["code"] for e in errors] == ["BAD_USER_INPUT"], reply
    assert longest_run(errors[0]["message"], "Z") == MAX_ECHOED, errors
    assert "Traceback" not in server.log()[len(before) :]


def test_the_cli_quotes_at_most_100_characters(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    long = "x" * 50_000
    calls: dict[str, tuple[str, ...]] = {
        "key name": ("keys", "revoke", long, "--database-url", url),
        "role": ("keys", "create", "--name", "n", "--role", long, "--database-url", url),
        "database url": ("keys", "list", "--database-url", "mysql://" + long),
        "until": ("types", "pause", "email", "--until", long, "--database-url", url),
    }
    for name, args in calls.items():
        line = assert_one_line_error(cli(*args, cwd=tmp_path))
        assert longest_run(line) <= MAX_ECHOED and len(line) < 1000, (name, line[:300])


@pytest.mark.parametrize(
    ("value", "quoted"),
    [
        ("Europe/Paris", "'Europe/Paris'"),
        ("x" * MAX_ECHOED, repr("x" * MAX_ECHOED)),
        ("x" * (MAX_ECHOED + 1), repr("x" * MAX_ECHOED) + "..."),
        ("it's", '"it\'s"'),
        (12345, "'12345'"),
    ],
)
def test_echo(value: object, quoted: str) -> None:
    assert echo(value) == quoted


def test_shorten_echoes_cuts_only_long_quoted_spans() -> None:
    short = "Cannot query field 'nope' on type 'Query'. Did you mean \"me\"?"
    assert shorten_echoes(short) == short
    long = "Cannot query field '" + "a" * 500 + "' on type 'Query'."
    assert shorten_echoes(long) == "Cannot query field '" + "a" * MAX_ECHOED + "'... on type 'Query'."
    quoted = 'Value cannot represent a DateTime: "' + "9" * 300 + '".'
    assert shorten_echoes(quoted) == 'Value cannot represent a DateTime: "' + "9" * MAX_ECHOED + '"....'
    escaped = "value: " + repr("it's \"" * 60)  # quotes inside, escaped as repr escapes them
    assert len(shorten_echoes(escaped)) < 150, shorten_echoes(escaped)
