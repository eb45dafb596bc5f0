"""The `queuelog` command (API.md section 6; `types`: section 11).

Every failure a user can cause (bad flags, unknown command, an unreachable database)
ends with one line on stderr (for `serve` and `worker` logging JSON: one JSON line on stdout)
and a non-zero exit, never a traceback: 2 for bad flags, 78 for a worker whose key the server
refuses, 1 for the rest. A graceful stop (SIGTERM, SIGINT) exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NoReturn, TypeVar

from queuelog import logformat
from queuelog.errors import DatabaseUnavailable, QueuelogError, echo
from queuelog.settings import (
    BOOLEAN_FORMS,
    LOG_FORMATS,
    Settings,
    SettingsError,
    env_name,
    field_kind,
    parse_bool,
    public_fields,
)

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from queuelog.auth import Principal
    from queuelog.model import TypeControl
    from queuelog.queue import JobQueue
    from queuelog.worker import Handler

T = TypeVar("T")
serve_log = logging.getLogger("queuelog.serve")
cli_log = logging.getLogger("queuelog.cli")

# SQLAlchemy, Alembic and the server are imported by the commands that use them, so that
# `queuelog worker` (which needs none of them) starts quickly.

PROG = "queuelog"
API_KEY_VARIABLE = "QUEUELOG_API_KEY"  # queuelog.client's, named here without importing httpx
SHUTDOWN_GRACE_SECONDS = 5
# Settings whose flags would show a secret to anyone running `ps` on the host.
SECRET_SETTINGS = frozenset({"metrics_token"})
# What a setting's flag help says beyond its default.
SETTING_HELP = {
    "log_format": "text, or json: every log record one JSON object per line on stdout",
}
SETTING_METAVAR = {"log_format": "{text,json}"}
# `queuelog worker`'s exit status when the server refuses its key (unknown, revoked, or without
# the WORKER role): sysexits.h's EX_CONFIG. Restarting cannot help, so a supervisor may stop
# on it (systemd: RestartPreventExitStatus=78).
EXIT_KEY_REFUSED = 78
# Which roles may enqueue, and so have a max priority that means something (API.md section 2).
ENQUEUING_ROLES = frozenset({"ADMIN", "PRODUCER"})


class CommandError(Exception):
    """A user-facing failure: printed as one line, exit status `exit_code`."""

    exit_code = 1


class KeyRefusedError(CommandError):
    """The server refused the worker's key: a configuration error."""

    exit_code = EXIT_KEY_REFUSED


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


def _database_url(args: argparse.Namespace) -> str:
    if args.database_url:
        return args.database_url
    return os.environ.get(env_name("database_url"), Settings.database_url)


def open_migrated(url: str) -> Engine:
    from sqlalchemy.exc import SQLAlchemyError

    from queuelog.storage.engine import create_sync_engine, dialect_of
    from queuelog.storage.migrate import upgrade_to_head

    if dialect_of(url) not in ("sqlite", "postgresql"):
        raise CommandError(f"unsupported database URL {echo(url)}: use sqlite:/// or postgresql://")
    engine = create_sync_engine(url)
    try:
        upgrade_to_head(engine)
    except SQLAlchemyError as exc:
        engine.dispose()
        raise CommandError(f"cannot open the database at {_safe_url(url)}: {_first_line(exc)}") from None
    return engine


def _safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "(unparseable URL)"


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()
    return text[0] if text else type(orig).__name__


# --- commands ------------------------------------------------------------------------------


def cmd_migrate(args: argparse.Namespace) -> None:
    url = _database_url(args)
    open_migrated(url).dispose()
    print(f"database at {_safe_url(url)} is at the current schema")


