"""JSON in and out of the server: orjson where it is installed and can, stdlib otherwise.

orjson is several times faster than the json module on request bodies and responses, but
it refuses integers wider than 64 bits, which JSON allows and payloads may hold; those
fall back to the json module, so no valid input is refused because of the speed-up.
NaN and Infinity are not JSON and are refused on both paths.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency; keep working without it
    _HAVE_ORJSON = False
else:
    _HAVE_ORJSON = True


# orjson reads integers beyond 64 bits as floats (2**70 would come back as 1.18e+21):
# text with a run of 19+ digits goes to the json module, which keeps them exact.
# Bodies (bytes) are scanned by mapping every ASCII digit to "0" and anything else to " ",
# then looking for 19 zeros: two C loops, about ten times faster than the regex on a
# request body. Stored documents (str, small) take the regex.
_DIGITS_ONLY = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_RUN = b"0" * 19
_LONG_DIGITS_TEXT = re.compile(r"[0-9]{19,}")


def _has_long_digits(data: str | bytes) -> bool:
    if isinstance(data, bytes):
        return _LONG_RUN in data.translate(_DIGITS_ONLY)
    return _LONG_DIGITS_TEXT.search(data) is not None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(data: str | bytes) -> Any:
    """Parse JSON; raises ValueError (or RecursionError) when it is not valid JSON."""
    if _HAVE_ORJSON and not _has_long_digits(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # maybe a big integer, which the json module reads; else it raises too
    return json.loads(data, parse_constant=_refuse_constant)


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON of a response (values the server built: no NaN can occur)."""
    if _HAVE_ORJSON:
        try:
            return orjson.dumps(value)
        except TypeError:
            pass
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def canonical(value: Any) -> str:
    """One text per JSON value: keys sorted, so object key order does not matter, while
    1, 1.5, true and "1" stay distinct (Python's == would take 1 and true as equal)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def compact(value: Any) -> str:
    """The contract's canonical form: separators `,` and `:`, non-ASCII kept as is.

    Raises ValueError for NaN and Infinity (not JSON: a payload holding them is refused,
    never stored) and TypeError for what is not JSON at all. orjson writes non-finite
    floats as null, so a value is only searched for them when `null` appears.
    """
    if _HAVE_ORJSON:
        try:
            text = orjson.dumps(value)
        except TypeError:
            pass  # wide integers, non-string keys, very deep nesting: the json module decides
        else:
            if b"null" in text and _has_non_finite(value):
                raise ValueError("NaN and Infinity are not JSON")
            return text.decode()
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_non_finite(v) for v in value)
    return False
