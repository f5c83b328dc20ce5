"""`hetc calibrate`: from a run directory to a corrected profile that `hetc simulate` and
`hetc compile` use, the held-out check, and every way its inputs can be wrong (one error with
a `To fix:` line, exit 1 or 4, nothing written). The runs here are written by hand from a
known scaled model (tests/calibration_runs.py); the slow test trains the CPU example for real."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from calibration_runs import (
    DEVICE,
    fixed_plan,
    make_spec,
    measured_profile,
    spec_text,
    true_run,
    write_run,
)
from typer.testing import CliRunner

from hetc.cli import app
from hetc.costmodel.calibrate import analytical_profile, predict, scaled
from hetc.costmodel.compiled import compiled_spec_files, read_compiled_spec
from hetc.costmodel.planning import PlanningModel, Shape
from hetc.costmodel.profile import read_profile, write_profile
from hetc.plan import plan_from_json, plan_to_json
from hetc.schema import check_file, check_text, spec_hash
from hetc.solver.build import build_plan

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
TRUTH = {"compute": 1.3, "links": {("intra_node", "all_reduce"): 0.5}}


@pytest.fixture
def compiled(tmp_path: Path) -> Path:
    """A spec listing a measured profile, compiled by `hetc compile`."""
    write_profile(measured_profile(make_spec()), tmp_path / "measured.json")
    (tmp_path / "spec.yaml").write_text(spec_text(profile="measured.json"))
    done = runner.invoke(app, ["compile", str(tmp_path / "spec.yaml"), "-o", str(tmp_path / "out")])
    assert done.exit_code == 0, done.output
    return tmp_path / "out"


def _truth_run(out: Path, run_dir: Path) -> None:
    spec, profiles = read_compiled_spec(out)
    plan = plan_from_json((out / "plan.json").read_text())
    truth = [scaled(p, **TRUTH) for p in profiles]  # type: ignore[arg-type]
    write_run(run_dir, out.resolve(), true_run(plan, spec, truth))


def _calibrate(*args: str) -> tuple[int, str]:
    done = runner.invoke(app, ["calibrate", *args])
    return done.exit_code, done.output


def test_compile_records_the_spec_and_profiles_it_predicted_with(compiled: Path) -> None:
    """spec.json holds the normalised spec (its hash the plan's) and the profile as used."""
    spec, profiles = read_compiled_spec(compiled)
    plan = plan_from_json((compiled / "plan.json").read_text())
    assert spec.name == "calibration-test"
    assert [p.device for p in profiles] == [DEVICE]
    assert spec == check_file(str(compiled.parent / "spec.yaml")).spec
    assert spec_hash(spec) == plan.spec_hash
    assert predict(plan, spec, profiles) == predict(plan, spec, [measured_profile(make_spec())])
    listed = {e["path"] for e in json.loads((compiled / "manifest.json").read_text())["files"]}
    assert {"spec.json", "profiles/0-local-cpu.json"} <= listed


def test_calibrate_writes_a_profile_that_predicts_the_run(compiled: Path, tmp_path: Path) -> None:
    """The factors of the model that made the run come back; the written profile carries them
    in meta.calibration and makes `hetc simulate` predict the run; calibrating again from it
    finds nothing left to correct and appends a second record."""
    run = tmp_path / "run"
    _truth_run(compiled, run)
    code, output = _calibrate(str(run), "-o", str(tmp_path / "corrected.json"), "--json")
    assert code == 0, output
    report = json.loads(output[output.index("{") :])
    assert report["factors"]["compute"][DEVICE] == pytest.approx(1.3, rel=1e-9)
    assert [link["factor"] for link in report["factors"]["links"]] == [pytest.approx(0.5, rel=1e-9)]
    timing = report["iteration_time"]
    assert timing["error_after"] == pytest.approx(0.0, abs=1e-6)
    assert abs(timing["error_before"]) > 10
    corrected = read_profile(tmp_path / "corrected.json")
    (record,) = corrected.meta["calibration"]  # type: ignore[misc]
    assert record["compute_scale"] == pytest.approx(1.3, rel=1e-9)
    bare = tmp_path / "bare.yaml"
    bare.write_text(spec_text())
    done = runner.invoke(
        app,
        [
            "simulate",
            str(bare),
            "--plan",
            str(compiled / "plan.json"),
            "--profile",
            str(tmp_path / "corrected.json"),
            "--json",
        ],
    )
    assert done.exit_code == 0, done.output
    simulated = json.loads(done.stdout)
    assert simulated["iteration_time"] == pytest.approx(timing["measured"], rel=1e-9)
    code, output = _calibrate(
        str(run), "--profile", str(tmp_path / "corrected.json"), "-o", str(tmp_path), "--json"
    )
    assert code == 0, output
    again = json.loads(output[output.index("{") :])
    assert again["factors"]["compute"][DEVICE] == pytest.approx(1.0, rel=1e-9)
    twice = read_profile(tmp_path / f"custom--{DEVICE.lower()}.json")
    assert len(twice.meta["calibration"]) == 2  # type: ignore[arg-type]


def test_a_held_out_run_of_another_plan_is_predicted(compiled: Path, tmp_path: Path) -> None:
    """--check: another plan of the same spec, its run made by the same true model, is
    predicted within rounding by the corrected profile and far off by the uncorrected one."""
    spec, profiles = read_compiled_spec(compiled)
    other_out = tmp_path / "other"
    other_out.mkdir()
    plan = fixed_plan(spec, profiles, (0, 1, 4), 2, 1)
    (other_out / "plan.json").write_text(plan_to_json(plan))
    for name, data in compiled_spec_files(spec, profiles).items():
        (other_out / name).parent.mkdir(parents=True, exist_ok=True)
        (other_out / name).write_bytes(data)
    truth = [scaled(p, **TRUTH) for p in profiles]  # type: ignore[arg-type]
    write_run(tmp_path / "other-run", other_out, true_run(plan, spec, truth))
    _truth_run(compiled, tmp_path / "run")
    code, output = _calibrate(
        str(tmp_path / "run"), "--check", str(tmp_path / "other-run"), "--json"
    )
    assert code == 0, output
    (check,) = json.loads(output[output.index("{") :])["checks"]
    assert check["iteration_time"]["error_after"] == pytest.approx(0.0, abs=1e-6)
    assert abs(check["iteration_time"]["error_before"]) > 10
    code, text = _calibrate(str(tmp_path / "run"), "--check", str(tmp_path / "other-run"))
    held_out = text[text.index("held out: run") :]
    assert re.search(r"after: iteration time [+-]0\.0%", held_out), text


def _break_missing_rank(run: Path) -> None:
    (run / "metrics" / "rank-00001.jsonl").unlink()


def _break_truncated(run: Path) -> None:
    path = run / "metrics" / "rank-00000.jsonl"
    path.write_text(path.read_text()[:-40])


def _break_few_steps(run: Path) -> None:
    for path in (run / "metrics").glob("*.jsonl"):
        path.write_text("".join(path.read_text().splitlines(keepends=True)[:5]))


def _break_plan_hash(run: Path) -> None:
    path = run / "metrics" / "rank-00002.jsonl"
    path.write_text(path.read_text().replace('"plan_hash": "', '"plan_hash": "f00d'))


def _break_no_metrics(run: Path) -> None:
    shutil.rmtree(run / "metrics")


def _break_no_startup(run: Path) -> None:
    shutil.rmtree(run / "startup")


def _break_missing_run(run: Path) -> None:
    shutil.rmtree(run)


BROKEN = [
    (_break_missing_run, 4, r"run directory .*run does not exist"),
    (_break_no_metrics, 4, r"has no metrics"),
    (_break_no_startup, 4, r"no start-up record naming the compiled output"),
    (_break_missing_rank, 1, r"no metrics of rank 1; the plan has 4 ranks"),
    (_break_truncated, 1, r"rank-00000.jsonl:10:\d+: not a JSON object .*cut short"),
    (_break_few_steps, 1, r"2 steps usable on every rank after 3 warm-up"),
    (_break_plan_hash, 1, r"rank-00002.jsonl:1: is of plan f00d.*; the compiled output is plan"),
]


@pytest.mark.parametrize(
    ("damage", "code", "message"), BROKEN, ids=lambda v: getattr(v, "__name__", "")
)
def test_bad_run_directories_get_one_error_and_nothing_is_written(
    compiled: Path, tmp_path: Path, damage: object, code: int, message: str
) -> None:
    """Each damaged run: its exit code, one `hetc:` line saying what, a `To fix:` line, no
    traceback, and no profile written."""
    run = tmp_path / "run"
    _truth_run(compiled, run)
    damage(run)  # type: ignore[operator]
    target = tmp_path / "corrected.json"
    got, output = _calibrate(str(run), "-o", str(target))
    assert got == code, output
    (line,) = [line for line in output.splitlines() if line.startswith("hetc:")]
    assert re.search(message, line), output
    assert "\nTo fix: " in output and "Traceback" not in output
    assert not target.exists()


@pytest.mark.slow
def test_the_cpu_example_calibrated_from_a_real_run(tmp_path: Path) -> None:
    """examples/local-cpu.yaml compiled and trained for its 20 steps with `hetc launch`:
    calibration reduces the iteration-time error, no rank's peak memory is under-predicted
    after it, and `hetc simulate` with the written profile predicts what it reported."""
    out, run = tmp_path / "out", tmp_path / "run"
    env = {"PYTHONPATH": str(ROOT)}
    hetc = [sys.executable, "-m", "hetc"]
    subprocess.run(
        [*hetc, "compile", str(ROOT / "examples/local-cpu.yaml"), "-o", str(out)],
        check=True,
        env=env,
        capture_output=True,
    )
    launched = subprocess.run(
        [*hetc, "launch", str(out), "--run-dir", str(run), "--timeout", "600"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert launched.returncode == 0, launched.stdout[-2000:] + launched.stderr[-2000:]
    code, output = _calibrate(str(run), "-o", str(tmp_path / "cpu.json"), "--json")
    assert code == 0, output
    report = json.loads(output[output.index("{") :])
    timing = report["iteration_time"]
    assert abs(timing["error_after"]) < abs(timing["error_before"])
    for rank in report["ranks"]:
        assert rank["peak_bytes"]["after"] >= rank["peak_bytes"]["measured"]
    done = runner.invoke(
        app,
        [
            "simulate",
            str(ROOT / "examples/local-cpu.yaml"),
            "--plan",
            str(out / "plan.json"),
            "--profile",
            str(tmp_path / "cpu.json"),
            "--json",
        ],
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["iteration_time"] == pytest.approx(timing["after"], rel=1e-9)


def test_an_output_without_its_spec_needs_spec_and_an_edited_one_is_refused(
    compiled: Path, tmp_path: Path
) -> None:
    """No spec.json (an older compile): exit 4 naming --spec, which then works with the
    spec's own profiles; a spec.json whose spec no longer has its hash: exit 1."""
    run = tmp_path / "run"
    _truth_run(compiled, run)
    record = json.loads((compiled / "spec.json").read_text())
    (compiled / "spec.json").unlink()
    code, output = _calibrate(str(run))
    assert code == 4, output
    assert "spec.json does not exist" in output and "pass the spec with --spec" in output
    code, output = _calibrate(str(run), "--spec", str(tmp_path / "spec.yaml"), "--json")
    assert code == 0, output
    assert json.loads(output[output.index("{") :])["factors"]["compute"][DEVICE] == pytest.approx(
        1.3, rel=1e-9
    )
    record["spec"]["training"]["seed"] += 1
    (compiled / "spec.json").write_text(json.dumps(record))
    code, output = _calibrate(str(run))
    assert code == 1, output
    assert "does not have the hash it records (the file was edited)" in output
    assert "\nTo fix: recompile the spec" in output


def test_out_overrides_the_recorded_output(compiled: Path, tmp_path: Path) -> None:
    """--out reads another copy of the output (one moved off the cluster, say): the plan
    must be the run's."""
    run = tmp_path / "run"
    _truth_run(compiled, run)
    copy = tmp_path / "copy"
    shutil.copytree(compiled.resolve(), copy)
    shutil.rmtree(run / "startup")
    code, output = _calibrate(str(run), "--out", str(copy))
    assert code == 0, output
    other = fixed_plan(read_compiled_spec(copy)[0], read_compiled_spec(copy)[1], (0, 2, 4), 1, 1)
    (copy / "plan.json").write_text(plan_to_json(other))
    code, output = _calibrate(str(run), "--out", str(copy))
    assert code == 1 and "is of plan" in output, output


TWO_DEVICES = """version: 1
name: two-cpus
model:
  architecture: {layers: 4, hidden: 64, heads: 4, ffn: 256, vocab: 512, max_positions: 128}
training:
  {global_batch_size: 8, seq_len: 64, precision: fp32, optimizer: {type: adamw}, zero_stage: 0}
devices:
  - {name: CPU-A, kind: cpu, memory: 2GiB, peak_tflops: {fp32: 0.05}, memory_bandwidth: 10GB/s,
     intra_node: {kind: shared-memory, bandwidth: 5GB/s}, price: 0 USD/h, source: "a test device"}
  - {name: CPU-B, kind: cpu, memory: 2GiB, peak_tflops: {fp32: 0.02}, memory_bandwidth: 5GB/s,
     intra_node: {kind: shared-memory, bandwidth: 5GB/s}, price: 0 USD/h, source: "a test device"}
zones:
  - name: localhost
    pools:
      - {device: CPU-A, quota: 2, gpus_per_node: 2}
      - {device: CPU-B, quota: 2, gpus_per_node: 2}
"""


def test_each_device_of_a_heterogeneous_plan_gets_its_own_scale(tmp_path: Path) -> None:
    """Two stages on two device types (analytical), the run made with one 1.5x and the other
    0.8x slower: each device's compute scale comes back; `-o FILE` is refused for two devices
    (exit 2, nothing written), `-o DIR` writes one profile each."""
    spec = check_text(TWO_DEVICES).spec
    assert spec is not None
    model = PlanningModel(spec)
    a, b = (
        next(k.index for k in model.kinds if k.device == d and k.tp == 1)
        for d in ("CPU-A", "CPU-B")
    )
    plan = build_plan(
        model, Shape(2, (0, 2, 4), 1), (((a, 1),), ((b, 1),)), spec_hash=spec_hash(spec)
    )
    out = tmp_path / "out"
    out.mkdir()
    (out / "plan.json").write_text(plan_to_json(plan))
    for name, data in compiled_spec_files(spec, []).items():
        (out / name).write_bytes(data)
    truth = [
        scaled(analytical_profile(spec, "CPU-A", plan), compute=1.5),
        scaled(analytical_profile(spec, "CPU-B", plan), compute=0.8),
    ]
    write_run(tmp_path / "run", out, true_run(plan, spec, truth))
    code, output = _calibrate(str(tmp_path / "run"), "-o", str(tmp_path / "one.json"))
    assert code == 2 and "uses 2 devices (CPU-A, CPU-B)" in output, output
    assert not (tmp_path / "one.json").exists()
    folder = tmp_path / "profiles"
    folder.mkdir()
    code, output = _calibrate(str(tmp_path / "run"), "-o", str(folder), "--json")
    assert code == 0, output
    compute = json.loads(output[output.index("{") :])["factors"]["compute"]
    assert compute == {
        "CPU-A": pytest.approx(1.5, rel=1e-12),
        "CPU-B": pytest.approx(0.8, rel=1e-12),
    }
    assert sorted(p.name for p in folder.iterdir()) == ["custom--cpu-a.json", "custom--cpu-b.json"]
