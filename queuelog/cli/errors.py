"""How a command fails: one line on stderr (or a JSON log line), an exit status, never a traceback."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from queuelog import logformat
from queuelog.settings import (
    env_name,
)

if TYPE_CHECKING:
    pass
PROG = "queuelog"
# `queuelog worker`'s exit status when the server refuses its key (unknown, revoked, or without
# the WORKER role): sysexits.h's EX_CONFIG. Restarting cannot help, so a supervisor may stop
# on it (systemd: RestartPreventExitStatus=78).
EXIT_KEY_REFUSED = 78


class CommandError(Exception):
    """A user-facing failure: printed as one line, exit status `exit_code`."""

    exit_code = 1


class KeyRefusedError(CommandError):
    """The server refused the worker's key: a configuration error."""

    exit_code = EXIT_KEY_REFUSED


def is_database_error(exc: BaseException) -> bool:
    return any(cls.__module__.startswith("sqlalchemy") for cls in type(exc).__mro__)


def first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()
    return text[0] if text else type(orig).__name__


def report_error(args: argparse.Namespace, message: str) -> None:
    """The one line a failed command ends with: on stderr, or (`serve` and `worker` logging
    JSON) a JSON log line on stdout, among the others."""
    chosen = getattr(args, "log_format", None) or os.environ.get(env_name("log_format"), "")
    if args.command in ("serve", "worker") and chosen.strip().lower() == "json":
        print(logformat.json_line("error", PROG, message), flush=True)
    else:
        print(f"{PROG}: error: {message}", file=sys.stderr)
