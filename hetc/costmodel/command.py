"""What `hetc simulate` does between parsing its arguments and setting its exit code."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from hetc.console import styled_output
from hetc.costmodel.coverage import coverage_lines, plan_coverage, refusal_lines
from hetc.costmodel.plan_file import PlanFileError, RankChoiceError, read_plan
from hetc.costmodel.simulate import read_profiles_for_command, simulate
from hetc.costmodel.summary import simulation_json, simulation_text
from hetc.schema import EnvironmentProblem, check_file, spec_hash
from hetc.schema.source import read_plain_text

Echo = Callable[..., None]
EXIT_INVALID, EXIT_USAGE = 1, 2


def run_simulate_command(
    spec_path: Path,
    plan_path: Path,
    *,
    as_json: bool,
    echo: Echo,
    profile_files: Sequence[str] = (),
    strict_profiles: bool = False,
    rank: int | None = None,
) -> int:
    """Simulate the plan (in any form `costmodel.plan_file` reads; `rank` chooses an entry of
    a whole `hetc plan --json` output) and print the prediction and the terms that rest on a
    formula; returns the exit code (0; 1 for an invalid spec, plan or profile, a plan made for
    other training than the spec's, or with `strict_profiles` a prediction resting on a
    formula; 2 for a rank the file does not hold). A file that cannot be read raises
    EnvironmentProblem (exit 4)."""
    checked = check_file(str(spec_path))
    if checked.spec is None:
        for diagnostic in checked.diagnostics:
            echo(diagnostic.format())
        return EXIT_INVALID
    spec = checked.spec
    try:
        text = read_plain_text(str(plan_path))
    except UnicodeDecodeError:
        raise EnvironmentProblem(f"{plan_path} is not UTF-8 text", "pass a plan.json") from None
    try:
        read = read_plan(text, spec, file=str(plan_path), rank=rank)
        if read.issues:
            raise read.at.error(read.issues)
    except RankChoiceError as exc:
        echo(f"hetc: {exc}", err=True)
        return EXIT_USAGE
    except PlanFileError as exc:
        for diagnostic in exc.diagnostics:
            echo(diagnostic.format())
        return EXIT_INVALID
    layout = read.plan
    echo(f"hetc: {plan_path}: read as {read.form}", err=True)
    if layout.spec_hash != spec_hash(spec):
        echo(f"hetc: warning: {plan_path} was made for another version of {spec_path}", err=True)
    profiles = read_profiles_for_command(
        spec, str(spec_path.parent), str(spec_path), profile_files, echo
    )
    if profiles is None:
        return EXIT_INVALID
    fallbacks = plan_coverage(spec, profiles, layout)
    if strict_profiles and fallbacks:
        for line in refusal_lines("the prediction", fallbacks, str(spec_path), profiles):
            echo(line)
        return EXIT_INVALID
    result = simulate(layout, spec, profiles=profiles)
    if as_json:
        document = simulation_json(result)
        document["formula_fallbacks"] = [
            {"device": f.device, "term": f.term, "missing": f.missing} for f in fallbacks
        ]
        echo(json.dumps(document, indent=2))
    else:
        lines = coverage_lines(fallbacks)
        heading = "cost model: " if not fallbacks else "formula where not measured:\n  "
        text = simulation_text(result, styled=styled_output())
        echo(text + "\n\n" + heading + "\n  ".join(lines))
    return 0
