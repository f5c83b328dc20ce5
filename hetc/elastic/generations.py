"""Where `hetc run -o out` keeps each generation of the job, and `hetc run --status`.

A generation is one compiled plan and the run of it, from a (re)launch to the change that
ended it. All of them are kept, beside `out`:

    out                         a link to the current generation's compiled output, so that
                                `hetc launch out` and the node scripts work as after `hetc
                                compile`
    out.elastic/generations/NNNN.<hash>/   generation NNNN's compiled output (plan.json,
                                report.md, launch scripts, ...; `hetc.emit.output` writes it
                                atomically, NNNN being its link)
    out.elastic/generations/NNNN.json      its record: why it was made (the change), the
                                quotas it was planned for, its plan, the times of each phase
                                of the reconfiguration that made it, and how its run ended
    out.elastic/run/            the run directory of every generation (HETC_RUN_DIR): the
                                checkpoints (a relative `run.checkpoint_dir` is under it, so
                                every generation resumes from the same ones), metrics, logs
    out.elastic/generations/NNNN.outcome/  the ranks' outcome records of generation NNNN,
                                moved out of the run directory before the next one starts

Records are JSON written atomically (`hetc.plan.outcome.write_outcome`'s way), so `--status`
may read them while the supervisor writes.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from hetc.schema import EnvironmentProblem
from hetc.units import plural

RECORD_FORMAT = 1


def state_dir(out: Path) -> Path:
    """`out.elastic/` beside `out`."""
    out = Path(os.path.abspath(out))
    return out.parent / f"{out.name}.elastic"


def generations_dir(out: Path) -> Path:
    return state_dir(out) / "generations"


def run_dir(out: Path) -> Path:
    return state_dir(out) / "run"


def generation_target(out: Path, number: int) -> Path:
    """The link `hetc.emit.output.write_output` makes for generation `number`."""
    return generations_dir(out) / f"{number:04d}"


def record_path(out: Path, number: int) -> Path:
    return generations_dir(out) / f"{number:04d}.json"


def write_json(path: Path, record: dict[str, Any]) -> None:
    """Write `record` atomically (a temporary file in the same folder, renamed over)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", delete=False
    ) as file:
        file.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(file.name, path)


def read_records(out: Path) -> list[dict[str, Any]]:
    """Every generation's record, oldest first; raises EnvironmentProblem when `out` was not
    run by `hetc run`, or a record cannot be read."""
    folder = generations_dir(out)
    if not folder.is_dir():
        raise EnvironmentProblem(
            f"{out} has no generations ({folder} does not exist): it was not run by `hetc run`",
            f"pass the -o directory of a `hetc run`, e.g. `hetc run --status {out}`",
        )
    records = []
    for path in sorted(folder.glob("[0-9][0-9][0-9][0-9].json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise EnvironmentProblem(
                f"cannot read {path}: {exc}", "remove the broken record or rerun `hetc run`"
            ) from None
        records.append(record)
    return records


def point_out_at(out: Path, compiled: Path) -> None:
    """Make `out` a link to `compiled` with one atomic rename (a reader sees the old
    generation or the new one). Refuses to replace anything at `out` but such a link."""
    out = Path(os.path.abspath(out))
    if (out.exists() or out.is_symlink()) and not owned_link(out):
        raise EnvironmentProblem(
            f"{out} exists and is not the link `hetc run` keeps to its current generation",
            "choose another -o, or move it away",
        )
    link = out.parent / f".{out.name}.link-{os.getpid()}"
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(os.path.relpath(compiled, out.parent), link)
    os.replace(link, out)


def owned_link(out: Path) -> bool:
    """Whether `out` is a link into its own `out.elastic/generations/`."""
    if not out.is_symlink():
        return False
    pointed = Path(os.path.normpath(out.parent / os.readlink(out)))
    return pointed.parent == generations_dir(out)


PHASES = ("checkpoint", "plan", "compile", "restart", "load")
"""A reconfiguration's phases as the supervisor sees them, in order (detection is timed
against the moment of the loss, which only whoever caused it knows: bench/reconfigure.py)."""


def phases(record: dict[str, Any]) -> dict[str, float]:
    """Seconds of each phase of the reconfiguration that made a generation: its record's
    timings (checkpoint: the old job's stop with a checkpoint; plan; compile), restart (launch
    to every rank started and checked) and load (started to the first step written, which
    includes loading the checkpoint and one step)."""
    found = dict(record.get("timings", {}))
    launched, started, training = (
        record.get(k) for k in ("launched_at", "started_at", "training_at")
    )
    if launched is not None and started is not None:
        found["restart"] = started - launched
    if started is not None and training is not None:
        found["load"] = training - started
    return {name: found[name] for name in PHASES if name in found}


def _phases(record: dict[str, Any]) -> str:
    return ", ".join(f"{name} {seconds:.2f} s" for name, seconds in phases(record).items())


def status_lines(out: Path) -> list[str]:
    """What `hetc run --status OUT` prints: one paragraph per generation, newest last."""
    records = read_records(out)
    current = os.path.realpath(out) if out.is_symlink() else None
    lines = [f"{out}: {plural(len(records), 'generation')}; run directory {run_dir(out)}"]
    for record in records:
        number = record["generation"]
        compiled = record.get("compiled")
        mark = " (current)" if compiled is not None and current == compiled else ""
        lines.append(f"generation {number:04d}{mark}: {record['reason']}")
        quotas = ", ".join(f"{label} {n}" for label, n in record.get("quotas", {}).items())
        lines.append(f"  quotas: {quotas}")
        if record.get("plan"):
            plan = record["plan"]
            lines.append(
                f"  plan {plan['hash'][:12]}: {plural(plan['world_size'], 'rank')} on"
                f" {plural(len(plan['nodes']), 'node')} ({', '.join(plan['nodes'])}),"
                f" {plural(plan['stages'], 'stage')} x {plural(plan['pipelines'], 'pipeline')},"
                " predicted"
                f" {plan['iteration_time']:.4g} s/iteration"
            )
        if record.get("refused"):
            lines.append(f"  refused: {record['refused']}")
        if phases(record):
            lines.append(f"  reconfiguration: {_phases(record)}")
        if record.get("resumed") is not None:
            lines.append(f"  resumed at step {record['resumed']}")
        lines.append(f"  ended: {record.get('ended') or 'running'}")
    return lines
