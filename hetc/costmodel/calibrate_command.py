"""`hetc calibrate RUN_DIR`: find what a run was predicted from, calibrate, report, write.

What the command needs besides RUN_DIR, and where it finds it: the compiled output the run
started from is named by the run's start-up records (`startup/rank-<r>.json`, `out_dir`, which
every rank writes however it was started: `hetc launch`, node scripts or Slurm); `--out`
overrides it (a run directory copied off the cluster, say). From the output it reads
`plan.json` and `spec.json`, the normalised spec and the profiles the prediction used
(`hetc.costmodel.compiled`); `--spec` takes a YAML spec (and its `profiles:`) instead, and
`--profile` replaces the recorded profile of its device (the profile to correct). The metrics
must be of that output's plan (`hetc.costmodel.measured` checks the plan hash of every line).

Output: a table of measured against predicted, before and after, for the iteration time and
each rank's compute, communication, idle and peak memory; the fitted factors; what could not
be corrected. With `-o`, the corrected profile of each device of the plan: `-o FILE` when the
plan uses one device, `-o DIR` (an existing folder) for `<model>--<device>.json` each. A
profile keeps its measured points and gains a `meta.calibration` record per calibration (the
run, date, factors, errors before and after). Every output is computed before the first is
written, and each is written atomically. `--check OTHER_RUN` predicts another run of the same
spec (another plan: other stages, replicas or microbatch) with the corrected profiles and
reports its errors before and after: the held-out test of the fit.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hetc.costmodel.calibrate import Calibration, Prediction, calibrate, predict
from hetc.costmodel.compiled import read_compiled_spec
from hetc.costmodel.measured import RunDataError, RunMeasurement, read_run, recorded_output
from hetc.costmodel.profile import LayerProfile, ProfileError, write_profile
from hetc.costmodel.published import profile_file_name
from hetc.costmodel.simulate import read_spec_profiles
from hetc.plan import Plan, PlanFormatError, plan_from_json
from hetc.plan.topology import plan_hash, topology_of
from hetc.schema import EnvironmentProblem, Spec, check_file, spec_hash
from hetc.units import fixed, plural

Echo = Callable[..., None]

EXIT_INVALID, EXIT_USAGE = 1, 2
SECTIONS = ("compute", "communication", "idle")


@dataclass(frozen=True, kw_only=True, slots=True)
class Run:
    """A run and what it was predicted from."""

    out_dir: Path
    plan: Plan
    measured: RunMeasurement


def run_calibrate_command(
    run_dir: Path,
    *,
    output: Path | None,
    out_dir: Path | None,
    spec_file: Path | None,
    profile_files: Sequence[Path],
    warmup: int,
    checks: Sequence[Path],
    as_json: bool,
    echo: Echo,
) -> int:
    """The whole command; returns the exit code (0 done, 1 invalid input, 2 usage). A
    directory or file that cannot be read or written raises `EnvironmentProblem` (exit 4)."""
    try:
        spec, base, run = _inputs(run_dir, out_dir, spec_file, profile_files, warmup)
        used = sorted({r.device for s in run.plan.stages for r in s.replicas})
        targets = _targets(output, used, spec)
        result = calibrate(run.plan, spec, base, run.measured)
        held_out = [_check(path, spec, base, result, warmup) for path in checks]
    except RunDataError as exc:
        echo(f"hetc: {exc.what}\nTo fix: {exc.to_fix}", err=True)
        return EXIT_INVALID
    except ProfileError as exc:
        echo(f"hetc: {exc}\nTo fix: pass the profile the run was compiled with", err=True)
        return EXIT_INVALID
    except _UsageError as exc:
        echo(f"hetc: {exc}", err=True)
        return EXIT_USAGE
    profiles = {
        d: _with_record(p, d, run, result) for d, p in result.profiles.items() if d in targets
    }
    report = _report(run, result, held_out)
    for device, path in targets.items():
        try:
            write_profile(profiles[device], path)
        except OSError as exc:
            raise EnvironmentProblem(
                f"cannot write {path}: {exc.strerror or exc}",
                "choose an -o in a writable folder",
            ) from None
    report["written"] = {d: str(p) for d, p in targets.items()}
    if as_json:
        echo(json.dumps(report, indent=2, sort_keys=True))
    else:
        for line in _text(report):
            echo(line)
        for device, path in targets.items():
            echo(
                f"hetc: wrote {path} ({device}): plan with it by `hetc compile SPEC --profile"
                f" {path}` (where the spec lists a profile of {device} under `profiles:`, list"
                " this one there instead)",
                err=True,
            )
    return 0


class _UsageError(ValueError):
    """An option that cannot work with this run (exit 2)."""


def _inputs(
    run_dir: Path,
    out_dir: Path | None,
    spec_file: Path | None,
    profile_files: Sequence[Path],
    warmup: int,
) -> tuple[Spec, list[LayerProfile], Run]:
    out = out_dir if out_dir is not None else recorded_output(run_dir)
    plan = _plan(out)
    if spec_file is not None:
        spec = _spec(spec_file)
        profiles = read_spec_profiles(
            spec, str(spec_file.parent), extra=[str(p) for p in profile_files]
        )
    else:
        spec, recorded = read_compiled_spec(out)
        given = read_spec_profiles(
            replace(spec, profiles=()), ".", extra=[str(p) for p in profile_files]
        )
        mine = {p.device for p in given}
        profiles = [p for p in recorded if p.device not in mine] + given
    if spec_hash(spec) != plan.spec_hash:
        raise RunDataError(
            f"{out / 'plan.json'} was made for another spec than "
            f"{spec_file if spec_file is not None else out / 'spec.json'}",
            "pass the spec the plan was compiled from (--spec), or the output the run ran (--out)",
        )
    return spec, profiles, _run(run_dir, out, plan, spec, warmup)


def _plan(out: Path) -> Plan:
    path = out / "plan.json"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvironmentProblem(
            f"cannot read {path}: {exc}", "pass the compiled output the run ran with --out"
        ) from None
    try:
        return plan_from_json(text)
    except PlanFormatError as exc:
        raise RunDataError(
            f"{path}: " + "; ".join(exc.problems), "recompile the spec; never edit an output"
        ) from None


def _spec(path: Path) -> Spec:
    checked = check_file(str(path))
    if checked.spec is None:
        raise RunDataError(
            "; ".join(d.format() for d in checked.errors), f"correct {path} (`hetc validate`)"
        )
    return checked.spec


def _run(run_dir: Path, out: Path, plan: Plan, spec: Spec, warmup: int) -> Run:
    topology = topology_of(plan, tied_embeddings=spec.model.tied_embeddings)
    cpu = any(spec.devices[n.device].kind == "cpu" for n in plan.nodes)
    measured = read_run(
        run_dir,
        plan_hash=plan_hash(plan),
        world_size=topology.world_size,
        warmup=warmup,
        cpu=cpu,
    )
    return Run(out_dir=out, plan=plan, measured=measured)


def _targets(output: Path | None, used: list[str], spec: Spec) -> dict[str, Path]:
    """Device -> the file its corrected profile goes to."""
    if output is None:
        return {}
    if output.is_dir():
        return {d: output / profile_file_name(_named(spec, d)) for d in used}
    if len(used) > 1:
        raise _UsageError(
            f"-o {output}: the plan uses {len(used)} devices ({', '.join(used)}), one profile"
            " each: give -o an existing folder"
        )
    if not output.parent.is_dir():
        raise EnvironmentProblem(
            f"cannot write {output}: {output.parent} is not a folder", "create it first"
        )
    return {used[0]: output}


def _named(spec: Spec, device: str) -> LayerProfile:
    """A stand-in naming the profile of `device` for `profile_file_name`."""
    return LayerProfile(
        model=spec.model_name,
        device=device,
        precision=spec.training.precision,
        seq_len=spec.training.seq_len,
        times={},
    )


def _check(
    path: Path, spec: Spec, base: list[LayerProfile], result: Calibration, warmup: int
) -> dict[str, Any]:
    """A held-out run: its errors with the profiles before and after calibration."""
    out = recorded_output(path)
    plan = _plan(out)
    if plan.spec_hash != spec_hash(spec):
        raise RunDataError(
            f"--check {path}: ran a plan of another spec ({out})",
            "check runs of the spec that was calibrated",
        )
    run = _run(path, out, plan, spec, warmup)
    before = predict(plan, spec, base)
    after = predict(plan, spec, list(result.profiles.values()))
    return {"run": str(path), **_comparison(run.measured, before, after)}


def _error(predicted: float, measured: float) -> float | None:
    return None if measured == 0 else 100.0 * (predicted - measured) / measured


def _comparison(measured: RunMeasurement, before: Prediction, after: Prediction) -> dict[str, Any]:
    """Measured, predicted and error (%) of the iteration and of every rank's sections."""
    ranks = []
    for m, b, a in zip(measured.ranks, before.ranks, after.ranks, strict=True):
        row: dict[str, Any] = {"rank": m.rank, "key": b.key, "device": b.device, "stage": b.stage}
        for section in SECTIONS:
            value = getattr(m, section)
            row[section] = {
                "measured": value,
                "before": getattr(b, section),
                "after": getattr(a, section),
            }
        row["peak_bytes"] = {
            "measured": m.peak_bytes,
            "before": b.peak_bytes,
            "after": a.peak_bytes,
        }
        ranks.append(row)
    return {
        "plan_hash": measured.plan_hash,
        "steps": list(measured.steps),
        "iteration_time": {
            "measured": measured.iteration_time,
            "before": before.iteration_time,
            "after": after.iteration_time,
            "error_before": _error(before.iteration_time, measured.iteration_time),
            "error_after": _error(after.iteration_time, measured.iteration_time),
        },
        "ranks": ranks,
    }


