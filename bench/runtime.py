"""The runtime's speed against a plain torch training loop of the same model and batch, on
one rank: how much the runtime's orchestration costs on top of the computation it runs.

For each path (`zero0`: hetc's own synchronisation; `zero1`: a DeepSpeed ZeRO-1 engine, which
the runtime uses per stage even with one replica) it compiles a one-device spec (a `kind: cpu`
device, or `kind: gpu` with `--device cuda`) into a one-rank plan (one stage, D 1, TP 1, the
chosen microbatch) with hetc's emitter, then alternates, `--repeats` times:

- the runtime: `python -m hetc.runtime OUT --steps N` as one process (the environment torchrun
  would give it), its per-step seconds read from the metrics it writes;
- the plain loop (`--plain-loop`, run in its own process the same way): the same modules
  (`hetc.runtime.model.reference_model`, as the runtime builds a one-stage TP-1 stage: same
  parameters, same start values, same kernels), the same sample stream
  (`hetc.runtime.data.TrainingData`), the global batch cut into the same microbatches with
  gradient accumulation (each microbatch's summed token loss over the batch's tokens),
  torch's AdamW with the spec's settings, `clip_grad_norm_` at the spec's clip, autocast
  under bf16/fp16, `zero_grad(set_to_none=True)`, one `loss.item()` per step.

Both run `--threads` threads (OMP_NUM_THREADS and torch.set_num_threads). The runtime's
step seconds run from the end of the previous step's record (`hetc.runtime.metrics`), so its
metrics write and checkpoint agreement count. The steps timed are those after `--warmup`,
without the CPU memory tracker's (`HETC_CPU_MEMORY_EVERY`: a measurement the runtime takes on
its first two steps and every 50th; the cost of one tracked step, amortised over 50, is
printed apart). Each run's time is its median step, each repeat's ratio is the runtime's
steps/s over the loop's; the median and spread over repeats are printed with the ratio of
each loop's fastest run (a shared machine only ever slows a run down; runs alternate, and so
does their order). Each path then checks that both loops computed the same losses (the
comparison is of the same work) and prints where a median step's time goes: the runtime's
compute, communication and idle sections from its metrics beside the loop's
forward+backward, clip+optimizer and rest; `--profile` runs each loop once more under
cProfile (timed steps only, no memory tracking) and lists the functions where the runtime
spends more own time than the loop.

`--device cuda` makes the same comparison on the first GPU (NCCL, a `kind: gpu` device, so
DeepSpeed's ZeRO-1 path steps with its FusedAdam, built on first use; the plain loop with
torch's AdamW). Without a CUDA device it exits 2 with one line.

Usage: python bench/runtime.py [--paths zero0,zero1] [--repeats 3] [--steps 30] [--warmup 5]
           [--layers 4 --hidden 128 --heads 4 --ffn 512 --vocab 2048 --seq 128 --batch 8
            --micro 2] [--precision fp32] [--clip 1.0] [--threads 1] [--device cpu|cuda]
           [--profile] [--work DIR]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import socket
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

PATHS = {"zero0": 0, "zero1": 1}
DEVICE = "BENCH"
TOLERANCE = {"fp32": 1e-5, "bf16": 2e-2}
"""Loss agreement of the two loops, relative. fp32: one rank, the same kernels, so only the
clip norm's summation order differs (~1e-8 over 30 steps; a loop without the clip differs by
2e-5 within 4 steps). bf16: a DeepSpeed engine computes with bf16 weights where the loop keeps
fp32 ones under autocast, so bf16's tolerance against the single-process reference
(tests/test_runtime_deepspeed.py)."""


def spec_text(args: argparse.Namespace, zero: int) -> str:
    """A spec of one device of this machine (`kind: cpu` or `gpu`), the model and batch."""
    kind = "gpu" if args.device == "cuda" else "cpu"
    return f"""version: 1
