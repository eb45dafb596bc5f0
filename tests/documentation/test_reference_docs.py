"""The reference that ships with the code stays true to it.

- docs/schema.graphql is exactly what `python -m queuelog.graphql_api.export` prints, and what a
  running server answers to introspection;
- docs/api.md has a section for every root field naming each of its arguments, and names
  every error code and every QUEUELOG_ setting the code defines;
- docs/python.md names every public method of the SDK's clients, every exception a user of
  it may catch, and every flag of `queuelog worker`;
- examples/node/subscribe.mjs, installed with npm from its lockfile, prints a job's event from
  a real server, and reports a refused key; docs/http.md gives the commands run here;
- the websocket takes the key under `Authorization` (any case) in connection_init.

The code blocks of these pages run in tests/documentation/test_docs.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import importlib
import inspect
import json
import os
import pkgutil
import queue
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Server
from graphql import (
    GraphQLSchema,
    build_client_schema,
    get_introspection_query,
    lexicographic_sort_schema,
    print_schema,
)
from graphql import build_schema as parse_sdl
from websockets.asyncio.client import connect

import queuelog.sdk
from queuelog import client as sdk
from queuelog import errors, settings
from queuelog import worker as worker_sdk
from queuelog.cli import build_parser
from queuelog.graphql_api import build_schema
from queuelog.graphql_api.export import REGENERATE, served_sdl
from queuelog.graphql_api.export import main as export_main
from queuelog.schema.extensions import CONTRACT_CODES

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
NODE_EXAMPLE = REPO / "examples" / "node"
REQUIRE_NODE = os.environ.get("QUEUELOG_TEST_REQUIRE_NODE") == "1"
NPM_TIMEOUT = 600.0
WAIT = 30.0  # the longest any single wait below may take (a bound, never a pass/fail timing)
ENQUEUE = 'mutation($p: JSON!) { enqueueJob(input: {type: "email", payload: $p}) { job { id } } }'


def section(text: str, heading: str) -> str:
    """The text under `heading` (a whole heading line), up to the next heading of any level."""
    lines = text.splitlines()
    assert heading in lines, f"no heading {heading!r}"
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("#")), len(lines))
    return "\n".join(lines[start:end])


def table_names(text: str) -> set[str]:
    """The names in the first column of every Markdown table row: `| `NAME` | ...`."""
    return set(re.findall(r"^\| `([^`]+)` \|", text, re.M))


# --- docs/schema.graphql --------------------------------------------------------------------


def test_schema_file_is_the_served_schema() -> None:
    written = (DOCS / "schema.graphql").read_text(encoding="utf-8")
    expected = served_sdl()
    if written != expected:
        diff = difflib.unified_diff(
            written.splitlines(), expected.splitlines(), "docs/schema.graphql", "served", lineterm="", n=1
        )
        shown = "\n".join(list(diff)[:60])
        pytest.fail(
            f"docs/schema.graphql is not the served schema; regenerate it with\n"
            f"    .venv/bin/{REGENERATE}\nand describe what changed in docs/api.md.\n{shown}",
            pytrace=False,
        )


def test_export_command_writes_the_schema(tmp_path: Path) -> None:
    target = tmp_path / "schema.graphql"
    command = [sys.executable, "-m", "queuelog.graphql_api.export", str(target)]
    subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    assert target.read_text(encoding="utf-8") == served_sdl()


def test_export_prints_the_schema_and_refuses_a_path_it_cannot_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert export_main([]) == 0
    assert capsys.readouterr().out == served_sdl()
    assert export_main([str(tmp_path / "no" / "such" / "dir.graphql")]) == 1
    error = capsys.readouterr().err
    assert error.startswith("queuelog.graphql_api.export: cannot write") and error.count("\n") == 1
    assert export_main(["a", "b"]) == 2


def _printed(schema: GraphQLSchema) -> str:
    return print_schema(lexicographic_sort_schema(schema))


def test_a_running_server_serves_the_schema_file(server: Server) -> None:
    """Introspection over HTTP, descriptions and defaults included, gives the file's schema."""
    query = get_introspection_query(descriptions=True, specified_by_url=True)
    answer = server.gql(query).ok()
    assert _printed(build_client_schema(answer)) == _printed(parse_sdl((DOCS / "schema.graphql").read_text()))


# --- docs/api.md ----------------------------------------------------------------------------


