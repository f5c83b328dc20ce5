"""Necessary conditions for a plan, checked on the planning model before any search.

Each condition is a sound bound on `PlanningModel.estimate` (the function the search
minimises and whose `problems` decide feasibility): when one fails, no candidate of any
shape is feasible, so the spec has no plan and the search need not run. A condition that
holds proves nothing; the search decides. The bounds read the same tables the search does
(`PlanningModel.tables`, `layer_compute`, `fits`), over every replica kind of a usable pool
and every microbatch size the model offers, so they see what the search sees.

Notation: B the global batch, L the layer sequence (embedding, blocks, output end), a kind
k = (pool, device, TP degree tp_k), mbs a microbatch size, N the devices that can be rented
(`devices_available`).

- max_gpus and whole nodes (`devices_available`): a candidate rents whole nodes and at most
  max_gpus devices, so a pool whose node is larger than max_gpus is unusable, and at most
  N = min(max_gpus, sum over pools of min(quota nodes, max_gpus // node size) x node size)
  devices are rented. N = 0: nothing can be rented.
- every layer held (`unheld_layer`): each layer lies in some stage, and a stage's layers
  [first, end) are the embedding plus blocks ([0, e), e >= 2), blocks plus the output end
  ([s, L), s >= 1), all of L, or blocks only. A kind holding a range needs
  `tables.peak_memory` <= capacity, which only grows with the microbatches in flight (>= 1)
  and only shrinks with the replica count D (ZeRO divides the sharded bytes by D <= N);
  among block-only ranges, the one-block range is the least. So a layer that no kind holds
  in any first-stage range, any last-stage range, the whole model, or (a block) alone, at
  one microbatch in flight and D = N, is held by no candidate: the memory constraint binds.
- devices for the model's state (`least_devices`): a rank's peak is at least its
  parameters times (replicated + sharded / D) bytes per parameter plus the fixed overhead
  (`peak_memory`'s backward and step moments, every other term >= 0). Summed over the D
  replicas of a stage, each of tp devices, the sharded bytes add up to one copy and the
  replicated ones to D >= 1 copies, so a stage needs at least
  sum over its layers of min_k tp_k x params_per_rank x (replicated + sharded) /
  (capacity - fixed) devices, and every candidate at least the sum over all layers (the
  tied output copy not counted, as when one stage holds the whole model). More than N:
  max_gpus or the quotas bind.
- the cost floor (`cost_floor`): T >= m t_i >= (B / (mbs D)) t_i for every stage i (the
  straggler period is at least t_i, m microbatches), t_i at least each of its replicas'
  forward + backward, and a replica's tp devices are each paid their pool's price for T.
  Summed over a stage's D replicas: cost >= (B / mbs) x sum over layers of
  min_k price_k tp_k time_k(layer, mbs), for the candidate's mbs, so at least the least of
  that over mbs (egress >= 0 only adds). Above the budget: the budget binds.
- the time floor (`time_floor`): the same busy device-seconds, (B / mbs) x sum over layers
  of min_k tp_k time_k, fit in N devices x T, and T >= F >= sum of each stage's one
  microbatch >= sum over layers of min_k time_k. 1 / T above the floor: the floor binds.

tests/test_solver_feasibility.py checks each bound against the search without a time limit
on small specs, and a property test that no bound ever refuses a spec the search solves.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from hetc.costmodel.planning import PlanningModel, ReplicaKind
from hetc.costmodel.tables import peak_memory

__all__ = [
    "Infeasible",
    "cost_floor",
    "devices_available",
    "least_devices",
    "necessary_conditions",
    "time_floor",
    "unheld_layer",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Infeasible:
    """A failed necessary condition: no candidate satisfies the spec."""

    binding: str
    """`memory`, `max_gpus`, `quota`, `max_gpus or quota`, `budget` or `throughput floor`."""
    reason: str
    change: str
    """The least change the bound allows, as `path: at least X` (never proven sufficient)."""


def _usable_nodes(model: PlanningModel, pool: int) -> int:
    """Nodes of one pool a candidate can rent: its quota, and none past max_gpus."""
    p = model.pools[pool].pool
    limit = model.spec.constraints.max_gpus
    return p.max_nodes if limit is None else min(p.max_nodes, limit // p.gpus_per_node)


def devices_available(model: PlanningModel) -> int:
    """N: the most devices any candidate can rent (whole nodes, quotas, max_gpus)."""
    total = sum(_usable_nodes(model, slot.index) * slot.pool.gpus_per_node for slot in model.pools)
    limit = model.spec.constraints.max_gpus
    return total if limit is None else min(total, limit)


def _points(model: PlanningModel) -> Iterator[tuple[ReplicaKind, int]]:
    """Every (kind of a usable pool, microbatch size) the search may use."""
    for kind in model.kinds:
        if _usable_nodes(model, kind.pool) < 1:
            continue
        for mbs in model.microbatch_sizes():
            if model.point_allowed(kind.device, kind.tp, mbs):
                yield kind, mbs


def _device_points(model: PlanningModel) -> set[tuple[str, int, int]]:
    """The distinct (device, TP, microbatch) of `_points`: what memory depends on."""
    return {(kind.device, kind.tp, mbs) for kind, mbs in _points(model)}


def unheld_layer(model: PlanningModel) -> int | None:
    """A layer (index in the layer sequence) that no stage range of any candidate can hold
    in any kind's memory; None when every layer can be held (see the module docstring)."""
    layers = model.blocks + 2
    dp = max(1, devices_available(model))
    held = [False] * layers
    for device, tp, mbs in sorted(_device_points(model)):
        if all(held):
            return None
        t = model.tables(device, tp, mbs)
        fitting = [
            (first, end)
            for first, end in _stage_ranges(layers)
            if peak_memory(t, first, end, dp, 1) <= t.capacity
        ]
        for first, end in fitting:
            for layer in range(first, end):
                held[layer] = True
    return next((layer for layer in range(layers) if not held[layer]), None)


