"""One command's budget (`hetc.solver.budget`) and how the planner spends it: work units that
decide the answer, the same on any machine and at any load; a wall clock that may only cut a
step short and says so; the search's share, the listing's share of the search's own work,
the reranking cut once the work is spent (plan 1 always built, the cut stated), and
`--explain` taking what plan 1 leaves without changing plan 1.

Load is simulated, never waited for: a clock that jumps a minute at every reading stands for
a machine many times slower, and under a work budget it must change nothing. Mutation checks
(done by hand): the search's work check removed from `Incumbent.check_limits` fails
`test_a_work_budget_answers_the_same_on_a_slowed_clock` (the search then runs to the end);
`rerank` without its check of the work left fails
`test_work_spent_after_the_search_cuts_the_reranking`."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_solver_planner import TINY, tiny
from typer.testing import CliRunner

from hetc.cli import app
from hetc.costmodel.planning import PlanningModel
from hetc.schema import check_file
from hetc.solver import planner
from hetc.solver.budget import (
    DEFAULT_WORK,
    EVENT_WORK,
    PLAN_WORK,
    RANK_WORK,
    SAFETY_CAP,
    Budget,
    build_work,
    command_budget,
)
from hetc.solver.deadline import Deadline
from hetc.solver.explain import UNEXPLAINED, explain_unused
from hetc.solver.planner import plan_spec
from hetc.solver.search import SearchOptions, search
from hetc.solver.search import incumbent as incumbent_module

ROOT = Path(__file__).resolve().parent.parent


def readings(*values: float) -> Callable[[], float]:
    """A clock returning `values` in turn, then the last one for ever."""
    it: Iterator[float] = iter(values)
    last = [values[-1]]

    def clock() -> float:
        last[0] = next(it, last[0])
        return last[0]

    return clock


def test_parts_charge_their_whole_and_take_a_share_of_what_is_left() -> None:
    """Hand-counted: of 1,000 units, a half part holds 500; charging it 300 leaves 700 in the
    whole and 200 in the part; a part capped at 50 holds 50; a part of an unlimited budget is
    unlimited, or `most` where given."""
    whole = Budget(work=1_000)
    half = whole.part(0.5)
    assert half.work == 500 and half.left() == 500
    half.charge(300)
    assert (whole.spent, whole.left(), half.left()) == (300, 700, 200)
    assert whole.part(1.0, most=50).work == 50
    assert Budget().part(0.5).left() is None and Budget().part(0.5, most=7).work == 7
    assert whole.fits(700) and not whole.fits(701) and Budget().fits(10**18)
    assert half.root() is whole and not whole.exhausted()
    half.charge(700)
    assert whole.left() == 0 and whole.exhausted() and half.exhausted()


def test_a_clock_part_keeps_the_work_and_shares_only_a_callers_clock() -> None:
    """`clock_part` (what `hetc compile` plans with): the whole of the work, a share of a
    `--time-limit` clock, the safety cap whole."""
    limit = Budget(work=None, clock=Deadline(at=10.0, seconds=10.0, clock=readings(0.0)))
    part = limit.clock_part(0.75)
    assert part.work is None and part.clock is not None and part.clock.at == pytest.approx(7.5)
    cap = Deadline(at=60.0, seconds=60.0, clock=readings(0.0))
    capped = Budget(work=800, clock=cap, capped=True)
    capped.charge(100)
    kept = capped.clock_part(0.75)
    assert kept.work == 700 and kept.clock is cap and kept.capped


def test_build_work_is_its_formula() -> None:
    """Against the formula: a fixed part, one per rank (TP ranks of every replica) and one
    per (pipeline, stage, microbatch)."""
    spec = tiny()
    result = plan_spec(spec, top=1)
    plan = result.proposals[0].plan
    ranks = sum(r.tp for stage in plan.stages for r in stage.replicas)
    events = sum(len(plan.stages) * p.microbatches for p in plan.pipelines)
    assert build_work(plan) == PLAN_WORK + RANK_WORK * ranks + EVENT_WORK * events


def test_command_budget_follows_the_flags() -> None:
    """Default: DEFAULT_WORK behind the safety cap; --work-limit: its units behind the cap;
    --time-limit S: S wall seconds and no work limit; --time-limit 0: the work alone, no
    cap; --exact: nothing at all."""
    default = command_budget(started=100.0)
    assert default.work == DEFAULT_WORK and default.capped and default.clock is not None
    assert default.clock.at == 100.0 + SAFETY_CAP
    assert command_budget(work_limit=5, started=0.0).work == 5
    timed = command_budget(time_limit=3.0, started=10.0)
    assert timed.work is None and not timed.capped and timed.clock is not None
    assert timed.clock.at == 13.0
    uncapped = command_budget(time_limit=0.0)
    assert uncapped.work == DEFAULT_WORK and uncapped.clock is None
    exact = command_budget(exact=True)
    assert exact.work is None and exact.clock is None


def test_stop_words_name_the_flag_that_restores_determinism() -> None:
    """A stop by work names --work-limit and says the answer is the same on any machine; by
    the safety cap, that the answer depends on the machine and --time-limit 0 lifts the cap;
    by a --time-limit, that the answer depends on the machine and the work budget decides
    without it; other stops keep their own words (empty here)."""
    cap = Budget(work=10, clock=Deadline(at=60.0, seconds=60.0), capped=True)
    assert "--work-limit" in cap.part(0.5).stop_words("work", 4)
    assert "10 units" in cap.part(0.5).stop_words("work", 4)
    words = cap.stop_words("cap", 4)
    assert "depends on the machine" in words and "--time-limit 0" in words
    timed = Budget(clock=Deadline(at=5.0, seconds=5.0))
    assert "without --time-limit the work budget decides" in timed.stop_words("time", 1)
    assert cap.stop_words("evaluations", 1) == "" and cap.stop_words("interrupted", 1) == ""


def _slowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every clock reading of the search and the planner a minute after the one before: a
    machine loaded beyond any real load."""
    now = [time.perf_counter()]

    def clock() -> float:
        now[0] += 60.0
        return now[0]

    monkeypatch.setattr(incumbent_module.time, "perf_counter", clock)
    monkeypatch.setattr(planner.time, "perf_counter", clock)


