"""bench/runtime.py runs end to end with tiny settings, and its two loops do the same work: the
runtime and the plain torch loop compute the same losses step by step (so its speed ratio
compares like with like). No wall-clock time is asserted.

Mutation checks, done by hand on the plain loop: without the spec's weight decay (0.1 at a
rate of 1e-3) its losses differ from the runtime's by 5.9e-7 relative within the 4 steps, above
this test's 2e-7 (the two agree to ~1e-8); without the clip by 2.4e-5, above the bench's own
fp32 tolerance too (1e-5), so that the bench prints "losses DIFFER" and exits 1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench" / "runtime.py"
TINY = [
    *("--layers", "2", "--hidden", "32", "--heads", "2", "--ffn", "64", "--vocab", "128"),
    *("--seq", "16", "--batch", "4", "--micro", "2", "--steps", "4", "--warmup", "1"),
    *("--repeats", "1", "--profile", "--top", "3"),
]
STEPS = 4


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """One run of the bench on both paths with tiny settings, profiled: its output and work
    folder."""
    work = tmp_path_factory.mktemp("bench-runtime")
    done = subprocess.run(
        [sys.executable, str(BENCH), *TINY, "--work", str(work)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, work


@pytest.mark.slow
def test_the_bench_prints_both_paths_rates_ratio_and_breakdown(
    bench_run: tuple[str, Path],
) -> None:
    """Per path: both loops' steps/s and their ratio (one repeat: the ratio of the rates, and
    that of the fastest runs), the loss agreement, the per-section breakdown of a median step
    and the profile's functions where the runtime spends more than the loop."""
    out, _ = bench_run
    for path in ("zero0", "zero1"):
        rates = re.search(
            rf"^{path}: runtime ([\d.]+) steps/s \(.*\), plain loop ([\d.]+) steps/s \(.*\);"
            rf" runtime/loop ([\d.]+) \(repeats ([\d.]+); fastest runs ([\d.]+)\)$",
            out,
            re.M,
        )
        assert rates is not None, out
        runtime, loop, ratio, repeat, fastest = (float(g) for g in rates.groups())
        assert ratio == repeat == fastest == pytest.approx(runtime / loop, rel=0.01)
        assert re.search(rf"^{path}: losses agree over steps 0-{STEPS - 1}:", out, re.M), out
        assert re.search(
            rf"^{path}: median step, runtime [\d.]+ ms = compute [\d.]+ \+ communication"
            rf" [\d.]+ \+ idle [\d.]+; loop [\d.]+ ms = forward\+backward [\d.]+ \+"
            rf" clip\+optimizer [\d.]+ \+ rest -?[\d.]+$",
            out,
            re.M,
        ), out
    profiles = re.findall(
        r"^  profiled own time per step: runtime ([\d.]+) ms, loop ([\d.]+) ms.*\n"
        r"((?: +[+-][\d.]+ ms  \(runtime [\d.]+, loop [\d.]+\)  .+\n){3})",
        out,
        re.M,
    )
    assert len(profiles) == 2, out
    assert all(float(mine) > 0 and float(theirs) > 0 for mine, theirs, _ in profiles)


@pytest.mark.slow
@pytest.mark.parametrize("path", ["zero0", "zero1"])
def test_the_plain_loop_computes_the_runtimes_losses(
    bench_run: tuple[str, Path], path: str
) -> None:
    """The runtime's losses (its metrics) and the plain loop's (its records) agree step by
    step within 2e-7 relative (one rank, fp32, AdamW with a clip): own path and DeepSpeed."""
    _, work = bench_run
    metrics = work / f"run-out-{path}-0" / "metrics" / "rank-00000.jsonl"
    runtime = [json.loads(line)["loss"] for line in metrics.read_text().splitlines()]
    plain = [r["loss"] for r in json.loads((work / f"plain-out-{path}-0.json").read_text())]
    assert len(runtime) == len(plain) == STEPS
    assert runtime == pytest.approx(plain, rel=2e-7, abs=0)
    assert len(set(plain)) == STEPS, "the loss moves, so the update is compared too"


def test_cuda_without_a_gpu_exits_2_with_one_line() -> None:
    """`--device cuda` where torch sees no CUDA device (none made visible): exit 2, one line
    naming the need."""
    done = subprocess.run(
        [sys.executable, str(BENCH), "--device", "cuda"],
        capture_output=True,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert re.fullmatch(r"runtime\.py: --device cuda needs a CUDA device; .*\n", done.stderr)
