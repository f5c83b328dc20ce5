"""Every fix the diagnosis suggests is the least at its resolution, or its message states the
range it proved, checked against independent searches over a generated family; the
diagnosis keeps within its budget of work and answers the same whatever the clock says;
a failed necessary condition gets its constraint's least fix at once; an unproven answer
names the limit that stopped it.

Oracles: a fresh `Oracle` per spec (its own searches, none of the diagnosis's numbers or
plans), without a work limit on the small specs (the exact answer) and with CHECK_WORK per
search (over six times a whole diagnosis's default budget) on the 10,000-GPU floors and
the quotas in the hundreds; bench/diagnosis.py's `problems` and `least_at_unit` make the
checks. Mutation checks: a quota fix one node too low or too high, and a floor one grid
step too high, are each caught by the same checks.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from hetc.costmodel.planning import PlanningModel
from hetc.schema import check_text
from hetc.schema.spec import Spec
from hetc.solver.budget import DEFAULT_WORK, Budget
from hetc.solver.deadline import Deadline
from hetc.solver.diagnosis import (
    Diagnosis,
    Fix,
    apply_fixes,
    diagnose,
    proven_least,
    unit_step,
)
from hetc.solver.feasibility import time_floor
from hetc.solver.fix import grid_index, grid_value, round_down
from hetc.solver.least import floor_fix
from hetc.solver.oracle import Oracle, constrained

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from diagnosis import CHECK_WORK, SMALL, kinds_family, least_at_unit, problems, small_family

OVERRUN = DEFAULT_WORK // 20
"""The most a diagnosis may spend past its budget: what its last search does past its
limit before it next checks it (5% of a command's default budget: the most one search was
seen to overshoot is about 4,000,000 units, on 10,000 H100; bench/diagnosis.py prints the
most a diagnosis spent past its budget)."""

SPEC = """\
version: 1
name: fixes
model: {model}
training: {{global_batch_size: 16, seq_len: 512, precision: fp16, zero_stage: 1}}
objective: max_throughput
constraints: {{{constraints}}}
zones:
  - name: z1
    region: r1
    pools:
      - {{device: A100-40GB, quota: {a100}, gpus_per_node: 2}}
"""


def spec_of(constraints: str = "", *, a100: int = 8, model: str = SMALL) -> Spec:
    result = check_text(SPEC.format(model=model, constraints=constraints, a100=a100), "f.yaml")
    assert result.spec is not None, [d.format() for d in result.diagnostics]
    return result.spec


EXACT = {"work_limit": None, "budget": None}
"""An oracle (or a diagnosis) without any limit of work."""


def fastest(spec: Spec) -> float:
    """The most iterations/s of any plan of `spec`, searched to the end."""
    best = Oracle(**EXACT).best(constrained(spec, min_throughput=None))
    assert best is not None
    return 1.0 / best.estimate.iteration_time


def quota_spec() -> Spec:
    """The four-block model with a floor that 8 A100-40GB do not reach and 12 do: the quota
    binds, its least fix a whole number of nodes of 2."""
    floor = round_down((fastest(spec_of(a100=8)) + fastest(spec_of(a100=12))) / 2)
    return spec_of(f"min_throughput: {floor}")


def verified(spec: Spec, diagnosis: Diagnosis, checker: Oracle) -> list[str]:
    """`problems`, and a problem for each fix whose unit step the checker does not prove
    infeasible where the diagnosis says it is proven least."""
    found = problems(spec, diagnosis, checker)
    for fixes in diagnosis.alternatives:
        for fix in fixes:
            step = unit_step(spec, fix)
            if proven_least(spec, fix) and step is not None:
                lowered = tuple(step if f is fix else f for f in fixes)
                if not checker.proven_infeasible(apply_fixes(spec, lowered)):
                    found.append(f"{fix.line()}: one unit less is not proven infeasible")
    return found


@pytest.mark.slow
def test_small_family_fixes_are_least_by_an_exact_checker() -> None:
    """On 60 generated infeasible specs of a four-block model (budgets, floors, max_gpus and
    quotas all bind in some), the diagnosis under its default budget suggests, for every
    binding constraint, the least value at its unit resolution: an exact checker (a fresh
    oracle without a work limit) finds each fix feasible and one unit less infeasible."""
    families: set[str] = set()
    for spec in small_family(60, seed=31):
        diagnosis = diagnose(spec)
        checker = Oracle(**EXACT)
        assert verified(spec, diagnosis, checker) == [], diagnosis.message
        assert least_at_unit(spec, diagnosis, checker), diagnosis.message
        families.update(diagnosis.binding.replace(" or ", " and ").split(" and "))
    assert families >= {"max_gpus", "quota", "budget", "throughput floor"}


@pytest.mark.slow
def test_10000_gpu_floors_and_quotas_in_the_hundreds_are_least_or_ranged_honestly() -> None:
    """Two 10,000-GPU specs whose floor binds (its least fix is a 10,000-GPU optimum under
    `kind-profiles`) and two specs whose least quota is in the hundreds of devices, each
    diagnosed within `hetc plan`'s default budget: a checker with CHECK_WORK per search
    finds every fix feasible, every value the diagnosis states as proven infeasible
    infeasible (so that the least value lies in the stated range), and every fix it
    states as least at the unit least at the unit."""
    specs = kinds_family(4, seed=29, kinds=("10,000-GPU floor", "quota (floor)"))
    quotas = []
    for kind, spec in specs:
        diagnosis = diagnose(spec, budget=Budget(work=DEFAULT_WORK))
        checker = Oracle(work_limit=CHECK_WORK, budget=None)
        assert verified(spec, diagnosis, checker) == [], diagnosis.message
        assert not checker.unknown, diagnosis.message
        assert diagnosis.work <= DEFAULT_WORK + OVERRUN
        fixes = [f for fixes in diagnosis.alternatives for f in fixes]
        quotas += [f.value for f in fixes if f.family == "quota"]
        if kind == "10,000-GPU floor":
            assert diagnosis.binding == "throughput floor" and diagnosis.proven
            assert sum(p.quota for z in spec.zones for p in z.pools) >= 9_900
    assert len(quotas) == 2 and min(quotas) >= 100


def test_the_checks_catch_a_quota_fix_one_node_off_and_a_floor_one_step_high() -> None:
    """Mutation checks: the exact diagnosis of `quota_spec` passes the checks; the same
    diagnosis with its quota fix one node (2 devices) lower fails them (not feasible), one
    node higher fails them (feasible one step less: not least), and with its floor fix one
    grid step higher fails them (not feasible)."""
    spec = quota_spec()
    diagnosis = diagnose(spec, **EXACT)
    assert diagnosis.proven and verified(spec, diagnosis, Oracle(**EXACT)) == []
    quota = next(f for fixes in diagnosis.alternatives for f in fixes if f.family == "quota")
    floor = next(
        f for fixes in diagnosis.alternatives for f in fixes if f.family == "throughput floor"
    )

    def mutated(old: Fix, new: Fix) -> Diagnosis:
        alternatives = tuple(
            tuple(new if f is old else f for f in fixes) for fixes in diagnosis.alternatives
        )
        return replace(diagnosis, alternatives=alternatives)

    low = replace(quota, value=quota.value - 2, infeasible_at=quota.value - 4)
    assert any("not feasible" in p for p in verified(spec, mutated(quota, low), Oracle(**EXACT)))
    high = replace(quota, value=quota.value + 2, infeasible_at=quota.value)
    assert any("not minimal" in p for p in verified(spec, mutated(quota, high), Oracle(**EXACT)))
    step = grid_value(grid_index(floor.value) + 1)
    up = replace(floor, value=step, infeasible_at=grid_value(grid_index(step) + 1))
    assert any("not feasible" in p for p in verified(spec, mutated(floor, up), Oracle(**EXACT)))


@pytest.mark.parametrize("share", [100, 20])
def test_the_diagnosis_keeps_within_its_budget_whatever_the_clock(
    share: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a budget of DEFAULT_WORK / `share` units, a diagnosis spends at most the
    budget plus OVERRUN, and gives the same answer, to the unit of work, when the clock
    runs a thousand seconds per reading (a machine at any load): no wall clock decides
    anything under a budget of work."""
    spec = quota_spec()
    budget = DEFAULT_WORK // share
    calm = diagnose(spec, budget=Budget(work=budget))
    assert calm.work <= budget + OVERRUN
    ticks = itertools.count()
    monkeypatch.setattr("time.perf_counter", lambda: 1000.0 * next(ticks))
    rushed = diagnose(spec, budget=Budget(work=budget))
    assert (rushed.binding, rushed.change, rushed.message, rushed.work) == (
        calm.binding,
        calm.change,
        calm.message,
        calm.work,
    )


