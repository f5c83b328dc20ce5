"""The certificate within the approximations (`SearchResult.gap`) and the exact search's
refined bound inside a shape.

Oracles: for `one-region-stage`, tests/oracles/brute_force.py restricted to candidates whose
every stage runs in one region (the approximation's space, written from its definition);
for `kind-profiles`, whose space is what its enumerator ranges over, the same search run to
the end (deterministic, so a stopped run is a prefix of it); for both, the unrestricted brute
force for the bound over all plans. Mutation checks (in this file): a bound within the
approximations that reports the incumbent, and a refined shape bound that forgets the prefix
being expanded, are each caught.
"""

from __future__ import annotations

import math
import re
from functools import cache
from pathlib import Path

import pytest
from oracles.brute_force import candidates
from oracles.instances import binding_instance, random_instance

from hetc.costmodel.planning import PlanningModel
from hetc.schema import Spec, check_text
from hetc.solver.certificate import MEASURED_GAPS, declared_text, gap_text, relative_gap
from hetc.solver.search import SearchOptions, SearchResult, search
from hetc.solver.search.driver import Search
from hetc.solver.search.exact import Exact
from hetc.solver.search.incumbent import Candidate

SEEDS = range(24)
LIMITS = (1, 2, 3, 5, 8, 13, 21, 34, 55, 89)
SLACK = 1e-9
KIND_PROFILES = frozenset({"kind-profiles"})
ONE_REGION = frozenset({"one-region-stage"})


@cache
def _spec(seed: int) -> Spec:
    text = binding_instance(seed) if seed % 2 == 0 else random_instance(seed)
    result = check_text(text, "within.yaml")
    assert result.spec is not None and not result.errors, result.diagnostics
    return result.spec


@cache
def _one_region_optimum(seed: int) -> tuple[float | None, float | None, bool]:
    """(least objective over all feasible candidates, least over those whose every stage
    runs within one region, whether some feasible candidate has a stage across regions), by
    brute force."""
    model = PlanningModel(_spec(seed))
    throughput = model.spec.objective == "max_throughput"
    every: float | None = None
    within: float | None = None
    crossing = False
    for _, assignment, estimate in candidates(model):
        if not estimate.feasible:
            continue
        value = estimate.iteration_time if throughput else estimate.cost
        every = value if every is None else min(every, value)
        regions = [
            {model.pools[model.kinds[k].pool].zone.region for k, n in stage if n}
            for stage in assignment
        ]
        if all(len(r) == 1 for r in regions):
            within = value if within is None else min(within, value)
        else:
            crossing = True
    return every, within, crossing


@cache
def _complete(seed: int, approximations: frozenset[str]) -> float | None:
    """The best value of the search run to the end under `approximations`."""
    found = search(PlanningModel(_spec(seed)), SearchOptions(approximations=approximations))
    assert found.complete
    return found.candidates[0].value if found.candidates else None


def _wrong(result: SearchResult, within: float | None, every: float | None) -> str | None:
    """What is wrong with `result`'s two certificates against the two optima, or None."""
    incumbent = result.candidates[0].value if result.candidates else None
    if within is None:
        return None if incumbent is None else f"found {incumbent} outside the space"
    if result.lower_bound > within * (1 + SLACK):
        return f"bound {result.lower_bound} above the best within, {within}"
    if every is not None and result.lower_bound_all_plans > every * (1 + SLACK):
        return f"bound over all plans {result.lower_bound_all_plans} above the optimum {every}"
    if incumbent is not None and incumbent < within * (1 - SLACK):
        return f"incumbent {incumbent} below the best within, {within}"
    if result.complete and result.gap != 0:
        return f"complete but gap {result.gap}"
    if incumbent is not None and result.gap != relative_gap(incumbent, result.lower_bound):
        return f"gap {result.gap} is not that of {incumbent} and {result.lower_bound}"
    return None


def _runs(approximations: frozenset[str]) -> list[tuple[int, int, SearchResult]]:
    runs = []
    for seed in SEEDS:
        model = PlanningModel(_spec(seed))
        for limit in LIMITS:
            options = SearchOptions(eval_limit=limit, approximations=approximations)
            runs.append((seed, limit, search(model, options)))
    return runs


def _kind_profiles_problems() -> tuple[list[str], int]:
    """Problems of every stopped `kind-profiles` run, and how many runs prove a bound within
    the approximation above the one over all plans (the certificate is not the old one)."""
    wrong, tighter = [], 0
    for seed, limit, result in _runs(KIND_PROFILES):
        every, _, _ = _one_region_optimum(seed)
        problem = _wrong(result, _complete(seed, KIND_PROFILES), every)
        if problem:
            wrong.append(f"seed {seed}, eval_limit {limit}: {problem}")
        tighter += result.lower_bound > result.lower_bound_all_plans
    return wrong, tighter


