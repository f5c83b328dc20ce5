"""Which terms of a prediction rest on a formula: `plan_coverage` against lists written by
hand for small hand-built plans and crafted profiles, the fixes it names, and the planner's
restriction to measured points (`PlanningModel(measured_points=True)`) against the points
the profiles hold.

Mutation checks done by hand (each made the named test fail, then was undone): dropping the
tied embedding's hop, or the pipeline sends, from `coverage._hops`
(test_pipeline_sends_and_the_tied_embedding_hop_are_both_priced); dropping a ring's hops
between nodes (test_links_between_nodes_are_measured_by_the_inter_node_fit); pricing a
single-node ring by an all-reduce fit only
(test_a_ring_inside_a_node_is_measured_by_its_point_to_point_fit); `point_allowed` ignoring
`out_of_memory` (test_a_point_measured_out_of_memory_never_fits); `microbatch_sizes`
ignoring `measured_points` (test_measured_points_are_exactly_the_profiles_points).
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

from hetc.costmodel.coverage import (
    MEASURE,
    NOTHING,
    TORCHRUN,
    Fallback,
    coverage_lines,
    fix_lines,
    plan_coverage,
)
from hetc.costmodel.planning import PlanningModel, valid_tp_degrees
from hetc.costmodel.profile import BandwidthFit, LayerMemory, LayerProfile
from hetc.plan import Node, Pipeline, Plan, Replica, Stage
from hetc.schema import check_file
from hetc.schema.spec import Spec
from hetc.solver.planner import plan_spec

ARCH = "{layers: 2, hidden: 64, heads: 4, ffn: 256, vocab: 512, max_positions: 64}"
DEVICE = """  - {{name: {name}, kind: {kind}, memory: 4GiB, peak_tflops: {{fp32: 0.05}},
     memory_bandwidth: 10GB/s, intra_node: {{kind: shared-memory, bandwidth: 5GB/s}},
     price: 1 USD/h}}
"""
SPEC = (
    f"""version: 1
name: coverage
model:
  architecture: {ARCH}
training: {{global_batch_size: 8, seq_len: 32, precision: fp32, zero_stage: 0,
           activation_checkpointing: CHECKPOINTING}}
devices:
"""
    + DEVICE.format(name="CPU-A", kind="cpu")
    + DEVICE.format(name="CPU-B", kind="cpu")
    + """zones:
  - {name: z1, region: r1, pools: [{device: CPU-A, quota: 4, gpus_per_node: 2}]}
  - {name: z2, region: r1, pools: [{device: CPU-A, quota: 4, gpus_per_node: 2}]}
  - {name: z3, region: r2, pools: [{device: CPU-B, quota: 4, gpus_per_node: 2}]}
"""
)


def _spec(tmp_path: Path, *, checkpointing: bool = False) -> Spec:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.replace("CHECKPOINTING", str(checkpointing).lower()))
    checked = check_file(str(path))
    assert checked.spec is not None, [d.format() for d in checked.diagnostics]
    return checked.spec


FIT = BandwidthFit(coefficients=(0.0, 0.0, 1.0), peak=1e9)


def _profile(points: dict[int, tuple[int, ...]], **changes: object) -> LayerProfile:
    """CPU-A measured at `points` (microbatch -> TP degrees), memory everywhere it timed,
    the intra-node point-to-point fit."""
    times = {i: (1e-3, 2e-3, 1e-4) for i in range(4)}
    memory: dict[int, dict[int, LayerMemory]] = {}
    for micro, tps in points.items():
        for tp in tps:
            row = memory.setdefault(
                tp, {i: LayerMemory(weight_bytes=1.0, activation_bytes={}) for i in range(4)}
            )
            for entry in row.values():
                entry.activation_bytes[micro] = 1e6
    base = LayerProfile(
        model="custom",
        device="CPU-A",
        precision="fp32",
        seq_len=32,
        times={m: dict.fromkeys(tps, times) for m, tps in points.items()},
        memory=memory,
        network={"intra_node": {"p2p": {2: FIT}}},
        source="a.json",
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def _node(name: str, zone: str, region: str, device: str) -> Node:
    return Node(id=name, zone=zone, region=region, pool=device.lower(), device=device, devices=2)


def _mixed_plan() -> Plan:
    """Stage 0: two CPU-A TP 1 replicas on one z1 node (a ring inside a node). Stage 1: CPU-A
    TP 2 on a z2 node (another zone of r1) and CPU-B TP 1 on a z3 node (region r2).
    Pipeline 0 crosses z1 -> z2, pipeline 1 z1 -> z3; stage 1's ring z2 <-> z3."""
    nodes = (
        _node("a1", "z1", "r1", "CPU-A"),
        _node("a2", "z2", "r1", "CPU-A"),
        _node("b1", "z3", "r2", "CPU-B"),
    )
    return Plan(
        spec_hash="0" * 64,
        hetc_version="0",
        model_blocks=2,
        global_batch_size=8,
        microbatch_size=2,
        nodes=nodes,
        stages=(
            Stage(
                first_block=0,
                end_block=1,
                replicas=(
                    Replica(device="CPU-A", tp=1, node="a1", local_ranks=(0,)),
                    Replica(device="CPU-A", tp=1, node="a1", local_ranks=(1,)),
                ),
            ),
            Stage(
                first_block=1,
                end_block=2,
                replicas=(
                    Replica(device="CPU-A", tp=2, node="a2", local_ranks=(0, 1)),
                    Replica(device="CPU-B", tp=1, node="b1", local_ranks=(0,)),
                ),
            ),
        ),
        pipelines=(
            Pipeline(replicas=(0, 0), microbatches=2),
            Pipeline(replicas=(1, 1), microbatches=2),
        ),
    )


