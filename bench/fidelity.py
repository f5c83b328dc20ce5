"""Fidelity: the simulator's predictions against the runtime's measurements, on this machine.

Profiles the local device for a small GPT (`hetc profile measure`), builds a set of plans for
one node of that device (single rank, pipelines of two stages with uneven layer splits, two
data-parallel replicas, tensor parallelism of two; microbatch sizes 1 and 2), compiles each
with hetc's emitter, trains it with the runtime through `hetc launch`, and prints per plan the
predicted and measured iteration time and per-rank peak memory with the error in percent,
then the mean and the worst. Nothing is fitted to these measurements: the only input the
predictions take from this machine is the profile.

On CPU every rank runs one thread and the plans use at most as many ranks as the machine has
cores (no oversubscription): plans of more ranks are excluded and listed. Iteration time is
the median of the steps after `--warmup` (the steps where the CPU memory tracker runs, 0 and
1, are excluded: its dispatch mode slows them), from the fastest of `--runs` runs: on a shared
or virtual machine one plan's runs differ by up to 15%, and interference only slows a run.
Peak memory is step 1's (the first step after the optimizer state exists), every live tensor
storage counted, as `hetc.runtime.metrics` describes. The plans are CPU plans (a `kind: cpu`
device, gloo): no GPU variant has been run yet (no GPU was available to the session that wrote
this; docs/profile.md).

Usage: python bench/fidelity.py [--steps N] [--warmup N] [--runs N] [--work DIR] [--profile FILE]
                               [--only NAMES] [--analytical]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hetc.costmodel.planning import PlanningModel, Shape  # noqa: E402
from hetc.costmodel.simulate import read_spec_profiles, simulate  # noqa: E402
from hetc.emit.compile import compile_output  # noqa: E402
from hetc.emit.output import write_output  # noqa: E402
from hetc.schema import check_file, spec_hash  # noqa: E402
from hetc.solver.build import build_plan  # noqa: E402
from hetc.solver.planner import PlanningResult, Proposal, predictions_of  # noqa: E402
from hetc.solver.search import Candidate, SearchResult  # noqa: E402

MODEL = {"layers": 4, "hidden": 256, "heads": 4, "ffn": 1024, "vocab": 4096, "max_positions": 256}
SEQ_LEN = 128
GLOBAL_BATCH = 8
DEVICE = "LOCAL-CPU"


@dataclass(frozen=True)
class PlanShape:
    """One benchmarked plan: stage boundaries in blocks, replicas per stage, TP, microbatch."""

    name: str
    boundaries: tuple[int, ...]
    replicas: int
    tp: int
    microbatch: int

    @property
    def ranks(self) -> int:
        return (len(self.boundaries) - 1) * self.replicas * self.tp


SHAPES = (
    PlanShape("P1 D1 mbs1", (0, 4), 1, 1, 1),
    PlanShape("P1 D1 mbs2", (0, 4), 1, 1, 2),
    PlanShape("P2 3/1 mbs1", (0, 3, 4), 1, 1, 1),
    PlanShape("P2 1/3 mbs2", (0, 1, 4), 1, 1, 2),
    PlanShape("P2 2/2 mbs2", (0, 2, 4), 1, 1, 2),
    PlanShape("P1 D2 mbs1", (0, 4), 2, 1, 1),
    PlanShape("P1 D2 mbs2", (0, 4), 2, 1, 2),
    PlanShape("P1 TP2 mbs2", (0, 4), 1, 2, 2),
    PlanShape("P2 D2 mbs1", (0, 2, 4), 2, 1, 1),
    PlanShape("P2 TP2 mbs1", (0, 2, 4), 1, 2, 1),
)


def spec_text(*, steps: int, profile: str | None, devices: int) -> str:
    arch = ", ".join(f"{k}: {v}" for k, v in MODEL.items())
    profiles = f"profiles: [{profile}]\n" if profile else ""
    return f"""version: 1
name: fidelity-cpu
model:
  architecture: {{{arch}}}
training:
  global_batch_size: {GLOBAL_BATCH}
  seq_len: {SEQ_LEN}
  precision: fp32
  optimizer: {{type: adamw, lr: 1.0e-4}}
  zero_stage: 0
  seed: 1
devices:
  - name: {DEVICE}
    kind: cpu
    memory: 16GiB
    peak_tflops: {{fp32: 0.05}}
    memory_bandwidth: 10GB/s
    intra_node: {{kind: shared-memory, bandwidth: 5GB/s}}
    price: 0 USD/h
    source: "this machine's CPU, one thread per rank; the profile supplies the numbers"
zones:
  - name: localhost
    pools:
      - {{device: {DEVICE}, quota: {devices}, gpus_per_node: {devices}}}
