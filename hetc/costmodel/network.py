"""Communication time and egress price: which link joins two zones, how fast a flow crosses it,
and what point-to-point sends and ring collectives cost.

Every number is SI (bytes, seconds, bytes/s, USD); latency is one-way. The model is the
alpha-beta one (a message costs its latency plus bytes over a bandwidth), with three caps on
the bandwidth one flow gets, because each shows up in the measurements hetc is checked against:

- **TCP window** (WAN links, those with `tcp_window` set): one TCP stream carries at most
  window / RTT, RTT = 2 x one-way latency. With PyTorch's one stream per node pair, a 4 MiB
  window over 80 ms RTT gives ~420 Mbit/s however fat the pipe (Atlas §3); `tcp_streams`
  parallel streams multiply that (Atlas §4.1).
- **The link's share.** `LinkClass.bandwidth` is *per node pair*: the rate one node can push to
  one peer node over that class of link (Atlas measured a ~5 Gbps cap per VM pair on WAN
  whatever the distance, a hypervisor limit; the spec's intra-zone default of 100 Gbps is one
  NIC's speed). Pipelines between *different* node pairs do not share it; `flows_on_link`
  counts concurrent flows between the *same* two nodes (say, activations of two pipelines whose
  stages sit on the same pair of nodes), which split it evenly. A planner that wants an
  aggregate WAN capacity shared by all pipelines can pass the total flow count instead, but
  the spec's numbers are per pair.
- **The NIC's share.** Every flow leaving (or entering) a node crosses its NIC, so
  `flows_on_nic` concurrent flows split `nic_bandwidth`. This is why the measured bandwidth
  *per GPU* between two nodes falls as more GPUs per node communicate at once (Sailor's
  A100 same-zone curves: 1.94 GB/s at 1 GPU per end, 6.11 / 4 = 1.53 GB/s per GPU at 4).

Optionally a message-size curve scales the result: small messages do not reach peak. The
default is flat (1.0): the latency term already penalises small messages, and the only
measured shape we have (Sailor's, one cloud) should not silently become everyone's. See
`SaturatingCurve` and `LogQuadraticCurve` (the latter takes Sailor's fitted coefficients).

Collectives are rings, bounded by their slowest hop. A solver calls these millions of times,
so the collective functions are memoised on (bytes, n, links, flow counts, NIC, curve): all
plain numbers and frozen dataclasses, hence hashable.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from hetc.catalog import DeviceType
from hetc.schema.spec import LinkClass, LinkOverride, Network, Zone

__all__ = [
    "FLAT",
    "INTRA_NODE_LATENCY",
    "FlatCurve",
    "Hops",
    "LogQuadraticCurve",
    "MeasuredCurve",
    "MessageSizeCurve",
    "SaturatingCurve",
    "all_gather_time",
    "effective_bandwidth",
    "egress_cost",
    "intra_node_link",
    "link_between",
    "reduce_scatter_time",
    "ring_all_reduce_time",
    "send_time",
    "tcp_window_limit",
    "tp_all_reduce_time",
    "transfer_time",
]

MessageSizeCurve = Callable[[float], float]
"""Fraction of peak bandwidth (0 < f <= 1) a message of this many bytes reaches. Must be
hashable (a frozen dataclass) so that the memoised collectives can key on it."""

_CACHE_SIZE = 1 << 16
"""Entries per memoised function: enough for a solver's working set, bounded so a long search
cannot grow memory without limit."""

INTRA_NODE_LATENCY = 5e-6
"""Seconds, one step of a collective over NVLink/PCIe inside one node. An assumption (order of
NCCL's per-step overhead), not a measurement: pass `latency=` to `intra_node_link` to change it.
"""


# ---------------------------------------------------------------------------------------------
# Message-size curves


@dataclass(frozen=True, slots=True)
class FlatCurve:
    """Every message reaches peak bandwidth; only the latency term penalises small ones."""

    def __call__(self, nbytes: float) -> float:
        return 1.0


FLAT = FlatCurve()
"""The default curve."""


@dataclass(frozen=True, slots=True)
class SaturatingCurve:
    """f(m) = m / (m + half_peak_bytes): a message of `half_peak_bytes` reaches half of peak.

    Equivalent to an extra per-message overhead of half_peak_bytes / peak seconds. Its knee is
    sharp (one decade from 50% to 91%); Sailor's measured curves climb much more slowly (about
    +17% of peak per decade between 1 MB and 1 GB), so prefer `LogQuadraticCurve` where a
    measured fit exists.
    """

    half_peak_bytes: float

    def __call__(self, nbytes: float) -> float:
        return nbytes / (nbytes + self.half_peak_bytes) if nbytes > 0 else 0.0


@dataclass(frozen=True, slots=True)
class LogQuadraticCurve:
    """Sailor's fit, normalised: f(m) = clamp((a x^2 + b x + c) * 1e9 / peak, floor, 1).

    x = log2(m / 1e6); (a, b, c) give GB/s as in shared/data/sailor-measurements/network, and
    `peak` (bytes/s) is the figure Sailor stores beside them. The clamp is needed because the
    quadratic was fitted on roughly 1 MB to 1 GB: it turns negative for kilobyte messages and
    overshoots the recorded peak past 1 GB (A100 NVLink: 269 GB/s at 1 GB against a 243 GB/s
    peak).
    """

    a: float
    b: float
    c: float
    peak: float
    floor: float = 0.05

    def __call__(self, nbytes: float) -> float:
        if nbytes <= 0:
            return self.floor
        x = math.log2(nbytes / 1e6)
        fraction = (self.a * x * x + self.b * x + self.c) * 1e9 / self.peak
        return min(1.0, max(self.floor, fraction))


@dataclass(frozen=True, slots=True)
class MeasuredCurve:
    """A measured bandwidth fit as the fraction of its peak a message reaches, for a link priced
    with no latency of its own: the fit is of whole transfer times (bytes over seconds, the
    latency included), so adding a latency would count it twice.

    Inside the measured sizes [smallest, largest] the fit's GB/s = a x^2 + b x + c
    (x = log2(bytes / 1e6)), kept within (0, peak]; a message smaller than the smallest
    measured takes as long as the smallest did (such transfers are latency-bound); one
    larger than the largest moves at the largest's rate. A quadratic in log size must not be
    trusted outside the sizes it was fitted on: Sailor's turns negative below 1 MB.
    `scale` is how many message bytes the fit was measured per byte priced: an all-reduce fit
    is keyed by the whole buffer while a ring step moves 1/n of it, so a ring of n prices its
    steps with scale n; a point-to-point fit has scale 1.
    """

    a: float
    b: float
    c: float
    peak: float
    smallest: float
    largest: float
    scale: float = 1.0

    def __call__(self, nbytes: float) -> float:
        size = nbytes * self.scale
        at = min(max(size, self.smallest), self.largest)
        x = math.log2(at / 1e6)
        rate = (self.a * x * x + self.b * x + self.c) * 1e9
        fraction = min(1.0, max(rate / self.peak, _LEAST_FRACTION))
        if size < self.smallest:
            fraction *= max(size, 1.0) / self.smallest
        return fraction


_LEAST_FRACTION = 1e-6
"""Where a fit dips to zero or below inside its own range, the least fraction of peak it is
taken to reach: a bug in the fit must show as a very slow link, not a division by zero."""


# ---------------------------------------------------------------------------------------------
# Which link joins two zones


def link_between(network: Network, a: Zone, b: Zone) -> LinkClass:
    """The link class traffic between zones `a` and `b` crosses, overrides applied.

    The base class is `intra_zone` within one zone, `inter_zone` between zones of one region,
    `inter_region` otherwise. Then every `network.links` override that matches the pair is
    layered on, field by field (a None field keeps what is below it), least specific first:
    region-region, then zone-region, then zone-zone, and within one level in list order (the
    later wins). So a zone-name override beats a region-name one on every field it sets, and
    a region-wide override still supplies the fields a zone override leaves out.

    An override `between: [x, y]` matches when one end is named by x (its zone name or its
    region name) and the other by y, in either order. Overrides never apply within one zone:
    the schema requires two different names, and intra-zone traffic is `intra_zone`'s alone.
    """
    return _link_between(network, a.name, a.region, b.name, b.region)


@lru_cache(maxsize=4096)
def _link_between(network: Network, za: str, ra: str, zb: str, rb: str) -> LinkClass:
    if za == zb:
        return network.intra_zone
    base = network.inter_zone if ra == rb else network.inter_region
    matches: list[tuple[int, int, LinkOverride]] = []
    for index, override in enumerate(network.links):
        x, y = override.between
        best = max(
            _specificity(x, za, ra, y, zb, rb),
            _specificity(y, za, ra, x, zb, rb),
        )
        if best >= 0:
            matches.append((best, index, override))
    if not matches:
        return base
    bandwidth, latency = base.bandwidth, base.latency
    streams, window = base.tcp_streams, base.tcp_window
    for _, _, override in sorted(matches, key=lambda m: (m[0], m[1])):
        bandwidth = override.bandwidth if override.bandwidth is not None else bandwidth
        latency = override.latency if override.latency is not None else latency
        streams = override.tcp_streams if override.tcp_streams is not None else streams
        window = override.tcp_window if override.tcp_window is not None else window
    return LinkClass(bandwidth=bandwidth, latency=latency, tcp_streams=streams, tcp_window=window)


def _specificity(x: str, za: str, ra: str, y: str, zb: str, rb: str) -> int:
    """How many of the two ends x names a (by zone) and y names b (by zone); -1: no match.

    A name equal to both a zone and its region (a zone given no region) counts as a zone name.
    """
    ends = 0
    for name, zone, region in ((x, za, ra), (y, zb, rb)):
        if name == zone:
            ends += 1
        elif name != region:
            return -1
    return ends


# ---------------------------------------------------------------------------------------------
# One flow over one link


def tcp_window_limit(link: LinkClass) -> float:
    """Bytes/s the TCP windows allow one flow: streams x window / RTT; inf off WAN links."""
    if link.tcp_window is None:
        return math.inf
    return link.tcp_streams * link.tcp_window / (2.0 * link.latency)


def effective_bandwidth(
    link: LinkClass,
    nbytes: float,
    *,
    flows_on_link: int = 1,
    flows_on_nic: int = 1,
    nic_bandwidth: float,
    curve: MessageSizeCurve = FLAT,
) -> float:
    """Bytes/s one flow of `nbytes`-byte messages gets over `link`.

    min(link.bandwidth / flows_on_link, nic_bandwidth / flows_on_nic), and on WAN links (with
    `tcp_window` set) also streams x window / RTT, then times `curve(nbytes)`.

    `link.bandwidth` is per node pair, so `flows_on_link` counts concurrent flows between the
    same two nodes. `nic_bandwidth` is the tighter end's NIC (for a heterogeneous pair, the
    smaller of the two) and `flows_on_nic` the flows on the busier end; pass math.inf for
    transfers that never leave the node. The window limit is per flow: each flow opens its
    own `tcp_streams` connections.
    """
    if flows_on_link < 1 or flows_on_nic < 1:
        raise ValueError(f"flow counts must be >= 1, got {flows_on_link}, {flows_on_nic}")
    rate = min(
        min(link.bandwidth / flows_on_link, nic_bandwidth / flows_on_nic),
        tcp_window_limit(link),
    )
    return rate * curve(nbytes)


def transfer_time(
    nbytes: float,
    link: LinkClass,
    *,
    flows_on_link: int = 1,
    flows_on_nic: int = 1,
    nic_bandwidth: float,
    curve: MessageSizeCurve = FLAT,
) -> float:
    """Seconds for one message: latency + nbytes / effective_bandwidth; 0 for 0 bytes.

    A zero-byte message is no message, so it costs no latency either: a plan whose stage
    sends nothing should not pay for the link.
    """
    if nbytes < 0:
        raise ValueError(f"bytes must be >= 0, got {nbytes}")
    if nbytes == 0:
        return 0.0
    bandwidth = effective_bandwidth(
        link,
        nbytes,
        flows_on_link=flows_on_link,
        flows_on_nic=flows_on_nic,
        nic_bandwidth=nic_bandwidth,
        curve=curve,
    )
    return link.latency + nbytes / bandwidth


# ---------------------------------------------------------------------------------------------
# Point-to-point and ring collectives


Hops = LinkClass | tuple[LinkClass, ...]
"""The links of a ring: one class for a uniform ring, or the distinct classes its hops cross
(the slowest one bounds every step, so repeats and order do not matter)."""


def send_time(
    nbytes: float,
    link: LinkClass,
    *,
    flows_on_link: int = 1,
    flows_on_nic: int = 1,
    nic_bandwidth: float,
    curve: MessageSizeCurve = FLAT,
) -> float:
    """Seconds to send `nbytes` point to point (pipeline activations or their gradients)."""
    return _ring_steps(nbytes, 1, 1, link, flows_on_link, flows_on_nic, nic_bandwidth, curve)


def ring_all_reduce_time(
    nbytes: float,
    n: int,
    hops: Hops,
    *,
    flows_on_link: int = 1,
    flows_on_nic: int = 1,
    nic_bandwidth: float,
    curve: MessageSizeCurve = FLAT,
) -> float:
    """Seconds to all-reduce `nbytes` (each rank's full buffer) over a ring of `n` ranks.

    2(n - 1) steps (reduce-scatter then all-gather), each one message of nbytes / n on every
    hop at once, so each step takes as long as its slowest hop. n = 1 costs 0.
    """
    return _ring_steps(
        nbytes, n, 2 * (n - 1), hops, flows_on_link, flows_on_nic, nic_bandwidth, curve
    )


def all_gather_time(
    nbytes: float,
    n: int,
    hops: Hops,
    *,
    flows_on_link: int = 1,
    flows_on_nic: int = 1,
    nic_bandwidth: float,
    curve: MessageSizeCurve = FLAT,
) -> float:
    """Seconds to all-gather a buffer of `nbytes` in all (nbytes / n from each rank) over a
    ring of `n`: n - 1 steps of nbytes / n. n = 1 costs 0."""
    return _ring_steps(nbytes, n, n - 1, hops, flows_on_link, flows_on_nic, nic_bandwidth, curve)


def reduce_scatter_time(
    nbytes: float,
    n: int,
    hops: Hops,
    *,
    flows_on_link: int = 1,
    flows_on_nic: int = 1,
    nic_bandwidth: float,
    curve: MessageSizeCurve = FLAT,
) -> float:
    """Seconds to reduce-scatter `nbytes` (each rank's full input; each keeps nbytes / n) over
    a ring of `n`: n - 1 steps of nbytes / n. n = 1 costs 0."""
    return _ring_steps(nbytes, n, n - 1, hops, flows_on_link, flows_on_nic, nic_bandwidth, curve)


@lru_cache(maxsize=_CACHE_SIZE)
def _ring_steps(
    nbytes: float,
    n: int,
    steps: int,
    hops: Hops,
    flows_on_link: int,
    flows_on_nic: int,
    nic_bandwidth: float,
    curve: MessageSizeCurve,
) -> float:
    """`steps` rounds of one nbytes / n message on every hop, each round as slow as the
    slowest hop. Memoised: the solver asks the same (bytes, group shape, link) many times."""
    if n < 1:
        raise ValueError(f"a collective needs n >= 1 ranks, got {n}")
    if steps == 0:
        return 0.0
    chunk = nbytes / n
    links = (hops,) if isinstance(hops, LinkClass) else hops
    if not links:
        raise ValueError("a ring needs at least one link class")
    step = max(
        transfer_time(
            chunk,
            link,
            flows_on_link=flows_on_link,
            flows_on_nic=flows_on_nic,
            nic_bandwidth=nic_bandwidth,
            curve=curve,
        )
        for link in links
    )
    return steps * step


# ---------------------------------------------------------------------------------------------
# Inside one node


def intra_node_link(device: DeviceType, *, latency: float = INTRA_NODE_LATENCY) -> LinkClass:
    """The link between two devices of one node: half the catalog's intra-node figure.

    The catalog stores the datasheet's bidirectional total per device (A100 NVLink: 600 GB/s);
    a ring sends one way on each hop while receiving on the other, so one direction, 300 GB/s,
    is what a ring step can use. Sailor measured a peak of 243-249 GB/s for A100 2-4 GPU
    all-reduce, 20% under that.
    """
    return LinkClass(bandwidth=device.intra_node_bandwidth / 2.0, latency=latency)


def tp_all_reduce_time(
    nbytes: float,
    tp: int,
    device: DeviceType,
    *,
    latency: float = INTRA_NODE_LATENCY,
    curve: MessageSizeCurve = FLAT,
) -> float:
    """Seconds for one tensor-parallel all-reduce of `nbytes` over `tp` devices of one node.

    Tensor parallelism never spans nodes in hetc, so no NIC is involved.
    """
    return ring_all_reduce_time(
        nbytes,
        tp,
        intra_node_link(device, latency=latency),
        nic_bandwidth=math.inf,
        curve=curve,
    )


# ---------------------------------------------------------------------------------------------
# Price


def egress_cost(nbytes: float, a: Zone, b: Zone, network: Network) -> float:
    """USD to move `nbytes` from zone `a` to zone `b`: free within a zone, the inter-zone price
    within a region, the inter-region price otherwise.

    Link overrides change speed, not price: clouds bill by where bytes go, not by how.
    """
    if a.name == b.name:
        return 0.0
    per_byte = network.egress_inter_zone if a.region == b.region else network.egress_inter_region
    return nbytes * per_byte
