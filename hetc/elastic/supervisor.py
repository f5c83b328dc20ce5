"""`hetc run SPEC -o OUT`: compile, launch, and re-plan when the devices change.

The supervisor runs the job's node scripts on this host (`hetc.local_launch.LocalJob`), or
on a Slurm site submits its sbatch script (`hetc.elastic.slurm.SlurmJob`), and watches for
change:

- a node lost: a node script killed by a signal, or ranks ending with EXIT_PEER_LOST whose
  outcome records name the lost node (`hetc.plan.outcome`). The lost node's pool is reduced
  by that node's devices until the availability file names the pool again (any edit of the
  file that lists it clears the reduction: the file is the newer word on what the pool has);
- the availability file (`hetc.elastic.availability`), re-read whenever it changes. A file
  with a problem is reported at its position and not applied: the running generation goes
  on untouched;
- on a Slurm site, the usable nodes of each pool's partition (`hetc.elastic.slurm`).

On a change it re-plans under the new quotas (`hetc.elastic.replan`: warm-started from the
running plan, preferring plans that keep its devices), compiles the next generation
(`hetc.elastic.generations`), asks the running job, if any, for a checkpoint (SIGTERM to the
node scripts: the ranks save and exit 76), and launches the new generation, which resumes from
the newest complete checkpoint under its own plan (checkpoints and the data order are
plan-independent). When the running plan is still the choice, the job is left running. When
nothing fits the quotas, the refusal and the planner's diagnosis are recorded and the
supervisor waits for the availability file to change. SIGINT, SIGTERM or SIGHUP to the
supervisor stop the job with a checkpoint first.

Exit status: 0 the job trained every step; 1 a bad spec or availability file at start, or a
run that failed (not restartable: a restart would fail the same way); 128 + signal when
stopped by one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hetc.costmodel.profile import LayerProfile
from hetc.costmodel.simulate import read_spec_profiles
from hetc.elastic.availability import (
    AvailabilityError,
    node_pool,
    read_availability,
    spec_quotas,
    with_quotas,
)
from hetc.elastic.generations import (
    generation_target,
    generations_dir,
    point_out_at,
    read_records,
    record_path,
    run_dir,
    write_json,
)
from hetc.elastic.replan import DEFAULT_TOLERANCE, Replanned, replan, same_layout
from hetc.elastic.slurm import SlurmJob, slurm_quotas, slurm_site
from hetc.emit.compile import CompiledOutput, compile_given, compile_output
from hetc.emit.output import write_output
from hetc.local_launch import LocalJob
from hetc.plan import Plan, plan_from_json
from hetc.plan.outcome import EXIT_FAILED, OutcomeError, read_outcomes, run_code
from hetc.plan.topology import plan_hash
from hetc.schema.spec import Spec
from hetc.units import plural

Echo = Callable[..., None]

POLL_SECONDS = 0.2
SETTLE_SECONDS = 45.0
"""After one node of a generation ends on its own, how long the others get to notice (their
heartbeat, default 30 s) and stop by themselves before they are stopped."""
SLURM_POLL = 2.0
"""Seconds between two readings of Slurm's node states."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(kw_only=True)
class RunOptions:
    availability: Path | None = None
    tolerance: float = DEFAULT_TOLERANCE
    from_scratch: bool = False


@dataclass(kw_only=True)
class _Generation:
    number: int
    record: dict[str, Any]
    plan: Plan
    job: LocalJob | SlurmJob
    metrics_offset: int = 0


@dataclass(kw_only=True)
class _Watch:
    """What the availability file said last, and the pools reduced by lost nodes."""

    text: bytes | None = None
    quotas: dict[str, int] = field(default_factory=dict)
    lost: Counter[str] = field(default_factory=Counter)
    slurm: dict[str, int] = field(default_factory=dict)
    """Each Slurm pool's quota by its partition's usable nodes (`hetc.elastic.slurm`)."""
    slurm_read: float = 0.0


