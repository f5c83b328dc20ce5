"""Plan building (placement, pairing, batch shares), the planner facade, the diagnosis of
infeasible specs and `--explain`, each against an independent oracle."""

from __future__ import annotations

import gc
import itertools
from dataclasses import replace

import pytest

from hetc.costmodel.planning import PlanningModel, Shape
from hetc.plan import capability_problems, plan_problems
from hetc.schema import check_text
from hetc.schema.spec import Spec
from hetc.solver.build import batch_shares, build_plan
from hetc.solver.diagnosis import diagnose
from hetc.solver.explain import explain_unused
from hetc.solver.planner import (
    LARGE_CLUSTER_DEVICES,
    default_approximations,
    plan_spec,
    simulated_objective,
)
from hetc.solver.search import SearchOptions, SearchResult, search
from hetc.solver.search.driver import Search

TINY = """\
version: 1
name: tiny
model: {{architecture: {{layers: 4, hidden: 256, heads: 4, ffn: 1024, vocab: 1024,
  max_positions: 256}}}}
training: {{global_batch_size: 16, seq_len: 256, precision: fp16, zero_stage: {zero}}}
objective: {objective}
{constraints}
zones:
  - name: a
    region: r1
    pools:
      - {{device: A100-40GB, quota: {a100}, gpus_per_node: 4, price: 3.67 USD/h}}
      - {{device: V100-16GB, quota: {v100}, gpus_per_node: 4, price: 2.86 USD/h}}
  - name: b
    region: r2
    pools:
      - {{device: T4, quota: 4, gpus_per_node: 2, price: 0.35 USD/h}}
network:
  inter_region: {{bandwidth: 1Gbps, latency: 30ms}}
  egress_price: {{inter_region: 0.02 USD/GB}}
"""


def tiny(
    *,
    objective: str = "max_throughput",
    constraints: str = "",
    zero: int = 1,
    a100: int = 8,
    v100: int = 8,
) -> Spec:
    text = TINY.format(
        objective=objective,
        constraints=f"constraints: {constraints}" if constraints else "",
        zero=zero,
        a100=a100,
        v100=v100,
    )
    result = check_text(text, "tiny.yaml")
    assert result.spec is not None, [d.format() for d in result.diagnostics]
    return result.spec


def test_batch_shares_minimise_the_slowest_pipeline_exactly() -> None:
    """The greedy equals brute force over every composition, on awkward speeds."""
    fill = [1.0, 2.5, 0.7]
    period = [0.3, 0.11, 0.5]
    for total in range(3, 14):
        got = batch_shares(fill, period, total)
        assert sum(got) == total and min(got) >= 1

        def finish(counts: tuple[int, ...]) -> float:
            return max(f + (c - 1) * s for f, s, c in zip(fill, period, counts, strict=True))

        best = min(
            finish(c) for c in itertools.product(range(1, total + 1), repeat=3) if sum(c) == total
        )
        assert finish(tuple(got)) == pytest.approx(best, rel=1e-12)
    with pytest.raises(ValueError, match="cannot feed"):
        batch_shares([1.0, 1.0], [1.0, 1.0], 1)


def test_built_plan_packs_whole_nodes_and_pairs_fast_with_fast() -> None:
    """Placement fills nodes exactly (the node count the model charges), TP never crosses a
    node, every pipeline visits one replica per stage, and the k-th fastest replicas pair."""
    spec = tiny(zero=0)
    model = PlanningModel(spec)
    a1, a2, v1 = (
        next(k.index for k in model.kinds if k.device == d and k.tp == tp)
        for d, tp in (("A100-40GB", 1), ("A100-40GB", 2), ("V100-16GB", 1))
    )
    shape = Shape(microbatch=2, boundaries=(0, 2, 4), pipelines=3)
    assignment = (((a1, 1), (a2, 1), (v1, 1)), ((a1, 2), (v1, 1)))
    estimate = model.estimate(shape, assignment)
    assert estimate.feasible, estimate.problems
    plan = build_plan(model, shape, assignment, spec_hash="x")
    assert plan_problems(plan) == []
    by_pool: dict[str, int] = {}
    for node in plan.nodes:
        by_pool[node.pool] = by_pool.get(node.pool, 0) + 1
    assert sorted(by_pool.values()) == sorted(n for n in estimate.nodes if n)
    assert sum(p.microbatches for p in plan.pipelines) * 2 == 16
    first, end = model.layer_range(shape, 0)
    speeds = [
        model.stage_time(
            next(k.index for k in model.kinds if k.device == r.device and k.tp == r.tp),
            2,
            first,
            end,
        )[0]
        for r in plan.stages[0].replicas
    ]
    visited = [speeds[p.replicas[0]] for p in plan.pipelines]
    assert visited == sorted(visited)
    assert plan.pipelines[0].microbatches >= plan.pipelines[-1].microbatches


