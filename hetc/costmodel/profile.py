"""Measured profiles: Sailor's `profile.json` and hetc's own profile format.

A profile is what a profiler measured on one device type for one model: for every microbatch
size and tensor-parallel degree, the forward, backward and optimizer-update seconds of every
layer; optionally the bytes each layer holds (weights, and activations kept for backward per
microbatch) and the bandwidth of collectives between the node's devices. The cost model uses
these numbers exactly where they exist, and its FLOP/roofline and memory formulas elsewhere:
a planner is only as good as its predictions, and a measurement beats a datasheet.

Two spellings are read:

- **Sailor** (`layer-profiles/MODEL/GPU/profile.json` in the Sailor artifact)::

      {"1": {"2": {"0": [fwd_s, bwd_s, update_s], "1": [...], ...}}}

  microbatch size -> TP degree -> layer index -> three seconds. Nothing in the file says
  which model, device, precision or sequence length it is: the caller says so.

- **hetc** -- the same nested table under `times`, with the facts Sailor leaves implicit::

      {"format": "hetc-layer-profile", "version": 3,
       "model": "OPT-350M", "device": "A100-40GB", "precision": "fp16",
       "seq_len": 2048, "units": "s",
       "times": {"1": {"2": {"0": [fwd_s, bwd_s, update_s], ...}}},
       "architecture": {"layers": 24, "hidden": 1024, ...},
       "memory": {"2": {"0": {"weight_bytes": 1.2e8,
                              "activation_bytes": {"1": 4.1e7, "2": 8.2e7}}, ...}},
       "peak_bytes": {"1": {"2": 3.3e9}},
       "network": {"intra_node": {"all_reduce": {"2": {"coefficients": [a, b, c],
                                                      "peak": 2.4e11, "residual": 0.03,
                                                      "points": [[bytes, bytes_per_s], ...]}}}},
       "out_of_memory": {"8": [1]},
       "environment": {"torch": "2.13.0", "cuda": "12.8", "driver": "570.86.15",
                       "device_name": "NVIDIA A100-SXM4-40GB", "host": "node7", "threads": 8},
       "meta": {"origin": "...", "date": "2026-11-26", "attention": "sdpa",
                "threads": 1, "software": {"torch": "2.13.0"}}}

  `units` must be `"s"` (seconds per microbatch, per device). Keys are decimal strings
  because JSON keys are strings; values are non-negative finite numbers. Version 1 files
  (`times` only) and version 2 files (no `out_of_memory`, no `environment`) are still read.
  Optional sections:

  - `architecture`: the shape that was profiled (the catalog's field names); a spec whose
    model differs is refused, since its layers are not the ones timed.
  - `memory`: TP degree -> layer index -> `weight_bytes` (this layer's parameters on one TP
    rank, at the profile's precision) and `activation_bytes` (microbatch size -> bytes the
    layer keeps for its backward).
  - `peak_bytes`: microbatch -> TP -> the peak bytes of the profiled step, for reference.
  - `network`: scope -> collective (`all_reduce`, `all_gather`, `p2p`) -> devices -> a
    bandwidth fit. Scopes: `intra_node` (devices = the devices in the group, 2 for p2p);
    `inter_node`, `inter_zone`, `inter_region` (between two nodes of this device in one zone,
    in two zones of one region, in two regions; devices = the devices per node communicating
    at once, whose flows share the fitted peak). A fit is the cost model's form: GB/s =
    a x^2 + b x + c with x = log2(bytes / 1e6), `peak` in bytes/s, its relative RMS
    `residual` over the measured `points` (message bytes, bytes/s; optional) and the message
    sizes it holds for, `sizes: [smallest, largest]` (optional; else the points' range, else
    1 MB to 1 GB), and `latency` seconds added to every transfer (optional, 0: a measured
    fit's times include the latency; an analytical link turned into a fit keeps its own).
    Bandwidth is what the cost model's ring formulas divide by: for an
    all-reduce of S bytes over n devices in t seconds, 2 (n - 1) / n x S / t; for an
    all-gather of S bytes in all, (n - 1) / n x S / t; point to point, S / t. The fit is of
    whole transfer times, so the cost model adds no latency to a measured link
    (`hetc.costmodel.network.MeasuredCurve`).
    `network.links` lists links measured between named zones, the most specific fact a
    profile can hold: `{"from": zone, "to": zone, "peer": device (default: this one),
    "collective": "p2p", "devices": n, "fit": {...}}`, a transfer from a node of this device
    in `from` to a node of `peer` in `to` (`hetc.costmodel.pricing` says which fact prices
    which hop).
  - `out_of_memory`: microbatch size -> the TP degrees at which one layer of each kind ran
    out of the device's memory when measured (a point is either here or in `times`, never
    both). The planner treats such a point as not fitting the device, rather than
    estimating it by formula.
  - `environment`: what the measurement ran on (`hetc.plan.environment.ENVIRONMENT_FIELDS`):
    `torch` and `cuda` versions, the GPU `driver`, the `device_name` (torch's CUDA device
    name, or the CPU model), the `host` and the `threads` per rank; null where there is none
    (no CUDA on a CPU). hetc warns when a profile is used in another environment.
  - `meta`: where it came from (`origin`), `date`, `attention` implementation, `threads`
    per rank, `software` versions; informational.

Layer indices follow the model's layer order (Sailor: 0 is the embedding, the last the output
end, the rest transformer blocks); every (microbatch, TP) entry must list the same indices.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hetc.costmodel.network import MeasuredCurve
from hetc.schema.diagnostics import EnvironmentProblem

HETC_FORMAT = "hetc-layer-profile"
HETC_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
SCOPES = ("intra_node", "inter_node", "inter_zone", "inter_region")
BETWEEN_NODES = SCOPES[1:]
"""The scopes whose devices count the devices per node sending at once."""
DEFAULT_FIT_SIZES = (1e6, 1e9)
"""Message bytes a fit holds for when it records neither `sizes` nor `points` (Sailor's
published fits, whose sizes are not published: their quadratics turn negative below 1 MB)."""
COLLECTIVES = ("all_reduce", "all_gather", "p2p")

Times = tuple[float, float, float]
"""(forward_s, backward_s, update_s) of one layer for one microbatch on one device."""


class ProfileError(ValueError):
    """A profile file is malformed, or does not serve the spec: the message names the file,
    the key path or field and what was expected; `to_fix`, when given, what to do about it."""

    def __init__(self, message: str, to_fix: str = "") -> None:
        super().__init__(message)
        self.to_fix = to_fix


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerMemory:
    """Bytes one layer holds on one TP rank."""

    weight_bytes: float
    """Its parameters, at the profile's precision."""
    activation_bytes: dict[int, float]
    """Microbatch size -> bytes kept from its forward for its backward."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BandwidthFit:
    """Measured bandwidth of one collective over a group of devices, in the cost model's form
    (see `hetc.costmodel.network.MeasuredCurve`)."""

    coefficients: tuple[float, float, float]
    """(a, b, c): GB/s = a x^2 + b x + c, x = log2(bytes / 1e6)."""
    peak: float
    """Bytes/s: the most the link reached (the curve's ceiling)."""
    residual: float | None = None
    """Relative RMS error of the fit over `points` (None when the points are unknown)."""
    points: tuple[tuple[float, float], ...] = ()
    """The measurements fitted: (message bytes, bytes/s)."""
    sizes: tuple[float, float] | None = None
    """(smallest, largest) message bytes the fit holds for, when recorded."""
    latency: float = 0.0
    """Seconds each transfer takes on top of what the fit gives: 0 for a measured fit (its
    times include the latency); a link of the analytical model turned into a fit (to be
    calibrated) keeps its latency here."""

    def size_range(self) -> tuple[float, float]:
        """The message sizes the fit holds for: recorded, else the points', else
        `DEFAULT_FIT_SIZES`."""
        if self.sizes is not None:
            return self.sizes
        if self.points:
            measured = [b for b, _ in self.points]
            return min(measured), max(measured)
        return DEFAULT_FIT_SIZES

    def curve(self, scale: float = 1.0) -> MeasuredCurve:
        """The fraction-of-peak curve a link priced by this fit is scaled by; `scale` is how
        many measured bytes one priced byte stands for (a ring of n over an all-reduce fit)."""
        a, b, c = self.coefficients
        smallest, largest = self.size_range()
        return MeasuredCurve(a, b, c, self.peak, smallest, largest, scale)

    def rate(self, nbytes: float) -> float:
        """Bytes/s a message of `nbytes` moves at, by this fit."""
        return self.peak * self.curve()(nbytes)


def fit_bandwidth(points: Sequence[tuple[float, float]]) -> BandwidthFit:
    """Least-squares fit of measured (message bytes, bytes/s) to the cost model's form.

    GB/s = a x^2 + b x + c over x = log2(bytes / 1e6), minimising the *relative* error (each
    point weighted by 1 / its bandwidth, from the 3x3 normal equations): bandwidth spans two
    decades over a sweep, and an absolute fit would sacrifice every small message to the large
    ones (on gloo it predicted negative bandwidth at 4 KiB). `peak` is the fastest
    measurement, `residual` the relative RMS error of the fit. Needs three distinct sizes.
    """
    if len({b for b, _ in points}) < 3 or any(b <= 0 or r <= 0 for b, r in points):
        raise ValueError("a bandwidth fit needs three distinct positive message sizes and rates")
    xs = [math.log2(b / 1e6) for b, _ in points]
    ys = [r / 1e9 for _, r in points]
    weights = [1.0 / (y * y) for y in ys]
    power = [sum(w * x**k for x, w in zip(xs, weights, strict=True)) for k in range(5)]
    rhs = [sum(w * y * x**k for x, y, w in zip(xs, ys, weights, strict=True)) for k in range(3)]
    matrix = [[power[4 - i - j] for j in range(3)] + [rhs[2 - i]] for i in range(3)]
    for col in range(3):
        pivot = max(range(col, 3), key=lambda r: abs(matrix[r][col]))
        matrix[col], matrix[pivot] = matrix[pivot], matrix[col]
        for row in range(3):
            if row != col:
                ratio = matrix[row][col] / matrix[col][col]
                matrix[row] = [v - ratio * w for v, w in zip(matrix[row], matrix[col], strict=True)]
    a, b, c = (matrix[i][3] / matrix[i][i] for i in range(3))
    errors = [((a * x * x + b * x + c) - y) / y for x, y in zip(xs, ys, strict=True)]
    return BandwidthFit(
        coefficients=(a, b, c),
        peak=max(r for _, r in points),
        residual=math.sqrt(sum(e * e for e in errors) / len(errors)),
        points=tuple((float(b), float(r)) for b, r in points),
    )


Network = dict[str, dict[str, dict[int, BandwidthFit]]]
"""scope -> collective -> devices in the group -> fit (see the module docstring)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MeasuredLink:
    """A link measured between two named zones: from a node of the profile's device in
    `source` to a node of `peer` in `target`, `devices` per node sending at once."""

    source: str
    target: str
    peer: str
    collective: str
    devices: int
    fit: BandwidthFit


def nearest_devices(sizes: Sequence[int], devices: int) -> int:
    """The measured group size nearest `devices` (the larger on a tie)."""
    return min(sizes, key=lambda n: (abs(n - devices), -n))


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerProfile:
    """What was measured of one model on one device type: per-layer times, and optionally
    per-layer memory, peaks, collective bandwidths and the facts of the measurement."""

    model: str
    device: str
    precision: str
    seq_len: int
    times: dict[int, dict[int, dict[int, Times]]]
    """microbatch size -> TP degree -> layer index -> (forward_s, backward_s, update_s)."""
    source: str = ""
    """Where it was read from (a path), for messages."""
    architecture: dict[str, object] | None = None
    """The profiled model's shape (catalog field names), when recorded."""
    memory: dict[int, dict[int, LayerMemory]] = field(default_factory=dict)
    """TP degree -> layer index -> bytes (empty: not measured)."""
    peak_bytes: dict[int, dict[int, float]] = field(default_factory=dict)
    """microbatch size -> TP degree -> the profiled step's peak bytes."""
    network: Network = field(default_factory=dict)
    links: tuple[MeasuredLink, ...] = ()
    """Links measured between named zones (`network.links`)."""
    out_of_memory: dict[int, frozenset[int]] = field(default_factory=dict)
    """microbatch size -> TP degrees measured to run out of memory (see the module docstring)."""
    environment: dict[str, object] = field(default_factory=dict)
    """torch, cuda, driver, device_name, host, threads (empty: not recorded, versions 1-2)."""
    meta: dict[str, object] = field(default_factory=dict)
    """origin, date, attention, threads, software: informational."""

    def lookup(self, microbatch: int, tp: int, layer: int) -> Times | None:
        """The measured times of `layer` at (microbatch, tp), or None when not measured."""
        return self.times.get(microbatch, {}).get(tp, {}).get(layer)

    def points(self) -> list[tuple[int, int]]:
        """Every measured (microbatch, tp) pair, sorted."""
        return sorted((m, t) for m, by_tp in self.times.items() for t in by_tp)

    def ran_out_of_memory(self, microbatch: int, tp: int) -> bool:
        """Whether (microbatch, tp) was measured to run out of the device's memory."""
        return tp in self.out_of_memory.get(microbatch, frozenset())

    def layer_indices(self) -> list[int]:
        """The layer indices every (microbatch, TP) entry lists."""
        first = next(iter(next(iter(self.times.values())).values()))
        return sorted(first)

    def activation_bytes(self, microbatch: int, tp: int, layer: int) -> float | None:
        """Measured activation bytes of `layer` at (microbatch, tp), or None."""
        entry = self.memory.get(tp, {}).get(layer)
        return None if entry is None else entry.activation_bytes.get(microbatch)

    def bandwidth(self, scope: str, collective: str, devices: int) -> BandwidthFit | None:
        """The fit for `collective` over `devices` devices; failing an exact group size, the
        nearest measured one (larger on a tie), or None when that collective was not measured.
        """
        found = self.fit_for(scope, collective, devices)
        return None if found is None else found[1]

    def fit_for(self, scope: str, collective: str, devices: int) -> tuple[int, BandwidthFit] | None:
        """(group size, fit) of `bandwidth`: the size tells how many flows share the peak."""
        fits = self.network.get(scope, {}).get(collective, {})
        if not fits:
            return None
        size = nearest_devices(list(fits), devices)
        return size, fits[size]

    def link_between(
        self, source: str, target: str, peer: str, devices: int
    ) -> MeasuredLink | None:
        """The point-to-point link measured from zone `source` to a node of `peer` in zone
        `target`, at the measured devices per node nearest `devices`; None when not measured."""
        found = [
            link
            for link in self.links
            if link.source == source
            and link.target == target
            and link.peer.casefold() == peer.casefold()
            and link.collective == "p2p"
        ]
        if not found:
            return None
        size = nearest_devices([link.devices for link in found], devices)
        return next(link for link in found if link.devices == size)

    def to_json(self) -> dict[str, object]:
        """The hetc spelling of this profile (see the module docstring)."""
        out: dict[str, object] = {
            "format": HETC_FORMAT,
            "version": HETC_VERSION,
            "model": self.model,
            "device": self.device,
            "precision": self.precision,
            "seq_len": self.seq_len,
            "units": "s",
            "times": {
                str(m): {
                    str(t): {str(i): list(v) for i, v in sorted(layers.items())}
                    for t, layers in sorted(by_tp.items())
                }
                for m, by_tp in sorted(self.times.items())
            },
        }
        if self.architecture is not None:
            out["architecture"] = dict(self.architecture)
        if self.memory:
            out["memory"] = {
                str(t): {
                    str(i): {
                        "weight_bytes": m.weight_bytes,
                        "activation_bytes": {
                            str(b): v for b, v in sorted(m.activation_bytes.items())
                        },
                    }
                    for i, m in sorted(layers.items())
                }
                for t, layers in sorted(self.memory.items())
            }
        if self.peak_bytes:
            out["peak_bytes"] = {
                str(m): {str(t): v for t, v in sorted(by_tp.items())}
                for m, by_tp in sorted(self.peak_bytes.items())
            }
        if self.network:
            out["network"] = {
                scope: {
                    collective: {str(n): _fit_json(fit) for n, fit in sorted(fits.items())}
                    for collective, fits in sorted(by_collective.items())
                }
                for scope, by_collective in sorted(self.network.items())
            }
        if self.links:
            network = out.setdefault("network", {})
            assert isinstance(network, dict)
            network["links"] = [
                {
                    "from": link.source,
                    "to": link.target,
                    "peer": link.peer,
                    "collective": link.collective,
                    "devices": link.devices,
                    "fit": _fit_json(link.fit),
                }
                for link in self.links
            ]
        if self.out_of_memory:
            out["out_of_memory"] = {
                str(m): sorted(tps) for m, tps in sorted(self.out_of_memory.items()) if tps
            }
        if self.environment:
            out["environment"] = dict(self.environment)
        if self.meta:
            out["meta"] = dict(self.meta)
        return out


def _fit_json(fit: BandwidthFit) -> dict[str, object]:
    out: dict[str, object] = {"coefficients": list(fit.coefficients), "peak": fit.peak}
    if fit.sizes is not None:
        out["sizes"] = list(fit.sizes)
    if fit.latency:
        out["latency"] = fit.latency
    if fit.residual is not None:
        out["residual"] = fit.residual
    if fit.points:
        out["points"] = [list(p) for p in fit.points]
    return out


def write_profile(profile: LayerProfile, path: str | Path) -> None:
    """Write `profile` in the hetc spelling, atomically (a reader never sees half a file)."""
    path = Path(path)
    text = json.dumps(profile.to_json(), indent=1, sort_keys=True) + "\n"
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def _positive_int(key: object, where: str) -> int:
    if isinstance(key, str) and key.isdigit() and int(key) > 0:
        return int(key)
    raise ProfileError(f'{where}: key {key!r} is not a positive integer (use e.g. "1", "2")')


def _times_table(raw: object, where: str) -> dict[int, dict[int, dict[int, Times]]]:
    if not isinstance(raw, dict) or not raw:
        raise ProfileError(
            f"{where}: expected a non-empty object microbatch -> tp -> layer -> "
            "[forward_s, backward_s, update_s]"
        )
    table: dict[int, dict[int, dict[int, Times]]] = {}
    indices: set[int] | None = None
    for mkey, by_tp in raw.items():
        mbs = _positive_int(mkey, f"{where}")
        if not isinstance(by_tp, dict) or not by_tp:
            raise ProfileError(f"{where}[{mkey}]: expected a non-empty object tp -> layers")
        table[mbs] = {}
        for tkey, layers in by_tp.items():
            tp = _positive_int(tkey, f"{where}[{mkey}]")
            here = f"{where}[{mkey}][{tkey}]"
            if not isinstance(layers, dict) or not layers:
                raise ProfileError(f"{here}: expected a non-empty object layer index -> times")
            row: dict[int, Times] = {}
            for lkey, value in layers.items():
                if not (isinstance(lkey, str) and lkey.isdigit()):
                    raise ProfileError(f"{here}: layer key {lkey!r} is not an index (0, 1, ...)")
                ok = (
                    isinstance(value, list)
                    and len(value) == 3
                    and all(
                        isinstance(x, (int, float))
                        and not isinstance(x, bool)
                        and math.isfinite(x)
                        and x >= 0
                        for x in value
                    )
                )
                if not ok:
                    raise ProfileError(
                        f"{here}[{lkey}]: expected [forward_s, backward_s, update_s], three "
                        f"non-negative numbers, got {value!r}"
                    )
                row[int(lkey)] = (float(value[0]), float(value[1]), float(value[2]))
            if indices is None:
                indices = set(row)
            elif set(row) != indices:
                raise ProfileError(
                    f"{here}: layer indices {sorted(row)} differ from the first entry's "
                    f"{sorted(indices)} (every microbatch/TP entry must list the same layers)"
                )
            table[mbs][tp] = row
    return table


def _number(value: object, where: str, what: str) -> float:
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    ):
        return float(value)
    raise ProfileError(f"{where}: {what} must be a non-negative number, got {value!r}")


