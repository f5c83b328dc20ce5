"""Ctrl-C (and SIGTERM, which a job scheduler or `timeout` sends) as "stop searching and
answer": while a search runs under `interrupt_stops`, the first SIGINT or SIGTERM sets an
event the search checks between steps (`SearchOptions.stop`), so it returns the best plan
found so far with its proven gap instead of dying with nothing. The handlers then put the
previous ones back, so a second signal acts as usual (for a user who wants out at once, or
a step that does not check).

A signal handler can only be installed from the main thread: elsewhere (a library caller's
worker thread) the event is returned unwired, and Ctrl-C keeps its usual meaning.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["STOPPING", "interrupt_stops"]


STOPPING = (signal.SIGINT, signal.SIGTERM)
"""The signals that end a search with its best plan so far."""


@contextmanager
def interrupt_stops() -> Iterator[threading.Event]:
    """An event that the first SIGINT or SIGTERM inside the block sets (see the module
    docstring)."""
    event = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield event
        return
    previous = {signum: signal.getsignal(signum) for signum in STOPPING}

    def first(signum: int, frame: FrameType | None) -> None:
        event.set()
        for other, handler in previous.items():
            signal.signal(other, handler)

    for signum in STOPPING:
        signal.signal(signum, first)
    try:
        yield event
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
