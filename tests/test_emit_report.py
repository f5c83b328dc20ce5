"""report.md and timeline.svg against oracles computed here from the Simulation and the Plan:
the numbers are parsed back out of the rendered files (Markdown through markdown-it, the SVG
through ElementTree) and compared at the printed precision; mutation checks show the
checkers catch a swapped row, a wrong scale and a missing escape."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

import hetc.emit.report as report
from hetc.costmodel.cost import IterationCost
from hetc.costmodel.memory import GIB
from hetc.costmodel.schedule import PipelineTimes, Timeline, simulate_1f1b
from hetc.costmodel.simulate import Simulation
from hetc.emit.report import report_markdown, timeline_svg
from hetc.plan import Node, Pipeline, Plan, Replica, Stage
from hetc.schema import check_file
from hetc.schema.spec import Spec
from hetc.solver.certificate import gap_text
from hetc.solver.planner import PlanningResult, plan_spec

ROOT = Path(__file__).resolve().parent.parent
SVG = "{http://www.w3.org/2000/svg}"
NASTY = 'a<b & "c" $(touch x) `y` ü|z'

# Two custom device types in one zone whose memory forces two stages: the best plan is
# 2 stages x 2 pipelines (SLOW TP4 then FAST TP2), found in well under a second.
MIXED = """\
version: 1
name: {name}
model:
  architecture: {{layers: 8, hidden: 256, heads: 4, ffn: 1024, vocab: 4096, max_positions: 256}}
training: {{global_batch_size: 16, seq_len: 128, precision: fp32{tokens}}}
{extra}
devices:
  - {{name: {fast}, kind: cpu, memory: 1.1GiB, peak_tflops: {{fp32: 0.2}},
     memory_bandwidth: 40GB/s, intra_node: {{kind: shared-memory, bandwidth: 10GB/s}},
     price: 2 USD/h}}
  - {{name: SLOW, kind: cpu, memory: 1.1GiB, peak_tflops: {{fp32: 0.12}},
     memory_bandwidth: 20GB/s, intra_node: {{kind: shared-memory, bandwidth: 5GB/s}},
     price: 0.5 USD/h}}
zones:
  - name: {zone}
    region: r1
    pools:
      - {{name: {pool}, device: {fast}, quota: 4, gpus_per_node: 2}}
      - {{device: SLOW, quota: 8, gpus_per_node: 4}}