def _object(raw: object, where: str, what: str) -> dict[str, object]:
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: expected an object {what}, got {type(raw).__name__}")
    return raw


def _memory_table(
    raw: object, times: dict[int, dict[int, dict[int, Times]]], where: str
) -> dict[int, dict[int, LayerMemory]]:
    indices = set(next(iter(next(iter(times.values())).values())))
    table: dict[int, dict[int, LayerMemory]] = {}
    for tkey, layers in _object(raw, where, "tp -> layer -> bytes").items():
        tp = _positive_int(tkey, where)
        here = f"{where}[{tkey}]"
        row: dict[int, LayerMemory] = {}
        for lkey, entry in _object(layers, here, "layer -> bytes").items():
            if not (isinstance(lkey, str) and lkey.isdigit()) or int(lkey) not in indices:
                raise ProfileError(
                    f"{here}: layer {lkey!r} is not one of the timed layers {sorted(indices)}"
                )
            at = f"{here}[{lkey}]"
            fields = _object(entry, at, "{weight_bytes, activation_bytes}")
            unknown = set(fields) - {"weight_bytes", "activation_bytes"}
            if unknown or "weight_bytes" not in fields:
                raise ProfileError(
                    f"{at}: expected keys weight_bytes and activation_bytes, got {sorted(fields)}"
                )
            acts = _object(fields.get("activation_bytes", {}), at, "microbatch -> bytes")
            row[int(lkey)] = LayerMemory(
                weight_bytes=_number(fields["weight_bytes"], at, "weight_bytes"),
                activation_bytes={
                    _positive_int(m, f"{at}.activation_bytes"): _number(
                        v, f"{at}.activation_bytes[{m}]", "bytes"
                    )
                    for m, v in acts.items()
                },
            )
        table[tp] = row
    return table


