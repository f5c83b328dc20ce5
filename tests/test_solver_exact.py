"""The search is exact: with every approximation off it finds the same optimum as enumerating
every candidate, on a few hundred small random specs, many of them with a constraint that
moves the optimum; and what it returns builds into a consistent plan the model bounds.

The oracle (tests/oracles/brute_force.py) shares only `PlanningModel.estimate` with the
search, which is the definition of the objective: so a disagreement is a search bug (a bound
that is not a bound, a dominance rule that drops a better completion, a count DP that misses
the cheapest counts), not a modelling question.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
from oracles.brute_force import brute_force, candidates, derive_kinds
from oracles.instances import binding_instance, instance_data, random_instance, relaxed, to_yaml
from ruamel.yaml import YAML

from hetc.costmodel.planning import Assignment, PlanningModel, Shape
from hetc.costmodel.simulate import Simulation, simulate
from hetc.plan import Plan, plan_problems
from hetc.schema import Spec, check_text, spec_hash
from hetc.solver.build import build_plan
from hetc.solver.search import SearchOptions, SearchResult, search
from hetc.solver.search.driver import Search

SEEDS = range(200)
MIN_BINDING_SHARE = 0.30
RELATIVE = 1e-9

Best = tuple[float, Shape, Assignment] | None


@cache
def _instance(seed: int) -> str:
    """Even seeds get a constraint calibrated to cut off the optimum (see `binding_instance`);
    odd seeds keep the plain random instance (some with a max_gpus limit, most unconstrained),
    so unconstrained optima are checked as often as constrained ones."""
    return binding_instance(seed) if seed % 2 == 0 else random_instance(seed)


def _spec(text: str) -> Spec:
    result = check_text(text, "oracle.yaml")
    assert result.spec is not None and not result.errors, result.diagnostics
    return result.spec


@dataclass(frozen=True)
class Case:
    seed: int
    text: str
    spec: Spec
    model: PlanningModel
    result: SearchResult

    def describe(self) -> str:
        return f"seed {self.seed}:\n{self.text}"


@cache
def _case(seed: int) -> Case:
    text = _instance(seed)
    spec = _spec(text)
    model = PlanningModel(spec)
    return Case(seed, text, spec, model, search(model, SearchOptions()))


@cache
def _oracle(seed: int) -> Best:
    return brute_force(_case(seed).spec)


@cache
def _relaxed_oracle(seed: int) -> Best:
    """The brute-force optimum without the explicit constraints (the same answer when the
    instance has none)."""
    case = _case(seed)
    data: dict[str, Any] = _parsed(case.text)
    if "constraints" not in data:
        return _oracle(seed)
    return brute_force(_spec(to_yaml(relaxed(data))))


def _parsed(text: str) -> dict[str, Any]:
    loaded = YAML(typ="safe", pure=True).load(text)
    assert isinstance(loaded, dict)
    return loaded


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=RELATIVE, abs_tol=0.0)


def _value(best: Best) -> float | None:
    return None if best is None else best[0]


def _searched(result: SearchResult) -> float | None:
    return result.candidates[0].value if result.candidates else None


# -- the oracle and its instances ---------------------------------------------------------


@pytest.mark.slow
def test_instances_are_valid_and_deterministic() -> None:
    for seed in SEEDS:
        text = random_instance(seed)
        assert text == random_instance(seed)
        result = check_text(text, "oracle.yaml")
        assert result.spec is not None and not result.diagnostics, (seed, result.diagnostics)
        _spec(_instance(seed))


@pytest.mark.slow
def test_instances_cover_what_the_model_reads() -> None:
    """Each feature the search must handle appears in a fair share of the instances."""
    data = [instance_data(seed) for seed in SEEDS]
    specs = [_case(seed).spec for seed in SEEDS]
    models = [_case(seed).model for seed in SEEDS]
    share = len(SEEDS) / 10
    assert sum(len(m.kinds) >= 3 for m in models) > share
    assert sum(len({k.tp for k in m.kinds}) > 1 for m in models) > share
    assert sum(len(s.zones) > 1 for s in specs) > share
    assert sum(len({z.region for z in s.zones}) > 1 for s in specs) > share
    assert sum(s.objective == "min_cost" for s in specs) > share
    assert sum(s.training.zero_stage == 0 for s in specs) > share
    assert sum("devices" in d for d in data) > share
    assert sum(m.blocks >= 3 for m in models) > share


@pytest.mark.slow
def test_derived_kinds_match_the_model() -> None:
    for seed in SEEDS:
        case = _case(seed)
        mine = [(k.pool, k.device, k.tp) for k in derive_kinds(case.spec)]
        assert mine == [(k.pool, k.device, k.tp) for k in case.model.kinds], seed


TWO_KINDS = """\
version: 1
name: count
model:
  architecture: {layers: 2, hidden: 64, heads: 1, vocab: 256, max_positions: 64}