"""


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _spec(tmp: Path, file: str = "spec.yaml", **fields: str) -> Spec:
    values = {
        "name": "mixed",
        "tokens": ", tokens: 1e8",
        "extra": "",
        "fast": "FAST",
        "zone": "a",
        "pool": "fast",
        **fields,
    }
    path = tmp / file
    path.write_text(MIXED.format(**values), encoding="utf-8")
    checked = check_file(str(path))
    assert checked.spec is not None, [d.format() for d in checked.diagnostics]
    return checked.spec


def _example(name: str) -> Spec:
    path = ROOT / "examples" / name
    checked = check_file(str(path))
    assert checked.spec is not None
    return checked.spec


@dataclass(frozen=True)
class Case:
    spec: Spec
    result: PlanningResult

    @property
    def md(self) -> str:
        return report_markdown(self.spec, self.result, spec_path_name="spec.yaml")

    @property
    def svg(self) -> str:
        best = self.result.proposals[0]
        return timeline_svg(best.plan, best.simulation)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("report")


@pytest.fixture(scope="module")
def mixed(tmp: Path) -> Case:
    spec = _spec(tmp)
    return Case(spec, plan_spec(spec, top=3))


@pytest.fixture(scope="module")
def local() -> Case:
    spec = _example("local-cpu.yaml")
    return Case(spec, plan_spec(spec, top=3))


@pytest.fixture(scope="module")
def many() -> Case:
    """48 ranks in many pipelines (24 or 48, as the cost model chooses)."""
    spec = _example("local-cpu.yaml")
    zone = replace(
        spec.zones[0], pools=(replace(spec.zones[0].pools[0], quota=48, gpus_per_node=8),)
    )
    spec = replace(spec, zones=(zone,), training=replace(spec.training, global_batch_size=96))
    return Case(spec, plan_spec(spec, top=3))


@pytest.fixture(scope="module")
def nasty(tmp: Path) -> Case:
    spec = _spec(
        tmp,
        "nasty.yaml",
        name=_quoted(NASTY),
        fast=_quoted("F<A>ST & `q` |ü $(id)"),
        zone=_quoted("zo<ne> & 'x' |1"),
        pool=_quoted('p|o<o>l & "x" `b`'),
    )
    return Case(spec, plan_spec(spec, top=3))


# -- Markdown parsing ------------------------------------------------------------------------

_MARKDOWN = MarkdownIt("commonmark").enable("table")


TEXT = frozenset({"text", "softbreak"})


def _inline_text(token: Any, allowed: frozenset[str] = TEXT) -> str:
    """The literal text of an inline token. In a table cell or the title anything but text
    (emphasis, code, HTML, links) means a user string leaked Markdown syntax; the template's
    own prose may use bold and code spans (`allowed`)."""
    children = token.children or ()
    kinds = {child.type for child in children}
    assert kinds <= allowed, (kinds, token.content)
    return "".join(" " if c.type == "softbreak" else c.content for c in children)


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]

    def column(self, name: str) -> list[str]:
        index = self.header.index(name)
        return [row[index] for row in self.rows]

    def by_first(self) -> dict[str, list[str]]:
        return {row[0]: row for row in self.rows}


def _tables(md: str) -> dict[str, Table]:
    """Every table by its header's first two cells (e.g. "rank|device")."""
    tables: dict[str, Table] = {}
    current: list[list[str]] = []
    row: list[str] = []
    in_cell = False
    for token in _MARKDOWN.parse(md):
        if token.type == "table_open":
            current = []
        elif token.type == "tr_open":
            row = []
        elif token.type in ("th_open", "td_open", "th_close", "td_close"):
            in_cell = token.type.endswith("_open")
        elif token.type == "inline" and in_cell:
            row.append(_inline_text(token))
        elif token.type == "tr_close":
            current.append(row)
        elif token.type == "table_close":
            header, *body = current
            key = "|".join(header[:2])
            assert key not in tables, key
            for cells in body:
                assert len(cells) == len(header), (header, cells)
            tables[key] = Table(header, body)
    return tables


PROSE = TEXT | {"strong_open", "strong_close", "code_inline", "image"}


def _paragraphs(md: str) -> list[str]:
    """The text of each heading, paragraph and list item, in order; the first is the title,
    which is held to plain text."""
    tokens = _MARKDOWN.parse(md)
    blocks = [
        t
        for i, t in enumerate(tokens)
        if t.type == "inline" and i and tokens[i - 1].type in ("paragraph_open", "heading_open")
    ]
    return [_inline_text(t, TEXT if i == 0 else PROSE) for i, t in enumerate(blocks)]


def _number(text: str) -> float:
    match = re.search(r"[-+]?\d[\d.]*(?:e[-+]?\d+)?", text)
    assert match, text
    return float(match.group())


def _close(printed: float, exact: float, *, digits: int = 6) -> bool:
    """`printed` is `exact` printed with `digits` significant digits (%.6g)."""
    return math.isclose(printed, exact, rel_tol=0.51 * 10 ** (1 - digits), abs_tol=1e-300)


# -- report.md -------------------------------------------------------------------------------


