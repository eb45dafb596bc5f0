"""The served GraphQL API: the root types (root.py) assembled into the Schema.

It stands above both halves of the GraphQL layer: `queuelog.schema` (types, inputs,
permissions, the request context, limits) and `queuelog.resolvers` (one function per
operation, on those types). Neither imports this package.

`schema` is built with default settings for tools (`strawberry export-schema
queuelog.graphql_api:schema`); the server builds its own with `build_schema(settings)` so the
document limits follow the configuration.
"""

from __future__ import annotations

import strawberry
from graphql import GraphQLDefaultInput, GraphQLInputObjectType, parse_const_value
from strawberry.schema.config import StrawberryConfig

from queuelog.graphql_api.root import Mutation, Query, Subscription
from queuelog.schema.executor import executor_for
from queuelog.schema.extensions import schema_extensions
from queuelog.schema.logging import LoggingSchema
from queuelog.settings import Settings


def build_schema(settings: Settings) -> strawberry.Schema:
    built = LoggingSchema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        extensions=schema_extensions(settings),
        config=StrawberryConfig(disable_field_suggestions=True),
        execution_context_class=executor_for(settings.max_response_bytes),
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


def root_fields(built: strawberry.Schema) -> frozenset[str]:
    """The names of the Query and Mutation fields (the same whatever the settings)."""
    graphql_schema = built._schema
    roots = (graphql_schema.query_type, graphql_schema.mutation_type)
    return frozenset(name for root in roots if root is not None for name in root.fields)


schema = build_schema(Settings())

__all__ = ["build_schema", "root_fields", "schema"]
