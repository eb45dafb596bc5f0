"""The GraphQL schema: types, inputs, permissions, limits and the Schema object.

`schema` is built with default settings for tools (`strawberry export-schema
queuelog.schema:schema`); the server builds its own with `build_schema(settings)` so the
document limits follow the configuration.
"""

from __future__ import annotations

from typing import Any

import strawberry
from graphql import GraphQLDefaultInput, GraphQLInputObjectType, parse_const_value
from strawberry.schema.config import StrawberryConfig
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from queuelog.schema.extensions import schema_extensions
from queuelog.schema.logging import LoggingSchema
from queuelog.schema.root import Mutation, Query, Subscription
from queuelog.settings import Settings


class Executor(StrawberryGraphQLCoreExecutionContext):
    """Strawberry's executor, with a per-event memo of collected subfields.

    graphql-core memoizes `collect_subfields` in `_relevant_sub_fields`, keyed by the id() of
    a field list and keeping that list alive. The executor of each subscription event is a
    shallow copy of the subscription's, so they all share one memo, and every event collects
    its fields into new lists: the memo gained two entries (~2.7 kB) per event delivered, for
    as long as the subscription lived (issue 6: 4 `jobEvents` subscribers took the server
    from ~80 MB to 600 MB in two minutes). Each event now starts with an empty memo, which is
    dropped with its executor once the event is sent.
    """

    def build_per_event_executor(self, payload: Any) -> Any:
        executor = super().build_per_event_executor(payload)
        executor._relevant_sub_fields = {}
        return executor


def build_schema(settings: Settings) -> strawberry.Schema:
    built = LoggingSchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        extensions=schema_extensions(settings),
        config=StrawberryConfig(disable_field_suggestions=True),
        execution_context_class=Executor,
    )
    _keep_json_default_printable(built)
    return built


def _keep_json_default_printable(built: strawberry.Schema) -> None:
    """Give the `{}` default of `EnqueueJobInput.payload` and `ScheduleInput.payload` as a literal.

    graphql-core cannot turn a dict held by a custom scalar back into a literal, so
    introspection of that default failed; the literal form prints as `{}` and coerces
    to the same empty object.
    """
    for name in ("EnqueueJobInput", "ScheduleInput"):
        input_type = built._schema.type_map[name]
        assert isinstance(input_type, GraphQLInputObjectType)
        payload = input_type.fields["payload"]
        payload.default = GraphQLDefaultInput(literal=parse_const_value("{}"))


schema = build_schema(Settings())

__all__ = ["build_schema", "schema"]
