"""bench/fidelity.py runs end to end: it profiles, compiles, trains and compares."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_fidelity_bench_prints_predicted_and_measured(tmp_path: Path) -> None:
    """One two-stage plan, a few steps: the row has both numbers and an error, the profile it
    measured is the one the spec lists, and the summary counts the plan."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "fidelity.py"),
            "--only",
            "P2 3/1 mbs1",
            "--steps",
            "4",
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
        r"P2 3/1 mbs1 +time predicted ([\d.]+) s measured ([\d.]+) s \(([+-][\d.]+)%\)",
        done.stdout,
    )
    assert row is not None, done.stdout
    predicted, measured, error = (float(g) for g in row.groups())
    assert predicted > 0 and measured > 0
    assert error == pytest.approx(100 * (predicted - measured) / measured, abs=0.1)
    assert "over 1 plans" in done.stdout
    assert "profile.json" in (tmp_path / "spec.yaml").read_text()
    assert (tmp_path / "profile.json").exists()
