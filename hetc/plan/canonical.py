"""Canonical JSON text, byte for byte what `json.dumps(value, sort_keys=True, indent=2,
ensure_ascii=False)` writes, faster.

With an indent, the standard library encodes in pure Python through a chain of generators, and
a large compile writes megabytes of indented JSON (`plan.json`, `cluster.json`, one file per
rank). This encoder walks the value once, appending to one list. It
handles what hetc writes - dicts with string keys, lists and tuples, strings, ints, floats,
booleans and None - and hands anything else (other keys or types) to `json.dumps`, so its
output never differs (tests/test_plan_canonical.py compares the two on generated values).
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring
from typing import Any

_SPECIAL_FLOATS = {float("inf"): "Infinity", float("-inf"): "-Infinity"}


class _Unusual(Exception):
    """A value this encoder leaves to the standard library."""


def canonical_json_text(value: Any) -> str:
    """`json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False)`, faster."""
    parts: list[str] = []
    try:
        _encode(value, "\n", parts)
    except _Unusual:
        return json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False)
    return "".join(parts)


def _encode(value: Any, newline: str, parts: list[str]) -> None:
    """Append `value`'s text to `parts`; `newline` is a newline and the current indent."""
    kind = type(value)
    if kind is str:
        parts.append(encode_basestring(value))
    elif value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif kind is int:
        parts.append(int.__repr__(value))
    elif kind is float:
        if value != value:
            parts.append("NaN")
        else:
            parts.append(_SPECIAL_FLOATS.get(value) or float.__repr__(value))
    elif kind is dict:
        if not value:
            parts.append("{}")
            return
        if any(type(key) is not str for key in value):
            raise _Unusual
        inner = newline + "  "
        separator = "{" + inner
        for key in sorted(value):
            parts.append(separator + encode_basestring(key) + ": ")
            _encode(value[key], inner, parts)
            separator = "," + inner
        parts.append(newline + "}")
    elif kind is list or kind is tuple:
        if not value:
            parts.append("[]")
            return
        inner = newline + "  "
        separator = "[" + inner
        for item in value:
            parts.append(separator)
            _encode(item, inner, parts)
            separator = "," + inner
        parts.append(newline + "]")
    else:
        raise _Unusual
