"""The cost floor per set of device types (`MixCost.cost`, `Bounds.mix_cost`) and the rate
floor of the exact search's prefixes (`Bounds.rate_floor`) hold for every candidate, and
close the min-cost gap where the fast kind is the dear one.

The floor prunes whole shapes before any candidate is scored, so a floor too high loses the
optimum silently. Oracles: every candidate of small random specs (tests/oracles/brute_force.py,
objective min_cost), whose planning-model cost must be at least the floor at its shape; and
the planning model's own estimate of the least-cost plan of a two-type spec, which the floor
must reach. Mutation checks (each made by hand, seen failing, restored): the time on a set of
types taken on its slowest type instead of its fastest fails the brute-force test; the
optimizer step left out, or the node rounding of the rate, fails the by-hand test; the
rate floor with no slack in the rented nodes fails both its brute-force and by-hand tests.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict

import pytest
from oracles.brute_force import candidates
from oracles.instances import instance_data, to_yaml

from hetc.costmodel.planning import PlanningModel
from hetc.schema import Spec, check_text
from hetc.solver.search import SearchOptions, search
from hetc.solver.search.driver import Search
from hetc.solver.search.mix_cost import MIX_TYPES

DEAR_FAST = """\
version: 1
name: dear-fast
model: {preset: OPT-350M}
training: {global_batch_size: 8, seq_len: 512, precision: fp16, zero_stage: 1}
objective: min_cost
constraints: {max_gpus: 6}
zones:
  - name: z0
    region: r0
    pools:
      - {device: A100-40GB, quota: 4, gpus_per_node: 2}
      - {device: T4, quota: 4, gpus_per_node: 4}
"""
"""The A100 is about four times as fast as the T4 and ten times as dear, and the T4 is
rented four at a time: time x (the cheapest price) prices the A100's fill at the T4's rate
on one device."""


def _spec(text: str) -> Spec:
    report = check_text(text, "case.yaml")
    assert report.spec is not None, report
    return report.spec


def _min_cost(seed: int) -> Spec:
    data = instance_data(seed)
    data["objective"] = "min_cost"
    return _spec(to_yaml(data))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_every_candidate_costs_at_least_the_floor_of_its_shape(seed: int) -> None:
    """Over random small min-cost specs (several device types, whole nodes of 1, 2 or 4,
    max_gpus), no feasible candidate costs less than `mix_cost` at its (m, P, D) with the
    shape's sync bound, nor than the shape bound that takes it in."""
    spec = _min_cost(seed)
    model = PlanningModel(spec)
    searcher = Search(model, SearchOptions())
    least: dict[tuple[int, int, int], float] = defaultdict(lambda: math.inf)
    for shape, _, estimate in candidates(model):
        if estimate.feasible:
            key = (shape.microbatch, shape.stages, shape.pipelines)
            least[key] = min(least[key], estimate.cost)
    for (mbs, stages, dp), cost in least.items():
        floor = searcher.mix_cost(mbs, stages, dp, searcher.sync_bound(stages, dp))
        assert floor <= cost * (1 + 1e-12), (seed, mbs, stages, dp, floor, cost)
        assert searcher.shape_bounds(mbs, stages, dp, dp)[0] <= cost * (1 + 1e-12)


def test_the_floor_is_the_cheapest_plan_where_one_type_runs_it() -> None:
    """On DEAR_FAST the least-cost plan is one pipeline stage on the T4 node's four devices
    (the planning model's estimate: T4 fill + its ring + its optimizer step / 4, at 4 x
    the T4's price); the floor at that shape equals its cost, where time x (the cheapest
    price) and the work priced layer by layer stay under it."""
    model = PlanningModel(_spec(DEAR_FAST))
    result = search(model, SearchOptions())
    assert result.complete
    best = result.candidates[0]
    shape = best.shape
    assert (shape.stages, shape.pipelines) == (1, 4)
    assert best.estimate.nodes == (0, 1), "one T4 node, no A100"
    searcher = Search(model, SearchOptions())
    mbs, dp = shape.microbatch, shape.pipelines
    floor = searcher.mix_cost(mbs, 1, dp, searcher.sync_bound(1, dp))
    assert floor == pytest.approx(best.estimate.cost, rel=1e-9)
    assert searcher.shape_bounds(mbs, 1, dp, dp)[0] == pytest.approx(floor, rel=1e-12)
    searcher.mix_cost = lambda *terms: 0.0  # type: ignore[method-assign]
    assert searcher.shape_bounds(mbs, 1, dp, dp)[0] < 0.99 * best.estimate.cost


