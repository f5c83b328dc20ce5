"""The search's certificate: wherever it stops (an evaluation limit at many points, a stop
event), its lower bound is at most the brute-force optimum and its incumbent at least it,
and a complete search proves a gap of 0; min_cost with free pools is the fastest of the
cheapest plans.

The oracle is tests/oracles/brute_force.py over the exactness tests' random instances: it
shares only `PlanningModel.estimate` with the search. Mutation check (in this file): a bound
that reports the incumbent itself, the natural slip, is caught by
`test_a_bound_that_is_the_incumbent_is_caught`.
"""

from __future__ import annotations

import math
from functools import cache
from threading import Event
from typing import Any

import pytest
from oracles.brute_force import brute_force, candidates
from oracles.instances import binding_instance, instance_data, random_instance, to_yaml

from hetc.costmodel.planning import PlanningModel
from hetc.schema import Spec, check_text
from hetc.solver.certificate import Snapshot, gap_text, relative_gap, some_pool_is_free
from hetc.solver.search import SearchOptions, SearchResult, search
from hetc.solver.search.driver import Search

SEEDS = range(24)
LIMITS = (1, 2, 3, 5, 8, 13, 21, 34, 55, 89)
SLACK = 1e-9


def _spec(text: str) -> Spec:
    result = check_text(text, "certificate.yaml")
    assert result.spec is not None and not result.errors, result.diagnostics
    return result.spec


@cache
def _text(seed: int) -> str:
    return binding_instance(seed) if seed % 2 == 0 else random_instance(seed)


@cache
def _optimum(seed: int) -> float | None:
    best = brute_force(_spec(_text(seed)))
    return None if best is None else best[0]


def _brackets(result: SearchResult, optimum: float | None) -> str | None:
    """What is wrong with `result`'s certificate against the true optimum, or None."""
    incumbent = result.candidates[0].value if result.candidates else None
    if optimum is None:
        if incumbent is not None:
            return f"found {incumbent} on an infeasible instance"
        if result.complete and result.lower_bound != math.inf:
            return f"complete and infeasible, but bound {result.lower_bound}"
        return None
    if result.lower_bound > optimum * (1 + SLACK):
        return f"bound {result.lower_bound} above the optimum {optimum}"
    if incumbent is not None and incumbent < optimum * (1 - SLACK):
        return f"incumbent {incumbent} below the optimum {optimum}"
    if result.complete and result.gap != 0:
        return f"complete but gap {result.gap}"
    if incumbent is not None and result.gap != relative_gap(incumbent, result.lower_bound):
        return f"gap {result.gap} is not that of {incumbent} and {result.lower_bound}"
    return None


def _stopped_runs(
    approximations: frozenset[str] = frozenset(), seeds: range = SEEDS
) -> list[tuple[int, int, SearchResult]]:
    """(seed, limit, result) for every instance stopped at every limit of LIMITS."""
    runs = []
    for seed in seeds:
        model = PlanningModel(_spec(_text(seed)))
        for limit in LIMITS:
            options = SearchOptions(eval_limit=limit, approximations=approximations)
            runs.append((seed, limit, search(model, options)))
    return runs


def test_the_bound_brackets_the_brute_force_optimum_wherever_the_search_stops() -> None:
    """bound <= optimum <= incumbent at every evaluation limit, and some stopped runs prove a
    positive bound (a bound of 0 would pass the first check and prove nothing)."""
    wrong, positive = [], 0
    for seed, limit, result in _stopped_runs():
        problem = _brackets(result, _optimum(seed))
        if problem:
            wrong.append(f"seed {seed}, eval_limit {limit}: {problem}")
        positive += not result.complete and 0 < result.lower_bound < math.inf
    assert not wrong, "\n".join(wrong)
    assert positive >= 10, positive


@pytest.mark.slow
def test_the_bound_brackets_the_optimum_on_the_other_exactness_instances() -> None:
    """The same check on the rest of the exactness tests' 200 instances."""
    wrong = []
    for seed, limit, result in _stopped_runs(seeds=range(len(SEEDS), 200)):
        problem = _brackets(result, _optimum(seed))
        if problem:
            wrong.append(f"seed {seed}, eval_limit {limit}: {problem}")
    assert not wrong, "\n".join(wrong)


def test_the_bound_holds_under_the_kind_profiles_approximation() -> None:
    """Under `kind-profiles` the bound over all plans is still on the exact optimum (the least
    shape bound), so it never exceeds the brute force's, stopped or not, and its gap is that
    of the incumbent and that bound."""
    wrong = []
    for seed, limit, result in _stopped_runs(frozenset({"kind-profiles"})):
        optimum = _optimum(seed)
        bound = result.lower_bound_all_plans
        if optimum is not None and bound > optimum * (1 + SLACK):
            wrong.append(f"seed {seed}, eval_limit {limit}: bound {bound} > {optimum}")
        if result.candidates and result.gap_all_plans != relative_gap(
            result.candidates[0].value, bound
        ):
            wrong.append(f"seed {seed}, eval_limit {limit}: gap {result.gap_all_plans}")
    assert not wrong, "\n".join(wrong)


