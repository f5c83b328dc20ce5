"""Shorthands: a name where the schema takes a mapping, such as `optimizer: adam`.

A person writes `optimizer: adam` and means Adam with the documented defaults. The schema marks
each such mapping with `x-shorthand: <key>` (and a `pattern` of the names, so editors flag a
wrong one): a string there stands for `{<key>: <string>}`, every other key taking its default
when the spec is typed. The expansion runs once, before any check, so the checks, the typed
spec, the plan's spec hash and the runtime see only the mapping: `optimizer: adam` and its
written-out defaults compile to the same files. A string that is not one of the names stays a
string, and the schema rejects it at its position with the names listed.

Where the names are the catalog's rather than the schema's (`model: OPT-350M` for
`{preset: OPT-350M}`), the node is marked `x-shorthand-any: <key>` instead: any string stands
for `{<key>: <string>}`, and the semantic checks that follow judge the name (a preset is
looked up in the catalog, case-insensitively, and an unknown one is refused there with the
presets listed), so the schema does not copy the catalog's list.
"""

from __future__ import annotations

from typing import Any

from hetc.schema.structure import spec_schema


def shorthand_names(node: dict[str, Any]) -> tuple[str, ...]:
    """The names a string may take at a schema node marked `x-shorthand`: its key's enum."""
    return tuple(node["properties"][node["x-shorthand"]]["enum"])


def expand_shorthands(data: Any, schema: dict[str, Any] | None = None) -> Any:
    """`data` with each known name at a shorthand node replaced by its one-key mapping."""
    node = spec_schema() if schema is None else schema
    if "x-shorthand" in node and isinstance(data, str) and data in shorthand_names(node):
        return {node["x-shorthand"]: data}
    if "x-shorthand-any" in node and isinstance(data, str):
        return {node["x-shorthand-any"]: data}
    if isinstance(data, dict):
        properties = node.get("properties", {})
        return {
            key: expand_shorthands(value, properties[key]) if key in properties else value
            for key, value in data.items()
        }
    if isinstance(data, list) and isinstance(node.get("items"), dict):
        return [expand_shorthands(item, node["items"]) for item in data]
    return data
