"""The `queuelog` command (API.md section 6).

Every failure a user can cause (bad flags, unknown command, an unreachable database)
ends with one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from queuelog.errors import DatabaseUnavailable, QueuelogError
from queuelog.settings import Settings, SettingsError, env_name, field_kind, public_fields

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from queuelog.worker import Handler

# SQLAlchemy, Alembic and the server are imported by the commands that use them, so that
# `queuelog worker` (which needs none of them) starts quickly.

PROG = "queuelog"
API_KEY_VARIABLE = "QUEUELOG_API_KEY"  # queuelog.client's, named here without importing httpx
SHUTDOWN_GRACE_SECONDS = 5
# Settings whose flags would show a secret to anyone running `ps` on the host.
SECRET_SETTINGS = frozenset({"metrics_token"})


class CommandError(Exception):
    """A user-facing failure: printed as one line, exit status 1."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description="A persistent job queue served as a GraphQL API.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    commands.required = True

    serve = commands.add_parser("serve", help="migrate the database, then serve the API")
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
        if f.name in SECRET_SETTINGS:
            help_text += f"; prefer ${env_name(f.name)}: a flag's value shows in ps"
        if kind is bool:
            serve.add_argument(
                flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        else:
            serve.add_argument(flag, dest=f.name, default=None, metavar=f.name.upper(), help=help_text)

    migrate = commands.add_parser("migrate", help="bring the database to the current schema")
    _database_flag(migrate)

    copy = commands.add_parser(
        "copy-database",
        help="copy a SQLite queue (jobs, events, keys) into an empty PostgreSQL database",
        description=(
            "Copy every job (same ids, statuses, timestamps, payloads and results), its events "
            "and every API key (revoked ones stay revoked) from a SQLite database into a "
            "PostgreSQL one, in one transaction: if anything fails, the target is left as it "
            "was. Both are migrated to the current schema first; the source is otherwise only "
            "read. Stop every server on both databases first: the copy holds SQLite's write "
            "lock while it reads, but whatever a server writes afterwards is not copied."
        ),
    )
    copy.add_argument("--from", dest="source", required=True, metavar="SQLITE_URL", help="sqlite:///PATH")
    copy.add_argument("--to", dest="target", required=True, metavar="POSTGRES_URL", help="postgresql://...")
    copy.add_argument(
        "--replace",
        action="store_true",
        help="delete the jobs, events and keys the target holds (else it must hold none)",
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

    worker = commands.add_parser(
        "worker",
        help="run job handlers from Python code",
        description=(
            f"Run job handlers from Python code. Give the WORKER key in ${API_KEY_VARIABLE}: "
            "every user of the host can read a --key flag in the process list (ps)."
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
    return parser


def _show_default(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(value) or "(empty)"
    return str(value) or "(empty)"


def _database_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        default=None,
        help=f"default: ${env_name('database_url')} or {Settings.database_url}",
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
        raise CommandError(f"unsupported database URL {url!r}: use sqlite:/// or postgresql://")
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
            role_names = ",".join(sorted(r.value for r in record.roles))
            print(
                f"created key {record.name!r} (roles {role_names}, max priority "
                f"{record.max_priority.name}); it is shown only once:"
            )
            print(plaintext)
        elif args.keys_command == "list":
            print(f"{'NAME':<24} {'ROLES':<28} {'MAX PRIORITY':<13} {'CREATED':<20} STATUS")
            for key in keys.list_keys(engine):
                status = "revoked" if key.revoked_at else "active"
                print(
                    f"{key.name:<24} {','.join(sorted(r.value for r in key.roles)):<28} "
                    f"{key.max_priority.name:<13} {key.created_at:%Y-%m-%d %H:%M:%S}  {status}"
                )
        else:
            keys.revoke_key(engine, args.name)
            print(f"revoked key {args.name!r}")
    finally:
        engine.dispose()


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
        f"copied {rows['jobs']} jobs, {rows['job_events']} job events and {rows['api_keys']} API keys "
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
    engine = open_migrated(settings.database_url)
    try:
        created = keys.bootstrap_admin(engine)
    finally:
        engine.dispose()
    if created is not None:
        record, plaintext = created
        print(f"No active API key existed, so an ADMIN key named {record.name!r} was created.")
        print("It is shown only this once; store it now:")
        print(f"\n    {plaintext}\n", flush=True)
    if not settings.job_types:
        print(
            f"note: {env_name('job_types')} is empty, so every enqueue is refused; "
            "pass --job-types a,b to allow job types."
        )
    base = f"http://{args.host}:{args.port}"
    print(f"queuelog serving {_safe_url(settings.database_url)} on {base}")
    if settings.dashboard:
        print(f"Dashboard: open {base}/ and enter a key", flush=True)
    if settings.graphiql:
        print(f"GraphiQL: open {base}/graphql and enter a key in its key box", flush=True)
    os.environ.update(settings.to_env())
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
    )


def load_handlers(spec: str) -> dict[str, Handler]:
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CommandError(f"--handlers takes module:attr, not {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CommandError(f"cannot import {module_name!r}: {exc}") from None
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


def cmd_worker(args: argparse.Namespace) -> None:
    from queuelog.worker import Worker

    if args.concurrency < 1:
        raise CommandError("--concurrency must be at least 1")
    if args.grace < 0:
        raise CommandError("--grace must not be negative")
    key = worker_key(args.key)
    handlers = load_handlers(args.handlers)
    print(
        f"queuelog worker: {', '.join(sorted(handlers))} from {args.url} (concurrency {args.concurrency})",
        file=sys.stderr,
        flush=True,
    )
    Worker(args.url, key, handlers, concurrency=args.concurrency, grace=args.grace).run_forever()


def _is_database_error(exc: BaseException) -> bool:
    return any(cls.__module__.startswith("sqlalchemy") for cls in type(exc).__mro__)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    parser = build_parser()
    args = parser.parse_args(argv)
    handlers = {
        "serve": cmd_serve,
        "migrate": cmd_migrate,
        "copy-database": cmd_copy_database,
        "keys": cmd_keys,
        "worker": cmd_worker,
    }
    try:
        handlers[args.command](args)
    except (CommandError, QueuelogError, SettingsError, DatabaseUnavailable) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the last guard: never a traceback on a user's terminal
        if _is_database_error(exc):
            print(f"{PROG}: error: database error: {_first_line(exc)}", file=sys.stderr)
            return 1
        print(f"{PROG}: error: unexpected {type(exc).__name__}: {_first_line(exc)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
