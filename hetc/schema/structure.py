"""Structural checks: the JSON Schema, with its errors rewritten for people.

The schema file beside this module is the single source of structural truth (editors load it
through `hetc schema`); `draft07` checks documents against it. Each violated keyword becomes a
Finding that says what is wrong at which path and what would be right, in words, not keywords.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

from hetc.draft07 import SchemaError, Validator
from hetc.schema.diagnostics import Finding, Path, did_you_mean
from hetc.units import DIMENSIONS, UnitError, parse_quantity

SCHEMA_FILE = "spec.schema.json"


@cache
def spec_schema_text() -> str:
    """The spec's JSON Schema exactly as shipped (what `hetc schema` prints)."""
    return resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8")


@cache
def spec_schema() -> dict[str, Any]:
    loaded = json.loads(spec_schema_text())
    assert isinstance(loaded, dict)
    return loaded


@cache
def _validator() -> Validator:
    return Validator(spec_schema())


def schema_default(*keys: str) -> Any:
    """The `default` the schema documents for the property at `keys` (e.g. "run", "steps")."""
    node: Any = spec_schema()
    for key in keys:
        node = node["properties"][key]
    return node["default"]


_JSON_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "list",
    dict: "mapping",
    type(None): "null",
}


def describe_value(value: Any) -> str:
    """`string 'x'`, `a list`, `integer 3`: how a value is named in messages."""
    kind = _JSON_TYPES.get(type(value), type(value).__name__)
    if isinstance(value, (dict, list)):
        return f"a {kind}"
    if value is None:
        return "nothing (null)"
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    return f"{kind} {shown}"


def _expected(types: str | list[str]) -> str:
    names = {
        "object": "a mapping",
        "array": "a list",
        "integer": "an integer",
        "number": "a number",
        "string": "a string",
        "boolean": "true or false",
        "null": "null",
    }
    listed = [types] if isinstance(types, str) else types
    return " or ".join(names.get(t, t) for t in listed)


