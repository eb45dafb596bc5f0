"""QUEUELOG_MAX_RESPONSE_BYTES (API.md section 4): an answer is measured while it is built.

The cost (cost.py) bounds the fields an answer may hold, not their bytes: 30 aliases of a
page of 100 jobs with 64 KB payloads cost about 3,000 fields and weigh 196 MB. So each query
and each subscription event gets a ResponseBudget, charged as its values are completed:
value by value on Strawberry's path (executor.py), object by object on the compiled one
(compiled/size.py), before the answer is written. The first charge over the limit refuses
the whole answer (`data` null, BAD_USER_INPUT) and nothing more is read or completed.
Mutations are not measured: their work has committed, and a refusal would lose its answer.

Sizes are those of the compact JSON the answer becomes, close enough to bound memory
without writing it twice: exact for JSON values (payloads, results) and long strings,
length plus quotes for short strings (no escapes counted), 8 bytes for a number or a
boolean, and `"key":` plus a comma for each field of each object.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from queuelog import jsonutil
from queuelog.errors import BadInput

SHORT_TEXT = 64  # characters: shorter strings are counted without looking for escapes
OTHER_VALUE = 8  # bytes: a number or a boolean
FIELD_OVERHEAD = 4  # bytes around a field's key: two quotes, the colon, a comma


class ResponseTooLarge(BadInput):
    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the answer would be larger than {limit:,} bytes (QUEUELOG_MAX_RESPONSE_BYTES): "
            "ask for a smaller page (`first`) or fewer fields"
        )
        self.limit = limit


def text_size(text: str) -> int:
    if len(text) <= SHORT_TEXT:
        return len(text) + 2
    return len(jsonutil.dumps(text))


def value_size(value: Any) -> int:
    """The bytes of one completed leaf value (a scalar's or an enum's output) in the answer."""
    kind = type(value)
    if kind is str:
        return text_size(value)
    if kind is dict or kind is list:
        try:
            return len(jsonutil.dumps(value))
        except RecursionError:  # nested deeper than the stack left here allows
            return _nested_size(value)
    return OTHER_VALUE


def _nested_size(value: Any) -> int:
    """value_size of a JSON value, without recursion."""
    size = 0
    todo = [value]
    while todo:
        item = todo.pop()
        if type(item) is dict:
            size += 2 + keys_size(item)
            todo.extend(item.values())
        elif type(item) is list:
            size += 2 + len(item)
            todo.extend(item)
        else:
            size += value_size(item)
    return size


def keys_size(keys: Iterable[str]) -> int:
    """The bytes an object's keys take, however its values turn out."""
    return sum(len(key) + FIELD_OVERHEAD for key in keys)


class ResponseBudget:
    """The bytes one answer may still take; `charge` raises ResponseTooLarge once over."""

    __slots__ = ("left", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit

    def charge(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise ResponseTooLarge(self.limit)

    @property
    def exceeded(self) -> bool:
        return self.left < 0
