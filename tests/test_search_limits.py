"""The search honours its limits on every spec: its caches stay under their caps without
changing the answer, a stage with more kind sets than memory allows is given up and reported
(never listed for minutes), and on the bench family's specs that once overran a time limit
of 30 s (a stage of 2^28 kind sets listed without a check of the limits), a limit of work
now ends the search with a candidate and a stop reason, within twice the limit.

Checks that these tests can fail: with `kind_sets` as it was (no check of the limits, no
`ROW_CAP`), spec 20 ran far past its limit, which `test_family_specs_stop_at_their_work_limit`
now measures in work; removing the clear of the `_sets` cache
fails `test_kind_set_cache_stays_under_its_cap`, and removing the memo's fails
`test_a_capped_dominance_memo_keeps_the_search_exact`.
"""

from __future__ import annotations

import math
import random
import sys
from functools import cache
from pathlib import Path

import pytest
from oracles.instances import random_instance

from hetc.costmodel.planning import PlanningModel, ReplicaKind
from hetc.schema import Spec, check_text
from hetc.solver.search import SearchOptions, SearchResult
from hetc.solver.search import exact as exact_module
from hetc.solver.search.driver import Search

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from approximations import FAMILY_SEED  # noqa: E402
from spec_family import family_spec  # noqa: E402

OVERRUNNING = (6, 20, 25, 39)
"""Specs of `bench/approximations.py --family 40` whose exact search overran its limit."""

SEED = 3
"""A small random instance whose exact search lists mixed kind sets and dominates prefixes."""


@cache
def _family(count: int) -> tuple[Spec, ...]:
    rng = random.Random(FAMILY_SEED)
    return tuple(family_spec(rng) for _ in range(count))


def _small() -> PlanningModel:
    result = check_text(random_instance(SEED), "limits.yaml")
    assert result.spec is not None and not result.errors, result.diagnostics
    return PlanningModel(result.spec)


def _exact(model: PlanningModel) -> tuple[Search, SearchResult]:
    run = Search(model, SearchOptions())
    return run, run.run()


def test_kind_set_cache_stays_under_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a tiny cap the kind-set cache is emptied as it fills, holds at most the cap plus
    one row, and the search still finds the uncapped optimum."""
    model = _small()
    _, free = _exact(model)
    rows: list[int] = []
    held: list[int] = []
    listed = exact_module.Exact.kind_sets

    def spy(
        self: exact_module.Exact, mbs: int, dp: int, flight: int, first: int, end: int
    ) -> list[tuple[float, tuple[int, ...]]]:
        sets = listed(self, mbs, dp, flight, first, end)
        rows.append(len(sets))
        held.append(sum(len(v) for v in self._sets.values()))
        return sets

    monkeypatch.setattr(exact_module, "SETS_CAP", 16)
    monkeypatch.setattr(exact_module.Exact, "kind_sets", spy)
    _, capped = _exact(model)
    assert free.candidates and capped.candidates
    assert capped.candidates[0].key() == free.candidates[0].key()
    assert max(held) > 0
    assert all(h <= 16 + r for h, r in zip(held, rows, strict=True))
    assert sum(rows) > 16, "the cap was never reached: pick a larger instance"


def test_a_capped_dominance_memo_keeps_the_search_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forgetting prefixes only loses pruning: with a memo cap of 3 the search holds at most
    3 prefixes after each and returns the same best candidate as without a cap."""
    model = _small()
    _, free = _exact(model)
    monkeypatch.setattr(exact_module, "MEMO_CAP", 3)
    sizes: list[int] = []
    dominated = exact_module.Exact._dominated

    def spy(self: exact_module.Exact, key: tuple[object, ...], values: tuple[float, ...]) -> bool:
        answer = dominated(self, key, values)
        sizes.append(sum(len(v) for v in self._memo.values()))
        return answer

    monkeypatch.setattr(exact_module.Exact, "_dominated", spy)
    _, capped = _exact(model)
    assert sizes and max(sizes) <= 3
    assert capped.candidates[0].key() == free.candidates[0].key()
    assert capped.complete


