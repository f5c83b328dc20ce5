"""A wall-clock budget for a whole command, passed down rather than re-derived.

`hetc plan` and `hetc compile` promise an answer within `--time-limit` seconds of wall time,
counted from the command's start: loading, the search, building and simulating the ranked
candidates and `--explain`'s re-plans all spend one budget. Each step asks the deadline what
is left (`remaining`) instead of holding a number of its own, so a slow step early leaves
less to the steps after it, never more than the whole. The clock is injectable so that tests
can expire a deadline without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Deadline"]


@dataclass(frozen=True, slots=True)
class Deadline:
    """The clock reading `at` which the budget of `seconds` is spent."""

    at: float
    seconds: float
    """The whole budget, as given (for messages)."""
    clock: Callable[[], float] = field(default=time.perf_counter, compare=False)

    @classmethod
    def after(cls, seconds: float, *, clock: Callable[[], float] = time.perf_counter) -> Deadline:
        """A budget of `seconds` from now."""
        return cls(at=clock() + seconds, seconds=seconds, clock=clock)

    def remaining(self) -> float:
        """Seconds left, 0 once spent."""
        return max(0.0, self.at - self.clock())

    def expired(self) -> bool:
        """Whether the budget is spent."""
        return self.clock() >= self.at

    def part(self, fraction: float) -> Deadline:
        """A deadline `fraction` (0..1) of the way from now to this one: what one step may
        spend so that the steps after it keep the rest."""
        now = self.clock()
        left = max(0.0, self.at - now)
        return Deadline(at=now + fraction * left, seconds=self.seconds, clock=self.clock)
