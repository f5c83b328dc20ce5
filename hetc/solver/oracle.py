"""The planner's search as the diagnosis's oracle: feasibility probes that say whether their
answer is proven, optimisations with their lower bounds, and the plans every search has
found, kept as witnesses (`diagnosis` builds the least changes on them).

A probe is a `first_feasible` search: a plan, when there is one, is mostly found at once,
while a proof that there is none needs the whole search (or a necessary condition,
`feasibility`, or an optimisation's bound). Before it searches, a probe re-scores the plans
the oracle already knows under the probed spec (`witnesses`): a plan found while probing
one quota is a plan of every larger quota, and a floor fix can never be below the
throughput of a plan some search already found that meets the other constraints.

Work, never seconds, decides every answer (`budget`): each search has a limit of work and
all of them draw on one `Budget`, so the same spec gets the same answers on any machine
and at any load, and the diagnosis spends at most its budget plus the overrun stated at
`MIN_SEARCH_WORK`. A probe stopped at its limit with no plan proves nothing: it is
`unknown`, and the diagnosis states the range it did prove rather than guess.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from hetc.costmodel.memory import FrameworkOverhead
from hetc.costmodel.planning import Assignment, PlanningModel, Shape
from hetc.costmodel.profile import LayerProfile
from hetc.costmodel.simulate import simulate
from hetc.plan import capability_problems
from hetc.schema.spec import Constraints, Spec, spec_hash
from hetc.solver.budget import DEFAULT_WORK, RANK_WORK, Budget, build_work
from hetc.solver.build import build_plan
from hetc.solver.feasibility import cost_floor, necessary_conditions, time_floor
from hetc.solver.planner import Proposal, default_approximations, plan_spec, predictions_of
from hetc.solver.search import Candidate, SearchOptions, SearchResult, search
from hetc.solver.search.work import LEAF, WEIGHTS

__all__ = [
    "DIAGNOSIS_WORK",
    "MIN_SEARCH_WORK",
    "SEARCH_WORK",
    "TOLERANCE",
    "Optimum",
    "Oracle",
    "constrained",
]

SEARCH_WORK = DEFAULT_WORK // 25
"""Work limit of one search of the diagnosis (units of `search.work`; 4% of a command's
default budget, about a third of a second), before `WITNESS_FACTOR` raises it and the
budget cuts it: a probe stopped there with no plan is unknown. A plan, when there is one,
a first-feasible search mostly finds in a fraction of that; the probe that decides whether
a fix is least gets what is left of its share (`least._Bracket`). Every limit here is a
share of DEFAULT_WORK, so that a calibration of the work units moves them all alike."""

DIAGNOSIS_WORK = DEFAULT_WORK
"""The budget of one diagnosis where the caller gives none: what `hetc plan` spends on a
whole command."""

MIN_SEARCH_WORK = DEFAULT_WORK // 400
"""A search is started only while at least this much of the budget is left; below it, a
probe answers from what needs no search (a necessary condition, a known plan, a bound).
So the diagnosis spends at most its budget plus what its last search does past its limit
before it next checks it (the plan it shows is built only where its build fits in what is
left, `Oracle.proposal`): tests/test_diagnosis_fixes.py measures that overrun."""

WITNESS_FACTOR = 2.0
"""Every search may spend this many times the most work a probe that found a plan spent
so far (within the budget): on a large model (Llama-65B on 120 T4) finding a plan takes
more than SEARCH_WORK, and a probe cut shorter would miss plans that exist. Work counts
are the same on every machine, so this is as deterministic as the limit it raises."""

OPTIMUM_SHARE = 0.75
"""The share of what is left of the budget an optimisation may spend, where that is more
than a probe's limit (`Oracle._optimum_limit`)."""

WITNESS_SCAN = 64
"""The most recent known plans a probe re-scores (`Oracle.witnesses`): each costs a scored
leaf, and a bisection's probes, each finding a plan, would otherwise pay for all the plans
before them on every probe."""

PROOF_FACTOR = 1.5
"""Every search may spend this many times the most work a search that proved a spec
infeasible spent so far (within the budget): the probes of a fix near its answer mostly
cost a little more than the proofs under them (a proof at a larger quota searches more),
and a probe cut shorter stops unknown, its work lost."""

RERUN_FACTOR = 1.5
"""A search stopped short is run again only with at least this many times its limit
(`Oracle.optimum`; a probe, twice, `Oracle.status`): a rerun with little more mostly stops
short again."""