def _root_fields() -> dict[str, dict[str, list[str]]]:
    schema = build_schema(settings.Settings())._schema
    roots = {
        "Query": schema.query_type,
        "Mutation": schema.mutation_type,
        "Subscription": schema.subscription_type,
    }
    return {
        kind: {name: list(f.args) for name, f in root.fields.items()} for kind, root in roots.items() if root
    }


def test_api_md_has_a_section_for_every_root_field_naming_its_arguments() -> None:
    text = (DOCS / "api.md").read_text()
    plural = {"Query": "## Queries", "Mutation": "## Mutations", "Subscription": "## Subscriptions"}
    missing: list[str] = []
    for kind, fields in _root_fields().items():
        part = text.split(plural[kind], 1)[1].split("\n## ", 1)[0]
        for name, arguments in fields.items():
            heading = f"### `{name}`"
            if heading not in part.splitlines():
                missing.append(f"{kind}.{name}: no '{heading}' under '{plural[kind]}'")
                continue
            body = section(part, heading)
            missing += [f"{kind}.{name}: argument `{a}` not named" for a in arguments if f"`{a}`" not in body]
    assert missing == [], "docs/api.md lacks:\n" + "\n".join(missing)


def _error_codes() -> set[str]:
    classes = [
        c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.QueuelogError)
    ]
    return {c.code for c in classes} | set(CONTRACT_CODES)


def test_api_md_names_every_error_code() -> None:
    table = table_names(section((DOCS / "api.md").read_text(), "## Errors"))
    assert _error_codes() - table == set()


def test_api_md_names_every_setting() -> None:
    table = table_names(section((DOCS / "api.md").read_text(), "## Configuration"))
    variables = {settings.env_name(f.name) for f in dataclasses.fields(settings.Settings)}
    assert variables - table == set()


# --- docs/python.md -------------------------------------------------------------------------


def _public_methods(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls, callable) if not name.startswith("_")}


def test_python_md_names_every_public_method_of_the_clients_and_the_worker() -> None:
    text = (DOCS / "python.md").read_text()
    wanted = {
        f"{cls.__name__}.{name}"
        for cls in (sdk.Client, sdk.AsyncClient, worker_sdk.Worker, worker_sdk.JobContext)
        for name in _public_methods(cls)
        if name not in ("from_job", "from_graphql")  # how the worker builds a job, not for users
    }
    missing = {q for q in wanted if not re.search(rf"`(\w+\.)?{q.split('.')[1]}\(", text)}
    assert missing == set(), "docs/python.md does not show these as `name(`: " + ", ".join(sorted(missing))


def test_python_md_names_every_exception_a_user_may_catch() -> None:
    """Every exception class of the SDK (queuelog/sdk/) and of queuelog.errors, and every code
    they carry (KeyRefused's are the refusal's: UNAUTHENTICATED, FORBIDDEN)."""
    text = (DOCS / "python.md").read_text()
    modules = [errors] + [
        importlib.import_module(found.name)
        for found in pkgutil.walk_packages(queuelog.sdk.__path__, "queuelog.sdk.")
    ]
    classes = {
        value
        for module in modules
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == module.__name__
        and not name.startswith("_")
    }
    unnamed = {c.__name__ for c in classes if f"`{c.__name__}`" not in text and f"`{c.__name__}(" not in text}
    codes = {code for c in classes if isinstance(code := getattr(c, "code", None), str)}
    assert unnamed == set() and {c for c in codes if f"`{c}`" not in text} == set()


def test_python_md_names_every_flag_of_queuelog_worker() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    worker_command = commands.choices["worker"]  # type: ignore[index]
    flags = {
        s for a in worker_command._actions for s in a.option_strings if s.startswith("--") and s != "--help"
    }
    table = table_names(section((DOCS / "python.md").read_text(), "### `queuelog worker`"))
    assert {f for f in flags if not any(name.split()[0] == f for name in table)} == set()


# --- examples/node and docs/http.md ---------------------------------------------------------


@pytest.fixture(scope="session")
def node_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/node copied to a temporary directory and installed there with `npm ci` (the
    lockfile's exact versions), once per test session: the repository gets no node_modules."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        reason = "node and npm are needed to run examples/node (Debian: apt-get install nodejs npm)"
        if REQUIRE_NODE:
            pytest.fail(reason + " and QUEUELOG_TEST_REQUIRE_NODE=1")
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("node")
    example = work / "example"
    shutil.copytree(NODE_EXAMPLE, example, ignore=shutil.ignore_patterns("node_modules"))
    installed = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--cache", str(work / "npm-cache")],
        cwd=example,
        capture_output=True,
        text=True,
        timeout=NPM_TIMEOUT,
    )
    assert installed.returncode == 0, (
        f"npm ci failed:\n{installed.stdout[-3000:]}\n{installed.stderr[-3000:]}"
    )
    return example


