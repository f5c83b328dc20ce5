"""Fidelity: the simulator's predictions against the runtime's measurements, on this machine,
before and after calibration (`hetc calibrate`).

Profiles the local device for a small GPT (`hetc profile measure`), builds a set of plans for
one node of that device (single rank, pipelines of two stages with uneven layer splits, two
data-parallel replicas, tensor parallelism of two; microbatch sizes 1 and 2), compiles each
with hetc's emitter, trains it `--runs` times with the runtime through `hetc launch`, and
prints per plan the measured iteration time and per-rank peak memory of its first run beside
the predictions: before calibration (the profile alone: nothing fitted to these runs); after
calibrating on that run (in-sample: what the fitted model can represent); the same corrected
profile against the plan's second run (with `--runs 2` or more: run-to-run noise included);
and after calibrating on another plan's first run (`--calibrate-on`, by default the first plan
with the most ranks: held out, the test that the factors belong to the machine, not the run).
Summary lines give the mean and worst error of each, and the run-to-run spread
(`--reuse-runs` analyses the runs already in `--work` again, without training). The
measurements are what `hetc calibrate` reads (`hetc.costmodel.measured`: the steps after
`--warmup`, without the CPU memory tracker's, the middle half of each rank's, the ranks'
mean; peak memory the most of the tracked steps).

On CPU every rank runs one thread and the plans use at most as many ranks as the machine has
cores (no oversubscription): plans of more ranks are excluded and listed. Peak memory counts
every live tensor storage, as `hetc.runtime.metrics` describes. Without `--gpu` the plans are
CPU plans (a `kind: cpu` device, gloo).

`--gpu DEVICE` (a catalog GPU, e.g. H100-80GB) checks the cost model on that GPU instead,
both ways a user can run it: with a profile measured here and with the analytical model
(the catalog's datasheet numbers, no profile). The spec names the catalog device (no
`devices:` entry; one pool of N GPUs, N the GPUs torch sees, capped at what the plans need),
bf16, AdamW, and bench/runtime_gpu.py's timed model (4 blocks, hidden 2048, 16 heads, FFN
8192, vocabulary 32768, sequence 1024, global batch 8: ~270 M parameters, a step of tens
of milliseconds). Plans: one rank at microbatch 1, 2 and 4, with
and without activation checkpointing (a training setting, so those plans have their own spec
and profile, `spec-ac.yaml` and `profile-ac.json`); with two GPUs or more also P2, D2 and TP2
plans. Each plan is trained once (`--runs`) and predicted twice; a row shows the measured
time, both predictions with their errors, and per rank the measured peak (the CUDA
allocator's `max_memory_allocated` at step 1) beside both predicted peaks less the model's
`overhead` term (CUDA context, workspaces, allocator slack), which no tensor holds; then one
summary line per prediction source. `results.json` in the work directory holds every number
(predicted totals and memory terms too). The runtime's end-of-run checkpoint (~3 GiB here)
goes to a temporary folder outside the work directory and is deleted after each run; a plan
whose launch fails is reported (with its ranks' last stderr lines) and the others still run.
Without a CUDA device it exits 2 with one line; `--dry-run` writes the specs and prints the
predictions without training (and without a profile, unless `--profile FILE` gives one, which
then serves both spec variants). It needs only torch, jinja2, typer, numpy and ruamel.yaml:
run from a checkout with `PYTHONPATH=$PWD`, hetc uninstalled, it calls `python -m hetc` and
passes the checkout on to its subprocesses (ortools and deepspeed are not imported at
ZeRO 0). docs/profile.md has its numbers on one H100.

Usage: python bench/fidelity.py [--steps N] [--warmup N] [--runs N] [--work DIR] [--profile FILE]
                               [--only NAMES] [--calibrate-on NAME] [--reuse-runs] [--analytical]
                               [--gpu DEVICE [--gpus N] [--dry-run]]
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
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hetc.costmodel.calibrate import Prediction, calibrate, predict  # noqa: E402
from hetc.costmodel.measured import RunMeasurement, read_run  # noqa: E402
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
    checkpointing: bool = False
    """Activation checkpointing: a training setting of the spec, so such plans get their own."""

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


GPU_MODEL = {
    "layers": 4,
    "hidden": 2048,
    "heads": 16,
    "ffn": 8192,
    "vocab": 32768,
    "max_positions": 1024,
}
"""bench/runtime_gpu.py's timed shape: ~270 M parameters, a step of tens of milliseconds."""
GPU_SEQ_LEN = 1024
GPU_GLOBAL_BATCH = 8

