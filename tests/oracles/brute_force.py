"""The planner's optimum by exhaustive enumeration: the oracle the search is tested against.

Written without reading the search's data structures: the pools and replica kinds are derived
from the spec here, and every candidate (microbatch size, pipeline degree, data-parallel
degree, stage split, replica counts per kind in every stage) is scored by
`PlanningModel.estimate`, the one function both sides share because it defines the objective.
The only pruning is by resources, which can only grow as stages are added: a partial
assignment needing more devices of a pool than its quota allows, or more devices in all than
max_gpus, makes every completion infeasible. Mixed-TP stages under ZeRO are skipped because
the capability matrix forbids them outright.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import combinations, pairwise

from hetc.costmodel.planning import Assignment, Estimate, PlanningModel, Shape
from hetc.schema import Spec

__all__ = ["DerivedKind", "brute_force", "candidates", "derive_kinds"]


@dataclass(frozen=True, slots=True)
class DerivedKind:
    pool: int
    """Position of the pool, zones in spec order and pools in zone order."""
    device: str
    tp: int


def derive_kinds(spec: Spec) -> list[DerivedKind]:
    """Replica kinds straight from the spec: for each pool, every TP degree that is a power of
    two dividing the node's devices, the heads, the KV heads and the FFN width."""
    arch = spec.model
    heads = arch.heads
    kv_heads = arch.kv_heads if arch.kv_heads is not None else heads
    ffn = arch.ffn if arch.ffn is not None else 4 * arch.hidden
    kinds = []
    pools = [pool for zone in spec.zones for pool in zone.pools]
    for index, pool in enumerate(pools):
        for exponent in range(pool.gpus_per_node.bit_length()):
            tp = 2**exponent
            if all(n % tp == 0 for n in (pool.gpus_per_node, heads, kv_heads, ffn)):
                kinds.append(DerivedKind(index, pool.device, tp))
    return kinds


def _compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every tuple of `parts` positive integers summing to `total`."""
    for cuts in combinations(range(1, total), parts - 1):
        edges = (0, *cuts, total)
        yield tuple(b - a for a, b in pairwise(edges))


def _stage_options(
    kinds: list[tuple[int, DerivedKind]], dp: int, mixed_tp: bool, pools: int
) -> list[tuple[tuple[tuple[int, int], ...], tuple[int, ...]]]:
    """Every way one stage may run its D replicas: (kind index, count) pairs over a non-empty
    set of kinds with positive counts summing to D, and the devices it takes per pool."""
    options = []
    for size in range(1, min(dp, len(kinds)) + 1):
        for chosen in combinations(kinds, size):
            if not mixed_tp and len({kind.tp for _, kind in chosen}) > 1:
                continue
            for counts in _compositions(dp, size):
                devices = [0] * pools
                for (_, kind), count in zip(chosen, counts, strict=True):
                    devices[kind.pool] += count * kind.tp
                stage = tuple(
                    (index, count) for (index, _), count in zip(chosen, counts, strict=True)
                )
                options.append((stage, tuple(devices)))
    return options


def candidates(model: PlanningModel) -> Iterator[tuple[Shape, Assignment, Estimate]]:
    """Every candidate whose devices fit the quotas and max_gpus, with its estimate."""
    spec = model.spec
    derived = derive_kinds(spec)
    by_pool_tp = {(k.pool, k.tp): k.index for k in model.kinds}
    # The model's numbering of our kinds (a missing kind fails here, loudly).
    kinds = sorted((by_pool_tp[k.pool, k.tp], k) for k in derived)
    pools = [pool for zone in spec.zones for pool in zone.pools]
    capacity = [(p.quota // p.gpus_per_node) * p.gpus_per_node for p in pools]
    limit = spec.constraints.max_gpus
    total = min(sum(capacity), limit) if limit is not None else sum(capacity)
    batch = spec.training.global_batch_size
    blocks = spec.model.layers
    mixed_tp = spec.training.zero_stage == 0
    for mbs in range(1, min(16, batch) + 1):
        if batch % mbs:
            continue
        for stages in range(1, blocks + 1):
            for dp in range(1, batch // mbs + 1):
                if stages * dp > total:
                    break
                options = [
                    o
                    for o in _stage_options(kinds, dp, mixed_tp, len(pools))
                    if sum(o[1]) <= total
                    and all(d <= c for d, c in zip(o[1], capacity, strict=True))
                ]
                for cuts in combinations(range(1, blocks), stages - 1):
                    shape = Shape(microbatch=mbs, boundaries=(0, *cuts, blocks), pipelines=dp)
                    for assignment in _assignments(options, stages, capacity, total):
                        yield shape, assignment, model.estimate(shape, assignment)


def _assignments(
    options: list[tuple[tuple[tuple[int, int], ...], tuple[int, ...]]],
    stages: int,
    capacity: list[int],
    total: int,
) -> Iterator[Assignment]:
    """Every choice of one option per stage whose summed devices stay within the limits."""

    def extend(
        prefix: tuple[tuple[tuple[int, int], ...], ...], used: tuple[int, ...]
    ) -> Iterator[Assignment]:
        if len(prefix) == stages:
            yield prefix
            return
        for stage, devices in options:
            now = tuple(u + d for u, d in zip(used, devices, strict=True))
            if sum(now) > total or any(n > c for n, c in zip(now, capacity, strict=True)):
                continue
            yield from extend((*prefix, stage), now)

    yield from extend((), (0,) * len(capacity))


def brute_force(
    spec: Spec, model: PlanningModel | None = None
) -> tuple[float, Shape, Assignment] | None:
    """The least objective over every feasible candidate (seconds per iteration for
    max_throughput, USD per iteration for min_cost), a candidate reaching it, or None."""
    model = model or PlanningModel(spec)
    throughput = spec.objective == "max_throughput"
    best: tuple[float, Shape, Assignment] | None = None
    for shape, assignment, estimate in candidates(model):
        if not estimate.feasible:
            continue
        value = estimate.iteration_time if throughput else estimate.cost
        if best is None or value < best[0]:
            best = (value, shape, assignment)
    return best
