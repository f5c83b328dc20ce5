"""The least value of one constraint that makes a spec feasible, the other constraints as
they are: the search over a monotone feasibility that every family's fix runs
(`least_feasible`), and the fixes of max_gpus, the budget and the throughput floor (the
quotas have their own module, `quota_fixes`).

Each family's values are numbered so that a larger number is more permissive (whole
devices of max_gpus, whole nodes of a quota, the grid of 3 significant digits for a budget,
the same grid reversed for a floor), and feasibility is monotone in that number: a plan
within a limit is within every larger one. The least feasible number is then bracketed by
two kinds of facts, never by a guess:

- a value is feasible when a plan meets it: a probe's witness, or a plan some earlier
  search of the diagnosis found (`Oracle.witnesses`), so the fix of a floor starts at the
  fastest plan already known, never below it;
- a value is infeasible when that is proven: a necessary condition (`feasibility`, no
  search at all), an optimisation's lower bound, or a probe that searched to the end.

A probe stopped at its limit of work is neither; it is remembered as unknown. The search
starts from a feasible value (the most permissive one it may suggest), bisects between the
two kinds of facts, and spends what is left of its share on the decisive probe, the one
just under the least feasible value (`Oracle.settle`): proven infeasible, the fix is proven
least at the unit; otherwise the fix states the range it proved (`Fix.infeasible_at`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import pairwise

from hetc.schema.spec import Spec
from hetc.solver.fix import (
    GRID,
    Fix,
    grid_above,
    grid_below,
    grid_index,
    grid_value,
    round_up,
)
from hetc.solver.oracle import Oracle, constrained
from hetc.solver.search import Candidate

__all__ = ["Least", "budget_fix", "floor_fix", "least_feasible", "max_gpus_fix"]

FEASIBLE, PROVEN, UNKNOWN = "feasible", "proven infeasible", "unknown"


@dataclass(frozen=True, slots=True)
class Least:
    """What `least_feasible` established."""

    value: int
    """The least number probed feasible (a plan meets it)."""
    infeasible_at: int | None
    """The largest number under `value` proven infeasible; None where none is. Every
    number in between is unknown: the least feasible one lies in (infeasible_at, value]."""


def least_feasible(
    oracle: Oracle,
    at: Callable[[int], Spec],
    *,
    low: int,
    low_proven: bool,
    cap: int,
    needs: Callable[[Candidate], int],
    proven: int | None = None,
    optimum: bool = False,
) -> Least | None:
    """The least n in (low, cap] at which `at(n)` is feasible, for a feasibility monotone in
    n that does not hold at `low` (`low_proven`: provably). `needs(plan)` is the least n at
    which a plan found at some n is still feasible (its devices, nodes, cost or
    throughput), so that every plan found tightens the bracket at once; `proven` is a
    number known proven infeasible without a probe (an optimisation's bound); `optimum`
    says that the plan feasible at `cap` is an optimisation's best, mostly the answer, so
    that the number under it is probed first. None when no plan was found at `cap` (proven
    or not: `Oracle.status` of `at(cap)` says which).

    The marks of the numbers probed: feasible, proven infeasible or unknown. First the
    numbers the necessary conditions refute (a bisection over them alone, no search) and
    `cap`, whose plan (or a known one, `Oracle.witnesses`) tightens the bracket at once;
    then `_Bracket.close` narrows it. Every probe answers from the oracle, whose budget
    bounds the whole."""
    if cap <= low:
        return None
    bracket = _Bracket(oracle, at, needs, {low: PROVEN if low_proven else UNKNOWN})
    refuted = _refuted_up_to(oracle, at, low, cap)
    if refuted >= cap:
        return None
    if refuted > low:
        bracket.marks[refuted] = PROVEN
    if proven is not None and low < proven < cap:
        bracket.marks[max(proven, refuted)] = PROVEN
    bracket.probe(cap)
    if bracket.least() is None:
        return None
    bracket.close(optimum=optimum)
    value = bracket.least()
    assert value is not None
    return Least(value=value, infeasible_at=bracket.proven_below())


@dataclass(slots=True)
class _Bracket:
    """The numbers probed so far and their marks, between the largest proven-infeasible
    one and the least feasible one."""

    oracle: Oracle
    at: Callable[[int], Spec]
    needs: Callable[[Candidate], int]
    marks: dict[int, str]

    def least(self) -> int | None:
        feasible = [n for n, mark in self.marks.items() if mark == FEASIBLE]
        return min(feasible) if feasible else None

    def proven_below(self) -> int | None:
        """The largest proven-infeasible number under the least feasible one."""
        least = self.least()
        below = [
            n for n, mark in self.marks.items() if mark == PROVEN and (least is None or n < least)
        ]
        return max(below) if below else None

    def floor(self) -> int:
        """`proven_below`, or the least number marked where none is proven."""
        below = self.proven_below()
        return min(self.marks) if below is None else below

    def probe(self, n: int, work: int | None = None) -> str:
        """Mark n by the oracle's answer (`work`: its limit, see `Oracle.status`); a plan
        found marks the number it `needs` too."""
        found, sure = self.oracle.status(self.at(n), work)
        self.marks[n] = FEASIBLE if found is not None else PROVEN if sure else UNKNOWN
        if found is not None:
            tighter = self.needs(found)
            if self.floor() < tighter < n and tighter not in self.marks:
                self.probe(tighter)
        return self.marks[n]

    def widest_gap(self) -> tuple[int, int] | None:
        """The widest stretch of unprobed numbers between two marked ones, from `floor` up
        to the least feasible one (the first on ties); None when every number there is
        marked."""
        least = self.least()
        if least is None:
            return None
        points = sorted(n for n in self.marks if self.floor() <= n <= least)
        gaps = [(a, b) for a, b in pairwise(points) if b - a > 1]
        return max(gaps, key=lambda g: g[1] - g[0]) if gaps else None

    def close(self, *, optimum: bool) -> None:
        """Narrow the bracket while the budget lasts. Where the least feasible number is an
        optimisation's best (`optimum`), the number just under it first: one proof there
        mostly settles the fix. Then galloping down from the least feasible number (1, 2,
        4, ... under it) while plans are found, and up from the largest proven-infeasible
        one while proofs are: probes far from the answer are cheap, and a plan found
        mostly rents nearly all it may, so that stepping down by one would take a probe
        per node. Then bisection of the widest unmarked stretch, a probe that stops unknown
        made again with twice the limit (which the next ones keep) until it answers: near
        the answer, plans are hard to find and proofs hard to make, and a bisection that
        moved on from an unknown middle would meet only more of them. Last, the decisive
        number (just under the least feasible one) again with all that is left of the
        budget's share (without a budget each search had its own limit, or none, and there
        is nothing more to give): it decides whether the fix is least at the unit, and
        where it finds a plan, the stretch under that is bisected in turn."""
        oracle = self.oracle
        least = self.least()
        if optimum and least is not None and least - 1 > self.floor():
            self.probe(least - 1)
        self._gallop(down=True)
        self._gallop(down=False)
        self._bisect()
        while oracle.budget is not None and not oracle.exhausted():
            least = self.least()
            assert least is not None
            decisive = least - 1
            if decisive <= self.floor() or self.marks.get(decisive) == PROVEN:
                return
            if self.probe(decisive, oracle.budget.left()) == UNKNOWN:
                return
            self._bisect()

    def _bisect(self) -> None:
        """Probe the middle of the widest unmarked stretch until none is left, a probe that
        stops unknown made again with twice the limit (kept for the probes after it) while
        the budget holds that."""
        oracle = self.oracle
        effort = oracle.work_limit
        while not oracle.exhausted():
            gap = self.widest_gap()
            if gap is None:
                return
            middle = (gap[0] + gap[1]) // 2
            while self.probe(middle, effort) == UNKNOWN:
                left = None if oracle.budget is None else oracle.budget.left()
                if effort is None or (left is not None and 2 * effort > left):
                    return
                effort *= 2

    def _gallop(self, *, down: bool) -> None:
        """Probe 1, 2, 4, ... numbers under the least feasible one (`down`) or over the
        largest proven-infeasible one, each step from the end as it then is (a plan found
        moves the least feasible number to what it `needs`), until a probe lands on the
        other side or stops unknown."""
        step = 1
        while not self.oracle.exhausted():
            least, floor = self.least(), self.floor()
            assert least is not None
            n = least - step if down else floor + step
            if not floor < n < least or n in self.marks:
                return
            if self.probe(n) != (FEASIBLE if down else PROVEN):
                return
            step *= 2


def _refuted_up_to(oracle: Oracle, at: Callable[[int], Spec], low: int, cap: int) -> int:
    """The largest n in [low, cap] whose spec fails a necessary condition, `low` where none
    above it does: a bisection, since the conditions are monotone in n too."""
    if not oracle.refuted(at(low + 1)):
        return low
    below, above = low + 1, cap + 1
    while above - below > 1:
        middle = (below + above) // 2
        if oracle.refuted(at(middle)):
            below = middle
        else:
            above = middle
    return below


def max_gpus_fix(oracle: Oracle, spec: Spec) -> Fix | None:
    """The least max_gpus (whole devices) at which `spec` is feasible."""
    lifted = constrained(spec, max_gpus=None)
    found = oracle.witness(lifted)
    if found is None:
        return None
    limit = spec.constraints.max_gpus or 0
    least = least_feasible(
        oracle,
        lambda n: constrained(spec, max_gpus=n),
        low=limit,
        low_proven=oracle.proven_infeasible(spec),
        cap=max(limit + 1, found.estimate.devices),
        needs=lambda c: c.estimate.devices,
    )
    if least is None:
        return None
    return Fix(
        family="max_gpus",
        path="constraints.max_gpus",
        value=least.value,
        what="max_gpus",
        infeasible_at=least.infeasible_at,
    )


def budget_fix(oracle: Oracle, spec: Spec) -> Fix | None:
    """The least budget on the grid at which `spec` is feasible: the min-cost search
    without the budget (the known plans offered to it first) brackets it between its best
    plan's cost, rounded up, and its lower bound; `least_feasible` closes the bracket."""
    cheapest = oracle.optimum(
        replace(constrained(spec, max_cost_per_iteration=None), objective="min_cost")
    )
    if cheapest.candidate is None or cheapest.candidate.estimate.cost <= 0:
        return None
    current = spec.constraints.max_cost_per_iteration
    if current is None:
        return None
    cap = grid_index(round_up(cheapest.candidate.estimate.cost))
    low = grid_index(current) if current > 0 else cap - 2 * GRID

    def at(n: int) -> Spec:
        return constrained(spec, max_cost_per_iteration=grid_value(n))

    bound = grid_below(cheapest.lower_bound)
    least = least_feasible(
        oracle,
        at,
        low=low,
        low_proven=oracle.proven_infeasible(spec if current > 0 else at(low)),
        cap=cap,
        needs=lambda c: grid_index(round_up(c.estimate.cost)),
        proven=None if bound is None else grid_index(bound),
        optimum=True,
    )
    if least is None:
        return None
    return Fix(
        family="budget",
        path="constraints.max_cost_per_iteration",
        value=grid_value(least.value),
        what="the budget (USD per iteration)",
        infeasible_at=None if least.infeasible_at is None else grid_value(least.infeasible_at),
    )


