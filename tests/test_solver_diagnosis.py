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

from hetc.costmodel.planning import PlanningModel
from hetc.schema import check_text
from hetc.schema.spec import Spec
from hetc.solver.budget import Budget
from hetc.solver.diagnosis import (
    Oracle,
    apply_fixes,
    diagnose,
    grid_index,
    grid_value,
    one_step_less,
    proven_least,
    removed,
    round_down,
    round_up,
    unit_step,
    unknown,
)
from hetc.solver.feasibility import least_devices
from hetc.solver.planner import plan_spec
from hetc.solver.search import SearchOptions, search

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from diagnosis import SMALL, generated, problems, small_family

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
    """The resolution of each family: whole nodes, whole devices, 3 significant digits; a
    diagnosis that proved its fixes least steps by exactly that unit (`one_step_less` is
    the proven-infeasible value, `unit_step` the unit, `proven_least` their agreement)."""
    spec = opt("max_gpus: 1, min_throughput: 100")
    diagnosis = diagnose(spec, work_limit=None, budget=None)
    gpus, floor = diagnosis.alternatives[0]
    assert unit_step(spec, gpus) == replace(gpus, value=3) == one_step_less(spec, gpus)
    stepped = unit_step(spec, floor)
    assert stepped is not None and stepped.value == grid_value(grid_index(floor.value) + 1)
    assert one_step_less(spec, floor) == stepped
    assert diagnosis.proven and proven_least(spec, gpus) and proven_least(spec, floor)
    assert not proven_least(spec, replace(floor, infeasible_at=None))
    assert not proven_least(spec, replace(gpus, infeasible_at=2))


SMALL_SPEC = """\
version: 1
name: small
model: {model}
training: {{global_batch_size: 16, seq_len: 512, precision: fp16, zero_stage: 1}}
objective: max_throughput
constraints: {{{constraints}}}
zones:
  - name: z1
    region: r1
    pools:
      - {{device: T4, quota: 4, gpus_per_node: 4}}
      - {{device: A100-40GB, quota: 8, gpus_per_node: 4}}
"""


def small(constraints: str) -> Spec:
    result = check_text(SMALL_SPEC.format(model=SMALL, constraints=constraints), "s.yaml")
    assert result.spec is not None, [d.format() for d in result.diagnostics]
    return result.spec


def test_budget_and_floor_each_alone_when_each_can_be_met_alone() -> None:
    """A budget only the cheapest plans meet and a floor only the fastest meet: each can be
    met alone (the planner finds a plan without either), not both, so each binds alone and
    the diagnosis says either change suffices: the budget at the cost of the fastest plan
    over the floor, the floor at the throughput of the cheapest plan under the budget."""
    base = small("")
    cheapest = plan_spec(replace(base, objective="min_cost")).search.candidates[0].estimate
    fastest = plan_spec(base).search.candidates[0].estimate
    budget, floor = round_up(cheapest.cost * 1.05), round_down(0.95 / fastest.iteration_time)
    spec = small(f"max_cost_per_iteration: {budget}, min_throughput: {floor}")
    assert not feasible(spec)
    assert feasible(with_constraints(spec, min_throughput=None))
    assert feasible(with_constraints(spec, max_cost_per_iteration=None))
    diagnosis = diagnose(spec, work_limit=None, budget=None)
    assert diagnosis.binding == "budget or throughput floor"
    assert diagnosis.message.startswith("each of these alone makes the spec feasible")
    (cost,), (speed,) = diagnosis.alternatives
    fast = plan_spec(
        replace(with_constraints(spec, max_cost_per_iteration=None), objective="min_cost")
    )
    assert cost.value == round_up(fast.search.candidates[0].estimate.cost)
    cheap = plan_spec(with_constraints(spec, min_throughput=None))
    assert speed.value == round_down(1 / cheap.search.candidates[0].estimate.iteration_time)
    for fix in (cost, speed):
        assert feasible(apply_fixes(spec, [fix]))


def test_a_feasible_spec_has_nothing_to_diagnose() -> None:
    """diagnose refuses a spec that has a plan."""
    with pytest.raises(ValueError, match="feasible"):
        diagnose(opt(""))


def test_searches_stopped_without_proof_say_undetermined_not_memory() -> None:
    """With no work to search (a budget of 0 units), nothing but the necessary conditions
    answers: the diagnosis says it does not know and names the work budget that stopped
    it (`--work-limit`); the old one named memory, a guess the searches never proved."""
    spec = opt("max_gpus: 1, min_throughput: 100")
    diagnosis = diagnose(spec, budget=Budget(work=0))
    assert diagnosis.binding == "undetermined" and not diagnosis.proven
    assert diagnosis.plan is None and "--work-limit" in diagnosis.change
    assert "memory" not in diagnosis.message and diagnosis.work == 0
    free = removed(spec, ["max_gpus", "quota", "throughput floor"])
    assert unknown(Oracle(budget=Budget(work=0)), free)


