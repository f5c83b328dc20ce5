"""The CP-SAT cross-check against the search and against brute force over replica counts.

Plans are compared by objective value (ties may pick different plans). Every spec is small
enough that the search, the CP-SAT model over every shape and the enumeration of every count
assignment of a shape all finish in seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations, product

import pytest

from hetc.costmodel.planning import Assignment, PlanningModel, Shape
from hetc.schema import check_text
from hetc.solver.cpsat import objective_value, solve_all_shapes, solve_shape
from hetc.solver.search import search

TINY = "{layers: 3, hidden: 256, heads: 4, ffn: 1024, vocab: 4096, max_positions: 256}"

SMALL_GPU = """devices:
  - name: SMALL-GPU
    kind: gpu
    memory: 1GiB
    peak_tflops: {fp32: 5, fp16: 20}
    memory_bandwidth: 200GB/s
    intra_node: {kind: pcie, bandwidth: 16GB/s}
    price: 0.5 USD/h
    source: a made-up device whose memory binds for the larger model
"""


def _model(
    zones: str,
    *,
    objective: str = "max_throughput",
    constraints: str = "",
    batch: int = 8,
    zero_stage: int = 1,
    architecture: str = TINY,
    extra: str = "",
) -> PlanningModel:
    text = f"""version: 1
name: cpsat-test
model:
  architecture: {architecture}
training: {{global_batch_size: {batch}, seq_len: 256, precision: fp16, zero_stage: {zero_stage}}}
objective: {objective}
{extra}zones:
{zones}"""
    if constraints:
        text += f"constraints: {{{constraints}}}\n"
    result = check_text(text, "cpsat-test.yaml")
    assert result.spec is not None, [d.message for d in result.errors]
    return PlanningModel(result.spec)


ONE_ZONE = """  - name: z0
    region: r0
    pools:
      - {device: A100-40GB, quota: 4, gpus_per_node: 4, price: 3.67 USD/h}
      - {device: V100-16GB, quota: 8, gpus_per_node: 4, price: 2.86 USD/h}
"""

TWO_REGIONS = """  - name: z0
    region: r0
    pools:
      - {device: A100-40GB, quota: 2, gpus_per_node: 2, price: 3.67 USD/h}
  - name: z1
    region: r1
    pools:
      - {device: V100-16GB, quota: 4, gpus_per_node: 1, price: 2.86 USD/h}
"""

TWO_ZONES_THREE_DEVICES = """  - name: z0
    region: r0
    pools:
      - {device: A100-40GB, quota: 2, gpus_per_node: 1, price: 3.67 USD/h}
      - {device: SMALL-GPU, quota: 4, gpus_per_node: 2, price: 0.5 USD/h}
  - name: z1
    region: r0
    pools:
      - {device: V100-16GB, quota: 2, gpus_per_node: 1, price: 2.86 USD/h}
"""

FAR_APART = """  - name: near
    region: r0
    pools:
      - {device: V100-16GB, quota: 1, gpus_per_node: 1, price: 2.86 USD/h}
      - {device: T4, quota: 1, gpus_per_node: 1, price: 0.35 USD/h}
  - name: far
    region: r1
    pools:
      - {device: V100-16GB, quota: 1, gpus_per_node: 1, price: 2.86 USD/h}
"""

UNTIED = TINY.replace("}", ", tied_embeddings: false}")

TRADEOFF = """  - name: z0
    region: r0
    pools:
      - {device: V100-16GB, quota: 2, gpus_per_node: 1, price: 2.86 USD/h}
      - {device: T4, quota: 4, gpus_per_node: 2, price: 0.35 USD/h}
"""

TP_MIX = """  - name: z0
    region: r0
    pools:
      - {device: T4, quota: 2, gpus_per_node: 2, price: 0.35 USD/h}
      - {device: A100-40GB, quota: 2, gpus_per_node: 1, price: 3.67 USD/h}
