"""The simulator's work per kind, not per rank, gives the same numbers as per-rank work.

`simulate` computes a rank's memory once per (stage, device, TP, microbatches in flight),
the traffic ledger's stage parameters and ZeRO buckets once per stage and TP, the 1F1B
schedule once per distinct pipeline, and the zone traffic with each group's positions
indexed once. Each test recomputes one of these the per-rank way it replaced, written out
here (the reference), on the plans the planner returns for specs of several shapes (ZeRO 1
and 2, mixed devices and TP, tied embeddings over zones and regions), and wants equality.

Mutation checks done: dropping `in_flight` from the memory key, offsetting the indexed
positions by one, and keying the schedule memo by microbatches alone each fail a test here.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
from test_solver_planner import TINY, tiny

from hetc.costmodel.memory import MemoryBreakdown, rank_memory
from hetc.costmodel.schedule import simulate_1f1b
from hetc.costmodel.simulate import _Context, _overheads, simulate
from hetc.costmodel.traffic import _LedgerBuilder, flows, iteration_ledger, zone_traffic
from hetc.plan import Plan
from hetc.plan.settings import reduce_bucket_elements
from hetc.plan.topology import topology_of
from hetc.schema import check_file, check_text
from hetc.schema.spec import Spec
from hetc.solver.planner import plan_spec

ROOT = Path(__file__).resolve().parent.parent


def _example(name: str) -> Spec:
    spec = check_file(str(ROOT / "examples" / name)).spec
    assert spec is not None
    return spec


SPECS = {
    "tiny ZeRO 1": lambda: tiny(),
    "tiny ZeRO 2": lambda: tiny(zero=2),
    "tiny min_cost": lambda: tiny(objective="min_cost"),
    "OPT-350M over 5 zones": lambda: _example("opt350m-5zones.yaml"),
}


@pytest.fixture(scope="module", params=sorted(SPECS))
def planned(request: pytest.FixtureRequest) -> list[tuple[Spec, Plan]]:
    """Up to four plans the planner returns for one spec."""
    spec = SPECS[request.param]()
    result = plan_spec(spec, top=4, work_limit=200_000_000)
    assert result.proposals
    return [(spec, p.plan) for p in result.proposals]


def _per_rank_memory(spec: Spec, plan: Plan) -> list[MemoryBreakdown]:
    """Every rank's memory by `rank_memory` called for that rank alone, with the pipelines
    through its replica found by a scan of every pipeline (the old loop)."""
    context = _Context(plan, spec, {})
    overhead = _overheads(None, spec)
    expected = []
    for i, s in enumerate(plan.stages):
        for j, replica in enumerate(s.replicas):
            paths = [p for p, path in enumerate(plan.pipelines) if path.replicas[i] == j]
            microbatches = sum(plan.pipelines[p].microbatches for p in paths)
            shape = context.shape(i, replica.tp, max(1, min(len(plan.stages) - i, microbatches)))
            memory = rank_memory(
                spec.model,
                shape,
                seq_len=spec.training.seq_len,
                precision=spec.training.precision,
                optimizer=spec.training.optimizer.type,
                zero_stage=spec.training.zero_stage,
                dp=len(s.replicas),
                checkpointing=spec.training.activation_checkpointing,
                bucket_bytes=reduce_bucket_elements(spec.model.parameter_count()),
                overhead=overhead(replica.device),
            )
            expected += [memory] * replica.tp
    return expected


def test_rank_memory_equals_the_per_rank_computation(planned: list[tuple[Spec, Plan]]) -> None:
    """Every rank's memory breakdown equals the per-rank computation (`_per_rank_memory`)."""
    for spec, plan in planned:
        assert [r.memory for r in simulate(plan, spec).ranks] == _per_rank_memory(spec, plan)


