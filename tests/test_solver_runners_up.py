"""Runners-up and seeds: how `plan_spec` proves plan 1 at the speed of a one-plan search and
still ranks the best RERANKED by the simulator.

Oracles: the same search without the option. A search with runners-up prunes against its
`top`-th alone, so it scores exactly the candidates the search without them scores (the same
count, the same bound) and only returns more; a search seeded with another's answer ends at
the same best. Mutation caught: runners-up counted into the pruning (`Incumbent.offer` taking
the K-th of top + runners-up) scores more candidates than the one-plan search.
"""

from __future__ import annotations

import math

import pytest
from oracles.instances import binding_instance, random_instance

from hetc.costmodel.planning import PlanningModel
from hetc.schema import Spec, check_text
from hetc.solver import planner
from hetc.solver.planner import RERANKED, plan_spec
from hetc.solver.search import SearchOptions, search

SEEDS = range(12)


def _spec(seed: int) -> Spec:
    text = binding_instance(seed) if seed % 2 == 0 else random_instance(seed)
    report = check_text(text, "case.yaml")
    assert report.spec is not None
    return report.spec


@pytest.mark.parametrize("approximations", [frozenset(), frozenset({"kind-profiles"})])
def test_runners_up_change_nothing_but_the_list(approximations: frozenset[str]) -> None:
    longer = 0
    for seed in SEEDS:
        model = PlanningModel(_spec(seed))
        alone = search(model, SearchOptions(approximations=approximations))
        kept = search(model, SearchOptions(approximations=approximations, runners_up=3))
        assert kept.evaluations == alone.evaluations, seed
        assert kept.lower_bound == alone.lower_bound and kept.complete == alone.complete
        assert kept.candidates[:1] == alone.candidates
        signatures = [c.signature(model) for c in kept.candidates]
        assert len(set(signatures)) == len(signatures) <= 4
        assert all(c.value >= kept.candidates[0].value for c in kept.candidates)
        longer += len(kept.candidates) > 1
    assert longer >= 3


def test_a_seeded_search_ends_at_the_same_best() -> None:
    for seed in SEEDS:
        model = PlanningModel(_spec(seed))
        first = search(model, SearchOptions(runners_up=3))
        top = search(model, SearchOptions(top=RERANKED))
        seeded = search(model, SearchOptions(top=RERANKED, seeds=first.candidates))
        assert [c.value for c in seeded.candidates] == [c.value for c in top.candidates], seed
        assert seeded.evaluations <= top.evaluations + len(first.candidates), seed


def test_plan_spec_states_the_one_plan_search_and_ranks_the_best_four() -> None:
    """`search` in the result is the runners-up search (its count and gap); the plans are
    the best RERANKED candidates of a search for them where that search finishes within its
    share (LIST_SHARE times the first's work, at least LIST_FLOOR), else the first search's
    own list, ranked by the simulator (a spec proven infeasible before any search has
    neither). Oracle: both searches run here with the limits the planner documents."""
    checked = 0
    for seed in SEEDS:
        spec = _spec(seed)
        result = plan_spec(spec, top=RERANKED)
        if result.infeasible is not None:
            continue
        model = PlanningModel(spec)
        one = search(model, SearchOptions(runners_up=RERANKED - 1))
        most = max(math.ceil(planner.LIST_SHARE * one.work), planner.LIST_FLOOR)
        best = search(
            PlanningModel(spec), SearchOptions(top=RERANKED, seeds=one.candidates, work_limit=most)
        )
        assert result.search.evaluations == one.evaluations, seed
        assert result.search.gap == one.gap
        kept = best.candidates if best.complete else one.candidates
        listed = sorted(c.value for c in kept)
        assert sorted(p.candidate.value for p in result.proposals) == listed, seed
        checked += bool(listed)
    assert checked >= 6
