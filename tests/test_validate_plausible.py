"""Implausible magnitudes (a unit that slipped: `price: 3.67` is 3.67 USD per second) get one
warning each, at the value, with what the spec most likely meant.

Oracles: every number of hetc's device catalog and of every bundled spec (examples, bench
scenarios, the generated spec family) lies inside the bounds, and the same number with its
unit dropped (the usual slip) lies outside. Mutation check (done): the price ceiling set 3,600
times too high (100 USD/s), the memory floor set 1e9 times too low (0.1 bytes) or too high
(1e17 bytes), or the inter-region latency floor set to 100 ms, each fail
`test_a_unit_slip_of_real_values_is_caught` or `test_the_catalog_lies_inside_every_bound`.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

from hetc import catalog
from hetc.schema import check_text
from hetc.schema.plausible import BOUNDS, plausibility_findings, shown
from hetc.schema.shorthands import expand_shorthands
from hetc.schema.source import parse
from hetc.units import parse_quantity

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import spec_family  # noqa: E402

SPEC = """\
version: 1
name: plausible
model: {{preset: GPT-3-1.3B}}
training: {{global_batch_size: 16, seq_len: 256}}
devices:
  - name: MY-GPU
    memory: {memory}
    peak_tflops: {{fp32: {fp32}, fp16: 125}}
    memory_bandwidth: {memory_bandwidth}
    intra_node: {{kind: pcie, bandwidth: {intra_node}}}
    price: {device_price}
zones:
  - name: a
    region: r
    pools:
      - device: MY-GPU
        quota: 576000
        gpus_per_node: {gpus_per_node}
        price: {price}
        nic_bandwidth: {nic}
  - name: b
    region: far
    pools:
      - {{device: T4, quota: 4, gpus_per_node: 4}}
network:
  intra_zone: {{bandwidth: {intra_bw}, latency: {intra_latency}}}
  inter_zone: {{bandwidth: {zone_bw}, latency: {zone_latency}}}
  inter_region: {{bandwidth: {region_bw}, latency: {region_latency}, tcp_window: {window}}}
  links:
    - {{between: [a, b], bandwidth: {link_bw}, latency: {link_latency}, tcp_window: {link_window}}}
  egress_price: {{inter_zone: {egress}, inter_region: 0.02 USD/GB}}