def _report(run: Run, result: Calibration, held_out: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "run": run.measured.run_dir,
        "out_dir": str(run.out_dir),
        **_comparison(run.measured, result.before, result.after),
        "factors": _factors(result),
        "notes": list(result.notes),
        "checks": held_out,
    }


def _factors(result: Calibration) -> dict[str, Any]:
    return {
        "compute": result.compute,
        "links": [
            {
                "knobs": [{"device": d, "scope": s, "collective": c} for d, s, c in link.knobs],
                "ranks": list(link.ranks),
                "factor": link.factor,
            }
            for link in result.links
        ],
        "activations": result.activations,
    }


def _with_record(profile: LayerProfile, device: str, run: Run, result: Calibration) -> LayerProfile:
    """`profile` with this calibration appended to `meta.calibration`."""
    comparison = _comparison(run.measured, result.before, result.after)
    record = {
        "run": str(Path(run.measured.run_dir).resolve()),
        "plan_hash": run.measured.plan_hash,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "steps": [run.measured.steps[0], run.measured.steps[-1], len(run.measured.steps)],
        "compute_scale": result.compute[device],
        "link_scales": [
            {"scope": s, "collective": c, "factor": link.factor}
            for link in result.links
            for d, s, c in link.knobs
            if d == device
        ],
        "activation_scale": result.activations[device],
        "iteration_time": comparison["iteration_time"],
        "ranks": [r for r in comparison["ranks"] if r["device"] == device],
    }
    history = profile.meta.get("calibration", [])
    earlier = history if isinstance(history, list) else [history]
    return replace(profile, meta={**profile.meta, "calibration": [*earlier, record]})


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{fixed(seconds * 1e3, 4)} ms"