name: runtime-speed
model:
  architecture: {{layers: {args.layers}, hidden: {args.hidden}, heads: {args.heads},
                 ffn: {args.ffn}, vocab: {args.vocab}, max_positions: {args.seq}}}
training:
  global_batch_size: {args.batch}
  seq_len: {args.seq}
  precision: {args.precision}
  optimizer: {{type: adamw, lr: 1.0e-3, betas: [0.9, 0.95], weight_decay: 0.1}}
  gradient_clipping: {args.clip}
  zero_stage: {zero}
  seed: 1
devices:
  - name: {DEVICE}
    kind: {kind}
    memory: 64GiB
    peak_tflops: {{fp32: 1, bf16: 1, fp16: 1}}
    memory_bandwidth: 100GB/s
    intra_node: {{kind: shared-memory, bandwidth: 5GB/s}}
    price: 0 USD/h
    source: "one device of the machine the bench runs on; the numbers only let the planner run"
zones:
  - name: localhost
    pools:
      - {{device: {DEVICE}, quota: 1, gpus_per_node: 1}}
sites:
  - {{name: local, scheduler: torchrun, zones: [localhost]}}
run: {{steps: {args.steps}, checkpoint_dir: ckpt}}
"""


def compile_one_rank(args: argparse.Namespace, zero: int, work: Path) -> Path:
    """Compile the spec into the one-rank plan (one stage, one replica at TP 1, microbatch
    `--micro`) with hetc's emitter; returns the output directory."""
    from hetc.costmodel.planning import PlanningModel, Shape
    from hetc.costmodel.simulate import simulate
    from hetc.emit.compile import compile_output
    from hetc.emit.output import write_output
    from hetc.schema import check_file, spec_hash
    from hetc.solver.build import build_plan
    from hetc.solver.planner import PlanningResult, Proposal, predictions_of
    from hetc.solver.search import Candidate, SearchResult

    path = work / f"spec-zero{zero}.yaml"
    path.write_text(spec_text(args, zero))
    checked = check_file(str(path))
    if checked.spec is None or checked.errors:
        problems = "; ".join(d.format() for d in checked.diagnostics)
        raise SystemExit(f"runtime.py: the spec these options make is invalid: {problems}")
    spec = checked.spec
    model = PlanningModel(spec, profiles=[])
    kind = next(k.index for k in model.kinds if k.tp == 1)
    shape = Shape(args.micro, (0, args.layers), 1)
    assignment = (((kind, 1),),)
    estimate = model.estimate(shape, assignment)
    candidate = Candidate(
        shape=shape, assignment=assignment, estimate=estimate, objective=spec.objective
    )
    plan = build_plan(model, shape, assignment, spec_hash=spec_hash(spec))
    simulation = simulate(plan, spec, profiles=[])
    plan = replace(plan, predictions=predictions_of(simulation))
    result = PlanningResult(
        proposals=(Proposal(candidate=candidate, plan=plan, simulation=simulation),),
        search=SearchResult(
            candidates=(candidate,),
            evaluations=1,
            complete=True,
            seconds=0.0,
            lower_bound=candidate.value,
            gap=0.0,
            lower_bound_all_plans=candidate.value,
            gap_all_plans=0.0,
            stop_reason="",
        ),
        approximations=frozenset(),
        model=model,
    )
    compiled = compile_output(spec, result, spec_file_name=path.name, spec_dir=str(work))
    out = work / f"out-zero{zero}"
    write_output(out, compiled.files, executable=compiled.executable, force=True)
    return out


class StepProfile:
    """cProfile over the steps from `first` on (start-up and warm-up left out)."""

    def __init__(self, first: int, path: Path) -> None:
        self.first, self.path = first, path
        self.profile = cProfile.Profile()
        self.running = False

    def at_step(self, step: int) -> None:
        if step == self.first and not self.running:
            self.running = True
            self.profile.enable()

    def stop(self) -> None:
        if self.running:
            self.profile.disable()
            self.running = False
            self.profile.dump_stats(str(self.path))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _env(args: argparse.Namespace) -> dict[str, str]:
    """This checkout first on PYTHONPATH, and the thread count for both loops."""
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    threads = str(args.threads)
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
    }


