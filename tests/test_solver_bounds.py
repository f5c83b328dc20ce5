"""The search's shape-level bounds hold for every candidate, and bite where they should.

The sync bound (`Search.sync_bound`) prunes whole shapes before any of their candidates is
scored, so a bound too large loses the optimum silently. The oracle is every candidate of
small multi-zone specs (tests/oracles/brute_force.py enumerates them from the spec): each
candidate's slowest synchronisation must be at least the bound for its (P, D). A second
test checks that the zone-crossing part does something: where D replicas cannot fit in one
zone, the bound pays the inter-zone latency on every ring step, which a bound that ignored
zones (the mutation it guards against) would not.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable
from functools import cache
from itertools import pairwise
from pathlib import Path

import pytest
from oracles.brute_force import candidates
from oracles.instances import binding_instance, random_instance

from hetc.costmodel.planning import PlanningModel
from hetc.costmodel.profile import BandwidthFit, LayerProfile
from hetc.schema import Spec, check_file, check_text
from hetc.solver.search import SearchOptions
from hetc.solver.search.driver import SHALLOW_SHAPES, Search

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
BENCH = Path(__file__).resolve().parent.parent / "bench" / "scenarios"


def _bench(name: str) -> str:
    return (BENCH / f"{name}.yaml").read_text()


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
    searcher = Search(model, SearchOptions())
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
    searcher = Search(PlanningModel(_spec(CROSSING)), SearchOptions())
    assert searcher.sync_bound(1, 6) >= 2 * 5 * 1e-3
    assert searcher.sync_bound(1, 9) >= 2 * 8 * 35e-3
    assert searcher.sync_bound(4, 3) >= 2 * 2 * 1e-3
    assert searcher.sync_bound(3, 3) < 2 * 2 * 1e-3
    assert searcher.sync_bound(1, 4) < 2 * 3 * 1e-3


def test_rings_that_must_cross_regions_move_all_their_bytes_across() -> None:
    """With D = 9 every ring spans both regions, so one pipeline stage's ring is at least
    the whole model's ring over the cheapest pair of kinds in different regions (the
    model's own ring time, so the bandwidth term counts too, not only the latency), plus
    the optimizer step (`step_floor`)."""
    model = PlanningModel(_spec(CROSSING))
    searcher = Search(model, SearchOptions())
    region = [model.pools[k.pool].zone.region for k in model.kinds]
    whole = (0, model.blocks, True, True)
    cheapest = min(
        model.ring(a, b, whole, 9)
        for a in range(len(model.kinds))
        for b in range(len(model.kinds))
        if region[a] != region[b]
    )
    assert cheapest > 2 * 8 * 35e-3
    step = searcher.step_floor(1, 9)
    assert searcher.sync_bound(1, 9) == pytest.approx(cheapest + step, rel=1e-12)


TP_CROSSING = (
    CROSSING.replace(
        "architecture: {layers: 3, hidden: 256, heads: 4, vocab: 1024, max_positions: 256}",
        "architecture: {layers: 3, hidden: 1024, heads: 16, vocab: 1024, max_positions: 2048}",
    )
    .replace("seq_len: 256", "seq_len: 2048")
    .replace("latency: 1ms", "latency: 10ms")
)
"""CROSSING with layers wide enough that TP 2 computes faster than TP 1, and 10 ms between
zones: TP 2 for D = 3 needs 6 devices, more than a zone has, so the fastest compute and the
cheapest ring cannot both be had (a bound that takes both must still stay below)."""


@cache
def _specs_with_plans() -> list[Spec]:
    """CROSSING, TP_CROSSING and the first four random multi-zone instances that have a
    feasible candidate (found once: each look enumerates an instance's candidates)."""
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
    """`shape_bounds` orders the shapes and prunes a whole (m, P, D) before any candidate
    of it is scored: every feasible candidate's objective must be at least it (fill,
    straggler floors, sync, and for cost the work and rental floors)."""
    spec = _specs_with_plans()[index]
    model = PlanningModel(spec)
    searcher = Search(model, SearchOptions())
    least: dict[tuple[int, int, int], float] = defaultdict(lambda: float("inf"))
    for shape, _, estimate in candidates(model):
        if estimate.feasible:
            key = (shape.microbatch, shape.stages, shape.pipelines)
            value = estimate.iteration_time if spec.objective == "max_throughput" else estimate.cost
            least[key] = min(least[key], value)
    assert least
    for (mbs, stages, dp), value in least.items():
        bound = searcher.shape_bounds(mbs, stages, dp)[dp - 1]
        assert bound <= value * (1 + 1e-12), (mbs, stages, dp, bound, value)


def test_idle_cost_charges_every_device_for_the_other_stages_and_the_sync() -> None:
    """Hand-computed on CROSSING (cheapest device 2.86 USD/h, least TP 1): with 3 stages of
    D = 4, F = 0.5 s and Y = 0.1 s, the 4 devices of stage i idle for F - t_i + Y each, which
    sums over the stages to 4 x (2 F + 3 Y) device-seconds."""
    searcher = Search(PlanningModel(_spec(CROSSING)), SearchOptions())
    expected = 2.86 / 3600 * 4 * (2 * 0.5 + 3 * 0.1)
    assert searcher.idle_cost(3, 4, 0.5, 0.1) == pytest.approx(expected, rel=1e-12)
    assert searcher.idle_cost(1, 4, 0.5, 0.0) == 0.0, "one stage, no sync: nothing idles"


def test_the_idle_cost_raises_min_cost_shape_bounds() -> None:
    """On the bench's min-cost scenario the idle term lifts shape bounds above what the
    other cost floors give (the same search with the idle cost taken as 0), and never
    lowers one: the term is used, not only defined."""
    assert _floor_bounds_lifted("idle_cost", lambda *terms: 0.0, (1, 2, 4)) > 10


def _floor_bounds_lifted(term: str, zero: Callable[..., float], depths: tuple[int, ...]) -> int:
    """How many shape bounds of the bench's min-cost scenario (microbatch 2, P in `depths`,
    every D) a term lifts, against the same search with `term` replaced by `zero`; asserts
    that it lowers none."""
    model = PlanningModel(_spec((BENCH / "opt350m-floor.yaml").read_text()))
    searcher, without = Search(model, SearchOptions()), Search(model, SearchOptions())
    setattr(without, term, zero)
    lifted = 0
    for stages in depths:
        last = searcher.last_dp(2, stages)
        for a, b in zip(
            searcher.shape_bounds(2, stages, last),
            without.shape_bounds(2, stages, last),
            strict=True,
        ):
            assert a >= b
            lifted += a > b * (1 + 1e-9)
    return lifted


ONE_POOL = """\
version: 1
name: one-pool
model:
  architecture: {layers: 3, hidden: 256, heads: 4, vocab: 1024, max_positions: 256}
training: {global_batch_size: 16, seq_len: 256, precision: fp16, zero_stage: 1}
objective: min_cost
zones:
  - name: a
    pools:
      - {device: A100-40GB, quota: 8, gpus_per_node: 8, price: 3.6 USD/h}
"""
"""One kind at TP 1 is the cheapest for every layer (TP 2 and more pay more device-seconds)."""


def test_work_cost_is_every_microbatch_on_the_cheapest_kind() -> None:
    """Hand-computed on one pool: B / m microbatches x the whole model's time on one TP-1
    device x its price (1 USD/device-second here is 3.6 USD/h / 3600)."""
    model = PlanningModel(_spec(ONE_POOL))
    searcher = Search(model, SearchOptions())
    tp1 = next(k.index for k in model.kinds if k.tp == 1)
    for mbs in (1, 2, 4):
        whole = model.stage_time(tp1, mbs, 0, model.blocks + 2)[0]
        expected = 16 // mbs * whole * 3.6 / 3600
        assert searcher.work_cost(mbs) == pytest.approx(expected, rel=1e-9)


def test_layer_compute_is_stage_time_of_each_layer_to_the_bit() -> None:
    """The bounds read per-layer times from `layer_compute` (one lookup per device and TP)
    instead of `stage_time` per layer and kind; the search's ties depend on their being the
    same floats, on GPT-Neo-2.7B, whose blocks alternate global and local attention, and on
    every kind of the bench's A100 + V100 cluster."""
    model = PlanningModel(_spec((BENCH / "gptneo-32a100-96v100.yaml").read_text()))
    for k in model.kinds:
        for mbs in (1, 4):
            row = model.layer_compute(k.device, k.tp, mbs)
            assert len(row) == model.blocks + 2
            for i, t in enumerate(row):
                assert t == model.stage_time(k.index, mbs, i, i + 1)[0]
    a100 = next(k for k in model.kinds if k.device == "A100-40GB" and k.tp == 1)
    blocks = model.layer_compute(a100.device, 1, 1)[1:-1]
    assert blocks[0] != blocks[1] and blocks[0] == pytest.approx(blocks[2], rel=1e-12)


def test_windows_are_the_least_run_of_blocks_on_each_kind() -> None:
    """`window`, kept per device, TP and microbatch size and filled as asked, is the least
    forward + backward time of that many consecutive blocks (`stage_time`), for every
    kind, block count and microbatch size of GPT-Neo-2.7B on A100 + V100 (its blocks
    alternate global and local attention, so where a run starts matters), asked in a
    shuffled order and then again; `host_window` is the least over the hosts at D."""
    model = PlanningModel(_spec((BENCH / "gptneo-32a100-96v100.yaml").read_text()))
    searcher = Search(model, SearchOptions(approximations=frozenset({"kind-profiles"})))
    last = model.blocks
    asks = [(k.index, m, n) for k in model.kinds for m in (1, 2) for n in range(1, last + 1)]
    random.Random(0).shuffle(asks)
    for kind, mbs, blocks in asks + asks:
        expected = min(
            model.stage_time(kind, mbs, first, first + blocks)[0]
            for first in range(1, last - blocks + 2)
        )
        assert searcher.window((kind,), mbs, blocks) == pytest.approx(expected, rel=1e-12)
    for mbs in (1, 2):
        for dp in (1, 4, 16):
            for blocks in (1, 5, last):
                hosts = searcher.hosts(mbs, dp)
                assert hosts
                least = min(searcher.window(o, mbs, blocks) for o in hosts)
                assert searcher.host_window(mbs, dp, blocks) == least


def test_work_cost_prices_each_layer_on_its_own_cheapest_kind() -> None:
    """A100 and V100 on the bench's min-cost scenario: the V100 is the cheaper way to run
    the token table, the A100 the blocks. The cost floor is below every single-kind price of
    the whole model and above the old floor, which priced all the work at the V100's rate
    per unit of work (`device_work`'s sigma is 1 for it, because of the token table): more
    than 20% above it at microbatch sizes 1 and 2, where the token table tips it."""
    model = PlanningModel(_spec((BENCH / "opt350m-floor.yaml").read_text()))
    searcher = Search(model, SearchOptions())
    lifted = {}
    for mbs in model.microbatch_sizes():
        total = model.batch // mbs
        single = min(
            total
            * k.tp
            * model.stage_time(k.index, mbs, 0, model.blocks + 2)[0]
            * model.pools[k.pool].pool.price
            for k in model.kinds
        )
        work, sigma = searcher.device_work(mbs)
        by_sigma = (
            total
            * work[-1]
            * min(slot.pool.price / s for slot, s in zip(model.pools, sigma, strict=True))
        )
        floor = searcher.work_cost(mbs)
        assert by_sigma * (1 - 1e-12) <= floor <= single * (1 + 1e-12)
        lifted[mbs] = floor / by_sigma
    assert lifted[1] > 1.2 and lifted[2] > 1.2, lifted


def test_the_cost_bound_pays_for_the_slowest_share() -> None:
    """The bench's min-cost scenario at microbatch 16 (64 microbatches) on one stage: over
    D = 63 pipelines the fullest does 2, and every pipeline's devices are paid for the whole
    iteration, so at least 126 microbatch slots of work are paid for; over D = 32 (even
    shares) 64 are, and the bound is about half as high."""
    model = PlanningModel(_spec((BENCH / "opt350m-floor.yaml").read_text()))
    searcher = Search(model, SearchOptions())
    bounds = searcher.shape_bounds(16, 1, 63)
    work = searcher.work_cost(16)
    assert bounds[62] >= work * 126 / 64
    assert bounds[31] < work * 1.1


@pytest.mark.parametrize("seed", range(0, 60, 3))
def test_a_range_bound_is_below_every_shape_bound_in_it(seed: int) -> None:
    """The search lists the shapes of a range of D of a (microbatch, P) group only once the
    range's bound is reached (`Search.range_bound`; the whole group is the range 1..the
    count cap), so it must not exceed any of their bounds, under each objective and
    constraint (binding budgets and floors among the seeds), for every range. The bounds of
    a range, listed from its first D, are those of the whole list."""
    model = PlanningModel(_spec(random_instance(seed) if seed % 2 else binding_instance(seed)))
    searcher = Search(model, SearchOptions())
    checked = 0
    for mbs in model.microbatch_sizes():
        for stages in range(1, model.blocks + 1):
            last = searcher.dp_cap(mbs, stages)
            shapes = searcher.shape_bounds(mbs, stages, last) if last >= 1 else []
            for first in range(1, last + 1):
                for end in range(first, last + 1):
                    inside = shapes[first - 1 : end]
                    assert searcher.shape_bounds(mbs, stages, end, first) == inside
                    least = min(inside)
                    bound = searcher.range_bound(mbs, stages, first, end)
                    assert bound <= least * (1 + 1e-12), (mbs, stages, first, end, bound)
                    checked += least < math.inf
    assert checked


SENDS = """\
version: 1
name: sends
model:
  architecture: {layers: 6, hidden: 512, heads: 8, vocab: 4096, max_positions: 512}
training: {global_batch_size: 8, seq_len: 512, precision: fp16, zero_stage: ZERO}
objective: OBJECTIVE
zones:
  - name: a
    region: r1
    pools:
      - {device: A100-40GB, quota: QUOTA, gpus_per_node: GPN, price: 3.67 USD/h}
POOLS
network:
  intra_zone: {bandwidth: BANDWIDTH, latency: 20us}
  inter_zone: {bandwidth: 1Gbps, latency: 1ms}
  inter_region: {bandwidth: 1Gbps, latency: 30ms}
"""
"""A model whose activation sends take a fair share of a stage's period on a slow network
(at 3 Gbps a send is about 15% of the whole model's compute at microbatch 1)."""


def _sends(
    objective: str = "max_throughput",
    bandwidth: str = "3Gbps",
    zero: int = 1,
    quota: int = 3,
    gpn: int = 1,
    pools: str = "",
) -> Spec:
    text = (
        SENDS.replace("OBJECTIVE", objective)
        .replace("BANDWIDTH", bandwidth)
        .replace("ZERO", str(zero))
        .replace("QUOTA", str(quota))
        .replace("GPN", str(gpn))
        .replace("POOLS\n", pools)
    )
    return _spec(text)


V100_ZONE = (
    "  - name: b\n    region: r1\n    pools:\n"
    "      - {device: V100-16GB, quota: 2, gpus_per_node: 2, price: 2.86 USD/h}\n"
)
SENDS_CASES = {
    "one TP-1 pool": _sends(),
    "1 Gbps": _sends(bandwidth="1Gbps"),
    "mixed TP in a stage": _sends(bandwidth="1Gbps", zero=0, quota=4, gpn=2, pools=V100_ZONE),
    "cheapest": _sends("min_cost"),
    "mixed, cheapest": _sends("min_cost", "1Gbps", zero=0, quota=4, gpn=2, pools=V100_ZONE),
}
"""Send-heavy cases: one pool at TP 1 (where the straggler floors come within a few percent
of the best split), a slower network, two zones with TP 2 beside TP 1 in one stage (ZeRO
off), and min_cost on one pool and on both zones (the idle cost of waiting for sends)."""


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SENDS_CASES))
def test_every_candidate_pays_the_least_send_on_each_boundary(name: str) -> None:
    """Every candidate of P > 1 stages sends on each of its P - 1 boundaries at least
    `least_send`, so its fill F, its straggler S and (with its sync) its objective are at
    least `period_terms`' fill, static floor and each line a D + b, and the shape bound.
    The oracle is every candidate the brute force enumerates, timed by the model; the floors
    must also come close to some candidate (the fill within 0.1% of one, far under one send;
    the static floor within 5%, the lines within 5% on one pool and 15% elsewhere), or a
    floor raised by one send too many would pass unseen."""
    spec = SENDS_CASES[name]
    model = PlanningModel(spec)
    searcher = Search(model, SearchOptions())
    closest = {"fill": math.inf, "static": math.inf, "line": math.inf}
    for shape, assignment, estimate in candidates(model):
        if not estimate.feasible or shape.stages == 1:
            continue
        mbs, stages, dp = shape.microbatch, shape.stages, shape.pipelines
        used = [tuple(kind for kind, count in stage if count) for stage in assignment]
        straggler, fill, _, _ = model.time_of_sets(shape, used)
        floor, static, lines, send = searcher.period_terms(
            mbs, stages, searcher.affordable_tp(stages, dp)
        )
        for a, b in pairwise(used):
            assert model.send_between(a, b, mbs) >= send
        assert fill >= floor * (1 - 1e-12)
        assert straggler >= static * (1 - 1e-12)
        closest["fill"] = min(closest["fill"], fill / floor)
        closest["static"] = min(closest["static"], straggler / static)
        for slope, at_zero in lines:
            line = slope * dp + at_zero
            assert straggler >= line * (1 - 1e-12), (shape, slope, at_zero)
            closest["line"] = min(closest["line"], straggler / line)
        value = estimate.iteration_time if spec.objective == "max_throughput" else estimate.cost
        assert searcher.shape_bounds(mbs, stages, dp, dp)[0] <= value * (1 + 1e-12)
    assert closest["fill"] < 1 + 1e-3 and closest["static"] < 1.05, closest
    assert closest["line"] < (1.05 if name in ("one TP-1 pool", "cheapest") else 1.15), closest