class Supervisor:
    def __init__(
        self, spec: Spec, spec_path: Path, out: Path, options: RunOptions, echo: Echo
    ) -> None:
        self.spec, self.spec_path, self.options, self.echo = spec, spec_path, options, echo
        self.out = Path(os.path.abspath(out))
        self.run_dir = run_dir(self.out)
        self.watch = _Watch()
        self.current: _Generation | None = None
        self.last_plan: Plan | None = None
        self.stopping: int | None = None
        self.profiles = read_spec_profiles(spec, str(spec_path.parent), spec_file=str(spec_path))
        self.site = slurm_site(spec)
        self.number = 0
        self.ended_detected = 0.0
        """When the supervisor saw the last generation's first node end."""

    # -- helpers ------------------------------------------------------------------------------

    def say(self, message: str) -> None:
        self.echo(f"hetc run: {message}", err=True)

    def quotas(self) -> dict[str, int]:
        """The quotas to plan with now: the availability file's (else the spec's), capped by
        Slurm's usable nodes on a Slurm site, less the devices of lost nodes."""
        base = {**spec_quotas(self.spec), **self.watch.quotas}
        base = {k: min(n, self.watch.slurm.get(k, n)) for k, n in base.items()}
        return {label: max(0, n - self.watch.lost[label]) for label, n in base.items()}

    def _resume_previous(self) -> None:
        """Number generations after those of an earlier `hetc run` of the same OUT."""
        if generations_dir(self.out).is_dir():
            records = read_records(self.out)
            self.number = max((r["generation"] for r in records), default=0)
            for record in reversed(records):
                if record.get("compiled"):
                    with open(Path(record["compiled"]) / "plan.json", encoding="utf-8") as f:
                        self.last_plan = plan_from_json(f.read())
                    break

    # -- the availability file ----------------------------------------------------------------

    def availability_change(self) -> str | None:
        """Re-read the availability file if it changed; a description of the quota change it
        makes, or None (no change, or a file with problems, reported once)."""
        path = self.options.availability
        if path is None:
            return None
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            text = b""
        except OSError as exc:
            if self.watch.text != b"?":
                self.say(f"cannot read {path}: {exc.strerror or exc}; quotas unchanged")
                self.watch.text = b"?"
            return None
        if text == self.watch.text:
            return None
        self.watch.text = text
        before = self.quotas()
        try:
            found = read_availability(str(path), self.spec).quotas if text else {}
        except AvailabilityError as exc:
            for diagnostic in exc.diagnostics:
                self.echo(diagnostic.format(), err=True)
            running = (
                f"generation {self.current.number:04d} keeps running untouched"
                if self.current is not None
                else "nothing was changed"
            )
            self.say(f"{path}: not applied ({plural(len(exc.diagnostics), 'problem')}); {running}")
            return None
        for label in found:
            self.watch.lost.pop(label, None)
        self.watch.quotas = found
        after = self.quotas()
        changed = [f"{k} {before[k]} -> {after[k]}" for k in after if after[k] != before[k]]
        return f"availability: {', '.join(changed)}" if changed else None

    def slurm_change(self) -> str | None:
        """On a Slurm site, re-read the partitions' node states every SLURM_POLL seconds; a
        description of the quota change, or None. A pool whose usable nodes grow is back:
        its lost-node reduction is cleared."""
        if self.site is None or time.monotonic() - self.watch.slurm_read < SLURM_POLL:
            return None
        self.watch.slurm_read = time.monotonic()
        before = self.quotas()
        found = slurm_quotas(self.spec)
        for label, n in found.items():
            if n > self.watch.slurm.get(label, n):
                self.watch.lost.pop(label, None)
        self.watch.slurm = found
        after = self.quotas()
        changed = [f"{k} {before[k]} -> {after[k]}" for k in after if after[k] != before[k]]
        return f"slurm node states: {', '.join(changed)}" if changed else None

    # -- generations --------------------------------------------------------------------------

    def reconfigure(self, reason: str, detected: float) -> bool:
        """Re-plan for `reason`; compile and launch the next generation unless the running
        plan stays the choice. Returns False when nothing fits (the job is then stopped)."""
        quotas = self.quotas()
        spec = with_quotas(self.spec, quotas)
        current = self.current.plan if self.current is not None else self.last_plan
        chosen = replan(spec, current, tolerance=self.options.tolerance, profiles=self.profiles)
        timings: dict[str, float] = {"plan": chosen.seconds}
        if chosen.choice is None:
            self.number += 1
            self.say(
                f"re-planning refused for {reason}: nothing fits the quotas"
                f" ({', '.join(f'{k} {n}' for k, n in quotas.items())}): {chosen.diagnosis};"
                " waiting for capacity (edit the availability file)"
            )
            self._stop_current(f"stopped: no plan fits ({reason})", timings)
            write_json(
                record_path(self.out, self.number),
                {
                    "generation": self.number,
                    "reason": reason,
                    "quotas": quotas,
                    "refused": chosen.diagnosis,
                    "detected_at": detected,
                    "timings": timings,
                    "ended": "refused: nothing fits",
                },
            )
            return False
        choice = chosen.choice
        if self.current is not None and same_layout(choice.plan, self.current.plan):
            self.say(f"{reason}: the running plan is still the choice; it keeps running")
            return True
        started = time.perf_counter()
        compiled = compile_choice(spec, chosen, self.profiles, self.spec_path)
        number = self.number + 1
        written = write_output(
            generation_target(self.out, number),
            compiled.files,
            executable=compiled.executable,
            force=False,
        )
        timings["compile"] = time.perf_counter() - started
        stopped = self._stop_current(f"replaced by generation {number:04d} ({reason})", timings)
        self.number = number
        self._move_outcomes(number - 1)
        point_out_at(self.out, written)
        record: dict[str, Any] = {
            "generation": number,
            "reason": reason,
            "quotas": quotas,
            "choice": choice.source,
            "kept_devices": choice.kept,
            "compiled": str(written),
            "plan": _plan_summary(choice.plan),
            "detected_at": detected,
            "stopped_at": stopped,
            "timings": timings,
            "ended": None,
        }
        self.say(
            f"generation {number:04d} ({reason}): {plural(record['plan']['world_size'], 'rank')} on"
            f" {', '.join(record['plan']['nodes'])}; plan {timings['plan']:.2f} s, compile"
            f" {timings['compile']:.2f} s ({choice.source}, keeps"
            f" {plural(choice.kept, 'running device')})"
        )
        record["launched_at"] = time.time()
        offset = _size(self.run_dir / "metrics" / "rank-00000.jsonl")
        scratch = self.options.from_scratch and number == 1
        job: LocalJob | SlurmJob
        if self.site is not None:
            job = SlurmJob(written, site=self.site, run_dir=self.run_dir, from_scratch=scratch)
            record["slurm_job"] = job.job
        else:
            job = LocalJob(written, run_dir=self.run_dir, echo=self.echo, from_scratch=scratch)
        groups = job.process_groups()
        record["process_groups"] = {n.id: groups[n.index] for n in job.nodes if n.index in groups}
        self.current = _Generation(
            number=number,
            record=record,
            plan=choice.plan,
            job=job,
            metrics_offset=offset,
        )
        self.last_plan = choice.plan
        write_json(record_path(self.out, number), record)
        return True

    def _stop_current(self, ended: str, timings: dict[str, float]) -> float | None:
        """Stop the running generation with a checkpoint (SIGTERM: the ranks save and exit
        76); the time it had stopped, or None when none was running."""
        generation = self.current
        if generation is None:
            return None
        began = time.perf_counter()
        if generation.job.running():
            generation.job.stop()
            timings["checkpoint"] = time.perf_counter() - began
        self._end(generation, ended)
        self.current = None
        return time.time()

    def _end(self, generation: _Generation, ended: str) -> None:
        generation.record["ended"] = ended
        generation.record["ended_at"] = time.time()
        write_json(record_path(self.out, generation.number), generation.record)

    def _move_outcomes(self, number: int) -> None:
        """Keep generation `number`'s outcome records beside its record (the next generation's
        ranks write theirs afresh)."""
        folder = self.run_dir / "outcome"
        if number >= 1 and folder.is_dir():
            target = generations_dir(self.out) / f"{number:04d}.outcome"
            if target.exists():
                shutil.rmtree(target)
            os.replace(folder, target)

    # -- watching the running generation ------------------------------------------------------

    def watch_training(self) -> None:
        """Note when the running generation's first step is written (`training_at`) and from
        which step it resumed, from plan rank 0's metrics."""
        generation = self.current
        if generation is None or "training_at" in generation.record:
            return
        metrics = self.run_dir / "metrics" / "rank-00000.jsonl"
        try:
            with open(metrics, "rb") as file:
                file.seek(generation.metrics_offset)
                data = file.read()
        except FileNotFoundError:
            return
        wanted = plan_hash(generation.plan)
        for line in data.split(b"\n"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("plan_hash") == wanted:
                generation.record["training_at"] = time.time()
                generation.record["resumed"] = record["step"]
                generation.record["started_at"] = _newest_startup(self.run_dir)
                write_json(record_path(self.out, generation.number), generation.record)
                return
        generation.metrics_offset += data.rfind(b"\n") + 1

    def job_ended(self) -> tuple[str, bool] | None:
        """When a node of the running generation has ended on its own: (what happened, whether
        to re-plan). None while every node runs."""
        generation = self.current
        if generation is None or not generation.job.exits():
            return None
        self.ended_detected = time.time()
        generation.record["end_seen_at"] = self.ended_detected
        if not generation.job.wait(SETTLE_SECONDS):
            generation.job.stop()
        exits = generation.job.exits()
        try:
            outcomes = read_outcomes(self.run_dir)
        except OutcomeError as exc:
            self.say(str(exc))
            outcomes = []
        ids = {n.index: n.id for n in generation.job.nodes}
        lost = {o.lost.node for o in outcomes if o.lost is not None and o.lost.node}
        lost |= {ids[i] for i, code in exits.items() if code < 0}
        if all(code == 0 for code in exits.values()) and run_code(outcomes) in (None, 0):
            self._end(generation, "done: every step trained")
            self.current = None
            return "done", False
        if lost:
            for node in sorted(lost):
                plan_node = generation.plan.node(node)
                self.watch.lost[node_pool(node)] += plan_node.devices if plan_node else 1
            what = f"node lost: {', '.join(sorted(lost))}"
            self._end(generation, what)
            self.current = None
            return what, True
        code = run_code(outcomes)
        if code is not None and code != EXIT_FAILED:
            what = f"stopped ({', '.join(sorted({o.reason for o in outcomes}))[:200]})"
            self._end(generation, what)
            self.current = None
            return what, True
        reasons = sorted({o.reason for o in outcomes if o.code})
        what = "failed: " + ("; ".join(reasons) if reasons else f"node exits {exits}")
        self._end(generation, what)
        self.current = None
        return what, False

    # -- the loop -----------------------------------------------------------------------------

    def _signalled(self, signum: int, _frame: object) -> None:
        self.stopping = signum

    def run(self) -> int:
        self._resume_previous()
        self.availability_change()
        self.slurm_change()
        previous = {sig: signal.signal(sig, self._signalled) for sig in STOP_SIGNALS}
        try:
            return self._loop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _loop(self) -> int:
        pending: str | None = "start" if self.number == 0 else "hetc run restarted"
        detected = time.time()
        while True:
            if self.stopping is not None:
                name = signal.Signals(self.stopping).name
                self._stop_current(f"stopped by {name} (checkpoint first)", {})
                self.say(f"{name}: stopped the job after a checkpoint; `hetc run` again resumes")
                return 128 + self.stopping
            if pending is not None:
                if not self.reconfigure(pending, detected):
                    self.current = None
                pending = None
            time.sleep(POLL_SECONDS)
            self.watch_training()
            change = self.availability_change() or self.slurm_change()
            if change is not None:
                pending, detected = change, time.time()
                continue
            ended = self.job_ended()
            if ended is not None:
                what, restart = ended
                if what.startswith("done"):
                    self.say(f"done: generation {self.number:04d} trained every step")
                    return 0
                if not restart:
                    self.say(f"{what}; not restarting (a restart would fail the same way)")
                    return 1
                pending, detected = what, self.ended_detected


def compile_choice(
    spec: Spec, chosen: Replanned, profiles: Sequence[LayerProfile], spec_path: Path
) -> CompiledOutput:
    """The compiled files of the chosen plan: a planner's proposal with its report, or the
    running plan (checked under the new quotas) as `hetc compile --plan` would compile it."""
    choice = chosen.choice
    assert choice is not None and chosen.result is not None
    spec_dir = str(spec_path.parent)
    if choice.proposal is not None:
        others = tuple(p for p in chosen.result.proposals if p is not choice.proposal)
        result = replace(chosen.result, proposals=(choice.proposal, *others))
        return compile_output(spec, result, spec_file_name=spec_path.name, spec_dir=spec_dir)
    assert choice.given is not None
    return compile_given(
        spec,
        choice.given,
        profiles,
        spec_file_name=spec_path.name,
        plan_file_name="plan.json (the running generation's)",
        spec_dir=spec_dir,
    )


def _plan_summary(plan: Plan) -> dict[str, Any]:
    used = sorted({r.node for s in plan.stages for r in s.replicas})
    return {
        "hash": plan_hash(plan),
        "world_size": sum(r.tp for s in plan.stages for r in s.replicas),
        "nodes": used,
        "stages": len(plan.stages),
        "pipelines": len(plan.pipelines),
        "iteration_time": plan.predictions.iteration_time if plan.predictions else 0.0,
    }


def _size(path: Path) -> int:
    """A file's size (0 when absent): where a generation's lines start in a metrics file
    that every generation appends to (a plan may come back, with its hash)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _newest_startup(run: Path) -> float | None:
    times = [p.stat().st_mtime for p in (run / "startup").glob("*.json")]
    return max(times) if times else None


def run_supervisor(spec: Spec, spec_path: Path, out: Path, options: RunOptions, echo: Echo) -> int:
    """`hetc run`: see the module docstring."""
    supervisor = Supervisor(spec, spec_path, out, options, echo)
    if options.availability is not None and options.availability.exists():
        try:
            read_availability(str(options.availability), spec)
        except AvailabilityError as exc:
            for diagnostic in exc.diagnostics:
                echo(diagnostic.format())
            echo(f"hetc run: {options.availability}: nothing was started", err=True)
            return 1
    return supervisor.run()
