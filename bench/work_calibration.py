"""Fit and check the weights of the search's work units (`hetc.solver.search.work.WEIGHTS`).

A budget of work decides where a search stops, the same on every machine; the weights only
decide how many seconds a budget lasts. This bench runs the searches `hetc plan` runs (the
first search with its runners-up, then the listing search of the best four) on a corpus of
specs, each in this process with the cyclic collector paused as the search pauses it, and
records each search's tallies (`Incumbent.tally`) and its CPU seconds (`time.process_time`,
the least of --repeats runs: other processes' load disturbs CPU time less than wall time,
but still adds to it). It then fits one weight per
kind of step by non-negative least squares on the relative error (units / microseconds - 1),
on the fit set only, and reports:

- the fitted weights beside the ones in the code;
- for the fit set (leave-one-out) and for the check set (specs the fit never saw), the
  spread of microseconds per unit with the fitted weights and with the code's weights:
  median, p10, p90, worst both ways.

Fit set: the bundled examples, the Sailor scenarios, 40 specs of bench/spec_family.py seed
27, 15 small specs searched exactly (seed 5) and the zone scaling specs of bench/zones.py;
check set: 30 specs of seed 7 and 15 small exact specs of seed 11. Searches stop at
--work-limit units each (default 20,000,000), so that every run of a search takes the same
steps: a stopped search is a data point like any other, its tallies counted to where it
stopped.

Usage: python bench/work_calibration.py [--work-limit N] [--repeats N] [--quick]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from spec_family import family_spec, small_spec  # noqa: E402
from zones import zones_spec  # noqa: E402

from hetc.costmodel.planning import PlanningModel  # noqa: E402
from hetc.schema import check_file, check_text  # noqa: E402
from hetc.schema.spec import Spec  # noqa: E402
from hetc.solver.planner import RERANKED, default_approximations  # noqa: E402
from hetc.solver.search import SearchOptions  # noqa: E402
from hetc.solver.search import driver as driver_module  # noqa: E402
from hetc.solver.search.work import WEIGHTS  # noqa: E402

Case = tuple[str, Spec, frozenset[str] | None]
Point = tuple[str, list[int], float]
"""(label, tallies, CPU seconds) of one search."""


def fit_corpus(quick: bool) -> Iterator[Case]:
    """The specs the weights are fitted on (module docstring)."""
    paths = sorted((ROOT / "examples").glob("*.yaml")) + sorted(
        (ROOT / "bench" / "scenarios").glob("*.yaml")
    )
    for path in paths:
        checked = check_file(str(path))
        assert checked.spec is not None, path
        yield path.name, checked.spec, None
    rng = random.Random(27)
    for k in range(10 if quick else 40):
        yield f"family27-{k}", family_spec(rng), None
    rng = random.Random(5)
    for k in range(5 if quick else 15):
        yield f"small5-{k}", small_spec(rng), frozenset()
    for zones in (50,) if quick else (50, 200, 400):
        checked = check_text(zones_spec(zones), "zones.yaml")
        assert checked.spec is not None
        yield f"zones{zones}", checked.spec, None


def check_corpus(quick: bool) -> Iterator[Case]:
    """Specs the fit never sees (module docstring)."""
    rng = random.Random(7)
    for k in range(8 if quick else 30):
        yield f"family7-{k}", family_spec(rng), None
    rng = random.Random(11)
    for k in range(4 if quick else 15):
        yield f"small11-{k}", small_spec(rng), frozenset()


def searches(case: Case, work_limit: int, repeats: int) -> list[Point]:
    """The first and the listing search of `hetc plan` on the case, each with its tallies and
    its least CPU seconds over `repeats` runs on a fresh planning model: other processes'
    load only ever adds time, so the least run is the one closest to a quiet machine."""
    runs = [_searched(case, work_limit) for _ in range(repeats)]
    return [
        (label, tally, min(run[i][2] for run in runs))
        for i, (label, tally, _) in enumerate(runs[0])
    ]


def _searched(case: Case, work_limit: int) -> list[Point]:
    """One run of `searches`."""
    label, spec, approximations = case
    model = PlanningModel(spec)
    chosen = default_approximations(model) if approximations is None else approximations
    tallies: list[list[int]] = []
    real = driver_module.Search._result

    def kept(self: driver_module.Search, stop: str, interrupted: bool, by: str) -> object:
        tallies.append(list(self.tally))
        return real(self, stop, interrupted, by)

    driver_module.Search._result = kept  # type: ignore[method-assign]
    points: list[Point] = []
    try:
        options = SearchOptions(
            runners_up=RERANKED - 1, approximations=chosen, work_limit=work_limit
        )
        for step, opts in enumerate((options, replace(options, top=RERANKED, runners_up=0))):
            tallies.clear()
            started = time.process_time()
            result = driver_module.search(model, opts)
            seconds = time.process_time() - started
            points.append((f"{label}/{step + 1}", _summed(tallies), seconds))
            if not result.complete or not result.candidates:
                break
            options = replace(options, seeds=result.candidates)
    finally:
        driver_module.Search._result = real  # type: ignore[method-assign]
    return points


def _summed(tallies: list[list[int]]) -> list[int]:
    """The tallies of a `search` call: the outermost search's, which holds its warm start's
    (a shared list), plus a priced search's after a free-only one (separate lists)."""
    seen: list[list[int]] = []
    for tally in tallies:
        if not any(tally is other for other in seen):
            seen.append(tally)
    return [sum(column) for column in zip(*seen, strict=True)] if seen else [0] * len(WEIGHTS)