"""
PLAUSIBLE = {
    "memory": "40GB",
    "fp32": "19.5",
    "memory_bandwidth": "1555GB/s",
    "intra_node": "600GB/s",
    "device_price": "3.67 USD/h",
    "gpus_per_node": "8",
    "price": "0.35 USD/h",
    "nic": "100Gbps",
    "intra_bw": "100Gbps",
    "intra_latency": "10us",
    "zone_bw": "50Gbps",
    "zone_latency": "1ms",
    "region_bw": "1Gbps",
    "region_latency": "30ms",
    "window": "4MiB",
    "link_bw": "10Gbps",
    "link_latency": "12ms",
    "link_window": "4MiB",
    "egress": "0.01 USD/GB",
}
"""A value of every field the bounds read: real numbers of real hardware and clouds."""

CASES = [
    (
        "memory",
        "64",
        "devices[0].memory",
        "64 reads as 64 B (a bare number is bytes), but no real device memory is below 100 MB"
        " (write `64GB`)",
    ),
    (
        "memory",
        "200TB",
        "devices[0].memory",
        "'200TB' reads as 200 TB, but no real device memory is above 100 TB (write `200GB`)",
    ),
    (
        "fp32",
        "1.0e-12",
        "devices[0].peak_tflops.fp32",
        "1e-12 reads as 1e-12 TFLOP/s, but no real peak compute is below 0.001 TFLOP/s (a real"
        " one is between 0.001 TFLOP/s and 1,000,000 TFLOP/s)",
    ),
    (
        "fp32",
        "19.5e+12",
        "devices[0].peak_tflops.fp32",
        "19500000000000 reads as 1.95e+13 TFLOP/s, but no real peak compute is above"
        " 1,000,000 TFLOP/s (write `19.5`)",
    ),
    (
        "memory_bandwidth",
        "1555",
        "devices[0].memory_bandwidth",
        "1555 reads as 1.55 kB/s (a bare number is bytes per second), but no real memory"
        " bandwidth is below 1 GB/s (write `1555GB/s`)",
    ),
    (
        "intra_node",
        "600",
        "devices[0].intra_node.bandwidth",
        "600 reads as 600 B/s (a bare number is bytes per second), but no real bandwidth"
        " between the devices of a node is below 100 MB/s (write `600GB/s`)",
    ),
    (
        "device_price",
        "3.67",
        "devices[0].price",
        "3.67 reads as 13,212 USD/h (a bare number is USD per second), but no real price of a"
        " device-hour is above 100 USD/h (write `3.67 USD/h`)",
    ),
    ("price", "0.35 USD/min", "", ""),
    (
        "price",
        "0.35",
        "zones[0].pools[0].price",
        "0.35 reads as 1,260 USD/h (a bare number is USD per second), but no real price of a"
        " device-hour is above 100 USD/h (write `0.35 USD/h`)",
    ),
    (
        "gpus_per_node",
        "1000",
        "zones[0].pools[0].gpus_per_node",
        "1000 reads as 1,000 devices, but no real node size is above 576 devices (give the"
        " devices of one node; the pool's total goes in `quota`)",
    ),
    ("gpus_per_node", "576", "", ""),
    ("gpus_per_node", "72", "", ""),
    (
        "nic",
        "100",
        "zones[0].pools[0].nic_bandwidth",
        "100 reads as 100 B/s (a bare number is bytes per second), but no real network"
        " bandwidth of a node is below 100 kB/s (write `100Gbps`)",
    ),
    (
        "intra_bw",
        "100",
        "network.intra_zone.bandwidth",
        "100 reads as 100 B/s (a bare number is bytes per second), but no real link bandwidth"
        " is below 100 kB/s (write `100Gbps`)",
    ),
    (
        "zone_bw",
        "100 B/s",
        "network.inter_zone.bandwidth",
        "'100 B/s' reads as 100 B/s, but no real link bandwidth is below 100 kB/s"
        " (write `100Gbps`)",
    ),
    (
        "zone_bw",
        "100Tbps",
        "network.inter_zone.bandwidth",
        "'100Tbps' reads as 12.5 TB/s, but no real link bandwidth is above 10 TB/s"
        " (write `100Gbps`)",
    ),
    (
        "link_bw",
        "10",
        "network.links[0].bandwidth",
        "10 reads as 10 B/s (a bare number is bytes per second), but no real link bandwidth is"
        " below 100 kB/s (write `10Gbps`)",
    ),
    (
        "intra_latency",
        "10",
        "network.intra_zone.latency",
        "10 reads as 10 s (a bare number is seconds), but no real one-way latency in a zone is"
        " above 500 ms (write `10us`)",
    ),
    (
        "intra_latency",
        "10ns",
        "network.intra_zone.latency",
        "'10ns' reads as 10 ns, but no real one-way latency in a zone is below 100 ns"
        " (write `10us`)",
    ),
    (
        "zone_latency",
        "1",
        "network.inter_zone.latency",
        "1 reads as 1 s (a bare number is seconds), but no real one-way latency between zones"
        " is above 500 ms (write `1ms`)",
    ),
    (
        "region_latency",
        "30us",
        "network.inter_region.latency",
        "'30us' reads as 30 µs, but no real one-way latency between regions is below 100 µs"
        " (write `30ms`)",
    ),
    (
        "link_latency",
        "12",
        "network.links[0].latency",
        "12 reads as 12 s (a bare number is seconds), but no real one-way latency between zones"
        " is above 500 ms (write `12ms`)",
    ),
    (
        "window",
        "4",
        "network.inter_region.tcp_window",
        "4 reads as 4 B (a bare number is bytes), but no real TCP window is below 1 KiB"
        " (write `4MiB`)",
    ),
    (
        "link_window",
        "4GiB",
        "network.links[0].tcp_window",
        "'4GiB' reads as 4 GiB, but no real TCP window is above 1 GiB (write `4MiB`)",
    ),
    (
        "egress",
        "0.01",
        "network.egress_price.inter_zone",
        "0.01 reads as 1e+07 USD/GB (a bare number is USD per byte), but no real egress price"
        " is above 1 USD/GB (write `0.01 USD/GB`)",
    ),
]
"""(field, value, path, message): an empty path means the value is plausible."""
CASES += [
    ("memory", "288GB", "", ""),
    ("memory", "2GiB", "", ""),
    ("fp32", "0.02", "", ""),
    ("fp32", "4500", "", ""),
    ("memory_bandwidth", "10GB/s", "", ""),
    ("memory_bandwidth", "8TB/s", "", ""),
    ("intra_node", "1800GB/s", "", ""),
    ("intra_node", "5GB/s", "", ""),
    ("device_price", "0 USD/h", "", ""),
    ("nic", "3200Gbps", "", ""),
    ("region_bw", "10Mbps", "", ""),
    ("intra_latency", "1us", "", ""),
    ("region_latency", "140ms", "", ""),
    ("region_latency", "280ms", "", ""),
    ("link_latency", "5us", "", ""),
    ("window", "64KiB", "", ""),
    ("egress", "0.23 USD/GB", "", ""),
]
"""Real extremes: the largest GPU memory (288 GB), the examples' CPU devices, NVLink 5, a
GB300 node's 3.2 Tbit/s, a geostationary hop (about 280 ms), the dearest cloud egress."""


