"""What `hetc plan` prints: the ranked plans as a table or JSON, the diagnosis of an
infeasible spec, the `--explain` answers, and the CP-SAT cross-check of the chosen shape.

Kept apart from the CLI so the command stays a thin wrapper and the text can be tested
without a terminal.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from hetc.console import Column, emphasis, render_table, styled_output
from hetc.costmodel.coverage import (
    MEASURE,
    Fallback,
    coverage_lines,
    fix_lines,
    plan_coverage,
    refusal_lines,
)
from hetc.costmodel.profile import LayerProfile
from hetc.costmodel.simulate import read_profiles_for_command
from hetc.plan import Plan, plan_to_json
from hetc.schema.spec import Spec
from hetc.solver.binding import explain_used
from hetc.solver.budget import Budget
from hetc.solver.certificate import Snapshot, declared_text, gap_text
from hetc.solver.diagnosis import Diagnosis, diagnose
from hetc.solver.explain import Explanation, explain_unused, never_dominated
from hetc.solver.interrupt import interrupt_stops
from hetc.solver.planner import (
    PlanningResult,
    Proposal,
    plan_spec,
    simulated_objective,
)
from hetc.solver.search import SearchResult
from hetc.units import fixed, format_duration, format_usd, plural

__all__ = [
    "ProgressLine",
    "cross_check",
    "plan_table",
    "planned_or_diagnosed",
    "proven_text",
    "ranked_by",
    "relative_loss",
    "run_plan_command",
    "stopped_text",
]

Echo = Callable[..., None]


class ProgressLine:
    """A one-line progress display on stderr, rewritten in place, shown only once a search
    has run for 1 s: the best objective so far, the lower bound, the gaps (within the
    approximations and over all plans, as `proven_text` states them at the end), the shapes
    left."""

    def __init__(self, echo: Echo, objective: str, *, after: float = 1.0) -> None:
        self.echo, self.after, self.shown = echo, after, False
        self.format = format_usd if objective == "min_cost" else format_duration

    def __call__(self, now: Snapshot) -> None:
        if now.seconds < self.after:
            return
        if now.incumbent is None:
            standing = "no plan yet"
        else:
            standing = f"best {self.format(now.incumbent)}, {_gaps(now)}"
        self.echo(
            f"\rhetc: searching {now.seconds:.1f} s: {standing}, bound"
            f" {self.format(now.lower_bound)}, {plural(now.shapes_left, 'shape')} left,"
            f" {now.evaluations:,} scored ",
            err=True,
            nl=False,
        )
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.echo("", err=True)


def _gaps(now: Snapshot) -> str:
    """The progress line's gaps, worded as `proven_text` words the final ones."""
    every = f"gap {gap_text(now.gap)} over all plans"
    if not now.approximations:
        return every
    within = "+".join(sorted(now.approximations))
    return f"gap {gap_text(now.gap_within)} within {within}; {every}"


def proven_text(search: SearchResult, approximations: frozenset[str]) -> str:
    """The search's certificates in words: proven best, or the gaps it has proven, within the
    approximations it searched under and over all plans (`certificate`)."""
    if search.gap_all_plans == 0:
        return "proven best (gap 0)"
    every = f"gap at most {gap_text(search.gap_all_plans)} over all plans"
    if not approximations:
        return f"not proven best: {every} (the planner estimate vs the search's lower bound)"
    within = "+".join(sorted(approximations))
    if search.gap == 0:
        return f"proven best within {within} (gap 0); {every}"
    return f"not proven best: gap at most {gap_text(search.gap)} within {within}; {every}"


def stopped_text(search: SearchResult, approximations: frozenset[str]) -> str:
    """Why an unfinished search stopped, and what its answer is worth."""
    why = "interrupted (Ctrl-C or SIGTERM)" if search.interrupted else search.stop_reason
    return f"{why}: the best plan so far, {proven_text(search, approximations)}"


def _replica_groups(plan: Plan, stage: int) -> str:
    nodes = {n.id: n for n in plan.nodes}
    counts = Counter((r.device, r.tp, nodes[r.node].zone) for r in plan.stages[stage].replicas)
    return ", ".join(f"{n} x {d} TP{tp} @ {z}" for (d, tp, z), n in sorted(counts.items()))


