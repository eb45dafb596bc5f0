"""queuelog: a background-job queue served as a GraphQL API (README.md).

`from queuelog import Client, AsyncClient, Worker` imports the SDK (queuelog/sdk/) on first
use, so that the server, which imports this package, does not load the SDK's HTTP clients.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from queuelog.client import AsyncClient, Client
    from queuelog.worker import Worker

_LAZY = {"Client": "queuelog.client", "AsyncClient": "queuelog.client", "Worker": "queuelog.worker"}
__all__ = ["AsyncClient", "Client", "Worker"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'queuelog' has no attribute {name!r}")