def _spec(field: str | None = None, value: str = "") -> str:
    return SPEC.format(**{**PLAUSIBLE, **({field: value} if field else {})})


def _position(field: str) -> tuple[int, int]:
    """Line and column of `field`'s value in the spec (the same whatever the value)."""
    marked = SPEC.format(**{**PLAUSIBLE, field: "\0"})
    before = marked[: marked.index("\0")]
    return before.count("\n") + 1, len(before) - before.rfind("\n")


def _warnings(text: str) -> list[str]:
    result = check_text(text, "s.yaml")
    assert not result.errors, [d.format() for d in result.errors]
    return [d.format() for d in result.warnings]


def test_plausible_values_give_no_warning() -> None:
    """The spec with a real value in every field the bounds read validates without one."""
    assert _warnings(_spec()) == []


@pytest.mark.parametrize(("field", "value"), [c[:2] for c in CASES if not c[3]])
def test_real_extremes_give_no_warning(field: str, value: str) -> None:
    """A real extreme in one field keeps the spec free of warnings."""
    assert _warnings(_spec(field, value)) == []


@pytest.mark.parametrize(("field", "value", "path", "message"), [c for c in CASES if c[3]])
def test_an_implausible_value_is_warned_at_its_position(
    field: str, value: str, path: str, message: str
) -> None:
    """One warning, at the value's own line and column, saying how it reads and what a real
    one would be."""
    line, column = _position(field)
    assert _warnings(_spec(field, value)) == [f"s.yaml:{line}:{column}: {path}: warning: {message}"]


def test_bounds_themselves_are_plausible() -> None:
    """A value at a bound is accepted; one a millionth beyond it is warned of."""
    for bound in BOUNDS:
        for limit, beyond in ((bound.low, 1 - 1e-6), (bound.high, 1 + 1e-6)):
            if limit is None:
                continue
            per_bare = 1e12 if bound.dimension == "tflops" else 1.0
            at: Any = limit / per_bare if bound.dimension != "count" else int(limit)
            assert bound.judge(at) is None, (bound.what, at)
            over: Any = at * beyond if bound.dimension != "count" else int(limit) + 1
            assert bound.judge(over) is not None, (bound.what, over)


def test_every_bound_applies_where_the_spec_has_such_a_value() -> None:
    """Each bound's paths are paths the spec above writes: a bound no spec can reach would
    silently check nothing."""
    data = expand_shorthands(parse(_spec())[0])
    paths = [path for path, _ in _scalars(data)]
    for bound in BOUNDS:
        assert any(bound.applies(path) for path in paths), bound.what