def test_every_term_of_a_mixed_plan_is_listed(tmp_path: Path) -> None:
    """The list written by hand: CPU-A timed at (2, TP 1) only, so TP 2's times and memory
    are formulas; its ring inside a node is measured (point-to-point fit); the z1 -> z2 hop is
    a link between zones its profile did not measure; every hop to CPU-B's node crosses
    regions between two devices; CPU-B has no profile at all. Links between zones or devices
    are measured by the command under torchrun."""
    spec = _spec(tmp_path)
    found = plan_coverage(spec, [_profile({2: (1,)})], _mixed_plan())
    point = "microbatch 2 at TP 2 not measured"
    assert found == [
        Fallback(device="CPU-A", term="activation memory", missing=point, fix=MEASURE),
        Fallback(device="CPU-A", term="layer times", missing=point, fix=MEASURE),
        Fallback(
            device="CPU-A",
            term="links between zones",
            missing="not measured",
            fix=TORCHRUN,
        ),
        Fallback(
            device="CPU-A / CPU-B",
            term="links between regions",
            missing="the spec's network figure (nodes of two devices)",
            fix=TORCHRUN,
        ),
        Fallback(device="CPU-B", term="activation memory", missing="no profile", fix=MEASURE),
        Fallback(device="CPU-B", term="layer times", missing="no profile", fix=MEASURE),
    ]
    assert coverage_lines(found)[1] == f"CPU-A: layer times: {point}"


def test_activation_checkpointing_makes_memory_a_formula(tmp_path: Path) -> None:
    """Under checkpointing activation memory is the formula even at measured points, and no
    command measures it."""
    spec = _spec(tmp_path, checkpointing=True)
    found = plan_coverage(spec, [_profile({2: (1, 2)})], _mixed_plan())
    memory = [f for f in found if f.device == "CPU-A" and f.term == "activation memory"]
    assert memory == [
        Fallback(
            device="CPU-A",
            term="activation memory",
            missing="formula under activation checkpointing (a profile measures layers that"
            " keep their activations)",
            fix=NOTHING,
        )
    ]
    assert not [f for f in found if f.device == "CPU-A" and f.term == "layer times"]


def _one_zone_plan(same_node: bool) -> Plan:
    """Two CPU-A TP 1 replicas of one stage, on one z1 node or on two."""
    nodes = (_node("a1", "z1", "r1", "CPU-A"), _node("a2", "z1", "r1", "CPU-A"))
    second = "a1" if same_node else "a2"
    return Plan(
        spec_hash="0" * 64,
        hetc_version="0",
        model_blocks=2,
        global_batch_size=8,
        microbatch_size=1,
        nodes=nodes if not same_node else nodes[:1],
        stages=(
            Stage(
                first_block=0,
                end_block=2,
                replicas=(
                    Replica(device="CPU-A", tp=1, node="a1", local_ranks=(0,)),
                    Replica(
                        device="CPU-A", tp=1, node=second, local_ranks=(1 if same_node else 0,)
                    ),
                ),
            ),
        ),
        pipelines=(
            Pipeline(replicas=(0,), microbatches=4),
            Pipeline(replicas=(1,), microbatches=4),
        ),
    )


def test_a_ring_inside_a_node_is_measured_by_its_point_to_point_fit(tmp_path: Path) -> None:
    """Without an all-reduce fit the simulator prices the ring's hops by the point-to-point
    fit, so it is measured; with neither fit it is a formula."""
    spec = _spec(tmp_path)
    plan = _one_zone_plan(same_node=True)
    assert plan_coverage(spec, [_profile({1: (1,)})], plan) == []
    bare = _profile({1: (1,)}, network={})
    assert plan_coverage(spec, [bare], plan) == [
        Fallback(
            device="CPU-A",
            term="intra-node collectives",
            missing="collectives inside a node not measured",
            fix=MEASURE,
        )
    ]
    reduce_only = _profile({1: (1,)}, network={"intra_node": {"all_reduce": {2: FIT}}})
    assert plan_coverage(spec, [reduce_only], plan) == []


