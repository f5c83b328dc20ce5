"""How far `hetc profile measure` is: points done of the total, time spent, time left.

A full profile of a large model takes minutes to hours, so the command says after every
point how far it is and about how long the rest takes: the mean time of a point so far times
the points left (points differ, a larger microbatch taking longer, so this is an estimate).
On a terminal one bar line is redrawn in place with each point's numbers printed above it;
elsewhere (a log, CI) each point gets a plain line.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Echo = Callable[..., None]
BAR_WIDTH = 24


class Progress:
    """Counts points as they finish and shows it on stderr through `echo`."""

    def __init__(
        self,
        echo: Echo,
        total: int,
        *,
        terminal: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.echo, self.total, self.terminal, self.clock = echo, total, terminal, clock
        self.started = clock()
        self.done = 0
        if terminal and total:
            self.echo(self.bar(), err=True, nl=False)

    def elapsed(self) -> float:
        return self.clock() - self.started

    def left(self) -> float:
        """Seconds the remaining points take at the mean pace so far (0 before the first)."""
        if not self.done:
            return 0.0
        return self.elapsed() / self.done * (self.total - self.done)

    def bar(self) -> str:
        filled = BAR_WIDTH * self.done // max(1, self.total)
        return (
            f"hetc: [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {self.done}/{self.total}"
            f" points, {self.elapsed():.0f} s elapsed"
            + (f", about {self.left():.0f} s left" if self.done else "")
        )

    def point(self, text: str) -> None:
        """One more point done; `text` says what it measured."""
        self.done += 1
        if self.terminal:
            self.echo(f"\r\x1b[K{text}", err=True)
            self.echo(self.bar(), err=True, nl=False)
        else:
            self.echo(
                f"hetc: [{self.done}/{self.total}] {text} ({self.elapsed():.1f} s elapsed,"
                f" about {self.left():.0f} s left)",
                err=True,
            )

    def note(self, text: str) -> None:
        """A line that is not a point (a warning, a group starting)."""
        if self.terminal:
            self.echo(f"\r\x1b[K{text}", err=True)
            self.echo(self.bar(), err=True, nl=False)
        else:
            self.echo(text, err=True)

    def close(self) -> None:
        """End the bar's line, so that what follows starts on its own."""
        if self.terminal and self.total:
            self.echo("", err=True)