def test_a_bound_that_is_the_incumbent_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation check: reporting the incumbent as the bound claims a gap of 0 where the
    search stopped short, and on some instance and limit the oracle sees the optimum below."""
    monkeypatch.setattr(Search, "searched_bound", Search.incumbent)
    runs = _stopped_runs()
    assert any(_brackets(result, _optimum(seed)) for seed, _, result in runs)


def test_a_stop_event_returns_the_best_so_far_with_its_gap() -> None:
    """Setting `SearchOptions.stop` once a first candidate exists ends the search with it,
    `interrupted`, and a bound that brackets the optimum."""
    checked = 0
    for seed in SEEDS:
        stop = Event()

        def watch(now: Snapshot, stop: Event = stop) -> None:
            if now.incumbent is not None:
                stop.set()

        model = PlanningModel(_spec(_text(seed)))
        result = search(model, SearchOptions(progress=watch, progress_every=0.0, stop=stop))
        if not stop.is_set():
            continue
        checked += 1
        assert result.interrupted and not result.complete and result.stop_reason == "interrupted"
        assert result.candidates and result.gap is not None
        assert _brackets(result, _optimum(seed)) is None
    assert checked >= 5, checked


def _free(seed: int, every: bool) -> dict[str, Any]:
    """Instance `seed` as min_cost without constraints, with every pool free (and traffic
    free too) or, with `every` False, the first pool of each zone free."""
    data = instance_data(seed)
    data.pop("constraints", None)
    data["objective"] = "min_cost"
    for zone in data["zones"]:
        for index, pool in enumerate(zone["pools"]):
            if every or index == 0:
                pool["price"] = "0 USD/h"
    if every:
        data.setdefault("network", {})["egress_price"] = {
            "inter_zone": "0 USD/GB",
            "inter_region": "0 USD/GB",
        }
    return data


def _least_cost_then_time(spec: Spec) -> tuple[float, float] | None:
    """The brute force's (cost, time) least in that order over every feasible candidate."""
    found = [
        (e.cost, e.iteration_time) for _, _, e in candidates(PlanningModel(spec)) if e.feasible
    ]
    return min(found) if found else None


@pytest.mark.parametrize("every", [True, False])
def test_min_cost_with_free_pools_is_the_fastest_of_the_cheapest(every: bool) -> None:
    """With every pool free, or one per zone: the answer is the brute force's least cost and,
    among plans of that cost, least time (the tie-break decides where cost ties at 0), and a
    free answer is complete with a gap of 0."""
    checked = free = 0
    for seed in range(16):
        spec = _spec(to_yaml(_free(seed, every)))
        assert some_pool_is_free(PlanningModel(spec))
        oracle = _least_cost_then_time(spec)
        result = search(PlanningModel(spec), SearchOptions())
        assert result.complete
        if oracle is None:
            assert not result.candidates
            continue
        best = result.candidates[0]
        assert best.objective == "min_cost"
        assert math.isclose(best.estimate.cost, oracle[0], rel_tol=SLACK, abs_tol=0.0), seed
        if oracle[0] == 0:
            assert math.isclose(best.estimate.iteration_time, oracle[1], rel_tol=SLACK), seed
            assert result.gap == 0 and result.lower_bound == 0
            free += 1
        checked += 1
    assert checked >= 8 and free >= 4, (checked, free)


def test_a_spec_without_a_free_pool_or_not_min_cost_is_searched_as_given() -> None:
    """`some_pool_is_free` needs min_cost and a pool at price 0."""
    data = _free(0, every=True)
    assert some_pool_is_free(PlanningModel(_spec(to_yaml(data))))
    assert not some_pool_is_free(
        PlanningModel(_spec(to_yaml({**data, "objective": "max_throughput"})))
    )
    for zone in data["zones"]:
        for pool in zone["pools"]:
            pool["price"] = "1 USD/h"
    assert not some_pool_is_free(PlanningModel(_spec(to_yaml(data))))


def test_relative_gap_and_its_text() -> None:
    """0 when proven (also at an incumbent of 0), None without an incumbent, else the share."""
    assert relative_gap(None, 1.0) is None
    assert relative_gap(2.0, 2.0) == 0.0 and relative_gap(0.0, 0.0) == 0.0
    assert relative_gap(4.0, 3.0) == 0.25
    assert relative_gap(4.0, 0.0) == 1.0
    assert gap_text(0.25) == "25.0%" and gap_text(0.0) == "0%" and gap_text(1e-5) == "0.001%"
    assert gap_text(None).startswith("unknown")
