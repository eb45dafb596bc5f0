"""Alembic environment: the caller hands over an open connection (see storage/migrate.py)."""

from alembic import context

from queuelog.storage.tables import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
