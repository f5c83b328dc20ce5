"""The incumbent: the candidates scored so far, the best K of distinct signature among them,
the value the bounds prune against, and the limits (time, evaluations, progress reports)
checked as candidates are scored, and what is proven beside it: a lower bound on the optimum
from what the driver has not explored yet (`certificate`). Also the search's options and
result types.

Only the best candidate is proven best. `top` K > 1 adds, per other signature (P, m and the
devices of each stage), the best candidate the search scored; the bounds then prune against
the K-th best signature rather than the best, so every candidate that could be among the K
is still scored (the dominance rule of `exact` may still drop one: alternatives are good,
not proven second best). Ties are broken by the documented order in `Candidate.key`:
objective, then the other metric, rented devices, P, D, microbatch size, boundaries,
assignment (under `kind-profiles`, up to mirror images of identical zones, which are
searched once).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from threading import Event

from hetc.costmodel.planning import Assignment, Estimate, PlanningModel, Shape
from hetc.solver.certificate import Snapshot
from hetc.solver.search.work import SLOTS, units

Progress = Callable[[Snapshot], None]

QueueEntry = tuple[float, int, int, int, int, int]
"""An entry of the driver's best-first queues: (bound, kind, m, P, first D, last D)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """One scored candidate: shape, counts and the planning model's estimate."""

    shape: Shape
    assignment: Assignment
    estimate: Estimate
    objective: str

    @property
    def value(self) -> float:
        """The objective: seconds per iteration, or USD per iteration."""
        e = self.estimate
        return e.iteration_time if self.objective == "max_throughput" else e.cost

    def key(self) -> tuple[object, ...]:
        e, s = self.estimate, self.shape
        other = e.cost if self.objective == "max_throughput" else e.iteration_time
        return (
            self.value,
            other,
            e.devices,
            s.stages,
            s.pipelines,
            s.microbatch,
            s.boundaries,
            self.assignment,
        )

    def signature(self, model: PlanningModel) -> tuple[object, ...]:
        """What makes two candidates different in shape (top-k lists distinct signatures):
        P, the microbatch size and each stage's devices; D alone is not (a plan with one
        pipeline fewer is no alternative worth showing)."""
        devices = tuple(
            tuple(sorted({model.kinds[k].device for k, _ in stage})) for stage in self.assignment
        )
        return (self.shape.stages, self.shape.microbatch, devices)


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchOptions:
    top: int = 1
    """How many candidates of distinct signature to return (the best is proven best; the
    others are the best of their signature among those scored)."""
    runners_up: int = 0
    """How many more to return beside the `top`, the best of other signatures among those
    scored, while the bounds prune against the `top`-th alone: candidates for a reranking
    that does not need the best K proven, at the cost of a search for the best `top`."""
    approximations: frozenset[str] = frozenset()
    eval_limit: int | None = None
    """Stop after this many scored leaves (deterministic)."""
    work_limit: int | None = None
    """Stop after this many units of work (`work`: deterministic, the same step on any
    machine)."""
    work_grace: int = 0
    """Units past `work_limit` the search may go on while it has no candidate yet, so that
    a budget too small for a huge spec still ends with a plan where one is near."""
    time_limit: float | None = None
    """Stop after this many seconds (the result is then the best found so far, and depends
    on the machine's speed and load)."""
    safety_cap: bool = False
    """Whether `time_limit` is the wall-clock safety cap behind a work budget rather than a
    limit the caller chose: only the words of `SearchResult.stop_reason` differ."""
    grace: float = 0.0
    """Seconds past `time_limit` the search may go on while it has no candidate yet, so that
    a time-limited search on a slow machine still has a plan to return."""
    progress: Progress | None = None
    progress_every: float = 0.2
    must_use: frozenset[int] = frozenset()
    """Pool indices every returned candidate must rent (for "why was this pool not used?")."""
    stop: Event | None = None
    """Once set (from a signal handler or another thread), the search stops at its next
    check and returns the best found so far, `interrupted`."""
    free_only: bool = False
    """Only plans that cost nothing, fastest first: max_throughput within a budget of 0 USD
    per iteration (what `search` does first for min_cost where some pool is free)."""
    shape_solver: str | None = None
    """The solver of each shape, by name (`shape_solver.SHAPE_SOLVERS`: `exact`,
    `kind-profiles`, `cpsat`); None picks it from the approximations."""
    first_feasible: bool = False
    """Stop at the first candidate that meets every constraint (`stop_reason` says so): a
    feasibility test needs a plan, not the best one. A search that ends without one is as
    complete as an optimising one, so its empty answer is a proof of infeasibility."""
    seeds: tuple[Candidate, ...] = ()
    """Candidates of the same spec known before the search (an earlier search's), offered
    before anything else: each is a real candidate, so they only tighten the bound."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchResult:
    candidates: tuple[Candidate, ...]
    """Best first; empty when nothing is feasible."""
    evaluations: int
    complete: bool
    """False when a time or evaluation limit, or `SearchOptions.stop`, ended it early."""
    seconds: float
    lower_bound: float
    """No candidate of the space the search was asked to search (under its approximations)
    scores below this (`certificate` module docstring); the best's value when complete,
    infinite when complete with no candidate."""
    gap: float | None
    """`certificate.relative_gap` of the best and `lower_bound`: how far the best may be from
    the best plan the approximations allow; 0 when proven best there, None when there is no
    candidate."""
    lower_bound_all_plans: float
    """No candidate of the whole planning model scores below this: `lower_bound` without
    approximations, the least bound of the shapes not searched exactly with them."""
    gap_all_plans: float | None
    """`certificate.relative_gap` of the best and `lower_bound_all_plans`: how far the best may
    be from the best plan of the planning model."""
    interrupted: bool = False
    """Ended by `SearchOptions.stop`."""
    stop_reason: str = ""
    greedy_count_leaves: int = 0
    """Leaves whose replica counts came from the greedy, not the exact programme."""
    work: int = 0
    """Units of work the search spent (`work.units`)."""
    stopped_by: str = ""
    """What ended it early, as a word: `work`, `evaluations`, `time`, `cap` (the safety cap),
    `interrupted`; empty when nothing did (`complete`, or a shape solver gave up)."""


FIRST_FEASIBLE = "first feasible candidate found"
"""`SearchResult.stop_reason` of a `first_feasible` search that found one."""


class _Stop(Exception):
    def __init__(self, reason: str, *, interrupted: bool = False, by: str = "") -> None:
        super().__init__(reason)
        self.interrupted = interrupted
        self.by = "interrupted" if interrupted else by


class Incumbent:
    """The search's problem (model, options, constraints) and its incumbent."""

    def __init__(self, model: PlanningModel, options: SearchOptions) -> None:
        self.model = model
        self.options = options
        self.free = options.free_only
        self.objective = "max_throughput" if self.free else model.spec.objective
        constraints = model.spec.constraints
        self.budget = 0.0 if self.free else constraints.max_cost_per_iteration
        self.time_cap = 1.0 / constraints.min_throughput if constraints.min_throughput else None
        self.capacity = [slot.pool.max_nodes * slot.pool.gpus_per_node for slot in model.pools]
        total = sum(self.capacity)
        if constraints.max_gpus is not None:
            total = min(total, constraints.max_gpus)
        self.total_devices = total
        self.best: dict[tuple[object, ...], Candidate] = {}
        self.ranked: list[Candidate] = []
        cap = self.time_cap if self.objective == "max_throughput" else self.budget
        self._cap = math.inf if cap is None else cap
        """What the objective of any feasible candidate is at most: the time cap of a
        throughput floor for max_throughput, the budget for min_cost (infinite without)."""
        self._kth = self._cap
        self.evaluations = 0
        self.tally = [0] * SLOTS
        """Steps of each kind the search has taken (`work`); a nested search shares its
        parent's list, so that one budget counts both."""
        self.greedy_counts = 0
        """Leaves whose counts came from the greedy (see `cheapest_counts`)."""
        self.started = time.perf_counter()
        self.last_report = self.started
        self.approx = options.approximations
        self._shape_best: float | None = None
        """The best objective found in the shape being searched (`shape`)."""
        self._queues: list[list[QueueEntry]] = []
        """The driver's best-first queues while it runs them: what is not yet explored."""
        self._searching = math.inf
        """The bound of the shape being searched; infinite between shapes."""
        self._root = 0.0
        """The least bound of every shape, once the driver has them (0 bounds any objective)."""

    def bound(self) -> float:
        """The objective value a candidate must beat (or tie) to matter: the best's, or with
        `top` K > 1 the K-th best signature's (until K are known, the constraint on the
        objective itself, `_cap`: a candidate past it is infeasible), so that nothing that
        could enter the top K is pruned. Before any candidate the cap prunes as an incumbent
        would: a throughput floor's search proves infeasibility with its bounds."""
        return self._kth

    def _found(self) -> float | None:
        """What `leaf` recorded for the shape: read through a call, since after `shape` sets
        the attribute to None, mypy takes it for None until the function returns, and a
        mypyc build checks that (module docstring of setup.py)."""
        return self._shape_best

    def record(self, candidate: Candidate) -> None:
        """`offer` a candidate found in the shape being searched, noting its value as the
        shape's best so far (what the driver's `shape` returns)."""
        value = candidate.value
        if self._shape_best is None or value < self._shape_best:
            self._shape_best = value
        self.offer(candidate)

    def offer(self, candidate: Candidate) -> None:
        """Keep the best candidate of each signature; `ranked[0]` is the incumbent. Under
        `free_only`, one that costs anything is no answer."""
        if self.free and candidate.estimate.cost > 0:
            return
        signature = candidate.signature(self.model)
        held = self.best.get(signature)
        if held is not None and held.key() <= candidate.key():
            return
        self.best[signature] = candidate
        if not self.ranked or candidate.key() < self.ranked[0].key():
            self.ranked = [candidate]
        top = self.options.top
        if top == 1:
            self._kth = min(self.ranked[0].value, self._cap)
        elif len(self.best) >= top:
            kth = heapq.nsmallest(top, (c.value for c in self.best.values()))[-1]
            self._kth = min(kth, self._cap)
        if self.options.first_feasible:
            raise _Stop(FIRST_FEASIBLE)

    def alternatives(self) -> tuple[Candidate, ...]:
        """The best, then the best-scored candidate of each other signature the search met,
        up to `top` plus `runners_up` in all. Pruning keeps anything that could beat the
        `top`-th signature, but the exact search's dominance rule compares partials of
        different signatures, so the alternatives are the best ones found, not proven
        second best."""
        kept = self.options.top + self.options.runners_up
        return tuple(sorted(self.best.values(), key=Candidate.key)[:kept])

    def incumbent(self) -> float:
        """The best candidate's objective; infinite before the first."""
        return self.ranked[0].value if self.ranked else math.inf

    def lower_bound(self) -> float:
        """No candidate of the whole planning model scores below this (`certificate` module
        docstring): `searched_bound` without approximations; under one, the least bound of
        every shape, since the searched shapes were searched only within its space."""
        if self.approx:
            return min(self.incumbent(), self._root)
        return self.searched_bound()

    def searched_bound(self) -> float:
        """No candidate of the space the search was asked to search scores below this: the
        least of the incumbent, the bound of the shape being searched (`_shape_floor`) and
        of every entry still queued, since a shape searched to the end within the
        approximations holds nothing there better than the incumbent. Before the queues
        exist, or under `dp-order` (a stopping rule, not a narrower space), the least bound
        of every shape."""
        least = self.incumbent()
        if not self._queues or "dp-order" in self.approx:
            return min(least, self._root)
        least = min(least, self._shape_floor())
        for queue in self._queues:
            for entry in queue:
                least = min(least, entry[0])
        return least

    def _shape_floor(self) -> float:
        """A lower bound on what the shape being searched has left: its bound here; the
        exact search refines it from its open prefixes (`exact.Exact._shape_floor`)."""
        return self._searching

    def shapes_left(self) -> int:
        """The shapes still queued under the incumbent, a range of D counting each of its D
        (0 before the queues exist)."""
        cut = self.bound()
        left = 0
        for queue in self._queues:
            for entry in queue:
                if entry[0] <= cut:
                    left += entry[5] - entry[4] + 1
        return left + (self._searching < math.inf)

    def work(self) -> int:
        """Units of work spent so far (`work.units` of the tally)."""
        return units(self.tally)

    def check_limits(self) -> None:
        options = self.options
        if options.eval_limit is not None and self.evaluations > options.eval_limit:
            raise _Stop(f"evaluation limit {options.eval_limit} reached", by="evaluations")
        if options.stop is not None and options.stop.is_set():
            raise _Stop("interrupted", interrupted=True)
        work = options.work_limit
        if work is not None and units(self.tally) > work + (
            0 if self.ranked else options.work_grace
        ):
            raise _Stop(f"work budget of {work:,} units reached", by="work")
        now = time.perf_counter()
        limit = options.time_limit
        if limit is not None and now - self.started > limit + (
            0.0 if self.ranked else options.grace
        ):
            if options.safety_cap:
                raise _Stop(f"wall-clock safety cap of {limit:g} s reached", by="cap")
            raise _Stop(f"time limit {limit:g} s reached", by="time")
        if options.progress is not None and now - self.last_report >= options.progress_every:
            self.last_report = now
            incumbent: float | None = self.incumbent()
            if incumbent == math.inf:
                incumbent = None
            options.progress(
                Snapshot(
                    evaluations=self.evaluations,
                    seconds=now - self.started,
                    incumbent=0.0 if self.free and incumbent is not None else incumbent,
                    lower_bound=0.0 if self.free else self.lower_bound(),
                    shapes_left=self.shapes_left(),
                    approximations=self.approx,
                    searched_bound=(
                        (0.0 if self.free else self.searched_bound()) if self.approx else None
                    ),
                )
            )