def _shares(plan: Plan) -> str:
    """Pipelines grouped by their share of the batch: '4 microbatches on each of 128
    pipelines' (a single pipeline's share without 'each')."""
    counts = Counter(p.microbatches for p in plan.pipelines)
    parts = []
    for m, n in sorted(counts.items(), reverse=True):
        work = plural(m, "microbatch")
        parts.append(f"{work} on {'each of ' if n > 1 else ''}{plural(n, 'pipeline')}")
    return ", ".join(parts)


def relative_loss(value: float, best: float) -> str:
    """How much worse `value` is than `best` (both lower-is-better), with a free best plan
    spelled out instead of dividing by zero."""
    if best == 0:
        return "0.0%" if value == 0 else "infinitely (plan 1 is free)"
    return f"{100 * (value / best - 1):.1f}%"


def ranked_by(spec: Spec) -> str:
    """The number `hetc plan` ranks its plans by, in words: the simulator's, for the
    objective (the planning estimate is only what the search scored)."""
    if spec.objective == "min_cost":
        return "the simulated cost per iteration"
    return "the simulated iteration time"


def _alternatives_line(spec: Spec, proposals: Sequence[Proposal]) -> str:
    """How each alternative compares with plan 1, by the number the plans are ranked by."""
    best = simulated_objective(spec, proposals[0].simulation)
    parts = []
    for i, p in enumerate(proposals[1:], start=2):
        value = simulated_objective(spec, p.simulation)
        parts.append(
            f"plan {i} ties with plan 1"
            if value == best
            else f"plan {i} by {relative_loss(value, best)}"
        )
    return f"alternatives lose, by {ranked_by(spec)}: " + "; ".join(parts)


def plan_table(
    proposal: Proposal,
    rank: int,
    spec: Spec,
    profiles: Sequence[LayerProfile] = (),
    *,
    styled: bool = False,
) -> str:
    """One proposal as a short header, a per-stage table, and the terms of its prediction
    that rest on a formula (`profiles`: those the prediction used). Every number is the
    event simulator's; the planner's estimate of the same two numbers is on a line of its
    own, named as such. `styled`: rich table and colour (`hetc.console`)."""
    plan, sim, e = proposal.plan, proposal.simulation, proposal.candidate.estimate
    rented = Counter((n.device, n.zone, n.devices) for n in plan.nodes)
    rent = ", ".join(
        f"{plural(count, 'node')} of {per} x {device} in {zone}"
        for (device, zone, per), count in sorted(rented.items())
    )
    title = (
        f"plan {rank}: {plural(len(plan.stages), 'stage')} x"
        f" {plural(len(plan.pipelines), 'pipeline')}, microbatch {plan.microbatch_size}"
    )
    lines = [
        emphasis(title, "bold", styled=styled),
        f"  iteration {format_duration(sim.iteration_time)},"
        f" {fixed(1 / sim.iteration_time)} iterations/s, {sim.tokens_per_second:,.0f} tokens/s,"
        f" MFU {100 * sim.mfu:.1f}%",
        f"  cost {format_usd(sim.cost.total)} per iteration (egress {format_usd(sim.cost.egress)}),"
        f" {format_usd(sim.cost_per_million_tokens)} per 1M tokens",
        f"  planner estimate: iteration {format_duration(e.iteration_time)},"
        f" cost {format_usd(e.cost)} per iteration",
        f"  rents {rent}",
        f"  batch: {_shares(plan)}",
    ]
    rows = []
    for i, stage in enumerate(plan.stages):
        ends = []
        if i == 0:
            ends.append("embedding")
        if i == len(plan.stages) - 1:
            ends.append("head")
        blocks = " + ".join([f"[{stage.first_block}, {stage.end_block})", *ends])
        rows.append([str(i), blocks, _replica_groups(plan, i)])
    columns = [Column("stage", "right"), Column("blocks"), Column("replicas")]
    lines.append(render_table(columns, rows, styled=styled, indent=2))
    fallbacks = plan_coverage(spec, profiles, plan)
    if fallbacks:
        lines.append("  formula where not measured:")
        lines += [f"    {line}" for line in coverage_lines(fallbacks)]
    else:
        lines.append("  cost model: every term measured")
    return "\n".join(lines)