def test_every_returned_plan_fits_and_is_runnable() -> None:
    """Each proposal's ranks fit in memory (simulator), the plan is consistent, inside the
    capability matrix, its predictions come from the simulator, and the plans are ranked by
    the simulator's objective."""
    spec = tiny()
    result = plan_spec(spec, top=3)
    assert result.proposals
    for proposal in result.proposals:
        plan = proposal.plan
        assert plan_problems(plan) == []
        assert capability_problems(plan, zero_stage=1, precision="fp16") == []
        assert proposal.simulation.fits
        assert plan.predictions is not None
        assert plan.predictions.iteration_time == proposal.simulation.iteration_time
    values = [simulated_objective(spec, p.simulation) for p in result.proposals]
    assert values == sorted(values)


def test_large_clusters_default_to_kind_profiles() -> None:
    small = PlanningModel(tiny())
    assert default_approximations(small) == frozenset()
    big = PlanningModel(tiny(a100=LARGE_CLUSTER_DEVICES))
    assert default_approximations(big) == {"kind-profiles"}


def test_unknown_approximation_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown approximation"):
        plan_spec(tiny(), approximations=frozenset({"h9"}))


def test_max_gpus_diagnosis_finds_the_fewest_devices() -> None:
    """Oracle: the smallest device count any plan rents, by scanning max_gpus upwards."""
    spec = tiny(a100=4, v100=4, constraints="{max_gpus: 1}")
    spec = replace(spec, zones=spec.zones[:1])
    diagnosis = diagnose(spec)
    assert diagnosis.binding == "max_gpus"
    fewest = next(
        n
        for n in range(1, 9)
        if plan_spec(replace(spec, constraints=replace(spec.constraints, max_gpus=n))).proposals
    )
    assert diagnosis.change == f"constraints.max_gpus: {fewest}"
    assert diagnosis.plan is not None and diagnosis.plan.candidate.estimate.devices <= fewest


def test_memory_diagnosis_when_nothing_fits() -> None:
    text = (
        TINY.replace("layers: 4, hidden: 256", "layers: 4, hidden: 32768")
        .replace("heads: 4, ffn: 1024", "heads: 256, ffn: 131072")
        .format(objective="max_throughput", constraints="", zero=0, a100=8, v100=8)
    )
    spec = check_text(text, "huge.yaml").spec
    assert spec is not None
    diagnosis = diagnose(spec)
    assert diagnosis.binding == "memory"
    assert diagnosis.plan is None


def test_explain_reports_the_loss_of_the_best_plan_using_each_unused_pool() -> None:
    """Oracle: the forced search's best plan against the chosen one, both simulated."""
    spec = tiny()
    result = plan_spec(spec)
    best = result.proposals[0]
    unused = [
        s.label
        for s, n in zip(result.model.pools, best.candidate.estimate.nodes, strict=True)
        if not n
    ]
    explanations = explain_unused(result, spec)
    assert [x.pool for x in explanations] == unused
    for x in explanations:
        if x.best_with is not None:
            slower = x.best_with.simulation.iteration_time > best.simulation.iteration_time
            assert slower == ("less than" in x.loss)


