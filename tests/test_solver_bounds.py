"""The search's shape-level bounds hold for every candidate, and bite where they should.

The sync bound (`_Search.sync_bound`) prunes whole shapes before any of their candidates is
scored, so a bound too large loses the optimum silently. The oracle is every candidate of
small multi-zone specs (tests/oracles/brute_force.py enumerates them from the spec): each
candidate's slowest synchronisation must be at least the bound for its (P, D). A second
test checks that the zone-crossing part does something: where D replicas cannot fit in one
zone, the bound pays the inter-zone latency on every ring step, which a bound that ignored
zones (the mutation it guards against) would not.
"""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
from oracles.brute_force import candidates
from oracles.instances import binding_instance, random_instance

from hetc.costmodel.planning import PlanningModel
from hetc.schema import Spec, check_text
from hetc.solver.search import SearchOptions, _Search

CROSSING = """\
version: 1
name: crossing
model:
  architecture: {layers: 3, hidden: 256, heads: 4, vocab: 1024, max_positions: 256}
training: {global_batch_size: 8, seq_len: 256, precision: fp16, zero_stage: 1}
objective: max_throughput
zones:
  - name: a
    region: r1
    pools:
      - {device: A100-40GB, quota: 4, gpus_per_node: 2, price: 3.67 USD/h}
  - name: b
    region: r1
    pools:
      - {device: A100-40GB, quota: 2, gpus_per_node: 2, price: 3.67 USD/h}
      - {device: V100-16GB, quota: 2, gpus_per_node: 2, price: 2.86 USD/h}
  - name: c
    region: r2
    pools:
      - {device: A100-40GB, quota: 4, gpus_per_node: 2, price: 3.0 USD/h}
network:
  intra_zone: {bandwidth: 100Gbps, latency: 10us}
  inter_zone: {bandwidth: 50Gbps, latency: 1ms}
  inter_region: {bandwidth: 3.4Gbps, latency: 35ms}
"""
"""Zones of 4 devices in two regions: D = 5 or more rings must cross zones, D = 9 or more
regions, and four stages of D = 3 cannot all sit inside one zone each."""


def _spec(text: str) -> Spec:
    report = check_text(text, "case.yaml")
    assert report.spec is not None, report
    return report.spec


def _multi_zone_specs() -> list[Spec]:
    specs = [_spec(CROSSING)]
    for seed in range(40):
        spec = _spec(random_instance(seed))
        if len(spec.zones) > 1 and len(specs) < 4:
            specs.append(spec)
    return specs


@pytest.mark.slow
@pytest.mark.parametrize("index", range(4))
def test_every_candidate_syncs_no_faster_than_the_bound(index: int) -> None:
    spec = _multi_zone_specs()[index]
    model = PlanningModel(spec)
    searcher = _Search(model, SearchOptions())
    least: dict[tuple[int, int], float] = defaultdict(lambda: float("inf"))
    for shape, _, estimate in candidates(model):
        key = (shape.stages, shape.pipelines)
        least[key] = min(least[key], estimate.sync)
    assert least
    for (stages, dp), sync in least.items():
        assert searcher.sync_bound(stages, dp) <= sync * (1 + 1e-12), (stages, dp)


def test_rings_that_must_cross_zones_pay_the_crossing_latency() -> None:
    """Hand-computed: a ring over D ranks takes 2 (D - 1) steps, each at least the latency
    of the slowest link it crosses. D = 6 cannot fit a 4-device zone (1 ms between zones of
    r1), D = 9 cannot fit a region of 8 (35 ms between regions); four stages of D = 3 need
    four zones holding 3 each, and there are three, so one stage crosses at least a zone."""
    searcher = _Search(PlanningModel(_spec(CROSSING)), SearchOptions())
    assert searcher.sync_bound(1, 6) >= 2 * 5 * 1e-3
    assert searcher.sync_bound(1, 9) >= 2 * 8 * 35e-3
    assert searcher.sync_bound(4, 3) >= 2 * 2 * 1e-3
    assert searcher.sync_bound(3, 3) < 2 * 2 * 1e-3
    assert searcher.sync_bound(1, 4) < 2 * 3 * 1e-3


def test_rings_that_must_cross_regions_move_all_their_bytes_across() -> None:
    """With D = 9 every ring spans both regions, so one pipeline stage's ring is at least
    the whole model's ring over the cheapest pair of kinds in different regions (the
    model's own ring time, so the bandwidth term counts too, not only the latency)."""
    model = PlanningModel(_spec(CROSSING))
    searcher = _Search(model, SearchOptions())
    region = [model.pools[k.pool].zone.region for k in model.kinds]
    whole = (0, model.blocks, True, True)
    cheapest = min(
        model.ring(a, b, whole, 9)
        for a in range(len(model.kinds))
        for b in range(len(model.kinds))
        if region[a] != region[b]
    )
    assert cheapest > 2 * 8 * 35e-3
    assert searcher.sync_bound(1, 9) == pytest.approx(cheapest, rel=1e-12)


TP_CROSSING = (
    CROSSING.replace(
        "architecture: {layers: 3, hidden: 256, heads: 4, vocab: 1024, max_positions: 256}",
        "architecture: {layers: 3, hidden: 1024, heads: 16, vocab: 1024, max_positions: 2048}",
    )
    .replace("seq_len: 256", "seq_len: 2048")
    .replace("latency: 1ms", "latency: 10ms")
)
"""CROSSING with layers wide enough that TP 2 computes faster than TP 1, and 10 ms between
zones: TP 2 for D = 3 needs 6 devices, more than a zone has, and the crossing costs more
than TP 2 saves."""