training: {global_batch_size: 2, seq_len: 64, precision: fp32, zero_stage: 0}
zones:
  - name: z
    pools:
      - {device: A100-40GB, quota: 8, gpus_per_node: 1}
      - {device: T4, quota: 8, gpus_per_node: 1}
"""


def test_brute_force_enumerates_every_candidate() -> None:
    """Two TP-1 kinds with room to spare, 2 blocks, batch 2. Stage options: D = 1 gives 2
    (either kind), D = 2 gives 3 (two of one kind, or one of each). (mbs, D) = (1, 1): P = 1
    gives 2, P = 2 gives 2 x 2; (1, 2): 3 + 3 x 3; (2, 1): 2 + 4. In all 24."""
    model = PlanningModel(_spec(TWO_KINDS))
    found = list(candidates(model))
    assert len(found) == 24
    assert len({(s, a) for s, a, _ in found}) == 24


def test_brute_force_on_one_device_is_the_best_microbatch() -> None:
    """One device and one block: the only choice is the microbatch size."""
    text = TWO_KINDS.replace("layers: 2", "layers: 1").replace(
        "      - {device: T4, quota: 8, gpus_per_node: 1}\n", ""
    )
    text = text.replace("quota: 8", "quota: 1").replace(
        "global_batch_size: 2", "global_batch_size: 8"
    )
    model = PlanningModel(_spec(text))
    times = [
        model.estimate(Shape(microbatch=m, boundaries=(0, 1), pipelines=1), (((0, 1),),))
        for m in (1, 2, 4, 8)
    ]
    best = brute_force(model.spec)
    assert best is not None
    assert best[0] == min(e.iteration_time for e in times if e.feasible)


# -- the search against the oracle --------------------------------------------------------


@pytest.mark.slow
def test_search_finds_the_brute_force_optimum() -> None:
    disagreements = []
    binding = []
    for seed in SEEDS:
        case = _case(seed)
        assert case.result.complete
        oracle = _oracle(seed)
        if not _same(_searched(case.result), _value(oracle)):
            found = case.result.candidates[0] if case.result.candidates else None
            disagreements.append(
                f"{case.describe()}\nsearch: {_searched(case.result)!r}"
                f" {found and (found.shape, found.assignment)}\n"
                f"brute force: {_value(oracle)!r} {oracle and oracle[1:]}"
            )
        if not _same(_value(_relaxed_oracle(seed)), _value(oracle)):
            binding.append(seed)
    assert not disagreements, "\n\n".join(disagreements)
    share = len(binding) / len(SEEDS)
    assert share >= MIN_BINDING_SHARE, (
        f"only {share:.0%} of the instances have a binding constraint"
    )


@pytest.mark.slow
def test_search_equals_the_cp_sat_optimum_over_every_shape() -> None:
    """The third oracle: CP-SAT's optimum for every (microbatch, P, D, split), its assignment
    re-scored with the float model, equals the search's objective on every instance."""
    from hetc.solver.cpsat import solve_all_shapes

    disagreements = []
    for seed in SEEDS:
        case = _case(seed)
        solved = solve_all_shapes(PlanningModel(case.spec))
        other = None
        if solved is not None:
            e = solved.estimate
            other = e.iteration_time if case.spec.objective == "max_throughput" else e.cost
        if not _same(_searched(case.result), other):
            disagreements.append(
                f"{case.describe()}\nsearch {_searched(case.result)!r}, CP-SAT {other!r}"
            )
    assert not disagreements, "\n\n".join(disagreements)


