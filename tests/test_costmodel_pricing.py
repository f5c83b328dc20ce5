"""`hetc.costmodel.pricing`: which fact prices a hop, and how a measured fit prices bytes.

Oracles are hand computations on fits whose curves are flat (GB/s = c) or linear in log size,
so every transfer time is bytes over a number written in the test."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from hetc.costmodel.network import FLAT, MeasuredCurve, transfer_time
from hetc.costmodel.planning import PlanningModel
from hetc.costmodel.pricing import End, Hop, LinkPricer, SlowerOf, scope_between, slower_of
from hetc.costmodel.profile import BandwidthFit, LayerProfile, MeasuredLink
from hetc.costmodel.simulate import simulate
from hetc.plan import Node, Pipeline, Plan, Replica, Stage
from hetc.schema import check_text
from hetc.schema.spec import LinkClass, Spec

SPEC = """\
version: 1
name: pricing
model:
  architecture: {layers: 2, hidden: 64, heads: 4, ffn: 256, vocab: 512, max_positions: 64}
training: {global_batch_size: 8, seq_len: 32, precision: fp32, zero_stage: 0}
zones:
  - {name: a, region: r1, pools: [{device: A100-40GB, quota: 8, gpus_per_node: 2}]}
  - {name: b, region: r1, pools: [{device: A100-40GB, quota: 8, gpus_per_node: 2},
                                  {device: V100-16GB, quota: 8, gpus_per_node: 2}]}
  - {name: c, region: r2, pools: [{device: A100-40GB, quota: 8, gpus_per_node: 2}]}
network:
  intra_zone: {bandwidth: 80Gbps, latency: 10us}
  inter_zone: {bandwidth: 40Gbps, latency: 1ms}
  inter_region: {bandwidth: 8Gbps, latency: 20ms}
  links: [{between: [a, c], latency: 30ms}]
"""


def _spec() -> Spec:
    checked = check_text(SPEC)
    assert checked.spec is not None, checked.diagnostics
    return checked.spec


def flat(gbps: float) -> BandwidthFit:
    """A fit reaching `gbps` GB/s at every size it holds (1 B to 1 TB)."""
    return BandwidthFit(coefficients=(0.0, 0.0, gbps), peak=gbps * 1e9, sizes=(1.0, 1e12))


def _profile(device: str, **network: object) -> LayerProfile:
    times = {i: (1e-3, 2e-3, 1e-4) for i in range(4)}
    return LayerProfile(
        model="custom",
        device=device,
        precision="fp32",
        seq_len=32,
        times={1: {1: times}},
        **network,  # type: ignore[arg-type]
    )


def _end(spec: Spec, zone: int, device: str = "A100-40GB") -> End:
    z = spec.zones[zone]
    pool = next(p for p in z.pools if p.device == device)
    return End(z, device, pool.nic_bandwidth)


# -- the measured curve ----------------------------------------------------------------------


def test_a_measured_curve_is_the_fit_inside_its_sizes_and_constant_outside() -> None:
    """GB/s = 1 + x on [1 MB, 1 GB] (x = log2 of MB): 1 GB/s at 1 MB, 3 at 4 MB; below 1 MB a
    message takes as long as 1 MB does; above 1 GB it moves at 1 GB's rate (11 GB/s)."""
    curve = MeasuredCurve(0.0, 1.0, 1.0, peak=20e9, smallest=1e6, largest=1e9)
    link = LinkClass(bandwidth=20e9, latency=0.0)

    def seconds(nbytes: float) -> float:
        return transfer_time(nbytes, link, nic_bandwidth=math.inf, curve=curve)

    assert seconds(4e6) == pytest.approx(4e6 / 3e9)
    assert seconds(1e6) == pytest.approx(1e6 / 1e9)
    assert seconds(1e3) == pytest.approx(1e6 / 1e9), "latency-bound: the smallest's time"
    x_top = math.log2(1e9 / 1e6)
    assert seconds(8e9) == pytest.approx(8e9 / ((1 + x_top) * 1e9))