def _peak_table(raw: object, where: str) -> dict[int, dict[int, float]]:
    return {
        _positive_int(m, where): {
            _positive_int(t, f"{where}[{m}]"): _number(v, f"{where}[{m}][{t}]", "bytes")
            for t, v in _object(by_tp, f"{where}[{m}]", "tp -> bytes").items()
        }
        for m, by_tp in _object(raw, where, "microbatch -> tp -> bytes").items()
    }


def _fit(raw: object, where: str) -> BandwidthFit:
    fields = _object(raw, where, "{coefficients, peak, residual, points, sizes, latency}")
    unknown = set(fields) - {"coefficients", "peak", "residual", "points", "sizes", "latency"}
    if unknown:
        raise ProfileError(f"{where}: unknown keys {sorted(unknown)}")
    coefficients = fields.get("coefficients")
    if not (
        isinstance(coefficients, list)
        and len(coefficients) == 3
        and all(
            isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c)
            for c in coefficients
        )
    ):
        raise ProfileError(
            f"{where}: coefficients must be [a, b, c] (GB/s = a x^2 + b x + c), "
            f"got {coefficients!r}"
        )
    peak = _number(fields.get("peak"), where, "peak (bytes/s)")
    if peak <= 0:
        raise ProfileError(f"{where}: peak must be positive bytes/s")
    residual = fields.get("residual")
    points = fields.get("points", [])
    if not isinstance(points, list) or not all(isinstance(p, list) and len(p) == 2 for p in points):
        raise ProfileError(f"{where}: points must be a list of [bytes, bytes_per_s]")
    sizes = fields.get("sizes")
    span: tuple[float, float] | None = None
    if sizes is not None:
        if not isinstance(sizes, list) or len(sizes) != 2:
            raise ProfileError(f"{where}: sizes must be [smallest, largest] message bytes")
        span = (_number(sizes[0], where, "sizes[0]"), _number(sizes[1], where, "sizes[1]"))
        if not 0 < span[0] <= span[1]:
            raise ProfileError(f"{where}: sizes must be 0 < smallest <= largest, got {sizes!r}")
    return BandwidthFit(
        coefficients=(float(coefficients[0]), float(coefficients[1]), float(coefficients[2])),
        peak=peak,
        residual=None if residual is None else _number(residual, where, "residual"),
        points=tuple((_number(b, where, "bytes"), _number(r, where, "bytes/s")) for b, r in points),
        sizes=span,
        latency=_number(fields.get("latency", 0.0), where, "latency (seconds)"),
    )


