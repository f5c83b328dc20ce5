"""From a spec to ranked Plans: search, build, simulate, check capability; and `--explain`'s
best plan that uses each unused pool (`diagnosis` explains a spec with no plan).

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
from hetc.solver.build import build_plan
from hetc.solver.feasibility import Infeasible, necessary_conditions
from hetc.solver.search import (
    APPROXIMATIONS,
    Candidate,
    Progress,
    SearchOptions,
    SearchResult,
    search,
)
from hetc.units import fixed, format_usd

__all__ = [
    "INTERACTIVE_TIME_LIMIT",
    "LARGE_CLUSTER_DEVICES",
    "Explanation",
    "PlanningResult",
    "Proposal",
    "default_approximations",
    "explain_unused",
    "plan_spec",
]

RERANKED = 4
"""Candidates the search returns at least, so that the simulator can rank them: the search
optimises the planning model's closed form, an upper bound of the simulated time (the
planning model prices every hop as the simulator does, but every pipeline as slow as its
slowest replica and the pipeline's sends on its period), so the best few by the closed form
are simulated and ranked by the simulator's objective."""

LARGE_CLUSTER_DEVICES = 64
"""Above this many rentable devices the `kind-profiles` approximation is on by default: on
the bench scenarios the exact search does not finish in a minute there, while
bench/approximations.py measures its gap on the random small instances of the exactness
tests (optimal on 77 of 80 feasible ones, worst gap 17.7%, mean 0.25%)."""


INTERACTIVE_TIME_LIMIT = 8.0
"""Search seconds `hetc plan` and `hetc compile` allow unless told otherwise (`--exact`
lifts it): with building and simulating the best few, an answer within 10 s on any spec;
the answer states the gap it has proven (`certificate`)."""


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


def plan_spec(
    spec: Spec,
    *,
    profiles: Sequence[LayerProfile] = (),
    overhead: FrameworkOverhead | None = None,
    top: int = 1,
    approximations: frozenset[str] | None = None,
    eval_limit: int | None = None,
    time_limit: float | None = None,
    progress: Progress | None = None,
    must_use: frozenset[int] = frozenset(),
    measured_points: bool = False,
    stop: Event | None = None,
) -> PlanningResult:
    """Search the spec and build the best `top` plans (fewer if fewer are feasible), ranked
    by the simulator among the search's best `max(top, RERANKED)` candidates (for `top` above
    RERANKED, a second search lists them, so that `search` in the result, the one that chose
    plan 1, does not depend on `top`; a search stopped by a limit lists only its RERANKED);
    none, without a search, when the spec fails a necessary condition (`feasibility`); with
    `measured_points`, only at the (device, microbatch, TP) points the profiles timed
    (`PlanningModel`)."""
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
        top=RERANKED,
        approximations=chosen,
        eval_limit=eval_limit,
        time_limit=time_limit,
        progress=progress,
        must_use=must_use,
        stop=stop,
    )
    result = search(model, options)
    candidates = result.candidates
    if top > RERANKED and result.complete:
        # a top-K search prunes less as K grows; the search that chose plan 1 (and whose
        # count `hetc plan` prints) is the same whatever --top, and only the list is longer
        candidates = search(model, replace(options, top=top, progress=None)).candidates
    digest = spec_hash(spec)
    proposals = []
    for candidate in candidates:
        plan = build_plan(model, candidate.shape, candidate.assignment, spec_hash=digest)
        training = spec.training
        if capability_problems(plan, zero_stage=training.zero_stage, precision=training.precision):
            continue
        simulation = simulate(plan, spec, profiles=profiles, overhead=overhead)
        plan = replace(plan, predictions=predictions_of(simulation))
        proposals.append(Proposal(candidate=candidate, plan=plan, simulation=simulation))
    ranked = sorted(proposals, key=lambda p: simulated_objective(spec, p.simulation))[:top]
    return PlanningResult(
        proposals=tuple(ranked), search=result, approximations=chosen, model=model
    )


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


# -- explanation -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Explanation:
    """Why one pool is not in the chosen plan: the best plan that uses it, and the loss."""

    pool: str
    best_with: Proposal | None
    loss: str


def explain_unused(result: PlanningResult, spec: Spec, **kwargs: Any) -> list[Explanation]:
    """For each pool the best plan leaves unused: the best plan that uses it and how it
    compares with plan 1 on the spec's objective, by the simulator (the number `hetc plan`
    ranks and prints by), or why no such plan exists."""
    if not result.proposals:
        return []
    chosen = result.proposals[0]
    best = simulated_objective(spec, chosen.simulation)
    out = []
    for slot, nodes in zip(result.model.pools, chosen.candidate.estimate.nodes, strict=True):
        if nodes:
            continue
        options = {**kwargs, "approximations": result.approximations}
        forced = plan_spec(spec, must_use=frozenset({slot.index}), **options)
        if not forced.proposals:
            out.append(
                Explanation(
                    pool=slot.label,
                    best_with=None,
                    loss="no feasible plan uses it (memory, quota or the constraints rule it out)",
                )
            )
            continue
        other = forced.proposals[0]
        value = simulated_objective(spec, other.simulation)
        out.append(
            Explanation(pool=slot.label, best_with=other, loss=_comparison(spec, value, best))
        )
    return out


def _comparison(spec: Spec, value: float, best: float) -> str:
    """How the best plan using a pool (`value`) compares with plan 1 (`best`), both the
    simulator's objective, lower is better: a tie said as one, not as a loss of 0.0%."""
    throughput = spec.objective == "max_throughput"
    if throughput:
        head = f"the best plan using it does {fixed(1 / value)} iterations/s"
        plan1 = f"plan 1's {fixed(1 / best)}"
    else:
        head = f"the cheapest plan using it costs {format_usd(value)} per iteration"
        plan1 = f"plan 1's {format_usd(best)}"
    if value == best:
        return (
            f"{head}, the same as plan 1 by the simulator: it loses only on a tie-break"
            " (of equal plans, one is chosen)"
        )
    if throughput:
        change = 1 - best / value
        word = "less" if change > 0 else "more"
    else:
        change = value / best - 1 if best else math.inf
        word = "more" if change > 0 else "less"
    text = f"{head}, {_percent(abs(change))} {word} than {plan1}"
    if value < best:
        text += (
            " by the simulator; the search ranks by its planning estimate, which put this plan"
            " below plan 1"
        )
    return text


def _percent(fraction: float) -> str:
    """A percentage that does not round a real difference to 0.0%."""
    if math.isinf(fraction):
        return "infinitely"
    percent = 100 * fraction
    return f"{percent:.1f}%" if percent >= 0.05 else f"{percent:.2g}%"