"""

WIDE = "{layers: 3, hidden: 4096, heads: 8, ffn: 16384, vocab: 8192, max_positions: 512}"

PRICEY_EGRESS = """  - name: z0
    region: r0
    pools:
      - {device: V100-16GB, quota: 2, gpus_per_node: 1, price: 2.86 USD/h}
  - name: z1
    region: r0
    pools:
      - {device: V100-16GB, quota: 1, gpus_per_node: 1, price: 0.5 USD/h}
network:
  inter_zone: {bandwidth: 100Gbps, latency: 10us}
  egress_price: {inter_zone: 1 USD/GB}
"""

TWO_BLOCKS = "{layers: 2, hidden: 256, heads: 4, ffn: 1024, vocab: 8192, max_positions: 512}"

PRESOLVE_TRAP = """  - name: z0
    region: r1
    pools:
      - {device: A100-40GB, quota: 2, gpus_per_node: 2, price: 2.86 USD/h}
  - name: z1
    region: r2
    pools:
      - {device: T4, quota: 1, gpus_per_node: 1, price: 0.5 USD/h}
  - name: z2
    region: r2
    pools:
      - {device: A100-40GB, quota: 2, gpus_per_node: 2, price: 2.86 USD/h}
      - {device: T4, quota: 2, gpus_per_node: 2, price: 1.1 USD/h}
network:
  inter_zone: {bandwidth: 1Gbps, latency: 5ms}
"""

BIG = "{layers: 4, hidden: 1024, heads: 8, ffn: 4096, vocab: 16384, max_positions: 512}"


def _value(model: PlanningModel, assignment: Assignment, shape: Shape) -> float | None:
    estimate = model.estimate(shape, assignment)
    return objective_value(model, estimate) if estimate.feasible else None


def _counts(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every way to write `total` as `parts` non-negative integers."""
    if parts == 1:
        yield (total,)
        return
    for first in range(total + 1):
        for rest in _counts(total - first, parts - 1):
            yield (first, *rest)


def _brute_force(model: PlanningModel, shape: Shape) -> float | None:
    """The best objective over every count assignment of every kind (fitting or not)."""
    per_stage = [
        tuple((k, c) for k, c in enumerate(counts) if c)
        for counts in _counts(shape.pipelines, len(model.kinds))
    ]
    values = [
        v
        for assignment in product(per_stage, repeat=shape.stages)
        if (v := _value(model, assignment, shape)) is not None
    ]
    return min(values, default=None)


