"""Quantities with units: conversions to SI against hand-computed values."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetc.units import DIMENSIONS, UnitError, parse_quantity


@pytest.mark.parametrize(
    ("text", "dimension", "expected"),
    [
        ("40GB", "size", 40e9),
        ("40GiB", "size", 40 * 2**30),
        ("4 MiB", "size", 4 * 2**20),
        ("100Gbps", "bandwidth", 100e9 / 8),
        ("32GB/s", "bandwidth", 32e9),
        ("1.5 GiB/s", "bandwidth", 1.5 * 2**30),
        ("10Gbit/s", "bandwidth", 10e9 / 8),
        ("10us", "duration", 10e-6),
        ("1ms", "duration", 1e-3),
        ("2min", "duration", 120.0),
        ("3.67 USD/h", "price_rate", 3.67 / 3600),
        ("0.01 USD/GB", "price_per_byte", 0.01 / 1e9),
        ("1.2 USD", "money", 1.2),
        ("300e9", "count", 300e9),
        ("125 TFLOPS", "tflops", 125e12),
    ],
)
def test_unit_strings_convert_to_si(text: str, dimension: str, expected: float) -> None:
    """Each spelling converts to its SI value exactly as computed by hand."""
    assert parse_quantity(text, dimension) == pytest.approx(expected, rel=1e-12)


def test_bare_numbers_are_si_except_tflops() -> None:
    """A number is already in the base unit; peak_tflops numbers are TFLOP/s (the key says so)."""
    assert parse_quantity(12_500_000_000, "bandwidth") == 12.5e9
    assert parse_quantity(0.001, "price_rate") == 0.001
    assert parse_quantity(312, "tflops") == 312e12


@pytest.mark.parametrize(
    ("value", "dimension", "message"),
    [
        ("40GX", "size", "cannot read '40GX' as size"),
        ("GB40", "size", "cannot read"),
        ("-3GB", "size", "'-3GB' must not be negative: a size is positive, for example '40GB'"),
        ("0GB", "size", "must be positive"),
        (0, "bandwidth", "must be positive"),
        (-1, "price_rate", "-1 must not be negative: a price rate is zero or more"),
        ("1e999GB", "size", "not a finite number"),
        (10**400, "size", "not a finite number"),
        (True, "size", "got bool"),
        ([1], "duration", "got list"),
        ("40", "size", "cannot read"),
    ],
)
def test_bad_quantities_say_what_is_right(value: object, dimension: str, message: str) -> None:
    """Unreadable, non-positive or non-finite values raise with a hint of the right form."""
    with pytest.raises(UnitError, match=re.escape(message)) as caught:
        parse_quantity(value, dimension)
    if "cannot read" in message:
        assert DIMENSIONS[dimension].example in str(caught.value)


def test_prices_may_be_zero() -> None:
    """An owned cluster costs nothing per hour; a zero bandwidth is still refused."""
    assert parse_quantity("0 USD/h", "price_rate") == 0.0
    with pytest.raises(UnitError):
        parse_quantity("0Gbps", "bandwidth")


@given(
    dimension=st.sampled_from(sorted(DIMENSIONS)),
    data=st.data(),
)
def test_pattern_and_parser_agree(dimension: str, data: st.DataObject) -> None:
    """Every string the schema pattern accepts converts, so editors and hetc agree."""
    text = data.draw(st.from_regex(DIMENSIONS[dimension].pattern, fullmatch=True))
    try:
        value = parse_quantity(text, dimension)
    except UnitError as exc:
        assert "must be" in str(exc) or "finite" in str(exc)
    else:
        assert math.isfinite(value) and value >= 0
