"""`--explain`: for each pool plan 1 leaves unused, the best plan that uses it and how it
compares with plan 1 by the simulator, or why no such plan exists; and the rule that no
answer is beaten by a plan the same command simulated (`never_dominated`).

The search ranks by the planning estimate and the simulator reranks only the best few, so a
forced re-plan that must use some pool can find a plan the simulator rates above plan 1 (the
estimate put it lower). A command that has simulated such a plan does not answer with the
worse one: it becomes plan 1, and the explanations are restated against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from hetc.schema.spec import Spec
from hetc.solver.budget import Budget
from hetc.solver.planner import PlanningResult, Proposal, plan_spec, simulated_objective
from hetc.units import fixed, format_usd

__all__ = [
    "EXPLAINED_AT_ONCE",
    "UNEXPLAINED",
    "Explanation",
    "explain_unused",
    "never_dominated",
    "pool_path",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Explanation:
    """Why one pool is not in the chosen plan: the best plan that uses it, and the loss, as
    text (`loss`) and as the facts the text says (for `hetc plan --json`)."""

    pool: str
    best_with: Proposal | None
    loss: str
    path: str
    """The pool's place in the spec, `zones[z].pools[p]`."""
    reason: str
    """`no-plan` (no feasible plan rents it), `loses` (its best plan is worse by the
    simulator), `tie` (equal by the simulator, lost on a tie-break), `simulator-prefers`
    (better by the simulator, ranked below plan 1 by the planning estimate) or `unexplained`
    (its part of the budget found no plan using it)."""
    value: float | None
    """The simulated objective (`simulated_objective`) of the best plan using it."""
    plan1_value: float
    """Plan 1's simulated objective, the number `value` is compared with."""
    at_quota: tuple[str, ...] = ()
    """The pools the best plan using it rents in full (`zones[z].pools[p]`): the quotas
    that cap that plan."""


def pool_path(spec: Spec, index: int) -> str:
    """`zones[z].pools[p]` of the `index`-th pool of the spec, counted zone by zone (the
    order of `PlanningModel.pools`)."""
    left = index
    for z, zone in enumerate(spec.zones):
        if left < len(zone.pools):
            return f"zones[{z}].pools[{left}]"
        left -= len(zone.pools)
    raise IndexError(f"the spec has no pool {index}")


def explain_unused(
    result: PlanningResult, spec: Spec, *, budget: Budget | None = None, **kwargs: Any
) -> list[Explanation]:
    """For each pool the best plan leaves unused: the best plan that uses it and how it
    compares with plan 1 on the spec's objective, by the simulator (the number `hetc plan`
    ranks and prints by), or why no such plan exists. Under `budget`, each pool's plan
    gets an equal part of what is left among the next `EXPLAINED_AT_ONCE` pools, and a pool
    whose part found nothing (or that comes after the budget is spent) is said to be
    unexplained, not to have no plan."""
    if not result.proposals:
        return []
    chosen = result.proposals[0]
    best = simulated_objective(spec, chosen.simulation)
    unused = [
        slot
        for slot, nodes in zip(result.model.pools, chosen.candidate.estimate.nodes, strict=True)
        if not nodes
    ]
    out = []
    for done, slot in enumerate(unused):
        left = len(unused) - done
        if budget is not None and budget.exhausted():
            out.append(_unexplained(slot.label, pool_path(spec, slot.index), best))
            continue
        options = {**kwargs, "approximations": result.approximations}
        path = pool_path(spec, slot.index)
        part = None if budget is None else budget.part(1 / min(left, EXPLAINED_AT_ONCE))
        forced = plan_spec(spec, must_use=frozenset({slot.index}), budget=part, **options)
        if not forced.proposals and not forced.search.complete:
            out.append(_unexplained(slot.label, path, best))
            continue
        if not forced.proposals:
            out.append(
                Explanation(
                    pool=slot.label,
                    best_with=None,
                    loss="no feasible plan uses it (memory, quota or the constraints rule it out)",
                    path=path,
                    reason="no-plan",
                    value=None,
                    plan1_value=best,
                )
            )
            continue
        out.append(_explained(result, spec, slot.index, forced.proposals[0], best))
    return out


