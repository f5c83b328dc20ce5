"""The least time of runs of layers on each kind (`Windows`): a stage of P holds at least
ceil(L / P) consecutive blocks, the first the token table and a block, the last a block and
the head, so the straggler is at least the least such window on any kind it may run.
"""

from __future__ import annotations

from bisect import bisect_right
from operator import sub

from hetc.costmodel.planning import PlanningModel
from hetc.solver.search.incumbent import Incumbent, SearchOptions

Option = tuple[int, ...]
"""A stage option of `kind-profiles`: replica kind indices sharing one device and TP."""


class Windows(Incumbent):
    """Windows of layers per kind and their least over the kinds, cached."""

    def __init__(self, model: PlanningModel, options: SearchOptions) -> None:
        super().__init__(model, options)
        self._tp_degrees = sorted({k.tp for k in model.kinds})
        self._time_prefixes: dict[tuple[int, int], list[float]] = {}
        self._windows: dict[tuple[int, int], list[float]] = {}
        self._class_windows: dict[tuple[str, int, int], list[float]] = {}
        self._least_windows: dict[tuple[int, int, int], float] = {}
        self._least_ends: dict[tuple[int, int], float] = {}

    def tp_cap(self, max_tp: int) -> int:
        """The largest TP degree of any kind at most `max_tp`, 0 if none: the bounds depend on
        a TP cap only through it."""
        degrees = self._tp_degrees
        at = bisect_right(degrees, max_tp)
        return degrees[at - 1] if at else 0

    def least_window(self, mbs: int, max_tp: int, blocks: int) -> float:
        """The least time of `blocks` consecutive blocks on any kind of TP at most `max_tp`:
        one of P stages holds ceil(L / P) blocks, and its slowest kind takes at least this."""
        tp = self.tp_cap(max_tp)
        key = (mbs, tp, blocks)
        window = self._least_windows.get(key)
        if window is None:
            kinds = [k for k in self.model.kinds if k.tp <= tp] or list(self.model.kinds)
            window = min(self.window((k.index,), mbs, blocks) for k in kinds)
            self._least_windows[key] = window
        return window

    def least_ends(self, mbs: int, max_tp: int) -> float:
        """The larger of the least time, on any kind of TP at most `max_tp`, of the token
        table with the first block and of the last block with the head: with P > 1 the first
        stage holds the one and the last stage the other, and each stage's slowest kind
        takes at least its run's least time."""
        tp = self.tp_cap(max_tp)
        key = (mbs, tp)
        ends = self._least_ends.get(key)
        if ends is None:
            kinds = [k for k in self.model.kinds if k.tp <= tp] or list(self.model.kinds)
            last = self.model.blocks
            prefixes = [self._time_prefix(k.index, mbs) for k in kinds]
            first = min(prefix[2] - prefix[0] for prefix in prefixes)
            tail = min(prefix[last + 2] - prefix[last] for prefix in prefixes)
            ends = self._least_ends[key] = max(first, tail)
        return ends

    def window(self, option: Option, mbs: int, blocks: int) -> float:
        """The least time of `blocks` consecutive blocks on the option: of P stages one holds
        at least ceil(L / P) blocks, so the straggler is at least this on its option."""
        kind = option[0]
        windows = self._windows_of(kind, mbs)
        window = windows[blocks]
        if window < 0.0:
            prefix = self._time_prefix(kind, mbs)
            last = self.model.blocks + 1
            window = min(map(sub, prefix[1 + blocks : last + 1], prefix[1 : last - blocks + 1]))
            windows[blocks] = window
        return window

    def _windows_of(self, kind: int, mbs: int) -> list[float]:
        """The `window`s of the kind by number of blocks, -1 until asked for, one list per
        device, TP and microbatch size, on which a kind's times alone depend: the bounds
        ask for windows of a few block counts on every host, again and again."""
        key = (kind, mbs)
        windows = self._windows.get(key)
        if windows is None:
            k = self.model.kinds[kind]
            same = (k.device, k.tp, mbs)
            windows = self._class_windows.get(same)
            if windows is None:
                windows = self._class_windows[same] = [-1.0] * (self.model.blocks + 1)
            self._windows[key] = windows
        return windows

    def _time_prefix(self, kind: int, mbs: int) -> list[float]:
        """Forward + backward prefix sums of `kind` at `mbs`, for bisecting stage ends."""
        key = (kind, mbs)
        prefix = self._time_prefixes.get(key)
        if prefix is None:
            k = self.model.kinds[kind]
            t = self.model.tables(k.device, k.tp, mbs)
            prefix = [f + b for f, b in zip(t.forward, t.backward, strict=True)]
            self._time_prefixes[key] = prefix
        return prefix
