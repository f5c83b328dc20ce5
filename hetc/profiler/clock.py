"""Seconds of repeated sections: CUDA events on a GPU, the monotonic clock on CPU."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections import defaultdict
from collections.abc import Hashable, Iterator
from typing import Any

import torch


class Stopwatch:
    """Every duration of each named section, and their medians.

    On a GPU the host returns from a launch long before the kernels finish, so a host clock
    would time the launches; events recorded on the stream time the work itself, and are read
    only once, after one synchronisation, so that timing does not serialise the repeats.
    """

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.seconds: defaultdict[Hashable, list[float]] = defaultdict(list)
        self._pending: list[tuple[Hashable, Any, Any]] = []

    @contextlib.contextmanager
    def section(self, key: Hashable) -> Iterator[None]:
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            yield
            end.record()
            self._pending.append((key, start, end))
        else:
            began = time.perf_counter()
            yield
            self.seconds[key].append(time.perf_counter() - began)

    def durations(self) -> dict[Hashable, list[float]]:
        """Seconds of every repeat of each section, in the order they ran."""
        if self._pending:
            torch.cuda.synchronize()
            for key, start, end in self._pending:
                self.seconds[key].append(start.elapsed_time(end) / 1e3)
            self._pending.clear()
        return dict(self.seconds)

    def medians(self) -> dict[Hashable, float]:
        return {key: statistics.median(values) for key, values in self.durations().items()}
