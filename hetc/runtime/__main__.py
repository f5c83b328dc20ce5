"""`python -m hetc.runtime OUT_DIR`: what torchrun starts on every process of a compiled plan.

Start-up (every process matches the plan, every input matches the compiled output's
manifest, every process group checks out), then training for the run's steps (or `--steps`),
resumed by default from the newest complete checkpoint in the run's checkpoint directory
(`--from-scratch` starts at step 0 and keeps what is there). Each rank appends one JSON line
per step to `HETC_RUN_DIR/metrics/rank-<r>.jsonl` (with the plan hash, so that `hetc
calibrate` can tell runs of another plan apart); plan rank 0 also prints the loss of each
step. A heartbeat names a lost or frozen peer (`hetc.runtime.heartbeat`); SIGUSR1 asks for a
checkpoint and SIGTERM for a checkpoint and a clean stop (`hetc.runtime.signals`).

Every exit says why in one line (tracebacks only with `--debug`), leaves an outcome record in
`HETC_RUN_DIR/outcome/` and returns one of `hetc.plan.outcome`'s codes: 0 done, 1 failed,
75 a peer was lost, 76 preempted (SIGTERM); 2 for a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from hetc.runtime.signals import Signals

DEFAULT_HEARTBEAT = 30.0
"""Seconds without a peer's heartbeat after which it is lost (`--heartbeat-timeout`)."""
DEFAULT_GRACE = 25.0
"""Seconds from SIGTERM to a complete checkpoint (`--term-grace`): within Slurm's default
KillWait and torchrun's shutdown wait (30 s each) with 5 s to spare for exiting."""
TRUE, FALSE = ("1", "true", "yes"), ("", "0", "false", "no")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def _flag(parser: argparse.ArgumentParser, variable: str) -> bool:
    """A boolean option's default from the environment: 1/true/yes or 0/false/no/empty."""
    value = os.environ.get(variable, "").strip().lower()
    if value in TRUE:
        return True
    if value not in FALSE:
        parser.error(f"{variable}={os.environ[variable]!r}: use 1 or 0")
    return False


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m hetc.runtime",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR", help="what `hetc compile` wrote")
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=os.environ.get("HETC_STARTUP_TIMEOUT", "300"),
        metavar="SECONDS",
        help="the longest any start-up step, and any collective, waits for the other"
        " processes (default: $HETC_STARTUP_TIMEOUT or 300); above the heartbeat timeout",
    )
    parser.add_argument(
        "--heartbeat-timeout",
        type=_seconds,
        default=os.environ.get("HETC_HEARTBEAT_TIMEOUT"),
        metavar="SECONDS",
        help="a peer whose heartbeat is this old is lost: every rank stops with exit 75"
        f" (default: $HETC_HEARTBEAT_TIMEOUT, else {DEFAULT_HEARTBEAT:g} or half of --timeout"
        " if that is less)",
    )
    parser.add_argument(
        "--term-grace",
        type=_seconds,
        default=os.environ.get("HETC_TERM_GRACE", str(DEFAULT_GRACE)),
        metavar="SECONDS",
        help="after SIGTERM, the time to complete a checkpoint before stopping without one"
        f" (default: $HETC_TERM_GRACE or {DEFAULT_GRACE:g}; keep it below the scheduler's"
        " SIGKILL delay: Slurm's KillWait, 30 s by default)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        help="iterations to train (default: the run's, less those a resumed checkpoint did)",
    )
    start = parser.add_mutually_exclusive_group()
    start.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        metavar="PATH",
        help="continue from a checkpoint: 'latest' (the newest complete one in the run's"
        " checkpoint_dir, also the default without this option), a checkpoint step-<k>"
        " directory, or a checkpoint directory (its newest)",
    )
    start.add_argument(
        "--from-scratch",
        action="store_true",
        help="start at step 0 even where checkpoints exist (they are kept, never replaced;"
        " also $HETC_FROM_SCRATCH=1)",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="print the traceback of an error besides its one line (also $HETC_DEBUG=1)",
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


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    """The command line, with the environment's defaults; exits 2 on a usage error."""
    parser = _parser()
    args = parser.parse_args(argv)
    from_scratch = args.resume is None and _flag(parser, "HETC_FROM_SCRATCH")
    args.from_scratch = args.from_scratch or from_scratch
    args.debug = args.debug or _flag(parser, "HETC_DEBUG")
    if args.heartbeat_timeout is None:
        args.heartbeat_timeout = min(DEFAULT_HEARTBEAT, args.timeout / 2)
    if args.heartbeat_timeout >= args.timeout:
        parser.error(
            f"--heartbeat-timeout {args.heartbeat_timeout:g} must be below --timeout"
            f" {args.timeout:g}: the heartbeat must name a lost peer before a collective"
            " times out"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    signals = Signals().install()  # before anything slow: a signal now is deferred, not fatal
    args = parse_arguments(argv)
    from hetc.runtime.session import run  # torch: after the signals and the usage check

    return run(args, signals)


if __name__ == "__main__":
    sys.exit(main())
