"""How tight the search's shape time bounds are, and which term is loose.

Over the small random specs of tests/oracles/instances.py (every candidate enumerated by
tests/oracles/brute_force.py and timed by the planning model), for each shape (m, P, D) with a
feasible candidate: the ratio of `Bounds.shape_bounds`' iteration time to the shape's fastest
candidate (the exact optimum of the shape), and the same per term: F_lb, m1 S_lb, the joint
F + m1 S (the larger of their sum and the replica-speed floor, `ReplicaSlots.floor`) and
Y_lb, with m1 = ceil(T / D) - 1 (`Bounds.time_terms`), against the fastest candidate's fill,
m1 x straggler, their sum and sync ("vs best": where the bound's time goes missing), and
against the least of that term over the shape's candidates ("vs least": how loose the term
is as a bound of its own; for the total the two are one). A ratio of 1 is a tight bound; a
term whose candidates all have 0 (a single stage's sends) is left out.
Prints the p50, p10, p5 and min of each ratio, then the decomposition at the shape of the
Zorse-style cluster's incumbent (tests/test_anytime_cases.py, searched for `--seconds`, 8 by
default), with the search's lower bound.

Usage: python bench/bound_tightness.py [--seeds N] [--seconds S]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from oracles.brute_force import candidates  # noqa: E402
from oracles.instances import random_instance  # noqa: E402
from planner_family import percentile  # noqa: E402
from test_anytime_cases import ZORSE  # noqa: E402

from hetc.costmodel.planning import Estimate, PlanningModel  # noqa: E402
from hetc.schema import check_text  # noqa: E402
from hetc.schema.spec import Spec  # noqa: E402
from hetc.solver.search import SearchOptions, search  # noqa: E402
from hetc.solver.search.driver import Search  # noqa: E402

SEEDS = 60
"""Random instances looked at by default (each enumerated in full, a few seconds)."""
TERMS = ("total", "F", "m1 S", "F + m1 S", "Y")


def spec_of(text: str) -> Spec:
    """The checked spec of a YAML text."""
    result = check_text(text, "bench.yaml")
    if result.spec is None:
        raise ValueError("\n".join(d.format() for d in result.diagnostics))
    return result.spec


def parts(estimate: Estimate, m1: int) -> tuple[float, float, float, float, float]:
    """(iteration, F, m1 S, F + m1 S, Y) of a candidate."""
    paced = m1 * estimate.straggler
    return (estimate.iteration_time, estimate.fill, paced, estimate.fill + paced, estimate.sync)


def bound_parts(bounds: Search, mbs: int, stages: int, dp: int) -> tuple[float, ...]:
    """(iteration, F, m1 S, F + m1 S, Y) of the shape bound: F + m1 S is the larger of
    F_lb + m1 S_lb and the replica-speed floor (`ReplicaSlots.floor`), as in
    `Bounds.shape_bounds`."""
    m1 = -(-(bounds.model.batch // mbs) // dp) - 1
    fill, straggler, sync = bounds.time_terms(mbs, stages, dp)
    send = bounds.least_send(mbs) if stages > 1 else 0.0
    floor = bounds.slots.floor(mbs, stages, dp, m1, send, straggler - send)
    paced = max(fill + m1 * straggler, floor)
    return (paced + sync, fill, m1 * straggler, paced, sync)


def shape_ratios(spec: Spec) -> Iterator[tuple[str, str, float]]:
    """(term, "vs best" or "vs least", bound / candidate) for every shape of `spec`."""
    model = PlanningModel(spec)
    best: dict[tuple[int, int, int], Estimate] = {}
    least: dict[tuple[int, int, int], list[float]] = {}
    for shape, _, estimate in candidates(model):
        if not estimate.feasible:
            continue
        key = (shape.microbatch, shape.stages, shape.pipelines)
        m1 = model.microbatches(shape) - 1
        if key not in best or estimate.iteration_time < best[key].iteration_time:
            best[key] = estimate
        mine = parts(estimate, m1)
        least[key] = [min(a, b) for a, b in zip(least.get(key, mine), mine, strict=True)]
    bounds = Search(model, SearchOptions())
    for (mbs, stages, dp), estimate in best.items():
        m1 = -(-(model.batch // mbs) // dp) - 1
        mine = bound_parts(bounds, mbs, stages, dp)
        for term, bound, fastest, low in zip(
            TERMS, mine, parts(estimate, m1), least[mbs, stages, dp], strict=True
        ):
            if fastest > 0:
                yield term, "vs best", bound / fastest
            if low > 0 and term != "total":
                yield term, "vs least", bound / low


def zorse(seconds: float) -> None:
    """The Zorse cluster's incumbent after `seconds` of search, against its shape's bound
    terms."""
    model = PlanningModel(spec_of(ZORSE))
    answer = search(model, SearchOptions(time_limit=seconds))
    top = answer.candidates[0]
    shape = top.shape
    m1 = model.microbatches(shape) - 1
    bounds = Search(model, SearchOptions())
    mine = bound_parts(bounds, shape.microbatch, shape.stages, shape.pipelines)
    e = top.estimate
    print(
        f"zorse incumbent (after {seconds:g} s, {answer.evaluations} candidates, lower bound"
        f" {answer.lower_bound:.3f}): m={shape.microbatch}"
        f" P={shape.stages} D={shape.pipelines} m1={m1}"
    )
    print(f"  {'term':<8} {'bound':>10} {'incumbent':>10} {'ratio':>6}")
    for term, bound, value in zip(TERMS, mine, parts(e, m1), strict=True):
        ratio = f"{bound / value:6.3f}" if value > 0 else "     -"
        print(f"  {term:<8} {bound:10.3f} {value:10.3f} {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    ratios: dict[tuple[str, str], list[float]] = {}
    shapes = 0
    for seed in range(args.seeds):
        for term, against, ratio in shape_ratios(spec_of(random_instance(seed))):
            ratios.setdefault((term, against), []).append(ratio)
            shapes += term == "total" and against == "vs best"
    print(f"{shapes} shapes with a feasible candidate over {args.seeds} random instances")
    print(f"{'term':<8} {'against':<9} {'n':>5} {'p50':>6} {'p10':>6} {'p5':>6} {'min':>6}")
    for term in TERMS:
        for against in ("vs best", "vs least"):
            values = ratios.get((term, against))
            if not values:
                continue
            quantiles = " ".join(f"{percentile(values, q):6.3f}" for q in (50, 10, 5))
            print(f"{term:<8} {against:<9} {len(values):5d} {quantiles} {min(values):6.3f}")
    zorse(args.seconds)


if __name__ == "__main__":
    main()
