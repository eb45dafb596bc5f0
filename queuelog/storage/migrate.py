"""Alembic owns the schema: `upgrade_to_head` is what `serve`, `migrate` and `keys` run."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATION_LOCK = 0x71756575  # "queu": the advisory lock that serialises migrations
MIGRATION_LOCK_POLL_SECONDS = 0.1
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# The newest migration's revision (tests/storage/test_migrations.py checks it is alembic's head).
HEAD_REVISION = "0017"


def alembic_config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def is_at_head(engine: Engine) -> bool:
    """Whether the database's schema is already the newest, read without alembic."""
    try:
        with engine.connect() as connection:
            stored = connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalars().all()
    except SQLAlchemyError:  # no schema yet: alembic says what else is wrong, if anything
        return False
    return stored == [HEAD_REVISION]


def upgrade_to_head(engine: Engine) -> None:
    # Importing alembic costs about a second of CPU: every CLI call and every server start
    # paid it, though the database is nearly always at head already.
    if is_at_head(engine):
        return
    from alembic import command

    run_migrations(engine, command.upgrade, "head")


def run_migrations(engine: Engine, action: Callable[[Config, str], None], target: str) -> None:
    """Alembic's `action` (command.upgrade or command.downgrade) to `target`, each migration
    in a transaction of its own (env.py), so that a migration can run what no transaction
    may hold: CREATE INDEX CONCURRENTLY, in `op.get_context().autocommit_block()`.

    On PostgreSQL, servers starting together migrate one after the other: each holds
    MIGRATION_LOCK on its session throughout (a transaction's lock would end with the first
    migration's commit). The lock is tried, not waited for: a session waiting in
    pg_advisory_lock holds a snapshot, and CREATE INDEX CONCURRENTLY waits for every older
    snapshot to end, so the builder and the waiter would each wait for the other."""
    config = alembic_config()
    with engine.connect() as connection:
        locking = connection.dialect.name == "postgresql"
        if locking:
            _take_migration_lock(connection)
        try:
            config.attributes["connection"] = connection
            action(config, target)
        finally:
            if locking:
                connection.rollback()
                connection.exec_driver_sql(f"SELECT pg_advisory_unlock({MIGRATION_LOCK})")
                connection.commit()


def _take_migration_lock(connection: Connection) -> None:
    while not connection.exec_driver_sql(f"SELECT pg_try_advisory_lock({MIGRATION_LOCK})").scalar():
        connection.commit()  # no transaction, hence no snapshot, while waiting
        time.sleep(MIGRATION_LOCK_POLL_SECONDS)
    connection.commit()
