"""How the CLI acts on the queue: as `cli:<os user>` with ADMIN's rights, through a JobQueue
over the database, so that the API's rules apply to every change."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

from queuelog.cli.database import open_migrated, safe_url
from queuelog.cli.errors import PROG, CommandError
from queuelog.errors import echo
from queuelog.settings import (
    Settings,
    env_name,
)

if TYPE_CHECKING:
    from queuelog.auth import Principal
    from queuelog.queue import JobQueue
T = TypeVar("T")


def operator_settings(args: argparse.Namespace) -> Settings:
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
    from queuelog.queue.checks import as_utc

    try:
        moment = as_utc(datetime.fromisoformat(text.strip()), "--until")
    except ValueError:
        raise CommandError(
            f"--until takes an ISO-8601 time such as 2026-01-02T15:04:05Z, not {echo(text)}"
        ) from None
    if moment <= now:
        raise CommandError(f"--until {utc_text(moment)} is not in the future (it is now {utc_text(now)})")
    return moment


def utc_text(moment: datetime) -> str:
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


def with_queue(settings: Settings, work: Callable[[JobQueue], Awaitable[T]]) -> T:
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
            raise CommandError(f"no database at {safe_url(url)}: give the file the server uses")
    open_migrated(url).dispose()

    async def run() -> T:
        # "local": this process only writes and reads; it hears no other process's events.
        repository = Repository(url, RetryPolicy(1, 1), "local")
        try:
            return await work(JobQueue(settings, repository, WorkSignal()))
        finally:
            await repository.close()

    return asyncio.run(run())
