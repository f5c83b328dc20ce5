"""`hetc simulate --plan` reads every plan form hetc writes (plan.json, the whole output of
`hetc plan --json` with `--rank`, one entry of it), as `hetc compile --plan` does, and refuses
a plan made for other training than the spec's, naming the field with both values.

Oracles: the planner's own predictions in `hetc plan --json` (the simulator wrote them, so
simulating the chosen entry must give them back exactly); the README's own command lines,
run as written. Mutation check done: with `plan_training_issues` returning [] the training
tests fail (the batch-8 plan is simulated at 16 samples and exit 0, as before the fix)."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.plan import Node, Pipeline, Plan, Replica, Stage, plan_to_json
from hetc.schema import check_file, spec_hash

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
LOCAL = ROOT / "examples" / "local-cpu.yaml"
SPEC = """\
version: 1
name: sim-forms
model: {preset: OPT-350M}
training: {global_batch_size: 16, seq_len: 2048, precision: fp16}
zones:
  - name: a
    region: r
    pools: [{device: A100-40GB, quota: 8, gpus_per_node: 4}]
"""


@pytest.fixture(scope="module")
def listing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole output of `hetc plan --json --top 3` for the bundled CPU example."""
    path = tmp_path_factory.mktemp("listing") / "plans.json"
    done = subprocess.run(
        [sys.executable, "-m", "hetc", "plan", str(LOCAL), "--json", "--top", "3"],
        capture_output=True,
        text=True,
        check=True,
    )
    path.write_text(done.stdout)
    return path


def _simulate(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["simulate", *args])
    return result.exit_code, result.stdout, result.stderr


def test_the_whole_plan_output_is_read_rank_by_rank(listing: Path) -> None:
    """Plan 1 by default, `--rank 2` the second: each simulates to the iteration time and
    cost the planner predicted for that entry."""
    plans = json.loads(listing.read_text())["plans"]
    for rank, args in ((1, ()), (1, ("--rank", "1")), (2, ("--rank", "2"))):
        code, stdout, stderr = _simulate(str(LOCAL), "--plan", str(listing), "--json", *args)
        assert code == 0, stdout + stderr
        assert f"{listing}: read as plan {rank} of the output of `hetc plan --json`" in stderr
        report = json.loads(stdout)
        predicted = plans[rank - 1]["plan"]["predictions"]
        assert report["iteration_time"] == predicted["iteration_time"]
        assert report["cost_per_iteration"]["total"] == predicted["cost_per_iteration"]


def test_an_entry_and_a_plan_json_read_alike(listing: Path, tmp_path: Path) -> None:
    """One entry of `plans`, and its bare plan, simulate to the same report as its rank."""
    entry = json.loads(listing.read_text())["plans"][2]
    (tmp_path / "entry.json").write_text(json.dumps(entry))
    (tmp_path / "plan.json").write_text(json.dumps(entry["plan"]))
    reports = []
    for args in (
        ("--plan", str(listing), "--rank", "3"),
        ("--plan", str(tmp_path / "entry.json")),
        ("--plan", str(tmp_path / "plan.json")),
    ):
        code, stdout, stderr = _simulate(str(LOCAL), *args, "--json")
        assert code == 0, stdout + stderr
        reports.append(json.loads(stdout))
    assert reports[0] == reports[1] == reports[2]


def test_a_rank_the_file_lacks_is_a_usage_error_listing_its_ranks(
    listing: Path, tmp_path: Path
) -> None:
    """`--rank 4` of a three-plan output, or `--rank` with a file of one plan: exit 2, one
    line on stderr saying what the file holds."""
    code, stdout, stderr = _simulate(str(LOCAL), "--plan", str(listing), "--rank", "4")
    assert (code, stdout) == (2, "")
    assert stderr.strip() == f"hetc: --rank 4: {listing} holds the plans ranked 1, 2, 3"
    single = tmp_path / "plan.json"
    single.write_text(json.dumps(json.loads(listing.read_text())["plans"][0]["plan"]))
    code, _, stderr = _simulate(str(LOCAL), "--plan", str(single), "--rank", "2")
    assert code == 2
    assert "holds one plan, not the output of `hetc plan --json`; leave --rank out" in stderr


def test_an_infeasible_plan_output_says_it_holds_no_plan(tmp_path: Path) -> None:
    """The output of `hetc plan --json` for an infeasible spec: exit 1 at its `plans`."""
    empty = tmp_path / "none.json"
    empty.write_text(json.dumps({"feasible": False, "plans": []}, indent=2))
    code, stdout, _ = _simulate(str(LOCAL), "--plan", str(empty))
    assert code == 1
    assert re.fullmatch(rf"{re.escape(str(empty))}:3:12: plans: .*holds no plan.*\n", stdout)


