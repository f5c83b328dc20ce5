"""The replica-speed floor on F + (m - 1) S and the stage shares of the sync bound.

Oracles: every candidate of small random specs (tests/oracles/brute_force.py), timed by the
planning model, for `ReplicaSlots.floor`; every split of a model's blocks into P stages,
with each stage's gradient bytes from the planning model, for `StageShares`; the replicas
of each pool counted by hand for `ReplicaSlots.speeds`.

Mutation checks done (each fails the test named): `speeds` taking a kind's speed as the
least ratio over the layers instead of the largest, or counting each pool's replicas at its
largest TP instead of its least, fails `test_every_candidate_fills_and_straggles_at_least_
the_floor`; `floor` taking only k = P (every stage at its speed bound) fails it too.
`Bounds.sync_bound` taking the largest stage's share of the ring across zones instead of
one block's fails `test_a_stage_the_zones_cannot_keep_whole_rings_across_them_on_its_
share`. `StageShares.shares` counting two blocks on the first stage fails
`test_the_shares_bound_every_split`, and so does the mean taken over P - 1 stages.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest
from oracles.brute_force import candidates
from oracles.instances import random_instance

from hetc.costmodel.planning import PlanningModel, Shape
from hetc.schema import Spec, check_text
from hetc.solver.search import SearchOptions
from hetc.solver.search.driver import Search
from hetc.solver.search.replica_slots import least_paced

SEEDS = 40

A100_BESIDE_V100 = """version: 1
name: slots
model: {preset: GPT-3-1.3B}
training: {global_batch_size: 64, seq_len: 1024, precision: fp16, zero_stage: 1}
objective: max_throughput
zones:
  - name: z
    region: r
    pools:
      - {device: A100-40GB, quota: 6, gpus_per_node: 2}
      - {device: V100-16GB, quota: 16, gpus_per_node: 4}
