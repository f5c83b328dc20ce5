"""bench/fidelity.py runs end to end: it profiles, compiles, trains and compares."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from hetc.schema import check_file

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_fidelity_bench_prints_predicted_and_measured(tmp_path: Path) -> None:
    """One two-stage plan, a few steps: the row has the measured time and the predictions
    before and after calibrating on the run (in-sample with one run), each with its error; the
    profile it measured is the one the spec lists; the summaries count the plan."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "fidelity.py"),
            "--only",
            "P2 3/1 mbs1",
            "--steps",
            "6",
            "--warmup",
            "2",
            "--runs",
            "1",
            "--work",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    row = re.search(
        r"P2 3/1 mbs1 +time measured ([\d.]+) s, predicted"
        r" before ([\d.]+) s \(([+-][\d.]+)%\); after, in-sample ([\d.]+) s \(([+-][\d.]+)%\)",
        done.stdout,
    )
    assert row is not None, done.stdout
    measured, before, before_error, after, after_error = (float(g) for g in row.groups())
    assert measured > 0 and before > 0 and after > 0
    assert before_error == pytest.approx(100 * (before - measured) / measured, abs=0.1)
    assert after_error == pytest.approx(100 * (after - measured) / measured, abs=0.1)
    assert re.search(r"^before: iteration time .* over 1 plans", done.stdout, re.M)
    assert re.search(r"^after, in-sample: iteration time .* over 1 plans", done.stdout, re.M)
    assert "profile.json" in (tmp_path / "spec.yaml").read_text()
    assert (tmp_path / "profile.json").exists()


def _gpu_bench(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fidelity.py"), "--gpu", "H100-80GB", *extra],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )


def test_the_gpu_mode_without_a_gpu_says_so_in_one_line(tmp_path: Path) -> None:
    done = _gpu_bench(tmp_path, "--work", str(tmp_path / "work"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "needs a CUDA device" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_gpu_dry_run_plans_the_catalog_device(tmp_path: Path) -> None:
    """Without a GPU, `--dry-run` writes valid specs for the catalog device and prints an
    analytical prediction for each single-rank plan, listing the plans needing more GPUs."""
    work = tmp_path / "work"
    done = _gpu_bench(tmp_path, "--dry-run", "--gpus", "1", "--work", str(work))
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("spec.yaml", "spec-ac.yaml"):
        report = check_file(str(work / name))
        assert report.spec is not None, report
        assert [p.device for z in report.spec.zones for p in z.pools] == ["H100-80GB"]
    times = re.findall(r"^P1 D1 mbs\d( AC)? +predicted analytical ([\d.]+) s", done.stdout, re.M)
    assert len(times) == 6, done.stdout
    assert all(0 < float(t) < 1 for _, t in times)
    assert re.search(r"excluded .*P2 2/2 mbs2", done.stdout), done.stdout


def test_the_gpu_mode_refuses_a_device_outside_the_catalog(tmp_path: Path) -> None:
    """An unknown `--gpu` name: the positioned spec error, exit 2, no traceback."""
    unknown = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "fidelity.py"),
            "--gpu",
            "FOO",
            "--dry-run",
            "--work",
            str(tmp_path / "foo"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert unknown.returncode == 2
    assert re.search(r"spec\.yaml:\d+:\d+: .*unknown device 'FOO'", unknown.stderr), unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_dry_run_without_the_gpu_mode_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fidelity.py"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "--dry-run needs --gpu" in done.stderr
