"""Which fact prices a transfer between two devices: the one place the planner and the
simulator ask, so that both price every hop of a plan alike.

A hop is priced by the most specific fact there is, measured before specified:

1. Inside one node: the device profile's `intra_node` fit (point to point for a send, the
   all-reduce fit of that group size for a ring that never leaves the node, or hop by hop
   over the point-to-point fit where no all-reduce was measured), else the catalog's
   intra-node link (`network.intra_node_link`).
2. Between two nodes, measured:
   a. a link measured between the two named zones (`network.links` of either end's profile:
      from a node of this device in zone A to a node of the peer device in zone B, or the
      other way round);
   b. else, for two nodes of one device, its profile's fit for the class of the pair: two
      nodes in one zone (`inter_node`), two zones of one region (`inter_zone`), two regions
      (`inter_region`); for two devices, the slower flow of the two devices' fits for that
      class (each NIC bounds what crosses it), when both are measured.
   A measured fit for n devices per node is what n concurrent flows leaving a node reached
   together, so one flow gets its peak / n, along the fit's message-size curve, with no
   latency of its own (the fit is of whole transfer times) and no NIC term (the fit measured
   the NIC).
3. Between two nodes, specified: the spec's link class for the zone pair (overrides applied,
   `network.link_between`), the smaller NIC of the two pools, a flat curve.

`Hop.source` says which fact priced a hop, for the reports that must say where a
prediction rests on the spec rather than a measurement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from hetc.costmodel.network import (
    FLAT,
    MessageSizeCurve,
    intra_node_link,
    link_between,
    transfer_time,
)
from hetc.costmodel.profile import BandwidthFit, LayerProfile
from hetc.schema.spec import LinkClass, Spec, Zone

__all__ = [
    "End",
    "Hop",
    "LinkPricer",
    "SlowerOf",
    "named_zones",
    "scope_between",
    "slower_of",
]


@dataclass(frozen=True, slots=True)
class End:
    """One end of a transfer between nodes: where the node is, what it holds, its NIC."""

    zone: Zone
    device: str
    nic: float
    """Bytes/s of the node's NIC (the pool's `nic_bandwidth`)."""


@dataclass(frozen=True, slots=True)
class Hop:
    """How one flow across one hop is priced: `network.transfer_time(bytes, link,
    nic_bandwidth=nic, curve=curve, flows_on_nic=...)`."""

    link: LinkClass
    curve: MessageSizeCurve
    nic: float
    source: str
    """The fact that priced it: `measured <profile>: <where>` or `spec: <where>`."""

    @property
    def measured(self) -> bool:
        return self.source.startswith("measured")


def scope_between(a: Zone, b: Zone) -> str:
    """The profile scope of a link between nodes in zones a and b."""
    if a.name == b.name:
        return "inter_node"
    return "inter_zone" if a.region == b.region else "inter_region"


_SPEC_CLASS = {
    "inter_node": "intra_zone",
    "inter_zone": "inter_zone",
    "inter_region": "inter_region",
}


def named_zones(spec: Spec, profiles: Mapping[str, LayerProfile]) -> frozenset[str]:
    """Names a link fact may single out: those of `network.links` overrides and the zones of
    measured profile links. A hop between two zones named by neither depends on them only
    through their regions and whether they are one zone."""
    names = {name for link in spec.network.links for name in link.between}
    for profile in profiles.values():
        names |= {name for link in profile.links for name in (link.source, link.target)}
    return frozenset(names)


class LinkPricer:
    """The hops of one spec with its measured profiles (one per device), memoised per class
    of zone pair (a zone `named_zones` names by itself, any other by its region, and whether
    the two are one zone): a search asks the same pair millions of times, and a spec of a
    thousand zones has a million pairs but a handful of classes."""

    def __init__(self, spec: Spec, profiles: Mapping[str, LayerProfile]) -> None:
        self.spec = spec
        self.profiles = dict(profiles)
        self.named = named_zones(spec, self.profiles)
        self._inside: dict[tuple[str, str, int], Hop] = {}
        self._between: dict[tuple[object, ...], Hop] = {}

    def inside_node(self, device: str, collective: str, devices: int) -> Hop:
        """A hop between two devices of one node: `collective` is "p2p" for a send or one
        step of a ring that leaves the node, "all_reduce" for a ring of `devices` devices
        that stays inside it (the fit is then read at the ring's whole buffer)."""
        key = (device, collective, devices)
        hop = self._inside.get(key)
        if hop is None:
            hop = self._inside[key] = self._inside_node(device, collective, devices)
        return hop

    def _inside_node(self, device: str, collective: str, devices: int) -> Hop:
        profile = self.profiles.get(device)
        found = None if profile is None else profile.fit_for("intra_node", collective, devices)
        if profile is not None and found is None and collective == "all_reduce":
            # no all-reduce measured: the ring goes hop by hop over the measured send
            found, collective = profile.fit_for("intra_node", "p2p", 2), "p2p"
        if profile is not None and found is not None:
            size, fit = found
            scale = float(devices) if collective == "all_reduce" else 1.0
            return Hop(
                link=LinkClass(bandwidth=fit.peak, latency=fit.latency),
                curve=fit.curve(scale),
                nic=math.inf,
                source=f"measured {profile.source}: intra_node.{collective}[{size}]",
            )
        return Hop(
            link=intra_node_link(self.spec.devices[device]),
            curve=FLAT,
            nic=math.inf,
            source=f"spec: {device}'s intra-node bandwidth (catalog)",
        )

    def between_nodes(self, a: End, b: End, flows: int) -> Hop:
        """The hop from a node at `a` to a node at `b` when `flows` devices per node send at
        once (see the module docstring for which fact wins)."""
        key = (
            self._where(a.zone),
            a.device,
            self._where(b.zone),
            b.device,
            a.zone.name == b.zone.name,
            a.nic,
            b.nic,
            flows,
        )
        hop = self._between.get(key)
        if hop is None:
            hop = self._between[key] = self._between_nodes(a, b, flows)
        return hop

    def _where(self, zone: Zone) -> tuple[str, str]:
        """What a hop can tell of a zone: its name where a fact names it, else its region."""
        return ("zone", zone.name) if zone.name in self.named else ("region", zone.region)

    def _between_nodes(self, a: End, b: End, flows: int) -> Hop:
        named = self._named(a, b, flows)
        if named is not None:
            return named
        scope = scope_between(a.zone, b.zone)
        ends = {a.device: a, b.device: b}.values()
        measured = [self._class_fit(end, scope, flows) for end in ends]
        if measured and all(m is not None for m in measured):
            share, fit, where = min((m for m in measured if m is not None), key=lambda m: m[0])
            return _measured_hop(share, fit, where)
        link = link_between(self.spec.network, a.zone, b.zone)
        return Hop(
            link=link,
            curve=FLAT,
            nic=min(a.nic, b.nic),
            source=f"spec: network.{_SPEC_CLASS[scope]}"
            + ("" if link == _base_class(self.spec, a.zone, b.zone) else " (with overrides)"),
        )

    def _named(self, a: End, b: End, flows: int) -> Hop | None:
        for near, far in ((a, b), (b, a)):
            profile = self.profiles.get(near.device)
            if profile is None:
                continue
            link = profile.link_between(near.zone.name, far.zone.name, far.device, flows)
            if link is not None:
                where = (
                    f"measured {profile.source}: links[{link.source} -> {link.target},"
                    f" {link.peer}, {link.devices} per node]"
                )
                return _measured_hop(link.fit.peak / link.devices, link.fit, where)
        return None

    def _class_fit(
        self, end: End, scope: str, flows: int
    ) -> tuple[float, BandwidthFit, str] | None:
        """(one flow's share of the peak, fit, where) of the end's device for `scope`."""
        profile = self.profiles.get(end.device)
        found = None if profile is None else profile.fit_for(scope, "p2p", flows)
        if profile is None or found is None:
            return None
        size, fit = found
        return fit.peak / size, fit, f"measured {profile.source}: {scope}.p2p[{size}]"


def _measured_hop(share: float, fit: BandwidthFit, where: str) -> Hop:
    return Hop(
        link=LinkClass(bandwidth=share, latency=fit.latency),
        curve=fit.curve(),
        nic=math.inf,
        source=where,
    )


def _base_class(spec: Spec, a: Zone, b: Zone) -> LinkClass:
    network = spec.network
    if a.name == b.name:
        return network.intra_zone
    return network.inter_zone if a.region == b.region else network.inter_region


@dataclass(frozen=True, slots=True)
class SlowerOf:
    """A message-size curve that prices a message at the slowest of several hops, each with
    `flows` flows on its NIC: used on a link of 1 byte/s with no latency and no NIC, its
    transfer time is the largest of theirs. The planner prices a hop between two replicas of
    one pool this way when they may share a node (the placement decides), so that its
    estimate is never below what the simulator prices any placement at."""

    hops: tuple[Hop, ...]
    flows: int

    def __call__(self, nbytes: float) -> float:
        slowest = max(_seconds(hop, nbytes, self.flows) for hop in self.hops)
        return nbytes / slowest if slowest > 0 else 1.0


def _seconds(hop: Hop, nbytes: float, flows: int) -> float:
    return transfer_time(
        nbytes, hop.link, flows_on_nic=flows, nic_bandwidth=hop.nic, curve=hop.curve
    )


_PROBE_SIZES = tuple(float(4**k) for k in range(5, 17))
"""Message bytes (1 KiB to 4 GiB, powers of 4) at which `slower_of` compares hops."""


def slower_of(first: Hop, others: tuple[Hop, ...], flows: int) -> Hop:
    """`first` where it is the slowest hop at every probed message size (the usual case: a
    network hop against NVLink), else all of them combined by `SlowerOf`."""
    slower = tuple(
        hop
        for hop in others
        if any(_seconds(hop, n, flows) > _seconds(first, n, flows) for n in _PROBE_SIZES)
    )
    if not slower:
        return first
    return Hop(
        link=LinkClass(bandwidth=1.0, latency=0.0),
        curve=SlowerOf((first, *slower), flows),
        nic=math.inf,
        source="; or, on one node, ".join(hop.source for hop in (first, *slower)),
    )
