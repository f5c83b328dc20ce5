"""The search's certificate: wherever it stops (an evaluation limit at many points, a stop
event), its lower bound is at most the brute-force optimum and its incumbent at least it,
and a complete search proves a gap of 0; min_cost over free devices is the fastest plan.

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
from oracles.brute_force import brute_force
from oracles.instances import binding_instance, instance_data, random_instance, to_yaml

import hetc.solver.search as search_module
from hetc.costmodel.planning import PlanningModel
from hetc.schema import Spec, check_text
from hetc.solver.certificate import Snapshot, every_plan_is_free, gap_text, relative_gap
from hetc.solver.search import SearchOptions, SearchResult, search

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
    approximations: frozenset[str] = frozenset(),
) -> list[tuple[int, int, SearchResult]]:
    """(seed, limit, result) for every instance stopped at every limit of LIMITS."""
    runs = []
    for seed in SEEDS:
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


def test_the_bound_holds_under_the_kind_profiles_approximation() -> None:
    """Under `kind-profiles` the bound is still on the exact optimum (the least shape bound),
    so it never exceeds the brute force's, stopped or not."""
    wrong = []
    for seed, limit, result in _stopped_runs(frozenset({"kind-profiles"})):
        optimum = _optimum(seed)
        if optimum is not None and result.lower_bound > optimum * (1 + SLACK):
            wrong.append(f"seed {seed}, eval_limit {limit}: bound {result.lower_bound} > {optimum}")
    assert not wrong, "\n".join(wrong)


def test_a_bound_that_is_the_incumbent_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation check: reporting the incumbent as the bound claims a gap of 0 where the
    search stopped short, and on some instance and limit the oracle sees the optimum below."""
    monkeypatch.setattr(search_module._Search, "lower_bound", search_module._Search.incumbent)
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


def _free(seed: int) -> dict[str, Any]:
    """Instance `seed` as min_cost on free devices, billed traffic free too, no constraints."""
    data = instance_data(seed)
    data.pop("constraints", None)
    data["objective"] = "min_cost"
    for zone in data["zones"]:
        for pool in zone["pools"]:
            pool["price"] = "0 USD/h"
    data.setdefault("network", {})["egress_price"] = {
        "inter_zone": "0 USD/GB",
        "inter_region": "0 USD/GB",
    }
    return data


def test_min_cost_on_free_devices_is_the_fastest_free_plan() -> None:
    """Every plan free: the answer costs 0, is the brute force's fastest plan (the tie-break
    decides alone), and the search is complete with a gap of 0."""
    checked = 0
    for seed in range(12):
        data = _free(seed)
        spec = _spec(to_yaml(data))
        model = PlanningModel(spec)
        assert every_plan_is_free(model)
        fastest = brute_force(_spec(to_yaml({**data, "objective": "max_throughput"})))
        result = search(model, SearchOptions())
        if fastest is None:
            assert not result.candidates
            continue
        best = result.candidates[0]
        assert best.objective == "min_cost" and best.value == 0
        assert math.isclose(best.estimate.iteration_time, fastest[0], rel_tol=SLACK)
        assert result.complete and result.gap == 0 and result.lower_bound == 0
        checked += 1
    assert checked >= 6


def test_a_priced_pool_or_billed_traffic_is_not_free() -> None:
    """`every_plan_is_free` needs both: a price on one pool, or egress between two zones."""
    data = _free(0)
    data["zones"][0]["pools"][0]["price"] = "1 USD/h"
    assert not every_plan_is_free(PlanningModel(_spec(to_yaml(data))))
    multi = next(s for s in range(40) if len(_free(s)["zones"]) > 1)
    data = _free(multi)
    data["network"]["egress_price"] = {"inter_zone": "0.01 USD/GB", "inter_region": "0.01 USD/GB"}
    assert not every_plan_is_free(PlanningModel(_spec(to_yaml(data))))


def test_relative_gap_and_its_text() -> None:
    """0 when proven (also at an incumbent of 0), None without an incumbent, else the share."""
    assert relative_gap(None, 1.0) is None
    assert relative_gap(2.0, 2.0) == 0.0 and relative_gap(0.0, 0.0) == 0.0
    assert relative_gap(4.0, 3.0) == 0.25
    assert relative_gap(4.0, 0.0) == 1.0
    assert gap_text(0.25) == "25.0%" and gap_text(0.0) == "0%" and gap_text(1e-5) == "0.001%"
    assert gap_text(None).startswith("unknown")