def _run(command: list[str], env: dict[str, str], what: str) -> None:
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"runtime.py: {what} exited {done.returncode}:\n{tail}")


def _rank_env(args: argparse.Namespace, out: Path, run_dir: Path) -> dict[str, str]:
    """What torchrun would give the one rank of the plan (and hetc's launch scripts)."""
    cluster = json.loads((out / "topology" / "cluster.json").read_text())
    return {
        **_env(args),
        "HETC_NODE": cluster["nodes"][0]["id"],
        "LOCAL_RANK": "0",
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "HETC_RUN_DIR": str(run_dir),
    }


def _this(*options: str, args: argparse.Namespace) -> list[str]:
    """This script as a worker process."""
    return [sys.executable, str(Path(__file__).resolve()), *options, "--steps", str(args.steps)]


def run_runtime(args: argparse.Namespace, out: Path, run_dir: Path) -> list[dict[str, Any]]:
    """`python -m hetc.runtime OUT` as the one rank of its plan; its metrics, one per step."""
    command = [sys.executable, "-m", "hetc.runtime", str(out), "--steps", str(args.steps)]
    command.append("--from-scratch")  # a reused --work directory holds the last run's checkpoint
    _run(command, _rank_env(args, out, run_dir), "the runtime")
    lines = (run_dir / "metrics" / "rank-00000.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def run_plain(args: argparse.Namespace, out: Path, result: Path) -> list[dict[str, Any]]:
    """The plain loop (`--plain-loop`) in its own process; its records, one per step."""
    command = _this("--plain-loop", str(out), "--result", str(result), args=args)
    _run([*command, "--device", args.device], _env(args), "the plain loop")
    records: list[dict[str, Any]] = json.loads(result.read_text())
    return records


def plain_loop(
    out: Path, steps: int, device_name: str, profiler: StepProfile | None = None
) -> list[dict[str, Any]]:
    """Train the compiled run's model as a plain torch loop would (see the module docstring);
    one record per step: loss, seconds, and the seconds of its forward+backward passes and of
    its clip and optimizer step."""
    import torch

    from hetc.plan import plan_from_json
    from hetc.runtime.data import TrainingData
    from hetc.runtime.model import ModelConfig, reference_model

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    training = json.loads((out / "training.json").read_text())
    plan = plan_from_json((out / "plan.json").read_text())
    device = torch.device("cuda", 0) if device_name == "cuda" else torch.device("cpu")
    model = reference_model(ModelConfig.from_dict(training["model"]), training["seed"])
    model = model.to(device)
    micro, batch = plan.microbatch_size, training["global_batch_size"]
    count = batch // micro
    data = TrainingData.from_training(
        training, base_dir=out, shares=[count], micro=micro, device=device
    )
    o = training["optimizer"]
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=o["lr"],
        betas=tuple(o["betas"]),
        eps=o["eps"],
        weight_decay=o["weight_decay"],
    )
    clip = training["gradient_clipping"]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(training["precision"])
    tokens = batch * training["seq_len"]
    synchronise = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    records = []
    for step in range(steps):
        if profiler is not None:
            profiler.at_step(step)
        began = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), dtype=torch.float64, device=device)
        for index in range(count):
            inputs, targets = data.microbatch(step, 0, index)
            with torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=bool(dtype)):
                summed = model(inputs, targets=targets)
            (summed.float() * (1.0 / tokens)).backward()
            total += summed.detach().double()
        synchronise()
        backward_done = time.perf_counter()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        synchronise()
        step_done = time.perf_counter()
        loss = float(total) / tokens
        records.append(
            {
                "step": step,
                "loss": loss,
                "seconds": time.perf_counter() - began,
                "forward_backward": backward_done - began,
                "optimizer": step_done - backward_done,
            }
        )
    if profiler is not None:
        profiler.stop()
    return records