def test_headline_numbers_are_the_simulations(mixed: Case) -> None:
    sim = mixed.result.proposals[0].simulation
    perf = _tables(mixed.md)["quantity|value"]
    rows = {name: [r[1] for r in perf.rows if r[0] == name] for name, _ in perf.rows}
    assert _close(_number(rows["iteration time, event simulator"][0]), sim.iteration_time)
    closed = rows["iteration time, closed form"][0]
    assert _close(_number(closed), sim.closed_form_time)
    delta = float(re.search(r"\(([-+][\d.]+)% vs", closed).group(1))  # type: ignore[union-attr]
    assert abs(delta - 100 * (sim.closed_form_time / sim.iteration_time - 1)) <= 0.0051
    estimate = mixed.result.proposals[0].candidate.estimate.iteration_time
    assert _close(
        _number(rows["iteration time, planning model (what the search ranked)"][0]), estimate
    )
    samples, tokens = rows["throughput"]
    assert _close(_number(samples), 16 / sim.iteration_time) and "samples/s" in samples
    assert _close(_number(tokens), 16 * 128 / sim.iteration_time) and "tokens/s" in tokens
    achieved = rows["achieved compute"][0]
    assert _close(_number(achieved), sim.achieved_flops / 1e12)
    assert _close(_number(achieved.split(" of ")[1]), sim.peak_flops / 1e12)
    assert abs(_number(rows["MFU"][0]) - 100 * sim.achieved_flops / sim.peak_flops) <= 0.0051

    costs = _tables(mixed.md)["USD|value"].by_first()
    assert _close(_number(costs["compute per iteration"][1]), sim.cost.compute)
    assert _close(_number(costs["egress per iteration"][1]), sim.cost.egress)
    assert _close(_number(costs["total per iteration"][1]), sim.cost.compute + sim.cost.egress)
    per_million = (sim.cost.compute + sim.cost.egress) / (16 * 128) * 1e6
    assert _close(_number(costs["per 1M tokens"][1]), per_million)


def test_token_budget_is_given_or_said_to_be_missing(mixed: Case, local: Case) -> None:
    sim = mixed.result.proposals[0].simulation
    (budget,) = [p for p in _paragraphs(mixed.md) if p.startswith("Token budget")]
    iterations = 1e8 / (16 * 128)
    seconds, usd = re.search(r": (\S+) s \(([\d.]+) days\) and (\S+) USD", budget).group(1, 3)  # type: ignore[union-attr]
    assert _close(float(seconds), iterations * sim.iteration_time)
    assert _close(float(usd), iterations * sim.cost.total)
    assert local.spec.training.tokens is None
    assert "Token budget: training.tokens is not set" in local.md


def test_memory_table_is_every_rank_with_its_headroom(mixed: Case) -> None:
    sim = mixed.result.proposals[0].simulation
    table = _tables(mixed.md)["rank|device"]
    assert [r[0] for r in table.rows] == [r.key for r in sim.ranks]
    _check_memory_rows(table, sim)


def _check_memory_rows(table: Table, sim: Simulation) -> None:
    ranks = {r.key: r for r in sim.ranks}
    for row in table.rows:
        cells = dict(zip(table.header, row, strict=True))
        r = ranks[cells["rank"]]
        assert (cells["device"], int(cells["stage"]), int(cells["replica"])) == (
            r.device,
            r.stage,
            r.replica,
        )
        assert int(cells["TP rank"]) == r.tp_rank
        total, capacity = float(cells["total GiB"]), float(cells["capacity GiB"])
        headroom = float(cells["headroom GiB"])
        assert abs(total - r.memory.total / GIB) <= 0.005
        assert abs(capacity - r.capacity / GIB) <= 0.005
        assert abs(headroom - (capacity - total)) <= 0.0101
        assert abs(headroom - (r.capacity - r.memory.total) / GIB) <= 0.005
        share = 100 * (r.capacity - r.memory.total) / r.capacity
        assert abs(_number(cells["headroom"]) - share) <= 0.051
        assert abs(_number(cells["busy"]) - 100 * r.busy_fraction) <= 0.051


def test_memory_check_catches_swapped_rows(mixed: Case) -> None:
    """Mutation: two ranks of different stages with their numbers swapped must fail."""
    sim = mixed.result.proposals[0].simulation
    table = _tables(mixed.md)["rank|device"]
    first, last = table.rows[0], table.rows[-1]
    assert first[5:] != last[5:], "the mutation needs two rows that differ"
    swapped = [[*first[:5], *last[5:]], *table.rows[1:-1], [*last[:5], *first[5:]]]
    with pytest.raises(AssertionError):
        _check_memory_rows(Table(table.header, swapped), sim)