GPU_SHAPES = (
    PlanShape("P1 D1 mbs1", (0, 4), 1, 1, 1),
    PlanShape("P1 D1 mbs2", (0, 4), 1, 1, 2),
    PlanShape("P1 D1 mbs4", (0, 4), 1, 1, 4),
    PlanShape("P1 D1 mbs1 AC", (0, 4), 1, 1, 1, checkpointing=True),
    PlanShape("P1 D1 mbs2 AC", (0, 4), 1, 1, 2, checkpointing=True),
    PlanShape("P1 D1 mbs4 AC", (0, 4), 1, 1, 4, checkpointing=True),
    PlanShape("P2 2/2 mbs2", (0, 2, 4), 1, 1, 2),
    PlanShape("P1 D2 mbs2", (0, 4), 2, 1, 2),
    PlanShape("P1 TP2 mbs2", (0, 4), 1, 2, 2),
)
"""The plans of `--gpu`: a plan runs only with at least as many GPUs as it has ranks."""


def gpu_spec_text(
    *, device: str, steps: int, profile: str | None, devices: int, checkpointing: bool, ckpt: Path
) -> str:
    """A spec for one node of the catalog's `device` (no `devices:` entry), bf16."""
    arch = ", ".join(f"{k}: {v}" for k, v in GPU_MODEL.items())
    profiles = f"profiles: [{profile}]\n" if profile else ""
    recompute = "  activation_checkpointing: true\n" if checkpointing else ""
    return f"""version: 1
name: fidelity-gpu
model:
  architecture: {{{arch}}}
training:
  global_batch_size: {GPU_GLOBAL_BATCH}
  seq_len: {GPU_SEQ_LEN}
  precision: bf16
  optimizer: {{type: adamw, lr: 1.0e-4}}
  zero_stage: 0
{recompute}  seed: 1
zones:
  - name: localhost
    pools:
      - {{device: {device}, quota: {devices}, gpus_per_node: {devices}}}
sites:
  - {{name: local, scheduler: torchrun, zones: [localhost]}}
{profiles}run: {{steps: {steps}, checkpoint_dir: {json.dumps(str(ckpt))}}}
"""


def _hetc() -> list[str]:
    script = Path(sys.executable).parent / "hetc"
    return [str(script)] if script.exists() else [sys.executable, "-m", "hetc"]


def _env() -> dict[str, str]:
    """The environment for hetc's subprocesses: this checkout first on PYTHONPATH, so that
    `python -m hetc` and torchrun's `-m hetc.runtime` find it where hetc is not installed."""
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


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
        candidates=(candidate,),
        evaluations=1,
        complete=True,
        seconds=0.0,
        lower_bound=candidate.value,
        gap=0.0,
        lower_bound_all_plans=candidate.value,
        gap_all_plans=0.0,
        stop_reason="",
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


def _allocated(report: Any) -> float:
    """A rank's predicted peak as the CUDA allocator's `max_memory_allocated` sees it: the
    model's total less its `overhead` term (CUDA context, workspaces, NCCL buffers, allocator
    slack), which no allocated tensor holds."""
    return float(report.memory.total - report.memory.overhead)


def _gib(value: float) -> str:
    return f"{value / 2**30:.3f}"


def _cuda_devices() -> tuple[int, str]:
    """(CUDA devices torch sees, why none) without failing where torch is missing."""
    try:
        import torch
    except ImportError as exc:
        return 0, f"torch cannot be imported ({exc})"
    if not torch.cuda.is_available():
        return 0, f"torch {torch.__version__} sees no CUDA device"
    return torch.cuda.device_count(), ""


def _launch_failure(done: subprocess.CompletedProcess[str], run_dir: Path) -> str:
    """hetc launch's last lines, then each rank's last stderr lines (torchrun's own summary
    does not carry the worker's error)."""
    lines = (done.stdout + done.stderr).strip().splitlines()[-6:]
    for log in sorted(run_dir.glob("logs/**/stderr.log")):
        text = log.read_text(errors="replace").strip().splitlines()
        lines += [f"{log.relative_to(run_dir)}:", *text[-8:]] if text else []
    return f"hetc launch exited {done.returncode}:\n    " + "\n    ".join(lines)


