"""bench/planner.py and the Sailor plans it scores hetc's plans against.

The Sailor plans are the yardstick for plan quality, so each must be a plan hetc can
evaluate for its scenario (consistent, within the quotas, the whole batch) or the quality
comparison would compare against nothing real. The bench itself is run end to end on its
fastest scenario only; its full run takes minutes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from hetc.costmodel.simulate import plan_spec_problems, simulate
from hetc.plan import plan_problems
from hetc.schema import check_file
from hetc.schema.spec import Spec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from sailor_plans import SAILOR_REPORTED, sailor_plan  # noqa: E402

SCENARIOS = sorted((ROOT / "bench" / "scenarios").glob("*.yaml"))


def _spec(path: Path) -> Spec:
    checked = check_file(str(path))
    assert checked.spec is not None, path
    return checked.spec


SHAPES = {
    "opt350m-128a100": (1, 32, 8),
    "gptneo-128a100": (2, 16, 4),
    "gptneo-32a100-96v100": (6, 9, 1),
    "gptneo-128a100-384v100": (13, 17, 1),
    "opt350m-128a100-384v100": (7, 32, 1),
    "opt350m-5zones": (2, 64, 4),
    "opt350m-budget": (1, 32, 8),
    "opt350m-floor": (1, 16, 8),
}
"""(P, D, microbatch size) of each Sailor plan, as the README's table reports them."""


def test_every_reported_sailor_plan_has_a_scenario() -> None:
    assert SHAPES.keys() == SAILOR_REPORTED.keys()
    assert SHAPES.keys() <= {p.stem for p in SCENARIOS}


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_sailor_plan_is_a_valid_plan_for_its_scenario(path: Path) -> None:
    spec = _spec(path)
    plan = sailor_plan(path.stem, spec)
    if plan is None:
        assert path.stem not in SAILOR_REPORTED
        return
    assert (len(plan.stages), len(plan.pipelines), plan.microbatch_size) == SHAPES[path.stem]
    assert plan_problems(plan) == []
    assert plan_spec_problems(plan, spec) == []
    total = sum(p.microbatches for p in plan.pipelines)
    assert total * plan.microbatch_size == spec.training.global_batch_size
    counts = [p.microbatches for p in plan.pipelines]
    assert max(counts) - min(counts) <= 1, "the batch is spread as evenly as integers allow"
    if path.stem == "opt350m-5zones":
        assert {n.region for n in plan.nodes} == {"us-central1"}
    assert simulate(plan, spec).iteration_time > 0


def _bench(*arguments: str) -> subprocess.CompletedProcess[str]:
    """bench/planner.py on the fastest scenario, without perturbations or checks."""
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "planner.py"),
            "--scenario",
            "opt350m-128a100",
            "--no-perturb",
            "--no-checks",
            *arguments,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_bench_runs_one_scenario_end_to_end() -> None:
    done = _bench("--time-limit", "30")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Search time" in out and "Plan quality" in out
    rows = [line for line in out.splitlines() if line.startswith("opt350m-128a100 ")]
    assert len(rows) == 2, out
    search_seconds = float(rows[0].split()[1])
    assert search_seconds > 0
    assert " yes " in rows[1], "hetc's plan is at least as good as Sailor's"


def test_repeated_searches_print_their_least_and_median() -> None:
    import planner as bench  # bench/planner.py, on the path above

    done = _bench("--cost-model", "analytical", "--repeat", "3")
    assert done.returncode == 0, done.stderr
    header = next(line for line in done.stdout.splitlines() if line.startswith("scenario "))
    assert "least / median s (runs)" in header
    row = next(line for line in done.stdout.splitlines() if line.startswith("opt350m-128a100 "))
    least, median = float(row.split()[2]), float(row.split()[4])
    assert 0 < least <= median and "(3)" in row
    finished = bench.Run(result={"search_seconds": 0.5}, wall=1.0)
    lost = bench.Run(result=None, wall=9.0, failure="killed")
    fast = bench.Run(result={"search_seconds": 0.2}, wall=1.0)
    assert bench.repeat_times([finished, lost, fast]) == [0.2, 0.5]
    assert bench.spread_text([0.2, 0.5]) == "0.2 / 0.35 (2)"
    assert bench.spread_text([]) == "-"


def test_a_repeat_below_one_is_refused() -> None:
    done = _bench("--repeat", "0")
    assert done.returncode == 2
    assert "--repeat must be at least 1" in done.stderr and "Traceback" not in done.stderr


def test_the_bench_names_the_build_it_times() -> None:
    """The header says whether the searches ran the source or the mypyc build: the tests'
    editable install is the source, and a module loaded from a C extension reads as
    compiled."""
    import planner as bench  # bench/planner.py, on the path above

    done = _bench("--cost-model", "analytical")
    assert done.returncode == 0, done.stderr
    assert "planner: source (driver.py;" in done.stdout
    compiled = ModuleType("hetc.solver.search.driver")
    compiled.__file__ = "/x/hetc/solver/search/driver.cpython-311-x86_64-linux-gnu.so"
    assert bench.planner_build(compiled).startswith("compiled by mypyc (driver.cpython-311")