@dataclass
class Runs:
    """One path's timed runs: per repeat, the median steady step of each loop."""

    runtime: list[float]
    loop: list[float]
    runtime_records: list[list[dict[str, Any]]]
    loop_records: list[list[dict[str, Any]]]


def steady(records: list[dict[str, Any]], warmup: int, *, cpu: bool) -> list[dict[str, Any]]:
    """The timed steps: after the warm-up and, on a CPU, none the memory tracker ran on (the
    runtime's records carry a peak there only then; on a GPU every record carries the
    allocator's, which costs nothing)."""
    tracked = (lambda r: r.get("peak_bytes") is not None) if cpu else (lambda r: False)
    return [r for r in records if r["step"] >= warmup and not tracked(r)]


def _median(records: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in records)


def time_path(args: argparse.Namespace, out: Path, work: Path) -> Runs:
    """`--repeats` runs of each loop, alternating (and alternating which goes first)."""
    runs = Runs([], [], [], [])
    cpu = args.device == "cpu"
    for repeat in range(args.repeats):
        order = ("runtime", "loop") if repeat % 2 == 0 else ("loop", "runtime")
        for which in order:
            if which == "runtime":
                records = run_runtime(args, out, work / f"run-{out.name}-{repeat}")
                runs.runtime_records.append(records)
                runs.runtime.append(_median(steady(records, args.warmup, cpu=cpu), "seconds"))
            else:
                records = run_plain(args, out, work / f"plain-{out.name}-{repeat}.json")
                runs.loop_records.append(records)
                runs.loop.append(_median(steady(records, args.warmup, cpu=cpu), "seconds"))
    return runs


def profile_runtime(out: Path, steps: int, warmup: int, path: Path) -> int:
    """The runtime's `main` in this process (the rank's environment set by the caller),
    profiled from step `warmup` to the end-of-run checkpoint. Two methods are wrapped from
    here to know when; the runtime has no hook for it."""
    from hetc.runtime import checkpoint, train
    from hetc.runtime.__main__ import main as runtime_main

    profiler = StepProfile(warmup, path)
    step_of, close = train.StageTrainer.train_step, checkpoint.Checkpointer.close

    def train_step(self: Any, step: int) -> float:
        profiler.at_step(step)
        return step_of(self, step)

    def closing(self: Any, step: int) -> None:
        profiler.stop()
        close(self, step)

    train.StageTrainer.train_step = train_step  # type: ignore[method-assign]
    checkpoint.Checkpointer.close = closing  # type: ignore[method-assign]
    return runtime_main([str(out), "--steps", str(steps), "--from-scratch"])


def _label(key: tuple[str, int, str]) -> str:
    file, line, name = key
    if file == "~":
        return name
    for marker in ("site-packages/", f"{ROOT}/"):
        if marker in file:
            file = file.split(marker, 1)[1]
    return f"{file}:{line}({name})"


def profile_difference(runtime: Path, loop: Path, steps: int, top: int) -> list[str]:
    """Lines: own time per step of the functions where the runtime spends more than the loop
    (same function in both: torch's kernels cancel), and each profile's total."""
    mine, theirs = (
        {
            k: v[2] / steps
            for k, v in pstats.Stats(str(path)).stats.items()  # type: ignore[attr-defined]
            if not k[0].endswith("bench/runtime.py")  # this script's wrappers
        }
        for path in (runtime, loop)
    )
    difference = {k: mine.get(k, 0.0) - theirs.get(k, 0.0) for k in {*mine, *theirs}}
    lines = [
        f"  profiled own time per step: runtime {sum(mine.values()) * 1e3:.2f} ms, loop"
        f" {sum(theirs.values()) * 1e3:.2f} ms (cProfile inflates Python-heavy code);"
        " most extra in the runtime:"
    ]
    for key in sorted(difference, key=lambda k: -difference[k])[:top]:
        lines.append(
            f"  {difference[key] * 1e3:+8.3f} ms  (runtime {mine.get(key, 0.0) * 1e3:.3f},"
            f" loop {theirs.get(key, 0.0) * 1e3:.3f})  {_label(key)}"
        )
    return lines


