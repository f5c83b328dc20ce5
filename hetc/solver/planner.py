"""From a spec to ranked Plans: search, build, simulate, check capability (`explain` says why
a pool is unused, `diagnosis` why a spec has no plan).

The search scores candidates with the planning model (`costmodel.planning`); every returned plan
is then built and run through the event simulator, whose numbers become the plan's
`Predictions`. A plan outside the runtime's capability matrix is dropped, never returned.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from threading import Event
from typing import Any

from hetc.costmodel.memory import FrameworkOverhead
from hetc.costmodel.planning import PlanningModel
from hetc.costmodel.profile import LayerProfile
from hetc.costmodel.simulate import Simulation, simulate
from hetc.plan import Plan, Predictions, capability_problems
from hetc.schema.spec import Spec, spec_hash
from hetc.solver.budget import Budget, build_work
from hetc.solver.build import build_plan
from hetc.solver.deadline import Deadline
from hetc.solver.feasibility import Infeasible, necessary_conditions
from hetc.solver.search import (
    APPROXIMATIONS,
    Candidate,
    Progress,
    SearchOptions,
    SearchResult,
    search,
)

__all__ = [
    "LARGE_CLUSTER_DEVICES",
    "PlanningResult",
    "Proposal",
    "default_approximations",
    "plan_spec",
    "simulated_objective",
]

RERANKED = 4
"""Candidates the search returns at least, so that the simulator can rank them: the search
optimises the planning model's closed form, an upper bound of the simulated time (the
planning model prices every hop as the simulator does, but every pipeline as slow as its
slowest replica and the pipeline's sends on its period), so the best few by the closed form
are simulated and ranked by the simulator's objective."""

LARGE_CLUSTER_DEVICES = 64
"""Above this many rentable devices the `kind-profiles` approximation is on by default: on
the bench scenarios the exact search does not finish in a minute there. What the
approximation costs in plan quality is measured by bench/approximations.py --family and
kept in one place, `certificate.MEASURED_GAPS`, which the answers quote."""


SEARCH_SHARE = 0.6
"""The share of what is left of the budget when the search starts that the search may
spend; the rest is for what follows (the listing of runners-up, building and simulating the
ranked plans, `--explain`). Under a wall clock the search also overruns its limit by up to
its longest step between two checks (docs/planner.md, Budgets)."""

GRACE_SHARE = 2.0
"""A search that reaches its share with no candidate yet may go on to its first one for this
many times what was left when it started (`SearchOptions.work_grace`, `grace`), past the
budget: a plan 1 that comes late beats none."""

LIST_SHARE = 2.0
"""The listing search of the best `max(top, RERANKED)` may spend this many times what the
first search spent, or `LIST_FLOOR` where that is more (and no more than is left): where it
does not finish in that, the first search's own runners-up are ranked instead, so the work
after the search stays in proportion to it. On the Sailor scenarios the listing costs 1.0
to 2.2 times the first search, on the family a median of 1.8 (docs/planner.md, Budgets);
where it does not finish the reranking sees worse runners-up (plan 1 of 3 of the 11
scenarios was up to 0.9% slower at a share of 0.25)."""

LIST_FLOOR = 2_000_000
"""Units the listing search may always spend (about 0.2 s): on a small spec a listing of a
few times a tiny first search is still a fraction of a second, and the true best four are
worth it (a spec of two zones lost a plan 2.4% faster by the simulator at 2.4 times)."""


def default_approximations(model: PlanningModel) -> frozenset[str]:
    """Exact for small clusters, `kind-profiles` for large ones (see LARGE_CLUSTER_DEVICES)."""
    devices = sum(slot.pool.max_nodes * slot.pool.gpus_per_node for slot in model.pools)
    return frozenset({"kind-profiles"}) if devices > LARGE_CLUSTER_DEVICES else frozenset()


