"""Warnings for magnitudes that no real device, link or price list has: a unit that slipped.

A bare number is read in the SI base unit, so `price: 3.67` is 3.67 USD per *second* (13,212
USD/h), `memory: 64` is 64 bytes and `bandwidth: 100` is 100 bytes/s. Each is a valid spec,
and the planner then drops the pool without a word (no model fits in 64 bytes) or prices it
3,600 times too high. The bounds below lie beyond every real device, link and cloud offer by
a margin, each with the extreme it clears in `why`, so a warning means a slip, never unusual
hardware; and each is close enough that the usual slip (the number meant in GB, Gbps, ms or
USD/h, written bare) lands outside it. Warnings, not errors: the spec still means something
definite, and `hetc validate --strict` turns them into failures where a team wants that.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hetc.schema.diagnostics import Finding, Path
from hetc.units import DIMENSIONS, UnitError, fixed, parse_quantity, written_parts

__all__ = ["BOUNDS", "Bound", "plausibility_findings", "shown"]

INDEX = "[]"
"""In a `Bound`'s path: any entry of a list."""
KEY = "*"
"""In a `Bound`'s path: any key of a mapping."""


@dataclass(frozen=True, slots=True)
class Bound:
    """Where a magnitude is implausible: the values at `paths` below `low` or above `high`
    (SI units of `dimension`; None: no bound on that side)."""

    what: str
    """What the value is, in the message's "no real <what> is above ...": 'device memory'."""
    paths: tuple[tuple[str, ...], ...]
    """Document paths it applies to; `INDEX` for any list entry, `KEY` for any mapping key."""
    dimension: str
    """The `hetc.units` dimension of the values, or 'count' for an integer."""
    low: float | None
    low_why: str
    """Why no real value is below `low`: the smallest real one, with its source."""
    high: float | None
    high_why: str
    """Why no real value is above `high`: the largest real one, with its source."""
    usual: float
    """A common real value: of the spellings in `suggest`, the one that brings the written
    number nearest it is offered as what the spec meant."""
    suggest: tuple[tuple[float, str], ...] = ()
    """(factor on the written number, unit) of what a slip most likely meant: (1, 'GB') offers
    `64GB` for `64`; for TFLOP/s, (1e-12, '') offers `312` for `312e12`."""
    advice: str = ""
    """What would be right where no spelling of `suggest` is plausible; default: the range."""

    def applies(self, path: Path) -> bool:
        """Whether the value at document path `path` is one this bound judges."""
        return any(_matches(pattern, path) for pattern in self.paths)

    def judge(self, value: Any) -> str | None:
        """What is wrong with `value` at one of `paths`, with what would be right, or None
        when it is plausible (or not a value this check reads: the others report those)."""
        si = _magnitude(value, self.dimension)
        if si is None:
            return None
        if self.low is not None and si < self.low:
            side, limit = "below", self.low
        elif self.high is not None and si > self.high:
            side, limit = "above", self.high
        else:
            return None
        number, unit = written_parts(value)
        bare = (
            f" (a bare number is {DIMENSIONS[self.dimension].bare_number_unit})"
            if not unit and self.dimension in _SAYS_BARE
            else ""
        )
        return (
            f"{value!r} reads as {shown(si, self.dimension)}{bare}, but no real {self.what} is"
            f" {side} {shown(limit, self.dimension)} ({self._hint(number, unit)})"
        )

    def _hint(self, number: str, unit: str) -> str:
        """`write X`, X the plausible spelling of `suggest` nearest `usual` (of the number as
        written, `number`, in other units than its own `unit`); else `advice`, else the range."""
        best: tuple[float, str] | None = None
        for factor, suffix in self.suggest:
            if suffix == unit and factor == 1:
                continue
            text = number if factor == 1 else f"{float(number) * factor:g}"
            spelled = f"{text} {suffix}" if suffix.startswith("USD") else f"{text}{suffix}"
            si = _magnitude(spelled if suffix else float(text), self.dimension)
            if si is None or si <= 0 or not self._inside(si):
                continue
            distance = abs(math.log(si / self.usual))
            if best is None or distance < best[0]:
                best = (distance, spelled)
        if best is not None:
            return f"write `{best[1]}`"
        if self.advice:
            return self.advice
        low = None if self.low is None else shown(self.low, self.dimension)
        high = None if self.high is None else shown(self.high, self.dimension)
        if low and high:
            return f"a real one is between {low} and {high}"
        return f"a real one is at least {low}" if low else f"a real one is at most {high}"

    def _inside(self, si: float) -> bool:
        return (self.low is None or si >= self.low) and (self.high is None or si <= self.high)


