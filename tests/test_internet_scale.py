"""The 10,000-GPU example (`examples/internet-scale.yaml`) plans and compiles within loose
guards: these catch a planner or compiler that became many times slower or hungrier, they do
not measure it (`bench/compile_scale.py` and the dated sections of docs/planner.md and
docs/compile.md do). CPU time and peak memory come from `getrusage` of a parent process whose
only child is the hetc command, so nothing else pytest runs is counted."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hetc.plan import plan_of, read_cluster_file, read_rank_file
from hetc.plan.topology import one_f_one_b_order, schedule_steps

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "examples" / "internet-scale.yaml"
PLAN_CPU_SECONDS, PLAN_PEAK_BYTES, COMPILE_CPU_SECONDS = 120.0, 2 * 2**30, 60.0
INTERACTIVE_WALL_GUARD = 60.0
"""Seconds of wall time `hetc plan` with the default limit (8 s, the whole command's) must
stay under: six times the limit, so a loaded machine passes, and a limit that stopped only
the search (the old 13.6 s on an idle machine) would still pass; what it guards against is a
command that ignores the limit after the search altogether."""

MEASURED = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"code": done.returncode, "stdout": done.stdout, "stderr": done.stderr,
                  "cpu": usage.ru_utime + usage.ru_stime, "peak": usage.ru_maxrss * 1024}))
"""


def _measured(*arguments: str) -> dict[str, object]:
    """Run `python -m hetc ARGUMENTS` under a parent that reports its CPU time and peak RSS."""
    command = [sys.executable, "-c", MEASURED, sys.executable, "-m", "hetc", *arguments]
    done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT)
    result = json.loads(done.stdout)
    assert isinstance(result, dict)
    assert result["code"] == 0, result["stderr"]
    return result


def test_the_example_has_10000_gpus_of_4_types_in_30_zones_of_10_regions() -> None:
    """The spec is what the example claims: counted from its text, not from hetc's loader."""
    text = SPEC.read_text(encoding="utf-8")
    assert sum(int(q) for q in re.findall(r"quota: (\d+)", text)) == 10_000
    assert len(set(re.findall(r"device: ([\w-]+)", text))) == 4
    assert len(re.findall(r"^  - name: ", text, re.MULTILINE)) == 30
    assert len(set(re.findall(r"^    region: (\S+)", text, re.MULTILINE))) == 10


@pytest.mark.slow
def test_internet_scale_plans_and_compiles_within_guards(tmp_path: Path) -> None:
    """`hetc plan` answers within the CPU and memory guards; `hetc compile --plan` of its best
    plan within the CPU guard, writing one rank file per process of the plan whose schedule
    expands to that rank's 1F1B order."""
    planned = _measured("plan", str(SPEC), "--json")
    assert isinstance(planned["cpu"], float) and isinstance(planned["peak"], int)
    assert planned["cpu"] < PLAN_CPU_SECONDS and planned["peak"] < PLAN_PEAK_BYTES, planned
    assert isinstance(planned["stdout"], str)
    output = json.loads(planned["stdout"])
    assert output["feasible"] and output["plans"]
    plan_file = tmp_path / "plans.json"
    plan_file.write_text(planned["stdout"], encoding="utf-8")
    compiled = _measured(
        "compile", str(SPEC), "--plan", str(plan_file), "-o", str(tmp_path / "out")
    )
    assert isinstance(compiled["cpu"], float) and compiled["cpu"] < COMPILE_CPU_SECONDS, compiled

    plan = plan_of(json.loads((tmp_path / "out" / "plan.json").read_text(encoding="utf-8")))
    cluster = read_cluster_file(tmp_path / "out" / "topology" / "cluster.json")
    ranks = sum(len(r.local_ranks) for s in plan.stages for r in s.replicas)
    assert cluster["world_size"] == ranks
    files = sorted((tmp_path / "out" / "topology" / "ranks").iterdir())
    assert len(files) == ranks
    for path in files:
        record = read_rank_file(path)
        microbatches = plan.pipelines[record["pipeline"]].microbatches
        expected = one_f_one_b_order(record["stage"], len(plan.stages), microbatches)
        assert list(schedule_steps(record["schedule"])) == expected, path


@pytest.mark.slow
def test_internet_scale_plans_with_a_gap_under_the_default_limit() -> None:
    """`hetc plan --json` with the default limit returns a plan and its proven gap (a number
    in [0, 1], the search stopped by the limit), well within a loose wall-clock guard."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "hetc", "plan", str(SPEC), "--json"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    output = json.loads(done.stdout)
    assert output["feasible"] and output["plans"]
    assert isinstance(output["gap"], float) and 0.0 <= output["gap"] <= 1.0
    assert seconds < INTERACTIVE_WALL_GUARD, seconds
