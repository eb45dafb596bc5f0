"""What every resolver needs: the authenticated caller and the job queue."""

from __future__ import annotations

from strawberry.types import Info

from queuelog.auth import Principal
from queuelog.errors import Unauthenticated
from queuelog.queue import JobQueue
from queuelog.schema.context import RequestContext


def caller(info: Info[RequestContext, None]) -> Principal:
    principal = info.context.principal
    if principal is None:  # the HTTP layer answers 401 first; this guards other paths
        raise Unauthenticated("an API key is required")
    return principal


def queue(info: Info[RequestContext, None]) -> JobQueue:
    return info.context.queue
