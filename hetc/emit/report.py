"""report.md and timeline.svg: why the planner chose its plan, and what one iteration looks like.

Both are rendered from jinja2 templates in `hetc/templates/` and must be reproducible: the same
spec and planning result give byte-identical files (so they can be committed, diffed and
cached), hence no timings, dates or set iteration, and every float printed in a fixed format.
Every string that comes from the spec (job, zone, pool and device names end up in node ids and
rank keys too) is escaped: XML escaping by jinja2's autoescape for the SVG, `markdown_escape`
for the report, so that a name like ``a|b`` cannot split a table cell nor ``<x>`` open a tag.

The report's numbers are the event simulator's (the plan's predictions), with the closed form
and the planning model's estimate beside them; alternatives are ranked and compared by the
simulator's objective, as `hetc plan` ranks and prints them, with the planning model's
comparison (what the search optimises) beside it, as the two can disagree.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jinja2

from hetc.costmodel.coverage import coverage_lines, plan_coverage
from hetc.costmodel.memory import GIB, MemoryBreakdown
from hetc.costmodel.profile import LayerProfile
from hetc.costmodel.schedule import Interval, Timeline
from hetc.costmodel.simulate import RankReport, Simulation
from hetc.plan import Plan
from hetc.schema.spec import Spec
from hetc.solver.certificate import gap_text
from hetc.solver.planner import PlanningResult, Proposal
from hetc.solver.report import relative_loss
from hetc.solver.search import APPROXIMATIONS

__all__ = [
    "COLLAPSE_RANKS",
    "given_plan_markdown",
    "markdown_escape",
    "report_markdown",
    "timeline_svg",
]

COLLAPSE_RANKS = 32
"""Above this many ranks (or pipelines) the report's tables group identical rows with a count:
one row per process of a 128-GPU plan would bury the few rows that differ."""

FIRST_PIPELINES = 3
"""With more than `MAX_PIPELINES_DRAWN` pipelines, the timeline draws this many and the slowest:
enough to see the schedule's shape while the file stays small for any pipeline count."""
MAX_PIPELINES_DRAWN = 8

# Timeline geometry, in SVG user units (pixels).
_WIDTH = 960.0
_RIGHT = 16.0
_TOP = 64.0
_MAX_LEFT = 360.0
"""Widest label column: longer labels are clipped at the left edge rather than squeezing the
plot (the legend, about 560 wide, still fits beside it)."""
_ROW = 16.0
_ROW_GAP = 3.0
_GROUP_GAP = 10.0
_CHAR = 6.5
"""Approximate advance of one 11 px sans-serif character, to size the label column and to
decide whether a microbatch number fits inside its rectangle."""
_KINDS = {"F": "f", "B": "b", "sync": "s", "update": "u", "steady": "r"}
"""Interval kind (`Interval.what` without the microbatch number) to its CSS class."""

_MD_ESCAPES = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        "\\": "\\\\",
        "`": "\\`",
        "*": "\\*",
        "_": "\\_",
        "[": "\\[",
        "]": "\\]",
        "|": "\\|",
        "$": "\\$",
        "~": "\\~",
        "\n": " ",
        "\r": " ",
    }
)


def markdown_escape(text: object) -> str:
    """`text` as literal Markdown (CommonMark + GFM tables): no emphasis, code, links, math or
    HTML, and no `|` that would end a table cell; line breaks become spaces so a table row
    stays one line."""
    return str(text).translate(_MD_ESCAPES)