sites:
  - {{name: local, scheduler: torchrun, zones: [localhost]}}
{profiles}run: {{steps: {steps}}}
"""


def _hetc() -> list[str]:
    script = Path(sys.executable).parent / "hetc"
    return [str(script)] if script.exists() else [sys.executable, "-m", "hetc"]


def _proposal(spec: Any, profiles: list[Any], shape: PlanShape) -> PlanningResult:
    """The PlanningResult the compiler takes, for one fixed shape instead of a search."""
    model = PlanningModel(spec, profiles=profiles)
    kind = next(k.index for k in model.kinds if k.tp == shape.tp)
    planned = Shape(shape.microbatch, shape.boundaries, shape.replicas)
    assignment = tuple(((kind, shape.replicas),) for _ in range(len(shape.boundaries) - 1))
    estimate = model.estimate(planned, assignment)
    candidate = Candidate(
        shape=planned, assignment=assignment, estimate=estimate, objective=spec.objective
    )
    plan = build_plan(model, planned, assignment, spec_hash=spec_hash(spec))
    simulation = simulate(plan, spec, profiles=profiles)
    plan = replace(plan, predictions=predictions_of(simulation))
    search = SearchResult(
        candidates=(candidate,), evaluations=1, complete=True, seconds=0.0, stop_reason=""
    )
    return PlanningResult(
        proposals=(Proposal(candidate=candidate, plan=plan, simulation=simulation),),
        search=search,
        approximations=frozenset(),
        model=model,
    )


def _measured(run_dir: Path, cluster: dict[str, Any], warmup: int) -> tuple[float, dict[str, int]]:
    """(iteration seconds: the slowest rank's median after warm-up, peak bytes by rank key)."""
    key_of = {
        p["rank"]: f"{n['id']}#{p['local_rank']}" for n in cluster["nodes"] for p in n["processes"]
    }
    medians, peaks = [], {}
    for path in sorted((run_dir / "metrics").glob("rank-*.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        steady = [r["seconds"] for r in records if r["step"] >= max(warmup, 2)]
        medians.append(statistics.median(steady))
        tracked = [r for r in records if r["peak_bytes"] is not None]
        peaks[key_of[records[0]["rank"]]] = tracked[min(1, len(tracked) - 1)]["peak_bytes"]
    return max(medians), peaks


def _percent(predicted: float, measured: float) -> float:
    return 100.0 * (predicted - measured) / measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--work", type=Path, help="keep everything here (default: a temp dir)")
    parser.add_argument("--profile", type=Path, help="use this profile instead of measuring")
    parser.add_argument(
        "--runs",
        type=int,
        default=2,
        help="runs per plan, the fastest kept (a shared machine only ever slows a run down)",
    )
    parser.add_argument("--only", help="comma-separated plan names to run")
    parser.add_argument(
        "--analytical", action="store_true", help="no profile: the analytical model's predictions"
    )
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    work = args.work or Path(tempfile.mkdtemp(prefix="hetc-fidelity-"))
    work.mkdir(parents=True, exist_ok=True)
    devices = min(cores, 2)
    spec_path = work / "spec.yaml"
    profile_path = work / "profile.json"
    if args.analytical:
        pass
    elif args.profile is not None:
        shutil.copyfile(args.profile, profile_path)
    else:
        spec_path.write_text(spec_text(steps=args.steps, profile=None, devices=devices))
        started = time.perf_counter()
        subprocess.run(
            [
                *_hetc(),
                "profile",
                "measure",
                str(spec_path),
                "--device",
                DEVICE,
                "-o",
                str(profile_path),
            ],
            check=True,
        )
        print(f"profiled in {time.perf_counter() - started:.0f} s", flush=True)
    used = None if args.analytical else "profile.json"
    spec_path.write_text(spec_text(steps=args.steps, profile=used, devices=devices))
    spec = check_file(str(spec_path)).spec
    assert spec is not None
    profiles = read_spec_profiles(spec, str(work))
    chosen = [s for s in SHAPES if not args.only or s.name in args.only.split(",")]
    runnable = [s for s in chosen if s.ranks <= cores]
    excluded = [s.name for s in chosen if s.ranks > cores]
    rows = []
    for shape in runnable:
        result = _proposal(spec, profiles, shape)
        compiled = compile_output(spec, result, spec_file_name="spec.yaml", spec_dir=str(work))
        out = work / f"out-{shape.name.replace(' ', '-').replace('/', '_')}"
        write_output(out, compiled.files, executable=compiled.executable, force=True)
        cluster = json.loads((out / "topology" / "cluster.json").read_text())
        runs = []
        for attempt in range(args.runs):
            run_dir = work / f"run-{out.name[4:]}-{attempt}"
            shutil.rmtree(run_dir, ignore_errors=True)
            subprocess.run(
                [*_hetc(), "launch", str(out), "--run-dir", str(run_dir), "--timeout", "900"],
                check=True,
                capture_output=True,
            )
            runs.append(_measured(run_dir, cluster, args.warmup))
        seconds, peaks = min(runs, key=lambda run: run[0])
        simulation = result.proposals[0].simulation
        predicted_peaks = {r.key: r.memory.total for r in simulation.ranks}
        rows.append((shape, simulation.iteration_time, seconds, predicted_peaks, peaks))
        memory = "  ".join(
            f"{key.split('/')[-1]} {predicted_peaks[key] / 2**20:.1f}/{peaks[key] / 2**20:.1f} MiB"
            f" ({_percent(predicted_peaks[key], peaks[key]):+.1f}%)"
            for key in sorted(peaks)
        )
        print(
            f"{shape.name:14s} time predicted {simulation.iteration_time:.4f} s measured"
            f" {seconds:.4f} s ({_percent(simulation.iteration_time, seconds):+.1f}%);"
            f" peak memory predicted/measured: {memory}",
            flush=True,
        )
    time_errors = [abs(_percent(p, m)) for _, p, m, _, _ in rows]
    memory_errors = [_percent(pp[key], mp[key]) for _, _, _, pp, mp in rows for key in mp]
    print(
        f"iteration time: mean |error| {statistics.mean(time_errors):.1f}%, worst"
        f" {max(time_errors):.1f}% over {len(rows)} plans;"
        f" peak memory: mean |error| {statistics.mean(abs(e) for e in memory_errors):.1f}%,"
        f" worst {max(memory_errors, key=abs):+.1f}%, under-predicted on"
        f" {sum(e < 0 for e in memory_errors)} of {len(memory_errors)} ranks"
    )
    if excluded:
        print(f"excluded (more ranks than the {cores} cores): {', '.join(excluded)}")
    print(f"work directory: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