def cross_check(result: PlanningResult) -> dict[str, Any] | None:
    """CP-SAT on the chosen shape: its optimum re-scored by the float model, and the gap."""
    from hetc.solver.cpsat import solve_shape

    if not result.proposals:
        return None
    best = result.proposals[0].candidate
    started = time.perf_counter()
    solved = solve_shape(result.model, best.shape)
    seconds = time.perf_counter() - started
    if solved is None:
        return {"shape": str(best.shape), "cp_sat": None, "gap": None, "seconds": seconds}
    other = (
        solved.estimate.iteration_time
        if best.objective == "max_throughput"
        else (solved.estimate.cost)
    )
    return {
        "search": best.value,
        "cp_sat": other,
        "gap": (best.value - other) / other if other else 0.0,
        "seconds": seconds,
    }


def _unprofiled(spec: Spec) -> list[Fallback]:
    """A layer-times fallback for every device of the spec, to name their measure commands."""
    return [
        Fallback(device=d, term="layer times", missing="no profile", fix=MEASURE)
        for d in sorted(spec.devices)
    ]


def _diagnosis_text(diagnosis: Diagnosis) -> str:
    if diagnosis.binding == "undetermined":
        return f"hetc: no plan found: {diagnosis.message}\nTo fix: {diagnosis.change}"
    return (
        f"hetc: no plan satisfies the spec: {diagnosis.binding} is binding: {diagnosis.message}"
        f"\nTo fix: {diagnosis.change}"
    )


def _explanation_json(spec: Spec, explanations: list[Explanation]) -> list[dict[str, Any]]:
    """`--json`'s `explain`: per unused pool, its text (`loss`) and the facts it says: the
    pool's spec path, the reason code, the two simulated objective values compared (in
    `objective`'s unit, lower is better) and their ratio less one, and the pools the best
    plan using it rents in full."""
    objective = "cost_per_iteration" if spec.objective == "min_cost" else "iteration_time"
    return [
        {
            "pool": x.pool,
            "path": x.path,
            "reason": x.reason,
            "objective": objective,
            "value": x.value,
            "plan1_value": x.plan1_value,
            "relative": None
            if x.value is None or not x.plan1_value
            else x.value / x.plan1_value - 1,
            "at_quota": list(x.at_quota),
            "loss": x.loss,
            "iteration_time": x.best_with.simulation.iteration_time if x.best_with else None,
            "cost_per_iteration": x.best_with.simulation.cost.total if x.best_with else None,
        }
        for x in explanations
    ]