def test_many_ranks_collapse_into_counted_groups(many: Case) -> None:
    sim = many.result.proposals[0].simulation
    assert len(sim.ranks) > 32
    assert "grouped into one row (more than 32 ranks)" in many.md
    table = _tables(many.md)["ranks|first"]
    expected = Counter((r.device, r.stage, tuple(r.memory.terms().values())) for r in sim.ranks)
    assert sum(int(r[0]) for r in table.rows) == len(sim.ranks)
    assert len(table.rows) == len(expected)
    ranks = {r.key: r for r in sim.ranks}
    for row in table.rows:
        cells = dict(zip(table.header, row, strict=True))
        r = ranks[cells["first"]]
        assert int(cells["ranks"]) == expected[r.device, r.stage, tuple(r.memory.terms().values())]
        headroom = float(cells["headroom GiB"])
        assert abs(headroom - (float(cells["capacity GiB"]) - float(cells["total GiB"]))) <= 0.0101
        assert abs(headroom - (r.capacity - r.memory.total) / GIB) <= 0.005


def test_plan_stages_nodes_and_batch_shares(mixed: Case) -> None:
    plan = mixed.result.proposals[0].plan
    timeline = mixed.result.proposals[0].simulation.timeline
    tables = _tables(mixed.md)
    stages = tables["stage|blocks"]
    assert len(stages.rows) == len(plan.stages) == 2
    nodes = {n.id: n for n in plan.nodes}
    for row, stage in zip(stages.rows, plan.stages, strict=True):
        assert row[1].startswith(f"[{stage.first_block}, {stage.end_block})")
        counts = re.findall(r"(\d+) x (\S+) TP(\d+) @ (\S+)", row[2])
        got = Counter({(d, int(tp), z): int(n) for n, d, tp, z in counts})
        assert got == Counter((r.device, r.tp, nodes[r.node].zone) for r in stage.replicas)
    rented = tables["pool|zone"]
    per_pool = Counter((n.pool, n.zone) for n in plan.nodes)
    assert {(r[0], r[1]): int(r[3]) for r in rented.rows} == per_pool
    prices = {(z.name, p.name): p.price for z in mixed.spec.zones for p in z.pools}
    for row in rented.rows:
        devices = per_pool[row[0], row[1]] * int(row[4])
        assert _close(float(row[6]), devices * prices[row[1], row[0]] * 3600)

    shares = tables["pipeline|path (stage 0 -> last)"]
    assert [r[0] for r in shares.rows] == [f"p{p}" for p in range(len(plan.pipelines))]
    samples = 0
    for p, row in enumerate(shares.rows):
        m = plan.pipelines[p].microbatches
        assert int(row[2]) == m and int(row[3]) == m * plan.microbatch_size
        samples += int(row[3])
        done = max(
            i.end for s in range(len(plan.stages)) for i in timeline.busy[p, s] if i.what[0] in "FB"
        )
        assert _close(float(row[5]), done)
    assert samples == mixed.spec.training.global_batch_size


def test_many_pipelines_share_the_batch_in_counted_groups(many: Case) -> None:
    """Plan 2 of `many` (48 pipelines) reported as if chosen: the shares table groups."""
    result = replace(many.result, proposals=many.result.proposals[1:])
    plan = result.proposals[0].plan
    assert len(plan.pipelines) > 32
    md = report_markdown(many.spec, result, spec_path_name="spec.yaml")
    table = _tables(md)["pipelines|first"]
    expected = Counter(p.microbatches for p in plan.pipelines)
    got: Counter[int] = Counter()
    for row in table.rows:
        got[int(row[3])] += int(row[0])
        assert int(row[4]) == int(row[3]) * plan.microbatch_size
    assert got == expected
    assert sum(int(r[0]) * int(r[4]) for r in table.rows) == plan.global_batch_size


