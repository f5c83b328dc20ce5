"""A validator for the subset of JSON Schema draft-07 that hetc's schemas (spec, plan) use.

Why not the jsonschema package: importing it (attrs, referencing, the bundled metaschemas)
costs 60-90 ms, a third of `hetc validate`'s 0.3 s budget, for every pre-commit run. This
module implements exactly the keywords the spec schema uses, with draft-07 semantics (`$ref`
siblings ignored, `integer` = a number without a fractional part, `true` is no number) and
ECMA-262 regexes (`$` only at the very end). The test suite checks it against jsonschema's
Draft7Validator on thousands of documents, and that the schema uses no other keyword.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sized
from dataclasses import dataclass
from functools import cache
from typing import Any

Path = tuple[str | int, ...]
ANNOTATIONS = frozenset(
    {
        "$schema",
        "$id",
        "title",
        "description",
        "default",
        "definitions",
        "x-quantity",
        "x-shorthand",
        "x-shorthand-any",
        "x-error",
        "x-why",
    }
)
"""Keywords that carry no assertion (x-* are hetc's own hints for messages)."""


@dataclass(frozen=True, slots=True)
class SchemaError:
    """One violated keyword: where in the document, which keyword, and with what."""

    path: Path
    keyword: str
    expected: Any
    """The keyword's value in the schema (the type, the enum, the bound...)."""
    instance: Any
    schema: dict[str, Any]
    """The schema node that holds the keyword (after `$ref` resolution)."""
    detail: str = ""
    """For required / additionalProperties / propertyNames: the key concerned."""


def ecma_anchors(pattern: str) -> str:
    """`pattern` with each `$` anchor made `\\Z`: JSON Schema patterns are ECMA-262, where `$`
    matches only at the very end, but Python's `$` also matches before a final newline (so
    `^[^\\n]+$` would let `"name\\n"` through)."""
    out, escaped, in_class = [], False, False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        elif char == "$" and not in_class:
            out.append("\\Z")
            continue
        out.append(char)
    return "".join(out)


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(ecma_anchors(pattern))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": _is_number,
    "integer": lambda v: _is_number(v) and (isinstance(v, int) or v.is_integer()),
}


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return bool(a == b)


class Validator:
    """Checks documents against one schema node; `$ref`s resolve in `root`'s definitions."""

    def __init__(self, schema: dict[str, Any], root: dict[str, Any] | None = None) -> None:
        self.schema = schema
        self.root = root if root is not None else schema

    def iter_errors(self, instance: Any) -> Iterator[SchemaError]:
        """Every violation, depth first in schema order."""
        return self._check(self.schema, instance, ())

    def is_valid(self, instance: Any) -> bool:
        return next(self.iter_errors(instance), None) is None

    def _resolve(self, ref: str) -> dict[str, Any]:
        if not ref.startswith("#/definitions/"):
            raise ValueError(f"unsupported $ref {ref!r}: only #/definitions/NAME")
        node = self.root["definitions"][ref.rsplit("/", 1)[1]]
        assert isinstance(node, dict)
        return node

    def _check(self, node: dict[str, Any], value: Any, path: Path) -> Iterator[SchemaError]:
        while "$ref" in node:  # draft-07: keywords beside $ref are ignored
            node = self._resolve(node["$ref"])
        for keyword, expected in node.items():
            if keyword in ANNOTATIONS:
                continue
            check = _KEYWORDS.get(keyword)
            if check is None:
                raise ValueError(f"schema keyword {keyword!r} is not supported by hetc's validator")
            yield from check(self, expected, value, node, path)


Check = Callable[[Validator, Any, Any, dict[str, Any], Path], Iterator[SchemaError]]


def _type(
    v: Validator, expected: Any, value: Any, node: dict[str, Any], path: Path
) -> Iterator[SchemaError]:
    kinds = [expected] if isinstance(expected, str) else expected
    if not any(_TYPES[k](value) for k in kinds):
        yield SchemaError(path, "type", expected, value, node)


def _properties(
    v: Validator, expected: Any, value: Any, node: dict[str, Any], path: Path
) -> Iterator[SchemaError]:
    if isinstance(value, dict):
        for key, child in expected.items():
            if key in value:
                yield from v._check(child, value[key], (*path, key))


