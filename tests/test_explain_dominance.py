"""No answer beaten by a plan the same command simulated (`explain.never_dominated`): where
`--explain`'s best plan using a pool beats plan 1 by the simulator, it becomes plan 1 and the
explanations are restated against it; where none does, nothing changes.

Oracles: the explanations' own plans, ranked here by the simulator; an explanation made to
beat plan 1 by a known margin (its simulated time cut by a tenth). Mutation check (done by
hand): `never_dominated` returning its input unchanged fails
`test_a_better_explained_plan_becomes_plan_1_and_the_rest_is_restated`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from test_plan_ranking import MIXED, _mixed
from typer.testing import CliRunner

from hetc.cli import app
from hetc.solver.explain import Explanation, explain_unused, never_dominated
from hetc.solver.planner import plan_spec, simulated_objective


def test_nothing_changes_where_no_explanation_beats_plan_1() -> None:
    """The two-zone spec's explanations all lose or tie: result and explanations are the ones
    given, and nothing is said to be promoted."""
    spec = _mixed("max_throughput")
    result = plan_spec(spec, top=3)
    explanations = explain_unused(result, spec)
    first = simulated_objective(spec, result.proposals[0].simulation)
    assert all(x.value is None or x.value >= first for x in explanations)
    kept, said = never_dominated(result, spec, explanations)
    assert kept is result and said is explanations and kept.promoted is None


def _faster(x: Explanation, spec_objective_value: float) -> Explanation:
    """`x` with its plan simulated a tenth faster than `spec_objective_value`."""
    assert x.best_with is not None
    simulation = replace(x.best_with.simulation, iteration_time=0.9 * spec_objective_value)
    return replace(x, best_with=replace(x.best_with, simulation=simulation))


def test_a_better_explained_plan_becomes_plan_1_and_the_rest_is_restated() -> None:
    """An explanation whose plan simulates a tenth faster than plan 1: it is plan 1, the
    number of plans shown stays, `promoted` names its pool and margin, its pool is no
    longer explained (plan 1 rents it), and every pool the new plan 1 leaves unused is
    explained against the new plan 1's value by the best known plan using it (plan 1 of
    before, where it rents that pool)."""
    spec = _mixed("max_throughput")
    result = plan_spec(spec, top=3)
    explanations = explain_unused(result, spec)
    first = simulated_objective(spec, result.proposals[0].simulation)
    chosen = next(x for x in explanations if x.best_with is not None)
    faster = _faster(chosen, first)
    given = [faster if x is chosen else x for x in explanations]
    promoted, restated = never_dominated(result, spec, given)
    assert promoted.proposals[0] is faster.best_with
    assert len(promoted.proposals) == len(result.proposals)
    assert promoted.promoted is not None and chosen.pool in promoted.promoted
    assert "10.0% better" in promoted.promoted
    new = 0.9 * first
    nodes = promoted.proposals[0].candidate.estimate.nodes
    unused = {s.label for s in result.model.pools if not nodes[s.index]}
    assert {x.pool for x in restated} == unused and chosen.pool not in unused
    known = [*result.proposals, *(x.best_with for x in given if x.best_with is not None)]
    for x in restated:
        assert x.plan1_value == new
        index = next(s.index for s in result.model.pools if s.label == x.pool)
        using = [p for p in known if p.candidate.estimate.nodes[index]]
        if using:
            best = min(simulated_objective(spec, p.simulation) for p in using)
            assert x.value == best and x.best_with is not None
            assert x.reason == ("loses" if best > new else "tie")


def test_plan_json_says_nothing_was_promoted_on_an_ordinary_spec(tmp_path: Path) -> None:
    """`hetc plan --json --explain` carries `promoted`: null where plan 1 stands."""
    path = tmp_path / "mixed.yaml"
    path.write_text(MIXED.format(objective="max_throughput"), encoding="utf-8")
    done = CliRunner().invoke(app, ["plan", str(path), "--json", "--explain"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["promoted"] is None
