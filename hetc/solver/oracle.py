"""The planner's search as the diagnosis's oracle: feasibility probes that say whether their
answer is proven, and optimisations with their lower bounds (`diagnosis` builds the least
changes on them).

A probe is a `first_feasible` search: a plan, when there is one, is mostly found in
milliseconds, while a proof that there is none needs the whole search (or a necessary
condition, `feasibility`, or an optimisation's bound). Every search has a limit of work
(`budget`), so a probe answers (a plan or None, proven) and answers the same on any
machine; the diagnosis turns unproven answers into a stated range rather than a guess.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from hetc.costmodel.memory import FrameworkOverhead
from hetc.costmodel.planning import PlanningModel
from hetc.costmodel.profile import LayerProfile
from hetc.costmodel.simulate import simulate
from hetc.plan import capability_problems
from hetc.schema.spec import Spec, spec_hash
from hetc.solver.budget import Budget
from hetc.solver.build import build_plan
from hetc.solver.feasibility import necessary_conditions
from hetc.solver.planner import Proposal, default_approximations, plan_spec, predictions_of
from hetc.solver.search import Candidate, SearchOptions, SearchResult, search

__all__ = [
    "DIAGNOSIS_WORK",
    "MIN_SEARCH_WORK",
    "SEARCH_WORK",
    "TOLERANCE",
    "Optimum",
    "Oracle",
    "constrained",
]

SEARCH_WORK = 500_000
"""Work limit of one search of the diagnosis (units of `search.work`, about half a second):
a probe stopped there with no plan counts as infeasible but proves nothing, so a suggestion
stays verified and says how far it is proven least (`Fix.infeasible_at`). The planner's
search can take minutes to prove an optimum or an infeasibility on some small specs
(min_cost under max_gpus); a plan, when there is one, a first-feasible search mostly finds
in milliseconds."""

DIAGNOSIS_WORK = 1_500_000
"""The work of the searches of one diagnosis where no budget is given: past it, each search
gets MIN_SEARCH_WORK (plans are still found and necessary conditions still prove; long
proofs are given up)."""

MIN_SEARCH_WORK = 20_000

WITNESS_FACTOR = 2.0
"""Every search gets at least this many times the most work a search that found a plan
spent so far: on a large model (Llama-65B on 120 T4) finding a plan takes more than
SEARCH_WORK, and a probe cut shorter would miss plans that exist, so the diagnosis would
name a larger fix."""


def constrained(spec: Spec, **changes: Any) -> Spec:
    """`spec` with its constraints changed as given (None removes one)."""
    return replace(spec, constraints=replace(spec.constraints, **changes))


@dataclass(frozen=True, slots=True)
class Optimum:
    """What an optimising search under a spec's objective established."""

    candidate: Candidate | None
    """The best candidate found inside the capability matrix (None when none was)."""
    lower_bound: float
    """No plan scores below this (`SearchResult.lower_bound`; the best's value when the
    search completed, infinite when it completed with none)."""
    complete: bool


