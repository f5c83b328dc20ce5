"""The `kind-profiles` search prunes without losing anything of its own space.

`kind-profiles` is a declared approximation (its gap to the exact search is measured by
bench/approximations.py), but inside its space it must be exact: every bound it prunes with
(the dual capacity bound per shape, the cost floors, the per-profile bound with sends, rings
and egress, the straggler ceiling of the split) must be a true lower bound. The oracle is the
same space enumerated with every bound switched off: each profile of every shape is split and
scored. They must find the same objective. Mutations (a capacity bound half as large; the
tied embedding's all-reduce counted twice on the end stages of a profile) show the comparison
has teeth. The bounds' ingredients are also checked one by one against direct
computations: the feasible run lengths against a brute-force placement of devices on pools,
the dual capacity bound against every profile's capacity, the work-share floor against
the straggler of the best split, and the ring across zones a shape forces against the rings
of every profile that fits the quotas.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from oracles.instances import binding_instance, random_instance
from oracles.profiles_space import ExhaustiveProfiles

from hetc.catalog import ModelArchitecture
from hetc.costmodel.compute import ComputeModel
from hetc.costmodel.planning import PlanningModel, Shape
from hetc.costmodel.profile import LayerProfile
from hetc.schema import Spec, check_file, check_text
from hetc.solver.search import SearchOptions, search
from hetc.solver.search.driver import Search
from hetc.solver.search.pairs import BuiltAsRead, PairAt, most_stages
from hetc.solver.search.reach import NO_ROOM

SEEDS = range(48)
PROFILES = frozenset({"kind-profiles"})
RELATIVE = 1e-9
BUDGET = "max_cost_per_iteration: 0.0012 USD"

ZONES = """\
version: 1
name: zones
model:
  architecture: {layers: 6, hidden: 2048, heads: 16, ffn: 8192, vocab: 32000, max_positions: 1024}
training: {global_batch_size: 16, seq_len: 1024, precision: fp16, zero_stage: 1}
objective: OBJECTIVE
CONSTRAINTS
zones:
  - name: a
    region: r1
    pools:
      - {device: A100-40GB, quota: 16, gpus_per_node: 4, price: 3.67 USD/h}
      - {device: V100-16GB, quota: 16, gpus_per_node: 4, price: 2.86 USD/h}
  - name: b
    region: r1
    pools:
      - {device: A100-40GB, quota: 8, gpus_per_node: 4, price: 3.67 USD/h}
  - name: c
    region: r2
    pools:
      - {device: A100-40GB, quota: 8, gpus_per_node: 4, price: 3.0 USD/h}
network:
  intra_zone: {bandwidth: 100Gbps, latency: 10us}
  inter_zone: {bandwidth: 50Gbps, latency: 1ms}
  inter_region: {bandwidth: 3.4Gbps, latency: 35ms}
  egress_price: {inter_zone: 0.01 USD/GB, inter_region: 0.02 USD/GB}