def _stage_ranges(layers: int) -> Iterator[tuple[int, int]]:
    """The least stage ranges holding each layer: every first-stage range (the embedding
    and at least one block, or the whole model), every last-stage range, each block alone."""
    for end in range(2, layers + 1):
        yield 0, end
    for first in range(1, layers - 1):
        yield first, layers
        yield first, first + 1


def least_devices(model: PlanningModel) -> float:
    """The devices any candidate needs for its weights, gradients and optimizer state
    (fractional; a candidate rents at least its ceiling). Infinite when a layer fits no
    kind's memory at all."""
    layers = model.blocks + 2
    need = [math.inf] * layers
    for device, tp, mbs in sorted(_device_points(model)):
        t = model.tables(device, tp, mbs)
        room = t.capacity - t.fixed_overhead
        if room <= 0:
            continue
        per_parameter = max(
            t.backward_replicated + t.backward_sharded, t.step_replicated + t.step_sharded
        )
        for layer in range(layers):
            params = t.parameters[layer + 1] - t.parameters[layer]
            if layer == layers - 1:
                params = max(0, params - t.tied_copy)
            devices = tp * params * per_parameter / room
            if devices < need[layer]:
                need[layer] = devices
    return math.fsum(need)


def _least_per_layer(model: PlanningModel, mbs: int, weight: str) -> list[float] | None:
    """Per layer, the least over kinds at microbatch `mbs` of its forward + backward seconds
    times `weight`: `one` (1), `devices` (tp) or `money` (tp x its pool's price per device
    second). None when no kind may run at `mbs`."""
    least: list[float] | None = None
    for kind, m in _points(model):
        if m != mbs:
            continue
        price = model.pools[kind.pool].pool.price
        factor = {"one": 1.0, "devices": float(kind.tp), "money": kind.tp * price}[weight]
        times = [factor * x for x in model.layer_compute(kind.device, kind.tp, mbs)]
        least = times if least is None else list(map(min, least, times))
    return least


def cost_floor(model: PlanningModel) -> float:
    """USD per iteration no candidate goes below (the rental of the model's least work)."""
    best = math.inf
    for mbs in model.microbatch_sizes():
        money = _least_per_layer(model, mbs, "money")
        if money is not None:
            best = min(best, model.batch / mbs * math.fsum(money))
    return best


