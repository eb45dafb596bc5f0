"""`AsyncClient`: every call of the SDK, as coroutines."""

from __future__ import annotations

from queuelog.sdk.flow_control_calls import FlowControlCalls
from queuelog.sdk.producer_calls import ProducerCalls
from queuelog.sdk.schedule_calls import ScheduleCalls
from queuelog.sdk.steering_calls import SteeringCalls
from queuelog.sdk.watch_calls import WatchCalls
from queuelog.sdk.worker_calls import WorkerCalls


class AsyncClient(ProducerCalls, SteeringCalls, WatchCalls, FlowControlCalls, ScheduleCalls, WorkerCalls):
    """The calls of producers and readers, steering and watching jobs, flow control, schedules
    and workers, on one connection pool; `async with AsyncClient(url) as queue`, or
    `await queue.aclose()`. One AsyncClient serves any number of concurrent tasks."""

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