def _network_table(raw: object, where: str) -> Network:
    table: Network = {}
    for scope, by_collective in _object(raw, where, "scope -> collective -> fits").items():
        if scope == "links":
            continue
        if scope not in SCOPES:
            raise ProfileError(f"{where}: scope {scope!r} is not one of {', '.join(SCOPES)}")
        table[scope] = {}
        for collective, fits in _object(by_collective, f"{where}.{scope}", "").items():
            if collective not in COLLECTIVES:
                raise ProfileError(
                    f"{where}.{scope}: collective {collective!r} is not one of "
                    f"{', '.join(COLLECTIVES)}"
                )
            at = f"{where}.{scope}.{collective}"
            table[scope][collective] = {
                _positive_int(n, at): _fit(fit, f"{at}[{n}]")
                for n, fit in _object(fits, at, "devices -> fit").items()
            }
    return table


def _links(raw: object, device: str, where: str) -> tuple[MeasuredLink, ...]:
    """`network.links`: each a measured link between two named zones (module docstring)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ProfileError(f"{where}: expected a list of links, got {type(raw).__name__}")
    keys = {"from", "to", "peer", "collective", "devices", "fit"}
    links = []
    for index, entry in enumerate(raw):
        at = f"{where}[{index}]"
        fields = _object(entry, at, "{from, to, peer, collective, devices, fit}")
        unknown = set(fields) - keys
        missing = {"from", "to", "devices", "fit"} - set(fields)
        if unknown or missing:
            raise ProfileError(
                f"{at}: expected keys from, to, devices, fit (and peer, collective)"
                + (f"; unknown {sorted(unknown)}" if unknown else "")
                + (f"; missing {sorted(missing)}" if missing else "")
            )
        names = [fields["from"], fields["to"], fields.get("peer", device)]
        if not all(isinstance(n, str) and n for n in names):
            raise ProfileError(f"{at}: from, to and peer must be non-empty names")
        collective = fields.get("collective", "p2p")
        if collective != "p2p":
            raise ProfileError(f"{at}: collective {collective!r}: only p2p links are measured")
        devices = fields["devices"]
        if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
            raise ProfileError(f"{at}: devices must be a positive integer, got {devices!r}")
        links.append(
            MeasuredLink(
                source=str(names[0]),
                target=str(names[1]),
                peer=str(names[2]),
                collective="p2p",
                devices=devices,
                fit=_fit(fields["fit"], f"{at}.fit"),
            )
        )
    return tuple(links)


def _out_of_memory_table(
    raw: object, times: dict[int, dict[int, dict[int, Times]]], where: str
) -> dict[int, frozenset[int]]:
    table: dict[int, frozenset[int]] = {}
    for mkey, tps in _object(raw, where, "microbatch -> [tp, ...]").items():
        mbs = _positive_int(mkey, where)
        if not isinstance(tps, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t > 0 for t in tps
        ):
            raise ProfileError(f"{where}[{mkey}]: expected a list of TP degrees, got {tps!r}")
        timed = sorted(set(tps) & set(times.get(mbs, {})))
        if timed:
            raise ProfileError(
                f"{where}[{mkey}]: TP {timed[0]} is also in `times`: a point either ran out of"
                " memory or was timed"
            )
        table[mbs] = frozenset(tps)
    return table


def _environment(raw: object, where: str) -> dict[str, object]:
    fields = _object(raw, where, "name -> version or value")
    for key, value in fields.items():
        if not (value is None or isinstance(value, str) or type(value) is int):
            raise ProfileError(f"{where}.{key}: expected a string, an integer or null")
    return dict(fields)


def parse_profile(
    data: object,
    *,
    model: str | None = None,
    device: str | None = None,
    precision: str = "fp16",
    seq_len: int = 2048,
    source: str = "<profile>",
) -> LayerProfile:
    """Read a decoded profile in either spelling; raise `ProfileError` on any malformation.

    For the Sailor spelling, `model` and `device` are required (the file does not say) and
    `precision` / `seq_len` default to what Sailor's published profiles used (fp16 mixed
    precision, 2048 tokens). For the hetc spelling the file's own fields win and must agree
    with any that the caller passes.
    """
    if isinstance(data, dict) and "format" in data:
        if data.get("format") != HETC_FORMAT or data.get("version") not in READABLE_VERSIONS:
            raise ProfileError(
                f"{source}: format {data.get('format')!r} version {data.get('version')!r} is "
                f"not {HETC_FORMAT!r} version {' or '.join(map(str, READABLE_VERSIONS))}"
            )
        for key, kind in (("model", str), ("device", str), ("precision", str), ("seq_len", int)):
            if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
                raise ProfileError(f"{source}: `{key}` must be a {kind.__name__}")
        if data.get("units") != "s":
            raise ProfileError(f'{source}: `units` must be "s" (seconds per microbatch)')
        fields = {"model": model, "device": device}
        for key, wanted in fields.items():
            if wanted is not None and data[key] != wanted:
                raise ProfileError(f"{source}: profile is for {key} {data[key]!r}, not {wanted!r}")
        times = _times_table(data.get("times"), f"{source}: times")
        architecture = data.get("architecture")
        if architecture is not None and not isinstance(architecture, dict):
            raise ProfileError(f"{source}: `architecture` must be an object of the model's shape")
        meta = data.get("meta", {})
        if not isinstance(meta, dict):
            raise ProfileError(f"{source}: `meta` must be an object")
        return LayerProfile(
            model=data["model"],
            device=data["device"],
            precision=data["precision"],
            seq_len=data["seq_len"],
            times=times,
            source=source,
            architecture=architecture,
            memory=_memory_table(data.get("memory", {}), times, f"{source}: memory"),
            peak_bytes=_peak_table(data.get("peak_bytes", {}), f"{source}: peak_bytes"),
            network=_network_table(data.get("network", {}), f"{source}: network"),
            links=_links(
                _object(data.get("network", {}), f"{source}: network", "").get("links"),
                data["device"],
                f"{source}: network.links",
            ),
            out_of_memory=_out_of_memory_table(
                data.get("out_of_memory", {}), times, f"{source}: out_of_memory"
            ),
            environment=_environment(data.get("environment", {}), f"{source}: environment"),
            meta=meta,
        )
    if model is None or device is None:
        raise ProfileError(
            f"{source}: a Sailor profile does not name its model and device: pass model= and "
            "device= (or use the hetc format, which records them)"
        )
    return LayerProfile(
        model=model,
        device=device,
        precision=precision,
        seq_len=seq_len,
        times=_times_table(data, source),
        source=source,
    )


def read_profile(
    path: str | Path,
    *,
    model: str | None = None,
    device: str | None = None,
    precision: str = "fp16",
    seq_len: int = 2048,
) -> LayerProfile:
    """Read a profile file (Sailor or hetc spelling); see `parse_profile`."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ProfileError(
            f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg}); a profile is"
            " what `hetc profile measure` or `hetc profile import` writes"
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise EnvironmentProblem(
            f"cannot read the profile {path}: {reason}",
            "pass an existing profile file (paths in `profiles:` are relative to the spec)",
        ) from None
    return parse_profile(
        data, model=model, device=device, precision=precision, seq_len=seq_len, source=str(path)
    )
