"""`kind-profiles` with three zones or more of one device in a region: the zone stripes.

A profile has at most two options and a region-wide option rings across zones, so without
the stripes the approximation cannot give each stage its own zone. The oracles: the exact
search of a small three-zone instance (the stripes are real candidates, so never better than
it, and strictly better than the profiles alone), a hand-built plan of one stage per zone on
the five-zone bench scenario, scored by the planning model, and a linear scan for the width.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from hetc.costmodel.planning import Assignment, PlanningModel, Shape
from hetc.schema import Spec, check_file, check_text
from hetc.solver.search import SearchOptions, search
from hetc.solver.search.driver import Search

PROFILES = frozenset({"kind-profiles"})
FIVE_ZONES = Path(__file__).resolve().parent.parent / "bench" / "scenarios" / "opt350m-5zones.yaml"

THREE_ZONES = """\
version: 1
name: stripes
model:
  architecture: {layers: 6, hidden: 2048, heads: 16, ffn: 8192, vocab: 32000, max_positions: 1024}
training: {global_batch_size: 16, seq_len: 1024, precision: fp16, zero_stage: 1}
objective: max_throughput
zones:
  - name: a
    region: r1
    pools:
      - {device: A100-40GB, quota: 8, gpus_per_node: 4, price: 3.67 USD/h}
  - name: b
    region: r1
    pools:
      - {device: A100-40GB, quota: 8, gpus_per_node: 4, price: 3.67 USD/h}
  - name: c
    region: r1
    pools:
      - {device: A100-40GB, quota: 8, gpus_per_node: 4, price: 3.67 USD/h}
network:
  intra_zone: {bandwidth: 100Gbps, latency: 10us}
  inter_zone: {bandwidth: 50Gbps, latency: 1ms}
  egress_price: {inter_zone: 0.01 USD/GB}