def test_an_all_reduce_fit_is_read_at_the_whole_buffer() -> None:
    """A ring of n steps over 1/n of the buffer: the all-reduce fit (keyed by the buffer) is
    read at chunk x n, which `scale` does."""
    fit = BandwidthFit(coefficients=(0.0, 1.0, 1.0), peak=20e9, sizes=(1e6, 1e9))
    assert fit.curve(scale=4)(1e6) == pytest.approx(fit.rate(4e6) / 20e9)


# -- which fact prices a hop -----------------------------------------------------------------


def test_between_nodes_precedence_named_then_class_then_spec() -> None:
    """A link measured between the two named zones wins (from either end's profile); else
    the device's fit for the class of the pair, one flow's share of its peak; else the
    spec's link class with overrides and the smaller NIC, flat."""
    spec = _spec()
    named = MeasuredLink(source="a", target="b", peer="A100-40GB", collective="p2p",
                         devices=1, fit=flat(3.0))  # fmt: skip
    a100 = _profile(
        "A100-40GB",
        network={"inter_zone": {"p2p": {1: flat(7.0), 4: flat(20.0)}}},
        links=(named,),
    )
    pricer = LinkPricer(spec, {"A100-40GB": a100})
    a, b, c = (_end(spec, i) for i in range(3))
    hop = pricer.between_nodes(a, b, 1)
    assert (hop.link.bandwidth, hop.link.latency, hop.nic) == (3e9, 0.0, math.inf)
    assert hop.measured and "links[a -> b" in hop.source
    assert pricer.between_nodes(b, a, 1).link.bandwidth == 3e9, "the other end's named link"
    assert pricer.between_nodes(a, b, 4).link.bandwidth == 3e9, "the nearest measured count"
    b2 = End(spec.zones[1], "A100-40GB", 1.0)
    other = LinkPricer(spec, {"A100-40GB": replace(a100, links=())})
    assert other.between_nodes(a, b2, 4).link.bandwidth == pytest.approx(20e9 / 4)
    assert other.between_nodes(a, b2, 1).link.bandwidth == pytest.approx(7e9)
    spec_hop = other.between_nodes(a, c, 2)
    assert (spec_hop.link.bandwidth, spec_hop.link.latency) == (1e9, 0.03)
    assert (spec_hop.curve, spec_hop.nic) == (FLAT, a.nic)
    assert spec_hop.source == "spec: network.inter_region (with overrides)"
    assert not spec_hop.measured


def test_two_devices_take_the_slower_flow_of_their_two_measurements() -> None:
    spec = _spec()
    a100 = _profile("A100-40GB", network={"inter_node": {"p2p": {1: flat(6.0)}}})
    v100 = _profile("V100-16GB", network={"inter_node": {"p2p": {2: flat(8.0)}}})
    a, v = _end(spec, 1), _end(spec, 1, "V100-16GB")
    both = LinkPricer(spec, {"A100-40GB": a100, "V100-16GB": v100}).between_nodes(a, v, 1)
    assert both.link.bandwidth == pytest.approx(4e9), "V100's 8 GB/s shared by its 2 flows"
    one = LinkPricer(spec, {"A100-40GB": a100}).between_nodes(a, v, 1)
    assert not one.measured, "a link is measured only where both devices' classes are"


def test_inside_a_node_the_intra_node_fit_or_the_catalog_link() -> None:
    spec = _spec()
    fits = {"p2p": {2: flat(50.0)}, "all_reduce": {4: flat(120.0)}}
    pricer = LinkPricer(spec, {"A100-40GB": _profile("A100-40GB", network={"intra_node": fits})})
    p2p = pricer.inside_node("A100-40GB", "p2p", 2)
    assert (p2p.link.bandwidth, p2p.nic, p2p.measured) == (50e9, math.inf, True)
    ring = pricer.inside_node("A100-40GB", "all_reduce", 3)
    assert ring.curve == flat(120.0).curve(scale=3.0), "nearest size 4, read at the buffer"
    catalog = LinkPricer(spec, {}).inside_node("A100-40GB", "p2p", 2)
    assert catalog.link.bandwidth == spec.devices["A100-40GB"].intra_node_bandwidth / 2
    assert not catalog.measured


def test_scope_between_zones_and_regions() -> None:
    spec = _spec()
    a, b, c = spec.zones
    assert [scope_between(a, a), scope_between(a, b), scope_between(a, c)] == [
        "inter_node",
        "inter_zone",
        "inter_region",
    ]


