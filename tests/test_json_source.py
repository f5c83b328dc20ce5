"""The position-keeping JSON reader (`hetc.schema.json_source`): it reads what `json.loads`
reads, to the same values (integral floats as integers, as the YAML reader does), and each
recorded position is where `json.dumps` put that value - the oracle being the text itself."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetc.schema.json_source import parse_json
from hetc.schema.source import SyntaxProblem

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
documents = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_integral(v) for v in value]
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    return value


def _offset(text: str, line: int, column: int) -> int:
    return sum(len(row) + 1 for row in text.split("\n")[: line - 1]) + column - 1


@settings(max_examples=300, deadline=None)
@given(documents, st.sampled_from([None, 0, 2]))
def test_reads_what_json_loads_reads_and_positions_point_at_each_value(
    document: Any, indent: int | None
) -> None:
    """Same data as json.loads; re-parsing the text from each recorded value position with
    json's own raw_decode gives that very value back."""
    text = json.dumps(document, indent=indent, ensure_ascii=False)
    data, positions = parse_json(text)
    assert data == _integral(json.loads(text))
    decoder = json.JSONDecoder()
    for path, (line, column) in positions.values.items():
        expected: Any = json.loads(text)
        for key in path:
            expected = expected[key]
        value, _ = decoder.raw_decode(text, _offset(text, line, column))
        assert value == expected, (path, line, column)
    for path, (line, column) in positions.keys.items():
        assert text[_offset(text, line, column) :].startswith(
            json.dumps(path[-1], ensure_ascii=False)
        )


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("", (1, 1), "the file is empty"),
        ('{\n  "a": 1,\n}', (3, 1), "expected a key in double quotes"),
        ('{"a": 1 "b": 2}', (1, 9), "expected ',' or '}'"),
        ("[1 2]", (1, 4), "expected ',' or ']'"),
        ('{"a": 1}\n{}', (2, 1), "unexpected data after the JSON value"),
        ('{"a": -Infinity}', (1, 7), "-Infinity is not a JSON number"),
        ('{"a": 1e999}', (1, 7), "1e999 is too large"),
        ('{"a": tru}', (1, 7), "expected a JSON value, found 't'"),
        ('{"a" : "x\ny"}', (1, 10), "JSON string: Invalid control character"),
        ('{"a": 1, "a": 2}', (1, 10), "key 'a' is given twice (first at line 1)"),
        ("[" * 70 + "]" * 70, (1, 66), "nesting is deeper than 64 levels"),
    ],
)
def test_every_syntax_problem_is_positioned(text: str, where: tuple[int, int], what: str) -> None:
    """One SyntaxProblem, at the character where reading stopped."""
    with pytest.raises(SyntaxProblem, match=f"^{re.escape(what)}") as raised:
        parse_json(text)
    assert (raised.value.line, raised.value.column) == where