def test_links_between_nodes_are_measured_by_the_inter_node_fit(tmp_path: Path) -> None:
    """Between two nodes of one zone: measured with an inter-node point-to-point fit; without
    it `hetc profile measure` measures it for a CPU device (loopback), torchrun for a GPU."""
    spec = _spec(tmp_path)
    plan = _one_zone_plan(same_node=False)
    fitted = _profile({1: (1,)}, network={"inter_node": {"p2p": {1: FIT}}})
    assert plan_coverage(spec, [fitted], plan) == []
    missing = plan_coverage(spec, [_profile({1: (1,)})], plan)
    assert missing == [
        Fallback(device="CPU-A", term="links between nodes", missing="not measured", fix=MEASURE)
    ]
    gpu = replace(
        spec, devices={**spec.devices, "CPU-A": replace(spec.devices["CPU-A"], kind="gpu")}
    )
    assert plan_coverage(gpu, [_profile({1: (1,)})], plan)[0].fix == TORCHRUN


def test_links_between_zones_count_as_measured_where_the_pricer_uses_a_fit(
    tmp_path: Path,
) -> None:
    """Coverage asks the pricing the simulator uses: a profile's `inter_zone` fit measures
    the hop between the two zones of one region, and the `inter_node` fit alone does not."""
    from hetc.costmodel.pricing import End, LinkPricer

    spec = _spec(tmp_path)
    zone = spec.zones[0]
    end = End(zone, "CPU-A", zone.pools[0].nic_bandwidth)
    other = End(replace(zone, name="elsewhere"), "CPU-A", zone.pools[0].nic_bandwidth)
    fitted = _profile({1: (1,)}, network={"inter_zone": {"p2p": {1: FIT}}})
    assert LinkPricer(spec, {"CPU-A": fitted}).between_nodes(end, other, 1).measured
    inter = _profile({1: (1,)}, network={"inter_node": {"p2p": {1: FIT}}})
    assert not LinkPricer(spec, {"CPU-A": inter}).between_nodes(end, other, 1).measured


def test_fix_lines_name_the_commands_that_measure_the_rest(tmp_path: Path) -> None:
    """Per device the measure command into its profile's file (a new file without one), the
    torchrun form for a GPU's link between nodes, and what nothing measures."""
    found = [
        Fallback(device="CPU-A", term="layer times", missing="x", fix=MEASURE),
        Fallback(device="CPU-A", term="activation memory", missing="x", fix=MEASURE),
        Fallback(device="CPU-B", term="layer times", missing="no profile", fix=MEASURE),
        Fallback(device="GPU", term="links between nodes", missing="x", fix=TORCHRUN),
        Fallback(device="CPU-A", term="links between zones", missing="x", fix=NOTHING),
    ]
    lines = fix_lines(found, "spec.yaml", [_profile({1: (1,)})])
    assert lines[:2] == [
        "hetc profile measure spec.yaml --device CPU-A -o a.json",
        "hetc profile measure spec.yaml --device CPU-B -o cpu-b.json",
    ]
    assert lines[2].endswith("profile measure spec.yaml --device GPU -o gpu.json")
    assert "torchrun --nnodes 2" in lines[2]
    assert lines[3].startswith("no hetc command measures CPU-A: links between zones")
    assert coverage_lines([]) == ["every term measured"]


def test_fix_lines_name_each_node_zone_for_links_between_zones_or_devices() -> None:
    """A link between zones needs each node's --zone; one between two devices, each node's
    own --device and -o too."""
    found = [
        Fallback(device="CPU-A", term="links between zones", missing="x", fix=TORCHRUN),
        Fallback(device="CPU-A / CPU-B", term="links between nodes", missing="x", fix=TORCHRUN),
    ]
    lines = fix_lines(found, "spec.yaml", [_profile({1: (1,)})])
    assert lines[0].startswith("on two nodes of the device: torchrun --nnodes 2")
    assert lines[0].endswith("profile measure spec.yaml --device CPU-A -o a.json --zone ITS-ZONE")
    assert lines[1].startswith("on a node of each device: torchrun")
    assert lines[1].endswith(
        "--device CPU-A -o a.json --zone ITS-ZONE (on the CPU-B node: --device CPU-B"
        " -o cpu-b.json --zone ITS-ZONE)"
    )


# -- the planner restricted to measured points ------------------------------------------------