def _summary(source: str, rows: list[dict[str, Any]]) -> str:
    rows = [r for r in rows if source in r]
    times = [abs(_percent(r[source]["seconds"], r["measured_seconds"])) for r in rows]
    memory = [
        _percent(r[source]["allocated_bytes"][key], measured)
        for r in rows
        for key, measured in r["measured_peak_bytes"].items()
    ]
    if not times:
        return f"{source}: no plan measured"
    return (
        f"{source}: iteration time mean |error| {statistics.mean(times):.1f}%, worst"
        f" {max(times):.1f}% over {len(times)} plans; peak memory mean |error|"
        f" {statistics.mean(abs(e) for e in memory):.1f}%, worst {max(memory, key=abs):+.1f}%,"
        f" under-predicted on {sum(e < 0 for e in memory)} of {len(memory)} ranks"
    )


def _write_results(work: Path, rows: list[dict[str, Any]]) -> None:
    """Every number so far (after each plan, so a run cut short keeps what it measured)."""
    (work / "results.json").write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")


def _gpu_spec(
    path: Path, device: str, steps: int, devices: int, ac: bool, ckpt: Path, profile: str | None
) -> Any:
    """Write the `--gpu` spec to `path` and check it; exits on a problem (an unknown device)."""
    path.write_text(
        gpu_spec_text(
            device=device,
            steps=steps,
            profile=profile,
            devices=devices,
            checkpointing=ac,
            ckpt=ckpt,
        )
    )
    checked = check_file(str(path))
    if checked.spec is None or checked.errors:
        print(
            f"fidelity.py: --gpu {device}: the spec it makes is invalid:\n"
            + "\n".join(d.format() for d in checked.diagnostics),
            file=sys.stderr,
        )
        raise SystemExit(2)
    known = checked.spec.devices
    kind = next((d.kind for n, d in known.items() if n.casefold() == device.casefold()), None)
    if kind != "gpu":
        print(f"fidelity.py: --gpu {device} is not a GPU of the catalog", file=sys.stderr)
        raise SystemExit(2)
    return checked.spec


def gpu_main(args: argparse.Namespace) -> int:
    """`--gpu DEVICE`: one node of the catalog's GPU, each plan measured once and predicted
    twice (from the profile measured here, and from the analytical model)."""
    found, why = _cuda_devices()
    if found == 0 and not args.dry_run:
        print(
            f"fidelity.py: --gpu {args.gpu} needs a CUDA device: {why} (--dry-run prints the"
            " predictions without one)",
            file=sys.stderr,
        )
        return 2
    gpus = args.gpus or found or 1
    chosen = [s for s in GPU_SHAPES if not args.only or s.name in args.only.split(",")]
    runnable = [s for s in chosen if s.ranks <= gpus]
    excluded = [s.name for s in chosen if s.ranks > gpus]
    if not runnable:
        print(f"fidelity.py: no chosen plan fits {gpus} GPU(s)", file=sys.stderr)
        return 2
    devices = max(s.ranks for s in runnable)
    work = args.work or Path(tempfile.mkdtemp(prefix="hetc-fidelity-gpu-"))
    work.mkdir(parents=True, exist_ok=True)
    work = work.resolve()
    # Checkpoints (the runtime writes one at the end of every run, ~3 GiB here) go outside
    # the work directory and are deleted after each run.
    ckpt = Path(tempfile.mkdtemp(prefix="hetc-fidelity-ckpt-"))
    try:
        return _gpu_plans(args, work, ckpt, runnable, excluded, devices, gpus)
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)