def planned_or_diagnosed(
    spec: Spec,
    spec_dir: str,
    *,
    top: int,
    as_json: bool,
    approximations: frozenset[str] | None,
    budget: Budget | None,
    eval_limit: int | None,
    echo: Echo,
    profile_files: Sequence[str] = (),
    strict_profiles: bool = False,
    measured_points: bool = False,
    spec_file: str = "SPEC",
) -> tuple[PlanningResult, dict[str, Any]] | int:
    """Plan the spec: the result and the planner options it used, or the exit code after
    printing why there is no plan (1 bad profile, or with `strict_profiles` a plan resting
    on a formula; 2 bad option; 3 infeasible with diagnosis). `measured_points` (implied by
    `strict_profiles`) searches only the points the profiles timed. `budget` bounds the
    planning and the diagnosis (`planner.plan_spec`); None for no limit."""
    profiles = read_profiles_for_command(spec, spec_dir, spec_file, profile_files, echo)
    if profiles is None:
        return 1
    for profile in profiles:
        echo(f"hetc: {profile.device}: measured profile {profile.source}", err=True)
    restrict = strict_profiles or measured_points
    if restrict and not profiles:
        option = "--strict-profiles" if strict_profiles else "--measured-points"
        echo(f"hetc: {option}: no profile of a device of the spec, so no point is measured")
        commands = fix_lines(_unprofiled(spec), spec_file, ())
        echo(f"To fix: measure one: {'; '.join(commands)}")
        return 1
    progress = ProgressLine(echo, spec.objective) if sys.stderr.isatty() else None
    options: dict[str, Any] = {
        "profiles": profiles,
        "approximations": approximations,
        "measured_points": restrict,
    }
    try:
        with interrupt_stops() as stop:
            result = plan_spec(
                spec,
                top=top,
                budget=budget,
                eval_limit=eval_limit,
                progress=progress,
                stop=stop,
                **options,
            )
    except ValueError as exc:
        echo(f"hetc: {exc}", err=True)
        return 2
    finally:
        if progress is not None:
            progress.close()
    search = result.search
    if result.proposals:
        fallbacks = plan_coverage(spec, profiles, result.proposals[0].plan)
        if strict_profiles and fallbacks:
            for line in refusal_lines("plan 1's prediction", fallbacks, spec_file, profiles):
                echo(line)
            return 1
        return result, options
    if not search.complete:
        echo(
            f"hetc: no plan found before the search stopped ({search.stop_reason});"
            " raise --work-limit or --eval-limit, or plan with --exact",
            err=True,
        )
        return 3
    diagnosis = None
    if restrict:
        diagnosis = _measured_points_binding(spec, profiles, approximations, spec_file, budget)
    if diagnosis is None:
        # the search above ended complete with no plan: the diagnosis need not prove it again
        diagnosis = diagnose(spec, known_infeasible=True, **options, **_diagnosis_limits(budget))
    if as_json:
        echo(
            json.dumps(
                {
                    "feasible": False,
                    "binding": diagnosis.binding,
                    "message": diagnosis.message,
                    "change": diagnosis.change,
                },
                indent=2,
            )
        )
    else:
        echo(_diagnosis_text(diagnosis), err=True)
    return 3


def _diagnosis_limits(budget: Budget | None) -> dict[str, Any]:
    """The diagnosis's limits under the command's `budget`: what is left of it, or none at
    all (an exact diagnosis) where the command has no limit (`--exact`)."""
    if budget is None or (budget.work is None and budget.clock is None):
        return {"work_limit": None, "budget": None}
    return {"budget": budget}


def _measured_points_binding(
    spec: Spec,
    profiles: Sequence[LayerProfile],
    approximations: frozenset[str] | None,
    spec_file: str,
    budget: Budget | None,
) -> Diagnosis | None:
    """Why a search kept to measured points found nothing, when the points are the reason:
    the same search over every point (within what is left of `budget`) finds a plan. None
    when it does not (then the spec's own diagnosis applies)."""
    found = plan_spec(spec, profiles=profiles, approximations=approximations, budget=budget)
    if not found.proposals:
        return None
    timed = "; ".join(
        f"{p.device} TP {tp} at microbatch {','.join(str(m) for m, t in p.points() if t == tp)}"
        for p in profiles
        for tp in sorted({t for _, t in p.points()})
    )
    return Diagnosis(
        binding="measured points",
        message=f"no plan at the points the profiles timed ({timed}); there are plans at"
        " points they did not time",
        change="measure them: " + "; ".join(fix_lines(_unprofiled(spec), spec_file, profiles)),
        plan=None,
    )


