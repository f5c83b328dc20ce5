"""The normalised spec as JSON and back (`hetc.schema.normalised`): what `spec.json` holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetc.schema import check_file, spec_hash
from hetc.schema.normalised import NormalisedSpecError, spec_from_json, spec_json


def test_every_example_spec_survives_json_unchanged(example_paths: list[Path]) -> None:
    """Through JSON text and back, each example's typed spec is equal field by field (tuples,
    floats written as integers, nested devices and zones) and keeps its hash."""
    for path in example_paths:
        spec = check_file(str(path)).spec
        assert spec is not None
        back = spec_from_json(json.loads(json.dumps(spec_json(spec))))
        assert back == spec, path
        assert spec_hash(back) == spec_hash(spec)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["training"].pop("seq_len"), r"spec.training: missing keys \['seq_len'\]"),
        (lambda d: d["training"].update(precision="fp8"), r"spec.training.precision: 'fp8'"),
        (lambda d: d.update(extra=1), r"spec: unknown keys \['extra'\]"),
        (lambda d: d["training"]["optimizer"].update(betas=[0.9]), r"betas: expected 2 items"),
        (lambda d: d["training"].update(seed="x"), r"spec.training.seed: expected int, got 'x'"),
    ],
)
def test_a_damaged_normalised_spec_names_the_key(
    example_paths: list[Path], edit: object, message: str
) -> None:
    """A missing, unknown or mistyped key is refused with its path."""
    spec = check_file(str(example_paths[0])).spec
    assert spec is not None
    data = json.loads(json.dumps(spec_json(spec)))
    edit(data)  # type: ignore[operator]
    with pytest.raises(NormalisedSpecError, match=message):
        spec_from_json(data)