def _gpu_plans(
    args: argparse.Namespace,
    work: Path,
    ckpt: Path,
    runnable: list[PlanShape],
    excluded: list[str],
    devices: int,
    gpus: int,
) -> int:
    """Profile (unless told not to), then predict each plan both ways and train it."""
    variants: dict[bool, tuple[Any, list[Any], str]] = {}
    for checkpointing in sorted({s.checkpointing for s in runnable}):
        suffix = "-ac" if checkpointing else ""
        spec_path, profile_path = work / f"spec{suffix}.yaml", work / f"profile{suffix}.json"

        write = partial(_gpu_spec, spec_path, args.gpu, args.steps, devices, checkpointing, ckpt)
        write(None)
        if args.analytical:
            profile_path.unlink(missing_ok=True)
        elif args.profile is not None:
            shutil.copyfile(args.profile, profile_path)
        elif not args.dry_run:
            sizes = sorted({s.microbatch for s in runnable if s.checkpointing == checkpointing})
            profile_path.unlink(missing_ok=True)  # a stale one must not pass for this run's
            started = time.perf_counter()
            measure = subprocess.run(
                [
                    *_hetc(),
                    "profile",
                    "measure",
                    str(spec_path),
                    "--device",
                    args.gpu,
                    "-o",
                    str(profile_path),
                    "--microbatch",
                    ",".join(map(str, sizes)),
                ],
                check=False,
                env=_env(),
            )
            seconds = time.perf_counter() - started
            if measure.returncode == 0:
                print(f"profiled {profile_path.name} in {seconds:.0f} s", flush=True)
            else:
                print(
                    f"hetc profile measure exited {measure.returncode} for {spec_path.name}: its"
                    " plans are predicted by the analytical model only",
                    flush=True,
                )
        has_profile = profile_path.exists() and not args.analytical
        spec = write(profile_path.name if has_profile else None)
        profiles = read_spec_profiles(spec, str(work)) if has_profile else []
        variants[checkpointing] = (spec, profiles, spec_path.name)
        if args.dry_run and not checkpointing:
            print(f"--- {spec_path}\n{spec_path.read_text()}---", flush=True)
    measured_profile = any(p for _, p, _ in variants.values())
    sources = ["profile", "analytical"] if measured_profile else ["analytical"]
    print(
        f"{args.gpu} x {devices} (of {gpus} GPU(s)), GPT {GPU_MODEL['layers']} x"
        f" {GPU_MODEL['hidden']} (ffn {GPU_MODEL['ffn']}, vocab {GPU_MODEL['vocab']}), seq"
        f" {GPU_SEQ_LEN}, global batch {GPU_GLOBAL_BATCH}, bf16, AdamW. Peak memory in GiB:"
        " measured is max_memory_allocated; predicted is the model's total less its overhead"
        " term (CUDA context, workspaces, allocator slack), which no tensor holds.",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    for shape in runnable:
        spec, profiles, spec_name = variants[shape.checkpointing]
        results = {"profile": _proposal(spec, profiles, shape)} if profiles else {}
        results["analytical"] = _proposal(spec, [], shape)
        row: dict[str, Any] = {"plan": shape.name, "ranks": shape.ranks}
        for source, result in results.items():
            simulation = result.proposals[0].simulation
            row[source] = {
                "seconds": simulation.iteration_time,
                "allocated_bytes": {r.key: _allocated(r) for r in simulation.ranks},
                "total_bytes": {r.key: r.memory.total for r in simulation.ranks},
                "terms": {r.key: r.memory.terms() for r in simulation.ranks},
            }
        predicted = "; ".join(
            f"{source} {row[source]['seconds']:.4f} s, memory "
            + " ".join(
                f"{_gib(row[source]['allocated_bytes'][k])}"
                f" (total {_gib(row[source]['total_bytes'][k])})"
                for k in sorted(row[source]["allocated_bytes"])
            )
            for source in results
        )
        if args.dry_run:
            print(f"{shape.name:14s} predicted {predicted}", flush=True)
            rows.append(row)
            continue
        compiled = compile_output(
            spec,
            results["profile"] if profiles else results["analytical"],
            spec_file_name=spec_name,
            spec_dir=str(work),
        )
        out = work / f"out-{shape.name.replace(' ', '-').replace('/', '_')}"
        write_output(out, compiled.files, executable=compiled.executable, force=True)
        cluster = json.loads((out / "topology" / "cluster.json").read_text())
        runs, failure = [], ""
        for attempt in range(args.runs):
            run_dir = work / f"run-{out.name[4:]}-{attempt}"
            shutil.rmtree(run_dir, ignore_errors=True)
            done = subprocess.run(
                [*_hetc(), "launch", str(out), "--run-dir", str(run_dir), "--timeout", "300"],
                capture_output=True,
                text=True,
                check=False,
                env=_env(),
            )
            for leftover in ckpt.iterdir():
                shutil.rmtree(leftover, ignore_errors=True)
            if done.returncode != 0:
                failure = _launch_failure(done, run_dir)
                break
            runs.append(_measured(run_dir, cluster, args.warmup))
        if not runs:
            print(f"{shape.name:14s} FAILED ({failure}); predicted {predicted}", flush=True)
            row["failure"] = failure
            rows.append(row)
            _write_results(work, rows)
            continue
        seconds, peaks = min(runs, key=lambda run: run[0])
        row["measured_seconds"], row["measured_peak_bytes"] = seconds, peaks
        row["measured_runs_seconds"] = [run[0] for run in runs]
        rows.append(row)
        _write_results(work, rows)
        timing = ", ".join(
            f"{source} {row[source]['seconds']:.4f} s"
            f" ({_percent(row[source]['seconds'], seconds):+.1f}%)"
            for source in results
        )
        memory = "  ".join(
            f"{key.split('/')[-1]} measured {_gib(peaks[key])}, "
            + ", ".join(
                f"{source} {_gib(row[source]['allocated_bytes'][key])}"
                f" ({_percent(row[source]['allocated_bytes'][key], peaks[key]):+.1f}%)"
                for source in results
            )
            for key in sorted(peaks)
        )
        print(
            f"{shape.name:14s} time measured {seconds:.4f} s, predicted {timing};"
            f" peak memory GiB: {memory}",
            flush=True,
        )
    _write_results(work, rows)
    measured = [r for r in rows if "measured_seconds" in r]
    if not args.dry_run:
        for source in sources:
            print(_summary(source, measured))
    if excluded:
        print(f"excluded (more ranks than the {gpus} GPU(s)): {', '.join(excluded)}")
    print(f"work directory: {work}")
    return 1 if len(measured) < len(rows) and not args.dry_run else 0


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
        "--reuse-runs",
        action="store_true",
        help="CPU: analyse the runs (and profile) already in --work instead of training again",
    )
    parser.add_argument(
        "--calibrate-on",
        metavar="NAME",
        help="CPU: the plan whose first run calibrates the others (default: the first plan"
        " with the most ranks)",
    )
    parser.add_argument(
        "--analytical", action="store_true", help="no profile: the analytical model's predictions"
    )
    parser.add_argument(
        "--gpu",
        metavar="DEVICE",
        help="a GPU of the catalog (e.g. H100-80GB) that this machine has: its plans, bf16,"
        " predicted from a profile measured here and from the analytical model",
    )
    parser.add_argument(
        "--gpus", type=int, help="with --gpu: GPUs to plan for (default: all that torch sees)"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="with --gpu: write the specs and print the predictions; measure nothing",
    )
    args = parser.parse_args()
    if args.dry_run and not args.gpu:
        parser.error("--dry-run needs --gpu")
    if args.reuse_runs and (args.gpu or args.work is None):
        parser.error("--reuse-runs needs --work and no --gpu")
    if args.gpu:
        return gpu_main(args)
    return cpu_main(args)


