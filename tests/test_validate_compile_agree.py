"""`hetc validate` (text and --json) reports every warning about the spec that `hetc compile`
prints, at the same position, and `hetc compile` prints each of them once.

Both commands read the spec through `schema.check_file`; these tests pin that no warning
about the spec reaches compile's output by another road (as the runtime's refusal of a model
field once did, printed by compile alone), and that compile repeats none. Mutation checks
(done, by patching in a pytest plugin): `cli._checked_spec` printing the runtime-model
warnings a second time fails every compile test of a spec with such a warning; the
runtime-model check taken out of `schema.semantic` and printed by `_checked_spec` alone (the
old road) fails them too, the bundled OPT-350M and GPT-Neo specs among them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.schema import Diagnostic

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
BUNDLED = sorted((ROOT / "examples").glob("*.yaml")) + sorted(
    (ROOT / "bench" / "scenarios").glob("*.yaml")
)
WARNED = {
    "slips.yaml": """\
version: 1
name: slips
model: {preset: OPT-350M}
training: {global_batch_size: 16, seq_len: 256}
devices:
  - {name: A100-40GB, memory_bandwidth: 1555}
zones:
  - name: a
    region: r
    pools:
      - {device: A100-40GB, quota: 9, gpus_per_node: 4, price: 3.67}
      - {device: H200, quota: 4, gpus_per_node: 4}
network:
  intra_zone: {bandwidth: 100Gbps, latency: 1}
run: {steps: 10, checkpoint_every: 20}
""",
    "local-attention.yaml": """\
version: 1
name: local attention
model:
  architecture:
    layers: 4
    hidden: 256
    heads: 4
    vocab: 1024
    max_positions: 256
    local_attention: {window: 64}
training: {global_batch_size: 16, seq_len: 256}
zones:
  - name: a
    pools:
      - {device: A100-40GB, quota: 8, gpus_per_node: 4, price: 3.67 USD/h}
network:
  inter_region: {latency: 30us}
""",
}
"""Specs with warnings of every kind: a model field the runtime refuses (at a preset and at a
written field), implausible magnitudes (bare numbers; a catalog override), a quota that is no
multiple of the node, a device without a list price, a checkpoint interval past the run."""


def _positioned(output: str, spec: Path) -> list[str]:
    """The lines of `output` about `spec` itself: FILE:LINE:COL: path: ..."""
    return [line for line in output.splitlines() if line.startswith(f"{spec}:")]


def _validated(spec: Path) -> list[str]:
    """`hetc validate`'s lines for `spec`, checked against the same from `--json`."""
    text = runner.invoke(app, ["validate", str(spec)])
    assert text.exit_code == 0, text.output
    as_json = runner.invoke(app, ["validate", "--json", str(spec)])
    (entry,) = json.loads(as_json.stdout)["files"]
    from_json = [Diagnostic(**d).format() for d in entry["diagnostics"]]
    assert from_json == _positioned(text.stdout, spec)
    return from_json


def _compiled(spec: Path, output: Path, *more: str) -> list[str]:
    """`hetc compile`'s lines about `spec`, from stdout and stderr both."""
    result = runner.invoke(app, ["compile", str(spec), "-o", str(output), *more])
    assert result.exit_code == 0, result.output
    return _positioned(result.stdout + result.stderr, spec)


def _assert_alike(compiled: list[str], validated: list[str]) -> None:
    assert len(compiled) == len(set(compiled)), f"printed twice: {compiled}"
    assert compiled == validated
    assert all(": warning: " in line for line in compiled)


@pytest.mark.parametrize("name", sorted(WARNED))
def test_compile_prints_the_warnings_of_validate_once(tmp_path: Path, name: str) -> None:
    """Each warning compile prints about a warned spec is validate's line, once; compiling
    the written plan again (`--plan`) prints the same."""
    spec = tmp_path / name
    spec.write_text(WARNED[name], encoding="utf-8")
    validated = _validated(spec)
    assert len(validated) >= 2, validated
    _assert_alike(_compiled(spec, tmp_path / "out"), validated)
    plan = tmp_path / "plan.json"
    plan.write_bytes((tmp_path / "out" / "plan.json").read_bytes())
    _assert_alike(_compiled(spec, tmp_path / "again", "--plan", str(plan)), validated)


def test_the_warned_specs_warn_of_every_kind(tmp_path: Path) -> None:
    """The premise of the test above: its specs hold a warning of each kind, at its value."""
    spec = tmp_path / "slips.yaml"
    spec.write_text(WARNED["slips.yaml"], encoding="utf-8")
    paths = [line.split(": ")[1] for line in _validated(spec)]
    assert paths == [
        "model.preset",
        "devices[0].memory_bandwidth",
        "zones[0].pools[0].quota",
        "zones[0].pools[0].price",
        "zones[0].pools[1].device",
        "network.intra_zone.latency",
        "run.checkpoint_every",
    ]
    spec = tmp_path / "local.yaml"
    spec.write_text(WARNED["local-attention.yaml"], encoding="utf-8")
    paths = [line.split(": ")[1] for line in _validated(spec)]
    assert paths == [
        "model.architecture.local_attention",
        "model.architecture.local_attention.window",
        "network.inter_region.latency",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("spec", BUNDLED, ids=lambda p: p.name)
def test_every_bundled_spec_warns_alike(tmp_path: Path, spec: Path) -> None:
    """Compiling each bundled example and bench scenario prints exactly the warnings that
    validate gives it, once each."""
    _assert_alike(_compiled(spec, tmp_path / "out"), _validated(spec))