def _explained(
    result: PlanningResult, spec: Spec, pool: int, other: Proposal, best: float
) -> Explanation:
    """The explanation of pool `pool` by `other`, the best plan known to use it, against plan
    1's simulated objective `best`."""
    value = simulated_objective(spec, other.simulation)
    rented = other.candidate.estimate.nodes
    return Explanation(
        pool=result.model.pools[pool].label,
        best_with=other,
        loss=_comparison(spec, value, best),
        path=pool_path(spec, pool),
        reason="tie" if value == best else "loses" if value > best else "simulator-prefers",
        value=value,
        plan1_value=best,
        at_quota=tuple(
            pool_path(spec, s.index)
            for s in result.model.pools
            if rented[s.index] and rented[s.index] >= s.pool.max_nodes
        ),
    )


def never_dominated(
    result: PlanningResult, spec: Spec, explanations: list[Explanation]
) -> tuple[PlanningResult, list[Explanation]]:
    """`result` and its explanations such that no plan the command simulated beats plan 1 by
    the simulator: where an explanation's best plan using a pool does (`simulator-prefers`),
    the plans known (the ranked ones and the explanations') are ranked again, as many as
    before, and every pool the new plan 1 leaves unused is explained by the best known plan
    that uses it (a pool with none keeps its explanation, against the new plan 1's value).
    `PlanningResult.promoted` says what happened; nothing changes where nothing beats plan 1."""
    if not result.proposals:
        return result, explanations
    first = simulated_objective(spec, result.proposals[0].simulation)
    known: dict[tuple[object, ...], Proposal] = {}
    for proposal in [*result.proposals, *(x.best_with for x in explanations if x.best_with)]:
        known.setdefault((proposal.candidate.shape, proposal.candidate.assignment), proposal)
    ranked = sorted(
        known.values(),
        key=lambda p: (simulated_objective(spec, p.simulation), p.candidate.key()),
    )
    best = simulated_objective(spec, ranked[0].simulation)
    if best >= first:
        return result, explanations
    winner = next(x for x in explanations if x.best_with is ranked[0])
    promoted = (
        f"plan 1 is the best plan using {winner.pool} that --explain found: the simulator"
        f" rates it {_percent(1 - best / first)} better than the search's plan 1 (the search"
        " ranks by its planning estimate)"
    )
    result = replace(result, proposals=tuple(ranked[: len(result.proposals)]), promoted=promoted)
    held = {x.path: x for x in explanations}
    restated: list[Explanation] = []
    for slot, nodes in zip(result.model.pools, ranked[0].candidate.estimate.nodes, strict=True):
        if nodes:
            continue
        using = [p for p in ranked if p.candidate.estimate.nodes[slot.index]]
        if using:
            restated.append(_explained(result, spec, slot.index, using[0], best))
        else:
            restated.append(replace(held[pool_path(spec, slot.index)], plan1_value=best))
    return result, restated


EXPLAINED_AT_ONCE = 4
"""Under a budget, `explain_unused` splits what is left over at most this many pools at a
time: with hundreds of unused pools an equal split would leave each too little to find any
plan, so the first pools get a search that can answer and the later ones what remains."""


def _unexplained(label: str, path: str, best: float) -> Explanation:
    """The entry of a pool whose part of the budget found no plan using it."""
    return Explanation(
        pool=label,
        best_with=None,
        loss=UNEXPLAINED,
        path=path,
        reason="unexplained",
        value=None,
        plan1_value=best,
    )


UNEXPLAINED = (
    "not explained within the budget: no plan using it was found in its part of the"
    " budget (raise --work-limit, or --exact for no limit)"
)


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