def test_rank_memory_with_a_starved_pipeline() -> None:
    """A pipeline given one microbatch holds fewer in flight on its first stage than the
    others: its ranks' memory differs from their stage-mates', still as computed per rank."""
    text = TINY.format(objective="max_throughput", constraints="", zero=1, a100=8, v100=8)
    spec = check_text(
        text.replace("global_batch_size: 16", "global_batch_size: 256"), "t.yaml"
    ).spec
    assert spec is not None
    plan = next(
        p.plan
        for p in plan_spec(spec, top=4).proposals
        if len(p.plan.stages) >= 2 and len(p.plan.pipelines) >= 2
    )
    total = sum(p.microbatches for p in plan.pipelines)
    assert total > len(plan.pipelines)
    pipelines = (
        replace(plan.pipelines[0], microbatches=1),
        replace(plan.pipelines[1], microbatches=total - 1 - (len(plan.pipelines) - 2)),
        *(replace(p, microbatches=1) for p in plan.pipelines[2:]),
    )
    starved = replace(plan, pipelines=pipelines)
    expected = _per_rank_memory(spec, starved)
    assert len(set(expected)) > len(set(_per_rank_memory(spec, plan)))
    assert [r.memory for r in simulate(starved, spec).ranks] == expected


def test_ledger_equals_a_fresh_builder_per_rank(planned: list[tuple[Spec, Plan]]) -> None:
    """The ledger built with per-stage caches equals one where every rank gets a new builder
    (empty caches: each rank lists its stage's parameters and buckets itself)."""
    for spec, plan in planned:
        topology = topology_of(plan, tied_embeddings=spec.model.tied_embeddings)
        fresh = {
            p.rank: tuple(_LedgerBuilder(plan, spec, topology).rank(p)) for p in topology.processes
        }
        assert iteration_ledger(plan, spec) == fresh
        assert iteration_ledger(plan, spec, topology) == fresh


def test_zone_traffic_equals_the_sum_of_every_rank_s_flows(
    planned: list[tuple[Spec, Plan]],
) -> None:
    """Zone-to-zone bytes equal the exact sum of `flows` (which finds each rank in its group
    by search) over every rank's calls, to float rounding of the exact Fraction."""
    for spec, plan in planned:
        topology = topology_of(plan, tied_embeddings=spec.model.tied_embeddings)
        nodes = {n.id: n.zone for n in plan.nodes}
        zone_of = {p.rank: nodes[p.node] for p in topology.processes}
        ledger = iteration_ledger(plan, spec, topology)
        exact: dict[tuple[str, str], Fraction] = {}
        for rank, entries in ledger.items():
            for entry in entries:
                for to, nbytes in flows(entry.call, rank):
                    if zone_of[to] != zone_of[rank]:
                        key = (zone_of[rank], zone_of[to])
                        exact[key] = exact.get(key, Fraction(0)) + entry.count * nbytes
        found = zone_traffic(ledger, zone_of)
        assert sorted(found) == sorted(exact)
        for key, value in exact.items():
            assert found[key] == pytest.approx(float(value), rel=1e-12)


def test_each_pipeline_is_scheduled_as_if_alone(planned: list[tuple[Spec, Plan]]) -> None:
    """Equal pipelines share one simulation: every pipeline's busy intervals (before the
    synchronisation) equal those of a run of that pipeline alone, and the plan has some
    pipelines of equal times where that sharing applies."""
    for spec, plan in planned:
        context = _Context(plan, spec, {})
        pipelines = [context.pipeline_times(p) for p in range(len(plan.pipelines))]
        sync = [context.sync_time(i) for i in range(len(plan.stages))]
        update = [context.update_time(i) for i in range(len(plan.stages))]
        together = simulate_1f1b(pipelines, sync, update)
        for p, times in enumerate(pipelines):
            alone = simulate_1f1b([times], sync, update)
            for stage in range(len(plan.stages)):
                assert together.busy[p, stage][:-2] == alone.busy[0, stage][:-2]


def test_pipelines_share_a_schedule_only_when_equal() -> None:
    """Pipelines that differ only in their microbatch count, or only in their stage times,
    keep their own schedules (the memo's key is the whole PipelineTimes)."""
    spec = tiny()
    plan = plan_spec(spec).proposals[0].plan
    times = _Context(plan, spec, {}).pipeline_times(0)
    more = replace(times, microbatches=times.microbatches + 3)
    slower = replace(times, forward=tuple(2 * f for f in times.forward))
    sync, update = [0.0] * len(plan.stages), [0.0] * len(plan.stages)
    together = simulate_1f1b([times, more, slower], sync, update)
    for p, alone in enumerate((times, more, slower)):
        single = simulate_1f1b([alone], sync, update)
        for stage in range(len(plan.stages)):
            assert together.busy[p, stage][:-2] == single.busy[0, stage][:-2]
    assert together.busy[0, 0] != together.busy[1, 0] != together.busy[2, 0]