def cmd_keys(args: argparse.Namespace) -> None:
    from queuelog import keys

    engine = open_migrated(_database_url(args))
    try:
        if args.keys_command == "create":
            roles = [keys.parse_role(r) for r in args.roles]
            priority = keys.parse_priority(args.max_priority) if args.max_priority else None
            record, plaintext = keys.create_key(engine, args.name, roles, priority)
            role_names = sorted(r.value for r in record.roles)
            priority_text = _max_priority(role_names, record.max_priority.name)
            shown = "" if priority_text == "-" else f", max priority {priority_text}"
            roles_text = ",".join(role_names)
            print(f"created key {record.name!r} (roles {roles_text}{shown}); it is shown only once:")
            print(plaintext)
        elif args.keys_command == "list":
            print(f"{'NAME':<24} {'ROLES':<28} {'MAX PRIORITY':<13} {'CREATED':<20} STATUS")
            for key in keys.list_keys(engine):
                status = "revoked" if key.revoked_at else "active"
                role_names = sorted(r.value for r in key.roles)
                print(
                    f"{key.name:<24} {','.join(role_names):<28} "
                    f"{_max_priority(role_names, key.max_priority.name):<13} "
                    f"{key.created_at:%Y-%m-%d %H:%M:%S}  {status}"
                )
        else:
            keys.revoke_key(engine, args.name)
            print(f"revoked key {args.name!r}")
    finally:
        engine.dispose()


def _max_priority(role_names: Sequence[str], priority: str) -> str:
    """A key's max priority as listed: "-" for a key that may not enqueue (WORKER, VIEWER)."""
    return priority if ENQUEUING_ROLES.intersection(role_names) else "-"


# --- types (flow control) -----------------------------------------------------------------


def _types_settings(args: argparse.Namespace) -> Settings:
    """The database URL, and the settings the command takes a flag for (--job-types,
    --cancel-grace-seconds), as `serve` reads them: a flag, else the variable. Only those:
    another variable's mistake must not stop an operator in an incident. The allowlist here is
    the server's: it is completed by the types added at runtime, which the database holds."""
    names = ["database_url", *(name for name in ("job_types", "cancel_grace_seconds") if name in args)]
    environ = {
        env_name(name): value for name in names if (value := os.environ.get(env_name(name))) is not None
    }
    if args.database_url:
        environ[env_name("database_url")] = args.database_url
    for name in names[1:]:
        if getattr(args, name) is not None:  # --job-types "" allows no type
            environ[env_name(name)] = getattr(args, name)
    return Settings.from_env(environ)


NO_JOB_TYPES = (
    f"no job types: pass --job-types a,b or set {env_name('job_types')}, as the server has them"
    f" (or add one with `{PROG} types add NAME`)"
)


def parse_until(text: str, now: datetime) -> datetime:
    """--until's ISO-8601 time, in UTC as the API takes it (without an offset it is UTC); it
    must be in the future."""
    from queuelog.queue import as_utc

    try:
        moment = as_utc(datetime.fromisoformat(text.strip()), "--until")
    except ValueError:
        raise CommandError(
            f"--until takes an ISO-8601 time such as 2026-01-02T15:04:05Z, not {echo(text)}"
        ) from None
    if moment <= now:
        raise CommandError(f"--until {_utc(moment)} is not in the future (it is now {_utc(now)})")
    return moment


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cli_principal() -> Principal:
    """Who the CLI acts as: `cli:<os user>`, as the queue's log lines name it, with ADMIN's
    rights (whoever can open the database may change anything in it)."""
    from queuelog.auth import Principal
    from queuelog.model import Priority, Role

    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry (some containers)
        user = f"uid-{os.getuid()}"
    return Principal(name=f"cli:{user}", roles=frozenset({Role.ADMIN}), max_priority=Priority.CRITICAL)


