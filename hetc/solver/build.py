"""Turn a scored candidate (shape + replica counts) into a Plan: nodes, placement, pipelines,
batch shares.

Three rules, each chosen so the plan is never slower than the planner's estimate says:

- Placement: each pool's replicas are laid on its nodes largest TP first, then by stage. TP
  degrees are powers of two dividing the node's device count, so sequential placement never
  splits a replica across nodes and fills every node but the last: the node count is exactly
  ceil(devices / gpus_per_node), as the planning model charges.
- Pairing: pipeline k runs the k-th fastest replica of every stage (ties by kind, then by
  position). Pairing fast with fast makes some pipelines faster than the model's all-slowest
  bound instead of making every pipeline as slow as its slowest member.
- Shares: every pipeline gets at least one microbatch; the rest go, as if one at a time, to the
  pipeline that would finish earliest with it, its finish time being F_p + (m_p - 1) S_p
  (the closed form's per-pipeline fill and straggler period). Each pipeline's finish time
  grows with its count, so this greedy minimises the slowest pipeline's finish time exactly,
  and the shares add up to the global batch. `batch_shares` computes the greedy's outcome in
  closed form (a threshold found by bisection), so building is O(pipelines), not
  O(microbatches).

A stage's replicas are listed grouped by kind (kinds are numbered pool by pool, zones in spec
order), so the data-parallel ring visits each zone's replicas together.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from itertools import pairwise

from hetc import __version__
from hetc.costmodel.planning import Assignment, PlanningModel, Shape
from hetc.plan import Node, Pipeline, Plan, Replica, Stage

__all__ = ["batch_shares", "build_plan", "place_replicas"]


def batch_shares(fill: list[float], period: list[float], microbatches: int) -> list[int]:
    """Integer microbatch counts, each >= 1 and summing to `microbatches`, that minimise
    max_p fill[p] + (count[p] - 1) * period[p]; ties go to the lower pipeline index.

    The greedy of the module docstring hands out the K = microbatches - pipelines smallest
    (value, pipeline) pairs of {(fill[p] + c * period[p], p) : c >= 1}, each pipeline's values
    non-decreasing in c. This computes that set directly, in O(pipelines) per step of a
    bisection over the float threshold T* (the K-th smallest value): every value below T*
    is taken, and pipelines tied at T* take the remaining ones in index order. The work is
    O(pipelines x 64-odd bisection steps), whatever the microbatch count."""
    pipelines = len(fill)
    if microbatches < pipelines:
        raise ValueError(f"{microbatches} microbatches cannot feed {pipelines} pipelines")
    extra = microbatches - pipelines
    if extra == 0:
        return [1] * pipelines
    values = [f + p for f, p in zip(fill, period, strict=True)]
    low = min(values)
    high = max(f + extra * p for f, p in zip(fill, period, strict=True))
    if _taken(fill, period, low, extra) >= extra:
        high = low
    else:
        while math.nextafter(low, math.inf) < high:
            middle = low + (high - low) / 2
            if _taken(fill, period, middle, extra) >= extra:
                high = middle
            else:
                low = middle
    below = [_count(f, p, high, extra, strict=True) for f, p in zip(fill, period, strict=True)]
    left = extra - sum(below)
    counts = []
    for f, p, taken in zip(fill, period, below, strict=True):
        tied = min(_count(f, p, high, extra, strict=False) - taken, left)
        left -= tied
        counts.append(1 + taken + tied)
    return counts


def _count(fill: float, period: float, threshold: float, cap: int, *, strict: bool) -> int:
    """How many c in 1..cap have fill + c * period below (strict) or at most `threshold`,
    evaluated with the greedy's own float expression so that ties fall identically."""

    def inside(c: int) -> bool:
        value = fill + c * period
        return value < threshold if strict else value <= threshold

    if period <= 0:
        return cap if inside(1) else 0
    guess = max(0, min(cap, math.floor((threshold - fill) / period)))
    while guess > 0 and not inside(guess):
        guess -= 1
    while guess < cap and inside(guess + 1):
        guess += 1
    return guess


def _taken(fill: list[float], period: list[float], threshold: float, cap: int) -> int:
    """Values at most `threshold` over all pipelines (each capped at `cap`)."""
    return sum(
        _count(f, p, threshold, cap, strict=False) for f, p in zip(fill, period, strict=True)
    )


