"""Strawberry's graphql-core executor, with queuelog's two changes to how answers are built."""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

from graphql import ExecutionResult, GraphQLError, GraphQLLeafType, GraphQLOutputType, OperationType
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from queuelog.schema.response_size import ResponseBudget, ResponseTooLarge, keys_size, value_size


class Executor(StrawberryGraphQLCoreExecutionContext):
    """1. A per-event memo of collected subfields.

    graphql-core memoizes `collect_subfields` in `_relevant_sub_fields`, keyed by the id() of
    a field list and keeping that list alive. The executor of each subscription event is a
    shallow copy of the subscription's, so they all share one memo, and every event collects
    its fields into new lists: shared, the memo would gain two entries (~2.7 kB) per event
    delivered, for as long as the subscription lives. So each event starts with an empty
    memo, dropped with its executor once the event is sent.

    2. QUEUELOG_MAX_RESPONSE_BYTES (response_size.py). Each query, and each subscription
    event (its own executor, its own `execute_operation`), charges a budget for every key and
    leaf value it completes. The charge over the limit raises ResponseTooLarge, which passes
    through every field's error handling (graphql-core would otherwise null that one field
    and go on) up to `execute_operation`, cancelling sibling fields still being resolved on
    its way; the answer is then the refusal alone. A field that starts once the budget is
    spent (the other aliases of the same list, for one) is refused before its resolver reads
    anything.
    """

    response_limit: ClassVar[int] = 16777216
    response_budget: ResponseBudget | None = None

    def build_per_event_executor(self, payload: Any) -> Any:
        executor = super().build_per_event_executor(payload)
        executor._relevant_sub_fields = {}
        return executor

    def execute_operation(self, serially: bool | None = None) -> Any:
        if self.operation.operation is not OperationType.MUTATION:
            self.response_budget = ResponseBudget(self.response_limit)
        try:
            result = super().execute_operation(serially)
        except ResponseTooLarge as refusal:
            return _refused(refusal)
        if self.is_awaitable(result):
            return _refused_if_too_large(result)
        return result

    def execute_fields(
        self,
        parent_type: Any,
        source_value: Any,
        path: Any,
        grouped_field_set: dict[str, Any],
        position_context: Any,
    ) -> Any:
        budget = self.response_budget
        if budget is not None:
            budget.charge(keys_size(grouped_field_set))
        return super().execute_fields(parent_type, source_value, path, grouped_field_set, position_context)

    def complete_leaf_value(self, return_type: GraphQLLeafType, result: Any) -> Any:  # type: ignore[override]
        completed = super().complete_leaf_value(return_type, result)
        budget = self.response_budget
        if budget is not None:
            budget.charge(value_size(completed))
        return completed

    async def complete_awaitable_value(
        self,
        return_type: GraphQLOutputType,
        field_details_list: Any,
        info: Any,
        path: Any,
        result: Any,
        position_context: Any,
    ) -> Any:
        budget = self.response_budget
        if budget is not None and budget.exceeded:
            if inspect.iscoroutine(result):
                result.close()  # never started: nothing read
            raise ResponseTooLarge(budget.limit)
        return await super().complete_awaitable_value(
            return_type, field_details_list, info, path, result, position_context
        )

    def handle_field_error(
        self, raw_error: Exception, return_type: GraphQLOutputType, field_details_list: Any, path: Any
    ) -> None:
        if isinstance(raw_error, ResponseTooLarge):
            raise raw_error  # the whole answer is refused, not this field
        super().handle_field_error(raw_error, return_type, field_details_list, path)


def _refused(refusal: ResponseTooLarge) -> ExecutionResult:
    return ExecutionResult(None, [GraphQLError(refusal.message, original_error=refusal)])


async def _refused_if_too_large(result: Any) -> Any:
    try:
        return await result
    except ResponseTooLarge as refusal:
        return _refused(refusal)


def executor_for(max_response_bytes: int) -> type[Executor]:
    return type("Executor", (Executor,), {"response_limit": max_response_bytes})
