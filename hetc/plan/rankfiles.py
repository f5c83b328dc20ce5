"""Reading the topology files back: `topology/cluster.json` and the rank files, schema-checked.

The runtime trusts these files to number processes and create process groups, so a file that
was edited, truncated or written by another hetc version is refused with every reason at once,
each naming the file and the place in it, before any process acts on it.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from hetc.draft07 import SchemaError, Validator


class RankFileError(ValueError):
    """A topology file that cannot be used; `problems` has one message per violation."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@cache
def _schema(name: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    loaded = json.loads(text)
    assert isinstance(loaded, dict)
    return loaded


def read_cluster_file(path: str | Path) -> dict[str, Any]:
    """`topology/cluster.json`, checked against `cluster.schema.json`."""
    return _read(Path(path), "cluster.schema.json")


def read_rank_file(path: str | Path) -> dict[str, Any]:
    """One rank file, checked against `rank.schema.json`."""
    return _read(Path(path), "rank.schema.json")


def parse_cluster_file(text: str, path: str | Path) -> dict[str, Any]:
    """`topology/cluster.json` from its content (read by the caller from `path`)."""
    return _parse(text, Path(path), "cluster.schema.json")


def parse_rank_file(text: str, path: str | Path) -> dict[str, Any]:
    """One rank file from its content (read by the caller from `path`)."""
    return _parse(text, Path(path), "rank.schema.json")


def _read(path: Path, schema: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RankFileError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise RankFileError([f"{path}: not UTF-8: {exc.reason}"]) from None
    return _parse(text, path, schema)


def _parse(text: str, path: Path, schema: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RankFileError([f"{path}: not JSON: {exc}"]) from None
    problems = [
        f"{path}: {_where(e)}: {_describe(e)}" for e in Validator(_schema(schema)).iter_errors(data)
    ]
    if problems:
        raise RankFileError(problems)
    assert isinstance(data, dict)
    return data


def _where(error: SchemaError) -> str:
    return "/".join(map(str, error.path)) or "(root)"


def _describe(error: SchemaError) -> str:
    if error.keyword == "required":
        return f"missing key {error.detail!r}"
    if error.keyword == "additionalProperties":
        return f"unexpected key {error.detail!r}"
    found = json.dumps(error.instance)
    if len(found) > 60:
        found = found[:57] + "..."
    return f"{found} violates `{error.keyword}: {json.dumps(error.expected)}`"
