"""Persistence: tables, migrations and the repository. Knows nothing of GraphQL."""

from queuelog.storage.repository import Repository

__all__ = ["Repository"]
