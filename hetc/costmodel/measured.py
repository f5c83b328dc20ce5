"""What a run measured: the runtime's records in HETC_RUN_DIR, read and summarised per rank.

The runtime (`hetc.runtime`) leaves, in the run directory, a start-up record per rank
(`startup/rank-<r>.json`, naming the compiled output it ran and the plan hash) and one JSON line
per rank and step (`metrics/rank-<r>.jsonl`: seconds, and the seconds in compute,
communication and idle; peak bytes; the plan hash). They are there however the run was started
(`hetc launch`, node scripts, Slurm), as long as every rank was given the same HETC_RUN_DIR.

Which steps count: a rank file may hold several runs (a re-run into the same directory, or a
resumed run): a run starts where the step number does not follow the previous line's, and only
each rank's last run is read. Its first `warmup` steps are left out (start-up, first-touch
allocation, caches), and on CPU also every step whose peak memory was tracked
(`HETC_CPU_MEMORY_EVERY`: steps 0, 1 and every 50th), since the tracking dispatch mode makes
them several times slower. The steps left on every rank are the ones used. Of those, each
rank keeps the middle half by seconds (an interquartile mean: a step slowed by another process
on the machine, or one sped up by a neighbour's lag, does not move it, and unlike medians its
compute, communication and idle add up to its seconds), and its numbers are their means. The
ranks run in lockstep (every iteration ends in reductions over all of them), so each rank's
mean seconds estimates the same iteration time, a rank's offset from its neighbours moving
only its split; the run's iteration time is their mean. The slowest rank's median, or a
per-step maximum over ranks, is biased upward by exactly those offsets (by 10-15% with four
processes on two cores). Peak memory is the most any tracked step of the last run recorded.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from hetc.schema import EnvironmentProblem
from hetc.units import plural

MIN_STEPS = 3
"""Steps needed on every rank after the warm-up, for a median that one outlier cannot move."""

NUMBERS = ("seconds", "compute_seconds", "communication_seconds", "idle_seconds")


class RunDataError(ValueError):
    """A run's records are malformed, incomplete or of another plan: `what` names the file
    (and line), `to_fix` what would make them usable."""

    def __init__(self, what: str, to_fix: str) -> None:
        super().__init__(what)
        self.what = what
        self.to_fix = to_fix


@dataclass(frozen=True, kw_only=True, slots=True)
class RankMeasurement:
    """One rank's means over its steps used (see the module docstring), in seconds, and its
    peak memory."""

    rank: int
    seconds: float
    compute: float
    communication: float
    idle: float
    peak_bytes: float | None
    """None when no step of the run tracked it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunMeasurement:
    """What one run measured, per plan rank."""

    run_dir: str
    plan_hash: str
    iteration_time: float
    """The mean of the ranks' seconds (see the module docstring)."""
    steps: tuple[int, ...]
    """The steps used (on every rank)."""
    ranks: tuple[RankMeasurement, ...]
    """By plan rank."""


def _rerun_hint() -> str:
    return (
        "pass the run directory every rank of the run wrote to (HETC_RUN_DIR: `hetc launch"
        " --run-dir`, ./hetc-run for node scripts, hetc-run-<job id> under Slurm)"
    )


def recorded_output(run_dir: Path) -> Path:
    """The compiled output the run's ranks started from, as their start-up records name it."""
    _check_directory(run_dir)
    records = sorted((run_dir / "startup").glob("rank-*.json"))
    named: list[str] = []
    for path in records:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(record, dict) and isinstance(record.get("out_dir"), str):
            named.append(record["out_dir"])
    if not named:
        raise EnvironmentProblem(
            f"{run_dir} has no start-up record naming the compiled output (startup/rank-*.json"
            " with `out_dir`, which this hetc's runtime writes)",
            "pass the compiled output with --out",
        )
    out = Path(named[0])
    if not (out / "plan.json").is_file():
        raise EnvironmentProblem(
            f"{run_dir}'s start-up records name {out} as the compiled output, and it has no"
            " plan.json here",
            "pass where the compiled output is on this machine with --out",
        )
    return out


def _check_directory(run_dir: Path) -> None:
    if not run_dir.is_dir():
        raise EnvironmentProblem(f"run directory {run_dir} does not exist", _rerun_hint())


