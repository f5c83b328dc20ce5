"""The diagnosis of infeasible specs: the least change per constraint family, the binding
constraint(s), fix lines at the spec's own paths, and the monotonicity the searches rely on.

Oracles: re-solving the changed spec with a fresh `Oracle` (its own searches) or `plan_spec`,
and scans of the constraint's value upwards; never the diagnosis's own numbers.
"""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from hetc.schema import check_text
from hetc.schema.spec import Spec
from hetc.solver.diagnosis import (
    Oracle,
    apply_fixes,
    diagnose,
    grid_index,
    grid_value,
    one_step_less,
    removed,
    round_down,
    round_up,
)
from hetc.solver.planner import plan_spec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from diagnosis import generated

OPT = """\
version: 1
name: opt
model: {{preset: OPT-350M}}
training: {{global_batch_size: 16, seq_len: 512, precision: fp16, zero_stage: 1}}
objective: max_throughput
constraints: {{{constraints}}}
zones:
  - name: z1
    region: r1
    pools:
      - {{device: T4, quota: 4, gpus_per_node: 4}}
      - {{device: A100-40GB, quota: {a100}, gpus_per_node: 4}}
"""


def opt(constraints: str, a100: int = 8) -> Spec:
    result = check_text(OPT.format(constraints=constraints, a100=a100), "opt.yaml")
    assert result.spec is not None, [d.format() for d in result.diagnostics]
    return result.spec


def feasible(spec: Spec) -> bool:
    """The independent oracle: the whole planner, plans built and simulated."""
    return bool(plan_spec(spec).proposals)


def with_constraints(spec: Spec, **changes: object) -> Spec:
    return replace(spec, constraints=replace(spec.constraints, **changes))


def test_max_gpus_and_floor_bind_together_not_memory() -> None:
    """OPT-350M with max_gpus 1 (a node has 4 devices) and a floor of 100 iterations/s:
    neither alone restores feasibility, both together do; the fixes are the least max_gpus
    (by a scan) and the most floor on that many devices. Fails on the old diagnosis, which
    named memory."""
    spec = opt("max_gpus: 1, min_throughput: 100")
    diagnosis = diagnose(spec)
    assert diagnosis.binding == "max_gpus and throughput floor"
    (fixes,) = diagnosis.alternatives
    gpus, floor = fixes
    free = with_constraints(spec, min_throughput=None)
    least = next(n for n in range(1, 17) if feasible(with_constraints(free, max_gpus=n)))
    assert (gpus.path, gpus.value) == ("constraints.max_gpus", least) and least == 4
    fastest = plan_spec(with_constraints(spec, max_gpus=least, min_throughput=None))
    best = 1 / fastest.search.candidates[0].estimate.iteration_time
    assert floor.path == "constraints.min_throughput" and floor.value == round_down(best)
    assert feasible(apply_fixes(spec, fixes))
    assert "constraints.max_gpus: 4, constraints.min_throughput: " in diagnosis.change


def test_budget_and_floor_name_the_floor_when_it_cannot_be_met_alone() -> None:
    """A generous budget and a floor no plan reaches: the floor binds (removing it alone
    restores feasibility), the budget does not; the fix is the fastest plan's throughput
    under the budget, rounded down to 3 digits."""
    spec = opt("max_cost_per_iteration: 1.0, min_throughput: 1000")
    diagnosis = diagnose(spec)
    assert diagnosis.binding == "throughput floor"
    assert not feasible(with_constraints(spec, max_cost_per_iteration=None))
    (fixes,) = diagnosis.alternatives
    fastest = plan_spec(with_constraints(spec, min_throughput=None)).search.candidates[0]
    assert fixes[0].value == round_down(1 / fastest.estimate.iteration_time)
    assert diagnosis.change == f"constraints.min_throughput: {fixes[0].value:.3g}"


