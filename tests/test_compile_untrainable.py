"""`hetc compile` of a model the runtime cannot train warns, at the spec's position, when it
compiles (the runtime refuses such a model at start-up; before, the user learnt it at launch).

Oracle for the list of refused fields: the runtime itself (`ModelConfig.from_dict`), which now
reads the same `plan.model_problems`; the test checks every catalog preset both ways.
Mutation check (done): with the warning loop removed from `cli._checked_spec`, the first two
tests fail.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetc import catalog
from hetc.cli import app
from hetc.plan import model_problems
from hetc.runtime.model import ModelConfig
from hetc.schema import check_text

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
SPEC = """\
version: 1
name: untrainable
model: {model}
training: {{global_batch_size: 16, seq_len: 256, precision: fp16}}
zones:
  - name: a
    region: r
    pools:
      - {{device: A100-40GB, quota: 8, gpus_per_node: 4, price: 3.67 USD/h}}
"""
ARCHITECTURE = (
    "{architecture: {layers: 4, hidden: 256, heads: 4, ffn: 1024, vocab: 1024,"
    " max_positions: 256, embedding_projection: 128}}"
)


def _compile(tmp_path: Path, model: str) -> tuple[Path, str, str]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(model=model))
    result = runner.invoke(app, ["compile", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    return spec, result.stdout, result.stderr


def test_a_preset_the_runtime_refuses_is_warned_at_the_preset(tmp_path: Path) -> None:
    """OPT-350M's embedding projection: one warning at `preset: OPT-350M`'s value, on stderr."""
    spec, stdout, stderr = _compile(tmp_path, "{preset: OPT-350M}")
    column = SPEC.format(model="{preset: OPT-350M}").splitlines()[2].index("OPT-350M") + 1
    assert stderr.splitlines()[0] == (
        f"{spec}:3:{column}: model.preset: warning: model OPT-350M has embedding_projection 512:"
        " not supported by the runtime (token embeddings must be as wide as hidden); the"
        " training runtime refuses this model at start-up"
    )
    assert "warning: model" not in stdout
    assert (tmp_path / "out" / "plan.json").is_file()


def test_a_written_field_is_warned_at_that_field(tmp_path: Path) -> None:
    """An `architecture:` that writes embedding_projection is warned at that key's value."""
    spec, _, stderr = _compile(tmp_path, ARCHITECTURE)
    column = SPEC.format(model=ARCHITECTURE).splitlines()[2].index("128") + 1
    assert f"{spec}:3:{column}: model.architecture.embedding_projection: warning:" in stderr


def test_a_trainable_model_compiles_without_the_warning(tmp_path: Path) -> None:
    """The same spec with a model the runtime trains says nothing of it."""
    _, _, stderr = _compile(tmp_path, ARCHITECTURE.replace(", embedding_projection: 128", ""))
    assert "runtime refuses" not in stderr


@pytest.mark.parametrize("name", catalog.models())
def test_model_problems_is_what_the_runtime_refuses(name: str) -> None:
    """For every catalog preset, `model_problems` is empty exactly when the runtime builds
    the model, and the runtime's message names the first field it lists."""
    checked = check_text(SPEC.format(model=f"{{preset: {name}}}"))
    assert checked.spec is not None
    model = asdict(checked.spec.model)
    problems = model_problems(model)
    if not problems:
        ModelConfig.from_dict(model)
        return
    field, why = problems[0]
    with pytest.raises(ValueError, match=re.escape(f"model field '{field}': {why}")):
        ModelConfig.from_dict(model)