def test_the_bound_within_kind_profiles_brackets_its_best_plan_wherever_it_stops() -> None:
    """bound within <= the complete `kind-profiles` answer <= incumbent at every evaluation
    limit, the bound over all plans at most the brute-force optimum, and on some runs the
    first is the tighter (a certificate equal to the old one would prove nothing new)."""
    wrong, tighter = _kind_profiles_problems()
    assert not wrong, "\n".join(wrong)
    assert tighter >= 10, tighter


def test_the_bound_within_one_region_stages_brackets_the_restricted_brute_force() -> None:
    """bound within <= the brute force over one-region stages <= incumbent, at every limit;
    some instances have feasible stages across regions, which the approximation leaves out
    (on these instances they are never the optimum, so the two optima agree)."""
    wrong, narrowed = [], 0
    for seed, limit, result in _runs(ONE_REGION):
        every, within, crossing = _one_region_optimum(seed)
        narrowed += crossing
        problem = _wrong(result, within, every)
        if problem:
            wrong.append(f"seed {seed}, eval_limit {limit}: {problem}")
    assert not wrong, "\n".join(wrong)
    assert narrowed >= 1, narrowed


def test_a_bound_within_that_is_the_incumbent_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation check: reporting the incumbent as the bound within the approximation claims
    a gap of 0 where the search stopped short; the complete run's answer shows it."""
    monkeypatch.setattr(Search, "searched_bound", Search.incumbent)
    wrong, _ = _kind_profiles_problems()
    assert wrong


class _Logged(Search):
    """The search, logging every candidate offered: (leaves scored so far, the how-many-th
    shape visit it came from, its value)."""

    visits = 0
    log: list[tuple[int, int, float]]

    def shape(self, mbs: int, stages: int, dp: int) -> float | None:
        self.visits += 1
        return super().shape(mbs, stages, dp)

    def offer(self, candidate: Candidate) -> None:
        self.log.append((self.evaluations, self.visits, candidate.value))
        super().offer(candidate)


def _refinement_problems() -> tuple[list[str], int]:
    """For exact runs stopped inside a shape: the refined floor against every candidate the
    same search, run to the end, scores later in that shape visit (the search is
    deterministic, so those lie in the part the stopped run had left); and how many floors
    rose above the shape's own bound."""
    wrong, refined = [], 0
    for seed in SEEDS:
        model = PlanningModel(_spec(seed))
        full = _Logged(model, SearchOptions())
        full.log = []
        full.run()
        for limit in LIMITS:
            stopped = _Logged(model, SearchOptions(eval_limit=limit))
            stopped.log = []
            if stopped.run().complete or math.isinf(stopped._searching):
                continue
            floor = stopped._shape_floor()
            refined += floor > stopped._searching
            later = [v for at, visit, v in full.log if at > limit and visit == stopped.visits]
            if later and floor > min(later) * (1 + SLACK):
                wrong.append(f"seed {seed}, eval_limit {limit}: floor {floor} > {min(later)}")
    return wrong, refined


def test_the_refined_shape_bound_is_below_what_the_shape_had_left() -> None:
    """The exact search's bound inside a shape (its open prefixes) is at most every candidate
    the shape still held where it stopped, and rises above the shape's bound on some runs."""
    wrong, refined = _refinement_problems()
    assert not wrong, "\n".join(wrong)
    assert refined >= 5, refined


def test_a_floor_that_forgets_the_prefix_being_expanded_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mutation check: leaving out the deepest level's prefix being expanded (whose subtree
    the stop left unentered) claims a floor above candidates the shape still held."""

    def forgetful(self: Exact) -> float:
        if not self._open:
            return self._searching
        return max(self._searching, min(level.after() for level in self._open))

    monkeypatch.setattr(Exact, "_shape_floor", forgetful)
    wrong, _ = _refinement_problems()
    assert wrong


def test_the_declared_measured_gap_is_the_one_docs_planner_md_reports() -> None:
    """`certificate.MEASURED_GAPS` (what `hetc plan` prints beside the approximation) and the
    measurement section of docs/planner.md state the same numbers, and the declaration
    carries the p95 of that constant."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "planner.md").read_text()
    found = re.search(
        r"`kind-profiles` from exact on bench/spec_family: p50 (\S+), p95 (\S+), worst (\S+);"
        r" (\d+) specs of (\d+)",
        " ".join(text.split()),
    )
    assert found, "docs/planner.md lacks the measured kind-profiles gap line"
    measured = MEASURED_GAPS["kind-profiles"]
    assert found.groups() == (
        gap_text(measured.p50),
        gap_text(measured.p95),
        gap_text(measured.worst),
        str(measured.finished),
        str(measured.specs),
    )
    assert declared_text(KIND_PROFILES) == (
        f"kind-profiles (on bench/spec_family: p95 {gap_text(measured.p95)} from exact)"
    )
    assert declared_text(frozenset()) == "none"