RUNNERS_UP = 7
"""Candidates an optimisation keeps beside its best (`SearchOptions.runners_up`): more
witnesses for the probes after it, at no cost to its pruning."""

CAPABILITY_RANK_WORK = RANK_WORK // 8
"""Units charged per rank for building a plan to check it against the capability matrix:
building alone, without the simulation `RANK_WORK` also pays for (0.1 s of 1.0 s on a plan
of 4,104 ranks, 2-core VM)."""

TOLERANCE = 1e-9
"""Relative slack of a bound's proof: the planning model's cost and the search's budget test
may differ by a rounding hair, so a bound refutes a budget or a floor only beyond it."""


def constrained(spec: Spec, **changes: Any) -> Spec:
    """`spec` with its constraints changed as given (None removes one)."""
    return replace(spec, constraints=replace(spec.constraints, **changes))


@dataclass(frozen=True, slots=True)
class Optimum:
    """What an optimising search under a spec's objective established."""

    candidate: Candidate | None
    """The best candidate found inside the capability matrix, known plans included (None
    when none was)."""
    lower_bound: float
    """No plan scores below this: the search's `SearchResult.lower_bound` (the best's value
    when it completed, infinite when it completed with none), or the necessary condition's
    floor (`feasibility.cost_floor`, `time_floor`) where that is higher."""
    complete: bool


@dataclass(frozen=True, slots=True)
class _Known:
    """A plan some search found: its shape and counts (re-scored under each probed spec),
    and the approximations of that search (`Oracle._usable`)."""

    shape: Shape
    assignment: Assignment
    approximations: frozenset[str]