def test_one_device_pays_its_whole_node_at_its_own_speed() -> None:
    """By hand on DEAR_FAST with max_gpus 1 at m = 8, P = 1, D = 1 (one TP-1 replica does
    all 8 samples, no sync): the floor is the lesser of the T4 node (4 x 0.35 USD/h) for the
    T4's time and the A100 node (2 x 3.67 USD/h) for the A100's, each time the whole model's
    compute plus its optimizer step, the A100 and T4 together costing more."""
    model = PlanningModel(_spec(DEAR_FAST.replace("max_gpus: 6", "max_gpus: 1")))
    searcher = Search(model, SearchOptions())
    totals = {}
    for kind in model.kinds:
        if kind.tp == 1:
            compute, _, update = model.stage_time(kind.index, 8, 0, model.blocks + 2)
            totals[kind.device] = compute + update
    expected = min(totals["T4"] * 4 * 0.35 / 3600, totals["A100-40GB"] * 2 * 3.67 / 3600)
    assert searcher.mix_cost(8, 1, 1, 0.0) == pytest.approx(expected, rel=1e-9)


def test_more_types_than_listed_give_no_floor() -> None:
    """Beyond MIX_TYPES device types the sets are not listed and the floor is 0 (the other
    cost floors still hold); at MIX_TYPES it is positive."""
    devices = ["A100-40GB", "V100-16GB", "T4", "A10G", "L4", "A100-80GB", "H100-80GB"]
    assert len(devices) == MIX_TYPES + 1

    def spec(names: list[str]) -> Spec:
        pools = "\n".join(f"      - {{device: {d}, quota: 1, gpus_per_node: 1}}" for d in names)
        return _spec(
            DEAR_FAST.split("zones:")[0].replace("{max_gpus: 6}", "{}")
            + f"zones:\n  - name: z0\n    region: r0\n    pools:\n{pools}\n"
        )

    many = Search(PlanningModel(spec(devices)), SearchOptions())
    assert many.mix_cost(8, 1, 1, 0.0) == 0.0
    listed = Search(PlanningModel(spec(devices[:MIX_TYPES])), SearchOptions())
    assert listed.mix_cost(8, 1, 1, 0.0) > 0.0


def _pool_devices(
    model: PlanningModel, assignment: tuple[tuple[tuple[int, int], ...], ...]
) -> list[int]:
    used = [0] * len(model.pools)
    for stage in assignment:
        for kind, count in stage:
            used[model.kinds[kind].pool] += count * model.kinds[kind].tp
    return used


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_every_candidate_rents_at_least_the_rate_floor(seed: int) -> None:
    """Over random small min-cost specs, every feasible candidate's rental rate is at least
    `rate_floor` of its devices with all of them on known pools, none, and a seeded share
    of each pool's moved to the unknown ones (the exact search's prefixes)."""
    rng = random.Random(seed)
    model = PlanningModel(_min_cost(seed))
    searcher = Search(model, SearchOptions())
    for _, assignment, estimate in candidates(model):
        if not estimate.feasible:
            continue
        used = _pool_devices(model, assignment)
        moved = [rng.randint(0, u) for u in used]
        for forced, others in (
            (used, 0),
            ([0] * len(used), sum(used)),
            ([u - m for u, m in zip(used, moved, strict=True)], sum(moved)),
        ):
            floor = searcher.rate_floor(forced, others)
            assert floor <= estimate.rate * (1 + 1e-12), (seed, used, forced, others)


def test_the_rate_floor_by_hand() -> None:
    """On DEAR_FAST (A100 nodes of 2 at 3.67 USD/h, T4 nodes of 4 at 0.35 USD/h): one A100
    device rents its node; three more devices fill its slack first, then the T4s; seven
    unknown devices take the four T4s and three A100s."""
    searcher = Search(PlanningModel(_spec(DEAR_FAST)), SearchOptions())
    a100, t4 = 3.67 / 3600, 0.35 / 3600
    assert searcher.rate_floor([1, 0], 0) == pytest.approx(2 * a100, rel=1e-12)
    assert searcher.rate_floor([1, 0], 3) == pytest.approx(2 * a100 + 2 * t4, rel=1e-12)
    assert searcher.rate_floor([0, 0], 7) == pytest.approx(4 * t4 + 3 * a100, rel=1e-12)
    assert searcher.rate_floor([0, 1], 3) == pytest.approx(4 * t4, rel=1e-12)
