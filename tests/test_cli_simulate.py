"""`hetc simulate`: text and JSON reports, and every way its inputs can be wrong."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.plan import Node, Pipeline, Plan, Replica, Stage, plan_to_json
from hetc.schema import check_file, spec_hash

runner = CliRunner()
SPEC = """\
version: 1
name: cli-sim
model: {preset: OPT-350M}
training: {global_batch_size: 16, seq_len: 2048, tokens: 1e9}
zones:
  - name: a
    region: r
    pools: [{device: A100-40GB, quota: 8, gpus_per_node: 4}]
"""


def _files(tmp_path: Path, **plan_changes: object) -> tuple[Path, Path]:
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(SPEC)
    spec = check_file(str(spec_path)).spec
    assert spec is not None
    nodes = tuple(
        Node(
            id=f"a100-40gb@a/n{k}",
            zone="a",
            region="r",
            pool="a100-40gb",
            device="A100-40GB",
            devices=4,
        )
        for k in range(2)
    )
    plan = Plan(
        spec_hash=spec_hash(spec),
        hetc_version="0.1.0",
        model_blocks=24,
        global_batch_size=16,
        microbatch_size=2,
        nodes=nodes,
        stages=(
            Stage(
                first_block=0,
                end_block=12,
                replicas=(
                    Replica(device="A100-40GB", tp=4, node=nodes[0].id, local_ranks=(0, 1, 2, 3)),
                ),
            ),
            Stage(
                first_block=12,
                end_block=24,
                replicas=(
                    Replica(device="A100-40GB", tp=4, node=nodes[1].id, local_ranks=(0, 1, 2, 3)),
                ),
            ),
        ),
        pipelines=(Pipeline(replicas=(0, 0), microbatches=8),),
    )
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(plan_to_json(dataclasses.replace(plan, **plan_changes)))  # type: ignore[arg-type]
    return spec_path, plan_path


def test_text_report(tmp_path: Path) -> None:
    """Headline numbers, then one row per rank (or group of identical ranks) with its memory
    breakdown: the rows account for all 8 ranks."""
    spec, plan = _files(tmp_path)
    result = runner.invoke(app, ["simulate", str(spec), "--plan", str(plan)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("iteration time")
    assert "USD per 1M tokens" in result.stdout and "token budget" in result.stdout
    lines = result.stdout.splitlines()
    single = sum(line.startswith("a100-40gb@a/n") for line in lines)
    grouped = sum(
        int(n) for n in re.findall(r"^ranks [0-9, -]+ \(([0-9]+) identical\)", result.stdout, re.M)
    )
    assert single + grouped == 8


def test_json_report_is_consistent(tmp_path: Path) -> None:
    """--json: throughput is batch over iteration time; the cost adds up; 8 ranks."""
    spec, plan = _files(tmp_path)
    result = runner.invoke(app, ["simulate", str(spec), "--plan", str(plan), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert abs(report["samples_per_second"] * report["iteration_time"] - 16) < 1e-9
    cost = report["cost_per_iteration"]
    assert abs(cost["compute"] + cost["egress"] - cost["total"]) < 1e-12
    assert len(report["ranks"]) == 8 and report["fits"] is True


def test_invalid_plan_lists_its_problems(tmp_path: Path) -> None:
    """A plan whose batch does not add up is refused with the reason at its position, exit 1."""
    spec, plan = _files(tmp_path, global_batch_size=18)
    result = runner.invoke(app, ["simulate", str(spec), "--plan", str(plan)])
    assert result.exit_code == 1
    assert re.search(
        rf"^{re.escape(str(plan))}:\d+:\d+: pipelines: pipelines process 16 samples per"
        " iteration; the global batch is 18",
        result.stdout,
        re.MULTILINE,
    )


def test_plan_from_another_spec(tmp_path: Path) -> None:
    """A node from a pool the spec does not have is an error; a stale hash only a warning."""
    spec, plan = _files(tmp_path)
    data = json.loads(plan.read_text())
    data["nodes"][0]["pool"] = "h100"
    plan.write_text(json.dumps(data))
    result = runner.invoke(app, ["simulate", str(spec), "--plan", str(plan)])
    assert result.exit_code == 1 and "has no pool 'h100'" in result.stdout
    _, fresh = _files(tmp_path, spec_hash="f" * 64)
    stale = runner.invoke(app, ["simulate", str(spec), "--plan", str(fresh)])
    assert stale.exit_code == 0 and "was made for another version" in stale.stderr


def test_missing_plan_and_invalid_spec(tmp_path: Path) -> None:
    """No plan file: exit 4 with a fix; an invalid spec: its diagnostics, exit 1."""
    spec, _ = _files(tmp_path)
    missing = runner.invoke(app, ["simulate", str(spec), "--plan", str(tmp_path / "no.json")])
    assert missing.exit_code == 4 and "To fix:" in missing.stderr
    spec.write_text(SPEC.replace("quota: 8", "quota: 0"))
    bad = runner.invoke(app, ["simulate", str(spec), "--plan", str(tmp_path / "plan.json")])
    assert bad.exit_code == 1 and "zones[0].pools[0].quota: must be at least 1" in bad.stdout


def _profile(tmp_path: Path, **fields: object) -> Path:
    """A hetc-format profile of OPT-350M on A100-40GB at microbatch 2, TP 4: layer i takes
    (i + 1) ms forward, twice that backward, 0.5 ms update."""
    times = {str(i): [(i + 1) * 1e-3, 2 * (i + 1) * 1e-3, 0.5e-3] for i in range(26)}
    document = {
        "format": "hetc-layer-profile",
        "version": 1,
        "model": "OPT-350M",
        "device": "A100-40GB",
        "precision": "fp16",
        "seq_len": 2048,
        "units": "s",
        "times": {"2": {"4": times}},
    } | fields
    path = tmp_path / "a100.profile.json"
    path.write_text(json.dumps(document))
    return path


def test_spec_profile_times_are_used_exactly(tmp_path: Path) -> None:
    """With a profile in `profiles:`, a one-stage plan takes m x sum(f + b) + sum(update) of
    the profile's numbers exactly: 8 x 3 x (1 + ... + 26) ms + 26 x 0.5 ms = 8.437 s."""
    node = Node(
        id="a100-40gb@a/n0", zone="a", region="r", pool="a100-40gb", device="A100-40GB", devices=4
    )
    spec, plan = _files(
        tmp_path,
        spec_hash="0" * 64,
        nodes=(node,),
        stages=(
            Stage(
                first_block=0,
                end_block=24,
                replicas=(
                    Replica(device="A100-40GB", tp=4, node=node.id, local_ranks=(0, 1, 2, 3)),
                ),
            ),
        ),
        pipelines=(Pipeline(replicas=(0,), microbatches=8),),
    )
    _profile(tmp_path)
    spec.write_text(SPEC + "profiles: [a100.profile.json]\n")
    result = runner.invoke(app, ["simulate", str(spec), "--plan", str(plan), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["iteration_time"] == pytest.approx(8.437, rel=1e-12)
    plain = tmp_path / "plain.yaml"
    plain.write_text(SPEC)
    without = runner.invoke(app, ["simulate", str(plain), "--plan", str(plan), "--json"])
    assert without.exit_code == 0
    assert json.loads(without.stdout)["iteration_time"] != pytest.approx(8.437, rel=1e-3)


def test_profile_for_another_setting_is_refused(tmp_path: Path) -> None:
    """Another sequence length or precision cannot stand in: exit 1 with the reason and a
    `To fix:` line naming the command that measures the spec's training."""
    spec, plan = _files(tmp_path)
    spec.write_text(SPEC + "profiles: [a100.profile.json]\n")
    for change, reason in (
        ({"seq_len": 1024}, "measured at seq_len 1024; the spec trains seq_len 2048"),
        ({"precision": "bf16"}, "measured at bf16; the spec trains fp16"),
    ):
        _profile(tmp_path, **change)
        result = runner.invoke(app, ["simulate", str(spec), "--plan", str(plan)])
        assert result.exit_code == 1
        assert reason in result.stdout
        assert (
            f"To fix: list a profile of the spec's training, measured with: hetc profile measure"
            f" {spec} --device A100-40GB -o NEW_PROFILE.json" in result.stdout
        )
        assert "iteration time" not in result.stdout