def _mib(nbytes: float | None) -> str:
    return "-" if nbytes is None else f"{fixed(nbytes / 2**20, 4)} MiB"


def _cell(
    value: float,
    measured: float | None,
    unit: Callable[[float | None], str],
    *,
    relative_to: float | None = None,
) -> str:
    """`value (+x.x%)`: the error relative to `measured`, or to `relative_to` when given."""
    error = None if measured is None else _section_error(value, measured, relative_to)
    return unit(value) + ("" if error is None else f" ({error:+.1f}%)")


def _section_error(value: float, measured: float, relative_to: float | None) -> float | None:
    if relative_to is None:
        return _error(value, measured)
    return None if relative_to == 0 else 100.0 * (value - measured) / relative_to


def _table(comparison: dict[str, Any]) -> list[str]:
    rows = [("", "measured", "before", "after")]
    it = comparison["iteration_time"]
    whole = it["measured"]
    rows.append(
        (
            "iteration time",
            _ms(it["measured"]),
            _cell(it["before"], it["measured"], _ms),
            _cell(it["after"], it["measured"], _ms),
        )
    )
    for r in comparison["ranks"]:
        name = f"rank {r['rank']} (stage {r['stage']}, {r['device']})"
        for section in (*SECTIONS, "peak_bytes"):
            memory = section == "peak_bytes"
            unit, base = (_mib, None) if memory else (_ms, whole)
            v = r[section]
            rows.append(
                (
                    f"{name} {'peak memory' if memory else section}",
                    unit(v["measured"]),
                    _cell(v["before"], v["measured"], unit, relative_to=base),
                    _cell(v["after"], v["measured"], unit, relative_to=base),
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _summary(comparison: dict[str, Any]) -> list[str]:
    parts = []
    for when in ("before", "after"):
        whole = comparison["iteration_time"]["measured"]
        errors = [
            abs(r[s][when] - r[s]["measured"]) / whole * 100
            for r in comparison["ranks"]
            for s in SECTIONS
        ]
        under = sum(
            1
            for r in comparison["ranks"]
            if r["peak_bytes"]["measured"] is not None
            and r["peak_bytes"][when] < r["peak_bytes"]["measured"]
        )
        error = comparison["iteration_time"][f"error_{when}"]
        parts.append(
            f"{when}: iteration time {error:+.1f}%, rank sections mean |error|"
            f" {statistics.fmean(errors):.1f}% of the iteration, peak memory under-predicted"
            f" on {plural(under, 'rank')}"
        )
    return parts


def _text(report: dict[str, Any]) -> list[str]:
    lines = [
        f"run {report['run']} of plan {report['plan_hash'][:12]} ({report['out_dir']}): steps"
        f" {report['steps'][0]}..{report['steps'][-1]} used ({len(report['steps'])}); a"
        " section's error is in % of the measured iteration time",
        *_table(report),
        *_summary(report),
        "factors:",
    ]
    factors = report["factors"]
    for device, scale in factors["compute"].items():
        lines.append(f"  {device}: layer times x{fixed(scale, 4)}")
    for link in factors["links"]:
        knobs = " + ".join(f"{k['device']} {k['scope']} {k['collective']}" for k in link["knobs"])
        ranks = ", ".join(map(str, link["ranks"]))
        lines.append(f"  {knobs}: bandwidth x{fixed(link['factor'], 4)} (ranks {ranks})")
    for device, scale in factors["activations"].items():
        lines.append(f"  {device}: activation bytes x{fixed(scale, 4)}")
    lines += [f"note: {note}" for note in report["notes"]]
    for check in report["checks"]:
        lines += [
            f"held out: run {check['run']} of plan {check['plan_hash'][:12]}",
            *_table(check),
            *_summary(check),
        ]
    return lines
