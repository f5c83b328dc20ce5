"""bench/planner_family.py: its percentile is the nearest-rank one, and a short run ends with
the line the issue asks for, with a proven gap for each plan it prints."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from planner_family import describe, percentile  # noqa: E402
from spec_family import family_spec  # noqa: E402


def test_percentile_is_the_nearest_rank() -> None:
    """Against the definition: the smallest value with at least q% of the values at or below."""
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    for q in (1, 20, 21, 40, 50, 95, 100):
        expected = sorted(values)[math.ceil(len(values) * q / 100) - 1]
        assert percentile(values, q) == expected
    assert math.isnan(percentile([], 50))


def test_a_short_run_ends_with_the_summary_line() -> None:
    """Two generated specs under a budget of 1,000,000 units: one row each, every plan row
    states both gaps, the line before the last gives the gap over all plans, and the last
    line is `p95 seconds: X, worst gap: Y, unanswered: Z`."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "planner_family.py"),
            *("--count", "2", "--work-limit", "1000000", "--cap", "120"),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    lines = done.stdout.strip().splitlines()
    rows = [line for line in lines if re.match(r"\s*\d+\s", line)]
    assert len(rows) == 2
    assert all(", gap " in row and "over all plans" in row for row in rows if " plan" in row)
    if any(" plan" in row for row in rows):
        assert re.fullmatch(r"p95 gap over all plans: \S+%, worst: \S+%", lines[-2])
    assert re.fullmatch(
        r"p95 seconds: \d+\.\d\d, worst gap: (\S+%|n/a \(no plan\)), unanswered: [0-2]", lines[-1]
    )


def test_describe_counts_in_the_right_number() -> None:
    """Each count's word agrees with it ("1 region", "3 regions"), over generated specs."""
    import random

    for seed in range(30):
        text = describe(family_spec(random.Random(seed)))
        for count, word in re.findall(r"(\d[\d,]*) (type|zone|region|pool|device)s?\b", text):
            plural = re.search(rf"{count} {word}s\b", text) is not None
            assert plural == (count != "1"), text
