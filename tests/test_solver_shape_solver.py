"""The shape solvers behind the driver (`hetc.solver.search.shape_solver`): the exact branch
and bound, the CP-SAT model per stage split and the `kind-profiles` enumerator, each searching
the shapes the driver hands it.

Oracles: `exact` and `cpsat` share the driver's order and bounds but nothing of how a shape is
searched (stage branch and bound with a count programme, against one CP-SAT model per split),
so their optima agree only if both are right; `exact` is itself checked against brute force
in tests/test_solver_exact.py. `kind-profiles` searches a subset of the same space, so it can
never beat `exact`.
"""

from __future__ import annotations

from typing import ClassVar

import pytest
from oracles.instances import binding_instance, random_instance
from test_solver_cpsat import SEARCH_SPECS

from hetc.costmodel.planning import PlanningModel
from hetc.schema import check_text
from hetc.solver.search import SearchOptions, SearchResult, search
from hetc.solver.search import driver as driver_module
from hetc.solver.search.shape_solver import (
    SHAPE_SOLVERS,
    ExactSolver,
    ShapeSolver,
    default_solver,
    shape_solver,
)
from hetc.solver.search.stripes import Stripes

RELATIVE = 1e-9


def _best(result: SearchResult) -> float | None:
    return result.candidates[0].value if result.candidates else None


def _three(model: PlanningModel) -> tuple[SearchResult, SearchResult, SearchResult]:
    exact = search(model, SearchOptions(shape_solver="exact"))
    cpsat = search(model, SearchOptions(shape_solver="cpsat"))
    profiles = search(model, SearchOptions(approximations=frozenset({"kind-profiles"})))
    return exact, cpsat, profiles


def _assert_agree(exact: SearchResult, cpsat: SearchResult, profiles: SearchResult) -> None:
    assert exact.complete and cpsat.complete and profiles.complete
    found, crossed, approximate = _best(exact), _best(cpsat), _best(profiles)
    if found is None:
        assert crossed is None and approximate is None
        return
    assert crossed == pytest.approx(found, rel=RELATIVE, abs=0.0)
    assert approximate is None or approximate >= found * (1 - RELATIVE)


@pytest.mark.parametrize("name", sorted(SEARCH_SPECS))
def test_three_solvers_agree_on_the_cpsat_specs(name: str) -> None:
    """exact and cpsat reach the same optimum; kind-profiles never beats it."""
    _assert_agree(*_three(SEARCH_SPECS[name]()))


@pytest.mark.parametrize("seed", range(0, 24, 3))
def test_three_solvers_agree_on_random_instances(seed: int) -> None:
    """The same agreement on the random instances of the exactness test (even seeds with a
    constraint that binds)."""
    text = binding_instance(seed) if seed % 2 == 0 else random_instance(seed)
    checked = check_text(text, "oracle.yaml")
    assert checked.spec is not None
    _assert_agree(*_three(PlanningModel(checked.spec)))


def test_the_approximations_pick_the_solver() -> None:
    """kind-profiles picks its enumerator, anything else the exact search; naming the default
    changes nothing (same evaluations, same plans)."""
    assert default_solver(frozenset({"kind-profiles", "dp-order"})) == "kind-profiles"
    assert default_solver(frozenset({"dp-order"})) == "exact"
    assert isinstance(shape_solver(None, frozenset()), ExactSolver)
    model = SEARCH_SPECS["tradeoff-budget"]()
    for approximations, name in ((frozenset(), "exact"), (frozenset({"kind-profiles"}), None)):
        plain = search(model, SearchOptions(approximations=approximations))
        named = search(
            model,
            SearchOptions(
                approximations=approximations, shape_solver=name or default_solver(approximations)
            ),
        )
        assert (named.evaluations, named.candidates) == (plain.evaluations, plain.candidates)


def test_unknown_solver_is_refused() -> None:
    """A name outside `SHAPE_SOLVERS` is refused with the names there are."""
    assert sorted(SHAPE_SOLVERS) == ["cpsat", "exact", "kind-profiles"]
    with pytest.raises(ValueError, match=r"unknown shape solver 'gurobi': expected one of cpsat"):
        search(SEARCH_SPECS["one-zone-cost"](), SearchOptions(shape_solver="gurobi"))


class _GivesUp:
    """The exact solver, but saying every shape was left unfinished."""

    name: ClassVar[str] = "gives-up"

    def solve(self, search: Stripes, mbs: int, stages: int, dp: int) -> bool:
        ExactSolver().solve(search, mbs, stages, dp)
        return False


def test_a_shape_left_unfinished_makes_the_search_incomplete(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A solver that answers False leaves the result incomplete, with a reason and a lower
    bound no higher than the best (its shapes may hold better plans)."""

    def giving_up(name: str | None, approximations: frozenset[str]) -> ShapeSolver:
        return _GivesUp()

    model = SEARCH_SPECS["one-zone-quota-binds"]()
    proven = search(model, SearchOptions(shape_solver="exact"))
    monkeypatch.setattr(driver_module, "shape_solver", giving_up)
    result = search(model, SearchOptions(shape_solver="exact"))
    assert proven.complete and not result.complete
    assert "left" in result.stop_reason and "unfinished" in result.stop_reason
    assert _best(result) == _best(proven)
    best = _best(result)
    assert best is not None and result.lower_bound < best