def _spec_and_plan(tmp_path: Path, spec_text: str, **plan_fields: object) -> tuple[Path, Path]:
    """SPEC's file and a consistent two-node plan for it (8 microbatches of 2 by default)."""
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(spec_text)
    spec = check_file(str(spec_path)).spec
    assert spec is not None
    node = Node(
        id="a100-40gb@a/n0", zone="a", region="r", pool="a100-40gb", device="A100-40GB", devices=4
    )
    plan = Plan(
        spec_hash=spec_hash(spec),
        hetc_version="0.1.0",
        model_blocks=24,
        global_batch_size=16,
        microbatch_size=2,
        model="OPT-350M",
        seq_len=2048,
        precision="fp16",
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
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(plan_to_json(dataclasses.replace(plan, **plan_fields)))  # type: ignore[arg-type]
    return spec_path, plan_path


def test_a_plan_for_another_batch_is_refused_not_rescaled(tmp_path: Path) -> None:
    """A plan made for batch 8 against a spec of 16 (each consistent in itself): exit 1, one
    line at the plan's global_batch_size naming both values, and no prediction printed."""
    spec, plan = _spec_and_plan(
        tmp_path,
        SPEC,
        global_batch_size=8,
        pipelines=(Pipeline(replicas=(0,), microbatches=4),),
    )
    code, stdout, _ = _simulate(str(spec), "--plan", str(plan))
    assert code == 1
    (line,) = stdout.splitlines()
    text = plan.read_text()
    row = next(i for i, r in enumerate(text.splitlines(), 1) if '"global_batch_size"' in r)
    assert line == (
        f"{plan}:{row}:24: global_batch_size: the plan was made for global_batch_size 8; the"
        " spec's training.global_batch_size is 16"
    )


@pytest.mark.parametrize(
    ("field", "plan_value", "spec_change", "message"),
    [
        (
            "seq_len",
            2048,
            ("seq_len: 2048", "seq_len: 1024"),
            "the plan was made for seq_len 2048; the spec's training.seq_len is 1024",
        ),
        (
            "precision",
            "fp16",
            ("precision: fp16", "precision: bf16"),
            "the plan was made for precision fp16; the spec's training.precision is bf16",
        ),
        (
            "model",
            "OPT-350M",
            ("preset: OPT-350M", "preset: GPT-3-1.3B"),
            "the plan was made for model OPT-350M; the spec's model is GPT-3-1.3B",
        ),
    ],
)
def test_a_plan_for_other_training_names_the_field(
    tmp_path: Path, field: str, plan_value: object, spec_change: tuple[str, str], message: str
) -> None:
    """Another sequence length, precision or model in the spec than the plan was made for:
    exit 1, the field named at its position with both values."""
    spec, plan = _spec_and_plan(tmp_path, SPEC.replace(*spec_change))
    code, stdout, _ = _simulate(str(spec), "--plan", str(plan))
    assert code == 1
    assert f"{plan}:" in stdout and f": {field}: {message}" in stdout
    assert json.loads(plan.read_text())[field] == plan_value


def test_a_plan_without_the_training_fields_is_still_read(tmp_path: Path) -> None:
    """A plan written before model, seq_len and precision were recorded (null) simulates."""
    spec, plan = _spec_and_plan(tmp_path, SPEC, model=None, seq_len=None, precision=None)
    code, stdout, stderr = _simulate(str(spec), "--plan", str(plan))
    assert code == 0, stdout + stderr
    assert stdout.startswith("iteration time")


def test_the_readme_plan_then_simulate_commands_work(tmp_path: Path) -> None:
    """The README's `hetc plan ... --json > plans.json` and `hetc simulate ... --plan
    plans.json` lines, run as written on the bundled CPU example, succeed."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [
        line.split("  #")[0].strip()
        for line in readme.splitlines()
        if line.startswith("hetc ") and "plans.json" in line
    ]
    assert [line.split()[1] for line in lines] == ["plan", "simulate"], lines
    (tmp_path / "spec.yaml").write_text(LOCAL.read_text())
    for line in lines:
        words = shlex.split(line)
        redirect = words.index(">") if ">" in words else None
        argv = [sys.executable, "-m", *words[: redirect or len(words)]]
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        if redirect is not None:
            (tmp_path / words[redirect + 1]).write_text(done.stdout)
    assert done.stdout.startswith("iteration time")
