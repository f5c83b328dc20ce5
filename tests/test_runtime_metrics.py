"""Per-iteration measurements: live tensor bytes on CPU, time sections, resident size."""

from __future__ import annotations

import gc
import time

import pytest
import torch

from hetc.runtime.metrics import IterationClock, LiveTensorBytes, resident_bytes
from hetc.runtime.train import square_norm


def test_live_tensor_bytes_counts_storage_until_it_is_freed() -> None:
    with LiveTensorBytes() as tracker:
        a = torch.empty(1000, dtype=torch.float32)
        b = torch.empty(500, dtype=torch.float64)
        assert tracker.current == 4000 + 4000
        view = a[10:20]  # a view shares its storage: not counted again
        assert tracker.current == 8000
        del a, view
        gc.collect()
        assert tracker.current == 4000
        c = torch.zeros(100, dtype=torch.int8)
        assert tracker.peak == 8000 and tracker.current == 4100
        tracker.reset_peak()
        assert tracker.peak == 4100
        del b, c


def test_live_tensor_bytes_sees_autograd_intermediates() -> None:
    """A forward and backward allocate activations and gradients the tracker must count."""
    layer = torch.nn.Linear(64, 64)
    x = torch.randn(32, 64)
    with LiveTensorBytes() as tracker:
        y = layer(x).relu()
        y.sum().backward()
    # at least the output (32 x 64 floats) and the weight's gradient (64 x 64 floats)
    assert tracker.peak >= (32 * 64 + 64 * 64) * 4


def test_adopted_storage_counts_from_the_start_and_until_freed() -> None:
    """Weights and optimizer state made before the mode count, as a GPU allocator's would;
    views and a second reference are not counted twice."""
    weights = torch.empty(2000, dtype=torch.float32)
    alias = weights[:10]
    with LiveTensorBytes(adopt_live=True) as tracker:
        assert tracker.current >= 8000
        before = tracker.current
        scratch = torch.empty(250, dtype=torch.float64)
        assert tracker.current == before + 2000 and tracker.peak == before + 2000
        del weights, alias, scratch
        gc.collect()
        assert tracker.current == before - 8000
    with LiveTensorBytes() as fresh:
        assert fresh.current == 0


def test_clock_sections_and_idle_remainder() -> None:
    clock = IterationClock()
    with clock.section("compute"):
        time.sleep(0.02)
    with clock.section("communication"):
        time.sleep(0.01)
    time.sleep(0.01)
    spent = clock.finish()
    assert spent["compute"] >= 0.02 and spent["communication"] >= 0.01
    assert spent["idle"] >= 0.01
    assert abs(spent["compute"] + spent["communication"] + spent["idle"] - spent["seconds"]) < 1e-9


def test_clock_iterations_follow_without_a_gap() -> None:
    """`finish` starts the next iteration: time between two iterations (the metrics write,
    the checkpoint agreement) is the next one's idle time, and the iterations' seconds add
    up to the wall time (mutation check: not restarting in `finish` makes the second
    iteration count the first's 20 ms again, and this fails)."""
    began = time.perf_counter()
    clock = IterationClock()
    with clock.section("compute"):
        time.sleep(0.02)
    first = clock.finish()
    time.sleep(0.01)
    second = clock.finish()
    wall = time.perf_counter() - began
    assert second["compute"] == 0.0 and 0.01 <= second["idle"] == second["seconds"]
    assert first["seconds"] + second["seconds"] == pytest.approx(wall, abs=1e-3)


def test_resident_bytes_is_positive() -> None:
    assert resident_bytes() > 10**6


def test_square_norm_is_float64_without_a_float64_copy() -> None:
    """The clip's squared norm is a float64 scalar equal to the float64 sum of squares within
    fp32 accumulation (1e-6), allocates no copy of the tensor (the old `.double().pow(2)`
    made two, 16 bytes per element), and widens fp16 rather than overflowing: an fp16
    gradient of 60000s has a norm far past fp16's range."""
    gradient = torch.randn(512, 64)
    with LiveTensorBytes(adopt_live=True) as tracker:
        before = tracker.current
        value = square_norm(gradient)
        assert tracker.peak - before < 1024
    assert value.dtype == torch.float64
    assert float(value) == pytest.approx(float(gradient.double().pow(2).sum()), rel=1e-6)
    large = torch.full((100,), 60000.0, dtype=torch.float16)
    assert float(square_norm(large)) == pytest.approx(100 * 60000.0**2, rel=1e-6)
