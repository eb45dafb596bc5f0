"""The Python clients for producers, tools and workers (docs/python.md), where the docs import
them from; they live in queuelog/sdk/.

    from queuelog.client import Client
    with Client("http://127.0.0.1:8000") as queue:  # the key from $QUEUELOG_API_KEY
        job = queue.enqueue("email", {"to": "a@example.com"})
"""

from queuelog.sdk.async_client import AsyncClient
from queuelog.sdk.session import MissingKey, resolve_key
from queuelog.sdk.sync_client import Client
from queuelog.sdk.types import (
    UNCHANGED,
    Completed,
    Enqueued,
    EnqueuedJob,
    EnqueueItem,
    Job,
    JobRef,
    JobRefs,
    JobWaiter,
    QueueStats,
    RateLimit,
    RateLimitSpec,
    Schedule,
    TypeControl,
    Unchanged,
)
from queuelog.sdk.websocket import WebSocketUnavailable
from queuelog.sdk.wire import Data, ServerError, ServerUnreachable

__all__ = [
    "UNCHANGED",
    "AsyncClient",
    "Client",
    "Completed",
    "Data",
    "EnqueueItem",
    "Enqueued",
    "EnqueuedJob",
    "Job",
    "JobRef",
    "JobRefs",
    "JobWaiter",
    "MissingKey",
    "QueueStats",
    "RateLimit",
    "RateLimitSpec",
    "Schedule",
    "ServerError",
    "ServerUnreachable",
    "WebSocketUnavailable",
    "TypeControl",
    "Unchanged",
    "resolve_key",
]
