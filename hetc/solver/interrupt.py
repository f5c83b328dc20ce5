"""Ctrl-C as "stop searching and answer": while a search runs under `interrupt_stops`, the
first SIGINT sets an event the search checks between steps (`SearchOptions.stop`), so it
returns the best plan found so far with its proven gap instead of dying with nothing. The
handler then puts the previous one back, so a second Ctrl-C interrupts as usual (for a user
who wants out at once, or a step that does not check).

A signal handler can only be installed from the main thread: elsewhere (a library caller's
worker thread) the event is returned unwired, and Ctrl-C keeps its usual meaning.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["interrupt_stops"]


@contextmanager
def interrupt_stops() -> Iterator[threading.Event]:
    """An event that the first SIGINT inside the block sets (see the module docstring)."""
    event = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield event
        return
    previous = signal.getsignal(signal.SIGINT)

    def first(signum: int, frame: FrameType | None) -> None:
        event.set()
        signal.signal(signal.SIGINT, previous)

    signal.signal(signal.SIGINT, first)
    try:
        yield event
    finally:
        signal.signal(signal.SIGINT, previous)
