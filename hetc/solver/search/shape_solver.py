"""Shape solvers: what searches one shape (m, P, D) once the driver has reached it.

The driver decides which shapes to search and in which order (best first under their
bounds); a shape solver searches one of them. Each offers what it finds to the search's
incumbent (`Incumbent.record`, so that the driver learns the shape's best) and says whether
it searched the shape to the end within its own space: a solver's space is what it claims
to cover, all stage splits and kind sets for `exact` and `cpsat`, the profiles of the
`kind-profiles` approximation for that one. Limits of the whole search (time, evaluations,
Ctrl-C) end it by raising from `Incumbent.check_limits`, as before; the answer False is for
a solver that gave up on a shape on its own (CP-SAT stopped by its per-split time limit),
which the driver then reports as an incomplete search.

Three solvers, picked by name (`SHAPE_SOLVERS`, `SearchOptions.shape_solver`), or by the
approximations when none is named (`default_solver`):

- `exact`: the stage branch and bound of `exact`, with its dominance rule and the replica
  count programme at its leaves;
- `kind-profiles`: the enumerator of `profiles` (a declared approximation);
- `cpsat`: every split of the blocks into P contiguous stages, each solved for its counts by
  the CP-SAT model of `hetc.solver.cpsat` (imported only when this solver runs). It is the
  cross-check: another method over the same space as `exact`, so both must reach the same
  optimum; it is far slower (one CP-SAT model per split).
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import ClassVar, Protocol

from hetc.costmodel.planning import Shape
from hetc.solver.search.incumbent import Candidate
from hetc.solver.search.stripes import Stripes
from hetc.solver.search.work import LEAF, POOL_SCAN


class ShapeSolver(Protocol):
    """Searches one shape for the driver."""

    name: ClassVar[str]

    def solve(self, search: Stripes, mbs: int, stages: int, dp: int) -> bool:
        """Offer the shape's candidates (microbatch `mbs`, `stages` stages, `dp` pipelines)
        to `search`; True when the shape was searched to the end within this solver's
        space."""
        ...


class ExactSolver:
    """The exact branch and bound over the shape's stages (`Exact.search_stages`), skipped
    where the shape's bound already loses (`Bounds.may_win`): both exact, so it searches the
    shape to the end, unless a stage has more kind sets than memory allows
    (`exact.ROW_CAP`)."""

    name: ClassVar[str] = "exact"

    def solve(self, search: Stripes, mbs: int, stages: int, dp: int) -> bool:
        if search.may_win(mbs, stages, dp):
            return search.search_stages(mbs, stages, dp)
        return True


class ProfilesSolver:
    """The `kind-profiles` enumerator (`Profiles.profiles`): to the end of its own space,
    the profiles, which is not every plan (the approximation `driver.APPROXIMATIONS`
    declares)."""

    name: ClassVar[str] = "kind-profiles"

    def solve(self, search: Stripes, mbs: int, stages: int, dp: int) -> bool:
        search.profiles(mbs, stages, dp)
        return True


class CpSatSolver:
    """Every split of the blocks into `stages` contiguous stages, each one's counts from
    CP-SAT (`cpsat.solve_shape`), scored by the planning model and offered.

    Its space is the exact solver's: every split, and for each, every count of every kind
    that fits, so its best equals `exact`'s (up to the integer rounding of the CP-SAT model,
    `cpsat` module docstring). It is not complete where CP-SAT stopped on its time limit
    before proving a split optimal, or under `SearchOptions.free_only`, whose objective
    (fastest free plan) the CP-SAT model does not state."""

    name: ClassVar[str] = "cpsat"

    def __init__(self, time_limit_per_split: float | None = None) -> None:
        self.time_limit_per_split = time_limit_per_split

    def solve(self, search: Stripes, mbs: int, stages: int, dp: int) -> bool:
        from hetc.solver.cpsat import solve_shape

        if not search.may_win(mbs, stages, dp):
            return True
        model = search.model
        complete = not search.free
        for cuts in combinations(range(1, model.blocks), stages - 1):
            search.check_limits()
            shape = Shape(microbatch=mbs, boundaries=(0, *cuts, model.blocks), pipelines=dp)
            bound = search.bound()
            found = solve_shape(
                model,
                shape,
                time_limit=self.time_limit_per_split,
                upper_bound=None if math.isinf(bound) else bound,
            )
            if found is None:
                continue
            if found.status != "OPTIMAL":
                complete = False
            search.evaluations += 1
            search.tally[LEAF] += 1
            search.tally[POOL_SCAN] += len(model.pools)
            if any(not found.estimate.nodes[p] for p in search.options.must_use):
                continue
            search.record(
                Candidate(
                    shape=shape,
                    assignment=found.assignment,
                    estimate=found.estimate,
                    objective=search.objective,
                )
            )
        return complete


SHAPE_SOLVERS: dict[str, type[ExactSolver] | type[ProfilesSolver] | type[CpSatSolver]] = {
    solver.name: solver for solver in (ExactSolver, ProfilesSolver, CpSatSolver)
}
"""The shape solvers by name, as `SearchOptions.shape_solver` names them."""


def default_solver(approximations: frozenset[str]) -> str:
    """The solver the approximations imply: `kind-profiles` where that approximation is on,
    else `exact` (CP-SAT is only ever named explicitly)."""
    return "kind-profiles" if "kind-profiles" in approximations else "exact"


def shape_solver(name: str | None, approximations: frozenset[str]) -> ShapeSolver:
    """The solver called `name`, or the approximations' default where `name` is None."""
    chosen = default_solver(approximations) if name is None else name
    if chosen not in SHAPE_SOLVERS:
        known = ", ".join(sorted(SHAPE_SOLVERS))
        raise ValueError(f"unknown shape solver {chosen!r}: expected one of {known}")
    return SHAPE_SOLVERS[chosen]()