@dataclass
class CpuRow:
    """One CPU plan: its plan, and what each of its runs measured."""

    shape: PlanShape
    plan: Any
    runs: list[RunMeasurement]


def _errors(prediction: Prediction, run: RunMeasurement) -> tuple[float, list[float]]:
    """(iteration time error %, peak memory error % per rank)."""
    memory = [
        _percent(p.peak_bytes, m.peak_bytes)
        for p, m in zip(prediction.ranks, run.ranks, strict=True)
        if m.peak_bytes is not None
    ]
    return _percent(prediction.iteration_time, run.iteration_time), memory


def _line(name: str, results: list[tuple[float, list[float]]]) -> str:
    times = [abs(t) for t, _ in results]
    memory = [e for _, m in results for e in m]
    return (
        f"{name}: iteration time mean |error| {statistics.mean(times):.1f}%, worst"
        f" {max(times):.1f}% over {len(times)} plans; peak memory mean |error|"
        f" {statistics.mean(abs(e) for e in memory):.1f}%, worst {max(memory, key=abs):+.1f}%,"
        f" under-predicted on {sum(e < 0 for e in memory)} of {len(memory)} ranks"
    )


def _cases(
    row: CpuRow, spec: Any, profiles: list[Any], reference: CpuRow, shared: Any
) -> dict[str, tuple[Prediction, RunMeasurement]]:
    """The predictions of one plan and the run each is compared with (see the docstring)."""
    plan, first = row.plan, row.runs[0]
    own = calibrate(plan, spec, profiles, first)
    corrected = predict(plan, spec, list(own.profiles.values()))
    cases = {
        "before": (predict(plan, spec, profiles), first),
        "after, in-sample": (corrected, first),
    }
    if len(row.runs) > 1:
        cases["after, next run"] = (corrected, row.runs[1])
    if row is not reference:
        held_out = predict(plan, spec, list(shared.profiles.values()))
        cases[f"after, from {reference.shape.name}"] = (held_out, first)
    return cases


