"""Quantities with units, read once at the edge of the spec.

The spec lets people write `40GB`, `100Gbps`, `10us` or `3.67 USD/h`; everything past the loader
works in SI base units (bytes, seconds, bytes/s, USD, USD/s, USD/byte, FLOP/s). Keeping the
unit table here, and generating the JSON Schema's string patterns from it, means an editor and
`hetc validate` accept exactly the same spellings.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"


@dataclass(frozen=True, slots=True)
class Dimension:
    """One kind of quantity: its SI unit, accepted spellings and the factor of each."""

    name: str
    si_unit: str
    units: dict[str, float]
    example: str
    bare_number_unit: str
    zero_allowed: bool = False
    """Prices may be zero (an owned cluster, free egress); sizes, rates and latencies may not."""

    @property
    def pattern(self) -> str:
        """Regex (JSON Schema `pattern`) of a string this dimension accepts."""
        if not self.units:
            return rf"^\s*{_NUMBER}\s*$"
        # Longest spellings first so `GiB/s` is not read as `GiB` followed by junk.
        names = sorted(self.units, key=lambda u: (-len(u), u))
        alternatives = "|".join(re.escape(u) for u in names)
        return rf"^\s*{_NUMBER}\s*(?:{alternatives})\s*$"

    def describe(self) -> str:
        """A short hint of what a value of this dimension looks like."""
        spellings = ", ".join(self.units) if self.units else "a plain number"
        return (
            f"a number in {self.bare_number_unit} or a string such as {self.example!r}"
            f" (units: {spellings})"
        )


_SIZE = {
    "B": 1.0,
    "kB": 1e3,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "KiB": 2.0**10,
    "MiB": 2.0**20,
    "GiB": 2.0**30,
    "TiB": 2.0**40,
}
_BITS_PER_SECOND = {"bps": 1.0, "Kbps": 1e3, "kbps": 1e3, "Mbps": 1e6, "Gbps": 1e9, "Tbps": 1e12}

DIMENSIONS: dict[str, Dimension] = {
    d.name: d
    for d in (
        Dimension("size", "B", _SIZE, "40GB", "bytes"),
        Dimension(
            "bandwidth",
            "B/s",
            {f"{u}/s": f for u, f in _SIZE.items()}
            | {u: f / 8 for u, f in _BITS_PER_SECOND.items()}
            | {u.replace("bps", "bit/s"): f / 8 for u, f in _BITS_PER_SECOND.items()},
            "100Gbps",
            "bytes per second",
        ),
        Dimension(
            "duration",
            "s",
            {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0},
            "10us",
            "seconds",
        ),
        Dimension("money", "USD", {"USD": 1.0, "$": 1.0}, "1.2 USD", "USD", zero_allowed=True),
        Dimension(
            "price_rate",
            "USD/s",
            {
                "USD/s": 1.0,
                "USD/min": 1 / 60,
                "USD/h": 1 / 3600,
                "USD/hr": 1 / 3600,
                "USD/hour": 1 / 3600,
            },
            "3.67 USD/h",
            "USD per second",
            zero_allowed=True,
        ),
        Dimension(
            "price_per_byte",
            "USD/B",
            {f"USD/{u}": 1 / f for u, f in _SIZE.items()},
            "0.01 USD/GB",
            "USD per byte",
            zero_allowed=True,
        ),
        Dimension(
            "tflops",
            "FLOP/s",
            {"TFLOPS": 1e12, "TFLOP/s": 1e12},
            "125 TFLOPS",
            "TFLOP/s (the key names the unit)",
        ),
        Dimension("count", "1", {}, "300e9", "units"),
    )
}
"""Every dimension the spec uses, by the name the JSON Schema's `x-quantity` keyword gives."""

_BARE_NUMBER_FACTOR = {"tflops": 1e12}
_COMPILED = {name: re.compile(d.pattern) for name, d in DIMENSIONS.items()}
_SPLIT = re.compile(rf"^\s*({_NUMBER})\s*(.*?)\s*$")


class UnitError(ValueError):
    """A quantity could not be read; the message says what would be right."""


def parse_quantity(value: object, dimension: str) -> float:
    """Convert a YAML value of `dimension` to its SI base unit, or raise `UnitError`.

    Numbers are taken as already in the base unit (for `tflops`, in TFLOP/s). The result is
    always finite and positive (zero too for prices): a zero bandwidth or a negative price is
    never meaningful here.
    """
    dim = DIMENSIONS[dimension]
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UnitError(f"expected {dim.describe()}, got {type(value).__name__}")
    if isinstance(value, str):
        if not _COMPILED[dimension].match(value):
            unsigned = value.strip().removeprefix("-")
            if unsigned != value.strip() and _COMPILED[dimension].match(unsigned):
                raise UnitError(f"{value!r} must not be negative: {_bound(dim)}")
            raise UnitError(f"cannot read {value!r} as {dim.name}: use {dim.describe()}")
        split = _SPLIT.match(value)
        assert split is not None  # the pattern above guarantees the split matches
        number, unit = split.groups()
        factor = dim.units[unit] if unit else _BARE_NUMBER_FACTOR.get(dimension, 1.0)
        magnitude = float(number) * factor
    else:
        try:
            magnitude = float(value) * _BARE_NUMBER_FACTOR.get(dimension, 1.0)
        except OverflowError:
            magnitude = math.inf
    if not math.isfinite(magnitude):
        raise UnitError(f"{value!r} is not a finite number: use {dim.describe()}")
    if magnitude < 0:
        raise UnitError(f"{value!r} must not be negative: {_bound(dim)}")
    if magnitude == 0 and not dim.zero_allowed:
        raise UnitError(f"{value!r} must be positive")
    return magnitude