def test_alternatives_lose_by_value_over_best(mixed: Case, many: Case) -> None:
    """ "Loses by" is the simulator's iteration time over plan 1's (the number the plans are
    ranked and printed by), the planning model's comparison beside it; rows in rank order."""
    for case in (mixed, many):
        proposals = case.result.proposals
        assert len(proposals) == 3
        table = _tables(case.md)["plan|shape"]
        assert [r[0] for r in table.rows] == ["2", "3"]
        best = proposals[0]
        for row, p in zip(table.rows, proposals[1:], strict=True):
            simulated = p.simulation.iteration_time / best.simulation.iteration_time - 1
            assert abs(_number(row[5]) - 100 * simulated) <= 0.0501
            loss = 100 * (p.candidate.value / best.candidate.value - 1)
            assert abs(_number(row[6]) - loss) <= 0.0501
            assert _close(float(row[3]), p.simulation.iteration_time)
            assert _close(float(row[4]), p.simulation.cost.total)
            assert row[1].startswith(f"{len(p.plan.stages)} stage")


def test_min_cost_ranks_by_cost_and_reports_constraints(tmp: Path) -> None:
    spec = _spec(
        tmp,
        "cost.yaml",
        extra="objective: min_cost\nconstraints: {max_gpus: 12, max_cost_per_iteration: 0.01 USD}",
    )
    result = plan_spec(spec, top=3)
    md = report_markdown(spec, result, spec_path_name="cost.yaml")
    best = result.proposals[0]
    rents = sum(n.devices for n in best.plan.nodes)
    constraints = _facts(md)["Constraints"]
    assert f"max_gpus 12 (plan 1 rents {rents})" in constraints
    simulated = (
        f"max_cost_per_iteration 0.01 USD (plan 1 simulates {best.simulation.cost.total:.6g})"
    )
    assert simulated in constraints
    assert "Ranked by the event simulator's USD per iteration" in md
    table = _tables(md)["plan|shape"]
    for row, p in zip(table.rows, result.proposals[1:], strict=True):
        assert p.candidate.value == p.candidate.estimate.cost
        simulated = p.simulation.cost.total / best.simulation.cost.total - 1
        assert abs(_number(row[5]) - 100 * simulated) <= 0.0501
        assert abs(_number(row[6]) - 100 * (p.candidate.value / best.candidate.value - 1)) <= 0.0501


def test_a_free_cheapest_plan_does_not_divide_by_zero() -> None:
    spec = replace(_example("local-cpu.yaml"), objective="min_cost")
    result = plan_spec(spec, top=2)
    assert result.proposals[0].candidate.value == 0
    table = _tables(report_markdown(spec, result, spec_path_name="x.yaml"))["plan|shape"]
    assert table.rows[0][5] == "0.0%"


def _facts(md: str) -> dict[str, str]:
    return dict(p.split(": ", 1) for p in _paragraphs(md) if p.split(":")[0] in FACTS)


FACTS = ("Objective", "Constraints", "Search", "Approximations", "Proven best", "Proven gap")


def test_header_says_how_the_plan_was_found(local: Case) -> None:
    facts = _facts(local.md)
    assert list(facts) == list(FACTS)
    assert facts["Objective"].startswith("max_throughput")
    assert facts["Constraints"] == "none given"
    evaluations = local.result.search.evaluations
    assert facts["Search"] == f"{evaluations:,} candidates scored; the search ran to completion"
    assert facts["Proven best"].startswith("yes") and facts["Approximations"].startswith("none")
    assert facts["Proven gap"] == "at most 0% from the best of all plans"
    assert "spec.yaml" in _paragraphs(local.md)[1]
    assert "![pipeline timeline](timeline.svg)" in local.md
    stopped = plan_spec(local.spec, top=3, eval_limit=3)
    assert not stopped.search.complete
    facts = _facts(report_markdown(local.spec, stopped, spec_path_name="spec.yaml"))
    assert facts["Proven best"].startswith("no: the search stopped early")
    approximate = plan_spec(local.spec, top=1, approximations=frozenset({"kind-profiles"}))
    md = report_markdown(local.spec, approximate, spec_path_name="spec.yaml")
    facts = _facts(md)
    assert facts["Proven best"].startswith("no: best within the approximations")
    assert facts["Approximations"].startswith("kind-profiles (every stage runs one pool")
    search = approximate.search
    assert facts["Proven gap"] == (
        f"at most {gap_text(search.gap)} from the best plan within kind-profiles;"
        f" at most {gap_text(search.gap_all_plans)} from the best of all plans"
    )
    assert "No alternative was kept (1 proposal)" in md


