"""Quantities with units: conversions to SI against hand-computed values."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetc.units import (
    DIMENSIONS,
    UnitError,
    fixed,
    format_duration,
    format_usd,
    index_ranges,
    parse_quantity,
    plural,
    written_parts,
)


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


@pytest.mark.parametrize(
    ("value", "parts"),
    [
        ("3.67 USD/h", ("3.67", "USD/h")),
        (" 64GB ", ("64", "GB")),
        ("300e9", ("300e9", "")),
        (64, ("64", "")),
        (1e-12, ("1e-12", "")),
    ],
)
def test_written_parts_are_the_number_and_unit_as_written(
    value: int | float | str, parts: tuple[str, str]
) -> None:
    """A quantity's number and unit as the spec writes them, '' for a bare number."""
    assert written_parts(value) == parts


@given(
    dimension=st.sampled_from(sorted(DIMENSIONS)),
    data=st.data(),
)
def test_written_parts_read_back(dimension: str, data: st.DataObject) -> None:
    """Number and unit of any string the pattern accepts spell the same quantity again."""
    text = data.draw(st.from_regex(DIMENSIONS[dimension].pattern, fullmatch=True))
    number, unit = written_parts(text)
    try:
        value = parse_quantity(text, dimension)
    except UnitError:
        return
    assert parse_quantity(f"{number}{unit}", dimension) == value


# -- numbers for people ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.6438, "1.64"),
        (412.3, "412"),
        (1234567.8, "1,234,568"),
        (9.996, "10.0"),
        (99.96, "100"),
        (0.0004764, "0.000476"),
        (0, "0"),
        (-2.5, "-2.50"),
    ],
)
def test_fixed_point_keeps_three_significant_digits(value: float, text: str) -> None:
    """fixed(): fixed-point, about three significant digits, whole numbers kept whole."""
    assert fixed(value) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (1.07857e6, "12.5 days"),
        (1.644, "1.64 s"),
        (75, "1.25 min"),
        (4000, "1.11 h"),
        (0.0123, "12.3 ms"),
        (4e-6, "4.00 µs"),
        (0.0009996, "1.00 ms"),
        (0, "0 s"),
    ],
)
def test_durations_take_the_unit_that_fits(seconds: float, text: str) -> None:
    """format_duration: 1.07857e+06 s reads as 12.5 days, 0.0123 s as 12.3 ms."""
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("usd", "text"),
    [
        (4.764e-06, "4.76 µUSD"),
        (0.2146, "0.215 USD"),
        (0.0009996, "0.00100 USD"),
        (12.345, "12.35 USD"),
        (117320.14, "117,320 USD"),
        (0, "0 USD"),
    ],
)
def test_money_has_sensible_digits(usd: float, text: str) -> None:
    """format_usd: never 4.764e-06 USD; µUSD under a thousandth of a dollar."""
    assert format_usd(usd) == text


@given(st.floats(min_value=1e-12, max_value=1e12))
def test_formatted_numbers_never_use_exponents(value: float) -> None:
    """No formatted duration or amount of money contains an exponent (e+06, e-06)."""
    for text in (fixed(value), format_duration(value), format_usd(value)):
        assert not re.search(r"\de[+-]?\d", text), text


@given(st.floats(min_value=1e-9, max_value=1e9))
def test_formatted_durations_read_back_within_rounding(seconds: float) -> None:
    """A formatted duration parsed back by the spec's own unit table (days: 86,400 s) is
    within the rounding of three significant digits of the value."""
    number, unit = format_duration(seconds).split(" ")
    factor = 86400.0 if unit == "days" else DIMENSIONS["duration"].units[unit]
    assert float(number.replace(",", "")) * factor == pytest.approx(seconds, rel=6e-3)


def test_plurals_and_ranges() -> None:
    """plural() never prints '(s)'; index_ranges() joins runs of consecutive integers."""
    assert plural(1, "node") == "1 node" and plural(32, "node") == "32 nodes"
    assert plural(2, "microbatch") == "2 microbatches" and plural(0, "error") == "0 errors"
    assert plural(1280, "rank") == "1,280 ranks"
    assert index_ranges([8, 9, 0, 1, 2, 3, 11]) == "0-3, 8-9, 11"
    assert index_ranges([5]) == "5"


def test_more_significant_digits_on_request() -> None:
    """significant=6 (the CP-SAT cross-check's) keeps six digits in the same unit choice."""
    assert format_duration(0.008128, 6) == "8.12800 ms"
    assert format_usd(8.286e-06, 6) == "8.28600 µUSD"
    assert format_usd(0.2146, 6) == "0.214600 USD"
