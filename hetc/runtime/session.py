"""One rank's session, from start-up to its exit code (`python -m hetc.runtime`).

Start-up, the heartbeat, where training starts (resumed by default), the training loop with
its checkpoints, and every way it can end, each turned into one line, one outcome record and
one of `hetc.plan.outcome`'s codes (`hetc.runtime.ending`). An error raised by a gloo call is
first put to the heartbeat, which names the peer whose loss caused it; only an error that no
lost peer explains is a failure of this rank.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from hetc.plan.outcome import EXIT_DONE, EXIT_FAILED, EXIT_PREEMPTED
from hetc.runtime.checkpoint import (
    Checkpointer,
    CheckpointError,
    checkpoint_root,
    load_checkpoint,
    resolve,
)
from hetc.runtime.data import DataError
from hetc.runtime.ending import Ending
from hetc.runtime.environment import profile_warning
from hetc.runtime.heartbeat import Heartbeat, Peer
from hetc.runtime.history import newest_checkpoint
from hetc.runtime.signals import Signals
from hetc.runtime.startup import Startup, StartupError, start
from hetc.runtime.train import StageTrainer, TrainingError, full_weights, train


def run(args: argparse.Namespace, signals: Signals) -> int:
    """The session; returns the exit code (the heartbeat thread may end the process first)."""
    if not torch.cuda.is_available() and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)  # several ranks share a CPU host's cores (tests, CI)
    ending = Ending(Path(os.environ.get("HETC_RUN_DIR", "hetc-run")), debug=args.debug)
    try:
        return _session(args, signals, ending)
    except StartupError as exc:
        if exc.rank_file is not None and ending.rank is None:
            rank_file = exc.rank_file
            ending.identify(
                rank_file["rank"], rank_file["node"], rank_file["plan_hash"], named=False
            )
        return ending.finish(EXIT_FAILED, f"start-up failed: {exc}", error=exc)
    except TrainingError as exc:
        return ending.finish(EXIT_FAILED, f"training failed: {exc}", error=exc)
    except CheckpointError as exc:
        return ending.finish(EXIT_FAILED, f"checkpoint failed: {exc}", error=exc)
    except DataError as exc:
        return ending.finish(EXIT_FAILED, f"training data: {exc}", error=exc)
    except Exception as exc:
        if ending.heartbeat is not None and isinstance(exc, RuntimeError):
            ending.heartbeat.after_error()  # ends the process if a peer was lost
        reason = (str(exc).strip().splitlines() or [""])[0]
        hint = "" if args.debug else " (--debug prints the traceback)"
        return ending.finish(
            EXIT_FAILED, f"failed: {type(exc).__name__}: {reason}{hint}", error=exc
        )
    finally:
        if ending.heartbeat is not None:
            ending.heartbeat.stop()
        if dist.is_initialized():
            dist.destroy_process_group()


def _session(args: argparse.Namespace, signals: Signals, ending: Ending) -> int:
    started = start(args.out_dir, timeout=args.timeout)
    rank = started.plan_rank
    ending.identify(rank, started.rank_file["node"], started.rank_file["plan_hash"])
    print(
        f"hetc-runtime: rank {rank} of {started.world_size} ready"
        f" (node {started.rank_file['node']}, local rank {started.rank_file['local_rank']},"
        f" {len(started.groups)} groups verified, inputs match the manifest)",
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
        return ending.finish(EXIT_DONE, "start-up verified", quiet=True)
    ending.heartbeat = _heartbeat(started, args, ending, signals)
    trainer = StageTrainer(started, args.out_dir)
    batch = trainer.training["global_batch_size"]
    root = checkpoint_root(trainer)
    ending.checkpoints, ending.global_batch = root, batch
    first = _first_step(trainer, args, root)
    steps = args.steps if args.steps is not None else trainer.training["run"]["steps"] - first
    steps = max(steps, 0)
    ending.step = first
    checkpoints = Checkpointer(
        trainer, root, timeout=args.timeout, start_step=first, signals=signals
    )
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
            ending.step = record.step + 1
            if checkpoints.after_step(record.step + 1):
                return _preempted(ending, record.step + 1)
    checkpoints.close(first + steps)
    if args.save_weights is not None:
        weights = full_weights(trainer)
        if weights is not None:
            args.save_weights.mkdir(parents=True, exist_ok=True)
            torch.save(weights, args.save_weights / f"stage{trainer.rank_file['stage']}.pt")
    dist.barrier()
    return ending.finish(EXIT_DONE, f"trained steps {first} to {first + steps - 1}", quiet=True)


def _heartbeat(
    started: Startup, args: argparse.Namespace, ending: Ending, signals: Signals
) -> Heartbeat:
    """Start this rank's heartbeat once every rank has beaten once (one barrier)."""
    cluster = json.loads(started.inputs.text("topology/cluster.json") or "{}")
    where = {
        p["rank"]: (n["id"], p["local_rank"]) for n in cluster["nodes"] for p in n["processes"]
    }
    peers = [
        Peer(rank=r, node=where[r][0], local_rank=where[r][1], torch_rank=t)
        for r, t in sorted(started.torch_ranks.items())
    ]
    me = next(p for p in peers if p.rank == started.plan_rank)
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store_host = None if agent_store else next(p for p in peers if p.torch_rank == 0)
    heartbeat = Heartbeat(
        me=me,
        peers=peers,
        timeout=args.heartbeat_timeout,
        ending=ending,
        signals=signals,
        grace=args.term_grace,
        store_host=store_host,
    )
    heartbeat.connect()
    dist.barrier()
    heartbeat.start()
    return heartbeat


