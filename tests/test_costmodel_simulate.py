"""A whole plan evaluated: consistency with the parts, and published observations."""

from __future__ import annotations

import pytest

from hetc.costmodel.compute import ComputeModel
from hetc.costmodel.cost import rental_rate
from hetc.costmodel.simulate import simulate
from hetc.plan import Node, Pipeline, Plan, Replica, Stage, plan_problems
from hetc.schema import Spec, check_text

NEO = """\
version: 1
name: neo
model: {preset: GPT-Neo-2.7B}
training: {global_batch_size: 32, seq_len: 2048, precision: fp16, zero_stage: 1}
zones:
  - name: a
    region: r1
    pools:
      - {device: A100-40GB, quota: 16, gpus_per_node: 4, price: 3.67 USD/h}
      - {device: V100-16GB, quota: 16, gpus_per_node: 4, price: 2.86 USD/h}
  - name: far
    region: r2
    pools:
      - {device: A100-40GB, quota: 16, gpus_per_node: 4, price: 3.67 USD/h}
network:
  inter_region: {bandwidth: 5Gbps, latency: 30ms, tcp_streams: 1, tcp_window: 4MiB}
"""


def _spec(text: str = NEO) -> Spec:
    result = check_text(text, "s.yaml")
    assert result.spec is not None, result.diagnostics
    return result.spec


def _node(pool: str, zone: str, k: int = 0) -> Node:
    device = {"a100-40gb": "A100-40GB", "v100-16gb": "V100-16GB"}[pool]
    region = "r2" if zone == "far" else "r1"
    return Node(
        id=f"{pool}@{zone}/n{k}", zone=zone, region=region, pool=pool, device=device, devices=4
    )


def _replica(node: Node, tp: int = 4) -> Replica:
    return Replica(device=node.device, tp=tp, node=node.id, local_ranks=tuple(range(tp)))


def _plan(stages: list[tuple[int, int, list[Node]]], microbatches: list[int], mbs: int = 1) -> Plan:
    nodes = tuple({n.id: n for _, _, ns in stages for n in ns}.values())
    plan = Plan(
        spec_hash="0" * 64,
        hetc_version="0",
        model_blocks=32,
        global_batch_size=sum(microbatches) * mbs,
        microbatch_size=mbs,
        nodes=nodes,
        stages=tuple(
            Stage(first_block=a, end_block=b, replicas=tuple(_replica(n) for n in ns))
            for a, b, ns in stages
        ),
        pipelines=tuple(
            Pipeline(replicas=(j,) * len(stages), microbatches=m)
            for j, m in enumerate(microbatches)
        ),
    )
    assert plan_problems(plan) == []
    return plan


def test_single_stage_single_replica_is_the_sum_of_its_layers() -> None:
    """One stage, one replica: T = m * (sum of forward + backward) + sum of updates."""
    spec = _spec()
    plan = _plan([(0, 32, [_node("a100-40gb", "a")])], [32])
    result = simulate(plan, spec)
    model = ComputeModel(
        arch=spec.model, device=spec.devices["A100-40GB"], seq_len=2048, precision="fp16"
    )
    layers = [model.layer_times(i, 1, 4) for i in range(34)]
    expected = 32 * sum(t.forward + t.backward for t in layers) + sum(t.update for t in layers)
    assert result.iteration_time == pytest.approx(expected)
    assert result.closed_form_time == pytest.approx(expected)
    assert result.samples_per_second == pytest.approx(32 / expected)
    assert result.tokens_per_second == pytest.approx(32 * 2048 / expected)
    assert 0 < result.mfu < 1
    assert result.traffic == {}
    assert result.cost.compute == pytest.approx(rental_rate(plan, spec) * expected)


def test_every_rank_is_reported_with_its_memory() -> None:
    """One report per process; the first stage holds more activations than the last."""
    spec = _spec()
    plan = _plan(
        [(0, 16, [_node("a100-40gb", "a", 0)]), (16, 32, [_node("a100-40gb", "a", 1)])], [32]
    )
    result = simulate(plan, spec)
    assert len(result.ranks) == plan.world_size == 8
    first, last = result.ranks[0], result.ranks[-1]
    assert (first.stage, last.stage) == (0, 1)
    assert first.memory.activations > last.memory.activations
    assert result.fits


def test_a_rank_that_does_not_fit_is_named() -> None:
    """GPT-Neo-2.7B on a single V100 without TP does not fit; the report says which rank."""
    spec = _spec()
    node = _node("v100-16gb", "a")
    plan = Plan(
        spec_hash="0" * 64,
        hetc_version="0",
        model_blocks=32,
        global_batch_size=32,
        microbatch_size=1,
        nodes=(node,),
        stages=(Stage(first_block=0, end_block=32, replicas=(_replica(node, tp=1),)),),
        pipelines=(Pipeline(replicas=(0,), microbatches=32),),
    )
    result = simulate(plan, spec)
    assert not result.fits
    assert result.ranks[0].problem is not None and "v100-16gb@a/n0#0" in result.ranks[0].problem


def test_a100_v100_pipeline_is_bounded_by_its_v100_stage_unless_rebalanced() -> None:
    """Even split: the V100 stage sets the pace; moving blocks to the A100 stage is faster."""
    spec = _spec()
    v100, a100 = _node("v100-16gb", "a"), _node("a100-40gb", "a")
    even = simulate(_plan([(0, 16, [v100]), (16, 32, [a100])], [32]), spec)
    rebalanced = simulate(_plan([(0, 10, [v100]), (10, 32, [a100])], [32]), spec)
    assert rebalanced.iteration_time < even.iteration_time
    v100_busy = next(r.busy_fraction for r in even.ranks if r.device == "V100-16GB")
    a100_busy = next(r.busy_fraction for r in even.ranks if r.device == "A100-40GB")
    assert v100_busy > a100_busy