@functools.cache
def _environment() -> jinja2.Environment:
    """One environment for both templates: autoescape (XML) for the SVG only, since HTML
    entities would be wrong in Markdown, which gets `markdown_escape` as the `md` filter."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("hetc", "templates"),
        autoescape=jinja2.select_autoescape(enabled_extensions=("svg.j2",), default=False),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["md"] = markdown_escape
    return env


def _g(value: float) -> str:
    return f"{value:.6g}"


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


def _gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.2f}"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


# -- report.md -------------------------------------------------------------------------------


def report_markdown(spec: Spec, result: PlanningResult, *, spec_path_name: str) -> str:
    """report.md for the best proposal of `result` (planned from `spec`, read from the file
    `spec_path_name`); raises ValueError when there is no proposal to report on."""
    if not result.proposals:
        raise ValueError("the planning result has no proposal: nothing to report")
    best = result.proposals[0]
    return _render(
        spec,
        best.plan,
        best.simulation,
        result.model.profiles,
        spec_path_name=spec_path_name,
        facts=_search_facts(result),
        performance=_performance_rows(best.simulation, best.candidate.estimate.iteration_time),
        alternatives=_alternative_rows(spec, result.proposals),
        proposals=len(result.proposals),
        given=None,
    )


def given_plan_markdown(
    spec: Spec,
    plan: Plan,
    simulation: Simulation,
    profiles: Sequence[LayerProfile],
    *,
    spec_path_name: str,
    plan_path_name: str,
) -> str:
    """report.md for a plan given with `hetc compile --plan` (read from `plan_path_name`),
    which no search ranked: no planner estimate, no alternatives."""
    checked = (
        f"given in {plan_path_name}, not searched; checked against the spec, its quotas and"
        " constraints.max_gpus, the capability matrix and every rank's memory"
    )
    return _render(
        spec,
        plan,
        simulation,
        profiles,
        spec_path_name=spec_path_name,
        facts=[("Plan", checked)],
        performance=_performance_rows(simulation, None),
        alternatives=[],
        proposals=1,
        given=plan_path_name,
    )


def _render(
    spec: Spec,
    plan: Plan,
    sim: Simulation,
    profiles: Sequence[LayerProfile],
    *,
    spec_path_name: str,
    facts: list[tuple[str, str]],
    performance: list[list[str]],
    alternatives: list[list[str]],
    proposals: int,
    given: str | None,
) -> str:
    context: dict[str, Any] = {
        "name": spec.name,
        "spec_file": spec_path_name,
        "given": given,
        "facts": _spec_facts(spec, plan, sim, profiles) + facts,
        "fallbacks": [
            line
            for line in coverage_lines(plan_coverage(spec, profiles, plan))
            if line != "every term measured"
        ],
        "shape": _shape(plan),
        "stages": _stage_rows(plan),
        "rented": _rented_rows(plan, spec),
        "rate": _g(_rental_rate(plan, spec) * 3600),
        "shares_grouped": len(plan.pipelines) > COLLAPSE_RANKS,
        "shares": _share_rows(plan, sim.timeline),
        "performance": performance,
        "costs": _cost_rows(sim),
        "budget": _budget(spec, sim),
        "memory_grouped": len(sim.ranks) > COLLAPSE_RANKS,
        "memory": _memory_rows(sim.ranks),
        "tightest": _tightest(sim.ranks),
        "problems": [r.problem for r in sim.ranks if r.problem],
        "objective_name": _objective_name(spec),
        "alternatives": alternatives,
        "proposals": proposals,
    }
    return _environment().get_template("report.md.j2").render(context)


def _objective_name(spec: Spec) -> str:
    return "seconds" if spec.objective == "max_throughput" else "USD"


def _spec_facts(
    spec: Spec, plan: Plan, sim: Simulation, profiles: Sequence[LayerProfile]
) -> list[tuple[str, str]]:
    """The header's first bullets: what was asked, and how the prediction was made."""
    goal = {
        "max_throughput": "max_throughput: the fewest seconds per iteration",
        "min_cost": "min_cost: the fewest USD per iteration",
    }[spec.objective]
    c = spec.constraints
    constraints = []
    if c.max_cost_per_iteration is not None:
        constraints.append(
            f"max_cost_per_iteration {_g(c.max_cost_per_iteration)} USD"
            f" (plan 1 simulates {_g(sim.cost.total)})"
        )
    if c.min_throughput is not None:
        constraints.append(
            f"min_throughput {_g(c.min_throughput)} iterations/s"
            f" (plan 1 simulates {_g(1 / sim.iteration_time)})"
        )
    if c.max_gpus is not None:
        rented = sum(n.devices for n in plan.nodes)
        constraints.append(f"max_gpus {c.max_gpus} (plan 1 rents {rented})")
    measured = "; ".join(
        f"{p.device} from {Path(p.source).name}"
        + (f" ({p.meta['origin']})" if "origin" in p.meta else "")
        for p in profiles
    )
    covered = not plan_coverage(spec, profiles, plan)
    return [
        ("Objective", goal),
        ("Constraints", "; ".join(constraints) if constraints else "none given"),
        (
            "Cost model",
            (f"measured profiles: {measured}; " if measured else "no measured profile; ")
            + (
                "every term measured"
                if covered
                else "formulas where nothing was measured, listed below"
            ),
        ),
    ]


