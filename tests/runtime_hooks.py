"""One rank of the runtime with test hooks applied: a rank that dies, freezes, is signalled at
a chosen moment, or writes its checkpoint slowly.

    python tests/runtime_hooks.py HOOK[,HOOK...] [runtime arguments...]

Hooks that act "on rank R" act on the process whose plan rank (as the rank file says) is R,
which in these tests equals its torch rank (`RANK`). Before a hook kills or stops its own
process it writes `HETC_RUN_DIR/hook-rank-<R>.time` (seconds since the epoch), from which
the tests' reports measure how long the survivors took to notice.

- `kill-rank-1-step-2`, `stop-rank-1-step-2`: SIGKILL or SIGSTOP at the start of step 2;
  `kill-rank-0-step-2` kills plan rank 0, which hosts the c10d store where no torchrun
  agent does.
- `orphan-rank-1-step-2`: at the start of step 2, plan rank 1 SIGKILLs its parent (the
  stand-in for torchrun's agent) and trains on.
- `usr1-in-startup-rank-1`, `term-in-startup-rank-1`: the signal while start-up runs (before
  the process group is joined).
- `usr1-in-loading`: SIGUSR1 on every rank just before the checkpoint is read.
- `term-rank-1-step-<k>`: SIGTERM at the start of step k (k a digit).
- `slow-write`: every checkpoint writer sleeps 60 s before writing its part.

The hooks wrap functions where the runtime's entry module looks them up (`start`,
`load_checkpoint` and `StageTrainer.train_step`), whichever of hetc.runtime's modules
imported them, so that the same hooks run against an older runtime, where the tests that use
them must fail.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENTRY_MODULES = ("hetc.runtime.__main__", "hetc.runtime.session")


def _me() -> int:
    return int(os.environ["RANK"])


def _stamp() -> None:
    run_dir = Path(os.environ["HETC_RUN_DIR"])
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / f"hook-rank-{_me()}.time").write_text(f"{time.time()!r}\n")


def _wrap(name: str, before: Callable[[], None]) -> None:
    """Call `before` first whenever an entry module calls its function `name`."""
    for module_name in ENTRY_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        original = getattr(module, name, None)
        if original is None:
            continue

        def wrapped(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            before()
            return _original(*args, **kwargs)

        setattr(module, name, wrapped)


def _at_step(rank: int, step: int, action: Callable[[], None]) -> None:
    from hetc.runtime.train import StageTrainer

    train_step = StageTrainer.train_step

    def hooked(self: StageTrainer, at: int) -> float:
        if self.started.plan_rank == rank and at == step:
            action()
        return train_step(self, at)

    StageTrainer.train_step = hooked  # type: ignore[method-assign]


def _signal_self(number: int) -> Callable[[], None]:
    def send() -> None:
        if number in (signal.SIGKILL, signal.SIGSTOP):
            _stamp()
        os.kill(os.getpid(), number)

    return send


def _on_rank_1(action: Callable[[], None]) -> Callable[[], None]:
    def act() -> None:
        if _me() == 1:
            action()

    return act


def _slow_write() -> None:
    from hetc.runtime import checkpoint

    write_part = checkpoint.Checkpointer._write_part

    def slow(self: Any, *args: Any) -> None:
        time.sleep(60)
        write_part(self, *args)

    checkpoint.Checkpointer._write_part = slow  # type: ignore[method-assign]


def apply(name: str) -> None:
    if name == "kill-rank-1-step-2":
        _at_step(1, 2, _signal_self(signal.SIGKILL))
    elif name == "kill-rank-0-step-2":
        _at_step(0, 2, _signal_self(signal.SIGKILL))
    elif name == "orphan-rank-1-step-2":
        _at_step(1, 2, lambda: os.kill(os.getppid(), signal.SIGKILL))
    elif name == "stop-rank-1-step-2":
        _at_step(1, 2, _signal_self(signal.SIGSTOP))
    elif name == "usr1-in-startup-rank-1":
        _wrap("start", _on_rank_1(_signal_self(signal.SIGUSR1)))
    elif name == "term-in-startup-rank-1":
        _wrap("start", _on_rank_1(_signal_self(signal.SIGTERM)))
    elif name == "usr1-in-loading":
        _wrap("load_checkpoint", _signal_self(signal.SIGUSR1))
    elif name.startswith("term-rank-1-step-"):
        _at_step(1, int(name.rsplit("-", 1)[1]), _signal_self(signal.SIGTERM))
    elif name == "slow-write":
        _slow_write()
    else:
        raise SystemExit(f"unknown hook {name}")


if __name__ == "__main__":
    for hook in sys.argv[1].split(","):
        apply(hook)
    from hetc.runtime.__main__ import main

    sys.exit(main(sys.argv[2:]))
