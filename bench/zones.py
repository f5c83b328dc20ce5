"""Planner time, peak memory and proven gap as the zone count and the batch grow.

Each case loads and validates its spec and runs `plan_spec` (search, build, simulate) in a
fresh Python process that reports its wall time (after imports: what `hetc plan` spends
under its budget), its peak resident set (ru_maxrss, so the interpreter's own ~100 MB
are included) and the proven gap of plan 1 (`certificate`). The zone cases spread N zones
of one A100-40GB pool each (quota 8, 4 per node, prices varying by region) over four
regions of a realistic network (intra-zone, inter-zone, inter-region defaults); the batch
case is OPT-350M with a global batch of 10^6 sequences on one zone. Nothing is asserted:
the numbers are printed.

Planning has a budget of --work-limit units (default: `hetc plan`'s,
`budget.DEFAULT_WORK`, behind its safety cap), and the answer is the best plan found in it;
with --no-limit the search runs to the end.

Usage: python bench/zones.py [--zones N ...] [--no-batch] [--timeout S]
                             [--work-limit N | --no-limit]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from hetc.units import plural

ROOT = Path(__file__).resolve().parent.parent
REGIONS = ("us-central1", "us-west1", "europe-west4", "asia-east1")
PRICES = (3.67, 3.74, 4.05, 4.21)


def zones_spec(zones: int) -> str:
    """A valid spec with `zones` one-pool zones over four regions."""
    lines = [
        "version: 1",
        f"name: zones-{zones}",
        "model: {preset: OPT-350M}",
        "training: {global_batch_size: 1024, seq_len: 2048, precision: fp16, zero_stage: 1}",
        "objective: max_throughput",
        "zones:",
    ]
    for z in range(zones):
        region = z % len(REGIONS)
        lines += [
            f"  - name: {REGIONS[region]}-z{z}",
            f"    region: {REGIONS[region]}",
            f"    pools: [{{device: A100-40GB, quota: 8, gpus_per_node: 4,"
            f" price: {PRICES[region]} USD/h}}]",
        ]
    lines += [
        "network:",
        "  intra_zone: {bandwidth: 100Gbps, latency: 10us}",
        "  inter_zone: {bandwidth: 50Gbps, latency: 1ms}",
        "  inter_region: {bandwidth: 5Gbps, latency: 30ms}",
        "  egress_price: {inter_zone: 0.01 USD/GB, inter_region: 0.02 USD/GB}",
    ]
    return "\n".join(lines) + "\n"


def batch_spec(batch: int) -> str:
    """OPT-350M on up to 128 A100s in one zone with a global batch of `batch`."""
    text = (ROOT / "examples" / "opt350m-a100.yaml").read_text(encoding="utf-8")
    return text.replace("global_batch_size: 1024", f"global_batch_size: {batch}")


def _worker(text: str, work_limit: int | None) -> None:
    sys.path.insert(0, str(ROOT))
    from hetc.schema import check_text
    from hetc.solver.budget import Budget, command_budget
    from hetc.solver.planner import plan_spec

    start = time.perf_counter()
    budget = Budget() if work_limit is None else command_budget(work_limit=work_limit)
    spec = check_text(text, "bench.yaml").spec
    assert spec is not None
    result = plan_spec(spec, budget=budget)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    best = result.proposals[0].plan if result.proposals else None
    gap = result.search.gap if best else None
    print(
        json.dumps(
            {
                "seconds": seconds,
                "peak_bytes": peak,
                "pipelines": len(best.pipelines) if best else 0,
                "zones_used": len({n.zone for n in best.nodes}) if best else 0,
                "gap": gap,
            }
        )
    )


def _run(label: str, text: str, timeout: float, work_limit: int | None) -> None:
    limit = [] if work_limit is None else ["--work-limit", str(work_limit)]
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--worker", *limit],
            input=text,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
    except subprocess.TimeoutExpired:
        print(f"{label:>16}  did not finish in {timeout:.0f} s", flush=True)
        return
    found = json.loads(done.stdout.strip().splitlines()[-1])
    gap = "no plan" if found["gap"] is None else f"gap {100 * found['gap']:.1f}%"
    print(
        f"{label:>16}  {found['seconds']:8.2f} s  {found['peak_bytes'] / 2**20:8.0f} MiB peak"
        f"  {gap}  {plural(found['pipelines'], 'pipeline')}"
        f" over {plural(found['zones_used'], 'zone')}",
        flush=True,
    )


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from hetc.solver.budget import DEFAULT_WORK

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--zones", type=int, nargs="*", default=[100, 200, 400, 1000])
    parser.add_argument("--no-batch", action="store_true")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--work-limit", type=int, default=DEFAULT_WORK)
    parser.add_argument("--no-limit", action="store_true", help="search to the end")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.no_limit:
        args.work_limit = None
    if args.worker:
        _worker(sys.stdin.read(), args.work_limit)
        return
    for zones in args.zones:
        _run(f"{zones} zones", zones_spec(zones), args.timeout, args.work_limit)
    if not args.no_batch:
        _run("batch 10^6", batch_spec(10**6), args.timeout, args.work_limit)


if __name__ == "__main__":
    main()
