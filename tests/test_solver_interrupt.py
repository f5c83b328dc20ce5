"""Ctrl-C (or SIGTERM) during a search: the first SIGINT or SIGTERM only sets the search's
stop event, a second signal acts as usual, and the previous handlers are back after the
block (`hetc plan` itself, stopped either way: tests/test_anytime_cases.py)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from hetc.solver.interrupt import interrupt_stops


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Python's own SIGINT handling, as an interactive `hetc plan` has it (a process started
    in the background, as a test worker may be, inherits SIGINT ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("python_sigint")
def test_the_first_sigint_sets_the_event_and_a_second_interrupts() -> None:
    """A SIGINT inside the block sets the event without raising; the next one raises
    KeyboardInterrupt; after the block the handler is the one from before."""
    before = signal.getsignal(signal.SIGINT)
    with interrupt_stops() as stop:
        assert not stop.is_set()
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.wait(5)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            threading.Event().wait(5)
    assert signal.getsignal(signal.SIGINT) is before


def test_off_the_main_thread_the_event_is_not_wired() -> None:
    """A worker thread cannot install a handler (`signal.signal` would raise there): it gets
    an unset event, and the process's handler stays as it was."""
    before = signal.getsignal(signal.SIGINT)
    seen: list[object] = []

    def work() -> None:
        with interrupt_stops() as stop:
            seen.append(stop.is_set())
            seen.append(signal.getsignal(signal.SIGINT) is before)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    assert seen == [False, True]


def test_a_sigterm_sets_the_event_and_a_second_terminates_as_before() -> None:
    """A SIGTERM inside the block sets the event without ending the process; the handlers of
    both signals are put back at once, so a second SIGTERM reaches the previous handler
    (here a recorder), and after the block both handlers are the ones from before."""
    got: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
        with interrupt_stops() as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop.wait(5) and got == []
            assert signal.getsignal(signal.SIGTERM) is before[1]
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.monotonic() + 30
            while not got and time.monotonic() < deadline:
                threading.Event().wait(0.01)
            assert got == [signal.SIGTERM]
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    finally:
        signal.signal(signal.SIGTERM, previous)