_SAYS_BARE = ("size", "bandwidth", "duration", "price_rate", "price_per_byte")
"""Dimensions whose bare number is in a base unit people rarely mean (bytes, USD per second):
a message on a bare number says how it was read."""


def _matches(pattern: tuple[str, ...], path: Path) -> bool:
    if len(pattern) != len(path):
        return False
    for want, part in zip(pattern, path, strict=True):
        if want == INDEX:
            if not isinstance(part, int):
                return False
        elif want != KEY and want != part:
            return False
    return True


def _magnitude(value: Any, dimension: str) -> float | None:
    """`value` in SI units, or None where it is not one (the other checks report that)."""
    if dimension == "count":
        is_int = isinstance(value, int) and not isinstance(value, bool)
        return float(value) if is_int and abs(value) <= sys.float_info.max else None
    try:
        return parse_quantity(value, dimension)
    except UnitError:
        return None


_STEPS: dict[str, tuple[tuple[float, str], ...]] = {
    "size": ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B")),
    "bandwidth": (
        (1e15, "PB/s"),
        (1e12, "TB/s"),
        (1e9, "GB/s"),
        (1e6, "MB/s"),
        (1e3, "kB/s"),
        (1.0, "B/s"),
    ),
    "duration": ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")),
    "price_rate": ((1 / 3600, "USD/h"),),
    "price_per_byte": ((1e-9, "USD/GB"),),
    "tflops": ((1e12, "TFLOP/s"),),
    "count": ((1.0, "devices"),),
}
"""How a value of each dimension is shown: in the largest unit it reaches."""


