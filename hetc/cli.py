"""The `hetc` command line. The YAML spec is the interface; the CLI only says what to do with it.

Exit codes: 0 success, 1 the input is invalid, 2 wrong command-line usage, 3 the spec is valid
but infeasible (a diagnosis follows), 4 environment (a file could not be read or written; a
"To fix:" line follows), 70 internal error (a bug in hetc: one line and the path of a saved
traceback).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from hetc import __version__

if TYPE_CHECKING:
    from hetc.solver.budget import Budget

EXIT_INVALID, EXIT_USAGE, EXIT_ENVIRONMENT, EXIT_INTERNAL = 1, 2, 4, 70
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a Unix tool exits with when its reader closes the pipe."""
"""Exit 3 (infeasible) comes from `solver.report.run_plan_command`, which returns it."""

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Compile a training-job spec for heterogeneous GPUs into a plan and launch files.",
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
ExactFlag = Annotated[
    bool,
    typer.Option(
        "--exact",
        help="No approximations, whatever the cluster size, and no default work budget or"
        " safety cap.",
    ),
]
ApproximationsOption = Annotated[
    str | None,
    typer.Option(
        "--approximations",
        help="Comma-separated approximations to use (see docs/planner.md); '' for none.",
    ),
]
TimeLimitOption = Annotated[
    float | None,
    typer.Option(
        "--time-limit",
        min=0.0,
        help="Wall seconds for the whole command instead of the work budget (the answer then"
        " depends on the machine's speed and load); 0 lifts the wall-clock safety cap that"
        " stands behind the work budget. Ctrl-C or SIGTERM also stops the search with the"
        " best plan so far.",
    ),
]
WorkLimitOption = Annotated[
    int | None,
    typer.Option(
        "--work-limit",
        min=1,
        help="Units of work for the whole command (search, runners-up, reranking, --explain,"
        " diagnosis): the same answer on any machine. Default 80,000,000, about 8 s on a"
        " quiet 2-core machine; none with --exact.",
    ),
]
EvalLimitOption = Annotated[
    int | None,
    typer.Option("--eval-limit", min=1, help="Scored candidates; deterministic cut-off."),
]
"""The search options `hetc plan` and `hetc compile` share."""
ProfileFiles = Annotated[
    list[Path] | None,
    typer.Option(
        "--profile", help="A measured profile to use besides the spec's `profiles:` (repeatable)."
    ),
]
StrictFlag = Annotated[
    bool,
    typer.Option(
        "--strict-profiles",
        help="Refuse a prediction resting on a formula where a profile could measure it"
        " (plan and compile search only measured points).",
    ),
]
MeasuredPointsFlag = Annotated[
    bool,
    typer.Option(
        "--measured-points",
        help="Search only the (device, microbatch, TP) points the profiles timed; other"
        " terms may still rest on formulas.",
    ),
]
RankOption = Annotated[
    int | None,
    typer.Option(
        "--rank",
        min=1,
        help="With the whole output of `hetc plan --json` as --plan: the plan to take (1).",
    ),
]
F = TypeVar("F", bound=Callable[..., Any])