def time_floor(model: PlanningModel) -> float:
    """Seconds per iteration no candidate goes below: the least busy device-seconds over
    the devices available, or one microbatch through every layer on the fastest kind."""
    devices = devices_available(model)
    if devices < 1:
        return math.inf
    best = math.inf
    for mbs in model.microbatch_sizes():
        busy = _least_per_layer(model, mbs, "devices")
        alone = _least_per_layer(model, mbs, "one")
        if busy is not None and alone is not None:
            work = model.batch / mbs * math.fsum(busy) / devices
            best = min(best, max(work, math.fsum(alone)))
    return best


def necessary_conditions(model: PlanningModel) -> Infeasible | None:
    """The first necessary condition the spec fails (in the order of the module
    docstring), or None when it passes them all (then only a search can tell)."""
    spec = model.spec
    limit = spec.constraints.max_gpus
    available = devices_available(model)
    quota = sum(slot.pool.max_nodes * slot.pool.gpus_per_node for slot in model.pools)
    if available < 1:
        if quota < 1:
            return Infeasible(
                binding="quota",
                reason="no pool's quota holds one whole node",
                change="a pool's quota: at least its gpus_per_node",
            )
        node = min(slot.pool.gpus_per_node for slot in model.pools if slot.pool.max_nodes)
        return Infeasible(
            binding="max_gpus",
            reason=f"max_gpus {limit} is smaller than every pool's node (the least holds"
            f" {node} devices), and plans rent whole nodes",
            change=f"constraints.max_gpus: at least {node}",
        )
    layer = unheld_layer(model)
    if layer is not None:
        checkpointing = spec.training.activation_checkpointing
        return Infeasible(
            binding="memory",
            reason=f"layer {layer} of the model (0 is the embedding) fits no device's memory"
            " in any stage that can hold it, at microbatch 1 with every replica of the"
            f" quota sharing its state ({available} devices)",
            change="a device with more memory"
            + ("" if checkpointing else " (or training.activation_checkpointing: true)"),
        )
    need = math.ceil(least_devices(model) - 1e-9)
    if need > available:
        binding = [
            family
            for family, have in (("max_gpus", limit), ("quota", quota))
            if have is not None and have < need
        ]
        changes = []
        if limit is not None and limit < need:
            changes.append(f"constraints.max_gpus: at least {need}")
        if quota < need:
            changes.append(f"the quotas: at least {need} devices in all")
        return Infeasible(
            binding=" and ".join(binding) or "max_gpus",
            reason=f"the model's weights, gradients and optimizer state need at least {need}"
            f" devices, and at most {available} can be rented",
            change=", ".join(changes)
            or f"constraints.max_gpus: at least {need} (whole nodes of the pools)",
        )
    budget = spec.constraints.max_cost_per_iteration
    if budget is not None:
        least = cost_floor(model)
        if least > budget:
            return Infeasible(
                binding="budget",
                reason=f"no plan costs less than {least:.4g} USD per iteration (the model's"
                f" work at the cheapest rental), over the budget of {budget:.4g}",
                change=f"constraints.max_cost_per_iteration: at least {_down(least)}",
            )
    floor = spec.constraints.min_throughput
    if floor is not None:
        fastest = 1.0 / time_floor(model)
        if fastest < floor:
            return Infeasible(
                binding="throughput floor",
                reason=f"no plan does more than {fastest:.4g} iterations/s (the model's work"
                f" over all {available} devices at their best speed), under the floor of"
                f" {floor:.4g}",
                change=f"constraints.min_throughput: at most {_up(fastest)}",
            )
    return None


def _down(value: float) -> str:
    """`value` rounded down to 3 significant digits (a true "at least")."""
    if value <= 0:
        return "0"
    exponent = math.floor(math.log10(value)) - 2
    return f"{math.floor(value / 10.0**exponent) * 10.0**exponent:.3g}"


def _up(value: float) -> str:
    """`value` rounded up to 3 significant digits (a true "at most")."""
    if value <= 0:
        return "0"
    exponent = math.floor(math.log10(value)) - 2
    return f"{math.ceil(value / 10.0**exponent) * 10.0**exponent:.3g}"
