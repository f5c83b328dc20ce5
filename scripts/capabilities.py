"""Write README.md's "What works today" table from docs/capabilities.yaml.

The capability matrix is the one list of what hetc does; the README's table is generated from
it so the front page cannot claim less (or more) than the matrix, which
tests/test_readme_claims.py checks against the CLI, the docs and the tests.
Usage: python scripts/capabilities.py [--check]   (--check: exit 1 if README.md is stale)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / "docs" / "capabilities.yaml"
README = ROOT / "README.md"
START = "<!-- capabilities: generated from docs/capabilities.yaml by scripts/capabilities.py -->"
END = "<!-- end of capabilities -->"


def capabilities() -> list[dict[str, Any]]:
    """The matrix's entries, in order."""
    loaded = YAML(typ="safe").load(MATRIX.read_text(encoding="utf-8"))
    assert isinstance(loaded, list)
    return loaded


def table() -> str:
    """The README's table: capability, how to reach it, its doc, its tests."""
    rows = ["| what | command or spec key | doc | tested by |", "|---|---|---|---|"]
    for entry in capabilities():
        reached = [entry[k] for k in ("command", "spec") if entry.get(k)]
        command = ", ".join(f"`{r}`" for r in reached)
        doc = f"[{entry['doc']}]({entry['doc']})"
        tests = ", ".join(f"`{Path(t).name}`" for t in entry["tests"])
        rows.append(f"| {entry['capability']} | {command} | {doc} | {tests} |")
    return "\n".join(rows)


def render(readme: str) -> str:
    """`readme` with the text between the markers replaced by the current table."""
    head, rest = readme.split(START, 1)
    _old, tail = rest.split(END, 1)
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main() -> None:
    text = README.read_text(encoding="utf-8")
    new = render(text)
    if "--check" in sys.argv:
        if new != text:
            raise SystemExit(f"{README} is stale: run python scripts/capabilities.py")
        return
    README.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main()
