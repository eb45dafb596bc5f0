"""Compiled operations: documents with one root field, planned once, run without graphql-core.

Most traffic is a handful of documents sent over and over by workers, producers and
dashboards, each with a single root field and a plain selection. For those, the parse,
the validation (every rule Strawberry applies, queuelog's limits included) and the plan
of arguments and output are made once per document text; each request then coerces its
variables, checks the field's role permission, calls the very resolver Strawberry would
call, and writes the selection (output.py).

Whatever a plan cannot take exactly as graphql-core would (fragments, directives,
variables with defaults, several root fields, subscriptions, introspection, invalid
documents, variables that do not coerce) goes the general way, through Strawberry, which
therefore words every refusal; `run` returns None before anything has happened.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from graphql import (
    ASTValidationRule,
    FieldNode,
    GraphQLError,
    GraphQLNonNull,
    GraphQLSchema,
    ListValueNode,
    ObjectValueNode,
    OperationDefinitionNode,
    OperationType,
    VariableNode,
    get_operation_ast,
    is_input_type,
    parse,
    specified_rules,
    type_from_ast,
    value_from_ast_untyped,
)
from strawberry.schema.schema import validate_document
from strawberry.utils.str_converters import to_camel_case

from queuelog.compiled.coerce import DEFINITION, Coercer, Unsupported, coercer_for
from queuelog.compiled.output import (
    FieldPlan,
    ValueCompleter,
    ValuePlan,
    denied,
    error_at,
    fast,
    field_guard,
    plan_value,
    site_of,
)
from queuelog.compiled.size import Charge, charger
from queuelog.schema.cost import CostRule, CostTooHigh, SizeNotKnown
from queuelog.schema.extensions import shape_errors
from queuelog.schema.logging import log_errors
from queuelog.schema.response_size import ResponseBudget, ResponseTooLarge

log = logging.getLogger("queuelog.errors")
MAX_PLANS = 512
MAX_PLANNED_DOCUMENT = 16 * 1024


@dataclasses.dataclass
class Argument:
    python_name: str
    variable: str | None  # the variable it takes, or None for a literal
    literal: Any = None
    non_null: bool = False  # a null variable here is graphql-core's error to word


@dataclasses.dataclass
class Variable:
    name: str
    coerce: Coercer
    required: bool


@dataclasses.dataclass
class OperationPlan:
    root: FieldPlan
    key: str
    operation_name: str | None  # as Strawberry names the operation in its log lines
    resolver: Any
    guard: Any | None
    arguments: list[Argument]
    variables: list[Variable]
    value: ValuePlan
    guards: list[Any]  # every guarded field in the selection (e.g. Job.error)
    # Queries: what charges the answer's bytes to a budget of `response_limit` (size.py).
    charge: Charge | None = None
    response_limit: int = 0


class CompiledInfo:
    """What resolvers and permissions read of `info` here: the request context."""

    __slots__ = ("context",)

    def __init__(self, context: Any) -> None:
        self.context = context


class Planner:
    def __init__(
        self,
        schema: GraphQLSchema,
        rules: Sequence[type[ASTValidationRule]],
        max_tokens: int,
        cost: CostRule,
        max_response_bytes: int,
    ) -> None:
        self._schema = schema
        self._rules = (*specified_rules, *rules)
        self._max_tokens = max_tokens
        self._cost = cost
        self._max_response_bytes = max_response_bytes
        self._plans: OrderedDict[tuple[str, str | None], OperationPlan | None] = OrderedDict()

    def plan_for(self, query: str, operation_name: str | None) -> OperationPlan | None:
        if len(query) > MAX_PLANNED_DOCUMENT:
            return None
        key = (query, operation_name)
        try:
            plan = self._plans[key]
        except KeyError:
            plan = self._plan(query, operation_name)
            self._plans[key] = plan
            if len(self._plans) > MAX_PLANS:
                self._plans.popitem(last=False)
        return plan

    def _plan(self, query: str, operation_name: str | None) -> OperationPlan | None:
        try:
            document = parse(query, max_tokens=self._max_tokens)
        except GraphQLError:
            return None
        if validate_document(self._schema, document, self._rules):
            return None
        operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
        if len(operations) != len(document.definitions):
            return None  # fragments
        chosen = get_operation_ast(document, operation_name)
        if chosen is None:
            return None
        try:
            # With every variable at its bound: a document that could go over the limit runs
            # the general way, which checks the cost of the request's own variables.
            self._cost.check(self._schema, chosen, {}, None)
        except (CostTooHigh, SizeNotKnown):
            return None
        try:
            return self._plan_operation(chosen, operation_name)
        except Unsupported:
            return None
        except Exception:  # a bug here must cost speed, never the request
            log.exception("could not plan a valid document; it will run the general way")
            return None

    def _plan_operation(
        self, operation: OperationDefinitionNode, operation_name: str | None
    ) -> OperationPlan:
        if operation.operation is OperationType.QUERY:
            root = self._schema.query_type
        elif operation.operation is OperationType.MUTATION:
            root = self._schema.mutation_type
        else:
            raise Unsupported
        selections = operation.selection_set.selections
        if root is None or operation.directives or len(selections) != 1:
            raise Unsupported
        node = selections[0]
        if not isinstance(node, FieldNode) or node.directives or node.name.value.startswith("__"):
            raise Unsupported
        field = root.fields[node.name.value]
        definition = field.extensions.get(DEFINITION)
        if definition is None or definition.base_resolver is None:
            raise Unsupported
        resolver = definition.base_resolver.wrapped_func
        parameters = list(inspect.signature(resolver).parameters)
        if not parameters or parameters[0] != "info" or not inspect.iscoroutinefunction(resolver):
            raise Unsupported
        variables = []
        for variable in operation.variable_definitions or ():
            if variable.default_value is not None or variable.directives:
                raise Unsupported
            graphql_type = type_from_ast(self._schema, variable.type)
            if not is_input_type(graphql_type):
                raise Unsupported  # an unknown or output type: graphql-core words the error
            required = variable.type.kind == "non_null_type"
            variables.append(Variable(variable.variable.name.value, coercer_for(graphql_type), required))
        python_names = {
            a.graphql_name or to_camel_case(a.python_name): a.python_name for a in definition.arguments
        }
        arguments = []
        for argument in node.arguments or ():
            name = argument.name.value
            if isinstance(argument.value, VariableNode):
                non_null = isinstance(field.args[name].type, GraphQLNonNull)
                arguments.append(Argument(python_names[name], argument.value.name.value, non_null=non_null))
            else:
                if _holds_variable(argument.value):
                    raise Unsupported  # a variable inside a list or object literal
                coerce = coercer_for(field.args[name].type)
                literal = coerce(value_from_ast_untyped(argument.value))
                arguments.append(Argument(python_names[name], None, literal))
        value = plan_value(self._schema, field.type, node.selection_set)
        key = node.alias.value if node.alias else node.name.value
        if operation_name is None and operation.name is not None:
            operation_name = operation.name.value
        is_query = operation.operation is OperationType.QUERY
        return OperationPlan(
            root=FieldPlan(key, None, value, root.name, node.name.value, site_of(node)),
            key=key,
            operation_name=operation_name,
            resolver=resolver,
            guard=field_guard(field.extensions),
            arguments=arguments,
            variables=variables,
            value=value,
            guards=_guards_of(value),
            charge=charger(value) if is_query else None,
            response_limit=self._max_response_bytes,
        )


def _holds_variable(node: Any) -> bool:
    if isinstance(node, VariableNode):
        return True
    if isinstance(node, ListValueNode):
        return any(_holds_variable(v) for v in node.values)
    if isinstance(node, ObjectValueNode):
        return any(_holds_variable(f.value) for f in node.fields)
    return False


def _guards_of(plan: ValuePlan) -> list[Any]:
    guards = []
    for field in plan.fields:
        if field.guard is not None:
            guards.append(field.guard)
        guards.extend(_guards_of(field.value))
    if plan.item is not None:
        guards.extend(_guards_of(plan.item))
    return guards


def _allows(guard: Any, info: CompiledInfo) -> bool:
    return bool(guard.has_permission(None, info))


async def run(plan: OperationPlan, context: Any, variables: dict[str, Any]) -> dict[str, Any] | None:
    """The response body, or None to hand the request to the general path (nothing ran)."""
    try:
        values = {}
        for variable in plan.variables:
            if variable.name in variables:
                values[variable.name] = variable.coerce(variables[variable.name])
            elif variable.required:
                raise Unsupported
    except Unsupported:
        return None
    kwargs = {}
    for argument in plan.arguments:
        if argument.variable is None:
            kwargs[argument.python_name] = argument.literal
        elif argument.variable in values:
            value = values[argument.variable]
            if value is None and argument.non_null:
                return None
            kwargs[argument.python_name] = value
    info = CompiledInfo(context)
    path: list[str | int] = [plan.key]
    errors: list[GraphQLError] = []
    data: Any
    if plan.guard is not None and not _allows(plan.guard, info):
        errors.append(denied(plan.guard, plan.root.site, path))
        data = _null_root(plan)
    else:
        try:
            result = await plan.resolver(info, **kwargs)
        except Exception as failure:
            errors.append(error_at(plan.root.site, path, failure))
            data = _null_root(plan)
        else:
            refusal = _too_large(plan, result)
            if refusal is not None:
                errors.append(GraphQLError(refusal.message, original_error=refusal))
                data = None
            else:
                data = _serialize(plan, result, info, errors)
    response: dict[str, Any] = {"data": data}
    if errors:
        # Strawberry's error policy, as its path applies it: every error logged, then
        # shaped (contract code, dedupe, cap) for the client.
        if log_errors(errors, plan.operation_name):
            context.database_unavailable = True
        response["errors"] = [error.formatted for error in shape_errors(errors)]
    return response


def _too_large(plan: OperationPlan, result: Any) -> ResponseTooLarge | None:
    """The refusal of a query whose answer would exceed QUEUELOG_MAX_RESPONSE_BYTES."""
    if plan.charge is None or result is None:
        return None
    try:
        plan.charge(result, ResponseBudget(plan.response_limit))
    except ResponseTooLarge as refusal:
        return refusal
    return None


def _null_root(plan: OperationPlan) -> dict[str, Any] | None:
    return None if plan.value.non_null else {plan.key: None}


def _serialize(plan: OperationPlan, result: Any, info: CompiledInfo, errors: list[GraphQLError]) -> Any:
    allowed = {id(g): _allows(g, info) for g in plan.guards}
    if all(allowed.values()):
        try:
            return {plan.key: fast(plan.value, result)}
        except Exception:  # noqa: S110 - the precise run below words whatever happened
            pass
    completer = ValueCompleter(lambda guard: allowed[id(guard)])
    try:
        value = completer.value(plan.value, result, [plan.key], plan.root)
        data: Any = {plan.key: value}
    except Exception:
        data = None
    if plan.value.non_null and data is not None and data[plan.key] is None:
        data = None
    errors.extend(completer.errors)
    return data
