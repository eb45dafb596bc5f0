"""Alembic owns the schema: `upgrade_to_head` is what `serve`, `migrate` and `keys` run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATION_LOCK = 0x71756575  # "queu": the advisory lock that serialises migrations
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# The newest migration's revision (tests/test_migrations.py checks it is alembic's head).
HEAD_REVISION = "0010"


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

    config = alembic_config()
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            # Servers starting together on one database migrate one after the other.
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK})")
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
