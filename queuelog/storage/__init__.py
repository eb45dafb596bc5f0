"""Persistence: tables, migrations and the repository. Knows nothing of GraphQL.

What the layers above use is exported here: the repository and the values its claims and
attempt reads hand back. The modules behind them are the storage layer's own.
"""

from queuelog.storage.group_commit import ParkedClaim
from queuelog.storage.operations.attempts import AttemptEvent, attempts_of
from queuelog.storage.operations.claims import Claimed, ClaimerRevoked
from queuelog.storage.repository import Repository

__all__ = ["AttemptEvent", "Claimed", "ClaimerRevoked", "ParkedClaim", "Repository", "attempts_of"]