def profile_path(args: argparse.Namespace, out: Path, work: Path) -> list[str]:
    """One more run of each loop, profiled over its timed steps; their difference."""
    runtime, loop = work / f"profile-{out.name}-runtime", work / f"profile-{out.name}-loop"
    command = _this("--profile-runtime", str(out), "--result", str(runtime), args=args)
    env = {**_rank_env(args, out, work / f"run-{out.name}-profiled"), "HETC_CPU_MEMORY_EVERY": "0"}
    _run([*command, "--warmup", str(args.warmup)], env, "the profiled runtime")
    command = _this(
        "--plain-loop", str(out), "--result", str(work / "plain-profiled.json"), args=args
    )
    command += ["--device", args.device, "--profile-to", str(loop), "--warmup", str(args.warmup)]
    _run(command, _env(args), "the profiled plain loop")
    return profile_difference(runtime, loop, args.steps - args.warmup, args.top)


def _rates(seconds: list[float]) -> str:
    rates = sorted(1 / s for s in seconds)
    return f"{statistics.median(rates):.2f} steps/s ({rates[0]:.2f}-{rates[-1]:.2f})"


def losses_agree(name: str, runs: Runs, precision: str) -> tuple[bool, str]:
    """Whether the runtime and the loop computed the same losses (first run of each)."""
    runtime = [r["loss"] for r in runs.runtime_records[0]]
    loop = [r["loss"] for r in runs.loop_records[0]]
    worst = max(abs(a - b) / abs(b) for a, b in zip(runtime, loop, strict=True))
    tolerance = TOLERANCE[precision]
    verdict = "agree" if worst <= tolerance else "DIFFER"
    return worst <= tolerance, (
        f"{name}: losses {verdict} over steps 0-{len(loop) - 1}: worst relative difference"
        f" {worst:.1e} (tolerance {tolerance:.0e}); first {runtime[0]:.6f} and {loop[0]:.6f}"
    )


