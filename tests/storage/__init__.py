"""The database layer: migrations, statements and their plans, counters, write batches, and
what is particular to SQLite or PostgreSQL."""
