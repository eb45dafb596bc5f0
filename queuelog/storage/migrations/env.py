"""Alembic environment: the caller hands over an open connection (see storage/migrate.py).
Each migration runs in a transaction of its own, unless the connection is in one already."""

from alembic import context

from queuelog.storage.schema.tables import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=True,
    transaction_per_migration=True,
)
with context.begin_transaction():
    context.run_migrations()
