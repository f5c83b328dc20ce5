"""What each declared approximation of the planner costs: its optimality gap against the exact
search, and its search time, on the random small instances of the exactness tests.

    python bench/approximations.py [--instances N]

Prints, per approximation, on how many instances it found the exact optimum, the worst and
mean relative gap of its objective, how often it found no plan where one exists, and the total
search time against the exact search's. The bench scenarios (bench/planner.py) are too large
for the exact search to finish, so the gap can only be measured here.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from oracles.instances import binding_instance, random_instance  # noqa: E402

from hetc.costmodel.planning import PlanningModel  # noqa: E402
from hetc.schema import check_text  # noqa: E402
from hetc.solver.search import APPROXIMATIONS, SearchOptions, search  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=120)
    args = parser.parse_args()
    specs = []
    for seed in range(args.instances):
        text = binding_instance(seed) if seed % 2 == 0 else random_instance(seed)
        spec = check_text(text, f"seed-{seed}.yaml").spec
        assert spec is not None
        specs.append(spec)
    exact_values: list[float | None] = []
    started = time.perf_counter()
    for spec in specs:
        found = search(PlanningModel(spec), SearchOptions()).candidates
        exact_values.append(found[0].value if found else None)
    exact_seconds = time.perf_counter() - started
    feasible = sum(v is not None for v in exact_values)
    print(f"{len(specs)} instances ({feasible} feasible); exact search {exact_seconds:.2f} s")
    columns = ("optimal", "worst gap", "mean gap", "missed", "time s")
    print(f"{'approximation':18} " + " ".join(f"{c:>9}" for c in columns))
    for name in sorted(APPROXIMATIONS):
        gaps, missed, optimal = [], 0, 0
        started = time.perf_counter()
        for spec, exact in zip(specs, exact_values, strict=True):
            found = search(
                PlanningModel(spec), SearchOptions(approximations=frozenset({name}))
            ).candidates
            if exact is None:
                continue
            if not found:
                missed += 1
                continue
            gap = found[0].value / exact - 1
            gaps.append(gap)
            optimal += gap <= 1e-9
        seconds = time.perf_counter() - started
        worst = max(gaps, default=0.0)
        mean = sum(gaps) / len(gaps) if gaps else 0.0
        print(
            f"{name:18} {optimal:>4}/{feasible:<4} {100 * worst:>9.2f}% {100 * mean:>8.2f}%"
            f" {missed:>7} {seconds:>7.2f}"
        )


if __name__ == "__main__":
    main()