def non_finite_numbers(data: Any, path: Path = ()) -> Iterator[Finding]:
    """NaN and infinities anywhere (JSON Schema's comparisons let NaN through), and integers
    beyond the largest float, which no computation on the spec could convert."""
    if isinstance(data, float) and not math.isfinite(data):
        yield Finding(path, f"{data!r} is not a finite number (write a real value)")
    elif isinstance(data, int) and not isinstance(data, bool) and abs(data) > sys.float_info.max:
        yield Finding(
            path, f"{len(str(abs(data)))}-digit number is too large (at most about 1.8e308)"
        )
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from non_finite_numbers(value, (*path, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from non_finite_numbers(value, (*path, index))


def conforms(value: Any, *schema_path: str) -> bool:
    """Whether `value` is valid against the schema node at `schema_path` (for semantic checks
    that must not run on malformed parts; the structural pass reports those)."""
    node: Any = spec_schema()
    for key in schema_path:
        node = node[key]
    return Validator(node, root=spec_schema()).is_valid(value)


def structural_findings(data: Any) -> list[Finding]:
    """Every schema violation in `data`, one Finding per violated keyword."""
    return [finding_of(error) for error in _validator().iter_errors(data)]


def finding_of(error: SchemaError) -> Finding:
    """One schema violation (of the spec's schema or another, such as the plan's) as a
    Finding in words: what is wrong at which path and what would be right."""
    path, schema, kind, value = error.path, error.schema, error.keyword, error.instance
    expected = error.expected
    quantity = schema.get("x-quantity")
    if kind == "propertyNames":
        options = [str(o) for o in expected.get("enum", [])]
        key = error.detail
        return Finding(
            (*path, key),
            f"unknown key {key!r} (use one of {', '.join(options)}){did_you_mean(key, options)}",
            at_key=True,
        )
    if kind == "required":
        missing = error.detail
        described = schema.get("properties", {}).get(missing, {}).get("description", "")
        hint = f": {described}" if described else ""
        return Finding((*path, missing), f"missing required key {missing!r}{hint}")
    if kind == "additionalProperties":
        key, known = error.detail, list(schema.get("properties", {}))
        suggestion = did_you_mean(key, known) or f" (known keys: {', '.join(known)})"
        return Finding((*path, key), f"unknown key {key!r}{suggestion}", at_key=True)
    if quantity:
        return Finding(path, _quantity_message(value, quantity))
    if "x-shorthand" in schema and kind in ("type", "pattern"):
        return Finding(path, _shorthand_message(value, schema))
    if kind == "type":
        return Finding(path, f"expected {_expected(expected)}, got {describe_value(value)}")
    if kind == "enum":
        options = [str(o) for o in expected]
        return Finding(
            path,
            f"{describe_value(value)} is not one of {' | '.join(options)}"
            f"{did_you_mean(str(value), options)}",
        )
    if kind == "const":
        return Finding(path, f"must be {expected!r}, got {describe_value(value)}")
    if kind == "oneOf":
        return Finding(path, str(schema.get("x-error", "matches none, or several, of the forms")))
    if kind == "pattern":
        return Finding(path, _pattern_message(value, schema))
    if kind in _BOUND_WORDS:
        why = f" ({schema['x-why']})" if "x-why" in schema and kind == "maximum" else ""
        return Finding(path, f"must be {_BOUND_WORDS[kind]} {expected}, got {value!r}{why}")
    if kind == "minItems":
        entries = "entry" if expected == 1 else "entries"
        return Finding(path, f"needs at least {expected} {entries}, got {len(value)}")
    if kind == "maxItems":
        return Finding(path, f"takes at most {expected} entries, got {len(value)}")
    if kind == "minLength":
        return Finding(path, "must not be empty")
    return Finding(path, f"needs at least {expected} entry")  # minProperties


_BOUND_WORDS = {
    "minimum": "at least",
    "exclusiveMinimum": "greater than",
    "maximum": "at most",
    "exclusiveMaximum": "less than",
}


def _quantity_message(value: Any, dimension: str) -> str:
    try:
        parse_quantity(value, dimension)
    except UnitError as exc:
        return str(exc)
    return f"{value!r} is out of range: use {DIMENSIONS[dimension].describe()}"


def _shorthand_message(value: Any, schema: dict[str, Any]) -> str:
    key = schema["x-shorthand"]
    names = [str(n) for n in schema["properties"][key]["enum"]]
    hint = did_you_mean(value, names) if isinstance(value, str) else ""
    return (
        f"{describe_value(value)} is not one of {' | '.join(names)}{hint}"
        f" (write one of those names, or a mapping such as {{{key}: {names[0]}, ...}})"
    )


def _pattern_message(value: str, schema: dict[str, Any]) -> str:
    if schema.get("pattern", "").startswith("^[^"):
        return "names may not contain NUL or line breaks (any other character is fine)"
    description = schema.get("description", "")
    return f"{value!r} has the wrong form" + (f": {description}" if description else "")


def iter_quantities(
    data: Any, schema: dict[str, Any] | None = None, path: Path = ()
) -> Iterator[tuple[Path, str, Any]]:
    """(path, dimension, raw value) of every unit-bearing value present in `data`."""
    root = spec_schema()
    node = root if schema is None else schema
    if "$ref" in node:
        node = root["definitions"][node["$ref"].rsplit("/", 1)[1]]
    if "x-quantity" in node:
        yield path, node["x-quantity"], data
        return
    if isinstance(data, dict):
        properties = node.get("properties", {})
        extra = node.get("additionalProperties")
        for key, value in data.items():
            child = properties.get(key, extra if isinstance(extra, dict) else None)
            if child is not None:
                yield from iter_quantities(value, child, (*path, key))
    elif isinstance(data, list) and isinstance(node.get("items"), dict):
        for index, value in enumerate(data):
            yield from iter_quantities(value, node["items"], (*path, index))
