"""What a search has proven so far: its incumbent, a lower bound on the optimum, the gap
between the two, and the min_cost specs with free pools, whose ties at 0 need the time bound.

The lower bound is the least bound of what the search has not yet explored: the bound of a
shape it has not searched to the end is below every candidate in it (`search.driver` module
docstring, step 1), and a shape it has searched to the end holds nothing better than the
incumbent. So the optimum lies between the bound and the incumbent, whenever the search
stops. Under an approximation the searched shapes were searched only within the
approximation's space, so the bound falls back to the least bound of every shape.

Both objectives minimise a number (seconds per iteration for `max_throughput`, USD per
iteration for `min_cost`), so one gap serves both: (incumbent - bound) / incumbent. For
throughput that equals (best conceivable throughput - the incumbent's) / the best
conceivable, the same fraction read the other way up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hetc.costmodel.planning import PlanningModel

__all__ = ["Snapshot", "gap_text", "relative_gap", "some_pool_is_free"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Snapshot:
    """Where a running search stands, for a progress display."""

    evaluations: int
    seconds: float
    incumbent: float | None
    """The best objective found (seconds or USD per iteration); None before the first."""
    lower_bound: float
    """No candidate of the whole space scores below this."""
    shapes_left: int
    """Shapes not yet searched whose bound could still beat the incumbent (ranges of D count
    each of their D)."""

    @property
    def gap(self) -> float | None:
        return relative_gap(self.incumbent, self.lower_bound)


def relative_gap(incumbent: float | None, bound: float) -> float | None:
    """(incumbent - bound) / incumbent, at least 0: 0 when the incumbent is proven best
    (also for an incumbent of 0, which nothing can undercut: every term is non-negative),
    None when there is no incumbent (nothing to measure a gap from)."""
    if incumbent is None or math.isinf(incumbent):
        return None
    if incumbent <= bound or incumbent <= 0:
        return 0.0
    return (incumbent - max(bound, 0.0)) / incumbent


def gap_text(gap: float | None) -> str:
    """A gap as a percentage that does not round a real gap to 0%; "unknown" without one."""
    if gap is None:
        return "unknown (no plan yet)"
    if gap == 0:
        return "0%"
    percent = 100 * gap
    return f"{percent:.1f}%" if percent >= 0.05 else f"{percent:.2g}%"


def some_pool_is_free(model: PlanningModel) -> bool:
    """Whether a min_cost spec may have plans that cost 0 USD: some pool's price is 0 (a
    plan on free pools within one zone, or wherever traffic is not billed, costs nothing).
    Then min_cost ties at 0 between all such plans, and its tie-break (the fastest) decides:
    the search looks for them as `max_throughput` within a budget of 0 (`search.search`)."""
    return model.spec.objective == "min_cost" and any(slot.pool.price == 0 for slot in model.pools)