class Oracle:
    """The planner's search as a feasibility test, memoised on the spec.

    `status` answers (a witness or None, proven): a spec that fails a necessary condition
    (`feasibility`) is infeasible without a search, as in `plan_spec`; one that a plan
    already known meets (`witnesses`) is feasible without one; otherwise a
    `first_feasible` search, which stops at the first plan meeting every constraint,
    answers, and one that ends without a plan is a proof of infeasibility. A search stopped
    at its limit without a plan is unknown; then, where the spec has a budget or a floor,
    the bound of the optimisation without it may still prove it (`_bound_refutes`).
    `work_limit` bounds each search and `budget` all of them together (module docstring);
    both None make every answer exact, however long it takes."""

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
        """Every step charges it; once less than MIN_SEARCH_WORK is left, no search starts
        (None: no bound of all the searches)."""
        self.witness_work = 0
        """The most work a probe that found a plan spent so far (see WITNESS_FACTOR)."""
        self.proof_work = 0
        """The most work a search that proved a spec infeasible spent (see PROOF_FACTOR)."""
        self.spent = 0
        """Units this oracle charged: its searches, re-scored plans and builds."""
        self.limited: Counter[str] = Counter()
        """What stopped searches short, by `SearchResult.stopped_by` (`work` also counts
        the searches not started for lack of budget): the words of an unproven answer."""
        self.unknown = 0
        """Feasibility probes that found no plan and did not prove that none exists."""
        self.profiles = tuple(profiles)
        self.overhead = overhead
        self.approximations = approximations
        self.measured_points = measured_points
        self._status: dict[str, tuple[Candidate | None, bool]] = {}
        self._probed_with: dict[str, int | None] = {}
        """The work limit each probe had (None: none), so that `status` probes again only
        with more."""
        self._optima: dict[str, Optimum] = {}
        self._optimised_with: dict[str, int | None] = {}
        self._refuted: dict[str, bool] = {}
        self._known: dict[str, list[_Known]] = {}
        self._seen: set[tuple[str, Shape, Assignment]] = set()
        self._capability: dict[tuple[str, Shape, Assignment], bool] = {}
        self.solves = 0

    @property
    def stopped(self) -> int:
        """Searches stopped short by a limit, or not started for lack of budget."""
        return sum(self.limited.values())

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

    @contextmanager
    def share(self, fraction: float) -> Iterator[None]:
        """Within the block, the budget is `fraction` of what is left of it (`Budget.part`,
        whose charges count in the whole): a step's share, so that one constraint family's
        hard proofs leave the next family its part."""
        whole = self.budget
        if whole is None:
            yield
            return
        self.budget = whole.part(fraction)
        try:
            yield
        finally:
            self.budget = whole

    def exhausted(self) -> bool:
        """Whether too little of the budget is left to start a search."""
        left = None if self.budget is None else self.budget.left()
        return left is not None and left < MIN_SEARCH_WORK

    def limited_by(self) -> str:
        """The flag that would have let the stopped searches go on, in words: what the
        message of an unproven answer tells the user to change."""
        if self.limited["time"]:
            return "--time-limit"
        if self.limited["cap"]:
            return "the wall-clock safety cap (--time-limit 0 lifts it)"
        if self.limited["work"] or self.limited["evaluations"]:
            return "--work-limit"
        return "an interruption"

    # -- answers -----------------------------------------------------------------------

    def status(self, spec: Spec, work: int | None = None) -> tuple[Candidate | None, bool]:
        """(a feasible candidate or None, whether that answer is proven). `work` gives the
        probe a limit of its own instead of `work_limit` (still cut to the budget); an
        unknown answer is first read again from what the oracle learnt since it was given
        (`_recheck`), then probed again where `work` allows more than the last probe had
        (at least twice as much, where the budget holds it: a probe repeated with little
        more work mostly stops unknown again)."""
        key = spec_hash(spec)
        limit = self._limit(work, raised=work is not None)
        if key not in self._status:
            self._probed_with[key] = limit
            self._status[key] = self._probe(spec, limit)
        elif self._status[key] == (None, False):
            self._status[key] = self._recheck(spec)
            before = self._probed_with[key]
            more = before is not None and (limit is None or limit > before)
            if self._status[key] == (None, False) and more and limit is not None:
                limit = self._limit(max(limit, 2 * (before or 0)), raised=True)
            if self._status[key] == (None, False) and more and limit != 0:
                self.unknown -= 1
                self._probed_with[key] = limit
                self._status[key] = self._probe(spec, limit)
        return self._status[key]

    def known_infeasible(self, spec: Spec) -> None:
        """Take `spec` as proven infeasible without a probe: a complete search of it under
        the same approximations (the caller's) found no plan."""
        key = spec_hash(spec)
        self._status[key] = (None, True)
        self._probed_with[key] = None

    def _recheck(self, spec: Spec) -> tuple[Candidate | None, bool]:
        """An unknown answer read again from what the oracle learnt since, without a
        search: a plan found later that meets `spec`, or an optimisation run later whose
        bound refutes it."""
        known = self.witnesses(spec)
        if known:
            self.unknown -= 1
            return known[0], True
        if self._bound_refutes(spec):
            self.unknown -= 1
            return None, True
        return None, False

    def witness(self, spec: Spec) -> Candidate | None:
        """Some feasible candidate, or None when none was found (proven or not: `status`)."""
        return self.status(spec)[0]

    def feasible(self, spec: Spec) -> bool:
        return self.witness(spec) is not None

    def proven_infeasible(self, spec: Spec) -> bool:
        found, proven = self.status(spec)
        return found is None and proven

    def refuted(self, spec: Spec) -> bool:
        """Whether `spec` fails a necessary condition (no search, no budget)."""
        key = spec_hash(spec)
        if key not in self._refuted:
            self._refuted[key] = necessary_conditions(self.model(spec)) is not None
        return self._refuted[key]

    def optimum(self, spec: Spec) -> Optimum:
        """The search's best candidate under `spec`'s objective inside the capability
        matrix, the known plans offered to it first, with its lower bound. One that stopped
        short is run again where the budget now allows RERUN_FACTOR times its limit (the
        fixes not yet proven least get what is left at the end), its best and its bound
        kept where the rerun's are worse."""
        key = spec_hash(spec)
        limit = self._optimum_limit()
        if key not in self._optima:
            self._optimised_with[key] = limit
            self._optima[key] = self._optimise(spec, limit)
            return self._optima[key]
        held, before = self._optima[key], self._optimised_with[key]
        if held.complete or before is None:
            return held
        if limit is None or limit >= RERUN_FACTOR * before:
            self._optimised_with[key] = limit
            again = self._optimise(spec, limit)
            best = min(
                (c for c in (held.candidate, again.candidate) if c is not None),
                key=Candidate.key,
                default=None,
            )
            self._optima[key] = Optimum(
                best, max(held.lower_bound, again.lower_bound), again.complete
            )
        return self._optima[key]

    def best(self, spec: Spec) -> Candidate | None:
        """`optimum`'s candidate."""
        return self.optimum(spec).candidate

    def witnesses(self, spec: Spec, model: PlanningModel | None = None) -> list[Candidate]:
        """The known plans (the WITNESS_SCAN most recent) that meet every constraint of
        `spec` (re-scored under it, each charged as a scored leaf) and that its own search
        could have found (`_usable`), best first under its objective."""
        model = model or self.model(spec)
        chosen = self._approximations(model)
        structure = _structure(spec)
        out = []
        for known in self._known.get(structure, [])[-WITNESS_SCAN:]:
            if not _usable(known, chosen):
                continue
            self._charge(WEIGHTS[LEAF])
            estimate = model.estimate(known.shape, known.assignment)
            if not estimate.feasible:
                continue
            candidate = Candidate(
                shape=known.shape,
                assignment=known.assignment,
                estimate=estimate,
                objective=spec.objective,
            )
            if self._capable(model, candidate):
                out.append(candidate)
        return sorted(out, key=Candidate.key)

    # -- searches ----------------------------------------------------------------------

    def _approximations(self, model: PlanningModel) -> frozenset[str]:
        if self.approximations is None:
            return default_approximations(model)
        return self.approximations

    def _limit(self, work: int | None = 0, *, raised: bool = False) -> int | None:
        """The work limit of the next search: `work_limit` (or `work` where `raised`),
        raised to WITNESS_FACTOR times the most a probe that found a plan spent and to
        PROOF_FACTOR times the most a proof spent (None: no limit); 0, so that no search
        starts, where the budget has less left than that: a probe cut short of what such
        searches take mostly stops unknown, and its work is better left to the steps
        after it (the next family's share, the decisive probe of a fix)."""
        floor = math.ceil(max(WITNESS_FACTOR * self.witness_work, PROOF_FACTOR * self.proof_work))
        base = work if raised else self.work_limit
        limit = None if base is None else max(base, floor)
        left = None if self.budget is None else self.budget.left()
        if left is None:
            return limit
        if limit is None:
            return left
        return limit if limit <= left else 0

    def _optimum_limit(self) -> int | None:
        """An optimisation's limit: `_limit`, or OPTIMUM_SHARE of what is left of the budget
        where that is more. Its bound proves every budget (floor) below its best infeasible
        at once, where each probe proves one value, so it is worth more than a probe."""
        limit = self._limit()
        left = None if self.budget is None else self.budget.left()
        if limit is None or left is None:
            return limit
        return max(limit, math.floor(OPTIMUM_SHARE * left))

    def _charge(self, units: int) -> None:
        self.spent += units
        if self.budget is not None:
            self.budget.charge(units)

    def _search(
        self,
        model: PlanningModel,
        *,
        first: bool,
        limit: int | None,
        seeds: Sequence[Candidate] = (),
    ) -> SearchResult | None:
        """One search of `model` under `limit` units; None where the budget has too little
        left to start one (counted as stopped by work)."""
        if self.exhausted() or (limit is not None and limit < MIN_SEARCH_WORK):
            self.limited["work"] += 1
            return None
        self.solves += 1
        chosen = self._approximations(model)
        seconds = None if self.budget is None else self.budget.seconds_left()
        options = SearchOptions(
            approximations=chosen,
            first_feasible=first,
            runners_up=0 if first else RUNNERS_UP,
            work_limit=limit,
            time_limit=seconds,
            safety_cap=self.budget is not None and self.budget.capped,
            seeds=tuple(seeds),
        )
        result = search(model, options)
        self._charge(result.work)
        if result.stopped_by:
            self.limited[result.stopped_by] += 1
        if result.candidates and first:
            self.witness_work = max(self.witness_work, result.work)
        if result.complete and not result.candidates:
            self.proof_work = max(self.proof_work, result.work)
        self._remember(model, chosen, result.candidates)
        return result

    def _remember(
        self, model: PlanningModel, chosen: frozenset[str], candidates: Sequence[Candidate]
    ) -> None:
        structure = _structure(model.spec)
        known = self._known.setdefault(structure, [])
        for c in candidates:
            if (structure, c.shape, c.assignment) not in self._seen:
                self._seen.add((structure, c.shape, c.assignment))
                known.append(_Known(c.shape, c.assignment, chosen))

    def _capable(self, model: PlanningModel, candidate: Candidate) -> bool:
        """Whether the runtime runs the plan of `candidate` (the capability matrix), cached:
        the cells a plan needs do not depend on quotas or constraints."""
        key = (_structure(model.spec), candidate.shape, candidate.assignment)
        if key not in self._capability:
            plan = build_plan(model, candidate.shape, candidate.assignment, spec_hash="")
            self._charge(CAPABILITY_RANK_WORK * sum(r.tp for s in plan.stages for r in s.replicas))
            training = model.spec.training
            self._capability[key] = not capability_problems(
                plan, zero_stage=training.zero_stage, precision=training.precision
            )
        return self._capability[key]

    def _probe(self, spec: Spec, limit: int | None) -> tuple[Candidate | None, bool]:
        if self.refuted(spec):
            return None, True
        model = self.model(spec)
        known = self.witnesses(spec, model)
        if known:
            return known[0], True
        result = self._search(model, first=True, limit=limit)
        if result is not None and result.candidates:
            if self._capable(model, result.candidates[0]):
                return result.candidates[0], True
            return self.best(spec), True
        if result is not None and result.complete:
            return None, True
        if self._bound_refutes(spec):
            return None, True
        self.unknown += 1
        return None, False

    def _bound_refutes(self, spec: Spec) -> bool:
        """Whether the lower bound of an optimisation already run without the budget
        (min_cost) or the floor (max_throughput) proves that no plan meets it. None is
        started here: a probe of another quota would pay for an optimisation no fix
        reads, while the fixes of a budget and a floor run theirs first
        (`least.budget_fix`, `floor_fix`), so their probes are refuted at once."""
        c = spec.constraints
        if c.max_cost_per_iteration is not None:
            cheapest = self._optima.get(
                spec_hash(
                    replace(constrained(spec, max_cost_per_iteration=None), objective="min_cost")
                )
            )
            if cheapest and cheapest.lower_bound > c.max_cost_per_iteration * (1 + TOLERANCE):
                return True
        if c.min_throughput is not None:
            fastest = self._optima.get(
                spec_hash(
                    replace(constrained(spec, min_throughput=None), objective="max_throughput")
                )
            )
            if fastest and fastest.lower_bound * c.min_throughput > 1 + TOLERANCE:
                return True
        return False

    def _optimise(self, spec: Spec, limit: int | None) -> Optimum:
        if self.refuted(spec):
            return Optimum(None, math.inf, True)
        model = self.model(spec)
        known = self.witnesses(spec, model)
        floor = cost_floor(model) if spec.objective == "min_cost" else time_floor(model)
        result = self._search(model, first=False, limit=limit, seeds=known[:1])
        if result is None:
            return Optimum(known[0] if known else None, floor, False)
        bound = max(floor, result.lower_bound)
        capable = [c for c in result.candidates if self._capable(model, c)]
        if capable or not result.candidates:
            return Optimum(capable[0] if capable else None, bound, result.complete)
        limit = self._limit()
        part = Budget(work=limit) if self.budget is None else self.budget.part(1.0, most=limit)
        proposals = plan_spec(spec, budget=part, **self.options()).proposals
        self.spent += part.spent
        found = proposals[0].candidate if proposals else None
        return Optimum(found, floor, False)

    def proposal(self, spec: Spec) -> Proposal | None:
        """A plan of `spec` (the witness of `feasible`), built and simulated, charged as
        `budget.build_work`; None where there is no witness, or where that charge does not
        fit in what is left of the budget (a plan of thousands of ranks may cost a tenth of
        a budget to simulate, and the diagnosis keeps within its budget)."""
        candidate = self.witness(spec)
        if candidate is None:
            return None
        model = self.model(spec)
        plan = build_plan(model, candidate.shape, candidate.assignment, spec_hash=spec_hash(spec))
        work = build_work(plan)
        if self.budget is not None and not self.budget.fits(work):
            self._charge(CAPABILITY_RANK_WORK * sum(r.tp for s in plan.stages for r in s.replicas))
            return None
        simulation = simulate(plan, spec, profiles=self.profiles, overhead=self.overhead)
        plan = replace(plan, predictions=predictions_of(simulation))
        self._charge(work)
        return Proposal(candidate=candidate, plan=plan, simulation=simulation)


def _structure(spec: Spec) -> str:
    """What a known plan's validity depends on besides quotas, constraints and the
    objective (which the re-scoring checks): the spec with those three normalised."""
    zones = tuple(
        replace(zone, pools=tuple(replace(p, quota=0) for p in zone.pools)) for zone in spec.zones
    )
    return spec_hash(
        replace(spec, zones=zones, constraints=Constraints(), objective="max_throughput")
    )


def _usable(known: _Known, chosen: frozenset[str]) -> bool:
    """Whether a spec searched under the approximations `chosen` may take `known` as a
    witness: always where the search is exact (a plan that exists, it finds); under an
    approximation, only a plan a search under the same approximations found, so that
    `hetc plan` on the spec, which searches that narrower space, finds a plan too."""
    return not chosen or known.approximations == chosen