def test_a_family_whose_search_stopped_is_said_to_be_unknown_not_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The floor binds; whether the budget binds alone is unknown when the search without
    the budget stops unproven: the message says so and the diagnosis is not proven (before,
    the budget was silently left out)."""
    spec = opt("max_cost_per_iteration: 1.0, min_throughput: 1000")
    real = Oracle.status

    def status(self: Oracle, probed: Spec, work: int | None = None) -> tuple[object, bool]:
        c = probed.constraints
        if c.max_cost_per_iteration is None and c.min_throughput == 1000:
            return None, False
        return real(self, probed, work)

    monkeypatch.setattr(Oracle, "status", status)
    diagnosis = diagnose(spec)
    assert diagnosis.binding == "throughput floor" and not diagnosis.proven
    assert "whether budget binds alone too is not known" in diagnosis.message


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


def test_first_feasible_search_stops_at_a_plan_and_proves_none() -> None:
    """`SearchOptions.first_feasible`: on a feasible spec the search stops at its first
    candidate, which meets every constraint (the floor, by its estimate) and scores no
    better than the optimising search's best; on an infeasible one it ends complete with
    none, as the optimising search does."""
    spec = small("min_throughput: 5")
    model = PlanningModel(spec)
    first = search(model, SearchOptions(first_feasible=True))
    best = search(model, SearchOptions())
    (found,) = first.candidates
    assert first.stop_reason == "first feasible candidate found" and not first.complete
    assert 1 / found.estimate.iteration_time >= 5 and found.value >= best.candidates[0].value
    assert first.evaluations <= best.evaluations
    hopeless = PlanningModel(small("min_throughput: 1000"))
    none = search(hopeless, SearchOptions(first_feasible=True))
    assert none.complete and not none.candidates
    assert not search(hopeless, SearchOptions()).candidates


@pytest.mark.slow
def test_300_generated_infeasible_specs_get_least_verified_fixes() -> None:
    """On 300 generated infeasible specs of a four-block model (`small_family`), the exact
    diagnosis (no work limit) is proven least at each family's unit resolution, and an
    independent checker (a fresh oracle's own searches, bench/diagnosis.py's `problems`)
    finds every suggestion feasible, one step less on any member proven infeasible, each
    constraint named alone binding (its removal alone restores feasibility), each named
    combination needing all its members, and no unnamed constraint binding alone. Mutation
    checks: with `_combination`'s re-minimising pass removed, specs fail (max_gpus
    one device too high); with `Oracle` memoised on quotas and constraints only (as before),
    the family's own oracle mistakes specs for infeasible."""
    specs = small_family(300)
    families: set[str] = set()
    for spec in specs:
        diagnosis = diagnose(spec, work_limit=None, budget=None)
        assert diagnosis.proven, diagnosis.message
        assert problems(spec, diagnosis, Oracle(work_limit=None)) == [], diagnosis.message
        families.update(diagnosis.binding.replace(" or ", " and ").split(" and "))
    assert families == {"max_gpus", "quota", "budget", "throughput floor"}


LLAMA = """\
version: 1
name: llama
model: {{preset: Llama-65B}}
training: {{global_batch_size: 64, seq_len: 2048, precision: fp16, zero_stage: 1,
  activation_checkpointing: {checkpointing}}}
objective: max_throughput
zones:
  - name: z1
    region: r1
    pools:
      - {{device: {device}, quota: {quota}, gpus_per_node: {gpn}}}
"""


def llama(device: str, quota: int, gpn: int, *, checkpointing: bool = False) -> Spec:
    text = LLAMA.format(
        device=device, quota=quota, gpn=gpn, checkpointing=str(checkpointing).lower()
    )
    result = check_text(text, "llama.yaml")
    assert result.spec is not None, [d.format() for d in result.diagnostics]
    return result.spec


@pytest.mark.slow
@pytest.mark.parametrize("quota", [16, 8])
def test_llama65b_on_a100_is_told_the_least_quota(quota: int) -> None:
    """Issue 29: Llama-65B on A100-80GB with quota 16 (or 8) was told quota 984 (488); the
    least feasible quota is 24 (three nodes of 8): a fresh oracle finds a plan at 24 (its
    greedy seed: three stages of TP 8) and proves 16 infeasible, and the diagnosis, within
    its default budget of work, says 24, proven least."""
    spec = llama("A100-80GB", quota, 8)
    diagnosis = diagnose(spec)
    assert diagnosis.change == "zones[0].pools[0].quota: 24" and diagnosis.proven
    checker = Oracle(work_limit=None)
    plan = checker.witness(llama("A100-80GB", 24, 8))
    assert plan is not None and plan.estimate.feasible and plan.estimate.devices == 24
    assert checker.proven_infeasible(llama("A100-80GB", 16, 8))


@pytest.mark.slow
def test_llama65b_on_t4_with_checkpointing_is_told_the_least_t4_count() -> None:
    """Issue 29: Llama-65B on T4 with activation checkpointing was told 504 T4. The least
    quota in whole nodes of 4 is 120: a fresh oracle finds a plan at 120 and proves 116
    infeasible, above what the memory bound alone proves (`least_devices`). The exact
    diagnosis says 120, proven least, and so does the diagnosis within its default budget
    of work, on any machine at any load (before, within its default time, it gave a range
    on a loaded machine)."""
    spec = llama("T4", 64, 4, checkpointing=True)
    checker = Oracle(work_limit=None)
    assert checker.feasible(llama("T4", 120, 4, checkpointing=True))
    assert checker.proven_infeasible(llama("T4", 116, 4, checkpointing=True))
    assert least_devices(PlanningModel(spec)) < 116
    exact = diagnose(spec, work_limit=None, budget=None)
    assert exact.change == "zones[0].pools[0].quota: 120" and exact.proven
    quick = diagnose(spec)
    assert quick.change == "zones[0].pools[0].quota: 120" and quick.proven