"""
"""6 A100 (2 a node) beside 16 V100 (4 a node) in one zone: two speeds, three TP degrees."""


def _spec(text: str) -> Spec:
    result = check_text(text, "case.yaml")
    assert result.spec is not None and not result.errors, result.diagnostics
    return result.spec


@pytest.mark.slow
def test_every_candidate_fills_and_straggles_at_least_the_floor() -> None:
    """Every feasible candidate's F + (ceil(T / D) - 1) S is at least the floor of its shape,
    and on some shapes the floor lies above the per-term bounds F_lb + m1 S_lb (the floor
    is not idle on these specs)."""
    above = 0
    specs = 0
    for seed in range(SEEDS):
        model = PlanningModel(_spec(random_instance(seed)))
        bounds = Search(model, SearchOptions())
        seen = 0
        for shape, _, e in candidates(model):
            if not e.feasible:
                continue
            seen += 1
            mbs, stages, dp = shape.microbatch, shape.stages, shape.pipelines
            m1 = model.microbatches(shape) - 1
            send = bounds.least_send(mbs) if stages > 1 else 0.0
            fill, straggler, _ = bounds.time_terms(mbs, stages, dp)
            floor = bounds.slots.floor(mbs, stages, dp, m1, send, straggler - send)
            paced = e.fill + m1 * e.straggler
            assert floor <= paced * (1 + 1e-12), (seed, shape, floor, paced)
            above += floor > (fill + m1 * straggler) * (1 + 1e-9)
        specs += seen > 0
    assert specs >= SEEDS // 2
    assert above > 0


def test_speeds_count_the_replicas_each_pool_holds_at_each_speed() -> None:
    """By hand, on the catalog's A100 beside V100 in one zone: each kind's speed is the
    largest ratio, over the core layers (those that are not small; those timed like the
    median layer), of the fastest time to its own; at a speed v a pool holds devices /
    (least TP of its kinds at least that fast) replicas, summed over the pools; one
    `kind-profiles` option (one device and TP in the zone's one region) at most the most
    any single pool holds, and a second one the second most."""
    model = PlanningModel(_spec(A100_BESIDE_V100))
    bounds = Search(model, SearchOptions())
    rows = {k.index: model.layer_compute(k.device, k.tp, 1) for k in model.kinds}
    least = [min(column) for column in zip(*rows.values(), strict=True)]
    median = sorted(range(len(least)), key=least.__getitem__)[len(least) // 2]
    big = [i for i, t in enumerate(least) if t >= least[median] / 2]
    typical = [
        i
        for i in big
        if all(abs(row[i] - row[median]) <= 1e-9 * row[median] for row in rows.values())
    ]
    assert len(typical) < len(big) < len(least)
    tables = bounds.slots.speeds(1)
    assert len(tables) == 2
    for core, (small, work, pooled, single) in zip((big, typical), tables, strict=True):
        assert work == pytest.approx(sum(least[i] for i in core), rel=1e-12)
        assert small == pytest.approx(sum(least) - work, rel=1e-12)
        speed = {k: max(least[i] / row[i] for i in core) for k, row in rows.items()}
        expected = []
        alone = []
        second = []
        for v in sorted(set(speed.values()), reverse=True):
            held = 0
            most = 0
            for pool in range(len(model.pools)):
                fast = [
                    model.kinds[k].tp
                    for k in speed
                    if model.kinds[k].pool == pool and speed[k] >= v
                ]
                if fast:
                    held += model.pools[pool].pool.quota // min(fast)
                    most = max(most, model.pools[pool].pool.quota // min(fast))
            expected.append((v, held))
            alone.append(most)
            caps = sorted(
                (model.pools[model.kinds[k].pool].pool.quota // model.kinds[k].tp)
                for k in speed
                if speed[k] >= v
            )
            second.append(caps[-2] if len(caps) > 1 else 0)
        assert [pytest.approx(v, rel=1e-12) for v, _ in expected] == pooled[0] == single[0]
        assert [n for _, n in expected] == pooled[1]
        assert alone == single[1]
        assert second == single[2]
        assert pooled[1][0] < pooled[1][-1] == 6 + 16
        assert single[1][-1] == 16


def test_the_floor_is_infinite_when_the_pools_cannot_supply_the_replicas() -> None:
    """P x D replicas of at least the least TP each: 22 devices hold 22 TP-1 replicas, so
    (P, D) = (2, 11) has a finite floor and (2, 12) none."""
    bounds = Search(PlanningModel(_spec(A100_BESIDE_V100)), SearchOptions())
    assert bounds.slots.floor(1, 2, 11, 5, 0.0) < math.inf
    assert bounds.slots.floor(1, 2, 12, 5, 0.0) == math.inf


@pytest.mark.parametrize("preset", ["GPT-Neo-2.7B", "OPT-350M", "Llama-7B"])
def test_the_shares_bound_every_split(preset: str) -> None:
    """Over every split of the blocks into P = 2 to 4 stages, by the planning model's own
    gradient bytes per stage: some stage holds at least `largest` x the whole
    model's bytes, the first and the last at least `end` x them, every stage at least
    `least` x them; and on some split of each P each bound is met within 2 blocks (they
    are not vacuous)."""
    text = f"""version: 1
name: shares
model: {{preset: {preset}}}
training: {{global_batch_size: 64, seq_len: 1024, precision: fp16, zero_stage: 1}}
objective: max_throughput
zones:
  - name: z
    region: r
    pools:
      - {{device: A100-80GB, quota: 16, gpus_per_node: 8}}
"""
    model = PlanningModel(_spec(text))
    bounds = Search(model, SearchOptions())
    blocks = model.blocks
    for tp in sorted({k.tp for k in model.kinds}):
        whole = model.gradient_bytes((0, blocks, True, True), tp)
        block = model.gradient_bytes((1, 2, False, False), tp) / whole
        for stages in range(2, 5):
            largest, end = bounds.shares.shares(stages)
            least = bounds.shares.least(stages)
            best = math.inf
            for cut in itertools.combinations(range(1, blocks), stages - 1):
                edges = (0, *cut, blocks)
                held = [
                    model.gradient_bytes((a, b, a == 0, b == blocks), tp) / whole
                    for a, b in itertools.pairwise(edges)
                ]
                assert max(held) >= largest * (1 - 1e-12)
                assert min(held[0], held[-1]) >= end * (1 - 1e-12)
                assert min(held) >= least * (1 - 1e-12)
                best = min(best, max(held))
            assert best <= largest + 2 * block


def test_a_stage_the_zones_cannot_keep_whole_rings_across_them_on_its_share() -> None:
    """Two zones of 9 A100 each hold two stages of D = 6 but not three: some stage rings
    across the zones, on at least one block, so the sync bound is at least the least ring
    between the zones times one block's share of the bytes. The candidate that puts one
    block on the stage that crosses syncs no faster than the bound (a larger share there,
    the largest stage's, would overshoot it)."""
    text = """version: 1
name: crossing
model: {preset: GPT-3-1.3B}
training: {global_batch_size: 60, seq_len: 1024, precision: fp16, zero_stage: 1}
objective: max_throughput
zones:
  - name: z0
    region: r
    pools:
      - {device: A100-40GB, quota: 9, gpus_per_node: 1}
  - name: z1
    region: r
    pools:
      - {device: A100-40GB, quota: 9, gpus_per_node: 1}
"""
    model = PlanningModel(_spec(text))
    bounds = Search(model, SearchOptions())
    a, b = (k.index for k in model.kinds if k.tp == 1)
    whole = (0, model.blocks, True, True)
    across = model.ring(a, b, whole, 6) * bounds.shares.least(3)
    assert 0 < across <= bounds.sync_bound(3, 6)
    blocks = model.blocks
    shape = Shape(microbatch=1, boundaries=(0, blocks // 2, blocks // 2 + 1, blocks), pipelines=6)
    estimate = model.estimate(shape, (((a, 6),), ((a, 3), (b, 3)), ((b, 6),)))
    assert estimate.feasible
    assert bounds.sync_bound(3, 6) <= estimate.sync * (1 + 1e-12)


def _paced_at(work: float, m1: int, speeds: list[float], straggler: float) -> float:
    """sum t_i + m1 S' at S' = `straggler`, the least sum t_i found greedily: the fastest
    stages run S' each, the next what is left (infinite where S' cannot cover the work)."""
    if straggler * sum(speeds) < work * (1 - 1e-12):
        return math.inf
    left, total = work, 0.0
    for speed in speeds:
        run = min(straggler, left / speed)
        total += run
        left -= run * speed
        if left <= 0:
            break
    return total + m1 * straggler


def test_least_paced_is_the_least_over_every_straggler_above_low() -> None:
    """Over random speed groups, work, m1 and lower bounds on S': `least_paced` equals the
    least of sum t_i + m1 S' over S' at each break W / V_k at or above low and at low, each
    evaluated greedily, and no S' of a fine grid above low does better."""
    rng = random.Random(7)
    for _ in range(400):
        groups = [(rng.randint(1, 4), rng.uniform(0.1, 1.0)) for _ in range(rng.randint(1, 4))]
        groups.sort(key=lambda g: -g[1])
        speeds = [v for count, v in groups for _ in range(count)]
        work, m1 = rng.uniform(0.5, 3.0), rng.randint(0, 12)
        breaks = [work / sum(speeds[:k]) for k in range(1, len(speeds) + 1)]
        low = rng.choice([0.0, rng.uniform(0.0, 2 * max(breaks))])
        points = [b for b in breaks if b >= low] + ([low] if low > 0 else [])
        expected = min(_paced_at(work, m1, speeds, p) for p in points)
        found = least_paced(work, m1, low, groups)
        assert found == pytest.approx(expected, rel=1e-9), (groups, work, m1, low)
        top = max(points) * 2
        for i in range(200):
            point = low + (top - low) * i / 199
            assert _paced_at(work, m1, speeds, point) >= found * (1 - 1e-9)
