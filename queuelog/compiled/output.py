"""Output for compiled operations: a selection set over the objects resolvers return, to JSON.

graphql-core completes every field of every object through several Python calls; for a
claim of 100 jobs that is more work than the SQL. Here a selection set is turned, once,
into a plan, and the plan into one generated function per object selection: a dict
display of attribute reads. Resolvers return `queuelog.model` objects (or Strawberry
types) whose attributes are named as the schema's Python field names, which is also what
Strawberry's default resolvers read, so both paths see the same values.

Two ways to run a plan:
- `fast`: no error can happen (no field is denied to the caller); anything unexpected,
  such as null in a non-null field, raises `Irregular`;
- `precise`: graphql-core's rules (errors with paths, null propagation), for callers
  denied a guarded field (`Job.error`) and for whatever made `fast` give up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from graphql import (
    FieldNode,
    GraphQLEnumType,
    GraphQLError,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLScalarType,
    GraphQLSchema,
    SelectionSetNode,
    Source,
)
from strawberry.permission import PermissionExtension

from queuelog.compiled.coerce import DEFINITION, Unsupported


class Irregular(Exception):
    """The fast serializer met something only the precise one words correctly."""


class Propagate(Exception):
    """A non-null field became null: its parent becomes null (graphql-core's rule)."""


@dataclasses.dataclass(frozen=True)
class Site:
    """Where a field is written in its document, as GraphQLError takes it (the document's
    Source, shared by the plan's fields, not its syntax tree)."""

    source: Source
    position: int


def site_of(node: FieldNode) -> Site | None:
    return None if node.loc is None else Site(node.loc.source, node.loc.start)


def error_at(
    site: Site | None,
    path: list[str | int],
    original: Exception | None = None,
    *,
    message: str | None = None,
    extensions: dict[str, Any] | None = None,
) -> GraphQLError:
    """The error graphql-core's `located_error` makes of `original` raised at this field."""
    if message is None:
        message = str(getattr(original, "message", original))
    return GraphQLError(
        message,
        source=site.source if site is not None else None,
        positions=[site.position] if site is not None else None,
        path=path,
        original_error=original,
        extensions=extensions,
    )


def denied(guard: Any, site: Site | None, path: list[str | int]) -> GraphQLError:
    """A Strawberry permission's refusal, as its `on_unauthorized` words it."""
    return error_at(site, path, message=guard.message, extensions=guard.error_extensions)


def _not_planned(value: Any) -> Any:
    raise AssertionError("this kind of plan has no such function")


@dataclasses.dataclass
class ValuePlan:
    kind: str  # "scalar", "enum", "list", "object"
    non_null: bool
    convert: Callable[[Any], Any] = _not_planned  # scalar/enum: Python value to JSON value
    convert_name: str = ""  # how the generated code spells `convert`
    item: ValuePlan | None = None  # list
    fields: list[FieldPlan] = dataclasses.field(default_factory=list)  # object
    type_name: str = ""  # object; scalar and enum: the type's name too (compiled/size.py reads it)
    fast: Callable[[Any], Any] = _not_planned  # object: the generated serializer
    enum_names: dict[Any, str] = dataclasses.field(default_factory=dict)  # enum: value -> name


@dataclasses.dataclass
class FieldPlan:
    key: str
    attr: str | None  # None for __typename
    value: ValuePlan
    parent: str
    name: str
    site: Site | None
    guard: Any | None = None  # a Strawberry permission the caller must pass for this field


def _identity(value: Any) -> Any:
    return value


_ISO_TEXTS: dict[Any, str] = {}


def _isoformat(value: Any) -> Any:
    # Strawberry's DateTime serialisation; jobs of one batch share their timestamps.
    text = _ISO_TEXTS.get(value)
    if text is None:
        if len(_ISO_TEXTS) >= 4096:
            _ISO_TEXTS.clear()
        text = _ISO_TEXTS[value] = value.isoformat()
    return text


def field_guard(field_extensions: dict[str, Any]) -> Any | None:
    """The single permission class of a field (e.g. AdminOnlyField), None if it has none."""
    definition = field_extensions.get(DEFINITION)
    if definition is None:
        return None
    guards = [
        permission
        for extension in definition.extensions
        if isinstance(extension, PermissionExtension)
        for permission in extension.permissions
    ]
    if len(guards) > 1:
        raise Unsupported
    return guards[0] if guards else None


def plan_value(
    schema: GraphQLSchema, graphql_type: GraphQLOutputType, selection: SelectionSetNode | None
) -> ValuePlan:
    non_null = isinstance(graphql_type, GraphQLNonNull)
    named = graphql_type.of_type if isinstance(graphql_type, GraphQLNonNull) else graphql_type
    if isinstance(named, GraphQLList):
        return ValuePlan("list", non_null, item=plan_value(schema, named.of_type, selection))
    if isinstance(named, GraphQLScalarType):
        if named.name == "DateTime":
            return ValuePlan("scalar", non_null, _isoformat, "_isoformat", type_name=named.name)
        if named.name == "ID":
            return ValuePlan("scalar", non_null, str, "str", type_name=named.name)
        if named.name in ("String", "Int", "Float", "Boolean", "JSON"):
            return ValuePlan("scalar", non_null, _identity, type_name=named.name)
        raise Unsupported
    if isinstance(named, GraphQLEnumType):
        names = _enum_names(named)
        return ValuePlan("enum", non_null, names.__getitem__, type_name=named.name, enum_names=names)
    if isinstance(named, GraphQLObjectType) and selection is not None:
        plan = ValuePlan("object", non_null, type_name=named.name)
        plan.fields = [_plan_field(schema, named, node) for node in _fields_of(selection)]
        if len({f.key for f in plan.fields}) != len(plan.fields):
            raise Unsupported  # repeated response keys merge in graphql-core: leave it to it
        plan.fast = _generate(plan)
        return plan
    raise Unsupported


def _enum_names(enum_type: GraphQLEnumType) -> dict[Any, str]:
    definition = enum_type.extensions.get(DEFINITION)
    if definition is None:
        raise Unsupported
    names: dict[Any, str] = {}
    for value in definition.values:
        for member in definition.wrapped_cls:
            if member.value == value.value:
                names[member] = value.name
    return names


def _fields_of(selection: SelectionSetNode) -> list[FieldNode]:
    nodes = []
    for node in selection.selections:
        if not isinstance(node, FieldNode) or node.directives:
            raise Unsupported  # fragments and directives: graphql-core's job
        nodes.append(node)
    return nodes


def _plan_field(schema: GraphQLSchema, parent: GraphQLObjectType, node: FieldNode) -> FieldPlan:
    name = node.name.value
    key = node.alias.value if node.alias else name
    if name == "__typename":
        plan = ValuePlan("scalar", True, _identity)
        return FieldPlan(key, None, plan, parent.name, name, site_of(node))
    field = parent.fields.get(name)
    definition = field.extensions.get(DEFINITION) if field is not None else None
    if field is None or definition is None or field.args or node.arguments:
        raise Unsupported
    guard = field_guard(field.extensions)
    if definition.base_resolver is not None and guard is None:
        raise Unsupported  # a computed field: only plain attributes (plus guards) are compiled
    value = plan_value(schema, field.type, node.selection_set)
    return FieldPlan(key, definition.python_name, value, parent.name, name, site_of(node), guard)


# --- fast: generated code ------------------------------------------------------------------


def _generate(plan: ValuePlan) -> Callable[[Any], Any]:
    namespace: dict[str, Any] = {"_isoformat": _isoformat, "Irregular": Irregular}
    items = []
    required = []
    for index, field in enumerate(plan.fields):
        if field.attr is None:
            expression = repr(plan.type_name)
        else:
            expression = _expression(field.value, f"o.{field.attr}", f"f{index}", namespace)
        items.append(f"{field.key!r}: {expression}")
        if field.value.non_null:
            required.append(field.key)
    lines = ["def serialize(o):", "    d = {" + ", ".join(items) + "}"]
    if required and len(required) == len(plan.fields):
        lines.append("    if None in d.values(): raise Irregular")
    elif required:
        # Only the non-null fields: a nullable one that is null (a job's concurrencyKey) is
        # regular, and must not send every such object down the precise path.
        checked = ", ".join(f"d[{key!r}]" for key in required)
        lines.append(f"    if None in ({checked},): raise Irregular")
    lines.append("    return d")
    exec("\n".join(lines), namespace)  # one dict display per object instead of a call per field
    return namespace["serialize"]


def _expression(plan: ValuePlan, source: str, name: str, namespace: dict[str, Any]) -> str:
    if plan.kind == "scalar":
        if plan.convert is _identity:
            return source
        call = plan.convert_name
    elif plan.kind == "enum":
        namespace[name] = plan.convert
        call = name
    elif plan.kind == "object":
        namespace[name] = plan.fast
        call = name
    else:  # list
        assert plan.item is not None
        item = _expression(plan.item, "x", name + "i", namespace)
        namespace[name] = eval(f"lambda v: [{item} for x in v]", namespace)  # noqa: S307
        call = name
    if plan.non_null:
        return f"{call}({source})"
    return f"(None if {source} is None else {call}({source}))"


def fast(plan: ValuePlan, value: Any) -> Any:
    if value is None:
        if plan.non_null:
            raise Irregular
        return None
    if plan.kind == "object":
        return plan.fast(value)
    if plan.kind == "list":
        assert plan.item is not None
        return [fast(plan.item, v) for v in value]
    return plan.convert(value)


# --- precise: graphql-core's rules ---------------------------------------------------------


class ValueCompleter:
    """graphql-core's value completion (the spec's CompleteValue) of one response: the precise
    run, with where its errors go and whether the caller passes each guard."""

    def __init__(self, allows: Callable[[Any], bool]) -> None:
        self.allows = allows
        self.errors: list[GraphQLError] = []

    def value(self, plan: ValuePlan, value: Any, path: list[str | int], field: FieldPlan | None) -> Any:
        if value is None:
            if plan.non_null and field is not None:
                message = f"Cannot return null for non-nullable field {field.parent}.{field.name}."
                self.errors.append(error_at(field.site, path, TypeError(message)))
                raise Propagate
            return None
        if plan.kind == "object":
            return self.object(plan, value, path)
        if plan.kind == "list":
            assert plan.item is not None
            items = []
            for index, item in enumerate(value):
                try:
                    items.append(self.value(plan.item, item, [*path, index], field))
                except Propagate:
                    if plan.non_null:
                        raise
                    return None
            return items
        try:
            return plan.convert(value)
        except Exception as failure:
            self.errors.append(error_at(field.site if field else None, path, failure))
            if plan.non_null:
                raise Propagate from None
            return None

    def object(self, plan: ValuePlan, value: Any, path: list[str | int]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field in plan.fields:
            field_path = [*path, field.key]
            if field.attr is None:
                out[field.key] = plan.type_name
                continue
            if field.guard is not None and not self.allows(field.guard):
                self.errors.append(denied(field.guard, field.site, field_path))
                if field.value.non_null:
                    raise Propagate
                out[field.key] = None
                continue
            try:
                out[field.key] = self.value(field.value, getattr(value, field.attr), field_path, field)
            except Propagate:
                if field.value.non_null:
                    raise
                out[field.key] = None
        return out