class Oracle:
    """The planner's search as a feasibility test, memoised on the spec.

    `status` answers (a witness or None, proven): a spec that fails a necessary condition
    (`feasibility`) is infeasible without a search, as in `plan_spec` (the bisections'
    probes below the answer are mostly such specs); otherwise a `first_feasible` search,
    which stops at the first plan meeting every constraint, answers, and one that ends
    without a plan is a proof of infeasibility. A search stopped at its limit without a
    plan is unknown; then, where the spec has a budget or a floor, the bound of the
    optimisation without it may still prove it (`_bound_refutes`): no plan costs less
    than the min-cost search's lower bound, none is faster than the max-throughput one's.
    `work_limit` bounds each search and `budget` all of them, each search charging it (see
    DIAGNOSIS_WORK; None: no bound)."""

    def __init__(
        self,
        *,
        profiles: Sequence[LayerProfile] = (),
        overhead: FrameworkOverhead | None = None,
        approximations: frozenset[str] | None = None,
        measured_points: bool = False,
        work_limit: int | None = SEARCH_WORK,
        budget: Budget | None = None,
    ) -> None:
        self.work_limit = work_limit
        self.budget = budget
        """Every search charges it; once it is spent, each search gets MIN_SEARCH_WORK
        (None: no bound of all the searches)."""
        self.witness_work = 0
        """The most work a search that found a plan spent so far (see WITNESS_FACTOR)."""
        self.stopped = 0
        """Searches stopped by their limits."""
        self.unknown = 0
        """Feasibility probes that found no plan and did not prove that none exists."""
        self.profiles = tuple(profiles)
        self.overhead = overhead
        self.approximations = approximations
        self.measured_points = measured_points
        self._status: dict[str, tuple[Candidate | None, bool]] = {}
        self._optima: dict[str, Optimum] = {}
        self.solves = 0

    def options(self) -> dict[str, Any]:
        """The keyword arguments of `plan_spec` that plan as this oracle does."""
        return {
            "profiles": self.profiles,
            "overhead": self.overhead,
            "approximations": self.approximations,
            "measured_points": self.measured_points,
        }

    def model(self, spec: Spec) -> PlanningModel:
        """The planning model of `spec` with this oracle's profiles and points."""
        return PlanningModel(
            spec,
            profiles=self.profiles,
            overhead=self.overhead,
            measured_points=self.measured_points,
        )

    def optimum(self, spec: Spec) -> Optimum:
        """The search's best candidate under `spec`'s objective, if it is inside the
        capability matrix (else `plan_spec`'s best), with the search's lower bound."""
        key = _key(spec)
        if key not in self._optima:
            self._optima[key] = self._optimise(spec)
        return self._optima[key]

    def best(self, spec: Spec) -> Candidate | None:
        """`optimum`'s candidate."""
        return self.optimum(spec).candidate

    def status(self, spec: Spec) -> tuple[Candidate | None, bool]:
        """(a feasible candidate or None, whether that answer is proven)."""
        key = _key(spec)
        if key not in self._status:
            self._status[key] = self._probe(spec)
        return self._status[key]

    def witness(self, spec: Spec) -> Candidate | None:
        """Some feasible candidate, or None when none was found (proven or not: `status`)."""
        return self.status(spec)[0]

    def feasible(self, spec: Spec) -> bool:
        return self.witness(spec) is not None

    def proven_infeasible(self, spec: Spec) -> bool:
        found, proven = self.status(spec)
        return found is None and proven

    def _search(self, spec: Spec, *, first: bool) -> tuple[PlanningModel, SearchResult] | None:
        model = self.model(spec)
        if necessary_conditions(model) is not None:
            return None
        self.solves += 1
        chosen = (
            default_approximations(model) if self.approximations is None else self.approximations
        )
        seconds = None if self.budget is None else self.budget.seconds_left()
        options = SearchOptions(
            approximations=chosen,
            first_feasible=first,
            work_limit=self._limit(),
            time_limit=seconds,
            safety_cap=self.budget is not None and self.budget.capped,
        )
        result = search(model, options)
        if self.budget is not None:
            self.budget.charge(result.work)
        return model, result

    def _limit(self) -> int | None:
        """This search's work limit: `work_limit`, cut to what is left of the budget, never
        under MIN_SEARCH_WORK nor WITNESS_FACTOR times the most work a search that found a
        plan spent."""
        floor = math.ceil(WITNESS_FACTOR * self.witness_work)
        limit = None if self.work_limit is None else max(self.work_limit, floor)
        left = None if self.budget is None else self.budget.left()
        if left is None:
            return limit
        left = max(MIN_SEARCH_WORK, floor, left)
        return left if limit is None else min(limit, left)

    def _capable(self, model: PlanningModel, candidate: Candidate) -> bool:
        plan = build_plan(model, candidate.shape, candidate.assignment, spec_hash="")
        training = model.spec.training
        return not capability_problems(
            plan, zero_stage=training.zero_stage, precision=training.precision
        )

    def _probe(self, spec: Spec) -> tuple[Candidate | None, bool]:
        done = self._search(spec, first=True)
        if done is None:
            return None, True
        model, result = done
        if result.candidates:
            self.witness_work = max(self.witness_work, result.work)
        if result.candidates:
            if self._capable(model, result.candidates[0]):
                return result.candidates[0], True
            return self.best(spec), True
        if result.complete:
            return None, True
        self.stopped += 1
        if self._bound_refutes(spec):
            return None, True
        self.unknown += 1
        return None, False

    def _bound_refutes(self, spec: Spec) -> bool:
        """Whether the lower bound of the optimisation without the budget (min_cost) or the
        floor (max_throughput) proves that no plan meets it."""
        c = spec.constraints
        if c.max_cost_per_iteration is not None:
            cheapest = self.optimum(
                replace(constrained(spec, max_cost_per_iteration=None), objective="min_cost")
            )
            if cheapest.lower_bound > c.max_cost_per_iteration * (1 + TOLERANCE):
                return True
        if c.min_throughput is not None:
            fastest = self.optimum(
                replace(constrained(spec, min_throughput=None), objective="max_throughput")
            )
            if fastest.lower_bound * c.min_throughput > 1 + TOLERANCE:
                return True
        return False

    def _optimise(self, spec: Spec) -> Optimum:
        done = self._search(spec, first=False)
        if done is None:
            return Optimum(None, math.inf, True)
        model, result = done
        if not result.complete:
            self.stopped += 1
        found = result.candidates
        if not found or self._capable(model, found[0]):
            return Optimum(found[0] if found else None, result.lower_bound, result.complete)
        limit = self._limit()
        budget = Budget(work=limit) if self.budget is None else self.budget.part(1.0, most=limit)
        proposals = plan_spec(spec, budget=budget, **self.options()).proposals
        return Optimum(proposals[0].candidate if proposals else None, 0.0, False)

    def proposal(self, spec: Spec) -> Proposal | None:
        """A plan of `spec` (the witness of `feasible`), built and simulated."""
        candidate = self.witness(spec)
        if candidate is None:
            return None
        model = self.model(spec)
        plan = build_plan(model, candidate.shape, candidate.assignment, spec_hash=spec_hash(spec))
        simulation = simulate(plan, spec, profiles=self.profiles, overhead=self.overhead)
        plan = replace(plan, predictions=predictions_of(simulation))
        return Proposal(candidate=candidate, plan=plan, simulation=simulation)


TOLERANCE = 1e-9
"""Relative slack of a bound's proof: the planning model's cost and the search's budget test
may differ by a rounding hair, so a bound refutes a budget or a floor only beyond it."""


def _key(spec: Spec) -> str:
    """The memo key: the whole normalised spec, so that one oracle may serve many specs."""
    return spec_hash(spec)