def place_replicas(
    model: PlanningModel, requests: Mapping[int, Sequence[tuple[int, int, Hashable]]]
) -> tuple[list[Node], dict[Hashable, Replica]]:
    """Nodes for every pool and a Replica per request: `requests[pool]` lists (TP, stage,
    key) triples. Largest TP first, then by stage, packed sequentially (see the module
    docstring for why that never splits a replica and rents ceil(devices / node) nodes)."""
    nodes: list[Node] = []
    placed: dict[Hashable, Replica] = {}
    for slot in model.pools:
        items = sorted(requests.get(slot.index, ()), key=lambda r: (-r[0], r[1]))
        gpn = slot.pool.gpus_per_node
        used = sum(tp for tp, _, _ in items)
        ids = [f"{slot.pool.name}@{slot.zone.name}/n{k}" for k in range(-(-used // gpn))]
        nodes += [
            Node(
                id=node_id,
                zone=slot.zone.name,
                region=slot.zone.region,
                pool=slot.pool.name,
                device=slot.pool.device,
                devices=gpn,
            )
            for node_id in ids
        ]
        position = 0
        for tp, _stage, key in items:
            node, local = divmod(position, gpn)
            placed[key] = Replica(
                device=slot.pool.device,
                tp=tp,
                node=ids[node],
                local_ranks=tuple(range(local, local + tp)),
            )
            position += tp
    return nodes, placed


def build_plan(
    model: PlanningModel, shape: Shape, assignment: Assignment, *, spec_hash: str
) -> Plan:
    """The Plan for one candidate (which must be consistent: counts add up to D per stage)."""
    kinds = model.kinds
    requests: dict[int, list[tuple[int, int, Hashable]]] = defaultdict(list)
    order = 0
    for stage, counts in enumerate(assignment):
        for kind, count in counts:
            for _ in range(count):
                requests[kinds[kind].pool].append((kinds[kind].tp, stage, order))
                order += 1
    nodes, placed = place_replicas(model, requests)
    stages, rank_orders = [], []
    order = 0
    for stage, counts in enumerate(assignment):
        first, end = model.layer_range(shape, stage)
        replicas: list[Replica] = []
        speed: list[tuple[float, int, int]] = []
        for kind, count in counts:
            fb = model.stage_time(kind, shape.microbatch, first, end)[0]
            for _ in range(count):
                speed.append((fb, kind, len(replicas)))
                replicas.append(placed[order])
                order += 1
        stages.append(
            Stage(
                first_block=shape.boundaries[stage],
                end_block=shape.boundaries[stage + 1],
                replicas=tuple(replicas),
            )
        )
        rank_orders.append([(index, kind, fb) for fb, kind, index in sorted(speed)])
    pipelines = _pipelines(model, shape, rank_orders)
    return Plan(
        spec_hash=spec_hash,
        hetc_version=__version__,
        model_blocks=model.blocks,
        global_batch_size=model.batch,
        microbatch_size=shape.microbatch,
        model=model.spec.model_name,
        seq_len=model.spec.training.seq_len,
        precision=model.spec.training.precision,
        nodes=tuple(nodes),
        stages=tuple(stages),
        pipelines=pipelines,
    )


def _pipelines(
    model: PlanningModel, shape: Shape, rank_orders: list[list[tuple[int, int, float]]]
) -> tuple[Pipeline, ...]:
    """Pipeline k takes the k-th fastest replica of each stage; shares by `batch_shares`."""
    fills, periods, paths = [], [], []
    for k in range(shape.pipelines):
        visits = [order[k] for order in rank_orders]
        times = [fb for _, _, fb in visits]
        sends = [
            model.send(model.kinds[a].pool, model.kinds[b].pool, shape.microbatch)
            for (_, a, _), (_, b, _) in pairwise(visits)
        ]
        padded = [0.0, *sends, 0.0]
        fills.append(sum(times) + 2 * sum(sends))
        periods.append(max(t + padded[i] + padded[i + 1] for i, t in enumerate(times)))
        paths.append(tuple(index for index, _, _ in visits))
    counts = batch_shares(fills, periods, model.batch // shape.microbatch)
    return tuple(
        Pipeline(replicas=path, microbatches=count)
        for path, count in zip(paths, counts, strict=True)
    )