def _search_facts(result: PlanningResult) -> list[tuple[str, str]]:
    """How hard the search looked, and whether the answer is proven: a reader should not
    trust a plan more than the search does."""
    search = result.search
    scored = f"{search.evaluations:,} candidates scored; " + (
        "the search ran to completion" if search.complete else f"stopped: {search.stop_reason}"
    )
    if search.greedy_count_leaves:
        scored += (
            f"; {search.greedy_count_leaves:,} leaves got their replica counts from the greedy,"
            " not the exact programme"
        )
    used = sorted(result.approximations)
    approximations = (
        "; ".join(f"{name} ({APPROXIMATIONS[name]})" for name in used)
        if used
        else "none (exact search)"
    )
    return [
        ("Search", scored),
        ("Approximations", approximations),
        ("Proven best", _proven(result)),
        ("Proven gap", _gaps(result)),
    ]


def _gaps(result: PlanningResult) -> str:
    """The search's two certificates (`certificate`): how far plan 1's planner estimate may
    be from the best plan within the approximations, and from the best of all plans."""
    search = result.search
    every = f"at most {gap_text(search.gap_all_plans)} from the best of all plans"
    if not result.approximations:
        return every
    within = "+".join(sorted(result.approximations))
    return f"at most {gap_text(search.gap)} from the best plan within {within}; {every}"


def _proven(result: PlanningResult) -> str:
    search = result.search
    if search.candidates and result.proposals[0].candidate != search.candidates[0]:
        return (
            "no: the search's best candidate is outside the runtime's capability matrix,"
            " so plan 1 is the best of the runnable candidates it kept"
        )
    if not search.complete:
        return f"no: the search stopped early ({search.stop_reason}); this is the best found"
    if result.approximations:
        return "no: best within the approximations above, which narrow the space searched"
    if search.greedy_count_leaves:
        return "no: some replica counts came from the greedy (see Search)"
    return (
        "yes, under the planning model (an exact search); the alternatives are the best"
        " of their shape among the candidates scored, not proven second best"
    )


def _shape(plan: Plan) -> str:
    return (
        f"{_plural(len(plan.stages), 'stage')} x {_plural(len(plan.pipelines), 'pipeline')},"
        f" microbatch {plan.microbatch_size}"
    )


def _device_mix(plan: Plan) -> str:
    devices: Counter[str] = Counter()
    for stage in plan.stages:
        for r in stage.replicas:
            devices[r.device] += r.tp
    return ", ".join(f"{n} x {d}" for d, n in sorted(devices.items()))


def _stage_rows(plan: Plan) -> list[list[str]]:
    """Per stage: blocks, replicas by (device, TP, zone), and the nodes that host them by pool
    (a node can host replicas of two stages, so these counts may add up to more than the
    nodes rented)."""
    nodes = {n.id: n for n in plan.nodes}
    last = len(plan.stages) - 1
    rows = []
    for i, stage in enumerate(plan.stages):
        ends = [name for name, here in (("embedding", i == 0), ("head", i == last)) if here]
        blocks = f"[{stage.first_block}, {stage.end_block})" + "".join(f" + {e}" for e in ends)
        kinds = Counter((r.device, r.tp, nodes[r.node].zone) for r in stage.replicas)
        replicas = ", ".join(f"{n} x {d} TP{tp} @ {z}" for (d, tp, z), n in sorted(kinds.items()))
        hosts = Counter(
            (nodes[node].pool, nodes[node].zone)
            for node in sorted({r.node for r in stage.replicas})
        )
        on = ", ".join(f"{n} x {pool}@{zone}" for (pool, zone), n in sorted(hosts.items()))
        rows.append([str(i), blocks, replicas, on])
    return rows


