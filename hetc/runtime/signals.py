"""SIGUSR1 and SIGTERM: remembered from the first moment, acted on at an iteration boundary.

Both default actions kill the process, and both signals arrive when they like: Slurm's
`--signal=USR1@120` or a spot preemption's SIGTERM may land while a rank joins the process
group or reads a checkpoint. Acting there (a checkpoint needs every rank at an iteration
boundary) is impossible, and dying there loses the run. So `install` is the first thing the
runtime does: the handlers only count, and the training loop asks every iteration
(`hetc.runtime.checkpoint.Checkpointer.observe`), so a signal received during start-up or
loading is acted on at the first boundary.

SIGUSR1 asks for a checkpoint; training goes on. SIGTERM, or a first SIGINT (Ctrl-C on a rank
started by hand), asks for a checkpoint and then a
clean stop (`EXIT_PREEMPTED`) within the grace period counted from the signal: after it, the
scheduler's SIGKILL follows (Slurm's KillWait, 30 s by default; torchrun's agent waits 30 s
after forwarding SIGTERM). A second SIGINT stops the rank at once, without a checkpoint (exit
130): the user asked twice; checkpoints are published whole or not at all, so none is left
half-written. A rank that learns of the stop from another rank's signal, through
the iteration's agreement, counts its grace from then (`Signals.stop_learnt`).

The handler object holds only numbers: Python keeps a signal handler alive until interpreter
shutdown, and a handler that reached the trainer would keep its gloo groups until then, where
a gloo worker thread dropping a tensor cannot take the GIL and aborts the process
("terminate called without an active exception").
"""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType


class Signals:
    """What arrived so far: SIGUSR1s counted, and when the first SIGTERM came."""

    def __init__(self) -> None:
        self.checkpoints = 0
        """SIGUSR1s received."""
        self.stops = 0
        """SIGTERMs and SIGINTs received."""
        self.interrupts = 0
        """SIGINTs received."""
        self.stop_since: float | None = None
        """time.monotonic() of the first SIGTERM, or of learning of another rank's."""

    def install(self) -> Signals:
        """Handle SIGUSR1 and SIGTERM from now on (main thread only)."""
        signal.signal(signal.SIGUSR1, self._checkpoint)
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._interrupt)
        return self

    def _interrupt(self, signum: int, frame: FrameType | None) -> None:
        if self.interrupts:
            sys.stderr.write("hetc-runtime: interrupted twice: stopped without a checkpoint\n")
            sys.stderr.flush()
            os._exit(128 + signal.SIGINT)
        self.interrupts += 1
        self._stop(signum, frame)

    def _checkpoint(self, signum: int, frame: FrameType | None) -> None:
        self.checkpoints += 1

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self.stops += 1
        if self.stop_since is None:
            self.stop_since = time.monotonic()

    def stop_learnt(self) -> None:
        """Another rank was told to stop (the iteration's agreement said so): the grace
        counts from now on this rank, unless its own signal came earlier."""
        if self.stop_since is None:
            self.stop_since = time.monotonic()

    def grace_left(self, grace: float) -> float | None:
        """Seconds left of the grace period; None while no stop was asked for."""
        if self.stop_since is None:
            return None
        return grace - (time.monotonic() - self.stop_since)