def test_data_parallel_across_regions_is_far_slower_than_pipeline_across_them() -> None:
    """Atlas section 3: DP over a WAN link pays a gradient all-reduce; PP sends activations.

    Here (32 sequences, one 4 MiB-window TCP stream per flow over 30 ms): 22.8 s against
    10.7 s per iteration, and over 10x the bytes across the WAN.
    """
    spec = _spec()
    near, far = _node("a100-40gb", "a"), _node("a100-40gb", "far")
    dp_across = simulate(_plan([(0, 32, [near, far])], [16, 16]), spec)
    pp_across = simulate(_plan([(0, 16, [near]), (16, 32, [far])], [32]), spec)
    assert dp_across.iteration_time > 2 * pp_across.iteration_time
    assert dp_across.traffic[("a", "far")] > 10 * pp_across.traffic[("a", "far")]
    assert dp_across.cost.egress > pp_across.cost.egress > 0


def test_egress_is_billed_for_cross_zone_pipeline_traffic() -> None:
    """Activations and gradients of every microbatch cross the stage boundary, both ways."""
    spec = _spec()
    plan = _plan([(0, 16, [_node("a100-40gb", "a")]), (16, 32, [_node("a100-40gb", "far")])], [32])
    result = simulate(plan, spec)
    boundary = 32 * 1 * 2048 * 2560 * 2  # microbatches x mbs x seq x hidden x fp16 bytes
    tied = result.traffic[("a", "far")] - boundary
    assert tied > 0  # GPT-Neo ties its embedding: the two ends synchronise its gradient
    assert result.traffic[("a", "far")] == result.traffic[("far", "a")]
    assert result.cost.egress == pytest.approx(2 * result.traffic[("a", "far")] * 0.02 / 1e9)


def test_costmodel_never_imports_torch() -> None:
    """The cost model is pure Python and numpy: torch and deepspeed stay out."""
    import subprocess
    import sys

    probe = (
        "import sys, pkgutil, importlib, hetc.costmodel as c\n"
        "for m in pkgutil.iter_modules(c.__path__):\n"
        "    importlib.import_module(f'hetc.costmodel.{m.name}')\n"
        "sys.exit(any(n.split('.')[0] in ('torch', 'deepspeed') for n in sys.modules))\n"
    )
    assert subprocess.run([sys.executable, "-c", probe], timeout=60).returncode == 0


def test_memory_per_stage_with_and_without_checkpointing() -> None:
    """GPT-Neo-2.7B over 4 A100 stages (TP 4, ZeRO-1): without checkpointing stage 0 holds the
    most and activations dominate it; with full checkpointing optimizer state dominates every
    stage, and the two ends (both hold the tied embedding) hold more than the middle."""
    nodes = [_node("a100-40gb", "a", k) for k in range(4)]
    plan = _plan([(8 * k, 8 * k + 8, [nodes[k]]) for k in range(4)], [32])
    plain = simulate(plan, _spec())
    totals = [r.memory.total for r in plain.ranks[::4]]
    assert totals.index(max(totals)) == 0 and totals == sorted(totals, reverse=True)
    assert plain.ranks[0].memory.dominant() == "activations"
    checkpointed = simulate(
        plan, _spec(NEO.replace("zero_stage: 1}", "zero_stage: 1, activation_checkpointing: true}"))
    )
    stages = checkpointed.ranks[::4]
    assert all(r.memory.dominant() == "optimizer" for r in stages)
    assert min(stages[0].memory.total, stages[3].memory.total) > max(
        stages[1].memory.total, stages[2].memory.total
    )


def test_framework_overhead_can_differ_per_device() -> None:
    """A per-device overhead map changes only that device's ranks, by exactly the difference."""
    from hetc.costmodel.memory import GIB, FrameworkOverhead

    spec = _spec()
    plan = _plan([(0, 16, [_node("v100-16gb", "a")]), (16, 32, [_node("a100-40gb", "a")])], [32])
    default = simulate(plan, spec)
    tuned = simulate(plan, spec, overhead={"V100-16GB": FrameworkOverhead(fixed_bytes=2 * GIB)})
    for before, after in zip(default.ranks, tuned.ranks, strict=True):
        extra = after.memory.total - before.memory.total
        assert extra == pytest.approx(GIB if before.device == "V100-16GB" else 0.0)


def test_zero_partitions_the_optimizer_step_over_the_replicas() -> None:
    """Under ZeRO 1 each of a stage's D replicas steps its 1/D partition: the simulator's
    update and the planning model's u_i are a whole step over D; under ZeRO 0 the whole."""
    from hetc.costmodel.planning import PlanningModel

    nodes = [_node("a100-40gb", "a", k) for k in range(4)]
    plan = _plan([(0, 32, nodes)], [8, 8, 8, 8])
    zero1 = _spec()
    zero0 = _spec(NEO.replace("zero_stage: 1", "zero_stage: 0"))
    whole = simulate(plan, zero0).timeline
    part = simulate(plan, zero1).timeline

    def update(timeline: object) -> float:
        busy = timeline.busy[0, 0]  # type: ignore[attr-defined]
        return sum(i.end - i.start for i in busy if i.what == "update")

    assert update(part) == pytest.approx(update(whole) / 4)
    for spec, divisor in ((zero1, 4), (zero0, 1)):
        model = PlanningModel(spec)
        kind = next(k.index for k in model.kinds if k.device == "A100-40GB" and k.tp == 4)
        step = model.stage_time(kind, 1, 0, 34)[2]
        assert model.update_time(kind, 1, 0, 34, 4) == pytest.approx(step / divisor)
