"""The `kind-profiles` space with nothing pruned: the oracle its pruned search is tested against
(tests/test_solver_profiles.py, tests/test_solver_range_floor.py)."""

from __future__ import annotations

import math

from hetc.costmodel.planning import PlanningModel
from hetc.solver.search import SearchOptions
from hetc.solver.search.driver import Search
from hetc.solver.search.pairs import PairAt
from hetc.solver.search.windows import Option


class ExhaustiveProfiles(Search):
    """The same space with nothing pruned: no incumbent bound, no budget or time-cap bound
    (the searcher forgets both; the estimate at each leaf still checks them), no cost floor
    (prices of 0), no straggler ceiling, no cap on D but counting's (neither the memory
    cap nor the profile cap), no mirror images of identical zones left out, no pair left
    out for missing a pool the search must use: each profile is split and scored at a leaf
    (which still drops a candidate that rents no forced pool)."""

    def __init__(self, model: PlanningModel, options: SearchOptions) -> None:
        super().__init__(model, options)
        self.budget = None
        self.time_cap = None

    def bound(self) -> float:
        return math.inf

    def violates(self, t: float, rate: float, egress: float = 0.0) -> bool:
        return False

    def _straggler_ceiling(self, fixed: float, m1: int, rate: float) -> float:
        return math.inf

    def last_dp(self, mbs: int, stages: int) -> int:
        return self.dp_cap(mbs, stages)

    def _least_prices(self, mbs: int, dp: int) -> tuple[float, float]:
        return 0.0, 0.0

    def pairs(self, mbs: int, dp: int, alone: bool = False) -> list[PairAt]:
        rows = super().pairs(mbs, dp, alone)
        return [r._replace(pair=r.pair._replace(per_stage=0.0, per_pass=0.0)) for r in rows]

    def zone_swaps(self) -> list[dict[int, int]]:
        return []

    def may_use_forced(self, slow: Option, fast: Option) -> bool:
        return True
