"""What each rank measures per iteration: where its time went and its peak memory.

Time is split three ways by the code that spends it: compute (forward and backward of the
stage, TP collectives inside the layers included), communication (the data-parallel and tied
sums, the boundary all-gathers inside a replica, the clip and loss reductions) and idle (blocked
waiting for a pipeline neighbour's activation or gradient, and whatever else the iteration
spent). On a GPU the peak is the CUDA caching allocator's; a CPU has no allocator statistics, so
`LiveTensorBytes` counts the bytes of every tensor storage created while it is active, until
that storage is freed, and the process's resident set size is reported beside it.
"""

from __future__ import annotations

import contextlib
import gc
import resource
import time
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

SECTIONS = ("compute", "communication", "idle")


class IterationClock:
    """Seconds per section within one iteration; `idle` also takes what no section claimed.
    Iterations follow each other without a gap: `finish` closes one and starts the next, so
    whatever runs between two iterations (writing the metrics, the checkpoint agreement and
    copy) counts in the next one's idle time, and the iterations' seconds add up to the
    run's wall time."""

    def __init__(self) -> None:
        self.spent = dict.fromkeys(SECTIONS, 0.0)
        self.began = time.perf_counter()

    @contextlib.contextmanager
    def section(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.spent[name] += time.perf_counter() - started

    def finish(self) -> dict[str, float]:
        """The iteration's seconds by section and in all; the next iteration starts now."""
        now = time.perf_counter()
        total = now - self.began
        claimed = self.spent["compute"] + self.spent["communication"]
        spent = {**self.spent, "idle": max(0.0, total - claimed), "seconds": total}
        self.spent, self.began = dict.fromkeys(SECTIONS, 0.0), now
        return spent


class LiveTensorBytes(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Peak bytes of live tensor storage under this mode (CPU peak memory).

    With `adopt_live`, storages that already exist when the mode is entered (weights, their
    gradients, optimizer state: whatever Python can reach) count from the start, so the peak
    is the process's whole tensor footprint, comparable with a GPU allocator's
    `max_memory_allocated` and with the cost model's prediction; without it, only what is
    created under the mode counts.
    """

    def __init__(self, *, adopt_live: bool = False) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.live: dict[int, int] = {}
        self.current = 0
        self.peak = 0
        self.adopt_live = adopt_live

    def __enter__(self) -> LiveTensorBytes:
        if self.adopt_live:
            with warnings.catch_warnings():  # isinstance() on deprecated module attributes
                warnings.simplefilter("ignore")
                found = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
            for tensor in found:
                if tensor.device.type == "cpu" and not tensor.is_meta:
                    self._track(tensor.untyped_storage())
        super().__enter__()  # type: ignore[no-untyped-call]
        return self

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten(out)[0]:
            if isinstance(value, torch.Tensor):
                self._track(value.untyped_storage())
        return out

    def _track(self, storage: torch.UntypedStorage) -> None:
        key, size = storage.data_ptr(), storage.nbytes()
        if size == 0 or key in self.live:
            return
        self.live[key] = size
        self.current += size
        self.peak = max(self.peak, self.current)
        weakref.finalize(storage, self._free, key)

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)

    def reset_peak(self) -> None:
        self.peak = self.current


def resident_bytes() -> int:
    """The process's peak resident set size so far (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