def test_must_use_only_returns_candidates_renting_that_pool() -> None:
    model = PlanningModel(tiny())
    t4 = next(s.index for s in model.pools if s.pool.device == "T4")
    result = search(model, SearchOptions(must_use=frozenset({t4})))
    assert result.candidates and all(c.estimate.nodes[t4] for c in result.candidates)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_search_pauses_the_garbage_collector_and_restores_it(
    enabled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`search` runs with the cyclic collector off and leaves it as it found it, also when
    the search raises; the plan is the same as with the collector on."""
    model = PlanningModel(tiny())
    reference = Search(model, SearchOptions()).run().candidates[0].value
    seen: list[bool] = []
    run = Search.run

    def watched(self: Search) -> SearchResult:
        seen.append(gc.isenabled())
        return run(self)

    monkeypatch.setattr(Search, "run", watched)
    (gc.enable if enabled else gc.disable)()
    try:
        assert search(model).candidates[0].value == reference
        assert seen and not any(seen) and gc.isenabled() is enabled
        monkeypatch.setattr(Search, "run", lambda self: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            search(model)
        assert gc.isenabled() is enabled
    finally:
        gc.enable()


def test_planner_and_simulator_agree_on_every_rank_s_memory() -> None:
    """Tied embeddings, learned positions, P = 3: the planner's O(1) peak of every stage equals
    the simulator's per-rank memory (the last stage holds the token table's copy only)."""
    from hetc.costmodel.tables import peak_memory

    spec = tiny()
    model = PlanningModel(spec)
    assert spec.model.tied_embeddings and spec.model.position == "learned"
    kind = next(k for k in model.kinds if k.device == "A100-40GB" and k.tp == 2)
    shape = Shape(microbatch=2, boundaries=(0, 1, 3, 4), pipelines=1)
    assignment = (((kind.index, 1),),) * 3
    plan = build_plan(model, shape, assignment, spec_hash="x")
    from hetc.costmodel.simulate import simulate

    ranks = simulate(plan, spec).ranks
    m = model.microbatches(shape)
    for i in range(3):
        first, end = model.layer_range(shape, i)
        table = model.tables(kind.device, kind.tp, 2)
        expected = peak_memory(table, first, end, 1, min(3 - i, m))
        got = [r.memory.total for r in ranks if r.stage == i]
        assert got == [pytest.approx(expected, rel=1e-12)] * len(got), i


def test_declared_approximations_return_feasible_plans_of_their_kind() -> None:
    """`one-region-stage` keeps each stage in one region; `dp-order` and `kind-profiles`
    return feasible candidates no better than the exact optimum (they search less)."""
    spec = tiny()
    model = PlanningModel(spec)
    exact = search(model, SearchOptions()).candidates[0].value
    for name in ("dp-order", "kind-profiles", "one-region-stage"):
        found = search(PlanningModel(spec), SearchOptions(approximations=frozenset({name})))
        assert found.candidates, name
        best = found.candidates[0]
        assert best.estimate.feasible and best.value >= exact * (1 - 1e-12), name
        if name == "one-region-stage":
            for stage in best.assignment:
                regions = {model.pools[model.kinds[k].pool].zone.region for k, _ in stage}
                assert len(regions) == 1


def test_place_replicas_fills_nodes_without_splitting_a_replica() -> None:
    """Mixed TP degrees on 4-device nodes: 4 + 2 + 1 + 1 + 2 devices need exactly 3 nodes,
    every replica's ranks lie inside one node, and no device is used twice."""
    from hetc.solver.build import place_replicas

    model = PlanningModel(tiny())
    pool = next(s.index for s in model.pools if s.pool.device == "A100-40GB")
    requests = {pool: [(4, 0, "a"), (2, 0, "b"), (1, 1, "c"), (1, 1, "d"), (2, 1, "e")]}
    nodes, placed = place_replicas(model, requests)
    assert len(nodes) == 3 and set(placed) == set("abcde")
    used = [(r.node, rank) for r in placed.values() for rank in r.local_ranks]
    assert len(used) == len(set(used)) == 10
    assert all(max(r.local_ranks) < 4 and len(r.local_ranks) == r.tp for r in placed.values())
