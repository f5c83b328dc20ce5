"""Write docs/spec-reference.md from the JSON Schema, the single source of the spec's structure.

Usage: python scripts/spec_reference.py [--check]   (--check: exit 1 if the file is stale)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "hetc" / "schema" / "spec.schema.json"
TARGET = ROOT / "docs" / "spec-reference.md"


def _kind(node: dict[str, Any], definitions: dict[str, Any]) -> str:
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[1]
        return f"{name.replace('_', ' ')} (e.g. `{_example(definitions[name])}`)"
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    if "const" in node:
        return f"`{node['const']}`"
    if "x-shorthand-any" in node:
        return f"mapping, or a {node['x-shorthand-any']} name"
    if "x-shorthand" in node:
        names = node["properties"][node["x-shorthand"]]["enum"]
        return "mapping, or a name: " + " \\| ".join(f"`{n}`" for n in names)
    kind = node.get("type", "")
    if kind == "array":
        items = node.get("items", {})
        inner = _kind(items, definitions) if "properties" not in items else "mapping"
        return f"list of {inner}"
    if kind == "object":
        return "mapping"
    if kind == "integer" and "minimum" in node and "maximum" in node:
        return f"integer {node['minimum']} to {node['maximum']}"
    if kind == "integer" and "minimum" in node:
        return f"integer >= {node['minimum']}"
    return str(kind)


def _example(definition: dict[str, Any]) -> str:
    description = definition["description"]
    return (
        description.split("such as '", 1)[1].split("'", 1)[0] if "such as '" in description else ""
    )


def _rows(
    node: dict[str, Any], definitions: dict[str, Any], path: str, required: bool
) -> Iterator[str]:
    if path:
        default = (
            f"`{json.dumps(node['default'])}`"
            if "default" in node
            else ("**required**" if required else "")
        )
        description = node.get("description", "").replace("|", "\\|")
        yield f"| `{path}` | {_kind(node, definitions)} | {default} | {description} |"
    items = node.get("items", {}) if node.get("type") == "array" else None
    target = items if isinstance(items, dict) and "properties" in items else node
    prefix = f"{path}[]" if target is not node else path
    needed = set(target.get("required", []))
    for key, child in target.get("properties", {}).items():
        yield from _rows(child, definitions, f"{prefix}.{key}" if prefix else key, key in needed)


READING = [
    "## Reading a file",
    "",
    "- A quantity is never negative: `-3 USD/h` or `-100Gbps` is an error that says it must not",
    "  be negative (prices may be zero; sizes, bandwidths and durations must be positive).",
    "- Each key appears once in a mapping: every key given twice is an error at the second one,",
    "  with its path and the first one's line and column.",
    "- A file holds one YAML document: a second one (`---`) is an error at its start.",
    "- Names a person reads (the job `name`, zone, region, pool, device and site names) get a",
    "  warning when they hold a bidirectional control (U+202A-U+202E, U+2066-U+2069, ...), an",
    "  invisible character (zero-width and other format characters) or a space that is not a",
    "  plain one: they display as other text than they are.",
    "- A zone named like another zone's region while it lies in a region of its own (zone `r1`",
    "  in region `r2` beside zone `r2` in region `r1`) gets a warning: a `between:` or report",
    "  that says `r1` reads two ways.",
    "- A model the training runtime cannot train (`hetc/plan/capability.py`: OPT-350M's",
    "  embedding projection, GPT-Neo's local attention) gets a warning at the field that names",
    "  it, or at the preset: hetc plans and compiles it, and the runtime refuses it at start-up.",
    "  `hetc compile` prints every warning of `hetc validate` once, on stderr.",
]
"""What `hetc validate` holds every file to beyond the schema's keys, as users meet it."""

PLAUSIBLE = [
    "## Implausible magnitudes",
    "",
    "A value beyond what any real device, link or price list has gets a warning at its own",
    "position (`hetc validate --strict` fails on it). It is nearly always a unit that slipped:",
    "a bare number is read in the base unit, so `price: 3.67` is 3.67 USD per second (13,212",
    "USD/h), `memory: 64` is 64 bytes and `latency: 10` is 10 seconds; the planner would drop",
    "such a pool or misprice it without a word. The warning says how the value reads and, where",
    "one is plausible, the spelling most likely meant (for `price: 3.67`: write `3.67 USD/h`).",
    "Each bound lies beyond the real extreme named beside it (`hetc/schema/plausible.py`):",
    "",
    "| value | keys | warns below | warns above | why no real value crosses the bound |",
    "|---|---|---|---|---|",
]
"""The head of the plausibility table; its rows come from `hetc.schema.plausible.BOUNDS`."""


def _plausible_rows() -> list[str]:
    from hetc.schema.plausible import BOUNDS, INDEX, shown

    rows = []
    for bound in BOUNDS:
        keys = ", ".join(
            "`" + "".join(p if p == INDEX else f".{p}" for p in path).lstrip(".") + "`"
            for path in bound.paths
        )
        low = "" if bound.low is None else shown(bound.low, bound.dimension)
        high = "" if bound.high is None else shown(bound.high, bound.dimension)
        why = " ".join(
            f"{side}: {text}."
            for side, text in (("below", bound.low_why), ("above", bound.high_why))
            if text
        )
        rows.append(f"| {bound.what} | {keys} | {low} | {high} | {why} |")
    return rows


def render() -> str:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    definitions = schema["definitions"]
    lines = [
        "# Spec reference (version 1)",
        "",
        "Generated from `hetc/schema/spec.schema.json` by `scripts/spec_reference.py`;",
        "do not edit. Quantities take a number in SI base units or a string with a unit; the",
        "units each kind accepts are listed at the end. `[]` marks the entries of a list.",
        "",
        "| key | kind | default | meaning |",
        "|---|---|---|---|",
        *_rows(schema, definitions, "", True),
        "",
        "## Units",
        "",
    ]
    for name, definition in definitions.items():
        lines.append(f"- **{name.replace('_', ' ')}**: {definition['description']}")
    lines += ["", *READING, "", *PLAUSIBLE, *_plausible_rows()]
    return "\n".join(lines) + "\n"


def main() -> None:
    text = render()
    if "--check" in sys.argv:
        if TARGET.read_text(encoding="utf-8") != text:
            raise SystemExit(f"{TARGET} is stale: run python scripts/spec_reference.py")
        return
    TARGET.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