def _scalars(data: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    if isinstance(data, dict):
        return [s for key, value in data.items() for s in _scalars(value, (*path, key))]
    if isinstance(data, list):
        return [s for index, value in enumerate(data) for s in _scalars(value, (*path, index))]
    return [(path, data)]


def _device_numbers(entry: dict[str, Any]) -> list[tuple[dict[str, Any], Any]]:
    """(devices entry holding one field, value) for each number of a catalog device entry."""
    out: list[tuple[dict[str, Any], Any]] = []
    for key in ("memory", "memory_bandwidth", "price"):
        if entry.get(key) is not None:
            out.append(({key: entry[key]}, entry[key]))
    out.append(({"intra_node": dict(entry["intra_node"])}, entry["intra_node"]["bandwidth"]))
    for precision, tflops in entry["peak_tflops"].items():
        out.append(({"peak_tflops": {precision: tflops}}, tflops))
    return out


def _findings(device: dict[str, Any]) -> list[str]:
    return [f.message for f in plausibility_findings({"devices": [{"name": "X", **device}]})]


@pytest.mark.parametrize("name", sorted(catalog.device_entries()))
def test_the_catalog_lies_inside_every_bound(name: str) -> None:
    """Every number of every catalog device (sourced datasheets and list prices) is
    plausible, and so is its node size."""
    entry = dict(catalog.device_entries()[name])
    for device, value in _device_numbers(entry):
        assert _findings(device) == [], (name, value)
    pool = {"zones": [{"pools": [{"gpus_per_node": entry["gpus_per_node"]}]}]}
    assert list(plausibility_findings(pool)) == []


def _bare(device: dict[str, Any], value: Any) -> dict[str, Any]:
    """`device` with `value`'s unit dropped: '40GB' -> 40, 312 TFLOP/s -> 312e12 FLOP/s."""
    if isinstance(value, str):
        number: Any = float(value.split()[0].rstrip("GBbpsMiTU/"))
    else:
        number = value * 1e12  # peak_tflops written in FLOP/s
    if "intra_node" in device:
        return {"intra_node": {**device["intra_node"], "bandwidth": number}}
    if "peak_tflops" in device:
        return {"peak_tflops": dict.fromkeys(device["peak_tflops"], number)}
    return dict.fromkeys(device, number)


@pytest.mark.parametrize("name", sorted(catalog.device_entries()))
def test_a_unit_slip_of_the_catalog_is_caught(name: str) -> None:
    """Each catalog number with its unit dropped (GB read as bytes, USD/h as USD/s, TFLOP/s
    written as FLOP/s) gets exactly one warning: no bound is off by a unit's factor."""
    entry = dict(catalog.device_entries()[name])
    for device, value in _device_numbers(entry):
        assert len(_findings(_bare(device, value))) == 1, (name, value)


NETWORK_SLIPS = [
    ("network", "intra_zone", "bandwidth", "100Gbps", 100),
    ("network", "inter_zone", "bandwidth", "50Gbps", 50),
    ("network", "inter_region", "bandwidth", "3.4Gbps", 3.4),
    ("network", "intra_zone", "latency", "10us", 10),
    ("network", "intra_zone", "latency", "5us", 5e-9),
    ("network", "inter_zone", "latency", "1ms", 1),
    ("network", "inter_region", "latency", "35ms", 35),
    ("network", "inter_region", "latency", "5ms", 5e-6),
    ("network", "inter_region", "tcp_window", "4MiB", 4),
    ("network", "egress_price", "inter_zone", "0.01 USD/GB", 0.01),
    ("network", "egress_price", "inter_region", "0.02 USD/GB", 0.02),
]
"""Values of the bundled specs, and the same number in the wrong unit (5e-9 for `5us`: 5 ns
meant as µs; 5e-6 for `5ms`: µs for ms)."""


@pytest.mark.parametrize(("top", "link", "key", "real", "slipped"), NETWORK_SLIPS)
def test_a_unit_slip_of_real_values_is_caught(
    top: str, link: str, key: str, real: str, slipped: float
) -> None:
    """A network value of the bundled specs is plausible; written in the wrong unit, it is not."""
    assert list(plausibility_findings({top: {link: {key: real}}})) == []
    assert len(list(plausibility_findings({top: {link: {key: slipped}}}))) == 1


def _bundled() -> list[Path]:
    return sorted((ROOT / "examples").glob("*.yaml")) + sorted(
        (ROOT / "bench" / "scenarios").glob("*.yaml")
    )


@pytest.mark.parametrize("spec", _bundled(), ids=lambda p: p.name)
def test_bundled_specs_are_plausible(spec: Path) -> None:
    """No bundled example or bench scenario gets a warning of implausible magnitude."""
    data = expand_shorthands(parse(spec.read_text(encoding="utf-8"))[0])
    assert [f.message for f in plausibility_findings(data)] == []


def test_the_spec_family_is_plausible(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/spec_family.py's specs (what a new user might write), over a few seeds, get no
    warning of implausible magnitude."""
    texts: list[str] = []

    def keep(text: str, filename: str = "<spec>") -> Any:
        texts.append(text)
        return check_text(text, filename)

    monkeypatch.setattr(spec_family, "check_text", keep)
    for seed in range(12):
        spec_family.family_spec(random.Random(seed))
        spec_family.small_spec(random.Random(seed))
    assert len(texts) == 24
    for text in texts:
        assert list(plausibility_findings(expand_shorthands(parse(text)[0]))) == [], text


@pytest.mark.parametrize(
    ("si", "dimension", "text"),
    [
        (1e8, "size", "100 MB"),
        (2.0**30, "size", "1 GiB"),
        (64, "size", "64 B"),
        (3.67 / 3600, "price_rate", "3.67 USD/h"),
        (1e-7, "duration", "100 ns"),
        (0.5, "duration", "500 ms"),
        (1e9, "tflops", "0.001 TFLOP/s"),
        (1e18, "tflops", "1,000,000 TFLOP/s"),
        (1e-12 * 1e12, "tflops", "1e-12 TFLOP/s"),
        (1000, "count", "1,000 devices"),
    ],
)
def test_shown_values_read_in_the_unit_of_their_size(si: float, dimension: str, text: str) -> None:
    """Values in messages: the unit of their size, no trailing zeros, binary where exact."""
    assert shown(si, dimension) == text


def test_a_bare_price_means_usd_per_second() -> None:
    """The premise of the price bound: units.py reads a bare price as USD per second."""
    assert parse_quantity(3.67, "price_rate") * 3600 == pytest.approx(13212)
