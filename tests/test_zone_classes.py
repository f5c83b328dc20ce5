"""Planner memory and work bounded in the number of zones: pair terms priced per class of
pool pair, and sets of kinds cut to the zones that differ (`costmodel.classes`)."""

from __future__ import annotations

import itertools
import random
import sys
from pathlib import Path

import pytest

from hetc.costmodel.network import send_time
from hetc.costmodel.planning import PlanningModel
from hetc.costmodel.pricing import LinkPricer
from hetc.schema import check_text
from hetc.schema.spec import Spec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import zones as bench_zones


def _spec(text: str) -> Spec:
    result = check_text(text, "z.yaml")
    assert result.spec is not None, [d.format() for d in result.diagnostics]
    return result.spec


def _mixed_spec(rng: random.Random) -> Spec:
    """Up to 12 zones over three regions, pools differing in device and NIC, some zones
    with two pools, and a link override naming one zone and one region."""
    lines = [
        "version: 1",
        "name: mixed",
        "model: {preset: OPT-350M}",
        "training: {global_batch_size: 64, seq_len: 512, precision: fp16, zero_stage: 1}",
        "zones:",
    ]
    regions = ("ra", "rb", "rc")
    for z in range(rng.randint(6, 14)):
        region = regions[z] if z < 3 else rng.choice(regions)
        lines += [f"  - name: z{z}", f"    region: {region}", "    pools:"]
        for device in rng.sample(["A100-40GB", "V100-16GB"], 1 if rng.random() < 0.8 else 2):
            nic = rng.choice(["100Gbps"] * 5 + ["25Gbps"])
            lines.append(
                f"      - {{device: {device}, quota: 8, gpus_per_node: 4, price: 3 USD/h,"
                f" nic_bandwidth: {nic}}}"
            )
    lines += [
        "network:",
        "  links:",
        "    - {between: [z1, rb], bandwidth: 2Gbps, latency: 40ms}",
    ]
    return _spec("\n".join(lines) + "\n")


def _signatures(model: PlanningModel, sets: tuple[tuple[int, ...], ...]) -> set[object]:
    """Every (signature, TP) of the sets' kinds, and every (signature, TP, signature, TP,
    relation) of their pairs: what the pair and single-kind terms depend on."""
    c = model.classes
    out: set[object] = set()
    for kinds in sets:
        out |= {(c.signature[model.kinds[k].pool], model.kinds[k].tp) for k in kinds}
    for left, right in itertools.product(sets, repeat=2):
        for a, b in itertools.product(left, right):
            ka, kb = model.kinds[a], model.kinds[b]
            out.add((*c.pair(ka.pool, kb.pool), ka.tp, kb.tp))
    return out


def _pick(rng: random.Random, model: PlanningModel) -> tuple[int, ...]:
    """A random set of kinds, or (mostly) every kind of some TP degrees, as an option is."""
    if rng.random() < 0.25:
        kinds = [k.index for k in model.kinds]
        return tuple(sorted(rng.sample(kinds, rng.randint(1, len(kinds)))))
    tps = rng.sample([1, 2, 4], rng.randint(1, 3))
    return tuple(k.index for k in model.kinds if k.tp in tps)


def test_keeping_two_zones_per_content_keeps_every_pair_class() -> None:
    """On random specs and random sets of kinds, the kept kinds have exactly the single and
    pair classes of the full sets (brute force over every pair), and drop zones when some
    repeat. Mutation check: keeping one zone per content (`< 1`) fails this test."""
    rng = random.Random(7)
    dropped = 0
    for _ in range(60):
        model = PlanningModel(_mixed_spec(rng))
        sets = tuple(_pick(rng, model) for _ in range(rng.randint(1, 2)))
        kept = model.classes.keep(*sets)
        assert all(set(k) <= set(s) for k, s in zip(kept, sets, strict=True))
        assert _signatures(model, kept) == _signatures(model, sets)
        dropped += sum(map(len, sets)) > sum(map(len, kept))
    assert dropped > 8


def test_pair_terms_cached_per_class_equal_a_fresh_pricing_of_each_pair() -> None:
    """Every pool pair's send time equals one priced by a fresh LinkPricer (no cache), so no
    two pairs of different price share a class. Mutation check: leaving "one zone or two"
    out of LinkPricer's key fails this test."""
    rng = random.Random(11)
    for _ in range(20):
        spec = _mixed_spec(rng)
        model = PlanningModel(spec)
        nbytes = model.activation_bytes(2)
        for a, b in itertools.product(range(len(model.pools)), repeat=2):
            if a == b:
                continue
            hop = LinkPricer(spec, {}).between_nodes(model.end(a), model.end(b), 1)
            want = send_time(nbytes, hop.link, nic_bandwidth=hop.nic, curve=hop.curve)
            assert model.send(a, b, 2) == want


def _query_everything(model: PlanningModel) -> None:
    """Every pair term between every two pools and kinds, and the set terms of each
    region's kinds as one set."""
    for a, b in itertools.product(range(len(model.pools)), repeat=2):
        model.send(a, b, 1)
        model.egress_price(a, b)
    for ka, kb in itertools.product(model.kinds, repeat=2):
        model.ring(ka.index, kb.index, (0, 2, True, False), 4)
        model.tied(ka.index, kb.index)
    regions: dict[str, list[int]] = {}
    for k in model.kinds:
        regions.setdefault(model.pools[k.pool].zone.region, []).append(k.index)
    for kinds in regions.values():
        model.stage_sync(kinds, (0, 2, True, False), 4, 1, 0, 3)
        model.send_between(kinds, kinds, 1)


def test_caches_hold_one_entry_per_class_whatever_the_zone_count() -> None:
    """Asked every pair of 40 and of 160 one-pool zones over four regions, the model's link,
    send, ring and tied caches and the pricer's hops have the same, small sizes; and a
    region-wide set is cut to two zones."""
    sizes = []
    for zones in (40, 160):
        model = PlanningModel(_spec(bench_zones.zones_spec(zones)))
        _query_everything(model)
        assert model.classes.classes == 4
        sizes.append(
            (
                len(model._links),
                len(model._sends),
                len(model._rings),
                len(model._tieds),
                len(model.pricer._between),
            )
        )
        region = tuple(
            k.index for k in model.kinds if model.pools[k.pool].zone.region == "us-west1"
        )
        (kept,) = model.classes.keep(region)
        assert len({model.pools[model.kinds[k].pool].zone.name for k in kept}) == 2
    assert sizes[0] == sizes[1]
    assert max(sizes[1]) <= (4 * 3) ** 2 * 3


@pytest.mark.slow
def test_planning_400_zones_keeps_structures_per_class() -> None:
    """A 400-zone spec, searched for 20 s, leaves the model's pair caches at class size
    (at most (signatures x TP degrees)^2 x relations), never per zone pair."""
    from hetc.solver.planner import plan_spec

    spec = _spec(bench_zones.zones_spec(400))
    result = plan_spec(spec, work_limit=200_000_000)
    model = result.model
    bound = (model.classes.classes * 3) ** 2 * 3
    assert len(model.pools) == 400 and model.classes.classes == 4
    for cache in (model._links, model._sends, model._tieds, model.pricer._between):
        assert len(cache) <= bound
    assert result.proposals
