"""The search's work units (`hetc.solver.search.work`): a budget of work stops a search at the
same step every time, a larger budget never answers worse, and the exact search, whose warm
start is the `kind-profiles` search on the same tally, never answers worse than that search
under the same budget.

Oracles: the weights applied by hand; the same search run again; the same search with a
smaller budget; the `kind-profiles` search alone. Mutation check (done by hand): the greedy
seed run again in the exact search before its warm start (as it was) fails
`test_the_exact_search_is_never_worse_than_kind_profiles_under_one_budget` on the specs of
seeds 0 and 4: the warm start then has less of the budget than the search it stands for."""

from __future__ import annotations

import random

import pytest
from oracles.instances import random_instance

from hetc.costmodel.planning import PlanningModel
from hetc.schema import check_text
from hetc.solver.search import SearchOptions, search
from hetc.solver.search.work import SLOTS, WEIGHTS, units

KIND_PROFILES = frozenset({"kind-profiles"})


def _model(seed: int) -> PlanningModel:
    checked = check_text(random_instance(seed), "work.yaml")
    assert checked.spec is not None, checked.diagnostics
    return PlanningModel(checked.spec)


def test_units_weigh_each_slot_by_its_weight() -> None:
    """By hand: a tally of one step of each kind weighs the sum of the weights; of k steps of
    one kind, k times its weight; there is a weight per slot."""
    assert len(WEIGHTS) == SLOTS
    assert units([1] * SLOTS) == sum(WEIGHTS)
    for slot in range(SLOTS):
        tally = [0] * SLOTS
        tally[slot] = 7
        assert units(tally) == 7 * WEIGHTS[slot]


@pytest.mark.parametrize("seed", range(6))
def test_a_work_limit_stops_at_the_same_step_every_time(seed: int) -> None:
    """Two runs under the same work limit end with the same candidates, evaluations, work and
    stop; a stopped run has spent more than its limit (it stops at the first check past
    it) and says the work stopped it."""
    model = _model(seed)
    full = search(model, SearchOptions(top=3))
    limit = max(1, full.work // 3)
    first = search(PlanningModel(model.spec), SearchOptions(top=3, work_limit=limit))
    again = search(PlanningModel(model.spec), SearchOptions(top=3, work_limit=limit))
    assert [c.key() for c in first.candidates] == [c.key() for c in again.candidates]
    assert (first.evaluations, first.work, first.stop_reason) == (
        again.evaluations,
        again.work,
        again.stop_reason,
    )
    if not first.complete:
        assert first.stopped_by == "work" and first.work > limit


@pytest.mark.parametrize("seed", range(6))
def test_a_larger_budget_never_answers_worse(seed: int) -> None:
    """The search takes the same steps whatever its budget and the budget only says where it
    stops, so the best value found never rises with the budget, and the budget of a complete
    search's work answers as the unlimited search does."""
    model = _model(seed)
    full = search(model, SearchOptions(approximations=KIND_PROFILES))
    values = []
    for limit in (full.work // 16, full.work // 4, full.work // 2, full.work):
        found = search(
            PlanningModel(model.spec),
            SearchOptions(approximations=KIND_PROFILES, work_limit=limit),
        )
        values.append(found.candidates[0].value if found.candidates else float("inf"))
    assert values == sorted(values, reverse=True)
    assert values[-1] == (full.candidates[0].value if full.candidates else float("inf"))


@pytest.mark.parametrize("seed", range(8))
def test_the_exact_search_is_never_worse_than_kind_profiles_under_one_budget(seed: int) -> None:
    """At every budget, the exact search's best is at most the `kind-profiles` search's best
    under the same work limit: its warm start is that very search, on the same tally."""
    model = _model(seed)
    rng = random.Random(seed)
    for limit in [*sorted(rng.sample(range(2_000, 400_000), 4)), 30_000]:
        profiles = search(
            PlanningModel(model.spec),
            SearchOptions(approximations=KIND_PROFILES, work_limit=limit),
        )
        exact = search(PlanningModel(model.spec), SearchOptions(work_limit=limit))
        if profiles.candidates:
            assert exact.candidates, (seed, limit)
            assert exact.candidates[0].value <= profiles.candidates[0].value, (seed, limit)