def test_a_floor_no_plan_can_reach_gets_its_least_fix_at_once() -> None:
    """A floor twice what the necessary condition allows (the model's work over every
    device at its best speed) is named first with its least fix, proven, even on a
    twentieth of the default budget and beside max_gpus; the message ends with the
    condition, and says nothing is unknown."""
    reach = 1 / time_floor(PlanningModel(spec_of()))
    spec = spec_of(f"min_throughput: {2 * reach:.3g}, max_gpus: 16")
    diagnosis = diagnose(spec, budget=Budget(work=DEFAULT_WORK // 20))
    (first,) = diagnosis.alternatives[0]
    assert first.family == "throughput floor" and proven_least(spec, first)
    assert first.value == round_down(fastest(spec))
    assert "Before any search" in diagnosis.message and "not known" not in diagnosis.message


def test_an_exact_diagnosis_never_tells_the_user_to_plan_exact() -> None:
    """Without any limit (`hetc plan --exact`) nothing stops a search short, so the message
    names no flag to raise; under a wall clock that has run out the undetermined answer
    names --time-limit, not --exact."""
    spec = quota_spec()
    exact = diagnose(spec, **EXACT)
    assert exact.proven and "--exact" not in exact.message + exact.change
    assert "--work-limit" not in exact.message + exact.change
    spent = Budget(work=None, clock=Deadline(at=0.0, seconds=1.0))
    timed = diagnose(constrained(spec, max_gpus=16), budget=spent)
    assert timed.binding == "undetermined" and "--time-limit" in timed.change
    assert "--exact" not in timed.change


def test_a_floor_fix_is_never_below_a_plan_already_found() -> None:
    """With no work left for its own search, the floor's fix still rests on the fastest
    plan the oracle found before (a witness that meets the other constraints): at least its
    throughput, rounded down, never none."""
    spec = spec_of("min_throughput: 1000")
    oracle = Oracle(**EXACT)
    seen = oracle.witness(constrained(spec, min_throughput=0.5 * fastest(spec)))
    assert seen is not None
    oracle.budget = Budget(work=0)
    fix = floor_fix(oracle, spec)
    assert fix is not None and fix.value >= round_down(1 / seen.estimate.iteration_time)


def test_a_spec_known_infeasible_is_not_proven_again() -> None:
    """`known_infeasible` (what `hetc plan` knows after its own complete search) gives the
    same fixes as a diagnosis that proves the spec infeasible itself, for less work."""
    spec = quota_spec()
    proving = diagnose(spec, budget=Budget(work=DEFAULT_WORK))
    told = diagnose(spec, known_infeasible=True, budget=Budget(work=DEFAULT_WORK))
    assert told.change == proving.change and told.proven == proving.proven
    assert told.work < proving.work
