"""A compiled query's answer, charged to its byte budget before it is written.

The compiled path builds an answer in one go (output.py), so it is measured first, over
the very objects the resolver returned (schema/response_size.py has the sizes): one
generated function per object selection charges the object's keys and fixed-size values as
one constant, adds each string or JSON value it selects, then goes into its objects and
lists. The object that crosses the limit raises ResponseTooLarge: 29 aliases of `payload`
on a page of 100 jobs are refused after 9 jobs, before a dict of the answer exists.

A guarded field (Job.error) is charged as if the caller may read it: a caller who may not
gets null and an error instead, so the charge is over by at most that text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from queuelog.compiled.output import ValuePlan
from queuelog.schema.response_size import OTHER_VALUE, ResponseBudget, keys_size, value_size

Charge = Callable[[Any, ResponseBudget], None]
NULL = 4
# Bytes of the scalars whose text has a bounded length (quotes included).
FIXED_SCALARS = {
    "DateTime": len('"2026-01-01T00:00:00.000000+00:00"'),
    "ID": 12,
    "Int": OTHER_VALUE,
    "Float": OTHER_VALUE,
    "Boolean": OTHER_VALUE,
}


def charger(plan: ValuePlan) -> Charge:
    """The function that charges a budget for what `plan` writes of a value (not None)."""
    if plan.kind == "object":
        return _object_charger(plan)
    if plan.kind == "list":
        assert plan.item is not None
        return _list_charger(plan.item)
    fixed = _fixed_size(plan)
    if fixed is not None:
        return lambda value, budget: budget.charge(fixed)
    return lambda value, budget: budget.charge(value_size(value))


def _fixed_size(plan: ValuePlan) -> int | None:
    """The bytes of a leaf when every value of it takes about as many, else None."""
    if plan.kind == "enum":
        return max((len(name) + 2 for name in plan.enum_names.values()), default=NULL)
    return FIXED_SCALARS.get(plan.type_name)


def _list_charger(item: ValuePlan) -> Charge:
    if item.kind in ("scalar", "enum"):
        fixed = _fixed_size(item)
        if fixed is not None:
            size = fixed + 1  # the comma
            return lambda values, budget: budget.charge(2 + len(values) * size)
        return lambda values, budget: budget.charge(2 + len(values) + sum(map(_leaf_size, values)))
    charge_item = charger(item)

    def charge(values: Any, budget: ResponseBudget) -> None:
        budget.charge(2 + len(values))
        for value in values:
            if value is not None:
                charge_item(value, budget)

    return charge


def _leaf_size(value: Any) -> int:
    return NULL if value is None else value_size(value)


def _object_charger(plan: ValuePlan) -> Charge:
    constant = 2 + keys_size(field.key for field in plan.fields)
    sized: list[str] = []  # expressions adding the size of a string or JSON value
    nested: list[tuple[str, Charge]] = []  # (attribute, charger) of objects and lists
    for field in plan.fields:
        if field.attr is None:  # __typename
            constant += len(plan.type_name) + 2
            continue
        value = field.value
        if value.kind in ("object", "list"):
            constant += NULL  # counted again, exactly, when it is not null
            nested.append((field.attr, charger(value)))
            continue
        fixed = _fixed_size(value)
        if fixed is not None:
            constant += fixed
        else:
            sized.append(f"leaf(o.{field.attr})")
    namespace: dict[str, Any] = {"leaf": _leaf_size}
    lines = ["def charge(o, budget):", f"    budget.charge({' + '.join([str(constant), *sized])})"]
    for index, (attr, charge_nested) in enumerate(nested):
        namespace[f"n{index}"] = charge_nested
        lines += [f"    v = o.{attr}", f"    if v is not None: n{index}(v, budget)"]
    exec("\n".join(lines), namespace)  # one call per object, as output.py's serializers
    charge: Charge = namespace["charge"]
    return charge