def _pool_prices(spec: Spec) -> dict[tuple[str, str], float]:
    return {(z.name, p.name): p.price for z in spec.zones for p in z.pools}


def _rental_rate(plan: Plan, spec: Spec) -> float:
    prices = _pool_prices(spec)
    return sum(n.devices * prices[n.zone, n.pool] for n in plan.nodes)


def _rented_rows(plan: Plan, spec: Spec) -> list[list[str]]:
    prices = _pool_prices(spec)
    used: Counter[str] = Counter()
    for stage in plan.stages:
        for r in stage.replicas:
            used[r.node] += r.tp
    pools: dict[tuple[str, str], list[str]] = {}
    for node in plan.nodes:
        pools.setdefault((node.zone, node.pool), []).append(node.id)
    rows = []
    for (zone, pool), ids in pools.items():
        first = next(n for n in plan.nodes if n.id == ids[0])
        devices = first.devices * len(ids)
        rows.append(
            [
                pool,
                zone,
                first.device,
                str(len(ids)),
                str(first.devices),
                f"{sum(used[i] for i in ids)} of {devices}",
                _g(devices * prices[zone, pool] * 3600),
            ]
        )
    return rows


def _compute_end(intervals: Sequence[Interval]) -> float:
    """When a rank's last forward or backward ends (before synchronisation and update)."""
    return max((i.end for i in intervals if i.what not in ("sync", "update")), default=0.0)


def _pipeline_finish(timeline: Timeline, pipeline: int, stages: int) -> float:
    return max(_compute_end(timeline.busy[pipeline, s]) for s in range(stages))


def _path(plan: Plan, pipeline: int) -> str:
    replicas = [plan.stages[i].replicas[j] for i, j in enumerate(plan.pipelines[pipeline].replicas)]
    return " -> ".join(f"{r.device} TP{r.tp}" for r in replicas)


def _share_rows(plan: Plan, timeline: Timeline) -> list[list[str]]:
    """Per pipeline (or per group of pipelines with the same path and share): its microbatches,
    samples and when its last backward ends, which shows how well the shares balance."""
    stages, mbs = len(plan.stages), plan.microbatch_size
    batch = plan.global_batch_size
    rows: list[list[str]] = []
    if len(plan.pipelines) <= COLLAPSE_RANKS:
        for p, pipeline in enumerate(plan.pipelines):
            m = pipeline.microbatches
            rows.append(
                [
                    f"p{p}",
                    _path(plan, p),
                    str(m),
                    str(m * mbs),
                    _percent(m * mbs / batch),
                    _g(_pipeline_finish(timeline, p, stages)),
                ]
            )
        return rows
    groups: dict[tuple[str, int], list[int]] = {}
    for p, pipeline in enumerate(plan.pipelines):
        groups.setdefault((_path(plan, p), pipeline.microbatches), []).append(p)
    for (path, m), members in groups.items():
        rows.append(
            [
                str(len(members)),
                f"p{members[0]}",
                path,
                str(m),
                str(m * mbs),
                _percent(m * mbs / batch),
                _g(max(_pipeline_finish(timeline, p, stages) for p in members)),
            ]
        )
    return rows


def _performance_rows(sim: Simulation, planned: float | None) -> list[list[str]]:
    """The simulator's numbers, with the planning model's iteration time (`planned`) where a
    search ranked the plan by it."""
    t = sim.iteration_time
    rows = [
        ["iteration time, event simulator", f"{_g(t)} s"],
        [
            "iteration time, closed form",
            f"{_g(sim.closed_form_time)} s ({sim.closed_form_time / t - 1:+.2%} vs the simulator)",
        ],
    ]
    if planned is not None:
        rows.append(["iteration time, planning model (what the search ranked)", f"{_g(planned)} s"])
    return [
        *rows,
        ["iterations per second", _g(1 / t)],
        ["throughput", f"{_g(sim.samples_per_second)} samples/s"],
        ["throughput", f"{_g(sim.tokens_per_second)} tokens/s"],
        [
            "achieved compute",
            f"{_g(sim.achieved_flops / 1e12)} TFLOP/s of {_g(sim.peak_flops / 1e12)} peak",
        ],
        ["MFU", f"{100 * sim.mfu:.2f}%"],
    ]


