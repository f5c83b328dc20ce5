"""Money: what an iteration of a plan costs, per 1M tokens, and to train a token budget.

Cost per iteration = (every device of every rented node, used or idle) x its price x the
iteration time + (bytes crossing each ordered zone pair per iteration) x that pair's egress
price. Rented nodes are paid for in full: a replica that uses 2 of a node's 4 GPUs still pays 4.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hetc.costmodel.network import egress_cost
from hetc.plan import Plan
from hetc.schema.spec import Spec, Zone


@dataclass(frozen=True, kw_only=True, slots=True)
class IterationCost:
    """USD per iteration, split into its two sources."""

    compute: float
    egress: float

    @property
    def total(self) -> float:
        return self.compute + self.egress


def rental_rate(plan: Plan, spec: Spec) -> float:
    """USD per second for every rented node of `plan` at its pool's price."""
    prices = {(z.name, p.name): p.price for z in spec.zones for p in z.pools}
    rate = 0.0
    for node in plan.nodes:
        price = prices.get((node.zone, node.pool))
        if price is None:
            raise ValueError(f"node {node.id}: zone {node.zone!r} has no pool {node.pool!r}")
        rate += node.devices * price
    return rate


def iteration_cost(
    plan: Plan,
    spec: Spec,
    iteration_time: float,
    traffic: Mapping[tuple[str, str], float],
) -> IterationCost:
    """Cost of one iteration; `traffic` maps (from zone, to zone) to bytes per iteration."""
    zones: dict[str, Zone] = {z.name: z for z in spec.zones}
    egress = sum(
        egress_cost(nbytes, zones[source], zones[target], spec.network)
        for (source, target), nbytes in traffic.items()
    )
    return IterationCost(compute=rental_rate(plan, spec) * iteration_time, egress=egress)


def cost_per_million_tokens(cost: IterationCost, spec: Spec) -> float:
    """USD per 1M training tokens (global batch x sequence length per iteration)."""
    tokens = spec.training.global_batch_size * spec.training.seq_len
    return cost.total / tokens * 1e6


def budget_to_train(
    cost: IterationCost, iteration_time: float, spec: Spec
) -> tuple[float, float] | None:
    """(seconds, USD) to train `training.tokens`, or None when the spec sets no budget."""
    if spec.training.tokens is None:
        return None
    tokens_per_iteration = spec.training.global_batch_size * spec.training.seq_len
    iterations = spec.training.tokens / tokens_per_iteration
    return iterations * iteration_time, iterations * cost.total
