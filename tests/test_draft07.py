"""hetc's draft-07 validator agrees with jsonschema's Draft7Validator on the spec schema."""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft7Validator, ValidationError, validators
from ruamel.yaml import YAML

from hetc.draft07 import SUPPORTED, Validator, ecma_anchors
from hetc.schema.structure import spec_schema

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = [
    YAML(typ="safe").load(p.read_text(encoding="utf-8"))
    for p in sorted((ROOT / "examples").glob("*.yaml"))
]
NAMED_CHILDREN = ("properties", "definitions")


def _ecma_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not re.search(ecma_anchors(pattern), instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


# The oracle: jsonschema's own draft-07 validator, with ECMA-262 `$` in patterns (the
# JSON Schema spec's regex dialect; Python's `$` also matches before a final newline).
ORACLE = validators.extend(Draft7Validator, {"pattern": _ecma_pattern})(spec_schema())
OURS = Validator(spec_schema())


def _keywords(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, child in node.items():
            yield key
            if key in NAMED_CHILDREN:
                for named in child.values():
                    yield from _keywords(named)
            elif key in ("enum", "const", "default"):
                continue
            else:
                yield from _keywords(child)
    elif isinstance(node, list):
        for child in node:
            yield from _keywords(child)


def test_schema_uses_only_supported_keywords() -> None:
    """Every keyword in spec.schema.json is one hetc's validator implements."""
    used = set(_keywords(spec_schema()))
    assert used <= SUPPORTED, used - SUPPORTED


def _oracle_errors(document: Any) -> Counter[tuple[str, str]]:
    found: Counter[tuple[str, str]] = Counter()
    for error in ORACLE.iter_errors(document):
        path = json.dumps(list(error.absolute_path))
        if "propertyNames" in error.relative_schema_path:
            found[path, "propertyNames"] += 1
        elif error.validator == "additionalProperties":
            known = error.schema.get("properties", {})
            found[path, "additionalProperties"] += sum(k not in known for k in error.instance)
        else:
            found[path, str(error.validator)] += 1
    return found


def _our_errors(document: Any) -> Counter[tuple[str, str]]:
    return Counter((json.dumps(list(e.path)), e.keyword) for e in OURS.iter_errors(document))


SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 3000),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(
        [
            0,
            1,
            2,
            3,
            4.0,
            1.5,
            -1,
            "",
            "x",
            "fp16",
            "bf16",
            "gelu",
            "40GB",
            "0GB",
            "1e999GB",
            "10us",
            "3.67 USD/h",
            "100Gbps",
            "a\n",
            "48:00:00",
            "cosine",
            "slurm",
            "A100-40GB",
            "global",
            "name\x00",
            "max_throughput",
        ]
    ),
    st.text(max_size=6),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(node, dict):
        for key, child in node.items():
            yield from _paths(child, (*path, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _paths(child, (*path, index))


@st.composite
def mutated_examples(draw: st.DrawFn) -> Any:
    document = copy.deepcopy(draw(st.sampled_from(EXAMPLES)))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(_paths(document))))
        if not path:
            continue
        parent = document
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(JSON)
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(JSON)
    return document


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=mutated_examples())
def test_agrees_with_jsonschema_on_mutated_examples(document: Any) -> None:
    """Same violations (path, keyword, count) as jsonschema on examples with 1-3 mutations."""
    assert _our_errors(document) == _oracle_errors(document)


@settings(max_examples=200, deadline=None)
@given(document=JSON)
def test_agrees_with_jsonschema_on_arbitrary_json(document: Any) -> None:
    """Same violations as jsonschema on arbitrary JSON-like documents."""
    assert _our_errors(document) == _oracle_errors(document)


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        (r"^[^\n]+$", "name", True),
        (r"^[^\n]+$", "name\n", False),
        (r"^\s*(?:\$|USD)\s*$", "$", True),
        (r"^a[$]b$", "a$b", True),
    ],
)
def test_ecma_anchors(pattern: str, text: str, matches: bool) -> None:
    """`$` matches only at the very end; escaped and bracketed dollars stay literal."""
    assert bool(re.search(ecma_anchors(pattern), text)) is matches


def test_unsupported_keyword_is_refused() -> None:
    """A schema keyword outside the subset raises instead of being silently ignored."""
    with pytest.raises(ValueError, match="not supported"):
        Validator({"anyOf": [{"type": "string"}]}).is_valid("x")


TRICKY = [
    {"version": True},
    {"version": 1.0},
    {"version": "1"},
    {"training": {"global_batch_size": True, "zero_stage": 2.0, "seq_len": 2.5}},
    {"training": {"global_batch_size": 8, "precision": ["fp16"], "optimizer": {"betas": [1]}}},
    {"model": {"preset": "a", "architecture": {}}},
    {"model": {}},
    {"devices": [{"name": "x", "peak_tflops": {"fp64": 1, "fp16": "0 TFLOPS"}}]},
    {"name": "a\n", "zones": [{"name": "", "pools": []}]},
]


@pytest.mark.parametrize("document", TRICKY, ids=range(len(TRICKY)))
def test_agrees_with_jsonschema_on_tricky_values(document: Any) -> None:
    """Booleans that equal 1, whole floats, empty names and oneOf edges, as jsonschema judges."""
    assert _our_errors(document) == _oracle_errors(document)
