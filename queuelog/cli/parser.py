"""The command line: every command, flag and help text (API.md section 6)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, NoReturn

from queuelog.cli.errors import EXIT_KEY_REFUSED, PROG
from queuelog.cli.worker import API_KEY_VARIABLE
from queuelog.errors import echo
from queuelog.settings import (
    BOOLEAN_FORMS,
    LOG_FORMATS,
    Settings,
    env_name,
    field_kind,
    parse_bool,
    public_fields,
)

if TYPE_CHECKING:
    pass
# Settings whose flags would show a secret to anyone running `ps` on the host.
SECRET_SETTINGS = frozenset({"metrics_token"})
# What a setting's flag help says beyond its default.
SETTING_HELP = {
    "log_format": "text, or json: every log record one JSON object per line on stdout",
}
SETTING_METAVAR = {"log_format": "{text,json}"}


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description="A persistent job queue served as a GraphQL API.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    commands.required = True

    serve = commands.add_parser(
        "serve",
        help="migrate the database, then serve the API",
        description=(
            "Migrate the database, then serve the API. Each setting is a flag or a QUEUELOG_* "
            f"variable (the flag wins); booleans take {BOOLEAN_FORMS}. SIGTERM or SIGINT stops "
            "it gracefully, with exit status 0."
        ),
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1, help="server processes (default 1)")
    serve.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    for f in public_fields():
        flag = "--" + f.name.replace("_", "-")
        kind = field_kind(f)
        help_text = f"default: ${env_name(f.name)} or {_show_default(f.default)}"
        if f.name in SETTING_HELP:
            help_text = f"{SETTING_HELP[f.name]} ({help_text})"
        if f.name in SECRET_SETTINGS:
            help_text += f"; prefer ${env_name(f.name)}: a flag's value shows in ps"
        if kind is bool:
            # `--graphiql`, `--graphiql false` (any of BOOLEAN_FORMS) and `--no-graphiql`.
            serve.add_argument(
                flag,
                dest=f.name,
                nargs="?",
                const=True,
                default=None,
                type=_flag_bool,
                metavar="BOOL",
                help=f"{help_text}; BOOL is {BOOLEAN_FORMS}, and the flag alone means true",
            )
            serve.add_argument(
                "--no-" + flag[2:], dest=f.name, action="store_false", default=None, help=f"{flag} false"
            )
        else:
            metavar = SETTING_METAVAR.get(f.name, f.name.upper())
            serve.add_argument(flag, dest=f.name, default=None, metavar=metavar, help=help_text)

    migrate = commands.add_parser("migrate", help="bring the database to the current schema")
    _database_flag(migrate)

    copy = commands.add_parser(
        "copy-database",
        help="copy a SQLite queue (jobs, keys, type controls, schedules) into an empty PostgreSQL database",
        description=(
            "Copy a SQLite queue into a PostgreSQL database, in one transaction: if anything "
            "fails, the target is left as it was. Copied: every job (same ids, statuses, "
            "timestamps, payloads and results), its events and dependencies, every API key "
            "(revoked ones stay revoked), the type controls (pauses, concurrency and rate "
            "limits, the claims inside each rate window, default timeouts), the schedules with "
            "their ticker state, and the throughput per minute; the job counts are recounted "
            "from the copied jobs. Only SQLite to PostgreSQL. Both are migrated to the current "
            "schema first; the source is otherwise only read. Stop every server on both "
            "databases first: the copy holds SQLite's write lock while it reads, but whatever "
            "a server writes afterwards is not copied."
        ),
    )
    copy.add_argument("--from", dest="source", required=True, metavar="SQLITE_URL", help="sqlite:///PATH")
    copy.add_argument("--to", dest="target", required=True, metavar="POSTGRES_URL", help="postgresql://...")
    copy.add_argument(
        "--replace",
        action="store_true",
        help="delete the queue the target holds: jobs, keys, controls, schedules... (else it must hold none)",
    )

    keys_parser = commands.add_parser("keys", help="manage API keys")
    key_commands = keys_parser.add_subparsers(
        dest="keys_command", metavar="ACTION", parser_class=OneLineParser
    )
    key_commands.required = True
    create = key_commands.add_parser("create", help="create a key; prints it once")
    create.add_argument("--name", required=True)
    create.add_argument(
        "--role",
        action="append",
        required=True,
        dest="roles",
        help="admin, producer, worker or viewer; repeat for more",
    )
    create.add_argument(
        "--max-priority", default=None, help="low, medium, high or critical (default medium; admin: critical)"
    )
    _database_flag(create)
    _database_flag(key_commands.add_parser("list", help="list keys (never their secrets)"))
    revoke = key_commands.add_parser("revoke", help="revoke a key by name")
    revoke.add_argument("name")
    _database_flag(revoke)

    types_parser = commands.add_parser(
        "types",
        help="list, pause, resume, add and remove job types, straight in the database",
        description=(
            "Read and change the job types' flow controls (API.md section 9), and the types "
            "added at runtime (section 12), in the database itself, with no server needed: every "
            "server on the database obeys a pause from its next claim, and an added or removed "
            "type at its next request. The types are the server's allowlist: pass the same "
            f"--job-types (or ${env_name('job_types')}) as `serve` gets; the added types come "
            "from the database."
        ),
    )
    type_commands = types_parser.add_subparsers(
        dest="types_command", metavar="ACTION", parser_class=OneLineParser
    )
    type_commands.required = True
    _types_flags(type_commands.add_parser("list", help="each type: paused or not, RUNNING jobs, limits"))
    pause = type_commands.add_parser(
        "pause",
        help="claim no job of TYPE (on any server) until resumed or --until",
        description=(
            "No server claims a job of TYPE until `queuelog types resume TYPE`, or until --until. "
            "Enqueues are still accepted; RUNNING jobs go on and may complete."
        ),
    )
    pause.add_argument("type", metavar="TYPE")
    pause.add_argument(
        "--until",
        default=None,
        metavar="ISO-8601",
        help="end the pause by itself then, e.g. 2026-01-02T15:04:05Z (no offset: UTC)",
    )
    _types_flags(pause)
    resume = type_commands.add_parser("resume", help="let servers claim jobs of TYPE again")
    resume.add_argument("type", metavar="TYPE")
    _types_flags(resume)
    add = type_commands.add_parser(
        "add",
        help="add NAME to the allowlist of every server, without a restart",
        description=(
            "Add NAME (1 to 100 of A-Z a-z 0-9 _ . : -) to the job types every server on the "
            "database accepts, within a second, as the API's addJobType does (API.md section 12)."
        ),
    )
    add.add_argument("type", metavar="NAME")
    _types_flags(add)
    remove = type_commands.add_parser(
        "remove",
        help="remove a type added with `types add`: new enqueues of it are refused, its jobs stay",
        description=(
            "Remove a type added at runtime (`types add`, addJobType): servers refuse new enqueues "
            "of it; its jobs stay and can be claimed, listed and retried. A type of --job-types "
            f"(${env_name('job_types')}) cannot be removed this way, nor from a server that has it there."
        ),
    )
    remove.add_argument("type", metavar="NAME")
    _types_flags(remove)

    schedules_parser = commands.add_parser(
        "schedules",
        help="run a schedule's job now, straight in the database",
        description=(
            "Act on cron schedules (API.md sections 10 and 12) in the database itself, with no "
            "server needed, through the API's rules."
        ),
    )
    schedule_commands = schedules_parser.add_subparsers(
        dest="schedules_command", metavar="ACTION", parser_class=OneLineParser
    )
    schedule_commands.required = True
    run = schedule_commands.add_parser(
        "run",
        help="enqueue NAME's job now, outside its ticks (as runScheduleNow)",
        description=(
            "Enqueue the schedule's job now, with idempotency key NAME@manual-<unique>, even "
            "while it is paused and whatever its overlap; its ticks, last run and next run stay "
            "as they are. Its type must be allowed: pass the server's --job-types when the type "
            "is one of them."
        ),
    )
    run.add_argument("name", metavar="NAME")
    _types_flags(run)

    jobs_parser = commands.add_parser(
        "jobs",
        help="cancel a job or run it now, straight in the database (for operators in an incident)",
        description=(
            "Act on one job in the database itself, with no server needed, through the API's "
            "rules, as an ADMIN named cli:<os user> in the log."
        ),
    )
    job_commands = jobs_parser.add_subparsers(
        dest="jobs_command", metavar="ACTION", parser_class=OneLineParser
    )
    job_commands.required = True
    cancel = job_commands.add_parser(
        "cancel",
        help="cancel job ID, as cancelJob does",
        description=(
            "Cancel job ID as the API's cancelJob does for an ADMIN: a PENDING job at once; a "
            "RUNNING one is asked to stop, and ends CANCELLED when its worker stops, its lease "
            "expires or the grace passes."
        ),
    )
    cancel.add_argument("id", metavar="ID")
    cancel.add_argument(
        "--cancel-grace-seconds",
        default=None,
        metavar="SECONDS",
        help=(
            "how long a RUNNING job's worker has to stop (default: "
            f"${env_name('cancel_grace_seconds')} or {Settings.cancel_grace_seconds}, as `serve` takes it)"
        ),
    )
    _database_flag(cancel)
    run_now = job_commands.add_parser(
        "run-now",
        help="make PENDING job ID due now, as runJobNow does",
        description=(
            "Make PENDING job ID due now, as the API's runJobNow does for an ADMIN: it is still "
            "subject to its dependencies, pauses and limits."
        ),
    )
    run_now.add_argument("id", metavar="ID")
    _database_flag(run_now)

    worker = commands.add_parser(
        "worker",
        help="run job handlers from Python code",
        description=(
            f"Run job handlers from Python code. Give the WORKER key in ${API_KEY_VARIABLE}: "
            "every user of the host can read a --key flag in the process list (ps). Exits 0 "
            "after SIGTERM or SIGINT (running handlers get --grace seconds), and "
            f"{EXIT_KEY_REFUSED} when the server refuses the key (unknown, revoked, or without "
            "the WORKER role): restarting cannot help. An unreachable server is retried."
        ),
    )
    worker.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:8000")
    worker.add_argument(
        "--key",
        default=None,
        help=f"a WORKER key (default: ${API_KEY_VARIABLE}; prefer that: a flag's value shows in ps)",
    )
    worker.add_argument(
        "--handlers",
        required=True,
        metavar="MODULE:ATTR",
        help="a dict {job_type: handler} in an importable module",
    )
    worker.add_argument("--concurrency", type=int, default=4, help="handlers at once (default 4)")
    worker.add_argument(
        "--grace",
        type=float,
        default=30.0,
        help="seconds running handlers get to finish on SIGTERM (default 30)",
    )
    worker.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        type=str.lower,
        default=None,
        help=(
            f"text: messages and each job's JSON line on stderr; json: every job line and message "
            f"one JSON object per line on stdout (default: ${env_name('log_format')} or text)"
        ),
    )
    return parser


def _flag_bool(text: str) -> bool:
    value = parse_bool(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"{echo(text)} is not a boolean: use {BOOLEAN_FORMS}")
    return value


def _show_default(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value) or "(empty)"
    return str(value) or "(empty)"


def _database_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        default=None,
        help=f"default: ${env_name('database_url')} or {Settings.database_url}",
    )


def _types_flags(parser: argparse.ArgumentParser) -> None:
    _database_flag(parser)
    parser.add_argument(
        "--job-types",
        default=None,
        metavar="A,B",
        help=f"the allowed job types, as `serve` takes them (default: ${env_name('job_types')})",
    )