def test_a_stage_with_too_many_kind_sets_is_given_up_and_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past `ROW_CAP` kind sets in one stage the shape is given up: the search says so, is
    incomplete, and its lower bound stays at or below the true optimum."""
    model = _small()
    _, free = _exact(model)
    monkeypatch.setattr(exact_module, "CHECK_EVERY", 1)
    monkeypatch.setattr(exact_module, "ROW_CAP", 1)
    run, capped = _exact(model)
    assert run.unfinished_shapes > 0
    assert not capped.complete
    assert capped.stop_reason.startswith("the shape solver left ")
    assert capped.stop_reason.endswith(" unfinished")
    assert capped.lower_bound <= free.candidates[0].value * (1 + 1e-9)
    assert run._open == []


@pytest.mark.slow
@pytest.mark.parametrize("index", OVERRUNNING)
def test_family_specs_stop_at_their_work_limit(index: int) -> None:
    """A limit of 20,000,000 units (about 2 s) ends the exact search on each spec that once
    overran its limit with a candidate or a stop reason, and within twice the limit: no step
    between two checks of the limits (a stage's kind sets, a pair table's row) is larger
    than the limit itself. Counted in work, so no machine's load decides it."""
    model = PlanningModel(_family(max(OVERRUNNING) + 1)[index])
    limit = 20_000_000
    result = Search(model, SearchOptions(work_limit=limit)).run()
    assert not result.complete and result.stopped_by == "work"
    assert result.stop_reason
    assert result.candidates or math.isfinite(result.lower_bound)
    assert limit < result.work < 2 * limit


def test_the_greedy_seed_offers_a_real_one_kind_plan_before_any_bound() -> None:
    """`greedy_seed` alone finds a feasible candidate: one kind on every stage of an even
    split, at the fewest stages that hold the model, scored by the planning model itself;
    the full search's best is never worse (the seed only tightens the bound)."""
    model = _small()
    seeded = Search(model, SearchOptions())
    seeded.greedy_seed()
    assert seeded.ranked
    seed = seeded.ranked[0]
    assert seed.estimate.feasible
    assert all(len(stage) == 1 for stage in seed.assignment)
    assert len({stage[0][0] for stage in seed.assignment}) == 1
    cut = seed.shape.boundaries
    stages = len(cut) - 1
    assert cut == tuple(model.blocks * i // stages for i in range(stages + 1))
    assert model.estimate(seed.shape, seed.assignment) == seed.estimate
    _, full = _exact(model)
    assert full.candidates[0].value <= seed.value


@pytest.mark.slow
def test_internet_scale_has_a_candidate_within_its_limit() -> None:
    """On examples/internet-scale.yaml (10,000 GPUs) a search of 40,000,000 units (about 4 s)
    under `kind-profiles`, with no grace, returns a plan (before the greedy seed it had none
    after 8 s)."""
    checked = check_text(
        (ROOT / "examples" / "internet-scale.yaml").read_text(encoding="utf-8"), "i.yaml"
    )
    assert checked.spec is not None
    model = PlanningModel(checked.spec)
    result = Search(
        model, SearchOptions(approximations=frozenset({"kind-profiles"}), work_limit=40_000_000)
    ).run()
    assert result.candidates and result.candidates[0].estimate.feasible


def test_the_greedy_seed_scores_one_kind_per_class_of_like_pools() -> None:
    """`seed_kinds` keeps one kind per (TP, device, quota, node size, price, NIC), however
    many zones repeat it (by hand: the keys of every kind), and every pool `must_use` names:
    on bench/zones.py's spec the seed's kinds are as many at 40 zones as at 10."""
    sys.path.insert(0, str(ROOT / "bench"))
    from zones import zones_spec

    def key(model: PlanningModel, kind: ReplicaKind) -> tuple[object, ...]:
        pool = model.pools[kind.pool].pool
        node = (pool.quota, pool.gpus_per_node, pool.price, pool.nic_bandwidth)
        return (kind.tp, pool.device, *node)

    sizes = []
    for zones in (10, 40):
        checked = check_text(zones_spec(zones), "zones.yaml")
        assert checked.spec is not None
        model = PlanningModel(checked.spec)
        kinds = Search(model, SearchOptions()).seed_kinds()
        keys = [key(model, k) for k in kinds]
        assert len(set(keys)) == len(keys)
        assert set(keys) == {key(model, k) for k in model.kinds}
        sizes.append(len(kinds))
        last = model.pools[-1].index
        forced = Search(model, SearchOptions(must_use=frozenset({last}))).seed_kinds()
        assert {k.pool for k in model.kinds if k.pool == last} <= {k.pool for k in forced}
    assert sizes[0] == sizes[1] < len(model.kinds)
