"""The `queuelog` command (API.md section 6; `types`: section 11).

Every failure a user can cause (bad flags, unknown command, an unreachable database)
ends with one line on stderr (for `serve` and `worker` logging JSON: one JSON line on stdout)
and a non-zero exit, never a traceback: 2 for bad flags, 78 for a worker whose key the server
refuses, 1 for the rest. A graceful stop (SIGTERM, SIGINT) exits 0.

One module per command (serve, worker, keys, job_types, incident), beside the parser, the
database they open, how they act on the queue (as_operator) and how they fail (errors).
SQLAlchemy, Alembic and the server are imported by the commands that use them, so that
`queuelog worker` (which needs none of them) starts quickly.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from queuelog import logformat
from queuelog.cli.api_keys import cmd_keys
from queuelog.cli.as_operator import parse_until
from queuelog.cli.database import cmd_migrate, open_migrated
from queuelog.cli.errors import (
    EXIT_KEY_REFUSED,
    CommandError,
    first_line,
    is_database_error,
    report_error,
)
from queuelog.cli.incident import cmd_jobs, cmd_schedules
from queuelog.cli.job_types import cmd_types
from queuelog.cli.parser import build_parser
from queuelog.cli.serve import SHUTDOWN_GRACE_SECONDS, cmd_copy_database, cmd_serve
from queuelog.cli.worker import cmd_worker, load_handlers
from queuelog.errors import DatabaseUnavailable, QueuelogError
from queuelog.settings import SettingsError

__all__ = [
    "EXIT_KEY_REFUSED",
    "SHUTDOWN_GRACE_SECONDS",
    "CommandError",
    "build_parser",
    "load_handlers",
    "main",
    "open_migrated",
    "parse_until",
]


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
        report_error(args, str(exc))
        return exc.exit_code if isinstance(exc, CommandError) else 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the last guard: never a traceback on a user's terminal
        if is_database_error(exc):
            report_error(args, f"database error: {first_line(exc)}")
            return 1
        report_error(args, f"unexpected {type(exc).__name__}: {first_line(exc)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
