"""The runtime's signal handlers on their own (hetc.runtime.signals): what each signal counts,
and a second Ctrl-C stopping at once. Training runs that act on them: test_runtime_signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from hetc.runtime.signals import Signals


def test_usr1_counts_a_checkpoint_and_term_or_a_first_int_a_stop() -> None:
    """USR1 asks for a checkpoint; TERM and a first INT each ask for a stop, whose grace is
    counted from the first of them."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)}
    try:
        signals = Signals().install()
        assert signals.grace_left(10) is None
        os.kill(os.getpid(), signal.SIGUSR1)
        assert (signals.checkpoints, signals.stops) == (1, 0)
        os.kill(os.getpid(), signal.SIGINT)
        first = signals.stop_since
        os.kill(os.getpid(), signal.SIGTERM)
        assert (signals.checkpoints, signals.stops, signals.interrupts) == (1, 2, 1)
        assert first is not None and signals.stop_since == first
        left = signals.grace_left(10)
        assert left is not None and 0 < left <= 10
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def test_a_second_interrupt_stops_at_once_with_130() -> None:
    """Ctrl-C twice: the process exits 130 with one line, no traceback and no checkpoint."""
    program = textwrap.dedent(
        """
        import os, signal, time
        from hetc.runtime.signals import Signals
        Signals().install()
        os.kill(os.getpid(), signal.SIGINT)
        print("after the first", flush=True)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
        print("not reached", flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 130, done.stderr
    assert done.stdout == "after the first\n"
    assert done.stderr == "hetc-runtime: interrupted twice: stopped without a checkpoint\n"
