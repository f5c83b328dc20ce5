"""From a spec to ranked Plans: search, build, simulate, check capability; and, when nothing
fits, a diagnosis that names the binding constraint and the smallest change that fixes it.

The search scores candidates with the planning model (`costmodel.planning`); every returned plan
is then built and run through the event simulator, whose numbers become the plan's
`Predictions`. A plan outside the runtime's capability matrix is dropped, never returned.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from hetc.costmodel.memory import FrameworkOverhead
from hetc.costmodel.planning import PlanningModel
from hetc.costmodel.profile import LayerProfile
from hetc.costmodel.simulate import Simulation, simulate
from hetc.plan import Plan, Predictions, capability_problems
from hetc.schema.spec import Constraints, Spec, spec_hash
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
    "Diagnosis",
    "Explanation",
    "PlanningResult",
    "Proposal",
    "default_approximations",
    "diagnose",
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


# -- diagnosis -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Diagnosis:
    """Why no plan satisfies the spec, and the smallest change that makes one, verified."""

    binding: str
    """`budget`, `throughput floor`, `max_gpus`, `quota` or `memory`."""
    message: str
    change: str
    """The change in the spec's own terms (e.g. `constraints.max_cost_per_iteration: 1.45`)."""
    plan: Proposal | None
    """The plan the changed spec gets (None when no change found one)."""


def _with_constraints(spec: Spec, **changes: Any) -> Spec:
    return replace(spec, constraints=replace(spec.constraints, **changes))


def _best(spec: Spec, **kwargs: Any) -> Proposal | None:
    result = plan_spec(spec, **kwargs)
    return result.proposals[0] if result.proposals else None


def _round_up(value: float) -> float:
    """`value` rounded up at its 4th significant digit, so the suggested number is readable
    and the verification solve cannot fail by a rounding hair."""
    if value <= 0:
        return value
    scale = 10 ** (math.floor(math.log10(value)) - 3)
    return float(math.ceil(value / scale * (1 - 1e-12)) * scale)


def _round_down(value: float) -> float:
    scale = 10 ** (math.floor(math.log10(value)) - 3)
    return float(math.floor(value / scale * (1 + 1e-12)) * scale)


def _describe(proposal: Proposal) -> str:
    plan, e = proposal.plan, proposal.candidate.estimate
    devices: dict[str, int] = {}
    for stage in plan.stages:
        for r in stage.replicas:
            devices[r.device] = devices.get(r.device, 0) + r.tp
    used = ", ".join(f"{n} x {d}" for d, n in sorted(devices.items()))
    return (
        f"{len(plan.stages)} stage(s), {len(plan.pipelines)} pipeline(s), microbatch"
        f" {plan.microbatch_size}, {used}: {e.iteration_time:.4g} s and {e.cost:.4g} USD"
        " per iteration"
    )


def diagnose(spec: Spec, **kwargs: Any) -> Diagnosis:
    """Find the constraint that makes `spec` infeasible and the smallest change that fixes
    it, trying in order: the budget, the throughput floor, max_gpus, the quotas, memory. Each
    suggestion is verified by planning again with it applied."""
    c = spec.constraints
    free = _with_constraints(spec, max_cost_per_iteration=None, min_throughput=None)
    unconstrained = _best(free, **kwargs)
    if unconstrained is not None:
        if c.max_cost_per_iteration is None and c.min_throughput is None:
            raise ValueError("the spec is feasible: there is nothing to diagnose")
        return _objective_diagnosis(spec, c, **kwargs)
    relaxed = _relax_resources(spec)
    found = _best(relaxed, **kwargs)
    if found is not None:
        return _resource_diagnosis(spec, found, **kwargs)
    return Diagnosis(
        binding="memory",
        message=(
            "no layout fits any device's memory, even with every pool's quota and max_gpus"
            " lifted: the model (with its optimizer state and activations) needs devices with"
            " more memory, or activation_checkpointing, or a smaller microbatch or model"
        ),
        change="a device with more memory (or training.activation_checkpointing: true)",
        plan=None,
    )


