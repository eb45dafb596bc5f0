"""Runs every fenced code block of a Markdown file (README.md, docs/*.md) against real servers.

tests/documentation/test_docs.py runs README.md and each docs/*.md this way, one pytest case per file. A file
is one session, run top to bottom in a fresh directory (its cwd) that looks like the
repository root: `.venv` is the test venv and the repository's top-level folders (examples/,
bench/, deploy/, docs/, ...; not tests/ or queuelog/) are linked in. Write commands as a user
types them from the repository root: with the `.venv/bin/` prefix (PATH does not hold the
venv, so a bare `queuelog` fails here as it does for a newcomer), port 8000, and key names
unique within the file.

What a block does depends on its language and on an optional directive: an HTML comment on
the line directly above the opening fence, `<!-- test: WORD NAME=VALUE NAME="a value" -->`.
A directive anywhere else, an unknown word, or one the block's language does not take fails
the file, naming the line.

- ```sh (also bash, shell, console): run by bash with `set -Eeo pipefail`, in the file's cwd.
  Shell variables, exports, functions and `cd` carry over to later blocks (each block runs in
  a new bash that starts from the state the previous one left). A block fails when it exits
  non-zero; the failure names the command and its line. No `$ ` prompts. Processes a block
  leaves behind (`cmd &`) are stopped when it ends: use `background`. Directives:
    background         start the block and go on once http://127.0.0.1:8000/healthz answers
                       200 (`wait=URL` waits on another URL, `wait=none` on nothing). It must
                       not exit before that; it is stopped (SIGTERM to its process group) at
                       the end of the file, and fails the file if it exited non-zero before.
    exit=N             the block must exit with N (default 0)
    output="text"      its stdout+stderr must contain the text (for background: once ready)
    timeout=SECONDS    how long it may take (default 60; background: the wait, default 90)
- ```python: run as `.venv/bin/python -` (the block on stdin) in the cwd, with the session's
  exported variables; same directives as sh. `file=NAME` instead writes the block to NAME in
  the cwd (a module that later blocks import or run); a .py file is compiled as a check.
- ```graphql: each operation of the document, in order, is sent to
  http://127.0.0.1:8000/graphql (`url=BASE` for another server) with `Authorization: Bearer
  $VAR`, VAR named by `key=VAR` (required: a shell variable an earlier sh block set).
  Subscriptions go over the websocket (graphql-transport-ws) until their first event or
  their end, within 10 s. No answer may carry `errors`, except with `error=CODE`: then the
  last operation must answer an error with that `extensions.code`. In a block of several
  operations each has a name of its own: a server (and GraphiQL) refuses a document with an
  anonymous operation beside others, so a reader could not run the block as written.
- ```json with `response`, directly after a graphql, sh or python block: that block's answer
  must match it: the GraphQL response (a list of them, in order, for several operations) or
  the block's stdout parsed as JSON. The string "..." matches any value, a trailing "..." in
  a list any further items, and `"...": "..."` in an object any further keys.
- Any other block (yaml, ini, nginx, dockerfile, text, javascript, an unlabelled one, ...)
  needs one of: `same-as=PATH` (its text must appear verbatim in that repository file, so docs
  show the real, separately tested file), `file=NAME` (written to the cwd for later blocks),
  `node` (a javascript block run by node as an ES module; exit/output/timeout as sh) or
  `layout` (a tree of repository paths: each must exist, and every module and package of
  queuelog/ and every top-level folder must be named).
- `skip reason="..."`: for a block CI cannot possibly run (a docker build: no Docker engine;
  the whole test suite). Every skip names its reason; keep them rare.

Substitutions, applied to the text of every block that runs or is written with file= (not
to same-as comparisons):

- `python3 -m venv .venv`, `.venv/bin/pip install ...` (its extras must exist in
  pyproject.toml) and `apt-get install ...` become `true`: the test venv and the machine
  already have what they install.
- `sudo -u postgres ` and `sudo ` before a command are removed (the runner is the admin).
- A port 8000-8009 (the number standing alone) becomes a free port of its own, the same
  for the whole file; `queuelog serve` gets `--port` (8000's) unless the doc names a port.
- `postgresql://queuelog[:PASSWORD]@127.0.0.1:5432/queuelog` (or `localhost`, or a database
  `queuelog_SUFFIX`) points at the test PostgreSQL server (QUEUELOG_TEST_POSTGRES_URL), as
  role NAME and database NAME (NAME_SUFFIX), a name fresh for each file.
- In a line running createuser, createdb, dropuser, dropdb, psql, pg_dump or pg_restore,
  the word `queuelog` (`queuelog_SUFFIX`) becomes NAME (NAME_SUFFIX): the role and the
  databases this file creates and uses.

PostgreSQL commands reach the test server as its own user (PGHOST, PGPORT, PGUSER,
PGPASSWORD, PGDATABASE are set), so a doc creates its role and database as an admin does:
`sudo -u postgres psql -c "CREATE ROLE queuelog LOGIN PASSWORD 'secret'"` and `sudo -u
postgres createdb --owner queuelog queuelog`, before the commands that need them. The runner
drops them at the end of the file. From the first block that needs PostgreSQL (one matching
the URL or those commands), the rest of the file is skipped, saying why, when the test server
does not answer (a failure with QUEUELOG_TEST_REQUIRE_POSTGRES=1) or
QUEUELOG_TEST_BACKENDS leaves postgresql out.

A failure names the file and line, the block (as run, after substitutions), the command
that failed and the output.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import httpx

if TYPE_CHECKING:
    from graphql import OperationDefinitionNode

REPO = Path(__file__).resolve().parent.parent
SHELL_LANGS = {"sh", "bash", "shell", "console"}
BLOCK_TIMEOUT = 60.0
READY_TIMEOUT = 90.0
SUBSCRIPTION_TIMEOUT = 10.0
OUTPUT_LIMIT = 6000
DIRECTIVE = re.compile(r"^\s*<!--\s*test:(.*?)-->\s*$")
FENCE = re.compile(r"^( {0,3}|\s*)(`{3,}|~{3,})\s*([^\s`]*)[^`]*$")
FLAGS = {"background", "response", "skip", "layout", "node"}
OPTIONS = {"wait", "exit", "output", "file", "key", "error", "url", "same-as", "reason", "timeout"}
ALLOWED: dict[str, set[str]] = {
    "sh": {"background", "wait", "exit", "output", "timeout", "file", "skip", "reason"},
    "python": {"background", "wait", "exit", "output", "timeout", "file", "skip", "reason"},
    "graphql": {"key", "error", "url", "skip", "reason", "same-as", "file"},
    "json": {"response", "same-as", "file", "skip", "reason"},
    "other": {"same-as", "file", "node", "layout", "exit", "output", "timeout", "skip", "reason"},
}
# Shell variables that are bash's own: never carried from one block to the next.
BASH_OWN = (
    "__docs*|BASH*|FUNCNAME|PIPESTATUS|LINENO|RANDOM|SRANDOM|SECONDS|EPOCHREALTIME|EPOCHSECONDS|"
    "PPID|UID|EUID|GROUPS|SHELLOPTS|SHLVL|PWD|OLDPWD|_|OPTIND|OPTARG|OPTERR|HISTCMD|DIRSTACK|"
    "COMP_*|PS1|PS2|PS4|IFS|HOSTNAME|HOSTTYPE|MACHTYPE|OSTYPE|COLUMNS|LINES"
)
PG_COMMANDS = re.compile(r"(^|[\s;&|(`$])(createuser|createdb|dropuser|dropdb|psql|pg_dump|pg_restore)\b")
PG_URL = re.compile(
    r"postgresql(?:\+psycopg)?://queuelog(?P<password>:[^@/\s]*)?@(?:127\.0\.0\.1|localhost)(?::5432)?"
    r"/queuelog(?P<suffix>_[A-Za-z0-9_]+)?\b"
)
PG_WORD = re.compile(r"(?<![\w/.@:=-])queuelog(?P<suffix>_[A-Za-z0-9_]+)?(?![\w/.-])")
PORT = re.compile(r"(?<![\w.,])(800\d)(?![\w,]|\.\d)")


class DocFailure(Exception):
    """The file fails; the message says where and why."""


class DocSkipped(Exception):
    """The rest of the file needs PostgreSQL, which is not there (and not required)."""


@dataclass
class Block:
    lang: str  # as written, lower case ("" when unlabelled)
    line: int  # the opening fence's line, 1-based
    text: str
    flags: set[str] = field(default_factory=set)
    options: dict[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        if self.lang in SHELL_LANGS:
            return "sh"
        if self.lang in ("python", "graphql", "json"):
            return self.lang
        return "other"

    def label(self) -> str:
        directive = " ".join(sorted(self.flags) + [f"{k}={v}" for k, v in self.options.items()])
        return f"```{self.lang or '(no language)'} block" + (
            f" <!-- test: {directive} -->" if directive else ""
        )


@dataclass
class Settings:
    """Where PostgreSQL is, and what to do without it (tests/conftest.py's settings)."""

    postgres_url: str
    postgres_missing: str | None  # why PostgreSQL cannot be used, or None
    require_postgres: bool
    venv: Path = field(default_factory=lambda: Path(sys.prefix))


# --- reading a Markdown file ------------------------------------------------------------------


def parse_directive(text: str, where: str) -> tuple[set[str], dict[str, str]]:
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise DocFailure(f"{where}: cannot read the directive ({exc})") from None
    flags: set[str] = set()
    options: dict[str, str] = {}
    for word in words:
        name, sep, value = word.partition("=")
        if sep and name in OPTIONS:
            options[name] = value
        elif not sep and name in FLAGS:
            flags.add(name)
        else:
            known = ", ".join(sorted(FLAGS) + [f"{o}=" for o in sorted(OPTIONS)])
            raise DocFailure(f"{where}: unknown directive {word!r} (known: {known})")
    return flags, options


def read_blocks(path: Path, name: str) -> list[Block]:
    """The fenced code blocks of a Markdown file, with their directives, checked."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    used_directives: set[int] = set()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, fence, lang = len(opening.group(1)), opening.group(2), opening.group(3).lower()
        start = index
        body: list[str] = []
        index += 1
        while index < len(lines):
            stripped = lines[index].strip()
            if stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}:
                break
            line = lines[index]
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))) :])
            index += 1
        else:
            raise DocFailure(f"{name}:{start + 1}: the code block opened here is never closed")
        index += 1
        block = Block(lang, start + 1, "\n".join(body) + "\n")
        above = DIRECTIVE.match(lines[start - 1]) if start > 0 else None
        if above:
            used_directives.add(start - 1)
            block.flags, block.options = parse_directive(above.group(1), f"{name}:{start}")
        check_directive(block, name)
        blocks.append(block)
    for number, line in enumerate(lines):
        if DIRECTIVE.match(line) and number not in used_directives:
            raise DocFailure(
                f"{name}:{number + 1}: a test directive must be on the line directly above a code block's "
                "opening fence"
            )
    return blocks


def check_directive(block: Block, name: str) -> None:
    where = f"{name}:{block.line}: {block.label()}"
    allowed = ALLOWED[block.kind]
    for word in block.flags | set(block.options):
        if word not in allowed:
            raise DocFailure(f"{where}: {word!r} does not apply to a ```{block.lang} block")
    if "skip" in block.flags:
        if not block.options.get("reason"):
            raise DocFailure(f'{where}: a skip must say why: <!-- test: skip reason="..." -->')
        return
    if "wait" in block.options and "background" not in block.flags:
        raise DocFailure(f"{where}: wait= goes with background")
    if block.kind == "graphql" and not ({"key", "same-as", "file"} & set(block.options)):
        raise DocFailure(
            f"{where}: a graphql block needs <!-- test: key=VAR --> (VAR: a shell variable holding the key)"
        )
    if block.kind == "other" and not (
        {"same-as", "file"} & set(block.options) or {"node", "layout"} & block.flags
    ):
        raise DocFailure(
            f"{where}: needs, on the line directly above it, "
            "<!-- test: same-as=PATH -->, <!-- test: file=NAME -->, <!-- test: node -->, "
            "<!-- test: layout --> or "
            '<!-- test: skip reason="..." -->'
        )
    if "node" in block.flags and block.lang not in ("javascript", "js", "mjs"):
        raise DocFailure(f"{where}: node runs javascript blocks only")
    if block.kind == "json" and not ({"response"} & block.flags or {"same-as", "file"} & set(block.options)):
        raise DocFailure(
            f"{where}: a ```json block needs <!-- test: response --> (after a graphql, sh or python block), "
            "same-as=PATH or file=NAME"
        )
    if block.kind == "sh" and "file" not in block.options:
        for offset, line in enumerate(block.text.splitlines(), 1):
            if line.startswith("$ "):
                raise DocFailure(
                    f"{name}:{block.line + offset}: a `$ ` prompt: write the commands alone "
                    "(the block is run as written)"
                )


# --- substitutions --------------------------------------------------------------------------


def pyproject_extras() -> set[str]:
    with (REPO / "pyproject.toml").open("rb") as file:
        return set(tomllib.load(file)["project"].get("optional-dependencies", {}))


@dataclass
class Substitutions:
    postgres_url: str
    name: str = field(default_factory=lambda: f"queuelog_docs_{secrets.token_hex(3)}")
    ports: dict[int, int] = field(default_factory=dict)

    def port(self, doc_port: int) -> int:
        if doc_port not in self.ports:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                self.ports[doc_port] = s.getsockname()[1]
        return self.ports[doc_port]

    def apply(self, text: str, where: str) -> str:
        text = re.sub(r"\bpython3? -m venv \.venv\b", "true", text)
        text = re.sub(
            r"\.venv/bin/(?:pip|python3? -m pip) install\b[^\n;&|#]*[^\s;&|#]",
            lambda m: self._pip(m.group(0), where),
            text,
        )
        text = re.sub(r"\b(?:sudo )?apt-get install\b[^\n;&|#]*[^\s;&|#]", "true", text)
        text = re.sub(r"\bsudo (?:-u \S+ )?", "", text)
        text = "\n".join(
            PG_WORD.sub(self._pg_name, line) if PG_COMMANDS.search(line) else line
            for line in text.split("\n")
        )
        text = PG_URL.sub(self._pg_url, text)
        text = re.sub(r"\bqueuelog serve\b", lambda m: f"queuelog serve --port {self.port(8000)}", text)
        return PORT.sub(lambda m: str(self.port(int(m.group(1)))), text)

    def _pip(self, command: str, where: str) -> str:
        missing = set()
        for extras in re.findall(r"\.\[([^\]]*)\]", command):
            missing |= {e.strip() for e in extras.split(",") if e.strip()} - pyproject_extras()
        if missing:
            raise DocFailure(
                f"{where}: `{command.strip()}` names extras pyproject.toml does not have: {sorted(missing)}"
            )
        return "true"

    def _pg_name(self, match: re.Match[str]) -> str:
        return self.name + (match.group("suffix") or "")

    def _pg_url(self, match: re.Match[str]) -> str:
        server = urlsplit(self.postgres_url)
        password = match.group("password") or ""
        host = f"{server.hostname}:{server.port or 5432}"
        return f"postgresql://{self.name}{password}@{host}/{self._pg_name(match)}"

    def postgres_env(self) -> dict[str, str]:
        server = urlsplit(self.postgres_url)
        env = {
            "PGHOST": server.hostname or "127.0.0.1",
            "PGPORT": str(server.port or 5432),
            "PGUSER": unquote(server.username or "postgres"),
            "PGDATABASE": server.path.lstrip("/") or "postgres",
        }
        if server.password:
            env["PGPASSWORD"] = unquote(server.password)
        return env


def needs_postgres(text: str) -> bool:
    return bool(PG_URL.search(text) or any(PG_COMMANDS.search(line) for line in text.splitlines()))


# --- matching a response ----------------------------------------------------------------------


def mismatch(expected: Any, actual: Any, path: str = "$") -> str | None:
    """Where `actual` differs from `expected` ("..." matches anything), or None."""
    if expected == "...":
        return None
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{path}: expected an object, got {json.dumps(actual)}"
        open_ended = expected.get("...") == "..."
        keys = [k for k in expected if k != "..."]
        missing = [k for k in keys if k not in actual]
        extra = [k for k in actual if k not in expected] if not open_ended else []
        if missing or extra:
            return f"{path}: keys missing {missing}, unexpected {extra}"
        for key in keys:
            found = mismatch(expected[key], actual[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return f"{path}: expected a list, got {json.dumps(actual)}"
        open_ended = bool(expected) and expected[-1] == "..."
        items = expected[:-1] if open_ended else expected
        if len(actual) < len(items) or (not open_ended and len(actual) != len(items)):
            return f"{path}: expected {len(items)}{'+' if open_ended else ''} items, got {len(actual)}"
        for number, item in enumerate(items):
            found = mismatch(item, actual[number], f"{path}[{number}]")
            if found:
                return found
        return None
    if expected != actual or type(expected) is not type(actual):
        return f"{path}: expected {json.dumps(expected)}, got {json.dumps(actual)}"
    return None


# --- the layout check ----------------------------------------------------------------------------

LAYOUT_ENTRY = re.compile(r"^( {0,2})([\w.-]+/|[\w-]+\.\w+)(?:\s|$)")


def layout_problems(text: str) -> list[str]:
    """What a Layout tree gets wrong: paths that do not exist, modules and folders it leaves out."""
    named: set[str] = set()
    parent = ""
    for line in text.splitlines():
        entry = LAYOUT_ENTRY.match(line)
        if not entry:
            continue
        indent, name = len(entry.group(1)), entry.group(2)
        path = name if indent == 0 else parent + name
        if indent == 0:
            parent = name if name.endswith("/") else ""
        named.add(path.rstrip("/"))
    problems = [f"{path} does not exist" for path in sorted(named) if not (REPO / path).exists()]
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    expected = {p.split("/")[0] for p in tracked if "/" in p and not p.startswith(".")}
    for path in tracked:
        parts = path.split("/")
        if parts[0] != "queuelog" or len(parts) < 2:
            continue
        if len(parts) == 2 and parts[1].endswith(".py") and parts[1] not in ("__init__.py", "__main__.py"):
            expected.add(path)
        elif len(parts) > 2 and (REPO / "queuelog" / parts[1]).is_dir():
            expected.add(f"queuelog/{parts[1]}")
    problems += [f"{path} is not named" for path in sorted(expected - named) if (REPO / path).exists()]
    return problems


# --- running a file -----------------------------------------------------------------------------

WRAPPER = r"""
__docs_state=%(state)s
__docs_err=%(err)s
[ -f "$__docs_state" ] && source "$__docs_state"
__docs_save() {
  local __docs_name
  {
    # ${name@a} gives a variable's attributes without a subshell (one per variable, a few
    # ms of CPU each, was most of what a block cost the runner)
    for __docs_name in $(compgen -v); do
      case $__docs_name in %(bash_own)s) continue ;; esac
      case ${!__docs_name@a} in *r*) continue ;; esac
      declare -p "$__docs_name" 2>/dev/null || continue
    done
    declare -f
    printf 'cd -- %%q\n' "$PWD"
  } > "$__docs_state.new" && mv "$__docs_state.new" "$__docs_state"
}
%(save)s
trap 'printf "%%s\t%%s\t%%s\n" "$?" "$LINENO" "$BASH_COMMAND" >> "$__docs_err"' ERR
set -Eeo pipefail
source %(script)s
"""


@dataclass
class Background:
    block: Block
    process: subprocess.Popen[bytes]
    log: Path


@dataclass
class Answer:
    """What the previous block answered, for a `response` block after it."""

    block: Block
    value: Any = None
    stdout: str | None = None


class Session:
    """One Markdown file, run top to bottom."""

    def __init__(self, doc: Path, workdir: Path, settings: Settings) -> None:
        self.doc = doc
        self.name = str(doc.relative_to(REPO)) if doc.is_relative_to(REPO) else doc.name
        self.settings = settings
        self.cwd = workdir / "work"
        self.runner_dir = workdir / "runner"
        self.state = self.runner_dir / "state.sh"
        self.subs = Substitutions(settings.postgres_url)
        self.background: list[Background] = []
        self.foreground_groups: list[int] = []
        self.used_postgres = False
        self.skipped: list[str] = []
        self.answer: Answer | None = None
        # one client for the whole file: a new one per request costs an SSL context each
        self.http = httpx.Client(trust_env=False)

    # the session's directory and environment

    def prepare(self) -> None:
        self.cwd.mkdir(parents=True)
        self.runner_dir.mkdir(parents=True)
        (self.cwd / ".venv").symlink_to(self.settings.venv)
        for entry in REPO.iterdir():
            hidden = entry.name.startswith(".") or entry.name.endswith(".egg-info")
            if entry.is_dir() and not hidden and entry.name not in ("tests", "queuelog", "__pycache__"):
                (self.cwd / entry.name).symlink_to(entry)

    def env(self) -> dict[str, str]:
        venv_bin = str(self.settings.venv / "bin")
        path = [
            p
            for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
            if p and p != venv_bin and not (Path(p) / "queuelog").exists()
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("QUEUELOG_", "PG", "VIRTUAL_ENV"))}
        env.update(PATH=os.pathsep.join(path), PYTHONUNBUFFERED="1", **self.subs.postgres_env())
        env.pop("PYTHONPATH", None)
        return env

    # running

    def run(self) -> list[str]:
        """Run every block; the blocks skipped, with their reasons. Raises DocFailure or DocSkipped."""
        blocks = read_blocks(self.doc, self.name)
        self.prepare()
        try:
            for block in blocks:
                self.run_block(block)
            self.check_background()
        except DocFailure as failure:
            raise DocFailure(str(failure) + self.background_notes()) from None
        finally:
            self.http.close()
            self.stop_background()
            self.drop_postgres()
        return self.skipped

    def where(self, block: Block) -> str:
        return f"{self.name}:{block.line}: {block.label()}"

    def run_block(self, block: Block) -> None:
        if "skip" in block.flags:
            self.skipped.append(f"{self.name}:{block.line}: {block.options['reason']}")
            return
        if "same-as" in block.options:
            self.check_same_as(block)
            return
        if "layout" in block.flags:
            problems = layout_problems(block.text)
            if problems:
                raise DocFailure(f"{self.where(block)}: the layout is not true: " + "; ".join(problems))
            return
        if "response" in block.flags:
            self.check_response(block)
            return
        if needs_postgres(block.text):
            self.require_postgres(block)
        text = self.subs.apply(block.text, self.where(block))
        if "file" in block.options:
            self.write_file(block, text)
            return
        self.answer = Answer(block)
        if block.kind == "graphql":
            self.answer.value = self.run_graphql(block, text)
        elif "background" in block.flags:
            self.start_background(block, text)
        else:
            self.run_foreground(block, text)

    def require_postgres(self, block: Block) -> None:
        if self.used_postgres:
            return
        missing = self.settings.postgres_missing
        if missing is not None:
            message = f"{self.where(block)} and the rest of {self.name} need PostgreSQL: {missing}"
            if self.settings.require_postgres:
                raise DocFailure(message + " and QUEUELOG_TEST_REQUIRE_POSTGRES=1")
            raise DocSkipped(message)
        self.used_postgres = True

    def check_same_as(self, block: Block) -> None:
        target = REPO / block.options["same-as"]
        if not target.is_file():
            raise DocFailure(
                f"{self.where(block)}: {block.options['same-as']} is not a file of the repository"
            )
        clean = "\n".join(line.rstrip() for line in target.read_text().splitlines())
        wanted = "\n".join(line.rstrip() for line in block.text.splitlines()).strip("\n")
        if wanted in clean:
            return
        lines = wanted.splitlines()
        matched = next((n for n in range(len(lines), 0, -1) if "\n".join(lines[:n]) in clean), 0)
        raise DocFailure(
            f"{self.where(block)}: the block is not verbatim in {block.options['same-as']}: "
            f"its lines 1-{matched} are, line {matched + 1} (doc line {block.line + matched + 1}) "
            f"is not: {lines[matched]!r}"
        )

    def write_file(self, block: Block, text: str) -> None:
        target = self.cwd / block.options["file"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        if target.suffix == ".py":
            try:
                compile(text, str(target), "exec")
            except SyntaxError as exc:
                raise DocFailure(
                    f"{self.name}:{block.line + (exc.lineno or 0)}: {block.label()}: {exc.msg}"
                ) from None

    def check_response(self, block: Block) -> None:
        if self.answer is None:
            raise DocFailure(f"{self.where(block)}: no graphql, sh or python block answered just before it")
        try:
            expected = json.loads(block.text)
        except ValueError as exc:
            raise DocFailure(f"{self.where(block)}: not JSON: {exc}") from None
        actual = self.answer.value
        if self.answer.stdout is not None:
            try:
                actual = json.loads(self.answer.stdout)
            except ValueError:
                raise DocFailure(
                    f"{self.where(block)}: the output of the block at line {self.answer.block.line} "
                    "is not JSON:\n" + clip(self.answer.stdout)
                ) from None
        problem = mismatch(expected, actual)
        if problem:
            raise DocFailure(
                f"{self.where(block)}: the block at line {self.answer.block.line} answered otherwise: "
                f"{problem}\n"
                f"its answer:\n{clip(json.dumps(actual, indent=2))}"
            )
        self.answer = None

    # shell, python and node blocks

    def script_for(self, block: Block, text: str) -> Path:
        """The shell script that runs the block."""
        stem = self.runner_dir / f"line{block.line}"
        if block.kind == "sh":
            script = stem.with_suffix(".sh")
            script.write_text(text)
            return script
        source = stem.with_suffix(".mjs" if "node" in block.flags else ".py")
        source.write_text(text)
        script = stem.with_suffix(".sh")
        command = "node" if "node" in block.flags else ".venv/bin/python -"
        script.write_text(f"{command} < {shlex.quote(str(source))}\n")
        return script

    def wrapper(self, script: Path, save: bool) -> str:
        return WRAPPER % {
            "state": shlex.quote(str(self.state)),
            "err": shlex.quote(str(self.runner_dir / "err")),
            "bash_own": BASH_OWN,
            "save": "trap '__docs_rc=$?; __docs_save; exit $__docs_rc' EXIT" if save else "",
            "script": shlex.quote(str(script)),
        }

    def run_foreground(self, block: Block, text: str) -> None:
        script = self.script_for(block, text)
        (self.runner_dir / "err").unlink(missing_ok=True)
        timeout = float(block.options.get("timeout", BLOCK_TIMEOUT))
        process = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-c", self.wrapper(script, save=block.kind == "sh")],
            cwd=self.cwd,
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            self.fail_block(block, text, f"did not finish within {timeout:g} s", out, err)
        finally:
            kill_group(process.pid, signal.SIGTERM)
        stdout, stderr = self.readable(block, script, out), self.readable(block, script, err)
        want = int(block.options.get("exit", "0"))
        if process.returncode != want:
            self.fail_block(
                block, text, f"exited {process.returncode}, not {want}", stdout, stderr, failing=True
            )
        wanted_output = block.options.get("output")
        if wanted_output is not None and wanted_output not in stdout + stderr:
            self.fail_block(block, text, f"its output does not contain {wanted_output!r}", stdout, stderr)
        assert self.answer is not None
        self.answer.stdout = stdout

    def readable(self, block: Block, script: Path, raw: bytes | str) -> str:
        """Output with the runner's file names and line numbers turned into the doc's."""
        text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw

        def doc_line(match: re.Match[str]) -> str:
            return f"{self.name}: line {block.line + int(match.group(1))}"

        text = re.sub(re.escape(str(script)) + r": line (\d+)", doc_line, text)
        return re.sub(
            r'File "<stdin>", line (\d+)',
            lambda m: f'File "{self.name}", line {block.line + int(m.group(1))}',
            text,
        )

    def failing_command(self, block: Block) -> str:
        err = self.runner_dir / "err"
        if not err.exists() or block.kind != "sh":
            return ""
        first = err.read_text().splitlines()[0].split("\t", 2)
        if len(first) < 3:
            return ""
        return f"\nthe command that failed (line {block.line + int(first[1])}, exit {first[0]}): {first[2]}"

    def fail_block(
        self,
        block: Block,
        text: str,
        why: str,
        stdout: bytes | str,
        stderr: bytes | str,
        failing: bool = False,
    ) -> None:
        numbered = "\n".join(f"{block.line + n:>5} | {line}" for n, line in enumerate(text.splitlines(), 1))
        out = stdout.decode(errors="replace") if isinstance(stdout, bytes) else stdout
        err = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
        raise DocFailure(
            f"{self.where(block)} {why}{self.failing_command(block) if failing else ''}\n"
            f"--- the block, as run ---\n{numbered}\n"
            f"--- stdout ---\n{clip(out)}\n--- stderr ---\n{clip(err)}"
        )

    def start_background(self, block: Block, text: str) -> None:
        script = self.script_for(block, text)
        log = self.runner_dir / f"line{block.line}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["bash", "--noprofile", "--norc", "-c", self.wrapper(script, save=False)],
                cwd=self.cwd,
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        running = Background(block, process, log)
        self.background.append(running)
        wait = block.options.get("wait", "http://127.0.0.1:8000/healthz")
        timeout = float(block.options.get("timeout", READY_TIMEOUT))
        if wait != "none":
            self.wait_ready(running, text, self.subs.apply(wait, self.where(block)), timeout)
        wanted_output = block.options.get("output")
        if wanted_output is not None:
            deadline = time.monotonic() + 5
            while wanted_output not in log.read_text(errors="replace"):
                if time.monotonic() > deadline:
                    self.fail_block(
                        block, text, f"its output does not contain {wanted_output!r}", log.read_text(), ""
                    )
                time.sleep(0.05)

    def wait_ready(self, running: Background, text: str, url: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if running.process.poll() is not None:
                self.fail_block(
                    running.block,
                    text,
                    f"exited {running.process.returncode} before {url} answered",
                    self.readable(running.block, Path("-"), running.log.read_bytes()),
                    "",
                )
            with contextlib.suppress(httpx.HTTPError):
                if self.http.get(url, timeout=1).status_code == 200:
                    return
            if time.monotonic() > deadline:
                self.fail_block(
                    running.block,
                    text,
                    f"{url} did not answer 200 within {timeout:g} s",
                    running.log.read_text(),
                    "",
                )
            time.sleep(0.05)

    def check_background(self) -> None:
        for running in self.background:
            code = running.process.poll()
            if code not in (None, 0):
                raise DocFailure(f"{self.where(running.block)}: exited {code} before the end of the file")

    def background_notes(self) -> str:
        """What became of the background blocks that have exited: often why a later block failed."""
        notes = ""
        for running in self.background:
            code = running.process.poll()
            if code is not None:
                notes += (
                    f"\n--- meanwhile, the background block at {self.name}:{running.block.line} "
                    f"exited {code}; its output ---\n{clip(running.log.read_text(errors='replace'))}"
                )
        return notes

    def stop_background(self) -> None:
        for running in self.background:
            kill_group(running.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for running in self.background:
            try:
                running.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill_group(running.process.pid, signal.SIGKILL)
                running.process.wait()

    # graphql blocks

    def shell_variable(self, block: Block, name: str) -> str:
        found = subprocess.run(
            [
                "bash",
                "--noprofile",
                "--norc",
                "-c",
                '[ -f "$1" ] && source "$1" >/dev/null; [[ -v $2 ]] && printf %s "${!2}"',
                "_",
                str(self.state),
                name,
            ],
            capture_output=True,
            text=True,
            cwd=self.cwd,
            env=self.env(),
        )
        if found.returncode != 0:
            raise DocFailure(
                f"{self.where(block)}: key={name}: no shell variable {name} (an earlier sh block sets it)"
            )
        return found.stdout

    def run_graphql(self, block: Block, text: str) -> Any:
        from graphql import GraphQLSyntaxError, OperationDefinitionNode, OperationType, parse, print_ast
        from graphql.language import DocumentNode

        try:
            document = parse(text)
        except GraphQLSyntaxError as exc:
            line = block.line + exc.locations[0].line if exc.locations else block.line
            raise DocFailure(f"{self.name}:{line}: {block.label()}: {exc.message}") from None
        operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
        fragments = [d for d in document.definitions if not isinstance(d, OperationDefinitionNode)]
        self.check_operation_names(block, operations)
        key = self.shell_variable(block, block.options["key"]) if "key" in block.options else ""
        base = self.subs.apply(block.options.get("url", "http://127.0.0.1:8000"), self.where(block)).rstrip(
            "/"
        )
        answers = []
        for number, operation in enumerate(operations, 1):
            query = print_ast(DocumentNode(definitions=(operation, *fragments)))
            if operation.operation == OperationType.SUBSCRIPTION:
                answer = self.subscribe(block, base, key, query)
            else:
                answer = self.post(block, base, key, query)
            answers.append(answer)
            last = number == len(operations)
            codes = [e.get("extensions", {}).get("code") for e in answer.get("errors") or []]
            wanted = block.options.get("error") if last else None
            bad = (wanted is None and codes) or (wanted is not None and wanted not in codes)
            if bad:
                expectation = f"an error {wanted}" if wanted else "no errors"
                raise DocFailure(
                    f"{self.where(block)}: operation {number} of {len(operations)} (line "
                    f"{block.line + (operation.loc.start_token.line if operation.loc else 1)}) should answer "
                    f"{expectation}:\n{query}\nanswered:\n{clip(json.dumps(answer, indent=2))}"
                )
        return answers[0] if len(answers) == 1 else answers

    def check_operation_names(self, block: Block, operations: list[OperationDefinitionNode]) -> None:
        """Several operations in one block: each named, each name once (as GraphQL requires of
        the document a reader pastes whole)."""
        if len(operations) < 2:
            return
        seen: set[str] = set()
        for operation in operations:
            line = block.line + (operation.loc.start_token.line if operation.loc else 1)
            if operation.name is None:
                raise DocFailure(
                    f"{self.name}:{line}: {block.label()}: an anonymous operation beside "
                    f"{len(operations) - 1} other(s): name each one (`query Name {{ ... }}`), or the "
                    "document is refused whole when a reader runs it as written"
                )
            if operation.name.value in seen:
                raise DocFailure(
                    f"{self.name}:{line}: {block.label()}: a second operation named {operation.name.value!r}"
                )
            seen.add(operation.name.value)

    def post(self, block: Block, base: str, key: str, query: str) -> dict[str, Any]:
        try:
            response = self.http.post(
                f"{base}/graphql",
                json={"query": query},
                headers={"Authorization": f"Bearer {key}"} if key else {},
                timeout=BLOCK_TIMEOUT,
            )
        except httpx.HTTPError as exc:
            raise DocFailure(
                f"{self.where(block)}: {base}/graphql does not answer: {exc!r}\n{query}"
            ) from None
        try:
            body = response.json()
        except ValueError:
            raise DocFailure(
                f"{self.where(block)}: {base}/graphql answered {response.status_code}, not JSON:\n"
                + clip(response.text)
            ) from None
        if not isinstance(body, dict):
            raise DocFailure(f"{self.where(block)}: {base}/graphql answered {clip(response.text)}")
        return body

    def subscribe(self, block: Block, base: str, key: str, query: str) -> dict[str, Any]:
        from websockets.sync.client import connect
        from websockets.typing import Subprotocol

        url = base.replace("http://", "ws://", 1).replace("https://", "wss://", 1) + "/graphql"
        try:
            protocols = [Subprotocol("graphql-transport-ws")]
            with connect(url, subprotocols=protocols, open_timeout=SUBSCRIPTION_TIMEOUT) as socket_:
                socket_.send(
                    json.dumps({"type": "connection_init", "payload": {"authorization": f"Bearer {key}"}})
                )
                socket_.send(json.dumps({"id": "1", "type": "subscribe", "payload": {"query": query}}))
                deadline = time.monotonic() + SUBSCRIPTION_TIMEOUT
                while True:
                    message = json.loads(socket_.recv(timeout=max(0.01, deadline - time.monotonic())))
                    if message.get("type") == "next":
                        return dict(message["payload"])
                    if message.get("type") == "error":
                        return {"data": None, "errors": message["payload"]}
                    if message.get("type") == "complete":
                        return {"data": None}
        except TimeoutError:
            raise DocFailure(
                f"{self.where(block)}: the subscription sent nothing within "
                f"{SUBSCRIPTION_TIMEOUT:g} s:\n{query}"
            ) from None
        except Exception as exc:
            raise DocFailure(f"{self.where(block)}: the subscription failed: {exc!r}\n{query}") from None

    # PostgreSQL

    def drop_postgres(self) -> None:
        if not self.used_postgres:
            return
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.settings.postgres_url, autocommit=True, connect_timeout=5) as connection:
            rows = connection.execute(
                "SELECT datname FROM pg_database WHERE datname = %s OR datname LIKE %s",
                (self.subs.name, self.subs.name.replace("_", r"\_") + r"\_%"),
            ).fetchall()
            for (name,) in rows:
                connection.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
            connection.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(self.subs.name)))


def kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def clip(text: str) -> str:
    text = text.rstrip()
    return text if len(text) <= OUTPUT_LIMIT else "...\n" + text[-OUTPUT_LIMIT:]


def doc_files() -> list[Path]:
    """README.md and every docs/*.md, new pages included."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def run_document(doc: Path, workdir: Path, settings: Settings) -> list[str]:
    """Run one Markdown file in `workdir` (empty); the skipped blocks with their reasons."""
    return Session(doc, workdir, settings).run()