def test_report_is_deterministic_without_timings(local: Case) -> None:
    """A second search (with its own timing) gives the same bytes: no seconds, no dates."""
    again = plan_spec(local.spec, top=3)
    assert report_markdown(local.spec, again, spec_path_name="spec.yaml") == local.md
    assert not re.search(r"\d{4}-\d{2}-\d{2}", local.md)


def test_output_is_identical_across_processes_and_hash_seeds(tmp: Path, nasty: Case) -> None:
    code = (
        "import sys\n"
        "from hetc.schema import check_file\n"
        "from hetc.solver.planner import plan_spec\n"
        "from hetc.emit.report import report_markdown, timeline_svg\n"
        f"spec = check_file({str(tmp / 'nasty.yaml')!r}).spec\n"
        "r = plan_spec(spec, top=3)\n"
        "p = r.proposals[0]\n"
        "sys.stdout.buffer.write((report_markdown(spec, r, spec_path_name='n.yaml')"
        " + timeline_svg(p.plan, p.simulation)).encode())\n"
    )
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outputs.append(
            subprocess.run(
                [sys.executable, "-c", code], env=env, check=True, capture_output=True
            ).stdout
        )
    assert outputs[0] == outputs[1] and outputs[0]


def test_no_proposal_is_an_error(local: Case) -> None:
    with pytest.raises(ValueError, match="no proposal"):
        report_markdown(local.spec, replace(local.result, proposals=()), spec_path_name="x")


# -- escaping --------------------------------------------------------------------------------


def test_markdown_keeps_nasty_names_literal(nasty: Case) -> None:
    md = nasty.md
    plan = nasty.result.proposals[0].plan
    heading = _paragraphs(md)[0]
    assert heading == f"hetc plan report: {NASTY}"
    tables = _tables(md)  # every row has exactly the header's cells and only text
    rented = {(r[0], r[1], r[2]) for r in tables["pool|zone"].rows}
    assert ('p|o<o>l & "x" `b`', "zo<ne> & 'x' |1", "F<A>ST & `q` |ü $(id)") in rented
    ranks = [r[0] for r in tables["rank|device"].rows]
    assert ranks == [r.key for r in nasty.result.proposals[0].simulation.ranks]
    assert any("|" in key and "<" in key for key in ranks)
    html = _MARKDOWN.render(md)
    assert set(re.findall("<code>(.*?)</code>", html)) == {"hetc plan"}, "only the template's"
    assert "<o>" not in html and "<A>" not in html and "<em>" not in html
    assert len(plan.stages) == len(tables["stage|blocks"].rows)