@pytest.mark.slow
def test_quota_fix_is_the_least_quota_at_the_spec_path() -> None:
    """A floor that needs more A100 nodes than the quota gives: the suggested quota is the
    least whole-node quota that is feasible (by a scan of nodes upwards), the fix line
    names `zones[0].pools[1].quota` and the message the pool label."""
    spec = opt("min_throughput: 10", a100=4)
    fastest = [
        1 / plan_spec(opt("", a100=4 * n)).search.candidates[0].estimate.iteration_time
        for n in range(1, 5)
    ]
    assert fastest[0] < 10 <= fastest[-1], fastest
    diagnosis = diagnose(spec)
    assert "quota" in diagnosis.binding.split(" or ")
    quota = next(f for fixes in diagnosis.alternatives for f in fixes if f.family == "quota")
    least = next(4 * n for n in range(2, 5) if feasible(opt("min_throughput: 10", a100=4 * n)))
    assert quota.path == "zones[0].pools[1].quota" and quota.value == least
    assert f"zones[0].pools[1].quota: {least}" in diagnosis.change
    assert "a100-40gb@z1" in diagnosis.message.lower()


def test_grid_rounding_stays_feasible_and_steps_by_one_unit() -> None:
    """Rounding up (budget) and down (floor) at 3 significant digits, and one grid step."""
    assert round_up(0.0004501) == 0.000451 and round_down(0.0004509) == 0.00045
    assert round_up(9.991) == 10.0
    assert round_down(1.0) == 1.0 and round_up(1.0) == 1.0
    for value in (0.000451, 1.0, 9.99, 123000.0):
        assert grid_value(grid_index(value)) == value
    assert grid_value(grid_index(1.0) - 1) == 0.999
    assert grid_value(grid_index(9.99) + 1) == 10.0


def test_one_step_less_is_one_node_one_device_one_grid_unit() -> None:
    """The resolution of each family: whole nodes, whole devices, 3 significant digits."""
    spec = opt("max_gpus: 1, min_throughput: 100")
    diagnosis = diagnose(spec)
    gpus, floor = diagnosis.alternatives[0]
    assert one_step_less(spec, gpus) == replace(gpus, value=3)
    stepped = one_step_less(spec, floor)
    assert stepped is not None and stepped.value == grid_value(grid_index(floor.value) + 1)


def test_a_feasible_spec_has_nothing_to_diagnose() -> None:
    """diagnose refuses a spec that has a plan."""
    with pytest.raises(ValueError, match="feasible"):
        diagnose(opt(""))


def test_memory_when_nothing_fits_even_with_every_constraint_removed() -> None:
    """A model too large for any device at any count: memory binds (oracle: the planner on
    the spec with every family removed)."""
    text = OPT.format(constraints="max_gpus: 4", a100=8).replace(
        "model: {preset: OPT-350M}",
        "model: {architecture: {layers: 2, hidden: 65536, heads: 512, ffn: 262144,"
        " vocab: 1024, max_positions: 512}}",
    )
    spec = check_text(text, "huge.yaml").spec
    assert spec is not None
    diagnosis = diagnose(spec)
    assert diagnosis.binding == "memory"
    assert not feasible(removed(spec, ["max_gpus", "quota"]))


@pytest.mark.parametrize("seed", [1])
def test_feasibility_is_monotone_in_each_constraint(seed: int) -> None:
    """The monotonicity the searches rely on, on samples: feasible at a value stays feasible
    at every more permissive one (more nodes of a pool, larger max_gpus and budget, smaller
    floor)."""
    rng = random.Random(seed)
    oracle = Oracle()
    checked = 0
    while checked < 3:
        spec = generated(rng)
        zone = spec.zones[0]
        gpn = zone.pools[0].gpus_per_node

        def pool(n: int, spec: Spec = spec, gpn: int = gpn) -> Spec:
            first = replace(spec.zones[0].pools[0], quota=n * gpn)
            zones = (replace(spec.zones[0], pools=(first, *spec.zones[0].pools[1:])),)
            return replace(spec, zones=zones + spec.zones[1:])

        series = {
            "quota": [oracle.feasible(pool(n)) for n in range(1, 6)],
            "max_gpus": [oracle.feasible(with_constraints(spec, max_gpus=n)) for n in range(1, 9)],
            "budget": [
                oracle.feasible(with_constraints(spec, max_cost_per_iteration=10.0**e))
                for e in (-6, -4, -2)
            ],
            "floor": [
                oracle.feasible(with_constraints(spec, min_throughput=10.0**e)) for e in (2, 0, -1)
            ],
        }
        for name, values in series.items():
            first = values.index(True) if True in values else len(values)
            assert all(values[first:]), (name, values)
        checked += 1
