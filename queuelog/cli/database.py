"""The database a command opens: its URL (flag, variable, default), migrated to the current schema."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from queuelog.cli.errors import CommandError, first_line
from queuelog.errors import echo
from queuelog.settings import (
    Settings,
    env_name,
)

if TYPE_CHECKING:
    from sqlalchemy import Engine


def database_url(args: argparse.Namespace) -> str:
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
        raise CommandError(f"cannot open the database at {safe_url(url)}: {first_line(exc)}") from None
    return engine


def safe_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "(unparseable URL)"


def cmd_migrate(args: argparse.Namespace) -> None:
    url = database_url(args)
    open_migrated(url).dispose()
    print(f"database at {safe_url(url)} is at the current schema")
