"""How a rank stops: one line, one outcome record, one exit code, whichever thread decides.

Two threads may decide that a rank must stop: the main thread (training ended, or failed,
or the ranks agreed to stop on SIGTERM) and the heartbeat thread (a peer is lost, a peer
failed, the SIGTERM grace ran out), which must end the process itself because the main
thread may be blocked in a gloo call. Whichever claims the ending first says why in ONE line
on stderr (`hetc-runtime: rank R: ...`; the traceback only with `--debug`), writes the rank's
outcome record (`hetc.plan.outcome`), tells the other ranks through the heartbeat
(`Heartbeat.publish_exit`), and exits with the code; the other thread stays silent.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from hetc.plan.outcome import (
    EXIT_DONE,
    CheckpointRef,
    LostPeer,
    Outcome,
    outcome_path,
    write_outcome,
)
from hetc.runtime.history import newest_checkpoint

if TYPE_CHECKING:
    from hetc.runtime.heartbeat import Heartbeat


class Ending:
    """What a rank knows about itself for its last words, and the claim on saying them."""

    def __init__(self, run_dir: Path, *, debug: bool) -> None:
        self.run_dir = run_dir
        self.debug = debug
        self.rank: int | None = None
        self.node: str | None = os.environ.get("HETC_NODE")
        self.local_rank: int | None = _int(os.environ.get("LOCAL_RANK"))
        self.torch_rank: int | None = _int(os.environ.get("RANK"))
        self.plan_hash: str | None = None
        self.step: int | None = None
        """The first step not yet finished (None before training)."""
        self.checkpoints: Path | None = None
        """The run's checkpoint directory, once known."""
        self.global_batch: int | None = None
        self.heartbeat: Heartbeat | None = None
        self._named = False
        self._lock = threading.Lock()
        self._owner: int | None = None

    def identify(self, rank: int, node: str, plan_hash: str, *, named: bool = True) -> None:
        """Who this rank is; `named`: its lines say `rank R:` (not where every rank prints
        the same start-up verdict)."""
        self.rank, self.node, self.plan_hash = rank, node, plan_hash
        self._named = named

    def claim(self) -> bool:
        """Take the ending for this thread; False when another thread has it."""
        with self._lock:
            if self._owner is None:
                self._owner = threading.get_ident()
            return self._owner == threading.get_ident()

    def checkpoint(self) -> CheckpointRef | None:
        """The newest complete checkpoint of the run's checkpoint directory, if any."""
        if self.checkpoints is None:
            return None
        newest = newest_checkpoint(self.checkpoints)
        if newest is None:
            return None
        path, step = newest
        return CheckpointRef(path=str(path), step=step, sample=step * (self.global_batch or 0))

    def finish(
        self,
        code: int,
        reason: str,
        *,
        lost: LostPeer | None = None,
        saved: bool = False,
        error: BaseException | None = None,
        quiet: bool = False,
    ) -> int:
        """End from the main thread: returns `code` for `main` to return. If the heartbeat
        thread is ending the process already, wait for it (it exits the process)."""
        if not self.claim():
            threading.Event().wait()
        self._say(code, reason, lost=lost, saved=saved, error=error, quiet=quiet)
        if self.heartbeat is not None:
            self.heartbeat.stop()
        return code

    def exit_now(self, code: int, reason: str, *, lost: LostPeer | None = None) -> None:
        """End from any thread, at once: the main thread may be blocked in a collective.
        Returns only when another thread claimed the ending first."""
        if not self.claim():
            return
        self._say(code, reason, lost=lost)
        _exit(code)

    def _say(
        self,
        code: int,
        reason: str,
        *,
        lost: LostPeer | None = None,
        saved: bool = False,
        error: BaseException | None = None,
        quiet: bool = False,
    ) -> None:
        checkpoint = self.checkpoint()
        line = reason.rstrip(".")
        if code != EXIT_DONE and self.checkpoints is not None:
            line += f"; at step {self.step}" if self.step is not None else "; before training"
            line += "; last complete checkpoint: " + (
                "none"
                if checkpoint is None
                else f"{checkpoint.path} (step {checkpoint.step}, sample {checkpoint.sample})"
            )
        if code != EXIT_DONE:
            line += f" (exit {code})"
        if error is not None and self.debug:
            traceback.print_exception(error, file=sys.stderr)
        if not quiet:
            who = f"rank {self.rank}: " if self._named else ""
            stream = sys.stdout if code == EXIT_DONE else sys.stderr
            print(f"hetc-runtime: {who}{line}", file=stream, flush=True)
        outcome = Outcome(
            code=code,
            reason=line,
            rank=self.rank,
            node=self.node,
            local_rank=self.local_rank,
            plan_hash=self.plan_hash,
            step=self.step,
            lost=lost,
            checkpoint=checkpoint,
            checkpoint_saved=saved,
            time=time.time(),
        )
        try:
            path = outcome_path(self.run_dir, self.rank, torch_rank=self.torch_rank)
            write_outcome(path, outcome)
        except OSError as exc:
            print(
                f"hetc-runtime: warning: cannot write the outcome record: {exc}",
                file=sys.stderr,
                flush=True,
            )
        if self.heartbeat is not None:
            self.heartbeat.publish_exit(code, reason, lost)


def _exit(code: int) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None
