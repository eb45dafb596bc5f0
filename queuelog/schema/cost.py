"""A document's cost (QUEUELOG_MAX_COST, API.md section 4): the fields it may return.

Every field costs 1. A list field's selection counts once per item the list may return:
the field's own size argument (`first`, `limit`, `last`, `minutes`) or, for a batch
mutation, the length of its input list (`inputs`, `items`). A field that takes such an
argument but returns one object (`jobs` returns a connection, `completeJobs` a payload)
passes the size on to the lists inside it (`edges`, `nodes`, `completed`). Sizes are
clamped to what the field can return at most (the resolver refuses more), and a size
given by a variable the request did not send counts at that maximum. Aliases count each
time; fragments count once per spread (memoised, so counting spreads of spreads stays
linear in the document's size).
Introspection is bounded by its own rule (limits.py) and costs 1 per root field here.

No maintained library fits: graphql-complexity's Strawberry extension ignores variables,
re-evaluates a fragment at every spread (exponential for nested spreads) and knows no
connection sizes, and the cost must also run on the compiled path, which Strawberry's
extensions never see. So the rule is written once here and used by both paths.

A list no argument bounds counts by the rule's `unsized_list` (`byType`: one per allowed
job type), except the lists of REAL_SIZE_LISTS, whose rows nothing bounds (an ADMIN may
create any number of schedules, and add any number of job types at runtime): those count
by their real size, read before the check
(CostLimit in extensions.py); a check that meets one without its size raises SizeNotKnown,
and the compiled planner leaves such documents to the general path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from graphql import (
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLField,
    GraphQLList,
    GraphQLNamedType,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLSchema,
    InlineFragmentNode,
    IntValueNode,
    ListValueNode,
    NullValueNode,
    ObjectValueNode,
    OperationDefinitionNode,
    SelectionSetNode,
    ValueNode,
    VariableNode,
)

from queuelog.queue import limits

# The most items each size argument can ask for (the queue refuses more).
SIZE_BOUNDS = {
    "first": limits.MAX_PAGE,
    "limit": limits.MAX_CLAIM_BATCH,
    "last": limits.MAX_HISTORY,
    "minutes": limits.MAX_THROUGHPUT_MINUTES,
    "inputs": limits.MAX_ENQUEUE_BATCH,
    "items": limits.MAX_COMPLETE_BATCH,
}
# "Type.field" of the lists that count by how many items they hold now.
REAL_SIZE_LISTS = frozenset({"Query.schedules", "Query.typeControls"})
UNSET = object()  # a variable whose value is not known (planning), counted at the bound
ABSENT = object()  # a variable the request did not send: the argument's default applies


class CostTooHigh(ValueError):
    def __init__(self, cost: int, limit: int) -> None:
        super().__init__(f"the document's cost is {cost:,}, over the limit of {limit:,} (QUEUELOG_MAX_COST)")
        self.cost = cost
        self.limit = limit


class SizeNotKnown(LookupError):
    """The cost needs the real size of this list ("Type.field" of REAL_SIZE_LISTS)."""

    def __init__(self, field: str) -> None:
        super().__init__(field)
        self.field = field


@dataclass(frozen=True)
class CostRule:
    """The limit, and how many items a list with no size argument may hold (`byType`: one
    per allowed job type)."""

    limit: int
    unsized_list: int = 1

    def check(
        self,
        schema: GraphQLSchema,
        operation: OperationDefinitionNode,
        fragments: Mapping[str, FragmentDefinitionNode],
        variables: Mapping[str, Any] | None,
        real_sizes: Mapping[str, int] | None = None,
    ) -> int:
        """The operation's cost; raises CostTooHigh over the limit. `variables` None: unknown;
        `real_sizes`: the items each list of REAL_SIZE_LISTS holds (SizeNotKnown without)."""
        root = _root_type(schema, operation)
        if root is None:
            return 0
        counter = _Counter(schema, fragments, variables, operation, self, real_sizes or {})
        cost = counter.selection(root, operation.selection_set, None)
        if cost > self.limit:
            raise CostTooHigh(cost, self.limit)
        return cost


def _root_type(schema: GraphQLSchema, operation: OperationDefinitionNode) -> GraphQLObjectType | None:
    kind = operation.operation.value
    return {
        "query": schema.query_type,
        "mutation": schema.mutation_type,
        "subscription": schema.subscription_type,
    }[kind]


def _unwrap(graphql_type: Any) -> tuple[Any, bool]:
    """(the named type, whether a list lies on the way)."""
    is_list = False
    while isinstance(graphql_type, GraphQLNonNull | GraphQLList):
        if isinstance(graphql_type, GraphQLList):
            is_list = True
        graphql_type = graphql_type.of_type
    return graphql_type, is_list


class _Counter:
    def __init__(
        self,
        schema: GraphQLSchema,
        fragments: Mapping[str, FragmentDefinitionNode],
        variables: Mapping[str, Any] | None,
        operation: OperationDefinitionNode,
        rule: CostRule,
        real_sizes: Mapping[str, int],
    ) -> None:
        self.schema = schema
        self.real_sizes = real_sizes
        self.fragments = fragments
        self.variables = variables
        self.defaults = {d.variable.name.value: d.default_value for d in operation.variable_definitions or ()}
        self.rule = rule
        self.memo: dict[tuple[str, int | None], int] = {}
        self.visiting: set[str] = set()

    def selection(self, parent: Any, selection_set: SelectionSetNode | None, size: int | None) -> int:
        """The cost of a selection on `parent`; `size` is a size handed down to its lists."""
        if selection_set is None or not isinstance(parent, GraphQLObjectType):
            return 0
        total = 0
        for node in selection_set.selections:
            if isinstance(node, FieldNode):
                total += self.field(parent, node, size)
            elif isinstance(node, InlineFragmentNode):
                condition: GraphQLNamedType | None = parent
                if node.type_condition is not None:
                    condition = self.schema.get_type(node.type_condition.name.value)
                total += self.selection(condition, node.selection_set, size)
            elif isinstance(node, FragmentSpreadNode):
                total += self.spread(node.name.value, size)
        return total

    def spread(self, name: str, size: int | None) -> int:
        key = (name, size)
        if key in self.memo:
            return self.memo[key]
        fragment = self.fragments.get(name)
        if fragment is None or name in self.visiting:  # unknown or cyclic: validation refuses it
            return 0
        self.visiting.add(name)
        condition = self.schema.get_type(fragment.type_condition.name.value)
        cost = self.selection(condition, fragment.selection_set, size)
        self.visiting.discard(name)
        self.memo[key] = cost
        return cost

    def field(self, parent: GraphQLObjectType, node: FieldNode, inherited: int | None) -> int:
        name = node.name.value
        if name.startswith("__"):
            return 1
        definition = parent.fields.get(name)
        if definition is None:
            return 1
        named, is_list = _unwrap(definition.type)
        own = self.size_of(definition, node)
        if not is_list:
            return 1 + self.selection(named, node.selection_set, own if own is not None else None)
        if node.selection_set is None:
            return 1  # a list of scalars or enums
        if own is not None:
            items = own
        elif inherited is not None:
            items = inherited
        else:
            items = self.unsized(f"{parent.name}.{name}")
        return 1 + items * self.selection(named, node.selection_set, None)

    def unsized(self, field: str) -> int:
        if field not in REAL_SIZE_LISTS:
            return self.rule.unsized_list
        if field not in self.real_sizes:
            raise SizeNotKnown(field)
        return self.real_sizes[field]

    def size_of(self, definition: GraphQLField, node: FieldNode) -> int | None:
        """The items this field (or the lists inside it) may return, from its size argument."""
        given = {argument.name.value: argument.value for argument in node.arguments or ()}
        for name, bound in SIZE_BOUNDS.items():
            if name not in definition.args:
                continue
            value = self.value_of(given[name]) if name in given else ABSENT
            if value is ABSENT:
                value = definition.args[name].default_value
            return _clamp(value, bound, counts_items=name in ("inputs", "items"))
        return None

    def value_of(self, node: ValueNode) -> Any:
        if isinstance(node, VariableNode):
            name = node.name.value
            if self.variables is not None and name in self.variables:
                return self.variables[name]
            default = self.defaults.get(name)
            if default is not None:
                return self.value_of(default)
            return UNSET if self.variables is None else ABSENT
        if isinstance(node, IntValueNode):
            return int(node.value)
        if isinstance(node, ListValueNode):
            return [None] * len(node.values)
        if isinstance(node, ObjectValueNode):
            return {}
        if isinstance(node, NullValueNode):
            return None
        return UNSET


def _clamp(value: Any, bound: int, *, counts_items: bool) -> int:
    if counts_items:
        if isinstance(value, list):
            return min(len(value), bound)
        if isinstance(value, dict):
            return 1  # GraphQL takes one item where a list is expected
        return bound if value is UNSET else 0
    if isinstance(value, int) and not isinstance(value, bool):
        return max(0, min(value, bound))
    return bound