"""
"""Three zones in two regions: region-wide options (A100 in a and b) overlap one-pool ones,
and crossing zones costs time and egress, which the per-profile bounds price."""


TWINS = ZONES.replace(
    "      - {device: A100-40GB, quota: 8, gpus_per_node: 4, price: 3.67 USD/h}\n",
    "      - {device: A100-40GB, quota: 16, gpus_per_node: 4, price: 3.67 USD/h}\n"
    "      - {device: V100-16GB, quota: 16, gpus_per_node: 4, price: 2.86 USD/h}\n",
)
"""Zones a and b identical (mirror images of each other, `Search.zone_swaps`), c apart."""


def _with_zones(name: str, zones: str, replace: dict[str, str] | None = None) -> str:
    """ZONES with another name, these zone lines, and its other text replaced as given."""
    head, rest = ZONES.split("zones:\n")
    head = head.replace("name: zones", f"name: {name}")
    for old, new in (replace or {}).items():
        head = head.replace(old, new)
    return head + "zones:\n" + zones + "network:\n" + rest.split("network:\n")[1]


def _one_pool_zones(name: str, zones: list[tuple[str, str, int, str]]) -> str:
    """ZONES' model and network over zones of one A100 pool each: (zone, region, quota,
    price per hour)."""
    lines = "".join(
        f"  - {{name: {zone}, region: {region}, pools: [{{device: A100-40GB, quota: {quota},"
        f" gpus_per_node: 4, price: {price} USD/h}}]}}\n"
        for zone, region, quota, price in zones
    )
    return _with_zones(name, lines)


STRIPES = _one_pool_zones(
    "stripes",
    [("a", "r1", 8, "3.67"), ("b", "r1", 8, "3.67"), ("c", "r1", 8, "3.0"), ("d", "r1", 4, "3.0")],
)
"""Four small zones of one region: two options inside a zone hold 16 devices, so wider
profiles must ring across zones on a region-wide option (`Search.zone_rings`)."""

REGIONS = _one_pool_zones(
    "regions", [(region + zone, region, 4, "3.67") for region in ("r1", "r2") for zone in "abcd"]
)
"""Two regions of four one-node zones: profiles over both regions' region-wide options, or
over the wider TP of one, avoid the largest ring across zones."""


MEMORY = _with_zones(
    "memory",
    "  - name: a\n"
    "    region: r1\n"
    "    pools:\n"
    "      - {device: A100-40GB, quota: 8, gpus_per_node: 4, price: 3.67 USD/h}\n"
    "      - {device: V100-16GB, quota: 32, gpus_per_node: 4, price: 2.86 USD/h}\n",
    {
        "layers: 6, hidden: 2048, heads: 16, ffn: 8192, vocab: 32000, max_positions: 1024": (
            "layers: 12, hidden: 4096, heads: 32, ffn: 16384, vocab: 50000, max_positions: 2048"
        ),
        "global_batch_size: 16, seq_len: 1024": "global_batch_size: 64, seq_len: 2048",
    },
)
"""A 2.4B-parameter model on 8 A100 and 32 V100-16GB: a V100 at TP 1 holds a few of its 12
blocks, so memory, not the quotas, decides which D a pair of options can hold
(`Search.profile_last`)."""


def _spec(text: str) -> Spec:
    report = check_text(text, "case.yaml")
    assert report.spec is not None, report
    return report.spec


def _zones(objective: str, constraints: str = "", text: str = ZONES) -> Spec:
    text = text.replace("OBJECTIVE", objective).replace("CONSTRAINTS\n", constraints)
    return _spec(text)


@cache
def _case(seed: int) -> Spec:
    return _spec(binding_instance(seed) if seed % 2 == 0 else random_instance(seed))


def _cases() -> list[tuple[str, Spec]]:
    cases = [(f"seed {seed}", _case(seed)) for seed in SEEDS]
    cases += [
        ("zones, fastest", _zones("max_throughput")),
        ("zones, budget", _zones("max_throughput", f"constraints: {{{BUDGET}}}\n")),
        ("zones, cheapest", _zones("min_cost")),
        ("zones, floor", _zones("min_cost", "constraints: {min_throughput: 9}\n")),
        ("twins, fastest", _zones("max_throughput", text=TWINS)),
        ("twins, budget", _zones("max_throughput", f"constraints: {{{BUDGET}}}\n", TWINS)),
        ("twins, floor", _zones("min_cost", "constraints: {min_throughput: 9}\n", TWINS)),
        ("stripes, fastest", _zones("max_throughput", text=STRIPES)),
        ("stripes, budget", _zones("max_throughput", f"constraints: {{{BUDGET}}}\n", STRIPES)),
        ("regions, fastest", _zones("max_throughput", text=REGIONS)),
        ("memory, fastest", _zones("max_throughput", text=MEMORY)),
        ("memory, cheapest", _zones("min_cost", text=MEMORY)),
    ]
    return cases


def _best(
    spec: Spec, searcher: type[Search], must_use: frozenset[int] = frozenset()
) -> float | None:
    found = _top(spec, searcher, 1, must_use)
    return found[0] if found else None


def _top(
    spec: Spec,
    searcher: type[Search],
    top: int,
    must_use: frozenset[int] = frozenset(),
) -> list[float]:
    options = SearchOptions(approximations=PROFILES, top=top, must_use=must_use)
    found = searcher(PlanningModel(spec), options).run()
    assert found.complete
    return [c.value for c in found.candidates]


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=RELATIVE)


@pytest.mark.slow
def test_pruned_profiles_find_the_exhaustive_optimum() -> None:
    """The best, and with top 3 the best of the three best signatures: pruning against the
    third signature's value must keep every candidate that could be among them."""
    feasible = 0
    for name, spec in _cases():
        exhaustive = _top(spec, ExhaustiveProfiles, 3)
        pruned = _top(spec, Search, 3)
        assert len(pruned) == len(exhaustive), (name, pruned, exhaustive)
        assert all(_same(a, b) for a, b in zip(pruned, exhaustive, strict=True)), name
        best = _best(spec, Search)
        assert _same(best, exhaustive[0] if exhaustive else None), name
        feasible += bool(exhaustive)
    assert feasible >= len(SEEDS) // 2


@pytest.mark.slow
def test_a_forced_pool_gives_the_exhaustive_optimum_among_plans_renting_it() -> None:
    """`must_use` (what `--explain` asks) with each of the four pools of the three-zone case
    (and the other region's under min_cost): the pruned search, which reads only pairs
    drawing on the pool, finds what the exhaustive one finds with the pool checked only at
    the leaf."""
    cases = [("max_throughput", pool) for pool in range(4)] + [("min_cost", 3)]
    for objective, pool in cases:
        spec = _zones(objective)
        forced = frozenset({pool})
        exhaustive = _best(spec, ExhaustiveProfiles, forced)
        assert exhaustive is not None
        assert _same(_best(spec, Search, forced), exhaustive), (objective, pool)