def _first_step(trainer: StageTrainer, args: argparse.Namespace, root: Path) -> int:
    """Where training starts: the checkpoint `--resume` names, else the newest complete one
    in `root`, else (or with `--from-scratch`) step 0. Plan rank 0 chooses and tells the
    others, so that a checkpoint another run publishes meanwhile cannot split them; each
    rank then reads the chosen one (`load_checkpoint` stops all if any cannot)."""
    rank0 = trainer.started.plan_rank == 0
    batch = trainer.training["global_batch_size"]
    choice: list[Any] = [None]
    if rank0:
        choice = [_choose(args, root)]
    dist.broadcast_object_list(choice, src=trainer.started.torch_ranks[0])
    chosen, error = choice[0]
    if error is not None:
        raise CheckpointError(error)
    if chosen is None:
        return 0
    path, step = load_checkpoint(trainer, chosen, root)
    if rank0:
        print(
            f"hetc-runtime: resumed from {path} at step {step}, sample {step * batch} (the data"
            f" position), under plan {trainer.rank_file['plan_hash'][:12]}",
            flush=True,
        )
    return step


def _choose(args: argparse.Namespace, root: Path) -> tuple[str | None, str | None]:
    """Plan rank 0's choice: (the checkpoint to resume, None), (None, None) for step 0 (said
    here), or (None, the error every rank raises)."""
    if args.resume is not None:
        try:
            return str(resolve(args.resume, root)), None
        except CheckpointError as exc:
            return None, str(exc)
    found = newest_checkpoint(root)
    if found is not None and not args.from_scratch:
        return str(found[0]), None
    kept = ""
    if found is not None:
        kept = (
            f"; the checkpoints in {root} (newest {found[0].name}) are kept, and steps that"
            " have one are not published again"
        )
    why = "--from-scratch" if args.from_scratch else f"no checkpoint in {root}"
    print(f"hetc-runtime: starting at step 0 ({why}){kept}", flush=True)
    return None, None


def _preempted(ending: Ending, step: int) -> int:
    """The ranks stopped at `step` on SIGTERM, its checkpoint complete everywhere."""
    checkpoint = ending.checkpoint()
    saved = checkpoint is not None and checkpoint.step == step
    done = (
        f"stopped after saving the checkpoint of step {step}"
        if saved
        else f"stopped at step {step}, whose checkpoint another run had written (kept)"
    )
    return ending.finish(EXIT_PREEMPTED, f"preempted: SIGTERM; {done}", saved=saved)