def _all_points(spec: Spec) -> set[tuple[str, int, int]]:
    """(device, microbatch, TP) the planner considers, enumerated here: divisors of the
    batch up to 16, and the TP degrees of each pool."""
    batch = spec.training.global_batch_size
    sizes = [m for m in range(1, 17) if batch % m == 0]
    return {
        (p.device, m, t)
        for z in spec.zones
        for p in z.pools
        for m in sizes
        for t in valid_tp_degrees(spec.model, p.gpus_per_node)
    }


@pytest.mark.parametrize(
    "points",
    [{1: (1,)}, {2: (1, 2), 8: (2,)}, {1: (2,), 4: (1,)}, {1: (1, 2), 2: (1, 2), 4: (1, 2)}],
)
def test_measured_points_are_exactly_the_profiles_points(
    tmp_path: Path, points: dict[int, tuple[int, ...]]
) -> None:
    """With `measured_points` the (device, microbatch, TP) triples a stage may use are the
    profile's timed points, by brute force over every kind, size and stage range; CPU-B,
    without a profile, offers none. Without it, every point the planner considers."""
    spec = _spec(tmp_path)
    profile = _profile(points)
    wanted = {("CPU-A", m, t) for m, tps in points.items() for t in tps}

    def usable(model: PlanningModel) -> set[tuple[str, int, int]]:
        found = set()
        for mbs, kind in itertools.product(model.microbatch_sizes(), model.kinds):
            if model.fits(kind.index, mbs, 0, 4, 1, 1):
                found.add((kind.device, mbs, kind.tp))
        return found

    assert usable(PlanningModel(spec, profiles=[profile], measured_points=True)) == wanted
    assert usable(PlanningModel(spec, profiles=[profile])) == _all_points(spec)
    sizes = PlanningModel(spec, profiles=[profile], measured_points=True).microbatch_sizes()
    assert sizes == tuple(sorted(points))


def test_a_point_measured_out_of_memory_never_fits(tmp_path: Path) -> None:
    """A (microbatch, TP) point the profile found out of memory does not fit, restricted or
    not, so the best plan avoids it; the planner's other points stay."""
    spec = _spec(tmp_path)
    oom = {m: frozenset({1, 2}) for m in (2, 4, 8)}
    profile = _profile({1: (1, 2)}, out_of_memory=oom)
    model = PlanningModel(spec, profiles=[profile])
    for kind in model.kinds:
        for mbs in model.microbatch_sizes():
            fits = model.fits(kind.index, mbs, 0, 4, 1, 1)
            assert fits == (kind.device == "CPU-B" or mbs == 1), (kind, mbs)
    best = plan_spec(spec, profiles=[profile]).proposals[0].plan
    uses_a = any(r.device == "CPU-A" for s in best.stages for r in s.replicas)
    assert best.microbatch_size == 1 or not uses_a


def _three_stage_plan() -> Plan:
    """Stages on a1 (z1), a2 (z2), a3 (z1): both pipeline sends cross zones, and only the
    tied embedding's hop, between the first and last stage, joins two nodes of z1."""
    nodes = (
        _node("a1", "z1", "r1", "CPU-A"),
        _node("a2", "z2", "r1", "CPU-A"),
        _node("a3", "z1", "r1", "CPU-A"),
    )
    return Plan(
        spec_hash="0" * 64,
        hetc_version="0",
        model_blocks=2,
        global_batch_size=8,
        microbatch_size=1,
        nodes=nodes,
        stages=tuple(
            Stage(
                first_block=min(i, 2),
                end_block=min(i + 1, 2) if i < 2 else 2,
                replicas=(Replica(device="CPU-A", tp=1, node=node.id, local_ranks=(0,)),),
            )
            for i, node in enumerate(nodes)
        ),
        pipelines=(Pipeline(replicas=(0, 0, 0), microbatches=8),),
    )


def test_pipeline_sends_and_the_tied_embedding_hop_are_both_priced(tmp_path: Path) -> None:
    """The sends give the links between zones; the tied embedding's all-reduce alone gives
    the link between nodes, and an untied model has none."""
    profile = _profile({1: (1,)})
    tied = plan_coverage(_spec(tmp_path), [profile], _three_stage_plan())
    assert [f.term for f in tied] == ["links between nodes", "links between zones"]
    path = tmp_path / "untied.yaml"
    text = SPEC.replace("CHECKPOINTING", "false")
    path.write_text(
        text.replace("max_positions: 64}", "max_positions: 64, tied_embeddings: false}")
    )
    untied = check_file(str(path)).spec
    assert untied is not None
    assert [f.term for f in plan_coverage(untied, [profile], _three_stage_plan())] == [
        "links between zones"
    ]
