"""The whole-command time limit (`hetc.solver.deadline.Deadline`) and how the planner spends
it: the search's share, reranking cut once the budget is spent (plan 1 always built, the cut
stated), `--explain` saying "not explained" rather than "no plan" when its part ran out, and
the CLI's `--json` carrying the cut. Clocks are fake wherever a result depends on them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_solver_planner import TINY, tiny
from typer.testing import CliRunner

from hetc import cli
from hetc.cli import app
from hetc.costmodel.planning import PlanningModel
from hetc.costmodel.simulate import simulate
from hetc.schema.spec import spec_hash
from hetc.solver import planner
from hetc.solver.build import build_plan
from hetc.solver.deadline import Deadline
from hetc.solver.planner import UNEXPLAINED, explain_unused, plan_spec
from hetc.solver.search import SearchOptions, search


def readings(*values: float) -> Callable[[], float]:
    """A clock returning `values` in turn, then the last one for ever."""
    it: Iterator[float] = iter(values)
    last = [values[-1]]

    def clock() -> float:
        last[0] = next(it, last[0])
        return last[0]

    return clock


def test_deadline_counts_down_on_its_clock() -> None:
    """remaining/expired/part read the injected clock: 10 s from t=100 leaves 4 at t=106,
    none at t=111; a half part at t=106 ends at t=108."""
    now = [100.0]
    deadline = Deadline.after(10.0, clock=lambda: now[0])
    assert deadline.at == 110.0 and deadline.seconds == 10.0
    now[0] = 106.0
    assert deadline.remaining() == pytest.approx(4.0) and not deadline.expired()
    half = deadline.part(0.5)
    assert half.at == pytest.approx(108.0) and half.seconds == 10.0
    now[0] = 111.0
    assert deadline.remaining() == 0.0 and deadline.expired() and half.expired()
    assert deadline.part(0.5).remaining() == 0.0


def test_without_a_limit_every_candidate_is_reranked_and_nothing_is_cut() -> None:
    """No deadline: the search's four candidates are all built and simulated; `cut` is None."""
    result = plan_spec(tiny(), top=4)
    assert len(result.search.candidates) == 4
    assert len(result.proposals) == 4 and result.cut is None


def test_a_budget_spent_after_the_search_yields_plan_1_only_with_the_cut_stated() -> None:
    """The fake clock reads 0 when the search's share is taken (so the search runs as without
    a limit) and past the deadline from then on: the first candidate is still built and
    simulated, the other three are not, and `cut` says so. Oracle: plan 1 is the first
    candidate's plan, built and simulated directly."""
    spec = tiny()
    deadline = Deadline(at=10.0, seconds=10.0, clock=readings(0.0, 1000.0))
    result = plan_spec(spec, top=4, deadline=deadline)
    assert len(result.search.candidates) == 4
    assert result.cut == "reranked 1 of 4 candidates in the time limit"
    (only,) = result.proposals
    first = result.search.candidates[0]
    assert only.candidate == first
    direct = build_plan(result.model, first.shape, first.assignment, spec_hash=spec_hash(spec))
    assert only.plan.stages == direct.stages and only.plan.pipelines == direct.pipelines
    assert only.simulation.iteration_time == simulate(direct, spec).iteration_time


def test_the_search_gets_its_share_of_what_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """With 10 s left when the search starts, its own limit is SEARCH_SHARE x 10 s and its
    grace to a first candidate GRACE_SHARE x 10 s; so are the listing search's, on a clock
    that stays at 0."""
    seen: list[tuple[float | None, float]] = []
    real = planner.search

    def spy(model: object, options: SearchOptions) -> object:
        seen.append((options.time_limit, options.grace))
        return real(model, options)  # type: ignore[arg-type]

    monkeypatch.setattr(planner, "search", spy)
    plan_spec(tiny(), deadline=Deadline(at=10.0, seconds=10.0, clock=readings(0.0)))
    share = planner.SEARCH_SHARE * 10.0
    assert seen == [(pytest.approx(share), pytest.approx(planner.GRACE_SHARE * 10.0))] * 2


def test_an_expired_budget_leaves_explanations_unexplained_not_infeasible() -> None:
    """Every unused pool of the tiny spec gets UNEXPLAINED under a spent deadline, and a real
    explanation (a plan using it) without one: the message is about time, not feasibility."""
    spec = tiny()
    result = plan_spec(spec)
    spent = Deadline(at=0.0, seconds=8.0, clock=readings(5.0))
    late = explain_unused(result, spec, deadline=spent)
    free = explain_unused(result, spec)
    assert [x.pool for x in late] == [x.pool for x in free] and late
    assert all(x.loss == UNEXPLAINED and x.best_with is None for x in late)
    assert {x.reason for x in late} == {"unexplained"} and all(x.value is None for x in late)
    assert any(x.best_with is not None for x in free)


def test_a_search_stopped_with_no_plan_in_its_part_is_unexplained() -> None:
    """A forced re-plan whose part of the budget is too short to find a plan (a nanosecond
    on a clock that stands still: the search stops at its first check) is reported as
    unexplained, though the same pools have plans without a limit."""
    spec = tiny()
    result = plan_spec(spec)
    short = Deadline(at=1e-9, seconds=8.0, clock=readings(0.0))
    late = explain_unused(result, spec, deadline=short)
    assert late and all(x.loss == UNEXPLAINED for x in late)
    assert any(x.best_with is not None for x in explain_unused(result, spec))


def test_plan_json_states_the_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`hetc plan --json` carries `cut`: null with time to spare; the stated cut when the
    command's deadline (its clock faked) runs out after the search."""
    spec = tmp_path / "tiny.yaml"
    text = TINY.format(objective="max_throughput", constraints="", zero=1, a100=8, v100=8)
    spec.write_text(text, encoding="utf-8")
    runner = CliRunner()
    done = runner.invoke(app, ["plan", str(spec), "--json", "--time-limit", "600"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["cut"] is None
    spent_after_search = Deadline(at=600.0, seconds=600.0, clock=readings(0.0, 1000.0))
    monkeypatch.setattr(cli, "_deadline", lambda *_: spent_after_search)
    done = runner.invoke(app, ["plan", str(spec), "--json", "--time-limit", "600"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["cut"] == "reranked 1 of 4 candidates in the time limit"


def test_a_search_past_its_limit_with_no_candidate_goes_on_to_the_first() -> None:
    """With a limit of 0 s the search stops at its first check with nothing; with a grace it
    goes on to its first candidate and stops there (still by the limit, not complete). The
    planner gives its search that grace (`GRACE_SHARE`)."""
    model = PlanningModel(tiny())
    bare = search(model, SearchOptions(time_limit=0.0))
    assert not bare.candidates and not bare.complete
    graced = search(model, SearchOptions(time_limit=0.0, grace=60.0))
    assert len(graced.candidates) == 1 and not graced.complete
    assert graced.stop_reason == "time limit 0 s reached"
    full = search(model, SearchOptions())
    assert full.complete and full.evaluations > graced.evaluations