def _small_shapes(model: PlanningModel, most_pipelines: int) -> Iterator[Shape]:
    """The shapes the search visits, up to `most_pipelines` pipelines."""
    for mbs in model.microbatch_sizes():
        for stages in range(1, model.blocks + 1):
            for dp in range(1, min(most_pipelines, model.batch // mbs) + 1):
                for cuts in combinations(range(1, model.blocks), stages - 1):
                    yield Shape(microbatch=mbs, boundaries=(0, *cuts, model.blocks), pipelines=dp)


def _assert_same(found: float | None, expected: float | None) -> None:
    if expected is None:
        assert found is None
    else:
        assert found == pytest.approx(expected, rel=1e-9, abs=0.0)


# -- against brute force, shape by shape -------------------------------------------------

BRUTE_SPECS = {
    # three kinds: A100 at TP 1 and 2 in one region, V100 at TP 1 in another; TP mixes
    # (ZeRO 0), rings cross regions, embeddings are tied
    "mixed-tp-two-regions-cost": lambda: _model(
        TWO_REGIONS, objective="min_cost", zero_stage=0, batch=6
    ),
    "mixed-tp-two-regions-time": lambda: _model(TWO_REGIONS, zero_stage=0, batch=6),
    # the V100 is fast and dear, the T4 slow and cheap: the budget and the floor bind in
    # about half of the shapes; the T4 runs TP 1 or 2, which may not share a stage (ZeRO 1)
    "tradeoff-budget": lambda: _model(
        TRADEOFF, batch=6, constraints="max_cost_per_iteration: 9e-6 USD"
    ),
    "tradeoff-floor": lambda: _model(
        TRADEOFF, objective="min_cost", batch=6, constraints="min_throughput: 90"
    ),
    "tradeoff-max-gpus": lambda: _model(TRADEOFF, batch=6, constraints="max_gpus: 3"),
    # a T4 at TP 2 next to A100s would be the fastest third replica of some shapes, but
    # ZeRO 1 forbids mixing it with TP 1
    "mixed-tp-forbidden": lambda: _model(TP_MIX, batch=48, architecture=WIDE),
    # the cheap zone saves rent, but crossing zones costs far more in egress
    "egress-binds-cost": lambda: _model(
        PRICEY_EGRESS, objective="min_cost", architecture=UNTIED, batch=6
    ),
    # a ring or a boundary a region apart is slow; a T4 next door is slow too
    "far-apart-time": lambda: _model(FAR_APART, architecture=UNTIED, batch=6),
    "memory-binds-cost": lambda: _model(
        TWO_ZONES_THREE_DEVICES.replace("gpus_per_node: 2", "gpus_per_node: 1"),
        objective="min_cost",
        architecture=BIG,
        batch=4,
        extra=SMALL_GPU,
    ),
}


@pytest.mark.parametrize("name", sorted(BRUTE_SPECS))
def test_each_shape_matches_brute_force(name: str) -> None:
    model = BRUTE_SPECS[name]()
    assert len(model.kinds) <= 3
    checked = feasible = 0
    for shape in _small_shapes(model, 3 if model.blocks <= 3 else 2):
        solution = solve_shape(model, shape)
        found = None if solution is None else objective_value(model, solution.estimate)
        expected = _brute_force(model, shape)
        _assert_same(found, expected)
        checked += 1
        feasible += expected is not None
    assert feasible >= 5, f"only {feasible} of {checked} shapes are feasible: the test is weak"


def test_solution_fields() -> None:
    model = BRUTE_SPECS["mixed-tp-two-regions-cost"]()
    shape = Shape(microbatch=2, boundaries=(0, 1, 3), pipelines=2)
    solution = solve_shape(model, shape, time_limit=60.0)
    assert solution is not None
    assert solution.status == "OPTIMAL"
    assert solution.wall_time >= 0
    assert solution.shape == shape
    for stage in solution.assignment:
        assert sum(c for _, c in stage) == shape.pipelines
        assert [k for k, _ in stage] == sorted(k for k, _ in stage)
    assert solution.estimate == model.estimate(shape, solution.assignment)


# -- against the search, over every shape -------------------------------------------------

SEARCH_SPECS = {
    "one-zone-quota-binds": lambda: _model(ONE_ZONE),
    "one-zone-cost": lambda: _model(ONE_ZONE, objective="min_cost"),
    "one-zone-max-gpus": lambda: _model(ONE_ZONE, constraints="max_gpus: 4"),
    "two-regions-budget": lambda: _model(
        TWO_REGIONS, constraints="max_cost_per_iteration: 3e-5 USD", zero_stage=0
    ),
    "two-regions-floor": lambda: _model(
        TWO_REGIONS, objective="min_cost", constraints="min_throughput: 30"
    ),
    # both bind: without them the best plan is another
    "tradeoff-budget": lambda: _model(TRADEOFF, constraints="max_cost_per_iteration: 8e-6 USD"),
    "tradeoff-floor": lambda: _model(
        TRADEOFF, objective="min_cost", constraints="min_throughput: 100"
    ),
    "three-devices-memory-binds": lambda: _model(
        TWO_ZONES_THREE_DEVICES, architecture=BIG, batch=4, extra=SMALL_GPU
    ),
    "three-devices-memory-binds-cost": lambda: _model(
        TWO_ZONES_THREE_DEVICES, objective="min_cost", architecture=BIG, batch=4, extra=SMALL_GPU
    ),
}


@pytest.mark.parametrize("name", sorted(SEARCH_SPECS))
def test_best_over_shapes_matches_search(name: str) -> None:
    model = SEARCH_SPECS[name]()
    result = search(model)
    assert result.complete
    solution = solve_all_shapes(model)
    assert solution is not None and result.candidates
    assert objective_value(model, solution.estimate) == pytest.approx(
        result.candidates[0].value, rel=1e-9, abs=0.0
    )


def test_quota_binds_in_the_search_specs() -> None:
    """Without its quota the first spec's best plan is faster, so the quota is exercised."""
    bound = SEARCH_SPECS["one-zone-quota-binds"]()
    free = _model(ONE_ZONE.replace("quota: 4,", "quota: 64,").replace("quota: 8,", "quota: 64,"))
    best = solve_all_shapes(bound)
    unbound = solve_all_shapes(free)
    assert best is not None and unbound is not None
    assert unbound.estimate.iteration_time < best.estimate.iteration_time * (1 - 1e-6)


# -- the comparison detects mistakes -----------------------------------------------------


def test_a_model_without_sends_would_be_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Were CP-SAT's model to drop the activation sends, it would run the stages on the two
    V100s a region apart instead of a T4 and a V100 side by side, and the float score of
    that choice would lose to the brute-force optimum."""
    model = _model(FAR_APART, architecture=UNTIED)
    shape = Shape(microbatch=2, boundaries=(0, 1, 3), pipelines=1)
    expected = _brute_force(model, shape)
    honest = solve_shape(model, shape)
    assert honest is not None and expected is not None
    _assert_same(objective_value(model, honest.estimate), expected)
    with monkeypatch.context() as patch:
        patch.setattr(model, "send", lambda a, b, mbs: 0.0)
        blind = solve_shape(model, shape)
    assert blind is not None
    rescored = _value(model, blind.assignment, shape)
    assert rescored is not None and rescored > expected * (1 + 1e-6)


def test_shape_where_cp_sat_presolve_loses_the_optimum() -> None:
    """CP-SAT 9.15 with presolve on (even with max_presolve_iterations 0) calls this shape
    infeasible; found by comparing with brute force over many generated specs."""
    model = _model(
        PRESOLVE_TRAP,
        objective="min_cost",
        zero_stage=0,
        batch=4,
        architecture=TWO_BLOCKS,
    )
    shape = Shape(microbatch=1, boundaries=(0, 1, 2), pipelines=2)
    solution = solve_shape(model, shape)
    expected = _brute_force(model, shape)
    assert solution is not None and expected is not None
    _assert_same(objective_value(model, solution.estimate), expected)


def test_over_quota_shape_is_none() -> None:
    """Eight replicas of two stages need 16 devices; the pools hold 12."""
    model = _model(ONE_ZONE)
    assert solve_shape(model, Shape(microbatch=1, boundaries=(0, 1, 3), pipelines=8)) is None
    assert solve_shape(model, Shape(microbatch=1, boundaries=(0, 1, 3), pipelines=6)) is not None


def test_shape_nothing_fits_is_none() -> None:
    """The 1 GiB device alone cannot hold the whole larger model."""
    model = _model(
        """  - name: z0
    region: r0
    pools:
      - {device: SMALL-GPU, quota: 4, gpus_per_node: 1, price: 0.5 USD/h}
""",
        architecture=BIG,
        batch=4,
        extra=SMALL_GPU,
    )
    assert solve_shape(model, Shape(microbatch=4, boundaries=(0, 4), pipelines=1)) is None


def test_infeasible_budget_is_none() -> None:
    model = _model(ONE_ZONE, constraints="max_cost_per_iteration: 1e-12 USD")
    assert not search(model).candidates
    assert solve_all_shapes(model) is None
    assert solve_shape(model, Shape(microbatch=1, boundaries=(0, 3), pipelines=1)) is None


def test_upper_bound_cuts_off_worse_plans() -> None:
    model = SEARCH_SPECS["one-zone-cost"]()
    shape = Shape(microbatch=2, boundaries=(0, 3), pipelines=2)
    solution = solve_shape(model, shape)
    assert solution is not None
    value = objective_value(model, solution.estimate)
    assert solve_shape(model, shape, upper_bound=value * 0.99) is None
    again = solve_shape(model, shape, upper_bound=value * 1.01)
    assert again is not None
    _assert_same(objective_value(model, again.estimate), value)