def run_plan_command(
    spec: Spec,
    spec_dir: str,
    *,
    top: int,
    as_json: bool,
    explain: bool,
    approximations: frozenset[str] | None,
    budget: Budget | None,
    eval_limit: int | None,
    solver: str,
    echo: Echo,
    profile_files: Sequence[str] = (),
    strict_profiles: bool = False,
    measured_points: bool = False,
    spec_file: str = "SPEC",
) -> int:
    """The whole `hetc plan`: returns the exit code (0 planned, 1 bad input or a strict
    refusal, 3 infeasible). Under `budget`, the plan spends what it needs of it whatever
    the flags (so plan 1 is the same with or without `--explain`), and the explanations get
    what it leaves."""
    planned = planned_or_diagnosed(
        spec,
        spec_dir,
        top=top,
        as_json=as_json,
        approximations=approximations,
        budget=budget,
        eval_limit=eval_limit,
        echo=echo,
        profile_files=profile_files,
        strict_profiles=strict_profiles,
        measured_points=measured_points,
        spec_file=spec_file,
    )
    if isinstance(planned, int):
        return planned
    result, options = planned
    search = result.search
    explanations = explain_unused(result, spec, budget=budget, **options) if explain else []
    result, explanations = never_dominated(result, spec, explanations)
    checked = cross_check(result) if solver == "cp-sat" else None
    if as_json:
        echo(json.dumps(_result_json(spec, result, explanations, checked), indent=2))
        return 0
    used = declared_text(result.approximations)
    proven = proven_text(search, result.approximations)
    header = (
        f"objective {spec.objective}; searched {plural(search.evaluations, 'candidate')} in"
        f" {search.seconds:.2f} s; approximations: {used}; {proven}\n"
        f"plans ranked by {ranked_by(spec)} (the event simulator's, as printed; the planner"
        " estimate is what the search scored)"
    )
    if not search.complete:
        echo(f"hetc: warning: {stopped_text(search, result.approximations)}", err=True)
    if result.cut is not None:
        echo(f"hetc: warning: {result.cut} (raise --work-limit for more)", err=True)
    if result.promoted is not None:
        header += f"\n{result.promoted}"
    blocks = [header]
    profiles = result.model.profiles
    styled = styled_output()
    blocks += [
        plan_table(p, i + 1, spec, profiles, styled=styled) for i, p in enumerate(result.proposals)
    ]
    if len(result.proposals) > 1:
        blocks.append(_alternatives_line(spec, result.proposals))
    for x in explanations:
        blocks.append(f"why not {x.pool}? {x.loss}")
    if explain and not explanations:
        blocks.append(
            "every pool of the spec is used by plan 1; how much of each, and what binds:\n"
            + "\n".join(
                f"  {line}" for line in explain_used(result, spec, budget=budget, **options)
            )
        )
    if checked is not None:
        blocks.append(
            "CP-SAT on the chosen shape: "
            + (
                "no feasible assignment"
                if checked["cp_sat"] is None
                else f"{_objective_value(spec, checked['cp_sat'])} vs the search's"
                f" {_objective_value(spec, checked['search'])} (gap {100 * checked['gap']:.2f}%),"
                f" {checked['seconds']:.2f} s"
            )
        )
    echo("\n\n".join(blocks))
    return 0


def _objective_value(spec: Spec, value: float) -> str:
    """A planning-model objective value to six digits in its unit (the cross-check's)."""
    if spec.objective == "min_cost":
        return f"{format_usd(value, 6)} per iteration"
    return f"{format_duration(value, 6)} per iteration"


def _result_json(
    spec: Spec,
    result: PlanningResult,
    explanations: list[Explanation],
    checked: dict[str, Any] | None,
) -> dict[str, Any]:
    search = result.search
    return {
        "feasible": True,
        "complete": search.complete,
        "stop_reason": search.stop_reason or None,
        "interrupted": search.interrupted,
        "lower_bound": search.lower_bound,
        "gap": search.gap,
        "lower_bound_all_plans": search.lower_bound_all_plans,
        "gap_all_plans": search.gap_all_plans,
        "evaluations": search.evaluations,
        "greedy_count_leaves": search.greedy_count_leaves,
        "search_seconds": search.seconds,
        "cut": result.cut,
        "promoted": result.promoted,
        "approximations": sorted(result.approximations),
        "ranked_by": "simulated "
        + ("cost_per_iteration" if spec.objective == "min_cost" else "iteration_time"),
        "plans": [
            {
                "rank": i + 1,
                "objective": simulated_objective(spec, p.simulation),
                "planner_iteration_time": p.candidate.estimate.iteration_time,
                "planner_cost_per_iteration": p.candidate.estimate.cost,
                "formula_fallbacks": [
                    {"device": f.device, "term": f.term, "missing": f.missing}
                    for f in plan_coverage(result.model.spec, result.model.profiles, p.plan)
                ],
                "plan": json.loads(plan_to_json(p.plan)),
            }
            for i, p in enumerate(result.proposals)
        ],
        "explain": _explanation_json(spec, explanations),
        "cross_check": checked,
    }