def _additional(
    v: Validator, expected: Any, value: Any, node: dict[str, Any], path: Path
) -> Iterator[SchemaError]:
    if not isinstance(value, dict):
        return
    known = node.get("properties", {})
    for key in value:
        if key in known:
            continue
        if expected is False:
            yield SchemaError(path, "additionalProperties", False, value, node, detail=key)
        elif isinstance(expected, dict):
            yield from v._check(expected, value[key], (*path, key))


def _required(
    v: Validator, expected: Any, value: Any, node: dict[str, Any], path: Path
) -> Iterator[SchemaError]:
    if isinstance(value, dict):
        for key in expected:
            if key not in value:
                yield SchemaError(path, "required", expected, value, node, detail=key)


def _enum(
    v: Validator, expected: Any, value: Any, node: dict[str, Any], path: Path
) -> Iterator[SchemaError]:
    if not any(_equal(value, option) for option in expected):
        yield SchemaError(path, "enum", expected, value, node)


def _const(
    v: Validator, expected: Any, value: Any, node: dict[str, Any], path: Path
) -> Iterator[SchemaError]:
    if not _equal(value, expected):
        yield SchemaError(path, "const", expected, value, node)


def _bound(keyword: str, fails: Callable[[float, float], bool]) -> Check:
    def check(
        v: Validator, expected: Any, value: Any, node: dict[str, Any], path: Path
    ) -> Iterator[SchemaError]:
        if _is_number(value) and fails(value, expected):
            yield SchemaError(path, keyword, expected, value, node)

    return check


def _size(keyword: str, kind: type[Sized], fails: Callable[[int, int], bool]) -> Check:
    def check(
        v: Validator, expected: Any, value: Any, node: dict[str, Any], path: Path
    ) -> Iterator[SchemaError]:
        if isinstance(value, kind) and fails(len(value), expected):
            yield SchemaError(path, keyword, expected, value, node)

    return check


def _items(
    v: Validator, expected: Any, value: Any, node: dict[str, Any], path: Path
) -> Iterator[SchemaError]:
    if isinstance(value, list) and isinstance(expected, dict):
        for index, item in enumerate(value):
            yield from v._check(expected, item, (*path, index))


def _pattern(
    v: Validator, expected: Any, value: Any, node: dict[str, Any], path: Path
) -> Iterator[SchemaError]:
    if isinstance(value, str) and not _regex(expected).search(value):
        yield SchemaError(path, "pattern", expected, value, node)


def _property_names(
    v: Validator, expected: Any, value: Any, node: dict[str, Any], path: Path
) -> Iterator[SchemaError]:
    if isinstance(value, dict):
        for key in value:
            if next(v._check(expected, key, path), None) is not None:
                yield SchemaError(path, "propertyNames", expected, value, node, detail=key)


def _one_of(
    v: Validator, expected: Any, value: Any, node: dict[str, Any], path: Path
) -> Iterator[SchemaError]:
    matches = sum(1 for option in expected if next(v._check(option, value, path), None) is None)
    if matches != 1:
        yield SchemaError(path, "oneOf", expected, value, node)


_KEYWORDS: dict[str, Check] = {
    "type": _type,
    "properties": _properties,
    "additionalProperties": _additional,
    "required": _required,
    "enum": _enum,
    "const": _const,
    "minimum": _bound("minimum", lambda x, b: x < b),
    "maximum": _bound("maximum", lambda x, b: x > b),
    "exclusiveMinimum": _bound("exclusiveMinimum", lambda x, b: x <= b),
    "exclusiveMaximum": _bound("exclusiveMaximum", lambda x, b: x >= b),
    "minItems": _size("minItems", list, lambda n, b: n < b),
    "maxItems": _size("maxItems", list, lambda n, b: n > b),
    "minLength": _size("minLength", str, lambda n, b: n < b),
    "minProperties": _size("minProperties", dict, lambda n, b: n < b),
    "items": _items,
    "pattern": _pattern,
    "propertyNames": _property_names,
    "oneOf": _one_of,
}
SUPPORTED = frozenset(_KEYWORDS) | ANNOTATIONS | {"$ref"}
"""Every keyword this validator understands; the spec schema must use no other."""
