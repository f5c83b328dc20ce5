"""Spec shorthands: `optimizer: adam` and `lr_schedule: cosine` mean their mapping with the
documented defaults, everywhere hetc reads a spec.

Mutation check (done): with the `expand_shorthands` call removed from `check_text`, the compile
tests fail (the typed spec is built from a string); with `x-shorthand` dropped from the
schema's optimizer node, the schema-listing tests fail.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.schema import check_text
from hetc.schema.shorthands import expand_shorthands, shorthand_names
from hetc.schema.structure import spec_schema

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
LOCAL = ROOT / "examples" / "local-cpu.yaml"
WRITTEN_OPTIMIZER = "  optimizer: {type: adamw, lr: 1.0e-3}\n"
FULL_ADAM = (
    "  optimizer: {type: adam, lr: 3.0e-4, betas: [0.9, 0.999], eps: 1.0e-8,"
    " weight_decay: 0.0, momentum: 0.9}\n"
    "  lr_schedule: {type: cosine, warmup_steps: 0, min_lr: 0.0}\n"
)
"""The oracle: the schema's documented defaults for adam and cosine, written out by hand."""


def _shorthand_nodes() -> dict[str, dict[str, Any]]:
    """Every schema node that takes a shorthand, by dotted path."""
    found: dict[str, dict[str, Any]] = {}

    def walk(node: dict[str, Any], path: str) -> None:
        if "x-shorthand" in node:
            found[path] = node
        for key, child in node.get("properties", {}).items():
            walk(child, f"{path}.{key}" if path else key)

    walk(spec_schema(), "")
    return found


def _local_spec(directory: Path, training_lines: str) -> Path:
    """examples/local-cpu.yaml with its optimizer line replaced, written to `directory`."""
    text = LOCAL.read_text(encoding="utf-8")
    assert WRITTEN_OPTIMIZER in text
    text = text.replace(WRITTEN_OPTIMIZER, training_lines).replace(
        "path: data/tiny-corpus.bin", f"path: {ROOT / 'examples' / 'data' / 'tiny-corpus.bin'}"
    )
    directory.mkdir()
    spec = directory / "spec.yaml"
    spec.write_text(text, encoding="utf-8")
    return spec


def _files(directory: Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_shorthands_compile_to_the_files_of_the_written_out_defaults(tmp_path: Path) -> None:
    """`optimizer: adam` + `lr_schedule: cosine` compile byte for byte like their full mappings."""
    short = _local_spec(tmp_path / "short", "  optimizer: adam\n  lr_schedule: cosine\n")
    full = _local_spec(tmp_path / "full", FULL_ADAM)
    outputs = []
    for spec in (short, full):
        result = runner.invoke(app, ["compile", str(spec), "-o", str(spec.parent / "out")])
        assert result.exit_code == 0, result.output
        outputs.append(_files(spec.parent / "out"))
    assert outputs[0] == outputs[1]
    training = json.loads(outputs[0]["training.json"])
    assert training["optimizer"]["type"] == "adam"
    assert training["lr_schedule"]["type"] == "cosine"


@pytest.mark.parametrize(
    ("path", "name"),
    [
        (path, name)
        for path, node in sorted(_shorthand_nodes().items())
        for name in shorthand_names(node)
    ],
)
def test_each_name_types_like_its_one_key_mapping(path: str, name: str) -> None:
    """Every name of every shorthand gives the typed spec of `{type: name}` (defaults filled)."""
    key = path.rsplit(".", 1)[1]
    base = LOCAL.read_text(encoding="utf-8").replace(WRITTEN_OPTIMIZER, "")
    base = base.replace("path: data/tiny-corpus.bin", "path: examples/data/tiny-corpus.bin")
    short = check_text(base.replace("  seq_len: 64\n", f"  seq_len: 64\n  {key}: {name}\n"))
    full = check_text(
        base.replace("  seq_len: 64\n", f"  seq_len: 64\n  {key}: {{type: {name}}}\n")
    )
    assert short.errors == [] and full.errors == [], (short.errors, full.errors)
    assert short.spec is not None and short.spec == full.spec
    assert getattr(short.spec.training, key).type == name


def test_shorthands_are_optimizer_and_lr_schedule() -> None:
    """The schema offers the shorthands the issue asks for, each name from its `type` enum."""
    nodes = _shorthand_nodes()
    assert set(nodes) == {"training.optimizer", "training.lr_schedule"}
    assert shorthand_names(nodes["training.optimizer"]) == ("adam", "adamw", "sgd")
    assert shorthand_names(nodes["training.lr_schedule"]) == ("constant", "cosine")
    for node in nodes.values():
        assert node["pattern"] == "^(" + "|".join(shorthand_names(node)) + ")$"


def test_every_shorthand_is_in_hetc_schema_and_the_reference() -> None:
    """`hetc schema` and docs/spec-reference.md both show each shorthand and its names."""
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0
    printed = json.loads(result.output)
    reference = (ROOT / "docs" / "spec-reference.md").read_text(encoding="utf-8")
    for path, node in _shorthand_nodes().items():
        keys = path.split(".")
        shown = printed
        for key in keys:
            shown = shown["properties"][key]
        assert shown["x-shorthand"] == "type"
        example = f"`{keys[-1]}: {shorthand_names(node)[-1 if keys[-1] == 'lr_schedule' else 0]}`"
        assert example in shown["description"]
        row = next(line for line in reference.splitlines() if line.startswith(f"| `{path}` |"))
        assert all(f"`{name}`" in row for name in shorthand_names(node)), row
        assert example in row


def test_a_wrong_name_is_positioned_and_lists_the_names(tmp_path: Path) -> None:
    """`optimizer: adan` fails at its line and column, suggests adam and lists every name."""
    spec = _local_spec(tmp_path / "bad", "  optimizer: adan\n  lr_schedule: 3\n")
    result = runner.invoke(app, ["validate", str(spec)])
    assert result.exit_code == 1
    lines = spec.read_text(encoding="utf-8").splitlines()
    row = next(i for i, line in enumerate(lines, 1) if "optimizer: adan" in line)
    assert (
        f"{spec}:{row}:14: training.optimizer: string 'adan' is not one of adam | adamw | sgd"
        " (did you mean 'adam'?)"
    ) in result.output
    assert (
        f"{spec}:{row + 1}:16: training.lr_schedule: integer 3 is not one of constant | cosine"
        in (result.output)
    )


def test_expansion_touches_only_shorthand_nodes() -> None:
    """A known name elsewhere (the job's name) and an unknown name stay strings."""
    data = {"name": "adam", "training": {"optimizer": "adan", "lr_schedule": "cosine"}}
    assert expand_shorthands(data) == {
        "name": "adam",
        "training": {"optimizer": "adan", "lr_schedule": {"type": "cosine"}},
    }