def _guarded(command: F) -> F:
    """Turn a bug into one line and a saved traceback, never a traceback on the terminal."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from hetc.schema import EnvironmentProblem

        try:
            return command(*args, **kwargs)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except EnvironmentProblem as exc:
            typer.echo(f"hetc: {exc.what}\nTo fix: {exc.to_fix}", err=True)
            raise typer.Exit(EXIT_ENVIRONMENT) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except BrokenPipeError:
            # the reader went away (`hetc plan ... | head`): stop quietly, as Unix tools do;
            # stdout is pointed at /dev/null so that the interpreter's final flush is silent
            with contextlib.suppress(OSError, ValueError):  # io.UnsupportedOperation too
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(EXIT_BROKEN_PIPE) from None
        except Exception as exc:
            with tempfile.NamedTemporaryFile(
                "w", prefix="hetc-crash-", suffix=".txt", delete=False
            ) as saved:
                traceback.print_exc(file=saved)
            typer.echo(
                f"hetc: internal error ({type(exc).__name__}: {exc!s:.200}); this is a bug in"
                f" hetc {__version__}; please report it: the traceback is in {saved.name}",
                err=True,
            )
            raise typer.Exit(EXIT_INTERNAL) from None

    return wrapper  # type: ignore[return-value]


def _echo(message: str | None = None, **kwargs: Any) -> None:
    """typer.echo that keeps rich's escape codes when HETC_COLOR=always forces them into a
    pipe (click strips them from a stream that is not a terminal)."""
    from hetc.console import color_mode

    typer.echo(message, color=True if color_mode() == "always" else None, **kwargs)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"hetc {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """hetc: plans and launch files for LLM training on the GPUs you can get."""


@app.command()
@_guarded
def validate(
    files: Annotated[list[Path], typer.Argument(help="Spec files to check.")],
    as_json: JsonFlag = False,
    strict: Annotated[bool, typer.Option("--strict", help="Treat warnings as errors.")] = False,
) -> None:
    """Check spec files; print every problem as FILE:LINE:COL: path: message."""
    from hetc.schema import EnvironmentProblem, check_file

    results, unreadable = [], []
    for file in files:
        try:
            results.append(check_file(str(file)))
        except EnvironmentProblem as exc:
            unreadable.append(exc)
    invalid = [r for r in results if r.errors or (strict and r.warnings)]
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "valid": not invalid and not unreadable,
                    "files": [
                        {
                            "file": r.file,
                            "valid": r not in invalid,
                            "diagnostics": [d.as_json() for d in r.diagnostics],
                        }
                        for r in results
                    ],
                    "unreadable": [{"problem": e.what, "to_fix": e.to_fix} for e in unreadable],
                },
                indent=2,
            )
        )
    else:
        from hetc.console import diagnostic_line
        from hetc.units import plural

        for result in results:
            for diagnostic in result.diagnostics:
                _echo(diagnostic_line(diagnostic.format(), diagnostic.severity))
        for problem in unreadable:
            typer.echo(f"hetc: {problem.what}\nTo fix: {problem.to_fix}", err=True)
        errors = sum(len(r.errors) for r in results)
        warnings = sum(len(r.warnings) for r in results)
        typer.echo(
            f"hetc: {len(results) - len(invalid)} of {plural(len(files), 'file')} valid"
            f" ({plural(errors, 'error')}, {plural(warnings, 'warning')})",
            err=True,
        )
    if unreadable:
        raise typer.Exit(EXIT_ENVIRONMENT)
    if invalid:
        raise typer.Exit(EXIT_INVALID)


@app.command()
@_guarded
def simulate(
    spec: Annotated[Path, typer.Argument(help="The spec the plan was made for.")],
    plan: Annotated[
        Path,
        typer.Option(
            "--plan",
            help="The plan: a plan.json, the output of `hetc plan --json` (see --rank) or one"
            " entry of its plans.",
        ),
    ],
    rank: RankOption = None,
    as_json: JsonFlag = False,
    profile: ProfileFiles = None,
    strict_profiles: StrictFlag = False,
) -> None:
    """Predict a plan's iteration time, throughput, memory per rank and cost; a plan made for
    another model, global batch, sequence length or precision is refused."""
    from hetc.costmodel.command import run_simulate_command

    code = run_simulate_command(
        spec,
        plan,
        as_json=as_json,
        echo=_echo,
        profile_files=[str(p) for p in profile or ()],
        strict_profiles=strict_profiles,
        rank=rank,
    )
    if code:
        raise typer.Exit(code)


@app.command("plan")
@_guarded
def plan_command(
    spec: Annotated[Path, typer.Argument(help="The spec to plan.")],
    top: Annotated[int, typer.Option("--top", min=1, help="Plans to show, best first.")] = 3,
    as_json: JsonFlag = False,
    explain: Annotated[
        bool, typer.Option("--explain", help="For each unused pool, the best plan that uses it.")
    ] = False,
    exact: ExactFlag = False,
    approximations: ApproximationsOption = None,
    time_limit: TimeLimitOption = None,
    work_limit: WorkLimitOption = None,
    eval_limit: EvalLimitOption = None,
    solver: Annotated[
        str, typer.Option("--solver", help="`search` (default) or `cp-sat` (cross-check).")
    ] = "search",
    profile: ProfileFiles = None,
    strict_profiles: StrictFlag = False,
    measured_points: MeasuredPointsFlag = False,
) -> None:
    """Choose the devices to rent and how to parallelise over them; print the best plans."""
    started = time.perf_counter()
    from hetc.solver.report import run_plan_command

    if solver not in ("search", "cp-sat"):
        typer.echo(f"hetc: --solver {solver!r}: use `search` or `cp-sat`", err=True)
        raise typer.Exit(EXIT_USAGE)
    checked = _checked_spec(spec)
    code = run_plan_command(
        checked,
        str(spec.parent),
        top=top,
        as_json=as_json,
        explain=explain,
        approximations=_approximations(exact, approximations),
        budget=_budget(exact, time_limit, work_limit, started),
        eval_limit=eval_limit,
        solver=solver,
        echo=_echo,
        profile_files=[str(p) for p in profile or ()],
        strict_profiles=strict_profiles,
        measured_points=measured_points,
        spec_file=str(spec),
    )
    if code:
        raise typer.Exit(code)


@app.command("compile")
@_guarded
def compile_command(
    spec: Annotated[Path, typer.Argument(help="The spec to compile.")],
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help="Output: a link to out.<hash>/, swapped atomically."),
    ],
    force: Annotated[
        bool, typer.Option("--force", help="Replace an output hetc did not write (or was edited).")
    ] = False,
    top: Annotated[
        int | None,
        typer.Option("--top", min=1, help="Plans in the report: the best and alternatives (3)."),
    ] = None,
    exact: ExactFlag = False,
    approximations: ApproximationsOption = None,
    time_limit: TimeLimitOption = None,
    work_limit: WorkLimitOption = None,
    eval_limit: EvalLimitOption = None,
    cross_check: Annotated[
        bool, typer.Option("--cross-check", help="Also solve the chosen shape with CP-SAT.")
    ] = False,
    profile: ProfileFiles = None,
    strict_profiles: StrictFlag = False,
    measured_points: MeasuredPointsFlag = False,
    plan: Annotated[
        Path | None,
        typer.Option(
            "--plan",
            help="Compile this plan (a plan.json, the output of `hetc plan --json` (see"
            " --rank) or one entry of its plans) instead of searching; it is checked against"
            " the spec first.",
        ),
    ] = None,
    rank: RankOption = None,
    launcher: Annotated[
        str | None,
        typer.Option(
            "--launcher",
            help="Launch files to write for every site, comma-separated: torchrun, slurm,"
            " skypilot, kubernetes (default: each site's scheduler; node scripts always).",
        ),
    ] = None,
) -> None:
    """Plan the spec (or take --plan) and write plan, topology, DeepSpeed configs, launch
    scripts and report."""
    started = time.perf_counter()
    from hetc.emit.command import run_compile_command, run_compile_plan_command
    from hetc.emit.launchers import UnknownLauncher, parse_launchers

    launchers = None
    if launcher is not None:
        try:
            launchers = parse_launchers(launcher)
        except UnknownLauncher as exc:
            typer.echo(f"hetc: {exc}", err=True)
            raise typer.Exit(EXIT_USAGE) from None

    searching = {
        "--top": top is not None,
        "--exact": exact,
        "--approximations": approximations is not None,
        "--time-limit": time_limit is not None,
        "--work-limit": work_limit is not None,
        "--eval-limit": eval_limit is not None,
        "--cross-check": cross_check,
        "--measured-points": measured_points,
    }
    if plan is None and rank is not None:
        typer.echo("hetc: --rank chooses a plan of --plan's file; give --plan too", err=True)
        raise typer.Exit(EXIT_USAGE)
    if plan is not None:
        given = [name for name, used in searching.items() if used]
        if given:
            typer.echo(
                f"hetc: {', '.join(given)}: search options do not apply with --plan, which"
                " compiles the given plan without searching",
                err=True,
            )
            raise typer.Exit(EXIT_USAGE)
        code = run_compile_plan_command(
            _checked_spec(spec),
            spec,
            plan,
            output,
            force=force,
            echo=typer.echo,
            profile_files=[str(p) for p in profile or ()],
            strict_profiles=strict_profiles,
            rank=rank,
            launchers=launchers,
        )
        if code:
            raise typer.Exit(code)
        return
    checked = _checked_spec(spec)
    code = run_compile_command(
        checked,
        spec,
        output,
        force=force,
        top=3 if top is None else top,
        approximations=_approximations(exact, approximations),
        budget=_budget(exact, time_limit, work_limit, started),
        eval_limit=eval_limit,
        check_with_cp_sat=cross_check,
        echo=typer.echo,
        profile_files=[str(p) for p in profile or ()],
        strict_profiles=strict_profiles,
        measured_points=measured_points,
        launchers=launchers,
    )
    if code:
        raise typer.Exit(code)


@app.command()
@_guarded
def launch(
    out_dir: Annotated[Path, typer.Argument(help="What `hetc compile` wrote.")],
    run_dir: Annotated[
        Path, typer.Option("--run-dir", help="Where ranks write start-up records (HETC_RUN_DIR).")
    ] = Path("hetc-run"),
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", min=0.0, help="Seconds; then stop every node and fail."),
    ] = None,
    node: Annotated[
        list[int] | None,
        typer.Option("--node", min=0, help="Start only this node index (repeatable; debugging)."),
    ] = None,
    from_scratch: Annotated[
        bool,
        typer.Option(
            "--from-scratch", help="Start at step 0 instead of the newest complete checkpoint."
        ),
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print only errors and the final summary.")
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", help="Also stream every node's output (kept in its log)."),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Launch even a plan this host lacks the devices or cores for."
        ),
    ] = False,
) -> None:
    """Run every node script of a compiled plan on this host with one progress line per node
    and a summary at the end; each node's output goes to RUN_DIR/logs/node<NNNN>.log. Resumes
    from the run's newest complete checkpoint unless --from-scratch."""
    import sys

    from hetc.local_launch import run_launch

    code = run_launch(
        out_dir,
        run_dir=run_dir,
        timeout=timeout,
        only=node or (),
        echo=typer.echo,
        from_scratch=from_scratch,
        quiet=quiet,
        verbose=verbose,
        force=force,
        on_terminal=sys.stderr.isatty(),
    )
    if code:
        raise typer.Exit(code)


