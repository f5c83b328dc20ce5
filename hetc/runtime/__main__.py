"""`python -m hetc.runtime OUT_DIR`: what torchrun starts on every process of a compiled plan.

Start-up (every process matches the plan, every process group checks out), then training for
the run's steps (or `--steps`). Exit status 0 when all went well, 1 with one line on stderr
otherwise. Each rank appends one JSON line per step to `HETC_RUN_DIR/metrics/rank-<r>.jsonl`
(with the plan hash, so that `hetc calibrate` can tell runs of another plan apart);
plan rank 0 also prints the loss of each step. `--resume` continues from a checkpoint;
`hetc.runtime.checkpoint` says where checkpoints go and when they are written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from hetc.runtime.checkpoint import (
    Checkpointer,
    CheckpointError,
    checkpoint_root,
    load_checkpoint,
)
from hetc.runtime.environment import profile_warning
from hetc.runtime.startup import StartupError, start
from hetc.runtime.train import StageTrainer, TrainingError, full_weights, train


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hetc.runtime", description=__doc__)
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR", help="what `hetc compile` wrote")
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=os.environ.get("HETC_STARTUP_TIMEOUT", "300"),
        metavar="SECONDS",
        help="the longest any start-up step waits for the other processes"
        " (default: $HETC_STARTUP_TIMEOUT or 300)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        help="iterations to train (default: the run's, less those a resumed checkpoint did)",
    )
    parser.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        metavar="PATH",
        help="continue from a checkpoint: 'latest' (the default) in the run's checkpoint_dir,"
        " a checkpoint step-<k> directory, or a checkpoint directory's latest",
    )
    parser.add_argument(
        "--startup-only",
        action="store_true",
        help="check that every process matches the plan and every group works, then stop",
    )
    parser.add_argument(
        "--save-weights",
        type=Path,
        metavar="DIR",
        help="after training, write each stage's parameters as whole tensors by name to"
        " DIR/stage<i>.pt (plan-independent)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not torch.cuda.is_available() and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)  # several ranks share a CPU host's cores (tests, CI)
    try:
        started = start(args.out_dir, timeout=args.timeout)
        rank = started.plan_rank
        print(
            f"hetc-runtime: rank {rank} of {started.world_size} ready"
            f" (node {started.rank_file['node']}, local rank {started.rank_file['local_rank']},"
            f" {len(started.groups)} groups verified)",
            flush=True,
        )
        warning = profile_warning(
            args.out_dir,
            started.rank_file["node"],
            cuda=dist.get_backend() == "nccl",
            threads=torch.get_num_threads(),
            device_index=started.rank_file["device_index"],
        )
        if warning is not None:
            print(f"hetc-runtime: rank {rank}: warning: {warning}", file=sys.stderr, flush=True)
        if args.startup_only:
            print("hetc-runtime: start-up verified", flush=True)
            return 0
        trainer = StageTrainer(started, args.out_dir)
        batch = trainer.training["global_batch_size"]
        root = checkpoint_root(trainer)
        first = 0 if args.resume is None else load_checkpoint(trainer, args.resume, root)
        steps = args.steps if args.steps is not None else trainer.training["run"]["steps"] - first
        steps = max(steps, 0)
        checkpoints = Checkpointer(trainer, root, timeout=args.timeout, start_step=first)
        metrics = started.run_dir / "metrics" / f"rank-{rank:05d}.jsonl"
        metrics.parent.mkdir(parents=True, exist_ok=True)
        with open(metrics, "a", encoding="utf-8") as log:
            for record in train(trainer, steps, start_step=first):
                line = {
                    **record.as_json(),
                    "samples_per_second": batch / record.seconds,
                    "rank": rank,
                    "plan_hash": started.rank_file["plan_hash"],
                }
                log.write(json.dumps(line, sort_keys=True) + "\n")
                log.flush()
                if rank == 0:
                    print(
                        f"hetc-runtime: step {record.step} loss {record.loss:.6f}"
                        f" ({record.seconds:.3f} s, {batch / record.seconds:.1f} samples/s)",
                        flush=True,
                    )
                checkpoints.after_step(record.step + 1)
        checkpoints.close(first + steps)
        if args.save_weights is not None:
            weights = full_weights(trainer)
            if weights is not None:
                args.save_weights.mkdir(parents=True, exist_ok=True)
                torch.save(weights, args.save_weights / f"stage{trainer.rank_file['stage']}.pt")
        dist.barrier()
        return 0
    except StartupError as exc:
        print(f"hetc-runtime: start-up failed: {exc}", file=sys.stderr, flush=True)
        return 1
    except TrainingError as exc:
        print(f"hetc-runtime: training failed: {exc}", file=sys.stderr, flush=True)
        return 1
    except CheckpointError as exc:
        print(f"hetc-runtime: checkpoint failed: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