@dataclass(frozen=True, kw_only=True, slots=True)
class Proposal:
    """One ranked answer: the candidate, its Plan (with the simulator's predictions)."""

    candidate: Candidate
    plan: Plan
    simulation: Simulation


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanningResult:
    proposals: tuple[Proposal, ...]
    search: SearchResult
    approximations: frozenset[str]
    model: PlanningModel
    infeasible: Infeasible | None = None
    """The necessary condition the spec fails (`feasibility`), when one does: then no search
    ran and `search` is complete with no candidate."""
    cut: str | None = None
    """What the budget left out after the search, e.g. "reranked 2 of 4 candidates in
    the work budget"; None when nothing was."""
    promoted: str | None = None
    """Why plan 1 is not the search's reranked plan 1, when a plan the command simulated
    later beat it (`explain.never_dominated`); None when it is."""


def plan_spec(
    spec: Spec,
    *,
    profiles: Sequence[LayerProfile] = (),
    overhead: FrameworkOverhead | None = None,
    top: int = 1,
    approximations: frozenset[str] | None = None,
    eval_limit: int | None = None,
    time_limit: float | None = None,
    work_limit: int | None = None,
    budget: Budget | None = None,
    progress: Progress | None = None,
    must_use: frozenset[int] = frozenset(),
    measured_points: bool = False,
    stop: Event | None = None,
    seeds: Sequence[Candidate] = (),
) -> PlanningResult:
    """Search the spec and build the best `top` plans (fewer if fewer are feasible), ranked
    by the simulator. One search proves plan 1, pruning against the best alone and keeping
    its best RERANKED - 1 runners-up (`SearchOptions.runners_up`), so that the gap it
    states is reached as fast as a search for one plan can; `search` in the result is that
    one, the same whatever `top`. A second, seeded with its answer and given `LIST_SHARE`
    times its work (at least `LIST_FLOOR`), lists the best `max(top, RERANKED)` of distinct
    signature, which the simulator ranks; where it does not finish, the first search's list
    is ranked instead; none,
    without a search, when the spec fails a necessary condition (`feasibility`); with
    `measured_points`, only at the (device, microbatch, TP) points the profiles timed
    (`PlanningModel`). `seeds` are candidates of the same spec known beforehand (another
    search's), offered to the first search before anything else.

    `budget` bounds the whole call (`budget.Budget`: work, and a wall clock if it has one);
    where none is given, `work_limit` units and `time_limit` seconds (each None for none).
    The search gets `SEARCH_SHARE` of what is left; candidates after the first are built
    and simulated only while what the last one cost is still left (the first always is, so
    that there is a plan 1); `cut` says what was left out. Each step charges the budget
    what it spent."""
    if budget is None:
        clock = None if time_limit is None else Deadline.after(time_limit)
        budget = Budget(work=work_limit, clock=clock)
    unknown = sorted((approximations or frozenset()) - set(APPROXIMATIONS))
    if unknown:
        raise ValueError(f"unknown approximation(s) {unknown}; known: {sorted(APPROXIMATIONS)}")
    model = PlanningModel(
        spec, profiles=profiles, overhead=overhead, measured_points=measured_points
    )
    chosen = default_approximations(model) if approximations is None else approximations
    started = time.perf_counter()
    proof = necessary_conditions(model)
    if proof is not None:
        nothing = SearchResult(
            candidates=(),
            evaluations=0,
            complete=True,
            seconds=time.perf_counter() - started,
            lower_bound=math.inf,
            gap=None,
            lower_bound_all_plans=math.inf,
            gap_all_plans=None,
            stop_reason=f"infeasible before any search: {proof.reason}",
        )
        return PlanningResult(
            proposals=(), search=nothing, approximations=chosen, model=model, infeasible=proof
        )
    options = SearchOptions(
        runners_up=RERANKED - 1,
        approximations=chosen,
        eval_limit=eval_limit,
        progress=progress,
        must_use=must_use,
        stop=stop,
        seeds=tuple(seeds),
        **search_limits(budget, SEARCH_SHARE),
    )
    result = search(model, options)
    budget.charge(result.work)
    said = budget.stop_words(result.stopped_by, result.work)
    if said:
        result = replace(result, stop_reason=said)
    candidates = result.candidates
    if result.complete and result.candidates:
        # the best `top` (at least RERANKED) proven as the search proves them, seeded with
        # this search's answer; where its share does not let it finish, this list stands
        most = max(math.ceil(LIST_SHARE * result.work), LIST_FLOOR)
        listing = budget.part(1.0, most=most)
        again = replace(
            options,
            top=max(top, RERANKED),
            runners_up=0,
            progress=None,
            seeds=result.candidates,
            **search_limits(listing, 1.0),
        )
        listed = search(model, again)
        listing.charge(listed.work)
        if listed.complete:
            candidates = listed.candidates
    proposals, cut = rerank(model, spec, candidates, budget, profiles, overhead)
    ranked = sorted(proposals, key=lambda p: simulated_objective(spec, p.simulation))[:top]
    return PlanningResult(
        proposals=tuple(ranked), search=result, approximations=chosen, model=model, cut=cut
    )