def _with_queue(settings: Settings, work: Callable[[JobQueue], Awaitable[T]]) -> T:
    """Run `work` on a JobQueue over the database, so that the CLI's writes pass the API's
    rules (allowlist, validation, log line, wake-up) and every server's next claim reads them.
    The database is migrated first, as by `keys`; a SQLite file that does not exist is
    refused rather than created (a mistyped path would otherwise show every type unpaused,
    and pause nothing real)."""
    from queuelog.queue import JobQueue
    from queuelog.retry_policy import RetryPolicy
    from queuelog.storage.engine import dialect_of, sqlite_file
    from queuelog.storage.repository import Repository
    from queuelog.wakeup import WorkSignal

    url = settings.database_url
    if dialect_of(url) == "sqlite":
        path = sqlite_file(url)
        if path is None or not os.path.exists(path):
            raise CommandError(f"no database at {_safe_url(url)}: give the file the server uses")
    open_migrated(url).dispose()

    async def run() -> T:
        # "local": this process only writes and reads; it hears no other process's events.
        repository = Repository(url, RetryPolicy(1, 1), "local")
        try:
            return await work(JobQueue(settings, repository, WorkSignal()))
        finally:
            await repository.close()

    return asyncio.run(run())


def describe_state(control: TypeControl, now: datetime) -> str:
    if not control.paused_at(now):
        return "active"
    if control.paused_until is None:
        return "PAUSED"
    return f"PAUSED until {_utc(control.paused_until)}"


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


def describe_rate(control: TypeControl) -> str:
    rate = control.rate_limit
    if rate is None:
        return "-"
    return f"{rate.limit}/{rate.period_seconds}s" + (" per key" if rate.per_key else "")


