"""A stand-in for torchrun that records what it was given and which signals reached it.

Not a test module: launch tests write it to an executable file and point HETC_TORCHRUN at it.
It behaves as torch 2.13's torchrun does where the launch scripts depend on it (measured in
docs/compile.md): it handles the signals PET_SIGNALS_TO_HANDLE names (default SIGTERM, SIGINT,
SIGHUP, SIGQUIT) by exiting 1, as torchrun does after it has passed the signal on to its workers;
every other signal keeps the disposition it inherited. Each event is one JSON line appended to
FAKE_LOG: `start` (argv, the environment the runtime would see, the signals it started with
ignored), `signal` (which one), `exit` (the code).

Environment: FAKE_LOG (required); FAKE_RELEASE, a path: it runs until that file exists (at most
60 s), then exits FAKE_EXIT (default 0); FAKE_EXIT=kill makes it SIGKILL itself instead.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

WATCHED = ("SIGUSR1", "SIGINT", "SIGHUP", "SIGTERM")
ENVIRONMENT = (
    "HETC_FROM_SCRATCH",
    "HETC_NODE",
    "HETC_RUN_DIR",
    "HETC_TERM_GRACE",
    "PET_SIGNALS_TO_HANDLE",
    "SLURM_RESTART_COUNT",
    "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
)


def _note(**event: object) -> None:
    with open(os.environ["FAKE_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"pid": os.getpid(), **event}) + "\n")


def _on_signal(signum: int, _frame: object) -> None:
    _note(event="signal", signal=signal.Signals(signum).name)
    _note(event="exit", code=1)
    sys.exit(1)


def main() -> None:
    ignored = [n for n in WATCHED if signal.getsignal(getattr(signal, n)) == signal.SIG_IGN]
    _note(
        event="start",
        argv=sys.argv[1:],
        env={name: os.environ.get(name) for name in ENVIRONMENT},
        ignored=ignored,
    )
    handled = os.environ.get("PET_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT")
    for name in handled.split(","):
        signal.signal(getattr(signal, name.strip()), _on_signal)
    release = os.environ.get("FAKE_RELEASE")
    deadline = time.monotonic() + 60
    while release and not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.05)
    outcome = os.environ.get("FAKE_EXIT", "0")
    if outcome == "kill":
        _note(event="exit", code="kill")
        os.kill(os.getpid(), signal.SIGKILL)
    _note(event="exit", code=int(outcome))
    sys.exit(int(outcome))


if __name__ == "__main__":
    main()
