"""`model: OPT-350M`: a preset's name alone is short for `{preset: OPT-350M}`.

The oracle is the written-out mapping: the short form must give the same typed spec and the
same spec hash (so the same plan and files). Mutation check (done): without the
`x-shorthand-any` branch of `expand_shorthands`, every test fails ("give exactly one of
`preset` or `architecture`" at model).
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from hetc.cli import app
from hetc.schema import check_text, spec_hash
from hetc.schema.shorthands import expand_shorthands

runner = CliRunner()
SPEC = """\
version: 1
name: short-model
model: {model}
training: {{global_batch_size: 16, seq_len: 256, precision: fp16}}
zones:
  - name: a
    region: r
    pools:
      - {{device: A100-40GB, quota: 8, gpus_per_node: 4, price: 3.67 USD/h}}
"""


def test_a_preset_name_types_like_its_mapping() -> None:
    """`model: OPT-350M` (and its lower-case spelling) types and hashes as `{preset: OPT-350M}`."""
    full = check_text(SPEC.format(model="{preset: OPT-350M}"))
    assert full.errors == [] and full.spec is not None
    for name in ("OPT-350M", "opt-350m"):
        short = check_text(SPEC.format(model=name))
        assert short.errors == [], short.errors
        assert short.spec is not None
        assert short.spec.model == full.spec.model
        assert spec_hash(short.spec) == spec_hash(full.spec)


def test_expansion_only_at_the_model() -> None:
    """The string becomes `{preset: ...}` at `model` and nowhere else."""
    data = {"name": "OPT-350M", "model": "OPT-350M", "training": {"optimizer": "adam"}}
    assert expand_shorthands(data) == {
        "name": "OPT-350M",
        "model": {"preset": "OPT-350M"},
        "training": {"optimizer": {"type": "adam"}},
    }


def test_an_unknown_name_is_positioned_with_the_presets(tmp_path: Path) -> None:
    """`model: OPT-350X` fails at its line and column, suggests the preset and lists them."""
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(model="OPT-350X"))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    assert f"{path}:3:8: model.preset: unknown model preset 'OPT-350X'" in result.output
    assert "did you mean 'opt-350m'?" in result.output
    assert "presets: OPT-350M, GPT-Neo-2.7B" in result.output


def test_the_plan_of_the_short_form(tmp_path: Path) -> None:
    """`hetc plan` accepts the short form (it used to refuse it: expected a mapping)."""
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(model="OPT-350M"))
    result = runner.invoke(app, ["plan", str(path), "--top", "1"])
    assert result.exit_code == 0, result.output
    assert "plan 1:" in result.output
