"""From a spec to ranked Plans: search, build, simulate, check capability; and `--explain`'s
best plan that uses each unused pool (`diagnosis` explains a spec with no plan).

The search scores candidates with the planning model (`costmodel.planning`); every returned plan
is then built and run through the event simulator, whose numbers become the plan's
`Predictions`. A plan outside the runtime's capability matrix is dropped, never returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from hetc.costmodel.memory import FrameworkOverhead
from hetc.costmodel.planning import PlanningModel
from hetc.costmodel.profile import LayerProfile
from hetc.costmodel.simulate import Simulation, simulate
from hetc.plan import Plan, Predictions, capability_problems
from hetc.schema.spec import Spec, spec_hash
from hetc.solver.build import build_plan
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
) -> PlanningResult:
    """Search the spec and build the best `top` plans (fewer if fewer are feasible), ranked
    by the simulator among the search's best `max(top, RERANKED)` candidates; with
    `measured_points`, only at the (device, microbatch, TP) points the profiles timed
    (`PlanningModel`)."""
    unknown = sorted((approximations or frozenset()) - set(APPROXIMATIONS))
    if unknown:
        raise ValueError(f"unknown approximation(s) {unknown}; known: {sorted(APPROXIMATIONS)}")
    model = PlanningModel(
        spec, profiles=profiles, overhead=overhead, measured_points=measured_points
    )
    chosen = default_approximations(model) if approximations is None else approximations
    result = search(
        model,
        SearchOptions(
            top=max(top, RERANKED),
            approximations=chosen,
            eval_limit=eval_limit,
            time_limit=time_limit,
            progress=progress,
            must_use=must_use,
        ),
    )
    digest = spec_hash(spec)
    proposals = []
    for candidate in result.candidates:
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
    """For each pool the best plan leaves unused: the best plan that uses it and by how much
    it loses on the spec's objective (or why no such plan exists)."""
    if not result.proposals:
        return []
    best = result.proposals[0].candidate
    model = result.model
    out = []
    for slot, nodes in zip(model.pools, best.estimate.nodes, strict=True):
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
        value = other.candidate.value
        if spec.objective == "max_throughput":
            loss = (
                f"the best plan using it does {1 / value:.4g} iterations/s,"
                f" {100 * (1 - best.value / value):.1f}% less than {1 / best.value:.4g}"
            )
        else:
            loss = (
                f"the cheapest plan using it costs {value:.4g} USD/iteration,"
                f" {100 * (value / best.value - 1):.1f}% more than {best.value:.4g}"
            )
        out.append(Explanation(pool=slot.label, best_with=other, loss=loss))
    return out