def floor_fix(oracle: Oracle, spec: Spec) -> Fix | None:
    """The largest floor on the grid at which `spec` is feasible: the max-throughput search
    without the floor (the known plans offered to it first) brackets it between its best
    plan's iterations/s, rounded down, and the inverse of its lower bound on the time;
    `least_feasible` closes the bracket, on the grid reversed (a lower floor is more
    permissive)."""
    fastest = oracle.optimum(
        replace(constrained(spec, min_throughput=None), objective="max_throughput")
    )
    if fastest.candidate is None:
        return None
    current = spec.constraints.min_throughput
    if current is None or current <= 0:
        return None
    bound = grid_above(1.0 / fastest.lower_bound) if fastest.lower_bound > 0 else None
    least = least_feasible(
        oracle,
        lambda n: constrained(spec, min_throughput=grid_value(-n)),
        low=-grid_index(round_up(current)),
        low_proven=oracle.proven_infeasible(spec),
        cap=-grid_index(1.0 / fastest.candidate.estimate.iteration_time),
        needs=lambda c: -grid_index(1.0 / c.estimate.iteration_time),
        proven=None if bound is None else -grid_index(bound),
        optimum=True,
    )
    if least is None:
        return None
    return Fix(
        family="throughput floor",
        path="constraints.min_throughput",
        value=grid_value(-least.value),
        what="the throughput floor (iterations/s)",
        infeasible_at=None if least.infeasible_at is None else grid_value(-least.infeasible_at),
    )
