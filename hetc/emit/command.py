"""What `hetc compile` does between parsing its arguments and setting its exit code."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hetc.emit.compile import compile_output
from hetc.emit.output import write_output
from hetc.schema.spec import Spec
from hetc.solver.report import Echo, cross_check, planned_or_diagnosed


def run_compile_command(
    spec: Spec,
    spec_path: Path,
    output: Path,
    *,
    force: bool,
    top: int,
    approximations: frozenset[str] | None,
    time_limit: float | None,
    eval_limit: int | None,
    check_with_cp_sat: bool,
    echo: Echo,
    profile_files: Sequence[str] = (),
    strict_profiles: bool = False,
    measured_points: bool = False,
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
        time_limit=time_limit,
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
            f"hetc: warning: {result.search.stop_reason}: compiling the best plan so far,"
            " not proven best",
            err=True,
        )
    compiled = compile_output(
        spec, result, spec_file_name=spec_path.name, spec_dir=str(spec_path.parent)
    )
    written = write_output(output, compiled.files, executable=compiled.executable, force=force)
    best = result.proposals[0]
    sim = best.simulation
    nodes = len({p.node for p in compiled.topology.processes})
    echo(
        f"hetc: compiled {spec_path} -> {output} ({written.name}):"
        f" {compiled.topology.world_size} rank(s) on {nodes} node(s),"
        f" {len(compiled.plan.stages)} stage(s) x {len(compiled.plan.pipelines)} pipeline(s);"
        f" predicted {sim.iteration_time:.4g} s/iteration, {sim.cost.total:.4g} USD/iteration",
        err=True,
    )
    launchers = sorted(p for p in compiled.files if p.endswith(".sbatch"))
    if launchers:
        echo("hetc: start with: " + "; ".join(f"sbatch {output}/{p}" for p in launchers), err=True)
    else:
        echo(f"hetc: start each node with {output}/launch/node<index>.sh on that node", err=True)
    if check_with_cp_sat:
        checked = cross_check(result)
        if checked is not None and checked["cp_sat"] is not None:
            echo(
                f"hetc: CP-SAT on the chosen shape: {checked['cp_sat']:.6g} vs the search's"
                f" {checked['search']:.6g} (gap {100 * checked['gap']:.2g}%)",
                err=True,
            )
    return 0