def search_limits(budget: Budget, share: float) -> dict[str, Any]:
    """The limits of a search that may spend `share` of what is left of `budget`, as
    `SearchOptions` fields: that share of its work and of its clock, and a grace to a first
    candidate of `GRACE_SHARE` times what is left."""
    left = budget.left()
    seconds = budget.seconds_left()
    return {
        "work_limit": None if left is None else math.floor(share * left),
        "work_grace": 0 if left is None else math.floor(GRACE_SHARE * left),
        "time_limit": None if seconds is None else share * seconds,
        "grace": 0.0 if seconds is None else GRACE_SHARE * seconds,
        "safety_cap": budget.capped,
    }


def rerank(
    model: PlanningModel,
    spec: Spec,
    candidates: Sequence[Candidate],
    budget: Budget,
    profiles: Sequence[LayerProfile],
    overhead: FrameworkOverhead | None,
) -> tuple[list[Proposal], str | None]:
    """Build and simulate `candidates` in order while the budget holds what the last one
    cost (its `build_work`, and under a clock its seconds), charging each; the first always.
    Those outside the runtime's capability matrix are dropped. Returns the proposals and
    what the budget cut, if anything."""
    digest = spec_hash(spec)
    proposals: list[Proposal] = []
    considered = 0
    last_units, last_seconds = 0, 0.0
    why = ""
    for candidate in candidates:
        if proposals and not budget.fits(last_units):
            why = "the work budget"
            break
        seconds = budget.seconds_left()
        if proposals and seconds is not None and seconds < last_seconds:
            why = "the wall-clock safety cap" if budget.capped else "the time limit"
            break
        begun = time.perf_counter()
        considered += 1
        plan = build_plan(model, candidate.shape, candidate.assignment, spec_hash=digest)
        last_units = build_work(plan)
        budget.charge(last_units)
        training = spec.training
        if capability_problems(plan, zero_stage=training.zero_stage, precision=training.precision):
            continue
        simulation = simulate(plan, spec, profiles=profiles, overhead=overhead)
        plan = replace(plan, predictions=predictions_of(simulation))
        proposals.append(Proposal(candidate=candidate, plan=plan, simulation=simulation))
        last_seconds = time.perf_counter() - begun
    cut = None
    if considered < len(candidates):
        cut = f"reranked {considered} of {len(candidates)} candidates in {why}"
    return proposals, cut


def simulated_objective(spec: Spec, simulation: Simulation) -> float:
    """What the spec's objective minimises, by the simulator: USD per iteration for
    `min_cost`, else seconds per iteration."""
    if spec.objective == "min_cost":
        return simulation.cost.total
    return simulation.iteration_time


def predictions_of(simulation: Simulation) -> Predictions:
    """The Plan IR's predictions block from one simulation."""
    return Predictions(
        iteration_time=simulation.iteration_time,
        samples_per_second=simulation.samples_per_second,
        tokens_per_second=simulation.tokens_per_second,
        achieved_flops=simulation.achieved_flops,
        mfu=simulation.mfu,
        cost_per_iteration=simulation.cost.total,
        egress_cost_per_iteration=simulation.cost.egress,
        peak_memory={r.key: r.memory.total for r in simulation.ranks},
    )
