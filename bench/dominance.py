"""Is any answer of `hetc plan` beaten by a plan the same command scored?

For each spec of the generated family (bench/spec_family.py) and the 10,000-GPU example, the
bench runs `hetc plan --json` in this process, as the command runs it (its default work
budget, `--top 3`, and again with `--explain`), while recording every candidate any search of
the command offered to its incumbent: the first search, the listing of runners-up, the
explanations' forced searches, a probe. Every recorded candidate of the same spec meets the
spec's constraints by the planning model (a search offers only those). The answer (plan 1,
as printed: the simulator's objective) is dominated when

- a plan the command simulated (its ranked plans, an explanation's best plan using a pool)
  is strictly better by the simulator, or
- for max_throughput, a candidate the command scored has a planning estimate strictly
  better than the answer's simulated time: the estimated time is an upper bound of the
  simulated one (checked here, `worst simulated/estimate`), so that candidate is better by
  the simulator too. The estimated cost is no such bound (the simulator bills traffic the
  estimate prices lower; the bench prints the worst ratio for cost too), so for min_cost
  only simulated plans count.

Relative tolerance 1e-9. Besides, the best --simulate candidates by planning estimate are
simulated: those better than the answer by the simulator alone are not dominance (the
command never simulated them: its reranking simulates the best few by estimate) but say how
often the estimate's order misleads the reranking (`reranking missed`).

And for a min_cost spec the same spec is planned with objective max_throughput (for a
max_throughput spec with a budget, with objective min_cost), as a user would try: where that
other answer meets the spec's constraints and beats the first on its objective, the first
is dominated by another hetc answer, a third count.

Prints one row per spec and command, then `dominated: N of M answers (by a plan the same
command scored), K of L (by hetc's answer under the other objective)`. Target: 0 and 0.

Usage: python bench/dominance.py [--count N] [--seed S] [--simulate N] [--no-explain]
                                 [--no-internet] [--floors]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from spec_family import family_spec  # noqa: E402

from hetc.costmodel.planning import PlanningModel  # noqa: E402
from hetc.costmodel.simulate import simulate  # noqa: E402
from hetc.schema import check_file  # noqa: E402
from hetc.schema.spec import Spec, spec_hash  # noqa: E402
from hetc.solver.budget import command_budget  # noqa: E402
from hetc.solver.build import build_plan  # noqa: E402
from hetc.solver.planner import simulated_objective  # noqa: E402
from hetc.solver.report import run_plan_command  # noqa: E402
from hetc.solver.search import Candidate  # noqa: E402
from hetc.solver.search import incumbent as incumbent_module  # noqa: E402

TOLERANCE = 1e-9


def command(spec: Spec, *, explain: bool) -> tuple[dict[str, Any] | None, list[Candidate]]:
    """`hetc plan SPEC --json [--explain]` run here: its JSON (None when it found no plan)
    and every candidate of `spec` any of its searches offered."""
    recorded: list[Candidate] = []
    digest = spec_hash(spec)
    real = incumbent_module.Incumbent.offer

    def offer(self: incumbent_module.Incumbent, candidate: Candidate) -> None:
        if spec_hash(self.model.spec) == digest:
            recorded.append(candidate)
        real(self, candidate)

    printed: list[str] = []
    incumbent_module.Incumbent.offer = offer  # type: ignore[method-assign]
    try:
        code = run_plan_command(
            spec,
            str(ROOT),
            top=3,
            as_json=True,
            explain=explain,
            approximations=None,
            budget=command_budget(),
            eval_limit=None,
            solver="search",
            echo=lambda message="", **_: printed.append(str(message)),
        )
    finally:
        incumbent_module.Incumbent.offer = real  # type: ignore[method-assign]
    if code != 0:
        return None, recorded
    return json.loads(printed[-1]), recorded


def scored_check(
    spec: Spec, answer: float, recorded: list[Candidate], most: int
) -> tuple[float | None, int, float]:
    """(the best planning estimate of a recorded candidate that beats `answer`, else None;
    how many of the best `most` by estimate beat it by the simulator; the worst ratio of
    simulated objective to estimate among those simulated, which must stay at most 1)."""
    model = PlanningModel(spec)
    distinct: dict[tuple[object, ...], Candidate] = {}
    for candidate in recorded:
        distinct.setdefault((candidate.shape, candidate.assignment), candidate)
    ordered = sorted(distinct.values(), key=Candidate.key)
    beaten = None
    if spec.objective == "max_throughput":
        beaten = next((c.value for c in ordered if c.value < answer * (1 - TOLERANCE)), None)
    missed, worst = 0, 0.0
    for candidate in ordered[:most]:
        plan = build_plan(model, candidate.shape, candidate.assignment, spec_hash="")
        value = simulated_objective(spec, simulate(plan, spec))
        missed += value < answer * (1 - TOLERANCE)
        if candidate.value > 0:
            worst = max(worst, value / candidate.value)
    return beaten, missed, worst


def simulated_better(spec: Spec, output: dict[str, Any], answer: float) -> float | None:
    """The best simulated objective among the plans the command printed (its ranked plans
    and its explanations' best plans) that beats `answer`, else None."""
    values = [value_of(spec, entry) for entry in output["plans"]]
    values += [x["value"] for x in output.get("explain", []) if x["value"] is not None]
    better = [v for v in values if v < answer * (1 - TOLERANCE)]
    return min(better) if better else None


def other_objective(spec: Spec) -> Spec | None:
    """The spec a user would try to check a `min_cost` answer (max_throughput), or a
    budgeted max_throughput answer (min_cost); None otherwise."""
    if spec.objective == "min_cost":
        return replace(spec, objective="max_throughput")
    if spec.constraints.max_cost_per_iteration is not None:
        return replace(spec, objective="min_cost")
    return None


def meets(spec: Spec, entry: dict[str, Any]) -> bool:
    """Whether a `--json` plan entry meets `spec`'s budget and throughput floor, by the
    simulator's numbers the entry carries."""
    plan = entry["plan"]["predictions"]
    c = spec.constraints
    if c.max_cost_per_iteration is not None and plan["cost_per_iteration"] > (
        c.max_cost_per_iteration * (1 + TOLERANCE)
    ):
        return False
    return not (
        c.min_throughput is not None
        and 1 / plan["iteration_time"] < c.min_throughput * (1 - TOLERANCE)
    )


def value_of(spec: Spec, entry: dict[str, Any]) -> float:
    """The spec's objective of a `--json` plan entry, by the simulator."""
    predictions = entry["plan"]["predictions"]
    if spec.objective == "min_cost":
        return float(predictions["cost_per_iteration"])
    return float(predictions["iteration_time"])


def specs(count: int, seed: int, internet: bool, floors: bool) -> list[tuple[str, Spec]]:
    """The family's specs (with `floors`, only its min_cost specs with a throughput floor,
    drawn until there are `count`), and the 10,000-GPU example."""
    rng = random.Random(seed)
    out: list[tuple[str, Spec]] = []
    drawn = 0
    while len(out) < count:
        spec = family_spec(rng)
        drawn += 1
        if not floors or (spec.objective == "min_cost" and spec.constraints.min_throughput):
            out.append((f"family{seed}-{drawn - 1}", spec))
    if internet:
        checked = check_file(str(ROOT / "examples" / "internet-scale.yaml"))
        assert checked.spec is not None
        out.append(("internet-scale", checked.spec))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=30)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--simulate", type=int, default=60)
    parser.add_argument("--no-explain", action="store_true")
    parser.add_argument("--no-internet", action="store_true")
    parser.add_argument(
        "--floors", action="store_true", help="Only min_cost specs with a throughput floor."
    )
    args = parser.parse_args(argv)
    answers = dominated = compared = by_other = missed_answers = 0
    worst_ratio = {"max_throughput": 0.0, "min_cost": 0.0}
    for label, spec in specs(args.count, args.seed, not args.no_internet, args.floors):
        for explain in (False,) if args.no_explain else (False, True):
            name = f"{label}{' --explain' if explain else ''}"
            started = time.perf_counter()
            output, recorded = command(spec, explain=explain)
            seconds = time.perf_counter() - started
            if output is None:
                print(f"{name:32s} {seconds:6.2f} s  no plan", flush=True)
                continue
            answers += 1
            answer = value_of(spec, output["plans"][0])
            estimate, missed, ratio = scored_check(spec, answer, recorded, args.simulate)
            shown = simulated_better(spec, output, answer)
            worst_ratio[spec.objective] = max(worst_ratio[spec.objective], ratio)
            missed_answers += missed > 0
            row = f"{name:32s} {seconds:6.2f} s  {spec.objective:14s} {answer:.6g}"
            row += f"  {len(recorded)} scored"
            if estimate is not None or shown is not None:
                dominated += 1
                row += f"  DOMINATED (simulated {shown}, estimate {estimate})"
            if missed:
                row += f"  reranking missed {missed}"
            if ratio > 1 + TOLERANCE:
                row += f"  simulated/estimate {ratio:.4f}"
            other = other_objective(spec) if not explain else None
            if other is not None:
                alternative, _ = command(other, explain=False)
                if alternative is not None:
                    compared += 1
                    entry = alternative["plans"][0]
                    if meets(spec, entry) and value_of(spec, entry) < answer * (1 - TOLERANCE):
                        by_other += 1
                        row += f"; DOMINATED by the {other.objective} answer"
                        row += f" at {value_of(spec, entry):.6g}"
            print(row, flush=True)
    print(
        f"reranking missed a better plan (by the simulator) among the best {args.simulate}"
        f" scored in {missed_answers} of {answers} answers; worst simulated/estimate"
        f" {worst_ratio['max_throughput']:.4f} for time (at most 1: the estimate bounds the"
        f" simulator), {worst_ratio['min_cost']:.4f} for cost"
    )
    print(
        f"dominated: {dominated} of {answers} answers (by a plan the same command scored),"
        f" {by_other} of {compared} (by hetc's answer under the other objective)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