# -- the slower of several placements --------------------------------------------------------


def test_slower_of_keeps_a_dominating_hop_and_combines_crossing_ones() -> None:
    """A network hop slower at every size stays as it is; a 1 ms / 10 GB/s hop against a
    0 latency / 1 GB/s one crosses at ~11 KB, so the combination prices each message at the
    slower of the two."""
    fast = Hop(LinkClass(bandwidth=100e9, latency=1e-6), FLAT, math.inf, "fast")
    network = Hop(LinkClass(bandwidth=10e9, latency=1e-3), FLAT, math.inf, "network")
    thin = Hop(LinkClass(bandwidth=1e9, latency=0.0), FLAT, math.inf, "thin")
    assert slower_of(network, (fast,), 1) is network
    both = slower_of(network, (fast, thin), 1)
    assert isinstance(both.curve, SlowerOf) and both.curve.hops == (network, thin)
    for nbytes in (1e3, 1e5, 1e8):
        expected = max(1e-3 + nbytes / 10e9, nbytes / 1e9)
        got = transfer_time(nbytes, both.link, nic_bandwidth=both.nic, curve=both.curve)
        assert got == pytest.approx(expected)


def test_the_planner_prices_a_shared_pool_hop_at_its_slowest_placement() -> None:
    """Two TP-1 replicas of one two-device pool may share a node: with a CPU-like intra-node
    link slower than the network, the planner's hop is the intra-node one; between two pools
    it is the network's."""
    spec = _spec()
    slow = {"p2p": {2: flat(0.5)}, "all_reduce": {2: flat(0.25)}}
    model = PlanningModel(spec, profiles=[_profile("A100-40GB", network={"intra_node": slow})])
    link, curve, _ = model.measured_link(0, 0, 1)
    seconds = transfer_time(1e6, link, nic_bandwidth=math.inf, curve=curve)
    assert seconds == pytest.approx(1e6 / 0.25e9), "the 2-device all-reduce, read at 2 MB"
    between, _, nic = model.measured_link(0, 1, 1)
    assert between.bandwidth == pytest.approx(40e9 / 8) and nic == pytest.approx(10e9)


# -- the simulator prices each hop of a ring with its own curve ------------------------------


def test_a_ring_over_two_nodes_prices_each_hop_with_its_own_fit() -> None:
    """Four TP-1 replicas of one stage on two two-device nodes: two hops inside a node (the
    intra-node fit, 40 GB/s) and two between (the inter-node fit for 1 flow, GB/s = 1 + x on
    1 MB .. 1 GB). A step takes its slowest hop: the inter-node one at the 1/4 chunk.
    Mutation check: pricing a ring of mixed hops flat (as the simulator did) fails this."""
    spec = _spec()
    inter = BandwidthFit(coefficients=(0.0, 1.0, 1.0), peak=20e9, sizes=(1e6, 1e9))
    profile = _profile(
        "A100-40GB",
        network={"intra_node": {"p2p": {2: flat(40.0)}}, "inter_node": {"p2p": {1: inter}}},
    )
    nodes = tuple(
        Node(id=f"n{k}", zone="a", region="r1", pool=spec.zones[0].pools[0].name,
             device="A100-40GB", devices=2)
        for k in range(2)
    )  # fmt: skip
    replicas = tuple(
        Replica(device="A100-40GB", tp=1, node=f"n{k // 2}", local_ranks=(k % 2,)) for k in range(4)
    )
    plan = Plan(
        spec_hash="x",
        hetc_version="0",
        model_blocks=2,
        global_batch_size=8,
        microbatch_size=1,
        nodes=nodes,
        stages=(Stage(first_block=0, end_block=2, replicas=replicas),),
        pipelines=tuple(Pipeline(replicas=(k,), microbatches=2) for k in range(4)),
    )
    simulation = simulate(plan, spec, profiles=[profile])
    gradient = spec.model.parameter_count() * 4  # fp32, one stage: the whole model
    chunk = gradient / 4
    step = chunk / inter.rate(chunk)
    compute = 2 * 4 * (1e-3 + 2e-3)  # 2 microbatches of 4 layers
    update = 4 * 1e-4
    assert simulation.iteration_time == pytest.approx(compute + 6 * step + update, rel=1e-9)