@app.command("run")
@_guarded
def run_command(
    spec: Annotated[Path | None, typer.Argument(help="The spec to run.")] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Output: a link to the current generation."),
    ] = None,
    availability: Annotated[
        Path | None,
        typer.Option(
            "--availability", help="A YAML file of the devices each pool has now, watched."
        ),
    ] = None,
    tolerance: Annotated[
        float,
        typer.Option(
            "--tolerance",
            min=0.0,
            help="Keep the running devices if the plan doing so is within this fraction of"
            " the best objective (0.05: 5%).",
        ),
    ] = 0.05,
    from_scratch: Annotated[
        bool, typer.Option("--from-scratch", help="The first generation starts at step 0.")
    ] = False,
    status: Annotated[
        Path | None,
        typer.Option("--status", help="Show the generations of a `hetc run -o OUT` and exit."),
    ] = None,
) -> None:
    """Compile, launch on this host and supervise: re-plan, recompile and resume when a node
    is lost or the availability file changes (docs/elastic.md)."""
    if status is not None:
        from hetc.elastic.generations import status_lines

        for line in status_lines(status):
            typer.echo(line)
        return
    if spec is None or output is None:
        typer.echo("hetc: run needs SPEC and -o OUT (or --status OUT)", err=True)
        raise typer.Exit(EXIT_USAGE)
    from hetc.elastic.supervisor import RunOptions, run_supervisor

    code = run_supervisor(
        _checked_spec(spec),
        spec,
        output,
        RunOptions(availability=availability, tolerance=tolerance, from_scratch=from_scratch),
        typer.echo,
    )
    if code:
        raise typer.Exit(code)