def test_a_search_that_prunes_too_much_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison has teeth: once a first candidate is found, a bound of 0 prunes every
    other shape and partial, and on some instance the oracle sees a worse answer."""

    def overeager(self: Search) -> float:
        return 0.0 if self.ranked else math.inf

    monkeypatch.setattr(Search, "bound", overeager)
    for seed in range(1, 2 * len(SEEDS), 2):
        result = search(PlanningModel(_case(seed).spec), SearchOptions())
        if not _same(_searched(result), _value(_oracle(seed))):
            worse, best = _searched(result), _value(_oracle(seed))
            assert worse is not None and best is not None and worse > best
            return
    pytest.fail("the over-eager bound went unnoticed on every instance")


def test_search_is_deterministic() -> None:
    for seed in range(0, 40, 3):
        spec = _case(seed).spec
        first = search(PlanningModel(spec), SearchOptions(top=3))
        second = search(PlanningModel(spec), SearchOptions(top=3))
        assert first.candidates == second.candidates, seed
        assert first.evaluations == second.evaluations, seed


# -- the returned plan -------------------------------------------------------------------


@cache
def _built(seed: int) -> tuple[Plan, Simulation] | None:
    case = _case(seed)
    if not case.result.candidates:
        return None
    best = case.result.candidates[0]
    plan = build_plan(case.model, best.shape, best.assignment, spec_hash=spec_hash(case.spec))
    return plan, simulate(plan, case.spec)


@pytest.mark.slow
def test_the_best_candidate_builds_a_plan_the_estimate_bounds() -> None:
    """The builder's plan is consistent, feeds exactly the global batch, and its closed-form
    iteration time is within the planning estimate: the model is an upper bound of it where
    devices sharing a node talk no slower than over the network, as every instance's do."""
    problems = []
    checked = 0
    for seed in SEEDS:
        built = _built(seed)
        if built is None:
            continue
        case, (plan, sim) = _case(seed), built
        best = case.result.candidates[0]
        shape, estimate = best.shape, best.estimate
        if plan_problems(plan):
            problems.append(f"seed {seed}: {plan_problems(plan)}")
        if len(plan.pipelines) != shape.pipelines:
            problems.append(f"seed {seed}: {len(plan.pipelines)} pipelines, not {shape.pipelines}")
        total = sum(p.microbatches for p in plan.pipelines)
        if total != case.model.batch // shape.microbatch:
            problems.append(f"seed {seed}: the pipelines take {total} microbatches")
        if sim.closed_form_time > estimate.iteration_time * (1 + RELATIVE):
            problems.append(
                f"seed {seed}: closed form {sim.closed_form_time!r} >"
                f" estimate {estimate.iteration_time!r}"
            )
        checked += 1
    assert not problems, "\n".join(problems)
    assert checked > len(SEEDS) / 2


@pytest.mark.slow
def test_the_best_plan_fits_in_memory_as_simulated() -> None:
    """The planning model never uses a kind that runs out of memory, so neither may the plan:
    the simulator must find every rank within its device's memory."""
    over = []
    for seed in SEEDS:
        built = _built(seed)
        if built is None:
            continue
        _, sim = built
        if not sim.fits:
            best = _case(seed).result.candidates[0]
            ranks = [r.problem for r in sim.ranks if r.problem]
            over.append(
                f"{_case(seed).describe()}{best.shape} {best.assignment}\n"
                f"{len(ranks)} ranks over, e.g. {ranks[0]}"
            )
    assert not over, "\n\n".join(over)