_BINARY = ((2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"))


def shown(si: float, dimension: str) -> str:
    """An SI value for a person, in the unit of its size: 1e8 bytes -> '100 MB', 2^30 bytes
    -> '1 GiB' (binary where that is exact), 0.0010194 USD/s -> '3.67 USD/h', 1e-7 s ->
    '100 ns'."""
    steps = _STEPS[dimension]
    factor, unit = next(((f, u) for f, u in steps if si >= f), steps[-1])
    if dimension == "size":
        binary = next(((f, u) for f, u in _BINARY if si >= f), None)
        if binary is not None and (si / binary[0]).is_integer():
            factor, unit = binary
    number = si / factor
    if 100 <= number < 1e7:
        return f"{fixed(number)} {unit}"
    return f"{number:.3g} {unit}"


# -- the bounds --------------------------------------------------------------------------------
# Each `why` names the real extreme the bound clears; docs/spec-reference.md prints them all
# (scripts/spec_reference.py), and tests/test_validate_plausible.py checks every catalog device
# and bundled spec inside them and the usual slip of each outside.

_NETWORK_LOW = 1e5
_NETWORK_LOW_WHY = (
    "an ADSL uplink carries 1 Mbit/s (125 kB/s), and data-centre and inter-cloud links carry"
    " thousands of times more; a bare `100` (100 Gbps meant) is 100 B/s"
)
_NETWORK_HIGH = 1e13
_NETWORK_HIGH_WHY = (
    "the most network a GPU server has is eight 800 Gbit/s NICs, 6.4 Tbit/s (800 GB/s): the"
    " bound, 10 TB/s (80 Tbit/s), is over 12 times that"
)
_LATENCY_HIGH = 0.5
_LATENCY_HIGH_WHY = (
    "a geostationary satellite hop, the slowest path data takes, is about 250 ms one way, and"
    " fibre half round the Earth about 100 ms; a bare `10` (10 ms meant) is 10 s"
)
_LATENCY_LOW = 1e-7
_LATENCY_LOW_WHY = (
    "an RDMA message between two hosts takes about 1 µs on the fastest fabrics (InfiniBand,"
    " NIC to NIC through one switch), ten times the bound; `10ns` for `10us` slips below it"
)
_NETWORK_SPELLINGS = ((1, "Gbps"), (1, "Mbps"))
_LATENCY_SPELLINGS = ((1, "ms"), (1, "us"))
_WINDOW_SPELLINGS = ((1, "MiB"), (1, "KiB"))
_CLASSES = ("intra_zone", "inter_zone", "inter_region")

BOUNDS: tuple[Bound, ...] = (
    Bound(
        what="price of a device-hour",
        paths=(("zones", INDEX, "pools", INDEX, "price"), ("devices", INDEX, "price")),
        dimension="price_rate",
        low=None,
        low_why="",
        high=100 / 3600,
        high_why=(
            "on-demand cloud prices of one GPU, H100 and B200 included, stay within about 15"
            " USD/h (hetc's dearest catalog entry: 11.06 USD/h, an H100 on Google Cloud); a bare"
            " `3.67` is read as USD per second, 13,212 USD/h"
        ),
        usual=3 / 3600,
        suggest=((1, "USD/h"),),
    ),
    Bound(
        what="egress price",
        paths=(("network", "egress_price", KEY),),
        dimension="price_per_byte",
        low=None,
        low_why="",
        high=1e-9,
        high_why=(
            "the dearest internet egress of the major clouds is about 0.25 USD/GB at most, a"
            " quarter of the bound; a bare `0.02` is read as USD per byte, 20 million USD/GB"
        ),
        usual=0.01e-9,
        suggest=((1, "USD/GB"),),
    ),
    Bound(
        what="device memory",
        paths=(("devices", INDEX, "memory"),),
        dimension="size",
        low=1e8,
        low_why=(
            "a CUDA context and a CPU process running torch each take some hundreds of MB, so"
            " no device trains in less; the smallest catalog GPU holds 8 GB; a bare `64` is 64"
            " bytes"
        ),
        high=1e14,
        high_why=(
            "the largest memory one computer holds is 48 TB (HPE Superdome Flex), so no device"
            " or CPU process addresses more; GPUs reach 288 GB"
        ),
        usual=32e9,
        suggest=((1, "GB"), (1, "MB"), (1, "TB")),
    ),
    Bound(
        what="memory bandwidth",
        paths=(("devices", INDEX, "memory_bandwidth"),),
        dimension="bandwidth",
        low=1e9,
        low_why=(
            "one DDR-266 memory channel of 2002 carries 2.1 GB/s; the slowest catalog GPU (T4)"
            " has 320 GB/s; a bare `900` (900 GB/s meant) is 900 B/s"
        ),
        high=1e17,
        high_why=(
            "the fastest memory of any device is the on-wafer SRAM of Cerebras's WSE-3, 21 PB/s,"
            " a fifth of the bound; HBM GPUs reach 8 TB/s"
        ),
        usual=1e12,
        suggest=((1, "GB/s"), (1, "TB/s"), (1, "MB/s")),
    ),
    Bound(
        what="bandwidth between the devices of a node",
        paths=(("devices", INDEX, "intra_node", "bandwidth"),),
        dimension="bandwidth",
        low=1e8,
        low_why=(
            "a PCIe 1.0 x1 slot, the narrowest a GPU has been run in (mining risers), carries"
            " 250 MB/s; a bare `600` (600 GB/s meant) is 600 B/s"
        ),
        high=1e13,
        high_why=(
            "the fastest GPU-to-GPU link announced, NVLink 6 (NVIDIA Rubin), gives each GPU"
            " 3.6 TB/s, over a third of the bound"
        ),
        usual=1e11,
        suggest=((1, "GB/s"),),
    ),
    Bound(
        what="peak compute",
        paths=(("devices", INDEX, "peak_tflops", KEY),),
        dimension="tflops",
        low=1e9,
        low_why=(
            "one CPU core has computed over 1 GFLOP/s since about 2000, and the slowest catalog"
            " GPU (T4, fp32) 8.1 TFLOP/s; the bound is 0.001 TFLOP/s"
        ),
        high=1e18,
        high_why=(
            "the fastest single device sold, Cerebras's wafer-scale WSE-3, is rated 125"
            " PFLOP/s, an eighth of the bound (1 EFLOP/s); `312e12` (FLOP/s meant) is 3.12e14"
            " TFLOP/s"
        ),
        usual=1e14,
        suggest=((1e-12, ""), (1e-3, ""), (1e3, "")),
    ),
    Bound(
        what="network bandwidth of a node",
        paths=(("zones", INDEX, "pools", INDEX, "nic_bandwidth"),),
        dimension="bandwidth",
        low=_NETWORK_LOW,
        low_why=_NETWORK_LOW_WHY,
        high=_NETWORK_HIGH,
        high_why=_NETWORK_HIGH_WHY,
        usual=12.5e9,
        suggest=_NETWORK_SPELLINGS,
    ),
    Bound(
        what="link bandwidth",
        paths=(
            *(("network", c, "bandwidth") for c in _CLASSES),
            ("network", "links", INDEX, "bandwidth"),
        ),
        dimension="bandwidth",
        low=_NETWORK_LOW,
        low_why=_NETWORK_LOW_WHY,
        high=_NETWORK_HIGH,
        high_why=_NETWORK_HIGH_WHY,
        usual=6.25e9,
        suggest=_NETWORK_SPELLINGS,
    ),
    Bound(
        what="one-way latency in a zone",
        paths=(("network", "intra_zone", "latency"),),
        dimension="duration",
        low=_LATENCY_LOW,
        low_why=_LATENCY_LOW_WHY,
        high=_LATENCY_HIGH,
        high_why=_LATENCY_HIGH_WHY,
        usual=1e-5,
        suggest=_LATENCY_SPELLINGS,
    ),
    Bound(
        what="one-way latency between zones",
        paths=(("network", "inter_zone", "latency"), ("network", "links", INDEX, "latency")),
        dimension="duration",
        low=_LATENCY_LOW,
        low_why=_LATENCY_LOW_WHY,
        high=_LATENCY_HIGH,
        high_why=_LATENCY_HIGH_WHY,
        usual=1e-3,
        suggest=_LATENCY_SPELLINGS,
    ),
    Bound(
        what="one-way latency between regions",
        paths=(("network", "inter_region", "latency"),),
        dimension="duration",
        low=1e-4,
        low_why=(
            "regions are cities apart, milliseconds one way, and 100 µs is the light time"
            " through 20 km of fibre; `30us` for `30ms` slips below it"
        ),
        high=_LATENCY_HIGH,
        high_why=_LATENCY_HIGH_WHY,
        usual=3e-2,
        suggest=_LATENCY_SPELLINGS,
    ),
    Bound(
        what="TCP window",
        paths=(
            *(("network", c, "tcp_window") for c in _CLASSES),
            ("network", "links", INDEX, "tcp_window"),
        ),
        dimension="size",
        low=1024,
        low_why=(
            "no TCP stack offers a window smaller than one full Ethernet segment (1,460 B);"
            " Linux's smallest receive buffer is 4 KiB; a bare `4` (4 MiB meant) is 4 bytes"
        ),
        high=2**30,
        high_why=(
            "TCP cannot express a larger window: RFC 7323 scales the 16-bit window by at most"
            " 2^14, to just under 1 GiB"
        ),
        usual=4 * 2**20,
        suggest=_WINDOW_SPELLINGS,
    ),
    Bound(
        what="node size",
        paths=(("zones", INDEX, "pools", INDEX, "gpus_per_node"),),
        dimension="count",
        low=None,
        low_why="",
        high=576,
        high_why=(
            "the most GPUs one node-level fabric joins is 576, NVIDIA's announced NVL576 NVLink"
            " domain; one host holds 8 or 16 GPUs, and an 8-socket server 480 CPU cores"
        ),
        usual=8,
        advice="give the devices of one node; the pool's total goes in `quota`",
    ),
)
"""Every plausibility bound, one per kind of value; the first that applies to a path judges it."""


def plausibility_findings(data: dict[str, Any]) -> Iterator[Finding]:
    """A warning at each value of `data` (a spec document, shorthands expanded) outside the
    bound of its kind: at the value, with its reading and what it most likely meant."""
    for path, value in _leaves(data, ()):
        bound = next((b for b in BOUNDS if b.applies(path)), None)
        message = bound.judge(value) if bound is not None else None
        if message is not None:
            yield Finding(path, message, severity="warning")


def _leaves(data: Any, path: Path) -> Iterator[tuple[Path, Any]]:
    """(path, value) of every scalar in `data`."""
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str):
                yield from _leaves(value, (*path, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from _leaves(value, (*path, index))
    else:
        yield path, data
