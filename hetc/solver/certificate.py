"""What a search has proven so far: its incumbent, a lower bound on the optimum, the gap
between the two, and the min_cost specs with free pools, whose ties at 0 need the time bound.

The lower bound is the least bound of what the search has not yet explored: the bound of a
shape it has not searched to the end is below every candidate in it (`search.driver` module
docstring, step 1), and a shape it has searched to the end holds nothing better than the
incumbent. So the optimum lies between the bound and the incumbent, whenever the search
stops. Within a shape the exact search refines its shape's bound to the least bound of its
open prefixes (`exact.Exact._shape_floor`).

Two certificates, since an approximation narrows the space searched:

- `gap` (within the approximations): a shape searched to the end within the approximation's
  space holds nothing there better than the incumbent, so the least bound of the rest brackets
  the best plan the approximation can produce;
- `gap_all_plans`: the searched shapes were searched only within the approximation's space, so
  over all plans of the planning model the bound falls back to the least bound of every shape.
  Without approximations the two are one.

What an approximation costs against the exact search on the spec family is measured, not
proven: `MEASURED_GAPS`, from bench/approximations.py --family (docs/planner.md,
Measurements).

Both objectives minimise a number (seconds per iteration for `max_throughput`, USD per
iteration for `min_cost`), so one gap serves both: (incumbent - bound) / incumbent. For
throughput that equals (best conceivable throughput - the incumbent's) / the best
conceivable, the same fraction read the other way up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hetc.costmodel.planning import PlanningModel

__all__ = [
    "MEASURED_GAPS",
    "MeasuredGap",
    "Snapshot",
    "declared_text",
    "gap_text",
    "relative_gap",
    "some_pool_is_free",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class MeasuredGap:
    """How much worse an approximation's plan was than the exact search's, on the specs of
    the family (bench/spec_family.py) where the exact search finished."""

    p50: float
    p95: float
    worst: float
    finished: int
    """Specs with a plan whose exact search finished within the cap."""
    specs: int
    """Specs drawn."""


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
    approximations: frozenset[str] = frozenset()
    """What the search runs under (none: the exact search)."""
    searched_bound: float | None = None
    """No candidate of the space searched under `approximations` scores below this; None
    where it is `lower_bound` (no approximation)."""

    @property
    def gap(self) -> float | None:
        """The gap over all plans."""
        return relative_gap(self.incumbent, self.lower_bound)

    @property
    def gap_within(self) -> float | None:
        """The gap within the approximations (`gap` without any)."""
        if self.searched_bound is None:
            return self.gap
        return relative_gap(self.incumbent, self.searched_bound)


MEASURED_GAPS: dict[str, MeasuredGap] = {
    "kind-profiles": MeasuredGap(p50=0.0, p95=0.11, worst=0.1774, finished=49, specs=100),
}
"""What `bench/approximations.py --family 40 --small 60 --cap 30` measured: the plan's
objective against the exact search's, on the specs with a plan whose exact search finished
within 30 s (5 of the 40 family specs, 44 of the 60 small ones). docs/planner.md states the
same numbers (Measured, under the family), which a test keeps equal to these."""


def declared_text(approximations: frozenset[str]) -> str:
    """The approximations a plan was searched under, each with its measured gap where there is
    one: "kind-profiles (on bench/spec_family: p95 X% from exact)"; "none" without."""
    if not approximations:
        return "none"
    parts = []
    for name in sorted(approximations):
        measured = MEASURED_GAPS.get(name)
        parts.append(
            name
            if measured is None
            else f"{name} (on bench/spec_family: p95 {gap_text(measured.p95)} from exact)"
        )
    return ", ".join(parts)


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
