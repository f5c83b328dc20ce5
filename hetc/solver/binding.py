"""`hetc plan --explain` for the pools plan 1 uses: how much of each pool's quota it rents
and, where it rents all of it, whether that quota is what binds. "Binds" is measured, not
guessed: the same search with that one quota doubled finds a better plan by the simulator,
or it does not (then the limit is elsewhere: the batch, the network, the constraints).
`explain_unused` (in `planner`) answers for the pools plan 1 leaves out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hetc.costmodel.planning import PoolSlot
from hetc.schema.spec import Spec
from hetc.solver.planner import PlanningResult, plan_spec, simulated_objective
from hetc.units import format_duration, format_usd, plural

__all__ = ["explain_used", "with_quota"]


def with_quota(spec: Spec, slot: PoolSlot, quota: int) -> Spec:
    """`spec` with the quota (devices) of `slot`'s pool set to `quota`, nothing else changed."""
    zones = tuple(
        replace(
            zone,
            pools=tuple(
                replace(pool, quota=quota) if pool is slot.pool and zone is slot.zone else pool
                for pool in zone.pools
            ),
        )
        for zone in spec.zones
    )
    return replace(spec, zones=zones)


def explain_used(result: PlanningResult, spec: Spec, **kwargs: Any) -> list[str]:
    """One line per pool plan 1 rents: nodes rented of the quota, and for a pool rented in
    full, what the best plan with twice its quota would gain (the simulator's objective,
    searched with plan 1's approximations and `kwargs`, e.g. its time limit: a search that
    stops early without a better plan leaves the question open, and says so); then whether
    plan 1 is at `max_gpus`."""
    if not result.proposals:
        return []
    chosen = result.proposals[0]
    best = simulated_objective(spec, chosen.simulation)
    lines = []
    for slot, nodes in zip(result.model.pools, chosen.candidate.estimate.nodes, strict=True):
        if not nodes:
            continue
        quota = slot.pool.max_nodes
        head = f"{slot.label}: plan 1 rents {nodes} of its {plural(quota, 'node')}"
        if nodes < quota:
            lines.append(f"{head}; the search found no better plan that rents more")
            continue
        options = {**kwargs, "approximations": result.approximations}
        doubled = with_quota(spec, slot, 2 * slot.pool.quota)
        wider = plan_spec(doubled, **options)
        value = (
            simulated_objective(doubled, wider.proposals[0].simulation) if wider.proposals else best
        )
        if value < best:
            lines.append(
                f"{head}, its whole quota, and the quota binds: with twice the quota the best"
                f" plan {_gain(spec, value, best)}"
            )
        elif not wider.search.complete:
            lines.append(
                f"{head}, its whole quota; with twice the quota the search found no better plan"
                f" before it stopped ({wider.search.stop_reason}), so whether it binds is open"
            )
        else:
            lines.append(
                f"{head}, its whole quota, but it does not bind: twice the quota gives no"
                " better plan, so the limit is elsewhere (the global batch, the network or the"
                " constraints)"
            )
    cap = spec.constraints.max_gpus
    if cap is not None and chosen.candidate.estimate.devices >= cap:
        lines.append(f"constraints.max_gpus binds: plan 1 uses all {plural(cap, 'GPU')}")
    return lines


def _gain(spec: Spec, value: float, best: float) -> str:
    """What a better objective value is, said in the objective's unit beside plan 1's."""
    if spec.objective == "min_cost":
        return (
            f"costs {format_usd(value)} per iteration ({100 * (1 - value / best):.1f}% less"
            f" than plan 1's {format_usd(best)})"
        )
    return (
        f"takes {format_duration(value)} per iteration ({100 * (1 - value / best):.1f}% less"
        f" than plan 1's {format_duration(best)})"
    )
