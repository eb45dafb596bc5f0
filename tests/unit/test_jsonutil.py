"""queuelog.jsonutil.loads: orjson when it is exact, the json module when a number is too long."""

from __future__ import annotations

import pytest

from queuelog import jsonutil

BIG = 2**70  # orjson alone would give 1.1805916207174113e+21


@pytest.mark.parametrize("as_bytes", [True, False])
@pytest.mark.parametrize(
    "number", [BIG, -BIG, 10**18, 10**19 - 1, 10**19, 2**63, 2**64 + 1, 12345678901234567890123]
)
def test_integers_of_any_length_come_back_exact(number: int, as_bytes: bool) -> None:
    text = f'{{"n": {number}, "list": [1, {number}], "s": "x"}}'
    value = jsonutil.loads(text.encode() if as_bytes else text)
    assert value == {"n": number, "list": [1, number], "s": "x"}
    assert type(value["n"]) is int


@pytest.mark.parametrize("as_bytes", [True, False])
def test_long_digit_runs_inside_strings_and_floats_parse_as_written(as_bytes: bool) -> None:
    text = '{"s": "12345678901234567890123", "f": 1.5e300, "g": 0.12345678901234567890123}'
    value = jsonutil.loads(text.encode() if as_bytes else text)
    assert value["s"] == "12345678901234567890123"
    assert value["f"] == 1.5e300
    assert value["g"] == pytest.approx(0.12345678901234568)


@pytest.mark.parametrize("text", ["{", '{"a": NaN}', '{"a": Infinity}', "[1,]", ""])
def test_what_is_not_json_raises_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        jsonutil.loads(text.encode())
    with pytest.raises(ValueError):
        jsonutil.loads(text)
