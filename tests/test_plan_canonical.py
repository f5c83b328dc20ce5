"""Canonical JSON: `canonical_json_text` writes exactly what the standard library's indented,
sorted encoder writes (plan hashes and manifests depend on every byte).

Mutation checks (done by hand): writing NaN as `nan`, or encoding int keys itself instead of
leaving them to the standard library, each fails a test here."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hetc.plan.canonical import canonical_json_text

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=30,
)


def _standard(value: Any) -> str:
    return json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False)


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_same_text_as_the_standard_library(value: Any) -> None:
    """Generated nested values (unicode, escapes, NaN, infinities, -0.0, big ints, empty
    containers, tuples) give the standard library's text, byte for byte."""
    assert canonical_json_text(value) == _standard(value)


def test_unusual_values_are_left_to_the_standard_library() -> None:
    """Non-string keys and subclasses take the standard library's path, and its result."""

    class Named(str):
        pass

    for value in ({1: "a", 2: [True]}, {"k": Named("v")}, [1.5, {"x": (None,)}]):
        assert canonical_json_text(value) == _standard(value)
