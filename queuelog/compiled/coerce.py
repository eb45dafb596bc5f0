"""Input coercion for compiled operations: JSON variables to the values resolvers take.

Built once per variable or argument type from the schema. A coercer either returns the
value exactly as Strawberry's path would hand it to the resolver (scalars parsed, enums as
their Python members, input objects as instances of their Strawberry input class with
defaults filled in), or raises `Unsupported`. Then the request goes the general way, through
graphql-core and Strawberry, which produces the precise error: this module never words
an error itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from graphql import (
    GraphQLBoolean,
    GraphQLEnumType,
    GraphQLFloat,
    GraphQLID,
    GraphQLInputObjectType,
    GraphQLInputType,
    GraphQLInt,
    GraphQLList,
    GraphQLNonNull,
    GraphQLScalarType,
    GraphQLString,
)
from strawberry.types.base import StrawberryObjectDefinition
from strawberry.utils.str_converters import to_camel_case

Coercer = Callable[[Any], Any]
MAX_INT = 2**31 - 1
MIN_INT = -(2**31)
DEFINITION = "strawberry-definition"


class Unsupported(Exception):
    """Not for the compiled path: let graphql-core and Strawberry handle (and word) it."""


def coercer_for(graphql_type: GraphQLInputType) -> Coercer:
    if isinstance(graphql_type, GraphQLNonNull):
        inner = coercer_for(graphql_type.of_type)

        def non_null(value: Any) -> Any:
            if value is None:
                raise Unsupported
            return inner(value)

        return non_null
    nullable = _nullable_coercer(graphql_type)

    def maybe_null(value: Any) -> Any:
        return None if value is None else nullable(value)

    return maybe_null


def _nullable_coercer(graphql_type: GraphQLInputType) -> Coercer:
    if isinstance(graphql_type, GraphQLList):
        item = coercer_for(graphql_type.of_type)

        def as_list(value: Any) -> Any:
            if isinstance(value, list):
                return [item(v) for v in value]
            return [item(value)]  # the spec's input coercion of a single value to a list

        return as_list
    if isinstance(graphql_type, GraphQLInputObjectType):
        return _input_object_coercer(graphql_type)
    if isinstance(graphql_type, GraphQLEnumType):
        return _enum_coercer(graphql_type)
    if isinstance(graphql_type, GraphQLScalarType):
        return _scalar_coercer(graphql_type)
    raise Unsupported  # pragma: no cover


def _scalar_coercer(scalar: GraphQLScalarType) -> Coercer:
    if scalar is GraphQLString:

        def string(value: Any) -> str:
            if type(value) is not str:
                raise Unsupported
            return value

        return string
    if scalar is GraphQLInt:

        def integer(value: Any) -> int:
            if type(value) is not int or not MIN_INT <= value <= MAX_INT:
                raise Unsupported
            return value

        return integer
    if scalar is GraphQLBoolean:

        def boolean(value: Any) -> bool:
            if type(value) is not bool:
                raise Unsupported
            return value

        return boolean
    if scalar is GraphQLID:

        def identifier(value: Any) -> str:
            if type(value) is str:
                return value
            if type(value) is int:
                return str(value)
            raise Unsupported

        return identifier
    if scalar is GraphQLFloat:

        def number(value: Any) -> float:
            if type(value) not in (int, float):
                raise Unsupported
            return float(value)

        return number
    if scalar.name == "JSON":
        return lambda value: value
    parse = scalar.parse_value

    def custom(value: Any) -> Any:
        try:
            return parse(value)
        except Exception:
            raise Unsupported from None

    return custom


def _enum_coercer(enum_type: GraphQLEnumType) -> Coercer:
    definition = enum_type.extensions.get(DEFINITION)
    if definition is None:
        raise Unsupported
    # Strawberry hands resolvers the Python enum member, not the GraphQL value.
    members = {value.name: definition.wrapped_cls(value.value) for value in definition.values}

    def enum(value: Any) -> Any:
        if type(value) is not str or value not in members:
            raise Unsupported
        return members[value]

    return enum


def _input_object_coercer(input_type: GraphQLInputObjectType) -> Coercer:
    definition = input_type.extensions.get(DEFINITION)
    if not isinstance(definition, StrawberryObjectDefinition):
        raise Unsupported
    by_graphql_name = {f.graphql_name or to_camel_case(f.python_name): f for f in definition.fields}
    fields: list[tuple[str, str, Coercer, Callable[[], Any] | None]] = []
    for name, field in input_type.fields.items():
        strawberry_field = by_graphql_name.get(name)
        if strawberry_field is None:
            raise Unsupported
        default: Callable[[], Any] | None = None
        if strawberry_field.default_factory is not dataclasses.MISSING:
            default = strawberry_field.default_factory
        elif strawberry_field.default is not dataclasses.MISSING:
            value = strawberry_field.default
            default = lambda value=value: value  # noqa: E731
        fields.append((name, strawberry_field.python_name, coercer_for(field.type), default))
    known = frozenset(input_type.fields)
    input_class = definition.origin
    if hasattr(input_class, "__post_init__") or hasattr(input_class, "__slots__"):
        raise Unsupported  # its __init__ does more than set the fields: call it the general way
    new = object.__new__

    def input_object(value: Any) -> Any:
        if type(value) is not dict or not known.issuperset(value):
            raise Unsupported
        coerced: dict[str, Any] = {}
        for name, python_name, coerce, default in fields:
            if name in value:
                coerced[python_name] = coerce(value[name])
            elif default is not None:
                coerced[python_name] = default()
            else:
                raise Unsupported  # a required field is missing
        # What the dataclass __init__ Strawberry calls leaves behind (every field set, in
        # field order), without its call: 1000 inputs per request are common.
        made = new(input_class)
        made.__dict__ = coerced
        return made

    return input_object
