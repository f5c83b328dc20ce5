"""The shipped JSON Schema: valid draft-07, and in step with the unit table and the defaults."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft7Validator

from hetc.catalog import ModelArchitecture
from hetc.schema import spec as typed
from hetc.schema.structure import spec_schema
from hetc.units import DIMENSIONS


def test_schema_is_draft_07() -> None:
    """The schema declares draft-07 (what yaml-language-server fully supports) and is valid."""
    schema = spec_schema()
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    Draft7Validator.check_schema(schema)


@pytest.mark.parametrize("dimension", sorted(DIMENSIONS))
def test_quantity_patterns_come_from_the_unit_table(dimension: str) -> None:
    """Each quantity definition's pattern is the one the unit table generates."""
    definition = spec_schema()["definitions"][dimension]
    assert definition["x-quantity"] == dimension
    assert definition["pattern"] == DIMENSIONS[dimension].pattern


def _defaults(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if isinstance(node, dict):
        if "default" in node:
            yield path, node["default"]
        for key, child in node.get("properties", {}).items():
            yield from _defaults(child, (*path, key))


# Where each schema default lives in the typed objects: (dataclass, field name).
_TYPED_HOME: dict[tuple[str, ...], tuple[type, str]] = {
    ("training", "seq_len"): (typed.Training, "seq_len"),
    ("training", "precision"): (typed.Training, "precision"),
    ("training", "gradient_clipping"): (typed.Training, "gradient_clipping"),
    ("training", "zero_stage"): (typed.Training, "zero_stage"),
    ("training", "dropout"): (typed.Training, "dropout"),
    ("training", "activation_checkpointing"): (typed.Training, "activation_checkpointing"),
    ("training", "seed"): (typed.Training, "seed"),
    ("training", "optimizer", "type"): (typed.Optimizer, "type"),
    ("training", "optimizer", "lr"): (typed.Optimizer, "lr"),
    ("training", "optimizer", "betas"): (typed.Optimizer, "betas"),
    ("training", "optimizer", "eps"): (typed.Optimizer, "eps"),
    ("training", "optimizer", "weight_decay"): (typed.Optimizer, "weight_decay"),
    ("training", "optimizer", "momentum"): (typed.Optimizer, "momentum"),
    ("training", "lr_schedule", "type"): (typed.LrSchedule, "type"),
    ("training", "lr_schedule", "warmup_steps"): (typed.LrSchedule, "warmup_steps"),
    ("training", "lr_schedule", "min_lr"): (typed.LrSchedule, "min_lr"),
    ("objective",): (typed.Spec, "objective"),
    ("network", "intra_zone", "tcp_streams"): (typed.LinkClass, "tcp_streams"),
    ("network", "inter_zone", "tcp_streams"): (typed.LinkClass, "tcp_streams"),
    ("network", "inter_region", "tcp_streams"): (typed.LinkClass, "tcp_streams"),
    ("run", "steps"): (typed.RunSettings, "steps"),
    ("run", "checkpoint_dir"): (typed.RunSettings, "checkpoint_dir"),
    ("data", "format"): (typed.DataSource, "format"),
    ("sites",): (typed.Spec, "sites"),
    ("profiles",): (typed.Spec, "profiles"),
}


def _field_default(cls: type, name: str) -> Any:
    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    if field.default is not dataclasses.MISSING:
        return field.default
    assert field.default_factory is not dataclasses.MISSING
    return field.default_factory()


def test_schema_defaults_equal_the_typed_defaults() -> None:
    """Every `default` the schema shows an editor is the value hetc actually fills in."""
    schema = spec_schema()
    seen = set()
    for path, default in _defaults(schema):
        if path[:2] == ("model", "architecture"):
            continue
        if path == ("devices",):  # typed form is the merged catalog, not the spec's list
            assert default == []
            continue
        assert path in _TYPED_HOME, f"schema default at {path} has no typed home"
        cls, name = _TYPED_HOME[path]
        actual = _field_default(cls, name)
        if isinstance(actual, tuple):
            actual = list(actual)
        if name in ("sites", "profiles"):
            assert not actual and default == []
        else:
            assert actual == default, path
        seen.add(path)
    assert seen == set(_TYPED_HOME)


def test_architecture_defaults_equal_the_catalog_defaults() -> None:
    """`model.architecture` defaults in the schema are ModelArchitecture's field defaults."""
    props = spec_schema()["properties"]["model"]["properties"]["architecture"]["properties"]
    for key, prop in props.items():
        if "default" in prop and key != "local_attention":
            assert _field_default(ModelArchitecture, key) == prop["default"], key
    pattern = props["local_attention"]["properties"]["pattern"]["default"]
    assert pattern == ["global", "local"]