def breakdown(name: str, runs: Runs, warmup: int, *, cpu: bool) -> list[str]:
    """Where each loop's median step goes, over every timed step of every repeat; on a CPU,
    what a memory-tracked step costs."""
    mine = [r for records in runs.runtime_records for r in steady(records, warmup, cpu=cpu)]
    theirs = [r for records in runs.loop_records for r in steady(records, warmup, cpu=cpu)]
    seconds, passes, update = (
        _median(theirs, k) for k in ("seconds", "forward_backward", "optimizer")
    )
    lines = [
        f"{name}: median step, runtime {_median(mine, 'seconds') * 1e3:.1f} ms = compute"
        f" {_median(mine, 'compute_seconds') * 1e3:.1f} + communication"
        f" {_median(mine, 'communication_seconds') * 1e3:.1f} + idle"
        f" {_median(mine, 'idle_seconds') * 1e3:.1f};"
        f" loop {seconds * 1e3:.1f} ms = forward+backward {passes * 1e3:.1f} + clip+optimizer"
        f" {update * 1e3:.1f} + rest {(seconds - passes - update) * 1e3:.1f}"
    ]
    tracked = [
        r["seconds"]
        for records in runs.runtime_records
        for r in records[1:2]
        if r.get("peak_bytes") is not None
    ]
    if cpu and tracked:
        from hetc.runtime.train import CPU_MEMORY_EVERY

        extra = statistics.median(tracked) - _median(mine, "seconds")
        lines.append(
            f"{name}: a CPU-memory-tracked step (step 1) takes {extra * 1e3:+.1f} ms more;"
            f" tracked every {CPU_MEMORY_EVERY} steps that is"
            f" {extra / CPU_MEMORY_EVERY * 1e3:+.2f} ms per step (not timed)"
        )
    return lines


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paths", default="zero0,zero1", help="comma-separated: zero0, zero1")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5, help="steps not timed")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8, help="global batch (samples)")
    parser.add_argument("--micro", type=int, default=2, help="microbatch (samples)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--clip", type=float, default=1.0, help="gradient clipping (0: none)")
    parser.add_argument("--threads", type=int, default=1, help="threads of each loop")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--profile", action="store_true", help="profile both loops once more")
    parser.add_argument("--top", type=int, default=15, help="functions the profile lists")
    parser.add_argument("--work", type=Path, help="keep everything here (default: a temp dir)")
    parser.add_argument("--plain-loop", type=Path, metavar="OUT", help=argparse.SUPPRESS)
    parser.add_argument("--profile-runtime", type=Path, metavar="OUT", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--profile-to", type=Path, help=argparse.SUPPRESS)
    return parser


def _usage(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    """The chosen paths; exits 2 with one line on a bad combination."""
    paths = args.paths.split(",")
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        parser.error(f"unknown path(s) {', '.join(unknown)}: choose from {', '.join(PATHS)}")
    if args.batch % args.micro:
        parser.error(f"--micro {args.micro} does not divide --batch {args.batch}")
    if not 0 <= args.warmup < args.steps:
        parser.error(f"--warmup {args.warmup} leaves no timed step of --steps {args.steps}")
    if args.repeats < 1 or args.threads < 1:
        parser.error("--repeats and --threads must be at least 1")
    return paths


def main() -> int:
    parser = _parser()
    args = parser.parse_args()
    if args.plain_loop is not None:
        profiler = None if args.profile_to is None else StepProfile(args.warmup, args.profile_to)
        records = plain_loop(args.plain_loop, args.steps, args.device, profiler)
        args.result.write_text(json.dumps(records))
        return 0
    if args.profile_runtime is not None:
        return profile_runtime(args.profile_runtime, args.steps, args.warmup, args.result)
    paths = _usage(args, parser)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print(
                f"runtime.py: --device cuda needs a CUDA device; torch {torch.__version__} sees"
                " none",
                file=sys.stderr,
            )
            return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="hetc-runtime-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    work = work.resolve()
    print(
        f"GPT {args.layers} x {args.hidden} (heads {args.heads}, ffn {args.ffn}, vocab"
        f" {args.vocab}), seq {args.seq}, batch {args.batch} in microbatches of {args.micro},"
        f" {args.precision}, AdamW, clip {args.clip}, {args.threads} thread(s), {args.device};"
        f" {args.steps} steps, the first {args.warmup} not timed, {args.repeats} repeats",
        flush=True,
    )
    agreed = True
    for name in paths:
        out = compile_one_rank(args, PATHS[name], work)
        runs = time_path(args, out, work)
        ratios = sorted(loop / mine for mine, loop in zip(runs.runtime, runs.loop, strict=True))
        fastest = min(runs.loop) / min(runs.runtime)
        print(
            f"{name}: runtime {_rates(runs.runtime)}, plain loop {_rates(runs.loop)};"
            f" runtime/loop {statistics.median(ratios):.3f} (repeats"
            f" {' '.join(f'{r:.3f}' for r in ratios)}; fastest runs {fastest:.3f})",
            flush=True,
        )
        same, line = losses_agree(name, runs, args.precision)
        agreed &= same
        print(
            line,
            *breakdown(name, runs, args.warmup, cpu=args.device == "cpu"),
            sep="\n",
            flush=True,
        )
        if args.profile:
            print(*profile_path(args, out, work), sep="\n", flush=True)
    print(f"work directory: {work}")
    return 0 if agreed else 1


if __name__ == "__main__":
    sys.exit(main())