"""
"""Three identical zones of 8 A100 in one region; a ring across zones pays 1 ms per hop."""


def _spec(text: str) -> Spec:
    report = check_text(text, "stripes.yaml")
    assert report.spec is not None, report
    return report.spec


def _without_stripes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Search, "zone_stripes", lambda self: None)


def _zones_of(model: PlanningModel, assignment: Assignment) -> list[set[str]]:
    return [{model.pools[model.kinds[k].pool].zone.name for k, _ in stage} for stage in assignment]


def test_stripes_improve_on_the_profiles_and_stay_real(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(THREE_ZONES)
    exact = search(PlanningModel(spec), SearchOptions()).candidates[0]
    model = PlanningModel(spec)
    striped = search(model, SearchOptions(approximations=PROFILES)).candidates[0]
    _without_stripes(monkeypatch)
    profiles = search(PlanningModel(spec), SearchOptions(approximations=PROFILES)).candidates[0]
    assert striped.value < profiles.value * (1 - 1e-3)
    assert striped.value >= exact.value * (1 - 1e-9)
    estimate = model.estimate(striped.shape, striped.assignment)
    assert estimate.feasible
    assert math.isclose(estimate.iteration_time, striped.value, rel_tol=1e-12)
    assert all(len(zones) == 1 for zones in _zones_of(model, striped.assignment))


def _one_stage_per_zone(model: PlanningModel) -> float:
    """OPT-350M's 24 blocks as 4 stages of 6, stage i on 128 TP-1 replicas in zone i of
    us-central1: the obvious plan that rings inside zones only."""
    kinds = [
        k.index
        for k in model.kinds
        if k.tp == 1 and model.pools[k.pool].zone.region == "us-central1"
    ]
    assert len(kinds) == 4
    shape = Shape(microbatch=1, boundaries=(0, 6, 12, 18, 24), pipelines=128)
    estimate = model.estimate(shape, tuple(((k, 128),) for k in kinds))
    assert estimate.feasible, estimate.problems
    return estimate.iteration_time


@pytest.mark.slow
def test_five_zones_find_a_plan_no_worse_than_one_stage_per_zone() -> None:
    report = check_file(str(FIVE_ZONES))
    assert report.spec is not None
    model = PlanningModel(report.spec)
    found = search(model, SearchOptions(approximations=PROFILES))
    assert found.complete
    best = found.candidates[0]
    assert best.value <= _one_stage_per_zone(model) * (1 + 1e-9)
    assert all(len(zones) == 1 for zones in _zones_of(model, best.assignment))


def test_stripe_width_is_the_largest_that_holds_every_stage() -> None:
    model = PlanningModel(_spec(THREE_ZONES))
    searcher = Search(model, SearchOptions(approximations=PROFILES))
    rng = random.Random(7)
    for _ in range(300):
        rooms = [rng.choice((0, 4, 8, 12, 16, 24)) for _ in range(rng.randint(1, 4))]
        stages = rng.randint(1, 6)
        tp = rng.choice((1, 2, 4))
        mbs = rng.choice(model.microbatch_sizes())
        top = min(model.batch // mbs, searcher.total_devices // (stages * tp))
        fits = [d for d in range(1, top + 1) if sum(r // (d * tp) for r in rooms) >= stages]
        assert searcher.stripe_width(mbs, stages, tp, rooms) == max(fits, default=0)


def test_stripes_skip_regions_without_a_pool_the_search_must_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stripe rents only its region's pools, and a leaf renting none of a forced pool is
    thrown away: with zone d's pool forced, no stripe of r1 is scored at all."""
    text = THREE_ZONES.replace(
        "network:",
        "  - name: d\n    region: r2\n    pools:\n"
        "      - {device: A100-40GB, quota: 8, gpus_per_node: 4, price: 3.67 USD/h}\nnetwork:",
    )
    model = PlanningModel(_spec(text))
    scored: dict[int, int] = {}
    for forced in (0, 3):
        options = SearchOptions(approximations=PROFILES, must_use=frozenset({forced}))
        searcher = Search(model, options)
        leaves: list[object] = []
        monkeypatch.setattr(searcher, "leaf", leaves.append)
        searcher.zone_stripes()
        scored[forced] = len(leaves)
    assert scored[0] > 0
    assert scored[3] == 0


@pytest.mark.parametrize("where", ["three zones", "five zones"])
def test_a_stripes_fill_is_exact_and_its_straggler_at_least_the_mean(where: str) -> None:
    """`stripe_terms` against the planning model: for every zone stripe of the three-zone
    instance and a sample of the five-zone bench scenario's, split by `min_max_split` with
    no ceiling, F is the split's own to rounding, and its straggler is at least the floor,
    so a stripe turned away by them could not have beaten the incumbent."""
    if where == "three zones":
        spec = _spec(THREE_ZONES)
    else:
        report = check_file(str(FIVE_ZONES))
        assert report.spec is not None
        spec = report.spec
    model = PlanningModel(spec)
    searcher = Search(model, SearchOptions(approximations=PROFILES))
    seeds = searcher.stripe_seeds()
    assert seeds, "no stripe to check"
    sample = seeds if len(seeds) <= 60 else random.Random(3).sample(seeds, 60)
    split = tight = 0
    for _, mbs, stages, dp, sequence in sample:
        boundaries = searcher.min_max_split(sequence, mbs, dp)
        if boundaries is None:
            continue
        split += 1
        least, fill = searcher.stripe_terms(sequence, mbs)
        shape = Shape(microbatch=mbs, boundaries=boundaries, pipelines=dp)
        straggler, real_fill, _, _ = model.time_of_sets(shape, sequence)
        assert math.isclose(fill, real_fill, rel_tol=1e-12), (mbs, stages, dp)
        assert straggler >= least * (1 - 1e-12), (mbs, stages, dp)
        tight += math.isclose(straggler, least, rel_tol=1e-9)
    assert split >= min(10, len(sample) // 2)
    assert tight >= 1, "no stripe meets the floor: a floor too low would pass unseen"
