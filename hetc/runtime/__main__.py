"""`python -m hetc.runtime OUT_DIR`: what torchrun starts on every process of a compiled plan.

Start-up only, for now: training arrives in a later release. Exit status 0 when every process
matched the plan and every process group checked out, 1 with one line on stderr otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from hetc.runtime.startup import StartupError, start


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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not torch.cuda.is_available() and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)  # several ranks share a CPU host's cores (tests, CI)
    try:
        started = start(args.out_dir, timeout=args.timeout)
        print(
            f"hetc-runtime: rank {started.plan_rank} of {started.world_size} ready"
            f" (node {started.rank_file['node']}, local rank {started.rank_file['local_rank']},"
            f" {len(started.groups)} groups verified)",
            flush=True,
        )
        print("hetc-runtime: start-up verified; training is not in this release yet", flush=True)
        return 0
    except StartupError as exc:
        print(f"hetc-runtime: start-up failed: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