def _cost_rows(sim: Simulation) -> list[list[str]]:
    return [
        ["compute per iteration", _g(sim.cost.compute)],
        ["egress per iteration", _g(sim.cost.egress)],
        ["total per iteration", _g(sim.cost.total)],
        ["per 1M tokens", _g(sim.cost_per_million_tokens)],
    ]


def _budget(spec: Spec, sim: Simulation) -> str:
    tokens = spec.training.tokens
    if sim.budget is None or tokens is None:
        return "training.tokens is not set, so no time or cost to train is predicted."
    seconds, usd = sim.budget
    return (
        f"training.tokens = {_g(tokens)}: {_g(seconds)} s ({seconds / 86400:.2f} days)"
        f" and {_g(usd)} USD."
    )


def _memory_rows(ranks: Sequence[RankReport]) -> list[list[str]]:
    """One row per rank, or per group of ranks with the same device, stage and memory when
    there are more than `COLLAPSE_RANKS` (their busy share may differ: shown as a range)."""

    def numbers(r: RankReport) -> list[str]:
        headroom = r.capacity - r.memory.total
        return [
            _gib(r.memory.total),
            _gib(r.capacity),
            _gib(headroom),
            _percent(headroom / r.capacity),
        ]

    if len(ranks) <= COLLAPSE_RANKS:
        return [
            [
                r.key,
                r.device,
                str(r.stage),
                str(r.replica),
                str(r.tp_rank),
                *numbers(r),
                _percent(r.busy_fraction),
            ]
            for r in ranks
        ]
    groups: dict[tuple[str, int, MemoryBreakdown, float], list[RankReport]] = {}
    for r in ranks:
        groups.setdefault((r.device, r.stage, r.memory, r.capacity), []).append(r)
    rows = []
    for members in groups.values():
        first = members[0]
        low = min(r.busy_fraction for r in members)
        high = max(r.busy_fraction for r in members)
        busy = (
            _percent(low)
            if _percent(low) == _percent(high)
            else f"{100 * low:.1f}-{_percent(high)}"
        )
        rows.append(
            [str(len(members)), first.key, first.device, str(first.stage), *numbers(first), busy]
        )
    return rows


def _tightest(ranks: Sequence[RankReport]) -> str:
    """The rank with the least headroom, term by term: the first place to look when a plan
    runs out of memory on real hardware."""
    r = min(ranks, key=lambda r: (r.capacity - r.memory.total) / r.capacity)
    terms = ", ".join(f"{name} {_gib(v)}" for name, v in r.memory.terms().items())
    return f"{r.key} ({r.device}, stage {r.stage}) at its {r.memory.phase} peak: {terms} GiB"


def _simulated_value(spec: Spec, sim: Simulation) -> float:
    return sim.iteration_time if spec.objective == "max_throughput" else sim.cost.total


def _alternative_rows(spec: Spec, proposals: Sequence[Proposal]) -> list[list[str]]:
    best = proposals[0]
    best_simulated = _simulated_value(spec, best.simulation)
    return [
        [
            str(k),
            _shape(p.plan),
            _device_mix(p.plan),
            _g(p.simulation.iteration_time),
            _g(p.simulation.cost.total),
            relative_loss(_simulated_value(spec, p.simulation), best_simulated),
            relative_loss(p.candidate.value, best.candidate.value),
        ]
        for k, p in enumerate(proposals[1:], start=2)
    ]


# -- timeline.svg ----------------------------------------------------------------------------


