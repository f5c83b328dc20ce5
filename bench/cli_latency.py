"""Wall time of `hetc validate` and `hetc compile` on each bundled example, cold and warm.

Targets: `validate` under 0.3 s warm (foundation issue); `compile`, search included, within
1 s warm (compile issue), importing neither torch nor deepspeed (checked by
tests/test_cli_compile.py). Large examples whose search runs longer are printed as they are;
bench/planner.py is where search speed is measured.
cold: the first process after hetc's own bytecode caches are deleted and, where permitted
(root on Linux), the OS page cache is dropped; warm: the median of N later runs.
Usage: python bench/cli_latency.py [--runs N] [--compile-runs N] [--compile-timeout S]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _hetc_command() -> list[str]:
    script = Path(sys.executable).parent / "hetc"
    return [str(script)] if script.exists() else [sys.executable, "-m", "hetc"]


# Warm means caches filled, as on a user's machine: bytecode caching must be on even where the
# calling shell turned it off (PYTHONDONTWRITEBYTECODE), or every run compiles hetc afresh.
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _run(command: list[str], timeout: float = 60) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, timeout=timeout, env=_ENV)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr.decode()}")
    return elapsed


def _make_cold() -> bool:
    for cache in (ROOT / "hetc").rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="warm runs per example")
    parser.add_argument("--compile-runs", type=int, default=3, help="warm compiles per example")
    parser.add_argument(
        "--compile-timeout", type=float, default=600, help="seconds before a compile is cut off"
    )
    args = parser.parse_args()
    hetc = _hetc_command()
    print(f"hetc validate latency ({os.cpu_count()} CPUs, Python {sys.version.split()[0]})")
    print(f"{'example':<28} {'cold s':>8} {'warm s':>8}  (warm = median of {args.runs})")
    warm_all = []
    for spec in sorted((ROOT / "examples").glob("*.yaml")):
        dropped = _make_cold()
        cold = _run([*hetc, "validate", str(spec)])
        warm = statistics.median(_run([*hetc, "validate", str(spec)]) for _ in range(args.runs))
        warm_all.append(warm)
        note = "" if dropped else "  (page cache not dropped: not permitted)"
        print(f"{spec.name:<28} {cold:>8.3f} {warm:>8.3f}{note}")
    print(f"worst warm: {max(warm_all):.3f} s (target < 0.300 s)")
    _compile_latency(hetc, args.compile_runs, args.compile_timeout)


def _compile_latency(hetc: list[str], runs: int, timeout: float) -> None:
    print()
    print(f"hetc compile latency, search included (warm = median of {runs})")
    print(f"{'example':<28} {'cold s':>8} {'warm s':>8}")
    with tempfile.TemporaryDirectory() as scratch:
        for spec in sorted((ROOT / "examples").glob("*.yaml")):
            out = str(Path(scratch) / spec.stem)
            command = [*hetc, "compile", str(spec), "-o", out]
            _make_cold()
            try:
                cold = _run(command, timeout)
            except subprocess.TimeoutExpired:
                print(f"{spec.name:<28} {'> ' + str(int(timeout)):>8} {'-':>8}  (search)")
                continue
            warm = statistics.median(_run(command, timeout) for _ in range(runs))
            verdict = "" if warm <= 1.0 else "  (over the 1 s target)"
            print(f"{spec.name:<28} {cold:>8.3f} {warm:>8.3f}{verdict}")


if __name__ == "__main__":
    main()
