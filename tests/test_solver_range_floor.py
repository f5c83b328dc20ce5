"""`Profiles.range_floor` bounds a range of D of one (m, P) over its profiles.

The driver asks it for a range of D whose pipelines all run the same number of microbatches
and drops the range when it exceeds the incumbent, so it must be at most the objective of
the best profile of every D of the range that beats the incumbent: for time and for cost,
with and without a budget (for time). The oracle is the `kind-profiles` space
searched with nothing pruned, shape by shape (`ExhaustiveProfiles`); the ranges are the runs
of D with equal ceil(T / D), worked out here from T. Mutations caught: the split's memory
checked at the range's first D (ZeRO shards less there), the quotas, the rental rate or the
ring across zones read at its last D, one pass too many (ceil(T / D) taken for m - 1), the
profiles within 0.1% of the incumbent dropped.
"""

from __future__ import annotations

import math

import pytest
from oracles.instances import binding_instance, random_instance
from oracles.profiles_space import ExhaustiveProfiles

from hetc.costmodel.planning import PlanningModel
from hetc.schema import Spec, check_text
from hetc.solver.search import SearchOptions, SearchResult, driver
from hetc.solver.search.driver import Search

PROFILES = frozenset({"kind-profiles"})


class _Under(Search):
    """The search with its incumbent held at `cut`."""

    def __init__(self, model: PlanningModel, options: SearchOptions, cut: float) -> None:
        super().__init__(model, options)
        self.cut = cut

    def bound(self) -> float:
        return self.cut


def _spec(text: str) -> Spec:
    report = check_text(text, "case.yaml")
    assert report.spec is not None, report
    return report.spec


def _cases() -> list[Spec]:
    return [
        _spec(binding_instance(seed) if seed % 2 == 0 else random_instance(seed))
        for seed in range(80)
    ]


def _runs(total: int, cap: int) -> list[tuple[int, int]]:
    """The runs of D in 1..cap with equal ceil(total / D), of two D or more."""
    runs: dict[int, list[int]] = {}
    for dp in range(1, cap + 1):
        runs.setdefault(-(-total // dp), []).append(dp)
    return [(min(r), max(r)) for r in runs.values() if len(r) > 1]


@pytest.mark.slow
def test_the_range_floor_is_below_every_profile_of_the_range_that_beats_the_incumbent() -> None:
    checked = pruned = 0
    objectives = set()
    for spec in _cases():
        model = PlanningModel(spec)
        exhaustive = ExhaustiveProfiles(model, SearchOptions(approximations=PROFILES))
        best: dict[tuple[int, int, int], float] = {}
        groups = [(mbs, stages) for _, mbs, stages in exhaustive.shape_groups()]
        for mbs, stages in groups:
            for dp in range(1, exhaustive.dp_cap(mbs, stages) + 1):
                found = exhaustive.shape(mbs, stages, dp)
                if found is not None:
                    best[mbs, stages, dp] = found
        if not best:
            continue
        values = sorted(best.values())
        for quantile in (0.1, 0.5):
            cut = values[int(len(values) * quantile)]
            under = _Under(model, SearchOptions(approximations=PROFILES), cut)
            for mbs, stages in groups:
                total = model.batch // mbs
                for first, last in _runs(total, under.dp_cap(mbs, stages)):
                    floor = under.range_floor(mbs, stages, first, last)
                    inside = [
                        best[mbs, stages, dp]
                        for dp in range(first, last + 1)
                        if (mbs, stages, dp) in best
                    ]
                    least = min(inside, default=math.inf)
                    checked += 1
                    pruned += floor > cut
                    if least <= cut:
                        assert floor <= least * (1 + 1e-9), (mbs, stages, first, last)
                    objectives.add(
                        (spec.objective, spec.constraints.max_cost_per_iteration is None)
                    )
    assert checked >= 200 and pruned >= 20, (checked, pruned)
    assert {("max_throughput", True), ("max_throughput", False), ("min_cost", True)} <= objectives


def test_waiting_for_the_pair_tables_changes_nothing_but_the_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With `EAGER_PAIRS` at 0 a range's floor waits for a shape of its microbatch size to
    build the pair table (`has_pair_rows`, false before, true after): the search ends at
    the same best, complete."""
    checked = 0
    for spec in _cases()[:30]:
        model = PlanningModel(spec)
        eager = search_profiles(model)
        monkeypatch.setattr(driver, "EAGER_PAIRS", 0)
        waiting = search_profiles(model)
        monkeypatch.undo()
        assert [c.value for c in waiting.candidates] == [c.value for c in eager.candidates]
        assert waiting.complete and eager.complete
        checked += bool(eager.candidates)
    assert checked >= 10
    probe = Search(PlanningModel(_cases()[1]), SearchOptions(approximations=PROFILES))
    mbs = probe.model.microbatch_sizes()[0]
    assert not probe.has_pair_rows(mbs)
    probe.pair_rows(mbs)
    assert probe.has_pair_rows(mbs)


def search_profiles(model: PlanningModel) -> SearchResult:
    """The `kind-profiles` search of the model, with no limit."""
    return Search(model, SearchOptions(approximations=PROFILES)).run()