def cpu_main(args: argparse.Namespace) -> int:
    """The CPU plans: profile, then per plan compile, train `--runs` times, and compare the
    predictions before calibration (the profile), after calibrating on the plan's own first
    run, and after calibrating on the first plan's first run (held out: another plan)."""
    cores = os.cpu_count() or 1
    work = args.work or Path(tempfile.mkdtemp(prefix="hetc-fidelity-"))
    work.mkdir(parents=True, exist_ok=True)
    devices = min(cores, 2)
    spec_path = work / "spec.yaml"
    profile_path = work / "profile.json"
    if args.analytical or (args.reuse_runs and profile_path.exists()):
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
            env=_env(),
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
    rows: list[CpuRow] = []
    for shape in runnable:
        result = _proposal(spec, profiles, shape)
        compiled = compile_output(spec, result, spec_file_name="spec.yaml", spec_dir=str(work))
        out = work / f"out-{shape.name.replace(' ', '-').replace('/', '_')}"
        write_output(out, compiled.files, executable=compiled.executable, force=True)
        runs = []
        for attempt in range(args.runs):
            run_dir = work / f"run-{out.name[4:]}-{attempt}"
            if not (args.reuse_runs and (run_dir / "metrics").is_dir()):
                shutil.rmtree(run_dir, ignore_errors=True)
                subprocess.run(
                    [*_hetc(), "launch", str(out), "--run-dir", str(run_dir), "--timeout", "900"],
                    check=True,
                    capture_output=True,
                    env=_env(),
                )
            runs.append(
                read_run(
                    run_dir,
                    plan_hash=compiled.topology.plan_hash,
                    world_size=compiled.topology.world_size,
                    warmup=args.warmup,
                    cpu=True,
                )
            )
        rows.append(CpuRow(shape=shape, plan=result.proposals[0].plan, runs=runs))
        print(
            f"{shape.name:14s} ran: {', '.join(f'{r.iteration_time:.4f} s' for r in runs)}",
            flush=True,
        )
    named = [r for r in rows if r.shape.name == args.calibrate_on]
    reference = (named or sorted(rows, key=lambda r: -r.shape.ranks))[0]
    shared = calibrate(reference.plan, spec, profiles, reference.runs[0])
    results: dict[str, list[tuple[float, list[float]]]] = {}
    for row in rows:
        cases = _cases(row, spec, profiles, reference, shared)
        cells = []
        for name, (prediction, run) in cases.items():
            error = _errors(prediction, run)
            results.setdefault(name, []).append(error)
            cells.append(f"{name} {prediction.iteration_time:.4f} s ({error[0]:+.1f}%)")
        before, _ = cases["before"]
        after, first = cases["after, in-sample"]
        memory = "  ".join(
            f"r{m.rank} {m.peak_bytes / 2**20:.1f}/{before.ranks[m.rank].peak_bytes / 2**20:.1f}/"
            f"{after.ranks[m.rank].peak_bytes / 2**20:.1f} MiB"
            for m in first.ranks
            if m.peak_bytes is not None
        )
        print(
            f"{row.shape.name:14s} time measured {first.iteration_time:.4f} s, predicted"
            f" {'; '.join(cells)}; peak memory measured/before/after: {memory}",
            flush=True,
        )
    spreads = [
        abs(_percent(r.runs[1].iteration_time, r.runs[0].iteration_time))
        for r in rows
        if len(r.runs) > 1
    ]
    if spreads:
        print(
            f"run to run (the second run against the first): mean {statistics.mean(spreads):.1f}%,"
            f" worst {max(spreads):.1f}%"
        )
    for name, found in results.items():
        print(_line(name, found))
    if excluded:
        print(f"excluded (more ranks than the {cores} cores): {', '.join(excluded)}")
    print(f"work directory: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