def test_within_keeps_exactly_the_run_lengths_under_the_bound() -> None:
    """The closed form against the inequality itself, n by n."""
    rng = random.Random(11)
    cut = 0
    for _ in range(2000):
        stages = rng.randint(2, 12)
        sp_f = rng.uniform(0.1, 2.0)
        sp_s = sp_f * rng.choice([1.0, rng.uniform(1.0, 5.0)])
        lo = rng.randint(1, stages - 1)
        lengths = range(lo, rng.randint(lo, stages - 1) + 1)
        passes = rng.choice([0.0, rng.uniform(0, 50)])
        at = rng.randint(1, stages - 1)
        room = passes / (at / sp_s + (stages - at) / sp_f) * rng.uniform(0.97, 1.03)
        room = rng.choice([room, rng.uniform(-1, 20)])
        kept = set(Search.within(lengths, stages, room, passes, sp_s, sp_f))
        bound = {n: passes / (n / sp_s + (stages - n) / sp_f) for n in lengths}
        assert {n for n in lengths if bound[n] <= room} <= kept, (lengths, kept)
        assert all(bound[n] <= room * (1 + 1e-6) + 1e-12 for n in kept), (lengths, kept)
        cut += 0 < len(kept) < len(lengths)
    assert cut > 40


def test_a_capacity_bound_too_small_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation: halve the dual capacity bound (so shapes are pruned that should not be);
    on some case the pruned search then misses the exhaustive optimum."""
    true_bound = Search.most_capacity

    def halved(self: Search, mbs: int, stages: int, dp: int) -> float:
        return true_bound(self, mbs, stages, dp) / 2

    for name, spec in _cases():
        exhaustive = _best(spec, ExhaustiveProfiles)
        with monkeypatch.context() as patch:
            patch.setattr(Search, "most_capacity", halved)
            pruned = _best(spec, Search)
        if not _same(pruned, exhaustive):
            assert exhaustive is not None, name
            assert pruned is None or pruned > exhaustive
            return
    pytest.fail("halving the capacity bound went unnoticed on every case")


def _fits_by_placement(searcher: Search, demands: list[tuple[tuple[int, ...], int]]) -> bool:
    """Whether the options' device demands can be placed on their pools within quota and
    max_gpus, by trying every way to split each demand over its pools."""
    model = searcher.model
    total = sum(devices for _, devices in demands)
    if total > searcher.total_devices:
        return False

    def place(index: int, used: list[int]) -> bool:
        if index == len(demands):
            return all(u <= c for u, c in zip(used, searcher.capacity, strict=True))
        option, devices = demands[index]
        pools = sorted({model.kinds[k].pool for k in option})
        for split in itertools.product(range(devices + 1), repeat=len(pools) - 1):
            rest = devices - sum(split)
            if rest < 0:
                continue
            trial = list(used)
            for pool, amount in zip(pools, (*split, rest), strict=True):
                trial[pool] += amount
            if place(index + 1, trial):
                return True
        return False

    return place(0, [0] * len(searcher.capacity))


def test_run_lengths_are_exactly_the_placeable_ones() -> None:
    spec = _zones("max_throughput")
    searcher = Search(PlanningModel(spec), SearchOptions(approximations=PROFILES))
    options = searcher.stage_options()
    assert any(len(o) > 1 for o in options), "the case must have a region-wide option"
    kinds = searcher.model.kinds
    checked = 0
    for slow, fast in itertools.permutations(options, 2):
        for stages, dp in ((2, 1), (3, 2), (4, 4), (5, 3)):
            found = set(searcher.run_lengths(slow, fast, stages, dp))
            expected = {
                n
                for n in range(1, stages)
                if _fits_by_placement(
                    searcher,
                    [
                        (slow, n * dp * kinds[slow[0]].tp),
                        (fast, (stages - n) * dp * kinds[fast[0]].tp),
                    ],
                )
            }
            assert found == expected, (slow, fast, stages, dp)
            checked += bool(expected) and len(expected) < stages - 1
    assert checked, "no pair had some but not all run lengths feasible"


def test_the_dual_capacity_bound_covers_every_profile() -> None:
    """`most_capacity` >= sum_i 1 / speed_i of every quota-feasible profile, and is tight
    (equal to the best) on some shape."""
    rng = random.Random(7)
    tight = 0
    for spec in (_zones("max_throughput"), _case(3), _case(8)):
        searcher = Search(PlanningModel(spec), SearchOptions(approximations=PROFILES))
        model = searcher.model
        for _ in range(60):
            mbs = rng.choice(model.microbatch_sizes())
            stages = rng.randint(1, model.blocks)
            dp = rng.randint(1, max(1, searcher.total_devices // stages))
            speed, _ = searcher.option_speeds(mbs)
            hosts = searcher.hosts(mbs, dp)
            capacities = [
                n / speed[slow] + (stages - n) / speed[fast]
                for x, slow in enumerate(hosts)
                for fast in hosts[x:]
                for n in searcher.run_lengths(slow, fast, stages, dp)
            ]
            if not capacities:
                continue
            bound = searcher.most_capacity(mbs, stages, dp)
            assert max(capacities) <= bound * (1 + RELATIVE), (mbs, stages, dp)
            tight += math.isclose(max(capacities), bound, rel_tol=1e-9)
    assert tight


def test_the_work_share_floor_is_below_the_best_split() -> None:
    """(W + sends) / capacity never exceeds the straggler of the split `min_max_split`
    finds with no floor, for every two-option profile of a mixed-device case."""
    spec = _zones("max_throughput")
    searcher = Search(PlanningModel(spec), SearchOptions(approximations=PROFILES))
    model = searcher.model
    checked = 0
    for mbs in model.microbatch_sizes()[:3]:
        speed, ordered = searcher.option_speeds(mbs)
        for slow, fast in itertools.combinations(ordered, 2):
            share = searcher.work_share((slow, fast), mbs)
            assert 0 < share <= 1 + 1e-12
            for stages, n in ((2, 1), (4, 1), (4, 3)):
                sequence = (slow,) * n + (fast,) * (stages - n)
                split = searcher.min_max_split(sequence, mbs, 1)
                if split is None:
                    continue
                shape = Shape(microbatch=mbs, boundaries=split, pipelines=1)
                straggler = model.time_of_sets(shape, sequence)[0]
                sends = [searcher.send(a, b, mbs) for a, b in itertools.pairwise(sequence)]
                padded = [0.0, *sends, 0.0]
                pads = sum((padded[i] + padded[i + 1]) / speed[o] for i, o in enumerate(sequence))
                capacity = sum(1 / speed[o] for o in sequence)
                assert (share + pads) / capacity <= straggler * (1 + 1e-9)
                checked += 1
    assert checked > 20


@pytest.mark.parametrize("bandwidth", ["100Gbps", "10Gbps"])
def test_the_least_straggler_is_below_every_profile_split(bandwidth: str) -> None:
    """`least_straggler` drops a shape before its profiles are read: every profile of the
    shape that fits the quotas, split by `min_max_split` with no floor, has a straggler at
    least that (the largest stage's window on the fastest host, the work over the most
    capacity, plus the least send with P > 1); on ZONES and on ZONES with its zones' links
    slowed to 10 Gbps, where sends weigh more. With P > 1 the floor comes within 10% of
    some split (6% and 8%; 12% and 55% without the send), so the send is seen to count."""
    text = ZONES.replace("OBJECTIVE", "max_throughput").replace("CONSTRAINTS\n", "")
    spec = _spec(
        text.replace("intra_zone: {bandwidth: 100Gbps", f"intra_zone: {{bandwidth: {bandwidth}")
    )
    searcher = Search(PlanningModel(spec), SearchOptions(approximations=PROFILES))
    model = searcher.model
    closest = math.inf
    for mbs in model.microbatch_sizes()[:3]:
        _, ordered = searcher.option_speeds(mbs)
        for stages, dp in itertools.product((1, 2, 3, 5), (1, 2, 3)):
            least = searcher.least_straggler(mbs, stages, dp)
            for x, slow in enumerate(ordered):
                for fast in ordered[x:]:
                    for n in searcher.run_lengths(slow, fast, stages, dp):
                        sequence = (slow,) * n + (fast,) * (stages - n)
                        split = searcher.min_max_split(sequence, mbs, dp)
                        if split is None:
                            continue
                        shape = Shape(microbatch=mbs, boundaries=split, pipelines=dp)
                        straggler = model.time_of_sets(shape, sequence)[0]
                        assert straggler >= least * (1 - 1e-9), (mbs, stages, dp, sequence)
                        if stages > 1:
                            closest = min(closest, straggler / least)
    assert closest < 1.1, closest


def test_greedy_counts_leave_room_for_every_stage() -> None:
    """A region-wide option on two stages: filling the first stage's extra replicas into the
    first zone must not take the devices the second stage needs for its one replica there."""
    spec = _zones("max_throughput")
    searcher = Search(PlanningModel(spec), SearchOptions(approximations=PROFILES))
    model = searcher.model
    merged = next(o for o in searcher.stage_options() if len(o) == 2 and model.kinds[o[0]].tp == 1)
    room = sum(searcher.capacity[model.kinds[k].pool] for k in merged)
    dp = room // 2
    counts = searcher.counts_greedy((merged, merged), dp)
    assert counts is not None
    used = [0] * len(model.pools)
    for stage in counts:
        assert sum(c for _, c in stage) == dp and all(c >= 1 for _, c in stage)
        for k, c in stage:
            used[model.kinds[k].pool] += c * model.kinds[k].tp
    assert all(u <= c for u, c in zip(used, searcher.capacity, strict=True))


def test_the_search_result_does_not_depend_on_pruning_order() -> None:
    """Two runs agree on the whole ranked list (the tie order is documented)."""
    spec = _zones("max_throughput")
    first = search(PlanningModel(spec), SearchOptions(approximations=PROFILES, top=3))
    second = search(PlanningModel(spec), SearchOptions(approximations=PROFILES, top=3))
    assert [c.key() for c in first.candidates] == [c.key() for c in second.candidates]


@pytest.mark.parametrize("preset", ["GPT-Neo-2.7B", "OPT-350M"])
def test_all_layer_times_equal_layer_by_layer(preset: str) -> None:
    """The shared estimates give each layer exactly its own times: GPT-Neo alternates global
    and local attention, so blocks differ; a profile covering some layers overrides them."""
    arch = _preset(preset)
    device = _zones("max_throughput").devices["A100-40GB"]
    plain = ComputeModel(arch=arch, device=device, seq_len=1024)
    measured = LayerProfile(
        model=preset,
        device="A100-40GB",
        seq_len=1024,
        precision="fp16",
        times={2: {1: {1: (0.5, 1.0, 0.1), 4: (0.25, 0.5, 0.05)}}},
    )
    profiled = ComputeModel(
        arch=arch, device=device, seq_len=1024, profile=measured, activation_checkpointing=True
    )
    for model in (plain, profiled):
        for mbs, tp in ((1, 1), (2, 1), (2, 2)):
            whole = model.all_layer_times(mbs, tp)
            assert whole == [model.layer_times(i, mbs, tp) for i in range(len(model.layers()))]
    blocks = plain.all_layer_times(1, 1)[1:-1]
    if preset == "GPT-Neo-2.7B":
        assert blocks[0] != blocks[1] and blocks[0] == blocks[2]
    assert profiled.all_layer_times(2, 1)[1].backward == pytest.approx(1.5)


def _preset(name: str) -> ModelArchitecture:
    text = ZONES.replace("OBJECTIVE", "max_throughput").replace("CONSTRAINTS\n", "")
    start, end = text.index("model:"), text.index("training:")
    return _spec(text[:start] + f"model: {{preset: {name}}}\n" + text[end:]).model


def test_mirror_images_of_identical_zones_score_the_same() -> None:
    """Zones a and b of TWINS are identical: the pairs of options left out are exactly the
    mirror images (a and b swapped, mapped here from the spec's zone names) of pairs that
    are kept, and a pair and its image give the same times, egress and rental rate for
    every run length of a few shapes."""
    model = PlanningModel(_zones("min_cost", text=TWINS))
    options = SearchOptions(approximations=PROFILES)
    searcher = Search(model, options)
    kept = {(row.slow, row.fast) for row in searcher.pair_rows(1)}
    every = {(row.slow, row.fast) for row in ExhaustiveProfiles(model, options).pair_rows(1)}
    position = {
        (slot.zone.name, slot.pool.name, k.tp): k.index
        for k in model.kinds
        for slot in [model.pools[k.pool]]
    }
    mirror = {}
    for (zone, pool, tp), index in position.items():
        other = {"a": "b", "b": "a"}.get(zone, zone)
        mirror[index] = position[other, pool, tp]

    def image(option: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted(mirror[k] for k in option))

    dropped = every - kept
    assert dropped
    assert len(kept) + len(dropped) == len(every)
    for slow, fast in sorted(dropped):
        twin = (image(slow), image(fast))
        assert twin in kept and twin < (slow, fast)
        for stages, dp in ((2, 2), (3, 1), (3, 2)):
            shape = Shape(microbatch=1, boundaries=(0, *range(2, 2 * stages, 2), 6), pipelines=dp)
            for n in range(1, stages + 1):
                ours = (slow,) * n + (fast,) * (stages - n)
                theirs = (twin[0],) * n + (twin[1],) * (stages - n)
                assert model.time_of_sets(shape, ours) == pytest.approx(
                    model.time_of_sets(shape, theirs), rel=1e-12
                )
                assert model.egress(shape, ours) == pytest.approx(
                    model.egress(shape, theirs), rel=1e-12
                )
                rate = searcher.profile_rate(slow, n, fast, stages - n, dp)
                assert rate == pytest.approx(
                    searcher.profile_rate(twin[0], n, twin[1], stages - n, dp), rel=1e-12
                )


def test_most_stages_bounds_every_feasible_shape_of_a_pair() -> None:
    """`most_stages` is at least every P with a feasible run length, and the feasible P
    of a pair are a run ending at the largest (so a scan by it may stop at the first row
    that cannot fit P); it is exact for some pair, else it would prune nothing."""
    for spec in (_zones("max_throughput"), _zones("min_cost", text=TWINS), _case(3)):
        searcher = Search(PlanningModel(spec), SearchOptions(approximations=PROFILES))
        options = searcher.stage_options()
        exact = 0
        for slow, fast in itertools.combinations_with_replacement(options, 2):
            for dp in (1, 2, 3, 4, 8):
                feasible = [
                    stages
                    for stages in range(1, 3 * searcher.model.blocks)
                    if searcher.run_lengths(slow, fast, stages, dp)
                ]
                sizes = searcher.pair_sizes(slow, fast)
                most = most_stages(dp, slow == fast, sizes)
                assert all(stages <= most for stages in feasible), (slow, fast, dp)
                if feasible:
                    assert feasible == list(range(feasible[0], feasible[-1] + 1))
                    exact += feasible[-1] == most
        assert exact, spec.name


def test_end_rings_are_below_the_first_and_last_stages_rings() -> None:
    """`end_ring` bounds the ring of the first and of the last stage of every split (they
    hold the token table and the head), and for P > 1 exceeds one plain block's ring on
    some option, so it adds to the bound."""
    model = PlanningModel(_zones("max_throughput"))
    searcher = Search(model, SearchOptions(approximations=PROFILES))
    blocks = model.blocks
    stronger = 0
    for option in searcher.stage_options():
        for dp in (2, 4):
            for stages in (1, 2, 3):
                for cuts in itertools.combinations(range(1, blocks), stages - 1):
                    shape = Shape(microbatch=1, boundaries=(0, *cuts, blocks), pipelines=dp)
                    for index, first in ((0, True), (stages - 1, False)):
                        key = model.stage_key(shape, index)
                        ring = max(model.ring(a, b, key, dp) for a in option for b in option)
                        bound = searcher.end_ring(option, dp, stages, first)
                        assert bound <= ring * (1 + 1e-12), (option, dp, shape, index)
                stronger += stages > 1 and searcher.end_ring(
                    option, dp, stages, True
                ) > searcher.block_ring(option, dp)
    assert stronger


def test_zone_rings_are_paid_by_every_feasible_profile() -> None:
    """`zone_rings` is at most the one-block ring of some option of every profile that
    fits the quotas (the widest ring a profile pays is at least that), and is above 0
    on some shapes that have such profiles, which the search then prices before reading
    any pair."""
    binding = 0
    specs = [_zones("max_throughput", text=t) for t in (STRIPES, REGIONS, ZONES)]
    for spec in specs + [_case(seed) for seed in SEEDS]:
        searcher = Search(PlanningModel(spec), SearchOptions(approximations=PROFILES))
        options = searcher.stage_options()
        for stages in range(1, searcher.model.blocks + 1):
            for dp in range(1, searcher.total_devices // stages + 1):
                floor = searcher.zone_rings(stages, dp)
                paid = [
                    max(
                        searcher.block_ring(o, dp)
                        for o in ((slow,) if n == stages else (slow, fast))
                    )
                    for slow, fast in itertools.combinations_with_replacement(options, 2)
                    for n in searcher.run_lengths(slow, fast, stages, dp)
                ]
                assert all(floor <= ring * (1 + 1e-12) for ring in paid), (stages, dp)
                binding += 0 < floor < math.inf and bool(paid)
    assert binding


def test_time_tables_are_every_hosted_pair_most_stages_first_built_as_read() -> None:
    """For time, the table of (m, D) holds every pair of options that both host a stage
    at D (one-option pairs only, alone), with each option's one-block ring and its egress
    at D and the pair's `most_stages`, the most stages first and ties in the order of the
    pair rows; reading two rows builds two, and reading on builds the rest."""
    for spec in (_zones("max_throughput", text=TWINS), _zones("max_throughput")):
        model = PlanningModel(spec)
        searcher = Search(model, SearchOptions(approximations=PROFILES))
        checked = 0
        for mbs in model.microbatch_sizes():
            for dp in (1, 2, 3, 4, 6, 8, 16):
                hosts = set(searcher.hosts(mbs, dp))
                for alone in (False, True):
                    expected = [
                        PairAt(
                            pair,
                            searcher.block_ring(pair.slow, dp),
                            searcher.block_ring(pair.fast, dp),
                            searcher.block_egress(pair.slow, dp),
                            searcher.block_egress(pair.fast, dp),
                            most_stages(dp, pair.slow == pair.fast, sizes),
                        )
                        for pair, sizes in searcher.pair_rows_sized(mbs)
                        if {pair.slow, pair.fast} <= hosts and (not alone or pair.slow == pair.fast)
                    ]
                    expected.sort(key=lambda r: -r.most_stages)
                    table = searcher.pairs(mbs, dp, alone)
                    assert isinstance(table, BuiltAsRead)
                    assert list(itertools.islice(table, 2)) == expected[:2]
                    assert len(table._built) == min(2, len(expected))
                    assert list(table) == expected, (mbs, dp, alone)
                    checked += len(expected)
        assert checked > 50, spec.name


def test_cost_tables_read_as_built_are_the_whole_tables_sorted() -> None:
    """For cost `pairs` builds its rows as they are read (`BuiltAsRead`). Read whole, a
    table must hold every pair of options that host a stage at D and fit one, with its
    rings at D, ordered by W x pass price, ties in the order of the pair rows. The rows
    come from the same search with the objective read as time (whose tables the test
    above checks against that definition), sorted here by price."""
    floor = check_file(Path(__file__).parent.parent / "bench/scenarios/opt350m-floor.yaml").spec
    assert floor is not None
    for spec in (_zones("min_cost", text=TWINS), _zones("min_cost"), floor):
        model = PlanningModel(spec)
        options = SearchOptions(approximations=PROFILES)
        lazy = Search(model, options)
        assert lazy.objective == "min_cost"
        whole = Search(model, options)
        whole.objective = "max_throughput"
        checked = 0
        for mbs in model.microbatch_sizes():
            order = {(r.slow, r.fast): i for i, (r, _) in enumerate(whole.pair_rows_sized(mbs))}
            for dp in (1, 2, 3, 4, 6, 8, 16):
                for alone in (False, True):
                    rows = list(whole.pairs(mbs, dp, alone))
                    rows.sort(key=lambda r: (r.pair.share * r.pair.per_pass, order[r.pair[:2]]))
                    assert list(lazy.pairs(mbs, dp, alone)) == rows, (mbs, dp, alone)
                    assert all(r.most_stages >= 1 for r in rows)
                    checked += len(rows)
        assert checked > 50, spec.name


def test_a_table_built_as_read_draws_only_what_is_read() -> None:
    """A reader that stops after three rows draws three from the source; the next reader
    sees them again, then the rest; a third draws nothing new."""
    drawn = []

    def source() -> Iterator[int]:
        for row in range(7):
            drawn.append(row)
            yield row

    table = BuiltAsRead(source())  # type: ignore[arg-type]
    assert list(itertools.islice(table, 3)) == [0, 1, 2]
    assert drawn == [0, 1, 2]
    assert list(table) == list(range(7))
    assert list(table) == list(range(7))
    assert drawn == list(range(7))


def _holds_some_profile(searcher: Search, mbs: int, stages: int, dp: int) -> bool:
    """Whether some pair of options has a run length whose stages fit memory: one greedy
    fill with no time limit (`min_max_split` with an infinite floor fills once)."""
    options = searcher.option_speeds(mbs)[1]
    for slow, fast in itertools.combinations_with_replacement(options, 2):
        for n in searcher.run_lengths(slow, fast, stages, dp):
            sequence = (slow,) * n + (fast,) * (stages - n)
            if searcher.min_max_split(sequence, mbs, dp, math.inf) is not None:
                return True
    return False


def test_the_profile_cap_leaves_out_only_shapes_without_a_profile() -> None:
    """Above `profile_last` no pair of options can hold the shape's stages, checked D by D
    up to what counting allows; the cap cuts below the memory cap of the stage cover
    (which lets a stage mix devices) and is met exactly somewhere, so it is no bare count."""
    for objective in ("max_throughput", "min_cost"):
        searcher = Search(
            PlanningModel(_zones(objective, text=MEMORY)), SearchOptions(approximations=PROFILES)
        )
        model = searcher.model
        tighter = exact = 0
        for mbs in model.microbatch_sizes():
            for stages in range(1, model.blocks + 1):
                top = searcher.dp_cap(mbs, stages)
                cap = searcher.profile_last(mbs, stages, top)
                held = [
                    dp for dp in range(1, top + 1) if _holds_some_profile(searcher, mbs, stages, dp)
                ]
                assert all(dp <= cap for dp in held), (mbs, stages, cap, held)
                cover = searcher.cover.most_pipelines(mbs, stages, top)
                tighter += cap < cover
                exact += bool(held) and held[-1] == cap < cover
        assert tighter >= 10 and exact >= 3, (tighter, exact)


def test_reach_sums_add_up_each_stages_reach() -> None:
    """`reach_sums` read as `profile_last` reads them equal the sums of each stage's
    `memory_reach` (at the most lenient D and its in-flight count rounded down to a power
    of two), with -NO_ROOM for a stage that holds no block, for every P and split n."""
    searcher = Search(
        PlanningModel(_zones("max_throughput", text=MEMORY)), SearchOptions(approximations=PROFILES)
    )
    model = searcher.model
    blocks = model.blocks
    empty = 0
    for mbs in model.microbatch_sizes():
        for kind in range(len(model.kinds)):
            for flights in (1, 2, 3, 5, 8, 64):
                first, middle, last = searcher.reach_sums(kind, mbs, flights)
                for stages in range(2, blocks + 1):
                    reach = [
                        _lenient_reach(searcher, kind, mbs, stages, i, flights)
                        for i in range(stages)
                    ]
                    reach = [most if most >= 1 else -NO_ROOM for most in reach]
                    empty += min(reach) < 0
                    for n in range(1, stages):
                        rest = stages - 1 - n
                        assert first[stages] + middle[stages - 2] - middle[rest] == sum(reach[:n])
                        assert middle[rest] + last == sum(reach[n:])
    assert empty


def _lenient_reach(searcher: Search, kind: int, mbs: int, stages: int, i: int, flights: int) -> int:
    """The most blocks `kind` holds as stage i of P, where memory is most lenient for every
    D with at least `flights` microbatches per pipeline: D = B / m rounded up to a power of
    two, and min(P - i, flights) in flight, rounded down to a power of two."""
    model = searcher.model
    lenient = 1 << (model.batch // mbs - 1).bit_length()
    if stages == 1:
        return model.blocks if searcher.cover.holds_whole(mbs, kind, lenient) else 0
    at = 0 if i == 0 else 2 if i == stages - 1 else 1
    flight = max(1, min(stages - i, flights))
    return searcher.cover.memory_reach(mbs, kind, at, 1 << (flight.bit_length() - 1), lenient)


def test_the_profile_cap_is_the_largest_d_whose_reaches_add_up() -> None:
    """`profile_last` against its definition, D by D: the largest D <= the count cap at
    which some pair of options has a run length (`run_lengths`) whose stages' reaches
    (`memory_reach` at the most lenient D and in-flight count, each at least one block)
    add up to the model's blocks."""
    exact_sums = 0
    for text in (MEMORY, ZONES, TWINS):
        searcher = Search(
            PlanningModel(_zones("max_throughput", text=text)),
            SearchOptions(approximations=PROFILES),
        )
        model = searcher.model
        blocks = model.blocks
        for mbs in model.microbatch_sizes():
            for stages in range(1, blocks + 1):
                top = searcher.dp_cap(mbs, stages)
                flights = -(-(model.batch // mbs) // max(1, top))
                expected = 0
                for dp in range(1, top + 1):
                    # slowest first: a profile's slow option takes its first stages
                    for slow, fast in itertools.combinations_with_replacement(
                        searcher.option_speeds(mbs)[1], 2
                    ):
                        for n in searcher.run_lengths(slow, fast, stages, dp):
                            held = [
                                _lenient_reach(
                                    searcher, (slow if i < n else fast)[0], mbs, stages, i, flights
                                )
                                for i in range(stages)
                            ]
                            if min(held) >= 1 and sum(held) >= blocks:
                                expected = dp
                                exact_sums += sum(held) == blocks
                assert searcher.profile_last(mbs, stages, top) == expected, (
                    text[:30],
                    mbs,
                    stages,
                )
    assert exact_sums


@pytest.mark.slow
def test_the_two_option_floor_bounds_every_shape_of_the_space() -> None:
    """`shape_bounds(within=True)` adds `ReplicaSlots.profile_floor` under `kind-profiles`:
    every shape's bound there is at most the best candidate the space holds in it (each
    profile of the shape split and scored with nothing pruned, `ExhaustiveProfiles`), and on some
    shapes it lies above the bound over all plans (the floor is not idle). Mutation checks
    done: options per pool only (no region-wide option), and the second option's speed
    bound halved, each fail it."""
    above = 0
    shapes = 0
    for name, spec in _cases():
        model = PlanningModel(spec)
        options = SearchOptions(approximations=PROFILES)
        exhaustive = ExhaustiveProfiles(model, options)
        bounds = Search(model, options)
        for mbs in model.microbatch_sizes():
            for stages in range(1, model.blocks + 1):
                last = exhaustive.dp_cap(mbs, stages)
                if last < 1:
                    continue
                within = bounds.shape_bounds(mbs, stages, last, within=True)
                every = bounds.shape_bounds(mbs, stages, last)
                for dp in range(1, last + 1):
                    exhaustive._searching = 0.0
                    best = exhaustive.shape(mbs, stages, dp)
                    if best is None:
                        continue
                    shapes += 1
                    bound = within[dp - 1]
                    assert bound <= best * (1 + 1e-12), (name, mbs, stages, dp, bound, best)
                    above += bound > every[dp - 1] * (1 + 1e-9)
    assert shapes > 100
    assert above > 0


def test_the_two_options_of_a_profile_are_two() -> None:
    """One A100 pool of 4 devices beside 16 V100: two stages of D = 4 cannot both run on
    the A100, so the two-option floor, which takes the second option no faster than the
    second-fastest option holding 4 replicas, lies above the same floor with one option
    counted twice; and it stays under the best candidate the space holds in the shape
    (every profile split and scored, `ExhaustiveProfiles`)."""
    text = _with_zones(
        "two",
        "  - name: a\n"
        "    region: r1\n"
        "    pools:\n"
        "      - {device: A100-40GB, quota: 4, gpus_per_node: 4, price: 3.67 USD/h}\n"
        "      - {device: V100-16GB, quota: 16, gpus_per_node: 4, price: 2.86 USD/h}\n",
    )
    model = PlanningModel(_zones("max_throughput", text=text))
    options = SearchOptions(approximations=PROFILES)
    exhaustive = ExhaustiveProfiles(model, options)
    bounds = Search(model, options)
    twice = Search(model, options)
    for table in twice.slots.speeds(1):
        _, first, second = table[3]
        second[:] = first
    stages, dp, mbs = 2, 4, 1
    m1 = -(-(model.batch // mbs) // dp) - 1
    send = bounds.least_send(mbs)
    _, straggler, _ = bounds.time_terms(mbs, stages, dp)
    floor = bounds.slots.profile_floor(mbs, stages, dp, m1, send, straggler - send)
    assert floor > twice.slots.profile_floor(mbs, stages, dp, m1, send, straggler - send)
    exhaustive._searching = 0.0
    best = exhaustive.shape(mbs, stages, dp)
    assert best is not None
    assert bounds.shape_bounds(mbs, stages, dp, dp, within=True)[0] <= best * (1 + 1e-12)