def written_parts(value: int | float | str) -> tuple[str, str]:
    """The number and the unit of a quantity as the spec writes them, the unit '' for a bare
    number: '3.67 USD/h' -> ('3.67', 'USD/h'), 64 -> ('64', ''). For messages that repeat a
    value with another unit; `value` is one `parse_quantity` reads."""
    if not isinstance(value, str):
        return str(value), ""
    split = _SPLIT.match(value)
    assert split is not None, f"{value!r} is not a quantity parse_quantity reads"
    number, unit = split.groups()
    return number, unit


def _bound(dim: Dimension) -> str:
    """What a value of `dim` may be, after a negative one."""
    what = "zero or more" if dim.zero_allowed else "positive"
    return f"a {dim.name.replace('_', ' ')} is {what}, for example {dim.example!r}"


# -- numbers for people ----------------------------------------------------------------------
# The reverse direction: SI values shown in text a person reads (`hetc plan`, `simulate`,
# `compile`) as fixed-point numbers in a unit chosen for their size, never `1.07857e+06 s`.

_DURATION_STEPS = ((86400.0, "days"), (3600.0, "h"), (60.0, "min"), (1.0, "s"))


def fixed(value: float, significant: int = 3) -> str:
    """`value` in fixed-point notation with about `significant` significant digits and
    thousands separators: 1.6438 -> '1.64', 412.3 -> '412', 1234567.8 -> '1,234,568'."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    if abs(value) >= 10 ** (significant - 1):
        return f"{value:,.0f}"  # whole numbers keep every digit: 1,234,568, not 1,230,000
    rounded = float(f"{value:.{significant}g}")  # 9.996 -> 10.0: the digits count after it
    decimals = max(0, significant - 1 - math.floor(math.log10(abs(rounded))))
    return f"{rounded:,.{decimals}f}"


def format_duration(seconds: float, significant: int = 3) -> str:
    """A duration in the largest unit that keeps it at least 1 (µs, ms, s, min, h, days),
    to `significant` digits."""
    if seconds == 0 or not math.isfinite(seconds):
        return f"{fixed(seconds)} s"
    size = abs(float(f"{seconds:.{significant}g}"))
    for factor, unit in _DURATION_STEPS:
        if size >= factor:
            return f"{fixed(seconds / factor, significant)} {unit}"
    if size >= 1e-3:
        return f"{fixed(seconds * 1e3, significant)} ms"
    return f"{fixed(seconds * 1e6, significant)} µs"


def format_usd(usd: float, significant: int = 3) -> str:
    """Money: whole dollars from 1,000 USD, cents from 1 USD, three significant digits
    below (`significant`), and µUSD under a thousandth of a dollar (4.764e-06 -> '4.76 µUSD')."""
    if usd == 0 or not math.isfinite(usd):
        return f"{fixed(usd)} USD"
    if abs(usd) >= 1000:
        return f"{usd:,.0f} USD"
    if abs(usd) >= 1:
        return f"{usd:,.2f} USD"
    if abs(float(f"{usd:.{significant}g}")) >= 1e-3:
        return f"{fixed(usd, significant)} USD"
    return f"{fixed(usd * 1e6, significant)} µUSD"


def plural(count: int, word: str, many: str | None = None) -> str:
    """'1 node', '32 nodes', '2 microbatches': the count and the word in its right number
    (`many` for a plural that is not the word plus -s or -es)."""
    if count == 1:
        return f"{count:,} {word}"
    if many is None:
        many = word + ("es" if word.endswith(("s", "x", "ch", "sh")) else "s")
    return f"{count:,} {many}"


def index_ranges(indices: list[int]) -> str:
    """Sorted integers as ranges: [0, 1, 2, 3, 8, 9] -> '0-3, 8-9'; [5] -> '5'."""
    parts: list[str] = []
    ordered = sorted(indices)
    start = 0
    for i in range(1, len(ordered) + 1):
        if i == len(ordered) or ordered[i] != ordered[i - 1] + 1:
            first, last = ordered[start], ordered[i - 1]
            parts.append(str(first) if first == last else f"{first}-{last}")
            start = i
    return ", ".join(parts)