class Lines:
    """A process's output (stdout and stderr together), line by line, read on a thread."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.seen: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def next(self, within: float) -> str | None:
        """The next line, or None when none came within `within` seconds or the output ended."""
        try:
            line = self._lines.get(timeout=within)
        except queue.Empty:
            return None
        if line is not None:
            self.seen.append(line)
        return line


@pytest.fixture
def subscriber(node_example: Path) -> Iterator[Any]:
    started: list[subprocess.Popen[str]] = []

    def start(key: str, *args: str) -> Lines:
        process = subprocess.Popen(
            ["node", "subscribe.mjs", *args],
            cwd=node_example,
            env={**os.environ, "QUEUELOG_API_KEY": key},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        started.append(process)
        return Lines(process)

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


def test_node_example_prints_the_event_of_a_job_enqueued(
    server: Server, subscriber: Any, unique: Any
) -> None:
    producer = server.make_key(unique("node-producer"), "producer")
    lines = subscriber(producer, server.url, "1")  # a PRODUCER sees its own jobs' events only
    connected = lines.next(WAIT)
    assert connected == f"connected to {server.ws_url}", lines.seen
    # The subscription may reach the server a moment after the ack: enqueue until one is heard.
    enqueued: set[str] = set()
    deadline = time.monotonic() + WAIT
    event_line = None
    while event_line is None and time.monotonic() < deadline:
        enqueued.add(
            server.gql(ENQUEUE, {"p": {"n": len(enqueued)}}, key=producer).ok()["enqueueJob"]["job"]["id"]
        )
        event_line = lines.next(1.0)
    assert event_line is not None, f"no event printed; output: {lines.seen}"
    event = json.loads(event_line)
    assert event["kind"] == "ENQUEUED" and event["job"]["id"] in enqueued, event
    assert event["job"]["type"] == "email" and event["job"]["status"] == "PENDING"
    assert lines.process.wait(timeout=WAIT) == 0, lines.seen  # COUNT 1: it stops after one event


def test_node_example_says_when_the_key_is_refused(server: Server, subscriber: Any) -> None:
    lines = subscriber("ql_not-a-key", server.url)
    assert lines.process.wait(timeout=WAIT) == 1
    while lines.next(1.0) is not None:
        pass
    assert "subscription ended: closed 4403 Forbidden" in lines.seen, lines.seen


def test_http_md_gives_the_commands_the_node_test_runs() -> None:
    text = (DOCS / "http.md").read_text()
    assert "`npm ci`" in text
    assert "QUEUELOG_API_KEY=<key> node subscribe.mjs http://127.0.0.1:8000" in text
    assert "<!-- test: same-as=examples/node/subscribe.mjs -->\n```javascript\n" in text


# --- the websocket's connection_init ----------------------------------------------------------


async def _first_update(ws_url: str, params: dict[str, str], job_id: str) -> dict[str, Any]:
    async with connect(ws_url, subprotocols=["graphql-transport-ws"], open_timeout=WAIT) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"type": "connection_init", "payload": params}))
        ack = json.loads(await asyncio.wait_for(ws.recv(), WAIT))
        assert ack["type"] == "connection_ack", ack
        subscribe = {
            "query": "subscription($id: ID!) { jobUpdated(id: $id) { id status } }",
            "variables": {"id": job_id},
        }
        await ws.send(json.dumps({"id": "1", "type": "subscribe", "payload": subscribe}))
        return json.loads(await asyncio.wait_for(ws.recv(), WAIT))


@pytest.mark.parametrize("name", ["authorization", "Authorization", "AUTHORIZATION"])
def test_connection_init_takes_the_key_under_any_case_of_authorization(server: Server, name: str) -> None:
    job_id = server.gql(ENQUEUE, {"p": {}}).ok()["enqueueJob"]["job"]["id"]
    message = asyncio.run(_first_update(server.ws_url, {name: f"Bearer {server.admin_key}"}, job_id))
    assert message["type"] == "next", message
    assert message["payload"] == {"data": {"jobUpdated": {"id": job_id, "status": "PENDING"}}}
