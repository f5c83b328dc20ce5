"""What `hetc compile` does between parsing its arguments and setting its exit code: plan the
spec and compile the best plan, or (`--plan FILE`) check a given plan and compile it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hetc.costmodel.coverage import plan_coverage, refusal_lines
from hetc.costmodel.plan_file import RankChoiceError
from hetc.costmodel.simulate import read_profiles_for_command
from hetc.emit.compile import CompiledOutput, compile_given, compile_output
from hetc.emit.output import write_output
from hetc.schema import EnvironmentProblem
from hetc.schema.source import read_plain_text
from hetc.schema.spec import Spec
from hetc.solver.budget import Budget
from hetc.solver.given import GivenPlanError, check_given_plan
from hetc.solver.report import Echo, cross_check, planned_or_diagnosed, stopped_text
from hetc.units import format_duration, format_usd, plural

PLANNING_SHARE = 0.75
"""Of a `--time-limit` given to `hetc compile`, the share planning may spend; the rest is for
writing the output, which takes seconds at thousands of ranks (docs/planner.md, Budgets).
The work budget is not shared: planning gets all of it, as under `hetc plan`, so that both
commands answer with the same plan."""


def run_compile_command(
    spec: Spec,
    spec_path: Path,
    output: Path,
    *,
    force: bool,
    top: int,
    approximations: frozenset[str] | None,
    budget: Budget | None,
    eval_limit: int | None,
    check_with_cp_sat: bool,
    echo: Echo,
    profile_files: Sequence[str] = (),
    strict_profiles: bool = False,
    measured_points: bool = False,
    launchers: Sequence[str] | None = None,
) -> int:
    """Plan, compile and write; returns the exit code (0 compiled, 1 bad input or a strict
    refusal, 2 bad option, 3 infeasible). An unwritable or foreign output raises
    EnvironmentProblem (exit 4)."""
    planned = planned_or_diagnosed(
        spec,
        str(spec_path.parent),
        top=top,
        as_json=False,
        approximations=approximations,
        budget=None if budget is None else budget.clock_part(PLANNING_SHARE),
        eval_limit=eval_limit,
        echo=echo,
        profile_files=profile_files,
        strict_profiles=strict_profiles,
        measured_points=measured_points,
        spec_file=str(spec_path),
    )
    if isinstance(planned, int):
        return planned
    result, _options = planned
    if not result.search.complete:
        echo(
            f"hetc: warning: {stopped_text(result.search, result.approximations)}; compiling it",
            err=True,
        )
    if result.cut is not None:
        echo(f"hetc: warning: {result.cut} (raise --work-limit for more)", err=True)
    compiled = compile_output(
        spec,
        result,
        spec_file_name=spec_path.name,
        spec_dir=str(spec_path.parent),
        launchers=launchers,
    )
    written = write_output(output, compiled.files, executable=compiled.executable, force=force)
    sim = result.proposals[0].simulation
    _say_compiled(compiled, spec_path, output, written, sim.iteration_time, sim.cost.total, echo)
    if check_with_cp_sat:
        checked = cross_check(result)
        if checked is not None and checked["cp_sat"] is not None:
            echo(
                f"hetc: CP-SAT on the chosen shape: {checked['cp_sat']:.6g} vs the search's"
                f" {checked['search']:.6g} (gap {100 * checked['gap']:.2g}%)",
                err=True,
            )
    return 0


def run_compile_plan_command(
    spec: Spec,
    spec_path: Path,
    plan_path: Path,
    output: Path,
    *,
    force: bool,
    echo: Echo,
    profile_files: Sequence[str] = (),
    strict_profiles: bool = False,
    rank: int | None = None,
    launchers: Sequence[str] | None = None,
) -> int:
    """`hetc compile SPEC --plan FILE [--rank N]`: check the given plan against the spec
    (`hetc.solver.given`) and compile it; returns the exit code (0 compiled, 1 a bad plan or
    profile, one positioned line per problem, or with `strict_profiles` a prediction resting on
    a formula; 2 a rank the file does not hold). Nothing is written unless every check passes.
    A file that cannot be read, or an output that must not be replaced, raises
    EnvironmentProblem (exit 4)."""
    profiles = read_profiles_for_command(
        spec, str(spec_path.parent), str(spec_path), profile_files, echo
    )
    if profiles is None:
        return 1
    try:
        text = read_plain_text(str(plan_path))
    except UnicodeDecodeError:
        raise EnvironmentProblem(f"{plan_path} is not UTF-8 text", "pass a plan.json") from None
    try:
        given = check_given_plan(text, spec, file=str(plan_path), profiles=profiles, rank=rank)
    except RankChoiceError as exc:
        echo(f"hetc: {exc}", err=True)
        return 2
    except GivenPlanError as exc:
        for diagnostic in exc.diagnostics:
            echo(diagnostic.format())
        echo(
            f"hetc: {plan_path}: {plural(len(exc.diagnostics), 'problem')}; nothing was written",
            err=True,
        )
        return 1
    fallbacks = plan_coverage(spec, profiles, given.plan)
    if strict_profiles and fallbacks:
        for line in refusal_lines("the plan's prediction", fallbacks, str(spec_path), profiles):
            echo(line)
        return 1
    echo(f"hetc: {plan_path}: read as {given.form}", err=True)
    for note in given.notes:
        echo(f"hetc: {note}", err=True)
    compiled = compile_given(
        spec,
        given,
        profiles,
        spec_file_name=spec_path.name,
        plan_file_name=plan_path.name,
        spec_dir=str(spec_path.parent),
        launchers=launchers,
    )
    in_place = _inside(plan_path, output)
    written = write_output(
        output,
        compiled.files,
        executable=compiled.executable,
        force=force,
        may_differ=frozenset({"plan.json"}) if in_place else frozenset(),
    )
    sim = given.simulation
    _say_compiled(compiled, spec_path, output, written, sim.iteration_time, sim.cost.total, echo)
    return 0


def _inside(plan_path: Path, output: Path) -> bool:
    """Whether the given plan is the output's own plan.json (edited in place): replacing the
    output then loses nothing, since the plan has been read and is compiled into it."""
    return plan_path.resolve() == (output.resolve() / "plan.json")


def _say_compiled(
    compiled: CompiledOutput,
    spec_path: Path,
    output: Path,
    written: Path,
    iteration_time: float,
    cost: float,
    echo: Echo,
) -> None:
    nodes = len({p.node for p in compiled.topology.processes})
    echo(
        f"hetc: compiled {spec_path} -> {output} ({written.name}):"
        f" {plural(compiled.topology.world_size, 'rank')} on {plural(nodes, 'node')},"
        f" {plural(len(compiled.plan.stages), 'stage')} x"
        f" {plural(len(compiled.plan.pipelines), 'pipeline')}; predicted"
        f" {format_duration(iteration_time)} and {format_usd(cost)} per iteration",
        err=True,
    )
    starts = [f"sbatch {output}/{p}" for p in sorted(compiled.files) if p.endswith(".sbatch")]
    starts += [
        f"kubectl apply -f {output}/{p}"
        for p in sorted(compiled.files)
        if p.startswith("launch/kubernetes/")
    ]
    starts += [
        f"cd {output} && sky {'jobs ' if b'execution: parallel' in data else ''}launch {p}"
        for p, data in sorted(compiled.files.items())
        if p.startswith("launch/skypilot/")
    ]
    if starts:
        echo("hetc: start with: " + "; ".join(starts), err=True)
    else:
        scripts = sorted(
            p for p in compiled.files if p.startswith("launch/node") and p.endswith(".sh")
        )
        named = (
            ", ".join(f"{output}/{p}" for p in scripts)
            if len(scripts) <= 3
            else f"{output}/{scripts[0]} ... {output}/{scripts[-1]} ({len(scripts)} scripts)"
        )
        echo(f"hetc: start each node with its script, on that node: {named}", err=True)