def read_run(
    run_dir: Path, *, plan_hash: str, world_size: int, warmup: int, cpu: bool
) -> RunMeasurement:
    """Every rank's metrics of the run in `run_dir`, summarised (see the module docstring).

    `plan_hash` and `world_size` are the compiled plan's: lines of another plan, a missing
    rank or a rank the plan lacks are refused (`RunDataError`), as are malformed lines and
    runs with fewer than `MIN_STEPS` usable steps. A missing directory or no metrics at all
    raise `EnvironmentProblem`.
    """
    _check_directory(run_dir)
    folder = run_dir / "metrics"
    named = folder.glob("rank-[0-9][0-9][0-9][0-9][0-9].jsonl") if folder.is_dir() else ()
    found = {p.name: p for p in named}
    if not found:
        raise EnvironmentProblem(
            f"{run_dir} has no metrics (metrics/rank-<r>.jsonl): no rank has finished a step",
            f"train the plan first (e.g. `hetc launch OUT --run-dir {run_dir}`), for at least"
            f" {warmup + MIN_STEPS} steps",
        )
    lines = {
        int(name[5:10]): _last_run(path, int(name[5:10]), plan_hash) for name, path in found.items()
    }
    missing = sorted(set(range(world_size)) - set(lines))
    if missing:
        raise RunDataError(
            f"{folder}: no metrics of {'rank' if len(missing) == 1 else 'ranks'}"
            f" {', '.join(map(str, missing))}; the plan has"
            f" {world_size} ranks",
            "calibrate a run in which every rank wrote to the same run directory (under Slurm,"
            " a HETC_RUN_DIR on a shared file system)",
        )
    extra = sorted(set(lines) - set(range(world_size)))
    if extra:
        raise RunDataError(
            f"{folder}: metrics of {'rank' if len(extra) == 1 else 'ranks'}"
            f" {', '.join(map(str, extra))}, which the plan"
            f" ({world_size} ranks) does not have",
            "use one run directory per run; this one holds another plan's metrics",
        )
    usable = {r: _usable(records, warmup, cpu) for r, records in lines.items()}
    steps = sorted(set.intersection(*(set(u) for u in usable.values())))
    if len(steps) < MIN_STEPS:
        spans = ", ".join(
            f"rank {r}: steps {min(u)}..{max(u)}" if u else f"rank {r}: none"
            for r, u in usable.items()
        )
        raise RunDataError(
            f"{folder}: {plural(len(steps), 'step')} usable on every rank after"
            f" {plural(warmup, 'warm-up step')}"
            f"{' and the memory-tracked ones' if cpu else ''} ({spans});"
            f" calibration needs {MIN_STEPS}",
            f"train for more steps (at least {warmup + MIN_STEPS + (2 if cpu else 0)}), or"
            " lower --warmup",
        )
    ranks = []
    for r in range(world_size):
        kept = _middle([usable[r][s] for s in steps])
        peaks = [step.peak_bytes for step in lines[r] if step.peak_bytes is not None]
        ranks.append(
            RankMeasurement(
                rank=r,
                seconds=statistics.fmean(k.seconds for k in kept),
                compute=statistics.fmean(k.compute for k in kept),
                communication=statistics.fmean(k.communication for k in kept),
                idle=statistics.fmean(k.idle for k in kept),
                peak_bytes=max(peaks) if peaks else None,
            )
        )
    return RunMeasurement(
        run_dir=str(run_dir),
        plan_hash=plan_hash,
        iteration_time=statistics.fmean(r.seconds for r in ranks),
        steps=tuple(steps),
        ranks=tuple(ranks),
    )


@dataclass(frozen=True, slots=True)
class _Step:
    """One metrics line."""

    step: int
    seconds: float
    compute: float
    communication: float
    idle: float
    peak_bytes: float | None


def _last_run(path: Path, rank: int, plan_hash: str) -> list[_Step]:
    """The records of the file's last run (see the module docstring), each line checked."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvironmentProblem(f"cannot read {path}: {exc}", "make it readable") from None
    runs: list[list[_Step]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        record = _record(line, f"{path}:{number}", rank, plan_hash)
        if not runs or record.step != runs[-1][-1].step + 1:
            runs.append([])
        runs[-1].append(record)
    if not runs:
        raise RunDataError(
            f"{path}: empty: rank {rank} finished no step", "train the plan for more steps"
        )
    return runs[-1]


def _record(line: str, where: str, rank: int, plan_hash: str) -> _Step:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise RunDataError(
            f"{where}:{exc.colno}: not a JSON object ({exc.msg}): the line is cut short, as a"
            " killed run leaves it",
            "delete the cut line, or calibrate another run",
        ) from None
    if not isinstance(data, dict):
        raise RunDataError(f"{where}: not a JSON object", "calibrate a run hetc's runtime wrote")
    found = data.get("plan_hash")
    if found != plan_hash:
        what = "has no plan hash" if found is None else f"is of plan {str(found)[:12]}..."
        raise RunDataError(
            f"{where}: {what}; the compiled output is plan {plan_hash[:12]}...",
            "calibrate each run against the output it ran (--out), with one run directory per"
            " run (a run of this hetc's runtime records the plan hash)",
        )
    if data.get("rank") != rank:
        raise RunDataError(
            f"{where}: says rank {data.get('rank')!r} in the file of rank {rank}",
            "calibrate a run hetc's runtime wrote, its files as it named them",
        )
    step = data.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise RunDataError(f"{where}: `step` must be a step number, got {step!r}", _rewrite())
    numbers: list[float] = []
    for key in NUMBERS:
        value = data.get(key)
        if not isinstance(value, (int, float)) or not _non_negative(value):
            raise RunDataError(
                f"{where}: `{key}` must be a non-negative number of seconds, got {value!r}",
                _rewrite(),
            )
        numbers.append(float(value))
    peak = data.get("peak_bytes")
    if peak is not None and not _non_negative(peak):
        raise RunDataError(
            f"{where}: `peak_bytes` must be a number of bytes or null, got {peak!r}", _rewrite()
        )
    seconds, compute, communication, idle = numbers
    return _Step(step, seconds, compute, communication, idle, None if peak is None else float(peak))


def _rewrite() -> str:
    return "calibrate a run hetc's runtime wrote, unedited"


def _non_negative(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def _middle(records: list[_Step]) -> list[_Step]:
    """The steps whose seconds lie in the middle half (all of them below four steps)."""
    ordered = sorted(records, key=lambda r: r.seconds)
    cut = len(ordered) // 4
    return ordered[cut : len(ordered) - cut]


def _usable(records: list[_Step], warmup: int, cpu: bool) -> dict[int, _Step]:
    """step -> record, without the run's first `warmup` steps and (on CPU) tracked steps."""
    return {r.step: r for r in records[warmup:] if not (cpu and r.peak_bytes is not None)}