def nnls(a: np.ndarray, b: np.ndarray, iterations: int = 200) -> np.ndarray:
    """Least squares with x >= 0, by the Lawson-Hanson active-set method."""
    columns = a.shape[1]
    x = np.zeros(columns)
    passive = np.zeros(columns, dtype=bool)
    for _ in range(iterations):
        gradient = a.T @ (b - a @ x)
        if passive.all() or gradient[~passive].max(initial=0.0) <= 1e-12:
            break
        passive[np.argmax(np.where(passive, -np.inf, gradient))] = True
        while True:
            z = np.zeros(columns)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            shrinking = passive & (z <= 0)
            step = np.min(x[shrinking] / (x[shrinking] - z[shrinking]))
            x = x + step * (z - x)
            passive &= x > 1e-15
    return x


def fit(points: list[Point]) -> np.ndarray:
    """Weights (units per step) making units about microseconds of CPU, on `points`."""
    tallies = np.array([p[1] for p in points], dtype=float)
    micros = np.array([max(p[2], 1e-4) * 1e6 for p in points])
    return nnls(tallies / micros[:, None], np.ones(len(points)))


def spread(ratios: list[float]) -> str:
    """Median, p10, p90 and both worst microseconds-per-unit ratios, over the median."""
    ordered = sorted(ratios)
    median = statistics.median(ordered)
    p10 = ordered[len(ordered) // 10]
    p90 = ordered[(9 * len(ordered)) // 10]
    return (
        f"median {median:.3g} us/unit; p10 {p10 / median:.2f}x, p90 {p90 / median:.2f}x,"
        f" worst {ordered[0] / median:.2f}x and {ordered[-1] / median:.2f}x"
        f" of the median, over {len(ordered)} searches"
    )


def ratios(points: list[Point], weights: np.ndarray | tuple[int, ...]) -> list[float]:
    """Microseconds of CPU per unit of each search, under `weights`."""
    out = []
    for _, tally, seconds in points:
        units = sum(c * w for c, w in zip(tally, weights, strict=True))
        if units > 0:
            out.append(seconds * 1e6 / units)
    return out


def leave_one_out(points: list[Point]) -> list[float]:
    """Each search's ratio under weights fitted on every other search."""
    out = []
    for i, point in enumerate(points):
        weights = fit(points[:i] + points[i + 1 :])
        out += ratios([point], weights)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-limit", type=int, default=20_000_000)
    parser.add_argument("--quick", action="store_true", help="A small corpus, for a smoke run.")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    corpora: dict[str, list[Point]] = {"fit": [], "check": []}
    for name, corpus in (("fit", fit_corpus(args.quick)), ("check", check_corpus(args.quick))):
        for case in corpus:
            for label, tally, seconds in searches(case, args.work_limit, args.repeats):
                corpora[name].append((label, tally, seconds))
                print(f"{name:5s} {label:28s} {seconds:7.3f} s  {tally}", flush=True)
    usable = [p for p in corpora["fit"] if p[2] >= 0.01]
    fitted = fit(usable)
    print("fitted weights:", [round(float(w), 2) for w in fitted])
    print("code's weights:", list(WEIGHTS))
    checked = [p for p in corpora["check"] if p[2] >= 0.01]
    print(f"fit set, leave-one-out: {spread(leave_one_out(usable))}")
    print(f"check set, fitted weights: {spread(ratios(checked, fitted))}")
    print(f"fit set, code's weights: {spread(ratios(usable, WEIGHTS))}")
    print(f"check set, code's weights: {spread(ratios(checked, WEIGHTS))}")
    worst = max(ratios(checked, WEIGHTS), default=math.nan)
    print(f"slowest check search: {worst:.3g} us per unit of the code's weights")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
