"""Sailor's measured links between nodes (`network/multizone_bandwidths_het.json`) as a
device profile's network facts.

Sailor timed point-to-point transfers between GCP VMs in five zones (us-central1-a, -b, -c,
-f and us-west1-b), for every pair of GPU types and GPUs per VM, and fitted each to the cost
model's curve: `[sender zone][sender GPU][sender GPUs][receiver zone][receiver GPU][receiver
GPUs] = [[a, b, c], peak]`. For the profile of one GPU this keeps the entries it sends from,
with as many GPUs per VM at both ends (unequal ends measure the smaller one again), as:

- `network.links`: every such entry, keyed by the two named zones, the receiving GPU and the
  GPUs per VM, the most specific fact (a plan in those zones is priced by exactly what was
  measured there);
- `network.inter_node`, `inter_zone`, `inter_region` `.p2p[n]`: for this GPU at both ends,
  the slowest peak measured within one zone, between two zones of one region, between two
  regions (ties: the first zone pair by name): what prices a pair of zones that were not
  measured, without counting on the luckiest pair. `meta` names the pair chosen for each n.

A GCP zone is named `<region>-<letter>`, so a zone's region is its name up to the last `-`.
The fits record no message sizes; `hetc.costmodel.profile.DEFAULT_FIT_SIZES` (1 MB to 1 GB)
stands in, as the quadratics turn negative below 1 MB.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from hetc.costmodel.profile import BandwidthFit, MeasuredLink, Network, ProfileError

__all__ = ["SailorLink", "links_from", "network_of", "region_of"]

SCOPE_WORDS = {
    "inter_node": "within one zone",
    "inter_zone": "between two zones of one region",
    "inter_region": "between two regions",
}


@dataclass(frozen=True, slots=True)
class SailorLink:
    """One entry of the multizone file with equal GPUs per VM at both ends."""

    source: str
    sender: str
    devices: int
    target: str
    receiver: str
    fit: BandwidthFit


def region_of(zone: str) -> str:
    """A GCP zone's region: `us-central1-a` -> `us-central1`."""
    return zone.rsplit("-", 1)[0] if "-" in zone else zone


def _object(raw: object, where: str) -> dict[str, object]:
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: expected an object, got {type(raw).__name__}")
    return raw


def _count(key: str, where: str) -> int:
    if not (key.isdigit() and int(key) > 0):
        raise ProfileError(f"{where}: key {key!r} is not a GPU count (1, 2, 4, ...)")
    return int(key)


def read_fit(raw: object, where: str) -> BandwidthFit:
    """`[[a, b, c], peak_bytes_per_s]` as a fit, or a `ProfileError` naming `where`."""

    def number(x: object) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

    ok = (
        isinstance(raw, list)
        and len(raw) == 2
        and isinstance(raw[0], list)
        and len(raw[0]) == 3
        and all(number(c) for c in raw[0])
        and number(raw[1])
        and raw[1] > 0
    )
    if not ok:
        raise ProfileError(
            f"{where}: expected [[a, b, c], peak_bytes_per_s] (GB/s = a x^2 + b x + c, "
            f"positive peak), got {str(raw)[:80]}"
        )
    assert isinstance(raw, list)
    a, b, c = raw[0]
    return BandwidthFit(coefficients=(float(a), float(b), float(c)), peak=float(raw[1]))


def links_from(multizone: dict[str, object], sender: str, where: str) -> Iterator[SailorLink]:
    """Every entry the GPU `sender` sends from, with equal GPUs per VM at both ends, in the
    file's key order; a malformed entry raises `ProfileError` naming its key path."""
    for source, by_gpu in multizone.items():
        at = f"{where}[{source}]"
        senders = _object(by_gpu, at)
        if sender not in senders:
            continue
        for count, receivers in _object(senders[sender], f"{at}[{sender}]").items():
            here = f"{at}[{sender}][{count}]"
            devices = _count(count, here)
            for target, by_receiver in _object(receivers, here).items():
                there = f"{here}[{target}]"
                for receiver, by_count in _object(by_receiver, there).items():
                    entry = _object(by_count, f"{there}[{receiver}]").get(str(devices))
                    if entry is None:
                        continue
                    fit = read_fit(entry, f"{there}[{receiver}][{devices}]")
                    yield SailorLink(source, sender, devices, target, receiver, fit)


def network_of(
    multizone: dict[str, object],
    sender: str,
    name: Callable[[str], str],
    where: str,
) -> tuple[Network, tuple[MeasuredLink, ...], dict[str, str]]:
    """The class fits, the named links and the `meta` notes for the profile of GPU `sender`;
    `name` maps Sailor's GPU names to the profile's (the catalog's where it has them)."""
    entries = list(links_from(multizone, sender, where))
    links = tuple(
        MeasuredLink(
            source=e.source,
            target=e.target,
            peer=name(e.receiver),
            collective="p2p",
            devices=e.devices,
            fit=e.fit,
        )
        for e in sorted(entries, key=lambda e: (e.source, e.target, e.receiver, e.devices))
    )
    slowest: dict[str, dict[int, SailorLink]] = {}
    for entry in entries:
        if entry.receiver != sender:
            continue
        scope = _scope(entry.source, entry.target)
        kept = slowest.setdefault(scope, {}).get(entry.devices)
        if kept is None or (entry.fit.peak, entry.source, entry.target) < (
            kept.fit.peak,
            kept.source,
            kept.target,
        ):
            slowest[scope][entry.devices] = entry
    network: Network = {}
    meta: dict[str, str] = {}
    for scope in SCOPE_WORDS:
        chosen = slowest.get(scope)
        if not chosen:
            continue
        network[scope] = {"p2p": {n: e.fit for n, e in sorted(chosen.items())}}
        picks = ", ".join(
            f"{n} per VM: {e.source} -> {e.target}" for n, e in sorted(chosen.items())
        )
        meta[scope] = (
            f"p2p {SCOPE_WORDS[scope]}, keyed by GPUs per VM; the slowest peak measured is"
            f" kept ({picks})"
        )
    return network, links, meta


def _scope(source: str, target: str) -> str:
    if source == target:
        return "inter_node"
    return "inter_zone" if region_of(source) == region_of(target) else "inter_region"
