"""`hetc plan`: the table, JSON, exit codes, limits, --explain and the diagnosis."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from hetc.cli import app
from hetc.plan import plan_from_json, plan_problems
from hetc.solver.certificate import MEASURED_GAPS, gap_text
from hetc.solver.report import proven_text
from hetc.solver.search import SearchResult

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
SPEC = """\
version: 1
name: cli-plan
model: {{architecture: {{layers: 4, hidden: 256, heads: 4, ffn: 1024, vocab: 1024,
  max_positions: 256}}}}
training: {{global_batch_size: 16, seq_len: 256, precision: fp16}}
{extra}
zones:
  - name: a
    region: r
    pools:
      - {{device: A100-40GB, quota: 8, gpus_per_node: 4, price: 3.67 USD/h}}
      - {{device: V100-16GB, quota: 8, gpus_per_node: 4, price: 2.86 USD/h}}
"""


def _spec(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(extra=extra))
    return path


def test_plan_prints_a_table_of_ranked_plans(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", str(_spec(tmp_path)), "--top", "2"])
    assert result.exit_code == 0, result.output
    assert "plan 1:" in result.output and "plan 2:" in result.output
    assert "stage  blocks" in result.output and "A100-40GB TP" in result.output
    assert "approximations: none" in result.output
    assert not list(tmp_path.glob("*.json")), "plan writes nothing"


def test_plan_json_carries_valid_plans(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", str(_spec(tmp_path)), "--json", "--top", "2"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["feasible"] and data["complete"]
    objectives = [p["objective"] for p in data["plans"]]
    assert objectives == sorted(objectives)
    for entry in data["plans"]:
        plan = plan_from_json(json.dumps(entry["plan"]))
        assert plan_problems(plan) == []
        assert plan.predictions is not None


def test_infeasible_spec_exits_3_with_a_verified_fix(tmp_path: Path) -> None:
    path = _spec(tmp_path, "constraints: {max_cost_per_iteration: 1e-9 USD}")
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 3
    assert "budget is binding" in result.stderr
    assert "To fix: constraints.max_cost_per_iteration:" in result.stderr
    fixed = result.stderr.split("To fix: constraints.max_cost_per_iteration: ")[1].split()[0]
    again = runner.invoke(
        app, ["plan", str(_spec(tmp_path, f"constraints: {{max_cost_per_iteration: {fixed}}}"))]
    )
    assert again.exit_code == 0, again.output


def test_invalid_spec_exits_1(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("version: 1\nname: x\n")
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 1
    assert "bad.yaml:" in result.output


def test_eval_limit_is_deterministic_and_flagged(tmp_path: Path) -> None:
    path = _spec(tmp_path)
    first = runner.invoke(app, ["plan", str(path), "--eval-limit", "1", "--json"])
    second = runner.invoke(app, ["plan", str(path), "--eval-limit", "1", "--json"])
    assert first.exit_code == second.exit_code == 0, first.output
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert not a["complete"] and "evaluation limit" in a["stop_reason"]
    assert a["plans"] == b["plans"]
    text = runner.invoke(app, ["plan", str(path), "--eval-limit", "1"])
    assert "not proven best: gap at most" in text.stderr
    assert a["gap"] > 0 and a["lower_bound"] <= a["plans"][0]["planner_iteration_time"]


def test_explain_says_why_a_pool_is_unused(tmp_path: Path) -> None:
    """A T4 pool across a slow WAN is left out, and --explain says what using it costs."""
    path = _spec(tmp_path)
    path.write_text(
        path.read_text()
        + "  - name: b\n    region: far\n    pools:\n"
        + "      - {device: T4, quota: 4, gpus_per_node: 4, price: 0.35 USD/h}\n"
    )
    result = runner.invoke(app, ["plan", str(path), "--top", "1", "--explain"])
    assert result.exit_code == 0, result.output
    assert "why not t4@b?" in result.output


def test_unknown_approximation_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", str(_spec(tmp_path)), "--approximations", "h9"])
    assert result.exit_code == 2
    assert "unknown approximation" in result.stderr


def test_bundled_examples_plan(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", str(ROOT / "examples/local-cpu.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["plans"]


def test_progress_line_appears_only_after_a_second() -> None:
    """The line waits for 1 s, then shows best, bound, gap and shapes left, in place."""
    from hetc.solver.certificate import Snapshot
    from hetc.solver.report import ProgressLine

    printed: list[tuple[str, dict[str, object]]] = []
    line = ProgressLine(lambda text="", **kw: printed.append((text, kw)), "max_throughput")

    def at(seconds: float, incumbent: float | None) -> Snapshot:
        return Snapshot(
            evaluations=1234, seconds=seconds, incumbent=incumbent, lower_bound=3.0, shapes_left=7
        )

    line(at(0.5, None))
    assert not printed
    line(at(1.5, None))
    assert printed and "no plan yet" in printed[0][0] and printed[0][1]["err"] is True
    line(at(2.0, 4.0))
    text = printed[-1][0]
    assert text.startswith("\r") and "best 4.00 s," in text
    assert "gap 25.0% over all plans," in text and "within" not in text
    assert "bound 3.00 s," in text and "7 shapes left" in text and printed[-1][1]["nl"] is False
    line.close()
    assert printed[-1][0] == ""


def test_progress_line_shows_both_gaps_under_an_approximation() -> None:
    """Under an approximation the line states the gap within it and the gap over all plans,
    as the final answer does (hand-computed: (4 - 3.5) / 4 and (4 - 3) / 4)."""
    from hetc.solver.certificate import Snapshot
    from hetc.solver.report import ProgressLine

    printed: list[str] = []
    line = ProgressLine(lambda text="", **kw: printed.append(text), "max_throughput")
    line(
        Snapshot(
            evaluations=10,
            seconds=2.0,
            incumbent=4.0,
            lower_bound=3.0,
            shapes_left=1,
            approximations=frozenset({"kind-profiles"}),
            searched_bound=3.5,
        )
    )
    assert "gap 12.5% within kind-profiles; gap 25.0% over all plans," in printed[-1]


def test_cp_sat_cross_check_reports_no_gap_on_a_small_spec(tmp_path: Path) -> None:
    result = runner.invoke(app, ["plan", str(_spec(tmp_path)), "--solver", "cp-sat", "--json"])
    assert result.exit_code == 0, result.output
    checked = json.loads(result.stdout)["cross_check"]
    assert checked["cp_sat"] is not None
    assert abs(checked["gap"]) <= 1e-9


def test_bad_solver_and_missing_spec_are_clear_errors(tmp_path: Path) -> None:
    bad = runner.invoke(app, ["plan", str(_spec(tmp_path)), "--solver", "glpk"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert "search" in bad.stderr and "cp-sat" in bad.stderr
    missing = runner.invoke(app, ["plan", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 4 and "To fix:" in missing.stderr
    assert "Traceback" not in missing.output


def test_plan_under_an_approximation_states_both_gaps_and_its_measured_gap(
    tmp_path: Path,
) -> None:
    """Under kind-profiles: the JSON carries the gap within it and over all plans (the first
    no larger, its bound no lower), and the text declares the approximation with the
    measured gap of `certificate.MEASURED_GAPS` and names what each gap is within."""
    path = _spec(tmp_path)
    args = ["plan", str(path), "--approximations", "kind-profiles", "--eval-limit", "2"]
    data = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert data["gap"] is not None and data["gap_all_plans"] is not None
    assert data["gap"] <= data["gap_all_plans"]
    assert data["lower_bound"] >= data["lower_bound_all_plans"]
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    measured = gap_text(MEASURED_GAPS["kind-profiles"].p95)
    assert (
        f"approximations: kind-profiles (on bench/spec_family: p95 {measured} from exact)"
        in text.stdout
    )
    proven = proven_text(
        replace(
            SEARCH_SHAPE,
            gap=data["gap"],
            gap_all_plans=data["gap_all_plans"],
            lower_bound=data["lower_bound"],
            lower_bound_all_plans=data["lower_bound_all_plans"],
        ),
        frozenset({"kind-profiles"}),
    )
    assert proven in text.stdout
    assert f"{gap_text(data['gap_all_plans'])} over all plans" in proven


def test_proven_text_names_what_each_gap_is_within() -> None:
    """Proven best over all plans; proven best within an approximation only; a gap within
    it and one over all plans; without approximations, one gap."""
    within = frozenset({"kind-profiles"})
    assert proven_text(replace(SEARCH_SHAPE, gap=0.0, gap_all_plans=0.0), within) == (
        "proven best (gap 0)"
    )
    assert proven_text(replace(SEARCH_SHAPE, gap=0.0, gap_all_plans=0.5), within) == (
        "proven best within kind-profiles (gap 0); gap at most 50.0% over all plans"
    )
    assert proven_text(replace(SEARCH_SHAPE, gap=0.1, gap_all_plans=0.5), within) == (
        "not proven best: gap at most 10.0% within kind-profiles; gap at most 50.0% over all plans"
    )
    assert proven_text(replace(SEARCH_SHAPE, gap=0.1, gap_all_plans=0.1), frozenset()) == (
        "not proven best: gap at most 10.0% over all plans (the planner estimate vs the"
        " search's lower bound)"
    )


SEARCH_SHAPE = SearchResult(
    candidates=(),
    evaluations=0,
    complete=False,
    seconds=0.0,
    lower_bound=0.0,
    gap=None,
    lower_bound_all_plans=0.0,
    gap_all_plans=None,
)


def test_search_snapshots_carry_the_bound_within_the_approximation() -> None:
    """A search under `kind-profiles` reports its approximations and a bound within them
    that its incumbent never beats; an exact search reports none (one gap)."""
    from oracles.instances import random_instance

    from hetc.costmodel.planning import PlanningModel
    from hetc.schema import check_text
    from hetc.solver.certificate import Snapshot
    from hetc.solver.search import SearchOptions, search

    checked = check_text(random_instance(3), "progress.yaml")
    assert checked.spec is not None
    model = PlanningModel(checked.spec)
    for approximations in (frozenset({"kind-profiles"}), frozenset()):
        seen: list[Snapshot] = []
        search(
            model,
            SearchOptions(approximations=approximations, progress=seen.append, progress_every=0.0),
        )
        assert seen
        for now in seen:
            assert now.approximations == approximations
            if approximations:
                assert now.searched_bound is not None
                assert now.incumbent is None or now.searched_bound <= now.incumbent
            else:
                assert now.searched_bound is None and now.gap_within == now.gap