def _objective_diagnosis(spec: Spec, c: Constraints, **kwargs: Any) -> Diagnosis:
    budget, floor = c.max_cost_per_iteration, c.min_throughput
    if budget is not None:
        cheapest = _best(
            replace(_with_constraints(spec, max_cost_per_iteration=None), objective="min_cost"),
            **kwargs,
        )
        if cheapest is not None:
            need = cheapest.candidate.estimate.cost
            if need > budget:
                suggestion = _round_up(need)
                fixed = _best(_with_constraints(spec, max_cost_per_iteration=suggestion), **kwargs)
                return Diagnosis(
                    binding="budget",
                    message=(
                        f"the cheapest feasible plan costs {need:.4g} USD/iteration, above your"
                        f" {budget:.4g}"
                        + (f"; at {suggestion:.4g} the plan is {_describe(fixed)}" if fixed else "")
                    ),
                    change=f"constraints.max_cost_per_iteration: {suggestion:.4g}",
                    plan=fixed,
                )
    if floor is not None:
        fastest = _best(
            replace(_with_constraints(spec, min_throughput=None), objective="max_throughput"),
            **kwargs,
        )
        if fastest is not None:
            best = 1.0 / fastest.candidate.estimate.iteration_time
            if best < floor:
                suggestion = _round_down(best)
                fixed = _best(_with_constraints(spec, min_throughput=suggestion), **kwargs)
                return Diagnosis(
                    binding="throughput floor",
                    message=(
                        f"the fastest feasible plan does {best:.4g} iterations/s, below your"
                        f" floor of {floor:.4g}"
                        + (f"; at {suggestion:.4g} the plan is {_describe(fixed)}" if fixed else "")
                    ),
                    change=f"constraints.min_throughput: {suggestion:.4g}",
                    plan=fixed,
                )
    fixed = _best(_with_constraints(spec, max_cost_per_iteration=None), **kwargs)
    return Diagnosis(
        binding="budget and throughput floor",
        message=(
            "each constraint can be met alone, but no plan meets the budget and the throughput"
            " floor together; without the budget the plan is "
            + (_describe(fixed) if fixed else "still infeasible")
        ),
        change="raise constraints.max_cost_per_iteration or lower constraints.min_throughput",
        plan=fixed,
    )


def _relax_resources(spec: Spec) -> Spec:
    """The spec with max_gpus dropped and every quota multiplied by 64 (whole nodes)."""
    zones = tuple(
        replace(z, pools=tuple(replace(p, quota=p.quota * 64) for p in z.pools)) for z in spec.zones
    )
    return replace(_with_constraints(spec, max_gpus=None), zones=zones)


def _resource_diagnosis(spec: Spec, found: Proposal, **kwargs: Any) -> Diagnosis:
    limit = spec.constraints.max_gpus
    if limit is not None:
        lifted = _best(_with_constraints(spec, max_gpus=None), **kwargs)
        if lifted is not None:
            need = lifted.candidate.estimate.devices
            fewest = _fewest_devices(spec, need, **kwargs)
            fixed = _best(_with_constraints(spec, max_gpus=fewest), **kwargs)
            return Diagnosis(
                binding="max_gpus",
                message=(
                    f"no plan fits in {limit} devices; the smallest feasible plan rents {fewest}"
                    + (f": {_describe(fixed)}" if fixed else "")
                ),
                change=f"constraints.max_gpus: {fewest}",
                plan=fixed,
            )
    model = PlanningModel(spec)
    needed = []
    for slot, nodes in zip(model.pools, found.candidate.estimate.nodes, strict=True):
        have = slot.pool.max_nodes
        if nodes > have:
            needed.append((slot, nodes * slot.pool.gpus_per_node))
    quotas = {(s.zone.name, s.pool.name): devices for s, devices in needed}
    zones = tuple(
        replace(
            z,
            pools=tuple(replace(p, quota=quotas.get((z.name, p.name), p.quota)) for p in z.pools),
        )
        for z in spec.zones
    )
    fixed = _best(replace(spec, zones=zones), **kwargs)
    change = ", ".join(f"{s.label} quota: {d}" for s, d in needed)
    return Diagnosis(
        binding="quota",
        message=(
            "the quotas are too small for any plan that fits in memory; with "
            + change
            + (f" the plan is {_describe(fixed)}" if fixed else "")
        ),
        change=change,
        plan=fixed,
    )


def _fewest_devices(spec: Spec, upper: int, **kwargs: Any) -> int:
    """The smallest max_gpus with a feasible plan, by bisection between 1 and `upper`."""
    low, high = 0, upper
    while high - low > 1:
        mid = (low + high) // 2
        if _best(_with_constraints(spec, max_gpus=mid), **kwargs) is None:
            low = mid
        else:
            high = mid
    return high


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
        head = f"the best plan using it does {1 / value:.4g} iterations/s"
        plan1 = f"plan 1's {1 / best:.4g}"
    else:
        head = f"the cheapest plan using it costs {value:.4g} USD/iteration"
        plan1 = f"plan 1's {best:.4g}"
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