def _specs_with_plans() -> list[Spec]:
    """CROSSING, TP_CROSSING and the first four random multi-zone instances that have a
    feasible candidate."""
    specs = [_spec(CROSSING), _spec(TP_CROSSING)]
    for seed in range(60):
        spec = _spec(random_instance(seed))
        if (
            len(specs) < 6
            and len(spec.zones) > 1
            and any(e.feasible for _, _, e in candidates(PlanningModel(spec)))
        ):
            specs.append(spec)
    return specs


@pytest.mark.slow
@pytest.mark.parametrize("index", range(6))
def test_every_candidate_is_no_better_than_its_shape_bound(index: int) -> None:
    """`shape_bounds` prunes a whole (m, P, D) before any candidate of it is scored: every
    feasible candidate's objective must be at least it, including the shapes whose largest
    TP would have to leave a zone (the bound takes the least over the largest TP used)."""
    spec = _specs_with_plans()[index]
    model = PlanningModel(spec)
    searcher = _Search(model, SearchOptions())
    least: dict[tuple[int, int, int], float] = defaultdict(lambda: float("inf"))
    for shape, _, estimate in candidates(model):
        if estimate.feasible:
            key = (shape.microbatch, shape.stages, shape.pipelines)
            value = estimate.iteration_time if spec.objective == "max_throughput" else estimate.cost
            least[key] = min(least[key], value)
    assert least
    for (mbs, stages, dp), value in least.items():
        bound = _pruning_bound(searcher, mbs, stages, dp)
        assert bound <= value * (1 + 1e-12), (mbs, stages, dp, bound, value)


def _pruning_bound(searcher: _Search, mbs: int, stages: int, dp: int) -> float:
    """What `_Search.shape` prunes (m, P, D) by: its `shape_bounds` entry, which orders the
    shapes, or the zone-crossing bound that `shape_bounds` recorded beside it."""
    order = searcher.shape_bounds(mbs, stages, dp)[dp - 1]
    return max(order, searcher._crossing_bounds.get((mbs, stages, dp), order))


def test_a_shape_whose_largest_tp_leaves_a_zone_is_bounded_at_each_tp() -> None:
    """Hand-computed from the bound's own terms on TP_CROSSING (zones of 4 devices, no
    mixed TP): with P = 1 and D = 3, TP 2 needs 6 devices, so a plan using it pays 2 (D - 1)
    inter-zone latencies of 10 ms on its ring; one of TP 1 does not, but computes at TP 1.
    The bound is the lesser of the two, above what it was without the crossing."""
    model = PlanningModel(_spec(TP_CROSSING))
    searcher = _Search(model, SearchOptions())
    mbs, stages, dp = 1, 1, 3
    m1 = -(-model.batch // (mbs * dp)) - 1
    sync = searcher.sync_bound(stages, dp)
    assert sync < 2 * 2 * 10e-3, "no zone-crossing floor without the largest TP"
    blocks = model.blocks

    def at(tp: int, crossing: float) -> float:
        fill, static, per_dp = searcher._static_terms(mbs, stages, tp, blocks)
        return fill + m1 * max(static, per_dp * dp) + max(sync, crossing)

    assert max(k.tp for k in model.kinds) == 2 <= searcher.affordable_tp(stages, dp)
    expected = min(at(2, 2 * 2 * 10e-3), at(1, 0.0))
    assert expected > at(2, 0.0) * 1.3
    assert _pruning_bound(searcher, mbs, stages, dp) == pytest.approx(expected, rel=1e-12)
    assert searcher.shape_bounds(mbs, stages, dp)[dp - 1] == pytest.approx(at(2, 0.0))
    searched: list[object] = []
    searcher.stage = lambda *state: searched.append(state)  # type: ignore[method-assign]
    searcher._kth = expected * 0.999  # an incumbent just better than the bound
    assert searcher.shape(mbs, stages, dp) is None
    assert not searched, "pruned before its stages are searched"
    searcher._kth = expected * 1.001
    searcher.shape(mbs, stages, dp)
    assert searched, "searched when the incumbent is worse than the bound"


@pytest.mark.parametrize("seed", range(0, 60, 3))
def test_a_group_bound_is_below_every_shape_bound_in_it(seed: int) -> None:
    """The search lists the shapes of a (microbatch, P) group only once the group's bound
    is reached (`_Search.group_bound`), so it must not exceed any of their bounds, under
    each objective and constraint (binding budgets and floors among the seeds)."""
    model = PlanningModel(_spec(random_instance(seed) if seed % 2 else binding_instance(seed)))
    searcher = _Search(model, SearchOptions())
    checked = 0
    for mbs in model.microbatch_sizes():
        for stages in range(1, model.blocks + 1):
            last = searcher._last_dp(mbs, stages)
            shapes = searcher.shape_bounds(mbs, stages, last) if last >= 1 else []
            least = min(shapes, default=math.inf)
            group = searcher.group_bound(mbs, stages, last)
            assert group <= least * (1 + 1e-12), (mbs, stages, group, least)
            checked += least < math.inf
    assert checked
