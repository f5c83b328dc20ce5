"""The largest specs: does `hetc plan` answer or refuse them within its default budget and
under 2 GB?

Each case is a spec generated up to a size in bytes (default: just under the validator's cap,
`schema.source.MAX_FILE_BYTES`, and the 1 MiB, 8,700-zone spec a user once sent, which the cap
now refuses) in one of these layouts:

- `distinct`: one pool per zone, every zone its own region and price, four device types, so
  that no two zones are alike and nothing merges (the stage options grow with the zones);
- `regions`: one pool per zone over 40 regions, prices and quotas varying, so that region-wide
  options merge many zones;
- `pools`: zones of six pools each (six device types) over 12 regions.

`hetc plan SPEC --top 1` runs in a child process (the command as a user runs it, with its
default work budget); the bench prints its wall time, peak resident set (the child's own
ru_maxrss, the interpreter's ~100 MB included), exit code and first line of output.
Nothing is asserted: the issue's targets are printed beside the numbers.

Usage: python bench/largest.py [--bytes N ...] [--layout NAME ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hetc.schema.source import MAX_FILE_BYTES

DEVICES = ("A100-40GB", "V100-16GB", "T4", "A10G", "L4", "H100-80GB")
HEAD = (
    "version: 1\nname: largest\nmodel: {preset: GPT-3-1.3B}\n"
    "training: {global_batch_size: 1024, seq_len: 2048, precision: fp16, zero_stage: 1}\n"
    "objective: max_throughput\nzones:\n"
)
TAIL = (
    "network:\n"
    "  intra_zone: {bandwidth: 100Gbps, latency: 10us}\n"
    "  inter_zone: {bandwidth: 50Gbps, latency: 1ms}\n"
    "  inter_region: {bandwidth: 5Gbps, latency: 30ms}\n"
)


def zone_line(layout: str, z: int) -> str:
    """The YAML of zone `z` in `layout` (module docstring)."""
    if layout == "distinct":
        pool = (
            f"{{device: {DEVICES[z % 4]}, quota: {4 + 4 * (z % 9)}, gpus_per_node: 4,"
            f" price: {1 + z / 10000:.4f} USD/h}}"
        )
        return f"- {{name: z{z}, region: r{z}, pools: [{pool}]}}\n"
    if layout == "regions":
        pool = (
            f"{{device: {DEVICES[z % 4]}, quota: {8 + 4 * (z % 5)}, gpus_per_node: 4,"
            f" price: {3 + z % 7} USD/h}}"
        )
        return f"- {{name: z{z}, region: r{z % 40}, pools: [{pool}]}}\n"
    pools = ", ".join(
        f"{{device: {device}, quota: {8 * (1 + (z + d) % 4)}, gpus_per_node: 8}}"
        for d, device in enumerate(DEVICES)
    )
    return f"- {{name: z{z}, region: r{z % 12}, pools: [{pools}]}}\n"


def spec_text(layout: str, size: int) -> tuple[str, int]:
    """The longest spec of `layout` of at most `size` bytes, and its zone count."""
    body: list[str] = []
    length = len(HEAD) + len(TAIL)
    while True:
        line = zone_line(layout, len(body))
        if length + len(line.encode()) > size:
            break
        body.append(line)
        length += len(line.encode())
    return HEAD + "".join(body) + TAIL, len(body)


CHILD = """
import resource, sys
sys.argv = ["hetc", "plan", sys.argv[1], "--top", "1"]
from hetc.cli import main
try:
    main()
finally:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak-kib {peak}", file=sys.stderr)
"""
"""`hetc plan` in the child, reporting its own peak resident set on its last line."""


def run(path: Path) -> tuple[float, float, int, str]:
    """(wall seconds, peak MiB, exit code, first output line) of `hetc plan PATH --top 1`."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    lines = (done.stderr + done.stdout).strip().splitlines()
    peaks = [line for line in done.stderr.splitlines() if line.startswith("peak-kib ")]
    peak = int(peaks[-1].split()[1]) / 1024 if peaks else float("nan")
    shown = [line for line in lines if not line.startswith("peak-kib ")]
    return seconds, peak, done.returncode, shown[0][:160] if shown else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, nargs="*", default=[MAX_FILE_BYTES, 1_000_000])
    parser.add_argument(
        "--layout", nargs="*", default=["distinct", "regions", "pools"], help="module docstring"
    )
    args = parser.parse_args(argv)
    print("target: an answer or a refusal within the default budget, under 2 GB (2048 MiB)")
    with tempfile.TemporaryDirectory() as folder:
        for size in args.bytes:
            for layout in args.layout:
                text, zones = spec_text(layout, size)
                path = Path(folder) / f"{layout}-{size}.yaml"
                path.write_text(text)
                seconds, peak, code, first = run(path)
                print(
                    f"{layout:9s} {len(text.encode()) / 1024:7.1f} KiB {zones:6d} zones:"
                    f" {seconds:6.2f} s, peak {peak:6.0f} MiB, exit {code}: {first}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
