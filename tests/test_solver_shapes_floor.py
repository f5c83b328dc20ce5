"""`Bounds.shapes_floor`, the bound over all plans when an approximation searched the shapes:
the least shape bound of every (m, P, D), found best first over ranges of D.

Oracles: the least of `shape_bounds` over every shape, listed one by one (what the best-first
order must find without listing them), and the brute force's optimum over every candidate
(tests/oracles/brute_force.py), which no lower bound may exceed. Mutation check (in this
file): range bounds taken at the first D of each range only (too high for the larger D) lift
the floor above the least shape bound, and the listing oracle catches it.
"""

from __future__ import annotations

import math
from functools import cache

import pytest
from oracles.brute_force import brute_force
from oracles.instances import binding_instance, random_instance

from hetc.costmodel.planning import PlanningModel
from hetc.schema import Spec, check_text
from hetc.solver.search import SearchOptions
from hetc.solver.search.bounds import Bounds
from hetc.solver.search.driver import Search

SEEDS = range(24)
SLACK = 1e-9


@cache
def _spec(seed: int) -> Spec:
    text = binding_instance(seed) if seed % 2 == 0 else random_instance(seed)
    result = check_text(text, "floor.yaml")
    assert result.spec is not None and not result.errors, result.diagnostics
    return result.spec


def _search(seed: int) -> Search:
    return Search(
        PlanningModel(_spec(seed)), SearchOptions(approximations=frozenset({"kind-profiles"}))
    )


def _listed_least(search: Search) -> float:
    """The least shape bound, every shape listed (D up to the stage cover's cap)."""
    least = math.inf
    model = search.model
    for mbs in model.microbatch_sizes():
        for stages in range(1, model.blocks + 1):
            last = search.cover.most_pipelines(mbs, stages, search.dp_cap(mbs, stages))
            if last >= 1:
                least = min(least, *search.shape_bounds(mbs, stages, last, 1))
    return least


def _floors() -> list[tuple[int, float, float]]:
    """(seed, shapes_floor, least listed shape bound) on every instance."""
    return [(seed, _search(seed).shapes_floor(), _listed_least(_search(seed))) for seed in SEEDS]


def test_the_floor_is_the_least_shape_bound_and_below_the_optimum() -> None:
    """Equal to the least bound of every shape listed one by one, at least the least group
    bound it refines, and at most the brute force's optimum; above that group bound on some
    instances (it refines something)."""
    lifted = 0
    for seed, floor, listed in _floors():
        search = _search(seed)
        groups = min((g[0] for g in search.shape_groups()), default=math.inf)
        assert math.isclose(floor, listed, rel_tol=SLACK) or floor == listed, seed
        best = brute_force(_spec(seed))
        if best is not None:
            assert floor <= best[0] * (1 + SLACK), seed
            assert floor >= groups * (1 - SLACK), seed
            lifted += floor > groups * (1 + SLACK)
    assert lifted >= 5, lifted


def test_a_floor_stopped_early_is_still_below_it() -> None:
    """After a few pops the least entry left is returned: never above the full floor."""
    for seed in SEEDS[:8]:
        full = _search(seed).shapes_floor()
        for pops in (1, 2, 5):
            assert _search(seed).shapes_floor(pops) <= full * (1 + SLACK), (seed, pops)


def test_range_bounds_at_the_first_d_only_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation check: a range bound that looks at its first D only overstates the larger D,
    and the floor then exceeds the least listed shape bound somewhere."""
    original = Bounds.range_bound

    def first_only(self: Bounds, mbs: int, stages: int, first: int, last: int) -> float:
        return original(self, mbs, stages, first, first)

    monkeypatch.setattr(Bounds, "range_bound", first_only)
    assert any(floor > listed * (1 + SLACK) for _, floor, listed in _floors())