@app.command()
@_guarded
def calibrate(
    run_dir: Annotated[
        Path, typer.Argument(help="The run's HETC_RUN_DIR (metrics/ and startup/ records).")
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="The corrected profile (a folder: one per device). Without it: report only.",
        ),
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="The compiled output the run ran (default: as recorded)."),
    ] = None,
    spec: Annotated[
        Path | None,
        typer.Option("--spec", help="The spec, instead of the output's spec.json."),
    ] = None,
    profile: Annotated[
        list[Path] | None,
        typer.Option("--profile", help="The profile to correct for its device (repeatable)."),
    ] = None,
    warmup: Annotated[
        int, typer.Option("--warmup", min=0, help="Steps of each run left out at its start.")
    ] = 3,
    check: Annotated[
        list[Path] | None,
        typer.Option(
            "--check", help="A run of another plan of the spec to predict (held out; repeatable)."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Fit the cost model to a short run: compare it rank by rank with the prediction, write
    a corrected profile, show the errors before and after."""
    from hetc.costmodel.calibrate_command import run_calibrate_command

    code = run_calibrate_command(
        run_dir,
        output=output,
        out_dir=out_dir,
        spec_file=spec,
        profile_files=profile or (),
        warmup=warmup,
        checks=check or (),
        as_json=as_json,
        echo=typer.echo,
    )
    if code:
        raise typer.Exit(code)


profile_app = typer.Typer(
    no_args_is_help=True,
    help="Measure a device's per-layer times, memory and bandwidths, or import published ones.",
)
app.add_typer(profile_app, name="profile")


@profile_app.command("import")
@_guarded
def profile_import(
    source: Annotated[
        Path,
        typer.Argument(
            help="A Sailor layer-profiles/MODEL/GPU/profile.json, or the measurements folder."
        ),
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The profile file (a folder for a whole tree).")
    ],
) -> None:
    """Convert published measurements (Sailor's formats) into hetc profiles."""
    from hetc.costmodel.published import run_import_command

    code = run_import_command(source, output, echo=typer.echo)
    if code:
        raise typer.Exit(code)


@profile_app.command("measure")
@_guarded
def profile_measure(
    spec: Annotated[Path, typer.Argument(help="The spec whose model to profile.")],
    device: Annotated[str, typer.Option("--device", help="The spec's device this machine has.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The profile file to write.")],
    zone: Annotated[
        str | None,
        typer.Option(
            "--zone",
            help="The spec's zone this node is in (default: $HETC_ZONE, else the spec's only"
            " zone); under torchrun, where the links between nodes are filed.",
        ),
    ] = None,
    microbatch: Annotated[
        str | None,
        typer.Option(
            "--microbatch",
            help="Microbatch sizes to time, comma-separated (default: every size the planner"
            " considers).",
        ),
    ] = None,
    tp: Annotated[
        str | None,
        typer.Option(
            "--tp",
            help="TP degrees, comma-separated (default: every degree the planner gives the"
            " device's pools).",
        ),
    ] = None,
    warmup: Annotated[
        int, typer.Option("--warmup", min=0, help="Untimed iterations before timing.")
    ] = 3,
    repeats: Annotated[
        int, typer.Option("--repeats", min=1, help="Timed iterations; the median is kept.")
    ] = 10,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads",
            min=1,
            help="Threads per rank (default: as the runtime: on CPU $OMP_NUM_THREADS or 1).",
        ),
    ] = None,
    no_network: Annotated[
        bool, typer.Option("--no-network", help="Skip the collectives' bandwidth sweep.")
    ] = False,
    network_devices: Annotated[
        int | None,
        typer.Option(
            "--network-devices", min=1, help="Devices in the collectives (default: a node's)."
        ),
    ] = None,
    sizes: Annotated[
        str | None,
        typer.Option(
            "--sizes", help="Message sizes, e.g. 4KiB,1MiB,64MiB (default 4 KiB..64 MiB)."
        ),
    ] = None,
    budget: Annotated[
        float | None,
        typer.Option(
            "--budget",
            min=0.0,
            help="Seconds; then stop after the point in progress and write what was measured.",
        ),
    ] = None,
    remeasure: Annotated[
        bool,
        typer.Option("--remeasure", help="Measure every point again, not only what -o lacks."),
    ] = False,
) -> None:
    """Time and size each layer kind of the spec's model on this machine's device at every
    point the planner may choose; measure its collectives; write a profile that specs list
    under `profiles:` (points the output file holds already are kept)."""
    import sys

    try:
        from hetc.profiler.command import run_measure_command
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "torch":
            raise
        from hetc.schema import EnvironmentProblem

        raise EnvironmentProblem(
            f"`hetc profile measure` runs the model with torch, which {sys.executable} cannot"
            " import",
            f"install the runtime extra into this environment: {sys.executable} -m pip install"
            " torch==2.13.0 'deepspeed>=0.19,<0.20' (torch pinned: unpinned, pip picks a CUDA"
            " build)",
        ) from None

    code = run_measure_command(
        _checked_spec(spec),
        spec,
        device,
        output,
        echo=typer.echo,
        zone=zone,
        microbatch=microbatch,
        tp=tp,
        warmup=warmup,
        repeats=repeats,
        threads=threads,
        network=not no_network,
        network_devices=network_devices,
        sizes=sizes,
        budget=budget,
        remeasure=remeasure,
        terminal=sys.stderr.isatty(),
    )
    if code:
        raise typer.Exit(code)


def _approximations(exact: bool, given: str | None) -> frozenset[str] | None:
    """--exact / --approximations as the planner takes them (None: its default)."""
    if exact:
        return frozenset()
    if given is not None:
        return frozenset(a.strip() for a in given.split(",") if a.strip())
    return None


def _budget(
    exact: bool, time_limit: float | None, work_limit: int | None, started: float
) -> Budget:
    """The command's budget from its flags (`solver.budget.command_budget`)."""
    from hetc.solver.budget import command_budget

    return command_budget(
        exact=exact, time_limit=time_limit, work_limit=work_limit, started=started
    )


def _checked_spec(spec: Path) -> Any:
    """The typed spec of a valid file, with each warning `hetc validate` gives it on stderr,
    once, in its form (a model field the runtime cannot train, an implausible magnitude,
    ...); print its diagnostics and exit 1 where it is invalid."""
    from hetc.schema import check_file

    checked = check_file(str(spec))
    if checked.spec is None:
        for diagnostic in checked.diagnostics:
            typer.echo(diagnostic.format())
        raise typer.Exit(EXIT_INVALID)
    for diagnostic in checked.warnings:
        typer.echo(diagnostic.format(), err=True)
    return checked.spec


@app.command()
@_guarded
def schema(as_json: JsonFlag = False) -> None:
    """Print the spec's JSON Schema (draft-07), for editors and other tools."""
    from hetc.schema import spec_schema_text

    typer.echo(spec_schema_text(), nl=False)


def main() -> None:
    """Console-script entry point."""
    app(prog_name="hetc")