def timeline_svg(plan: Plan, simulation: Simulation) -> str:
    """The event simulator's iteration of `plan` as SVG: one row per (pipeline, stage)."""
    timeline = simulation.timeline
    stages, pipelines = len(plan.stages), len(plan.pipelines)
    finish = [_pipeline_finish(timeline, p, stages) for p in range(pipelines)]
    slowest = max(range(pipelines), key=lambda p: (finish[p], -p))
    if pipelines <= MAX_PIPELINES_DRAWN:
        shown = list(range(pipelines))
    else:
        shown = sorted({*range(FIRST_PIPELINES), slowest})
    labels = {
        (p, s): f"p{p} s{s} ({r.device} TP{r.tp})"
        for p in shown
        for s, r in enumerate(
            plan.stages[i].replicas[j] for i, j in enumerate(plan.pipelines[p].replicas)
        )
    }
    left = min(_MAX_LEFT, 12.0 + _CHAR * max(len(label) for label in labels.values()))
    total = timeline.iteration_time
    scale = (_WIDTH - left - _RIGHT) / total

    def x(t: float) -> float:
        return left + t * scale

    rows, y = [], _TOP
    for p in shown:
        for s in range(stages):
            rows.append(_row(labels[p, s], p, s, y, timeline.busy[p, s], x))
            y += _ROW + _ROW_GAP
        y += _GROUP_GAP
    omitted = pipelines - len(shown)
    note = ""
    if omitted:
        first = ", ".join(f"p{p}" for p in range(FIRST_PIPELINES))
        slow = (
            f"(the slowest, p{slowest}, among them)"
            if slowest < FIRST_PIPELINES
            else f"and the slowest, p{slowest}"
        )
        note = f"{omitted} of {pipelines} pipelines not drawn: showing {first} {slow}"
    context = {
        "width": f"{_WIDTH:.0f}",
        "height": f"{y + 40:.0f}",
        "title": f"Pipeline timeline: one iteration, {_g(total)} s (event simulator)",
        "subtitle": _shape(plan) + (f"; {note}" if note else ""),
        "ticks": _ticks(total, x),
        "axis_top": f"{_TOP - 6:.0f}",
        "axis_bottom": f"{y - _GROUP_GAP:.0f}",
        "label_x": f"{left - 6:.2f}",
        "row_height": f"{_ROW:.0f}",
        "rows": rows,
        "legend_y": f"{y + 12:.0f}",
        "legend_x": f"{left:.2f}",
    }
    return _environment().get_template("timeline.svg.j2").render(context)


def _row(
    label: str,
    pipeline: int,
    stage: int,
    y: float,
    busy: Sequence[Interval],
    x: Callable[[float], float],
) -> dict[str, Any]:
    rects, texts = [], []
    for interval in busy:
        kind = interval.what if interval.what in _KINDS else interval.what[0]
        left, right = x(interval.start), x(interval.end)
        rects.append({"cls": _KINDS[kind], "x": f"{left:.2f}", "w": f"{right - left:.2f}"})
        text = interval.what[1:] if kind in ("F", "B") else interval.what
        if right - left >= _CHAR * len(text) + 2:
            texts.append({"x": f"{(left + right) / 2:.2f}", "text": text})
    return {
        "label": label,
        "pipeline": pipeline,
        "stage": stage,
        "y": f"{y:.0f}",
        "text_y": f"{y + _ROW - 4:.0f}",
        "rects": rects,
        "texts": texts,
    }


def _ticks(total: float, x: Callable[[float], float]) -> list[dict[str, str]]:
    """5 to 10 ticks at round times: the step is the smallest of 1, 2, 5 x 10^k that leaves
    at most 9 intervals in [0, total]; the next smaller step would leave at least 10, so at
    least 4 intervals (5 ticks) remain."""
    unit, per = ("ms", 1e3) if total < 1 else ("s", 1.0)
    exponent = math.floor(math.log10(total * per / 9))
    for mantissa in (1, 2, 5, 10):
        step = mantissa * 10.0**exponent
        if math.floor(total * per / step + 1e-9) <= 9:
            break
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    count = math.floor(total * per / step + 1e-9)
    return [
        {"x": f"{x(k * step / per):.2f}", "label": f"{k * step:.{decimals}f} {unit}"}
        for k in range(count + 1)
    ]
