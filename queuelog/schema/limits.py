"""The document depth limit (QUEUELOG_MAX_DEPTH), counted the contract's way.

The root field is depth 1; introspection fields (`__schema`, `__type`, ...) are exempt
here and bounded by graphql-core's MaxIntrospectionDepthRule instead. Fragment depths
are memoised, so fragments that spread each other many times cost linear time.
"""

from __future__ import annotations

import functools
from typing import Any

from graphql import (
    ASTValidationRule,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    ValidationRule,
)
from graphql.validation.rules.max_introspection_depth_rule import MaxIntrospectionDepthRule
from strawberry.extensions.max_aliases import create_validator as alias_rule

from queuelog.errors import echo
from queuelog.settings import Settings


def depth_limit_rule(max_depth: int) -> type[ValidationRule]:
    class DepthLimit(ValidationRule):
        def enter_operation_definition(self, node: OperationDefinitionNode, *_: Any) -> None:
            fragments = {
                d.name.value: d
                for d in self.context.document.definitions
                if isinstance(d, FragmentDefinitionNode)
            }
            depth = _selection_depth(node.selection_set, fragments, {}, frozenset())
            if depth > max_depth:
                name = echo(node.name.value) if node.name else "the operation"
                self.report_error(
                    GraphQLError(f"{name} is {depth} levels deep; the limit is {max_depth}", [node])
                )

    return DepthLimit


def _selection_depth(
    selection_set: SelectionSetNode | None,
    fragments: dict[str, FragmentDefinitionNode],
    memo: dict[str, int],
    visiting: frozenset[str],
) -> int:
    if selection_set is None:
        return 0
    deepest = 0
    for selection in selection_set.selections:
        if isinstance(selection, FieldNode):
            if selection.name.value.startswith("__"):
                continue
            depth = 1 + _selection_depth(selection.selection_set, fragments, memo, visiting)
        elif isinstance(selection, InlineFragmentNode):
            depth = _selection_depth(selection.selection_set, fragments, memo, visiting)
        elif isinstance(selection, FragmentSpreadNode):
            depth = _fragment_depth(selection.name.value, fragments, memo, visiting)
        else:
            depth = 0
        deepest = max(deepest, depth)
    return deepest


def _fragment_depth(
    name: str,
    fragments: dict[str, FragmentDefinitionNode],
    memo: dict[str, int],
    visiting: frozenset[str],
) -> int:
    if name in memo:
        return memo[name]
    fragment = fragments.get(name)
    if fragment is None or name in visiting:  # unknown or cyclic: other rules report it
        return 0
    memo[name] = _selection_depth(fragment.selection_set, fragments, memo, visiting | {name})
    return memo[name]


def document_rules(settings: Settings) -> tuple[type[ASTValidationRule], ...]:
    """The validation rules queuelog adds to GraphQL's own: depth, aliases, introspection.

    Both execution paths validate with these very classes (Strawberry's through
    `schema_extensions`, the compiled one through its planner): built once per pair of
    limits, since Strawberry's ValidationCache keys on the rule classes, and Strawberry's
    QueryDepthLimiter / MaxAliasesLimiter would build new ones on every request, so no
    validation would ever be served from the cache.
    """
    return _rules(settings.max_depth, settings.max_aliases)


@functools.cache
def _rules(max_depth: int, max_aliases: int) -> tuple[type[ASTValidationRule], ...]:
    return (depth_limit_rule(max_depth), alias_rule(max_aliases), MaxIntrospectionDepthRule)
