"""Cost per iteration, per 1M tokens and per token budget, against hand arithmetic."""

from __future__ import annotations

import pytest

from hetc.costmodel.cost import (
    IterationCost,
    budget_to_train,
    cost_per_million_tokens,
    iteration_cost,
    rental_rate,
)
from hetc.plan import Node, Pipeline, Plan, Replica, Stage
from hetc.schema import Spec, check_text

SPEC = """\
version: 1
name: two-zones
model: {preset: OPT-350M}
training: {global_batch_size: 16, seq_len: 1024, tokens: 1.6384e9}
zones:
  - name: a
    region: r1
    pools: [{device: A100-40GB, quota: 8, gpus_per_node: 4, price: 3.6 USD/h}]
  - name: b
    region: r1
    pools: [{device: V100-16GB, quota: 8, gpus_per_node: 4, price: 1.8 USD/h}]
  - name: c
    region: r2
    pools: [{device: V100-16GB, quota: 4, gpus_per_node: 4, price: 1.8 USD/h}]
network: {egress_price: {inter_zone: 0.01 USD/GB, inter_region: 0.05 USD/GB}}
"""


def _spec() -> Spec:
    result = check_text(SPEC, "s.yaml")
    assert result.spec is not None, result.diagnostics
    return result.spec


def _plan() -> Plan:
    """Two stages: V100 node in zone b (uses 2 of 4 devices), A100 node in zone a (uses 4)."""
    return Plan(
        spec_hash="0" * 64,
        hetc_version="0",
        model_blocks=24,
        global_batch_size=16,
        microbatch_size=2,
        nodes=(
            Node(
                id="v100-16gb@b/n0",
                zone="b",
                region="r1",
                pool="v100-16gb",
                device="V100-16GB",
                devices=4,
            ),
            Node(
                id="a100-40gb@a/n0",
                zone="a",
                region="r1",
                pool="a100-40gb",
                device="A100-40GB",
                devices=4,
            ),
        ),
        stages=(
            Stage(
                first_block=0,
                end_block=8,
                replicas=(
                    Replica(device="V100-16GB", tp=2, node="v100-16gb@b/n0", local_ranks=(0, 1)),
                ),
            ),
            Stage(
                first_block=8,
                end_block=24,
                replicas=(
                    Replica(
                        device="A100-40GB", tp=4, node="a100-40gb@a/n0", local_ranks=(0, 1, 2, 3)
                    ),
                ),
            ),
        ),
        pipelines=(Pipeline(replicas=(0, 0), microbatches=8),),
    )


def test_rented_nodes_are_paid_in_full() -> None:
    """4 A100 at 3.6 USD/h + 4 V100 at 1.8 USD/h (2 of them idle) = 21.6 USD/h."""
    assert rental_rate(_plan(), _spec()) == pytest.approx(21.6 / 3600)


def test_iteration_cost_adds_egress_by_zone_pair() -> None:
    """10 s at 21.6 USD/h = 0.06 USD; 2 GB a->b at 0.01 and 1 GB b->c at 0.05 = 0.07 USD."""
    cost = iteration_cost(
        _plan(), _spec(), 10.0, {("a", "b"): 2e9, ("b", "c"): 1e9, ("a", "a"): 5e9}
    )
    assert cost.compute == pytest.approx(0.06)
    assert cost.egress == pytest.approx(0.07)
    assert cost.total == pytest.approx(0.13)


def test_per_million_tokens_and_budget() -> None:
    """16 x 1024 = 16384 tokens per iteration; 1.6384e9 tokens = 100,000 iterations."""
    cost = IterationCost(compute=0.06, egress=0.07)
    assert cost_per_million_tokens(cost, _spec()) == pytest.approx(0.13 / 16384 * 1e6)
    assert budget_to_train(cost, 10.0, _spec()) == pytest.approx((1e6, 13000.0))


def test_unknown_pool_is_refused() -> None:
    """A node whose pool the spec does not have cannot be priced."""
    plan = _plan()
    bad = Plan(
        **{
            **{f: getattr(plan, f) for f in plan.__dataclass_fields__},
            "nodes": (
                Node(
                    id="x@a/n0", zone="a", region="r1", pool="nope", device="A100-40GB", devices=4
                ),
            ),
        }
    )
    with pytest.raises(ValueError, match="has no pool 'nope'"):
        rental_rate(bad, _spec())


def test_no_token_budget_no_estimate() -> None:
    """Without `training.tokens` there is nothing to estimate."""
    result = check_text(SPEC.replace(", tokens: 1.6384e9", ""), "s.yaml")
    assert result.spec is not None
    assert budget_to_train(IterationCost(compute=1, egress=0), 1.0, result.spec) is None


def test_the_planning_models_egress_prices_follow_zones_and_regions() -> None:
    """`PlanningModel.egress_price` (a table of every pool pair) is 0 within a zone, the
    spec's inter-zone price between zones of a region and its inter-region price across
    regions, per byte; a boundary's worst price is the highest over its kinds' pools."""
    from hetc.costmodel.planning import PlanningModel

    model = PlanningModel(_spec())
    per_byte = {("a", "a"): 0.0, ("a", "b"): 0.01e-9, ("a", "c"): 0.05e-9, ("b", "c"): 0.05e-9}
    zone = {slot.index: slot.zone.name for slot in model.pools}
    assert sorted(set(zone.values())) == ["a", "b", "c"]
    for a in zone:
        for b in zone:
            pair = tuple(sorted((zone[a], zone[b])))
            expected = 0.0 if pair[0] == pair[1] else per_byte[pair]
            assert model.egress_price(a, b) == pytest.approx(expected, rel=1e-12, abs=0.0)
    of_zone = {z: [k.index for k in model.kinds if zone[k.pool] == z] for z in "abc"}
    assert model._worst_price(of_zone["a"], of_zone["a"]) == 0.0
    assert model._worst_price(of_zone["a"] + of_zone["b"], of_zone["b"]) == pytest.approx(0.01e-9)
    assert model._worst_price(of_zone["b"], of_zone["a"] + of_zone["c"]) == pytest.approx(0.05e-9)