def types_table(controls: Sequence[TypeControl], now: datetime) -> list[str]:
    """`types list`: a header and one line per type, in columns."""
    rows = [("TYPE", "STATE", "RUNNING", "MAX RUNNING", "PER KEY", "RATE LIMIT", "TIMEOUT")]
    for c in controls:
        timeout = "-" if c.timeout_seconds is None else f"{c.timeout_seconds}s"
        rows.append(
            (
                c.type,
                describe_state(c, now),
                str(c.running),
                _limit(c.max_running),
                _limit(c.max_running_per_key),
                describe_rate(c),
                timeout,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def cmd_types(args: argparse.Namespace) -> None:
    settings = _types_settings(args)
    now = datetime.now(UTC)
    if args.types_command == "list":
        controls = _with_queue(settings, lambda queue: queue.type_controls())
        if not controls:
            raise CommandError(NO_JOB_TYPES)
        for line in types_table(controls, now):
            print(line)
        return
    job_type = args.type
    actor = cli_principal()
    if args.types_command in ("add", "remove"):
        change_types(settings, args.types_command, job_type)
        return
    if args.types_command == "pause":
        until = parse_until(args.until, now) if args.until is not None else None

        async def pause(queue: JobQueue) -> tuple[bool, TypeControl]:
            was_paused = _paused(await _type_controls(queue), job_type, now)
            return was_paused, await queue.pause_type(actor, job_type, until)

        was_paused, control = _with_queue(settings, pause)
        if control.paused_until is not None:
            how = f"until {_utc(control.paused_until)} (or `{PROG} types resume {job_type}`)"
        else:
            how = f"until `{PROG} types resume {job_type}`"
        again = " (it was already paused)" if was_paused else ""
        print(
            f"paused job type {job_type!r}{again}: no server claims its jobs {how}; "
            f"enqueues are still accepted, and its {control.running} RUNNING job(s) go on"
        )
        return

    async def resume(queue: JobQueue) -> tuple[bool, TypeControl]:
        was_paused = _paused(await _type_controls(queue), job_type, now)
        return was_paused, await queue.resume_type(actor, job_type)

    was_paused, control = _with_queue(settings, resume)
    if was_paused:
        print(f"resumed job type {job_type!r}: servers claim its jobs again ({control.running} RUNNING now)")
    else:
        print(f"job type {job_type!r} was not paused; nothing changed ({control.running} RUNNING now)")


def _paused(controls: Sequence[TypeControl], job_type: str, now: datetime) -> bool:
    return any(c.type == job_type and c.paused_at(now) for c in controls)


async def _type_controls(queue: JobQueue) -> list[TypeControl]:
    """Every allowed type's controls; none allowed at all is the operator's mistake."""
    controls = await queue.type_controls()
    if not controls:
        raise CommandError(NO_JOB_TYPES)
    return controls


def change_types(settings: Settings, action: str, job_type: str) -> None:
    """`types add` and `types remove`, as addJobType and removeJobType."""
    actor = cli_principal()
    if action == "add":
        was = _with_queue(settings, lambda queue: _add_type(queue, actor, job_type))
        if was == "added":
            print(f"job type {job_type!r} was added already; nothing changed")
        else:
            also = " (it is in --job-types here too)" if was == "configured" else ""
            print(f"added job type {job_type!r}{also}: every server on the database accepts it at once")
        return
    if _with_queue(settings, lambda queue: queue.remove_job_type(actor, job_type)):
        print(
            f"removed job type {job_type!r}: servers refuse new enqueues of it, but for those whose own"
            " job types name it; its jobs stay, and can still be claimed, listed and retried"
        )
    else:
        print(f"job type {job_type!r} was not added at runtime; nothing changed")


async def _add_type(queue: JobQueue, actor: Principal, job_type: str) -> str:
    """Add the type; what it was before: "added", "configured" (in --job-types) or "new"."""
    await queue.allowlist.current()
    was = "added" if job_type in queue.allowlist.added else "new"
    if was == "new" and job_type in queue.allowlist.configured:
        was = "configured"
    await queue.add_job_type(actor, job_type)
    return was


# --- schedules and jobs (operators in an incident) -----------------------------------------


def cmd_schedules(args: argparse.Namespace) -> None:
    from queuelog.errors import BadInput

    settings = _types_settings(args)
    try:
        job = _with_queue(settings, lambda queue: queue.run_schedule_now(cli_principal(), args.name))
    except BadInput as refusal:
        if settings.job_types:
            raise
        raise CommandError(
            f"{refusal.message}; here the allowlist is the types added at runtime alone:"
            f" pass --job-types a,b (or set {env_name('job_types')}) as the server has them"
        ) from None
    print(
        f"enqueued job {job.id} ({job.type}) of schedule {args.name!r} now, idempotency key"
        f" {job.idempotency_key}; its ticks go on as before"
    )


def cmd_jobs(args: argparse.Namespace) -> None:
    from queuelog.model import JobStatus
    from queuelog.resolvers.ids import parse_job_id

    job_id = parse_job_id(args.id.strip(), "ID")
    settings = _types_settings(args)
    actor = cli_principal()
    # The API's cancelJob and runJobNow log nothing (producers steer their own jobs all day);
    # an operator's action outside the API is logged, naming them.
    if args.jobs_command == "run-now":
        job = _with_queue(settings, lambda queue: queue.run_job_now(actor, job_id))
        cli_log.info("job %d (%s) run now by %s", job.id, job.type, actor.name)
        print(f"job {job.id} ({job.type}) is due now, {_utc(job.run_at)}")
        return
    job = _with_queue(settings, lambda queue: queue.cancel(actor, job_id))
    cli_log.info("job %d (%s) cancel by %s: %s", job.id, job.type, actor.name, job.status.name)
    if job.status is JobStatus.CANCELLED:
        print(f"cancelled job {job.id} ({job.type})")
    elif job.cancel_requested:
        print(
            f"cancel requested for job {job.id} ({job.type}), {job.status.name}: its worker is told,"
            " and it ends CANCELLED when the worker stops, its lease expires or the grace passes"
        )
    else:  # pragma: no cover - cancel answers a job cancelled or asked to be
        print(f"job {job.id} ({job.type}) is {job.status.name}")


def cmd_copy_database(args: argparse.Namespace) -> None:
    from queuelog.storage import copy

    copy.check_urls(args.source, args.target)
    target = open_migrated(args.target)  # first: an unreachable target leaves the source as it is
    try:
        source = open_migrated(args.source)
        try:
            copied = copy.copy_database(source, target, replace=args.replace)
        finally:
            source.dispose()
    finally:
        target.dispose()
    rows = copied.rows
    print(
        f"copied {rows['jobs']} jobs, {rows['job_events']} job events, {rows['api_keys']} API keys, "
        f"{rows['type_controls']} type controls and {rows['schedules']} schedules "
        f"to {_safe_url(args.target)}; new jobs start at id {copied.next_job_id}"
    )


def cmd_serve(args: argparse.Namespace) -> None:
    import uvicorn

    from queuelog import keys

    overrides = {f.name: getattr(args, f.name) for f in public_fields()}
    raw = {k: v for k, v in overrides.items() if v is not None and not isinstance(v, bool)}
    settings = Settings.from_env(
        {**os.environ, **{env_name(k): str(v) for k, v in raw.items()}},
        **{k: v for k, v in overrides.items() if isinstance(v, bool)},
    )
    if args.workers < 1:
        raise CommandError("--workers must be at least 1")
    as_json = settings.log_format == "json"
    if as_json:
        logformat.configure("json")
    engine = open_migrated(settings.database_url)
    try:
        created = keys.bootstrap_admin(engine)
    finally:
        engine.dispose()
    if created is not None:
        record, plaintext = created
        if as_json:
            serve_log.warning(
                "This database had never had an API key, so an ADMIN key named %r was created. It is"
                " shown only this once, as admin_key: store it now",
                record.name,
                extra={"admin_key": plaintext},
            )
        else:
            print(
                f"This database had never had an API key, so an ADMIN key named {record.name!r} was created."
            )
            print("It is shown only this once; store it now:")
            print(f"\n    {plaintext}\n", flush=True)
    notes = []
    if not settings.job_types:
        notes.append(
            f"note: {env_name('job_types')} is empty, so only the types an ADMIN adds at runtime"
            f" (addJobType, `{PROG} types add NAME`) can be enqueued; pass --job-types a,b to allow"
            " job types."
        )
    base = f"http://{args.host}:{args.port}"
    notes.append(f"queuelog serving {_safe_url(settings.database_url)} on {base}")
    if settings.dashboard:
        notes.append(f"Dashboard: open {base}/ and enter a key")
    if settings.graphiql:
        notes.append(f"GraphiQL: open {base}/graphql and enter a key in its key box")
    for note in notes:
        if as_json:
            serve_log.info(note)
        else:
            print(note, flush=True)
    os.environ.update(settings.to_env())
    log_config = logformat.uvicorn_log_config(settings.log_format)
    if args.workers == 1:
        # uvicorn stops gracefully on SIGTERM, then raises the signal again under the handler it
        # found: Python's default would end the process by the signal (exit status 143).
        signal.signal(signal.SIGTERM, _exit_stopped)
    uvicorn.run(
        "queuelog.app:create_app_from_env",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers if args.workers > 1 else None,
        log_level=args.log_level,
        proxy_headers=False,
        # API.md section 1: a websocket message larger than the body limit is not parsed (1009).
        ws_max_size=settings.max_body_bytes,
        # Long-polling claims may wait 30 s; do not let them hold a shutdown that long.
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
        log_config=log_config,
    )


def _exit_stopped(signum: int, frame: object) -> None:
    """SIGTERM outside uvicorn's own handler: before it serves (nothing to stop yet), or raised
    again by uvicorn once it has stopped gracefully. Either way a stop, not a failure: exit 0."""
    raise SystemExit(0)


def load_handlers(spec: str) -> dict[str, Handler]:
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CommandError(f"--handlers takes module:attr, not {echo(spec)}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CommandError(f"cannot import {echo(module_name)}: {exc}") from None
    handlers = getattr(module, attr, None)
    if not isinstance(handlers, dict) or not handlers:
        raise CommandError(f"{spec} must be a non-empty dict {{job_type: handler}}")
    bad = [name for name, handler in handlers.items() if not callable(handler)]
    if bad:
        raise CommandError(f"handlers for {', '.join(map(str, bad))} are not callable")
    return handlers


def worker_key(given: str | None) -> str:
    """--key, else $QUEUELOG_API_KEY."""
    from queuelog.client import MissingKey, resolve_key

    try:
        return resolve_key(given)
    except MissingKey:
        raise CommandError(f"no API key: set {API_KEY_VARIABLE} (or pass --key, which ps shows)") from None


def worker_log_format(given: str | None) -> str:
    """--log-format, else $QUEUELOG_LOG_FORMAT, else text."""
    chosen = (given or os.environ.get(env_name("log_format")) or "text").strip().lower()
    if chosen not in LOG_FORMATS:
        raise CommandError(
            f"{env_name('log_format')} must be one of {', '.join(LOG_FORMATS)}, not {echo(chosen)}"
        )
    return chosen


# What to do about a refused key, by the server's code (the worker's message says what happened).
KEY_REFUSED_HINTS = {
    "UNAUTHENTICATED": f"check --key or ${API_KEY_VARIABLE}",
    "FORBIDDEN": f"make one with `{PROG} keys create --name NAME --role worker`",
}


def cmd_worker(args: argparse.Namespace) -> None:
    from queuelog.worker import KeyRefused, Worker

    log_format = worker_log_format(args.log_format)
    if log_format == "json":
        logformat.configure("json")
    if args.concurrency < 1:
        raise CommandError("--concurrency must be at least 1")
    if args.grace < 0:
        raise CommandError("--grace must not be negative")
    key = worker_key(args.key)
    handlers = load_handlers(args.handlers)
    types = ", ".join(sorted(handlers))
    banner = f"queuelog worker: {types} from {args.url} (concurrency {args.concurrency})"
    if log_format == "json":
        logging.getLogger("queuelog.worker").info(banner)
    else:
        print(banner, file=sys.stderr, flush=True)
    worker = Worker(args.url, key, handlers, concurrency=args.concurrency, grace=args.grace)
    try:
        worker.run_forever(log_format=log_format)
    except KeyRefused as exc:
        hint = KEY_REFUSED_HINTS.get(exc.code)
        raise KeyRefusedError(f"{exc}; {hint}" if hint else str(exc)) from None


def _is_database_error(exc: BaseException) -> bool:
    return any(cls.__module__.startswith("sqlalchemy") for cls in type(exc).__mro__)


def main(argv: Sequence[str] | None = None) -> int:
    if not logging.getLogger().handlers:  # as logging.basicConfig: a caller's own logging stays
        logformat.configure("text")
    for name in logformat.QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    parser = build_parser()
    args = parser.parse_args(argv)
    handlers = {
        "serve": cmd_serve,
        "migrate": cmd_migrate,
        "copy-database": cmd_copy_database,
        "keys": cmd_keys,
        "types": cmd_types,
        "schedules": cmd_schedules,
        "jobs": cmd_jobs,
        "worker": cmd_worker,
    }
    try:
        handlers[args.command](args)
    except (CommandError, QueuelogError, SettingsError, DatabaseUnavailable) as exc:
        _error(args, str(exc))
        return exc.exit_code if isinstance(exc, CommandError) else 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the last guard: never a traceback on a user's terminal
        if _is_database_error(exc):
            _error(args, f"database error: {_first_line(exc)}")
            return 1
        _error(args, f"unexpected {type(exc).__name__}: {_first_line(exc)}")
        return 1
    return 0


def _error(args: argparse.Namespace, message: str) -> None:
    """The one line a failed command ends with: on stderr, or (`serve` and `worker` logging
    JSON) a JSON log line on stdout, among the others."""
    chosen = getattr(args, "log_format", None) or os.environ.get(env_name("log_format"), "")
    if args.command in ("serve", "worker") and chosen.strip().lower() == "json":
        print(logformat.json_line("error", PROG, message), flush=True)
    else:
        print(f"{PROG}: error: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