def _answer(result: planner.PlanningResult) -> list[tuple[object, ...]]:
    return [(p.candidate.key(), p.simulation.iteration_time) for p in result.proposals]


@pytest.mark.parametrize("units", [20_000, 200_000, 2_000_000])
def test_a_work_budget_answers_the_same_on_a_slowed_clock(
    units: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same spec under the same work budget (no clock) gives the same ranked plans, the
    same search (evaluations, work, stop) whether the clock runs normally or a minute per
    reading. Oracle: the normal run. At the smallest budget the search is cut (so the test
    would see a clock deciding where it stops)."""
    spec = tiny(a100=16, v100=16)
    normal = plan_spec(spec, top=3, budget=Budget(work=units))
    _slowed(monkeypatch)
    slow = plan_spec(spec, top=3, budget=Budget(work=units))
    assert _answer(slow) == _answer(normal)
    assert (slow.search.evaluations, slow.search.work, slow.search.stop_reason) == (
        normal.search.evaluations,
        normal.search.work,
        normal.search.stop_reason,
    )
    if units == 20_000:
        assert not normal.search.complete and normal.search.stopped_by == "work"


def test_the_safety_cap_stops_a_slowed_search_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Behind a work budget, the safety cap (a clock) stops the search on a machine slowed
    beyond it, and the stop says that the clock decided and how to lift it."""
    _slowed(monkeypatch)
    spec = tiny(a100=16, v100=16)
    cap = Deadline.after(SAFETY_CAP, clock=planner.time.perf_counter)
    result = plan_spec(spec, budget=Budget(work=DEFAULT_WORK, clock=cap, capped=True))
    assert result.search.stopped_by == "cap" and not result.search.complete
    assert "safety cap" in result.search.stop_reason and "--time-limit 0" in (
        result.search.stop_reason
    )


def test_the_search_and_the_listing_get_their_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    """Of 10,000,000 units, the first search may spend SEARCH_SHARE and go on to a first
    candidate for GRACE_SHARE of them; the listing at most LIST_SHARE times what the first
    spent or LIST_FLOOR, within what is left."""
    seen: list[SearchOptions] = []
    results = []
    real = planner.search

    def spy(model: PlanningModel, options: SearchOptions) -> object:
        seen.append(options)
        found = real(model, options)
        results.append(found)
        return found

    monkeypatch.setattr(planner, "search", spy)
    plan_spec(tiny(), budget=Budget(work=10_000_000))
    first, listing = seen
    assert first.work_limit == int(planner.SEARCH_SHARE * 10_000_000)
    assert first.work_grace == int(planner.GRACE_SHARE * 10_000_000)
    spent = results[0].work
    most = max(math.ceil(planner.LIST_SHARE * spent), planner.LIST_FLOOR)
    assert listing.work_limit == min(most, 10_000_000 - spent)


def test_work_spent_after_the_search_cuts_the_reranking(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan that costs more than the whole budget to build: plan 1 is still built and
    simulated, the other candidates are not, and `cut` says the work budget cut them.
    Oracle: plan 1 is the search's first candidate."""
    monkeypatch.setattr(planner, "build_work", lambda plan: 10**12)
    result = plan_spec(tiny(), top=4, budget=Budget(work=10_000_000))
    assert len(result.search.candidates) == 4
    assert result.cut == "reranked 1 of 4 candidates in the work budget"
    (only,) = result.proposals
    assert only.candidate == result.search.candidates[0]


def test_a_spent_budget_leaves_explanations_unexplained_not_infeasible() -> None:
    """Every unused pool gets UNEXPLAINED under a spent budget, and a real explanation
    without one: the message is about the budget, not feasibility."""
    spec = tiny()
    result = plan_spec(spec)
    spent = Budget(work=10)
    spent.charge(10)
    late = explain_unused(result, spec, budget=spent)
    free = explain_unused(result, spec)
    assert [x.pool for x in late] == [x.pool for x in free] and late
    assert all(x.loss == UNEXPLAINED and x.best_with is None for x in late)
    assert any(x.best_with is not None for x in free)


def test_explain_and_top_change_neither_plan_1_nor_its_runners_up(tmp_path: Path) -> None:
    """`hetc plan --json` with the default budget: the ranked plans are the same with and
    without --explain (which spends what plan 1 leaves), and --top 1 shows the first of
    --top 3's; `hetc compile` writes the same plan 1."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(
        TINY.format(objective="max_throughput", constraints="", zero=1, a100=8, v100=8),
        encoding="utf-8",
    )
    runner = CliRunner()
    plans = []
    for extra in ([], ["--explain"], ["--top", "1"]):
        done = runner.invoke(app, ["plan", str(spec), "--json", *extra])
        assert done.exit_code == 0, done.output
        plans.append([entry["plan"] for entry in json.loads(done.stdout)["plans"]])
    assert plans[0] == plans[1] and plans[2] == plans[0][:1]
    out = tmp_path / "out"
    done = runner.invoke(app, ["compile", str(spec), "-o", str(out)])
    assert done.exit_code == 0, done.output
    written = json.loads((out / "plan.json").read_text())
    assert written["stages"] == plans[0][0]["stages"]
    assert written["pipelines"] == plans[0][0]["pipelines"]


def test_a_search_past_its_work_with_no_candidate_goes_on_to_the_first() -> None:
    """With no work allowed the search stops at its first check with nothing; with a grace
    it goes on to its first candidate and stops there (by the work, not complete)."""
    model = PlanningModel(tiny())
    bare = search(model, SearchOptions(work_limit=0))
    assert not bare.candidates and not bare.complete and bare.stopped_by == "work"
    graced = search(model, SearchOptions(work_limit=0, work_grace=10**9))
    assert graced.candidates and not graced.complete and graced.stopped_by == "work"
    full = search(model, SearchOptions())
    assert full.complete and full.work > graced.work


def test_every_bundled_example_answers_the_same_twice() -> None:
    """Each bundled example planned twice with the default work budget gives the same plans
    and the same search (the cheap in-process check; bench/determinism.py compiles in fresh
    processes, on a quiet and a loaded machine)."""
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        if path.name == "internet-scale.yaml":
            continue
        spec = check_file(str(path)).spec
        assert spec is not None
        first = plan_spec(spec, top=3, budget=Budget(work=DEFAULT_WORK))
        second = plan_spec(spec, top=3, budget=Budget(work=DEFAULT_WORK))
        assert _answer(first) == _answer(second), path.name
        assert first.search.work == second.search.work, path.name