def test_the_least_send_is_the_fastest_pool_pair() -> None:
    """Hand-computed on the mixed case: the least of the four pool pairs sends a
    microbatch's activations (m x 512 tokens x 512 hidden x 2 bytes) over a zone's own
    1 Gbps link with 20 us latency; between the zones it is 1 Gbps with 1 ms. One stage
    sends nothing."""
    model = PlanningModel(SENDS_CASES["mixed TP in a stage"])
    searcher = Search(model, SearchOptions())
    for mbs in (1, 2, 4):
        expected = min(model.send(a, b, mbs) for a in (0, 1) for b in (0, 1))
        assert searcher.least_send(mbs) == expected
        assert expected == pytest.approx(20e-6 + mbs * 512 * 512 * 2 * 8 / 1e9, rel=1e-6)
        assert searcher.period_terms(mbs, 1, 8)[3] == 0.0


def test_min_cost_bounds_charge_every_device_its_waits_on_sends() -> None:
    """Hand-computed on the mixed min-cost case: over P > 1 stages of D pipelines every
    device idles at least F - t_i + Y + (m - 1)(S - t_i), so the D x (least TP) devices of
    the P stages idle sum_i (F - t_i) >= (P - 1) F_lb' + 2 (P - 1) s (F_lb' = F_lb + 2 (P -
    1) s), plus P x (Y_lb + (m - 1) s), at the cheapest price, beside the work of m x D
    microbatch slots. The shape bound is at least that, and, with the floor per set of
    device types (`mix_cost`) taken as 0, equal to it where the rental on the fewest
    devices does not bind (in 14 of the case's 28 finite shapes)."""
    model = PlanningModel(SENDS_CASES["mixed, cheapest"])
    searcher = Search(model, SearchOptions())
    searcher.mix_cost = lambda *terms: 0.0  # type: ignore[method-assign]
    price = 2.86 / 3600
    binding = 0
    for mbs in model.microbatch_sizes():
        total = model.batch // mbs
        for stages in range(2, model.blocks + 1):
            for dp in range(1, searcher.dp_cap(mbs, stages) + 1):
                bound = searcher.shape_bounds(mbs, stages, dp, dp)[0]
                if bound == math.inf:
                    continue
                s = searcher.least_send(mbs)
                fill = searcher.terms(mbs, searcher.affordable_tp(stages, dp))[0]
                fill += 2 * (stages - 1) * s
                slots = -(-total // dp)
                waits = stages * (searcher.sync_bound(stages, dp) + (slots - 1) * s)
                idle = price * dp * ((stages - 1) * fill + waits + 2 * (stages - 1) * s)
                floor = searcher.work_cost(mbs) * slots * dp / total + idle
                assert bound >= floor * (1 - 1e-12)
                binding += bound <= floor * (1 + 1e-12)
    assert binding >= 10


def test_the_send_terms_lift_the_bench_floor_bounds() -> None:
    """On the bench's min-cost scenario the least send lifts shape bounds (against the same
    search with every send taken as 0) and never lowers one."""
    assert _floor_bounds_lifted("least_send", lambda mbs: 0.0, (2, 4, 8)) > 50


def test_the_send_terms_by_hand() -> None:
    """On the one-pool case (TP 1 only, 3 devices) at microbatch 1 and P = 3, from the
    send-free terms (F_lb, the worst layer, the 2-block window, W and G = 3): F = F_lb + 4 s;
    the static floor max(F / 3, worst + s, window + s); the lines W / 3 + s and, the inner
    stage sending both ways, (W - 2 s) / 3 + 2 s. With ZeRO off a stage may mix TP degrees,
    so an end stage's replicas count at the largest TP of any kind (2 on the mixed case),
    not at the affordable one (1 at P = 3, D = 2)."""
    model = PlanningModel(SENDS_CASES["one TP-1 pool"])
    searcher = Search(model, SearchOptions())
    s = searcher.least_send(1)
    fill, worst, work, free = searcher.terms(1, 1)
    window = searcher.least_window(1, 1, 2)
    assert free == 3.0 and fill == pytest.approx(work, rel=1e-12)
    floor, static, lines, send = searcher.period_terms(1, 3, 1)
    assert send == s and floor == pytest.approx(fill + 4 * s, rel=1e-12)
    assert static == pytest.approx(max((fill + 4 * s) / 3, worst + s, window + s), rel=1e-12)
    expected = [work / 3, s, (work - 2 * s) / 3, 2 * s]
    assert [term for line in lines for term in line] == pytest.approx(expected, rel=1e-12)
    assert len(searcher.period_terms(1, 2, 1)[2]) == 1, "two stages: both are ends"
    mixed = Search(PlanningModel(_sends(zero=0, quota=4, gpn=2, pools=V100_ZONE)), SearchOptions())
    assert mixed.tp_cap(mixed.affordable_tp(3, 2)) == 1
    s = mixed.least_send(1)
    work, free = mixed.terms(1, 1)[2:]
    inner = mixed.period_terms(1, 3, 1)[2][1]
    assert list(inner) == pytest.approx([(work - 2 * s * 2) / free, 2 * s], rel=1e-12)


ONE_PER_NODE = """\
version: 1
name: one-per-node
model:
  architecture: {layers: 2, hidden: 256, heads: 4, ffn: 1024, vocab: 512, max_positions: 64}
training: {global_batch_size: 8, seq_len: 32, precision: fp32, zero_stage: 0}
devices:
  - {name: CPU-A, kind: cpu, memory: 4GiB, peak_tflops: {fp32: 0.05},
     memory_bandwidth: 10GB/s, intra_node: {kind: shared-memory, bandwidth: 5GB/s},
     price: 1 USD/h}
zones:
  - name: z
    pools: [{device: CPU-A, quota: 8, gpus_per_node: 1}]
"""


def _falling_profile() -> LayerProfile:
    """A profile of CPU-A whose inter-node bandwidth falls as messages grow past 1 MB (8
    GB/s there, the curve's floor from 2.6 MB): on it a ring of more ranks, each sending
    less, can take less time. Its layer times are never read here."""
    return LayerProfile(
        model="custom",
        device="CPU-A",
        precision="fp32",
        seq_len=32,
        times={1: {1: {i: (1e-3, 2e-3, 1e-4) for i in range(4)}}},
        network={"inter_node": {"p2p": {1: BandwidthFit(coefficients=(-4.0, 0.0, 8.0), peak=8e9)}}},
    )


@pytest.mark.parametrize("seed", [*range(0, 30, 3), -1])
def test_the_range_sync_is_below_the_sync_bound_at_every_larger_d(seed: int) -> None:
    """`range_bound` prices the sync of D = first..last at `range_sync(first)`: at most
    `sync_bound` at every D >= first. On flat links that is the sync bound itself (a ring
    grows with D); on a measured curve where small messages go faster it is not, and the
    whole-model ring must be left out (seed -1: one device in one zone, with that curve)."""
    if seed < 0:
        model = PlanningModel(_spec(ONE_PER_NODE), profiles=[_falling_profile()])
    else:
        model = PlanningModel(_spec(random_instance(seed) if seed % 2 else binding_instance(seed)))
    searcher = Search(model, SearchOptions())
    top = max(2, searcher.total_devices)
    falls = False
    for stages in range(1, model.blocks + 1):
        syncs = [searcher.sync_bound(stages, dp) for dp in range(1, top + 1)]
        for dp in range(1, top + 1):
            assert searcher.range_sync(stages, dp) <= min(syncs[dp - 1 :]), (stages, dp)
        falls |= any(b < a for a, b in pairwise(syncs))
    assert searcher._flat_links is (seed >= 0)
    assert falls is (seed < 0)


@pytest.mark.parametrize("name", ["opt350m-5zones", "opt350m-floor"])
def test_shapes_beaten_before_the_sync_keep_a_weaker_bound_above_the_incumbent(name: str) -> None:
    """Once an incumbent exists, a shape whose bound beats it without the sync keeps that
    weaker bound (its rings are never computed): still a lower bound, still above the
    incumbent, so the shapes searched and their order are the same."""
    model = PlanningModel(_spec((BENCH / f"{name}.yaml").read_text()))
    fresh = Search(model, SearchOptions())
    full = [b for stages in (1, 2, 6) for b in fresh.shape_bounds(2, stages, 200)]
    incumbent = sorted(b for b in full if b < math.inf)[len(full) // 4]
    pruning = Search(model, SearchOptions())
    pruning._kth = incumbent
    early = [b for stages in (1, 2, 6) for b in pruning.shape_bounds(2, stages, 200)]
    weaker = 0
    for a, b in zip(early, full, strict=True):
        if a != b:
            assert incumbent < a <= b
            weaker += 1
        else:
            assert (a > incumbent) == (b > incumbent)
    assert weaker > 50


@pytest.mark.parametrize("name", ["opt350m-5zones", "opt350m-floor", "gptneo-32a100-96v100"])
def test_the_ring_frontier_keeps_every_sync_term(name: str) -> None:
    """The sync bound reads only the rings no other beats at every D (`ring_frontier`):
    its terms must be the same as over every distinct ring, and the frontier must be
    smaller (on five zones, 3 of 18)."""
    report = check_file(BENCH / f"{name}.yaml")
    assert report.spec is not None
    searcher = Search(PlanningModel(report.spec), SearchOptions())
    frontier = searcher.ring_frontier()
    assert len(frontier) < len(searcher.distinct_rings())
    fast = [searcher.sync_terms(dp) for dp in range(2, 300)]
    searcher._frontier = searcher.distinct_rings()
    assert fast == [searcher.sync_terms(dp) for dp in range(2, 300)]


@pytest.mark.parametrize("seed", range(0, 40, 4))
def test_the_ring_frontier_on_random_specs(seed: int) -> None:
    searcher = Search(PlanningModel(_spec(random_instance(seed))), SearchOptions())
    fast = [searcher.sync_terms(dp) for dp in range(2, 40)]
    searcher._frontier = searcher.distinct_rings()
    assert fast == [searcher.sync_terms(dp) for dp in range(2, 40)]


@pytest.mark.parametrize("name", ["opt350m-5zones", "opt350m-budget"])
def test_stage_rings_read_one_pair_per_distinct_ring(name: str) -> None:
    """`stage_ring` takes the worst ring over one representative pair of kinds per
    distinct link (`ring_representatives`): it must equal the worst over every pair, and
    read fewer pairs where an option spans zones (five zones: 2 of 10 for us-central1's
    region-wide options)."""
    report = check_file(BENCH / f"{name}.yaml")
    assert report.spec is not None
    model = PlanningModel(report.spec)
    searcher = Search(model, SearchOptions(approximations=frozenset({"kind-profiles"})))
    fewer = 0
    for option in searcher.stage_options():
        every = [(a, b) for x, a in enumerate(option) for b in option[x:]]
        fewer += len(searcher.ring_representatives(option)) < len(every)
        for dp in (2, 7, 64):
            for stage in ((0, 1, False, False), (0, 3, True, False), (0, 24, True, True)):
                worst = max(model.ring(a, b, stage, dp) for a, b in every)
                assert searcher.stage_ring(option, dp, stage) == worst
    assert fewer > 0


class _Recorder(Search):
    """Records the shapes in the order the search reaches them, searching none and keeping
    no candidate: with no incumbent, every shape of finite bound is reached, and no range
    is dropped by its bound over its profiles."""

    def __init__(self, model: PlanningModel, options: SearchOptions) -> None:
        super().__init__(model, options)
        self.reached: list[tuple[int, int, int]] = []

    def shape(self, mbs: int, stages: int, dp: int) -> float | None:
        self.reached.append((mbs, stages, dp))
        return None

    def offer(self, candidate: object) -> None:
        return None

    def range_floor(self, mbs: int, stages: int, first: int, last: int) -> float:
        # no range is dropped over its profiles here: tests/test_solver_range_floor.py
        return -math.inf


@pytest.mark.parametrize("incumbent", [None, 0.5])
@pytest.mark.parametrize(
    ("text", "approximations"),
    [
        (CROSSING, frozenset()),
        (CROSSING, frozenset({"kind-profiles"})),
        (random_instance(3), frozenset({"kind-profiles"})),
        (random_instance(19), frozenset({"kind-profiles"})),
        (binding_instance(21), frozenset({"kind-profiles"})),
        (random_instance(25), frozenset({"kind-profiles"})),
        (_bench("opt350m-128a100"), frozenset({"kind-profiles"})),
    ],
)
def test_shallow_shapes_of_least_bound_come_first_then_every_shape_in_bound_order(
    text: str, approximations: frozenset[str], incumbent: float | None
) -> None:
    """`_best_first` reaches first the `SHALLOW_SHAPES` shapes of one or two stages with the
    least bound, then each other shape whose bound does not exceed the incumbent once, in
    order of bound, though it splits a group's range of D and lists its shapes only when
    reached. Under `kind-profiles` for max_throughput a shape's bound includes the ring
    across zones its profiles must pay (`ring_excess`). The oracle lists every shape of
    every group up front; the incumbent, where set, is held at that quantile of their
    bounds (which prunes ranges, and lists those it leaves whole)."""
    model = PlanningModel(_spec(text))
    oracle = Search(model, SearchOptions(approximations=approximations))
    zoned = "kind-profiles" in approximations and model.spec.objective == "max_throughput"
    value: dict[tuple[int, int, int], float] = {}
    for _, mbs, stages in oracle.shape_groups():
        every = oracle.shape_bounds(mbs, stages, oracle.last_dp(mbs, stages), within=True)
        for dp, bound in enumerate(every, start=1):
            if bound < math.inf:
                excess = oracle.ring_excess(stages, dp) if zoned else 0.0
                value[mbs, stages, dp] = bound + excess
    searcher = _Recorder(model, SearchOptions(approximations=approximations))
    if incumbent is not None:
        searcher._kth = sorted(value.values())[int(len(value) * incumbent)]
        value = {shape: bound for shape, bound in value.items() if bound <= searcher._kth}
    searcher.run()
    reached = searcher.reached
    assert len(reached) == len(set(reached)) and set(reached) == set(value)
    first = min(SHALLOW_SHAPES, sum(1 for shape in value if shape[1] <= 2))
    shallow, rest = reached[:first], reached[first:]
    assert all(shape[1] <= 2 for shape in shallow)
    assert max((value[s] for s in shallow), default=-math.inf) <= min(
        (value[s] for s in value if s[1] <= 2 and s not in shallow), default=math.inf
    )
    for earlier, later in pairwise(shallow):
        assert value[earlier] <= value[later]
    for earlier, later in pairwise(rest):
        assert value[earlier] <= value[later], (earlier, later)
    assert rest