def test_markdown_escape_check_catches_a_missing_escape(
    nasty: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutation: with the `md` filter an identity, the same checks fail."""
    report._environment.cache_clear()
    monkeypatch.setattr(report, "markdown_escape", str)
    try:
        with pytest.raises(AssertionError):
            test_markdown_keeps_nasty_names_literal(nasty)
    finally:
        report._environment.cache_clear()


def test_svg_keeps_nasty_names_literal(nasty: Case) -> None:
    root = ET.fromstring(nasty.svg)
    plan = nasty.result.proposals[0].plan
    labels = [
        g.find(f"{SVG}text").text  # type: ignore[union-attr]
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "row"
    ]
    expected = []
    for p, pipeline in enumerate(plan.pipelines):
        for s, j in enumerate(pipeline.replicas):
            r = plan.stages[s].replicas[j]
            expected.append(f"p{p} s{s} ({r.device} TP{r.tp})")
    assert labels == expected
    assert any("F<A>ST & `q` |ü $(id)" in label for label in labels)


# -- timeline.svg ----------------------------------------------------------------------------


def _rows(root: ET.Element) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if g.get("class") == "row"]


def _axis(root: ET.Element) -> tuple[float, float, list[float]]:
    """(x of time 0, pixels per second, tick values in seconds) read from the tick marks."""
    ticks = []
    for g in root.iter(f"{SVG}g"):
        if g.get("class") == "tick":
            line, text = g.find(f"{SVG}line"), g.find(f"{SVG}text")
            assert line is not None and text is not None and text.text
            value, unit = text.text.split()
            ticks.append((float(line.get("x1", "")), float(value) * {"s": 1, "ms": 1e-3}[unit]))
    (x0, v0), (x1, v1) = ticks[0], ticks[-1]
    assert v0 == 0
    scale = (x1 - x0) / (v1 - v0)
    for x, v in ticks:
        assert abs(x - (x0 + v * scale)) <= 0.011, "ticks are not on one linear scale"
    return x0, scale, [v for _, v in ticks]


def check_timeline(svg: str, plan: Plan, timeline: Timeline, shown: list[int]) -> None:
    """Rows are exactly `shown` x stages; each row has one rect per interval, in order, with
    x and width on the axis' scale and the interval's colour class."""
    root = ET.fromstring(svg)
    x0, scale, ticks = _axis(root)
    assert 5 <= len(ticks) <= 10
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
    assert min(abs(mantissa - m) for m in (1, 2, 5)) < 1e-6, step
    assert ticks[-1] <= timeline.iteration_time < ticks[-1] + step
    assert x0 + timeline.iteration_time * scale <= float(root.get("width", "0"))
    rows = _rows(root)
    keys = [(int(g.get("data-pipeline", "")), int(g.get("data-stage", ""))) for g in rows]
    assert keys == [(p, s) for p in shown for s in range(len(plan.stages))]
    for g, key in zip(rows, keys, strict=True):
        rects = g.findall(f"{SVG}rect")
        intervals = timeline.busy[key]
        assert len(rects) == len(intervals)
        for rect, interval in zip(rects, intervals, strict=True):
            kind = {"sync": "s", "update": "u"}.get(interval.what, interval.what[0].lower())
            assert rect.get("class") == kind
            assert abs(float(rect.get("x", "")) - (x0 + interval.start * scale)) <= 0.02
            width = (interval.end - interval.start) * scale
            assert abs(float(rect.get("width", "")) - width) <= 0.03
        for text in g.findall(f"{SVG}text")[1:]:
            assert any(text.text == i.what.lstrip("FB") for i in intervals)


def test_timeline_has_a_rect_per_interval_on_the_axis_scale(mixed: Case) -> None:
    best = mixed.result.proposals[0]
    svg = mixed.svg
    check_timeline(svg, best.plan, best.simulation.timeline, [0, 1])
    root = ET.fromstring(svg)
    title = root.find(f"{SVG}title")
    assert title is not None and title.text
    assert _close(_number(title.text.split(",")[1]), best.simulation.iteration_time)
    assert svg == timeline_svg(best.plan, best.simulation)
    legend = {t.text for t in root.iter(f"{SVG}text")}
    assert {"forward", "backward", "gradient sync", "optimizer update"} <= legend


@pytest.mark.parametrize(
    "mutate",
    [
        # two rect positions swapped
        lambda svg: re.sub(
            r'(<rect class="f" x=")([\d.]+)(".*?<rect class="f" x=")([\d.]+)',
            r"\g<1>\g<4>\g<3>\g<2>",
            svg,
            count=1,
            flags=re.S,
        ),
        # widths on a scale 2% off
        lambda svg: re.sub(
            r'width="([\d.]+)" height="16"',
            lambda m: f'width="{float(m.group(1)) * 1.02:.2f}" height="16"',
            svg,
        ),
        # one interval dropped
        lambda svg: re.sub(r'<rect class="b"[^>]*/>\n', "", svg, count=1),
    ],
    ids=["swapped", "scale", "dropped"],
)
def test_timeline_check_catches_mutations(mixed: Case, mutate: Callable[[str], str]) -> None:
    best = mixed.result.proposals[0]
    broken = mutate(mixed.svg)
    assert broken != mixed.svg
    with pytest.raises(AssertionError):
        check_timeline(broken, best.plan, best.simulation.timeline, [0, 1])


def _finish(timeline: Timeline, p: int, stages: int) -> float:
    return max(i.end for s in range(stages) for i in timeline.busy[p, s] if i.what[0] in "FB")


def test_many_pipelines_draw_the_first_and_the_slowest(many: Case) -> None:
    best = many.result.proposals[0]
    timeline, plan = best.simulation.timeline, best.plan
    count = len(plan.pipelines)
    assert count >= 8
    finish = [_finish(timeline, p, len(plan.stages)) for p in range(count)]
    slowest = finish.index(max(finish))
    shown = sorted({0, 1, 2, slowest})
    check_timeline(many.svg, plan, timeline, shown)
    assert f"{count - len(shown)} of {count} pipelines not drawn" in many.svg


def _synthetic(
    pipelines: int, stages: int, microbatches: int, slow: int
) -> tuple[Plan, Simulation]:
    """A plan of `pipelines` x `stages` TP1 replicas where pipeline `slow` has a slower stage;
    its timeline is simulated once per distinct pipeline and copied to the identical ones."""
    nodes = tuple(
        Node(id=f"n{k}", zone="z", region="r", pool="p", device="D", devices=8)
        for k in range(pipelines * stages // 8)
    )
    plan = Plan(
        spec_hash="x",
        hetc_version="0",
        model_blocks=stages,
        global_batch_size=pipelines * microbatches,
        microbatch_size=1,
        nodes=nodes,
        stages=tuple(
            Stage(
                first_block=s,
                end_block=s + 1,
                replicas=tuple(
                    Replica(
                        device="D",
                        tp=1,
                        node=f"n{(s * pipelines + p) // 8}",
                        local_ranks=((s * pipelines + p) % 8,),
                    )
                    for p in range(pipelines)
                ),
            )
            for s in range(stages)
        ),
        pipelines=tuple(
            Pipeline(replicas=(p,) * stages, microbatches=microbatches) for p in range(pipelines)
        ),
    )

    def times(factor: float) -> PipelineTimes:
        return PipelineTimes(
            forward=(0.01 * factor,) + (0.01,) * (stages - 1),
            backward=(0.02,) * stages,
            send_activation=(0.001,) * (stages - 1),
            send_gradient=(0.001,) * (stages - 1),
            microbatches=microbatches,
        )

    two = simulate_1f1b([times(1.0), times(1.5)], [0.05] * stages, [0.01] * stages)
    busy = {(p, s): two.busy[int(p == slow), s] for p in range(pipelines) for s in range(stages)}
    timeline = Timeline(iteration_time=two.iteration_time, busy=busy)
    sim = Simulation(
        iteration_time=timeline.iteration_time,
        closed_form_time=timeline.iteration_time,
        samples_per_second=1.0,
        tokens_per_second=1.0,
        achieved_flops=1.0,
        peak_flops=1.0,
        cost=IterationCost(compute=0.0, egress=0.0),
        cost_per_million_tokens=0.0,
        budget=None,
        ranks=(),
        traffic={},
        timeline=timeline,
    )
    return plan, sim


def test_svg_size_is_bounded_for_128_pipelines() -> None:
    plan, sim = _synthetic(128, 8, 64, slow=77)
    svg = timeline_svg(plan, sim)
    check_timeline(svg, plan, sim.timeline, [0, 1, 2, 77])
    assert "124 of 128 pipelines not drawn" in svg and "the slowest, p77" in svg
    assert len(svg.encode()) < 400_000
    small_plan, small_sim = _synthetic(16, 8, 64, slow=9)
    assert abs(len(timeline_svg(small_plan, small_sim)) - len(svg)) < 1_000
