"""Speed of one candidate-stage evaluation (time, memory check, cost) from precomputed tables.

The planner evaluates millions of candidate stages, so this measures `evaluate_stage` on a
realistic problem: GPT-Neo-2.7B (catalog preset, 34 layers: embedding, 32 blocks, output end),
fp16, ZeRO-1, seq_len 2048, a 512-GPU pool of 256 A100-40GB and 256 V100-16GB, TP in
{1, 2, 4, 8}, microbatch in {1, 2, 4, 8}. It builds the 32 tables (timed), then draws N
DISTINCT candidates -- layer range x replica multiset (1-3 (device, TP) kinds with counts that
fit the pools) x microbatch x in-flight count -- and evaluates each once per run. No candidate
repeats within a run and `evaluate_stage` keeps no cache, so nothing is reused across
candidates; functools caches hetc keeps elsewhere are cleared before every run all the same.
Reported: evaluations per second, the median of 5 runs, and the table build time.

Usage: python bench/costmodel_speed.py [--candidates N] [--runs R] [--seed S]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hetc.catalog import DeviceType, find_device, find_model  # noqa: E402
from hetc.costmodel import network  # noqa: E402
from hetc.costmodel.tables import StageTables, build_all, evaluate_stage  # noqa: E402

TARGET = 50_000
POOLS = {"A100-40GB": 256, "V100-16GB": 256}
TPS = (1, 2, 4, 8)
MICROBATCHES = (1, 2, 4, 8)

Candidate = tuple[tuple[tuple[StageTables, int], ...], int, int, int]


def _device(name: str) -> DeviceType:
    device = find_device(name)
    assert device is not None
    return device


def candidates(
    tables: dict[tuple[str, int, int], StageTables], layers: int, n: int, seed: int
) -> list[Candidate]:
    """`n` distinct (replicas, first, end, in_flight) candidates, all within the pools."""
    rng = random.Random(seed)
    kinds = [(d, tp) for d in POOLS for tp in TPS]
    seen: set[tuple[object, ...]] = set()
    out: list[Candidate] = []
    while len(out) < n:
        m = rng.choice(MICROBATCHES)
        first = rng.randrange(layers)
        end = rng.randrange(first + 1, layers + 1)
        used = dict.fromkeys(POOLS, 0)
        multiset: list[tuple[str, int, int]] = []
        for device, tp in rng.sample(kinds, rng.randint(1, 3)):
            room = (POOLS[device] - used[device]) // tp
            if room < 1:
                continue
            count = rng.randint(1, min(room, 32))
            used[device] += count * tp
            multiset.append((device, tp, count))
        in_flight = rng.randint(1, 8)
        key = (m, first, end, in_flight, tuple(sorted(multiset)))
        if not multiset or key in seen:
            continue
        seen.add(key)
        replicas = tuple((tables[d, tp, m], count) for d, tp, count in multiset)
        out.append((replicas, first, end, in_flight))
    return out


def clear_caches() -> None:
    """Empty hetc's functools caches (the evaluator has none; the network model does)."""
    for name in ("_ring_steps", "_link_between"):
        getattr(network, name).cache_clear()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.candidates < 10_000:
        parser.error("use at least 10,000 candidates")

    preset = find_model("gpt-neo-2.7b")
    assert preset is not None
    start = time.perf_counter()
    tables = build_all(
        preset.architecture,
        [_device(name) for name in POOLS],
        TPS,
        MICROBATCHES,
        seq_len=2048,
        precision="fp16",
        zero_stage=1,
    )
    build_s = time.perf_counter() - start
    layers = next(iter(tables.values())).layers
    cands = candidates(tables, layers, args.candidates, args.seed)

    rates: list[float] = []
    fitting = 0
    for _ in range(args.runs):
        clear_caches()
        gc.collect()
        fits = 0
        begin = time.perf_counter()
        for replicas, first, end, in_flight in cands:
            fits += evaluate_stage(replicas, first, end, in_flight)[3]
        elapsed = time.perf_counter() - begin
        rates.append(len(cands) / elapsed)
        fitting = fits
    median = statistics.median(rates)
    kinds = statistics.mean(len(c[0]) for c in cands)
    print(f"GPT-Neo-2.7B, {layers} layers; pools {POOLS}; TP {TPS}; microbatch {MICROBATCHES}")
    print(f"table build: {len(tables)} tables in {build_s:.3f} s")
    print(
        f"candidates: {len(cands)} distinct, {kinds:.2f} replica kinds on average,"
        f" {fitting} ({100 * fitting / len(cands):.0f}%) fit in memory"
    )
    print("runs (evaluations/s): " + ", ".join(f"{r:,.0f}" for r in rates))
    print(
        f"median: {median:,.0f} evaluations/s ({1e6 / median:.2f} us each);"
        f" target {TARGET:,}: {'met' if median >= TARGET else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
