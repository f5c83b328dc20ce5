"""Which nodes a torchrun measurement of the links between nodes pairs, and where each pair's
fit is filed. Pure Python: the torch side is `hetc.profiler.cluster`.

Every process of `hetc profile measure` under torchrun publishes what it is (`Rank`: its
node, local rank, host, device, zone, the node's device count, its options, and any problem
it found with them) before any process group exists, so that a node that refuses its request
makes every node refuse at once, with the same lines, rather than leave the others waiting in
a collective. `cluster_of` checks the table and says what to measure:

- a node is torchrun's node (`GROUP_RANK`), holding local ranks 0..n-1; every node runs the
  same n, at most its device count (n devices of a node sending at once), and the same
  message sizes, warm-up and repeats (else the collectives would not match);
- every node names its zone (`--zone`, `$HETC_ZONE`, or the spec's only zone) or none does
  (then all are taken to be in one zone); nodes of several devices must name theirs, since
  a link between two devices is filed between named zones;
- each device's profile is written by its first node (the lowest `GROUP_RANK` of that
  device), into that node's `-o`; two devices' writers must not name one file.

`rounds` pairs every two nodes once, in rounds where a node is in at most one pair, so that
a node's n flows are all that leaves it while it is timed (what a fit for n devices per node
means), and the pairs of one round, which share no node, run at once. In a pair, local rank
i of one node ping-pongs with local rank i of the other for i < k, for each flow count k.

`file_pairs` turns the pairs' fits into one device's profile facts: a pair of two nodes of
the device gives its class fit (`inter_node`, `inter_zone`, `inter_region` `.p2p[k]` by the
two zones and their regions), and across zones a `network.links` entry between the two named
zones; a pair of the device with another device gives only a link, with `peer` the other
device (a class fit is of the device at both ends). Where several pairs measure one class or
one link, the slowest peak is kept, as the importer of Sailor's measurements does, and the
profile's `meta` says, per fit and per link (`inter_zone.p2p[2]`, `links[a -> b, A100, 2 per
node]`), which pair it was of how many, so that a note stays with its fit when a later run
replaces some fits and keeps others.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from hetc.costmodel.profile import BandwidthFit, MeasuredLink, Network
from hetc.costmodel.sailor_network import SCOPE_WORDS
from hetc.units import plural

__all__ = [
    "Cluster",
    "ClusterRefused",
    "Filed",
    "Node",
    "Rank",
    "cluster_of",
    "file_pairs",
    "link_points",
    "pair_ranks",
    "pair_seconds",
    "rounds",
    "scope_of",
]

EXIT_INVALID, EXIT_USAGE = 1, 2


@dataclass(frozen=True, kw_only=True, slots=True)
class Rank:
    """What one process says of itself before the measurement starts."""

    rank: int
    node: int
    """Its node's key: torchrun's `GROUP_RANK`."""
    local_rank: int
    local_world: int
    host: str
    device: str | None = None
    """The spec's device it was asked to measure (None: the request was refused)."""
    kind: str | None = None
    """The device's kind, "gpu" or "cpu"."""
    zone: str | None = None
    """The spec's zone its node is in (None: not named)."""
    devices: int = 0
    """Devices on its node (the pool's `gpus_per_node`)."""
    flows: tuple[int, ...] = ()
    """Flow counts its node asks to measure."""
    sizes: tuple[int, ...] = ()
    warmup: int = 0
    repeats: int = 0
    output: str = ""
    """Its `-o`, resolved."""
    problem: tuple[str, int, str] | None = None
    """(message, exit code, what to do) where its own request was refused."""
    output_problem: tuple[str, int, str] | None = None
    """The same for its `-o` (local rank 0 only): counts where its node writes a profile."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Rank:
        raw = json.loads(text)
        for key in ("flows", "sizes"):
            raw[key] = tuple(raw[key])
        for key in ("problem", "output_problem"):
            raw[key] = None if raw[key] is None else tuple(raw[key])
        return cls(**raw)


@dataclass(frozen=True, kw_only=True, slots=True)
class Node:
    """One node of the measurement."""

    index: int
    """Its position among the nodes, by torchrun's node rank."""
    key: int
    host: str
    device: str
    zone: str | None
    region: str | None
    ranks: tuple[int, ...]
    """Global ranks of its processes, by local rank."""
    output: str

    def label(self) -> str:
        """How messages and `meta` name it: `node 1 (host, zone-b)`."""
        where = self.host if self.zone is None else f"{self.host}, {self.zone}"
        return f"node {self.key} ({where})"


@dataclass(frozen=True, kw_only=True, slots=True)
class Cluster:
    """The checked table: the nodes, what every pair measures, and who writes."""

    nodes: tuple[Node, ...]
    flows: tuple[int, ...]
    sizes: tuple[int, ...]
    warmup: int
    repeats: int
    kind: str
    writers: dict[str, int]
    """Device -> the index of the node that writes its profile."""

    def writes(self, rank: int) -> str | None:
        """The device whose profile `rank` writes, or None."""
        for device, index in self.writers.items():
            if self.nodes[index].ranks[0] == rank:
                return device
        return None


class ClusterRefused(Exception):
    """The nodes cannot measure together: one line per problem, the exit code, what to do."""

    def __init__(self, lines: Sequence[str], code: int, to_fix: str = "") -> None:
        super().__init__("\n".join(lines))
        self.lines = tuple(lines)
        self.code = code
        self.to_fix = to_fix


def cluster_of(ranks: Sequence[Rank], regions: Mapping[str, str]) -> Cluster:
    """The cluster the processes form (see the module docstring), or `ClusterRefused`.
    `regions`: the spec's zone -> region."""
    ranks = sorted(ranks, key=lambda r: r.rank)
    _own_problems(ranks)
    by_node: dict[int, list[Rank]] = {}
    for r in ranks:
        by_node.setdefault(r.node, []).append(r)
    nodes = []
    for index, key in enumerate(sorted(by_node)):
        members = sorted(by_node[key], key=lambda r: r.local_rank)
        first = members[0]
        _check_node(key, members)
        assert first.device is not None  # a rank without a device has a problem
        nodes.append(
            Node(
                index=index,
                key=key,
                host=first.host,
                device=first.device,
                zone=first.zone,
                region=None if first.zone is None else regions.get(first.zone, first.zone),
                ranks=tuple(r.rank for r in members),
                output=first.output,
            )
        )
    _check_alike(ranks, nodes)
    writers: dict[str, int] = {}
    for node in nodes:
        writers.setdefault(node.device, node.index)
    _check_writers(nodes, writers, {r.rank: r for r in ranks})
    first = ranks[0]
    flows = sorted({k for r in ranks for k in r.flows if k <= r.local_world})
    return Cluster(
        nodes=tuple(nodes),
        flows=tuple(flows) or (first.local_world,),
        sizes=first.sizes,
        warmup=first.warmup,
        repeats=first.repeats,
        kind=first.kind or "cpu",
        writers=writers,
    )


def _own_problems(ranks: Sequence[Rank]) -> None:
    """Every node's refusal of its own request, once per node, the first one's exit code."""
    seen: dict[tuple[int, str], tuple[str, int, str]] = {}
    for r in ranks:
        if r.problem is not None:
            seen.setdefault((r.node, r.problem[0]), r.problem)
    if seen:
        lines = [f"node {node} ({_host(ranks, node)}): {p[0]}" for (node, _), p in seen.items()]
        first = next(iter(seen.values()))
        raise ClusterRefused(lines, first[1], first[2])


def _host(ranks: Sequence[Rank], node: int) -> str:
    return next(r.host for r in ranks if r.node == node)


def _check_node(key: int, members: Sequence[Rank]) -> None:
    first = members[0]
    locals_ = [r.local_rank for r in members]
    if locals_ != list(range(first.local_world)) or len(members) != first.local_world:
        raise ClusterRefused(
            [
                f"node {key} ({first.host}) has local ranks {locals_}, not"
                f" 0..{first.local_world - 1}: each node must be one torchrun with"
                " --nproc-per-node processes"
            ],
            EXIT_USAGE,
        )
    if first.local_world > first.devices:
        raise ClusterRefused(
            [
                f"node {key} ({first.host}) runs {first.local_world} processes, and a"
                f" {first.device} node has {plural(first.devices, 'device')}: n processes stand for"
                " n devices of a node sending at once"
            ],
            EXIT_USAGE,
            f"start torchrun with --nproc-per-node {first.devices} or fewer",
        )
    devices = {(r.device, r.zone) for r in members}
    if len(devices) > 1:
        raise ClusterRefused(
            [f"node {key} ({first.host}): its processes name different devices or zones"],
            EXIT_USAGE,
            "start every process of a node with the same --device and --zone",
        )


def _check_alike(ranks: Sequence[Rank], nodes: Sequence[Node]) -> None:
    """What every node must agree on, or the collectives would not match."""
    first = ranks[0]
    local = {r.local_world for r in ranks}
    if len(local) > 1:
        counts = ", ".join(f"{n.label()} {len(n.ranks)}" for n in nodes)
        raise ClusterRefused(
            [f"the nodes run different numbers of processes ({counts})"],
            EXIT_USAGE,
            "start every node's torchrun with the same --nproc-per-node",
        )
    for what in ("sizes", "warmup", "repeats"):
        odd = next((r for r in ranks if getattr(r, what) != getattr(first, what)), None)
        if odd is not None:
            raise ClusterRefused(
                [f"node {odd.node} ({odd.host}) runs another --{what} than node {first.node}"],
                EXIT_USAGE,
                f"give every node the same --{what}",
            )
    kinds = {r.kind for r in ranks}
    if len(kinds) > 1:
        raise ClusterRefused(
            ["nodes of a CPU device and of a GPU cannot time their links together"],
            EXIT_USAGE,
            "measure the GPU nodes and the CPU nodes in separate runs",
        )
    named = [n for n in nodes if n.zone is not None]
    if named and len(named) < len(nodes):
        unnamed = ", ".join(n.label() for n in nodes if n.zone is None)
        raise ClusterRefused(
            [f"{unnamed} name no zone, and the others do: name every node's zone or none"],
            EXIT_USAGE,
            "pass --zone (or set $HETC_ZONE) on every node",
        )
    devices = sorted({n.device for n in nodes})
    if not named and len(devices) > 1:
        raise ClusterRefused(
            [
                f"nodes of {len(devices)} devices ({', '.join(devices)}) name no zone: a link"
                " between two devices is filed between named zones"
            ],
            EXIT_USAGE,
            "pass --zone (or set $HETC_ZONE) on every node",
        )


def _check_writers(
    nodes: Sequence[Node], writers: Mapping[str, int], ranks: Mapping[int, Rank]
) -> None:
    by_output: dict[str, Node] = {}
    for device, index in writers.items():
        node = nodes[index]
        other = by_output.setdefault(node.output, node)
        if other is not node:
            raise ClusterRefused(
                [
                    f"{other.label()} writes the profile of {other.device} and {node.label()}"
                    f" that of {device}, both into {node.output}"
                ],
                EXIT_USAGE,
                "give each device's nodes their own -o",
            )
    for index in writers.values():
        node = nodes[index]
        problem = ranks[node.ranks[0]].output_problem
        if problem is not None:
            raise ClusterRefused([f"{node.label()}: {problem[0]}"], problem[1], problem[2])


def rounds(count: int) -> list[list[tuple[int, int]]]:
    """Every pair of `count` nodes once, as rounds in which a node is in at most one pair
    (the circle method: count - 1 rounds for an even count, count for an odd one)."""
    if count < 2:
        return []
    seats = list(range(count)) + ([-1] if count % 2 else [])
    half = len(seats) // 2
    found = []
    for _ in range(len(seats) - 1):
        pairs = [
            (min(a, b), max(a, b))
            for a, b in zip(seats[:half], reversed(seats[half:]), strict=True)
            if a >= 0 and b >= 0
        ]
        found.append(sorted(pairs))
        seats = [seats[0], seats[-1], *seats[1:-1]]
    return found


def pair_ranks(a: Node, b: Node, flows: int) -> list[tuple[int, int]]:
    """The (rank, peer) ping-pongs of `flows` flows between nodes `a` and `b`: local rank i
    of one with local rank i of the other, i < flows."""
    return [(a.ranks[i], b.ranks[i]) for i in range(flows)]


def pair_seconds(durations: Sequence[Sequence[float]], pairs: Sequence[tuple[int, int]]) -> float:
    """One-way seconds of a pair's flows: per repeat the slowest of their ranks' round
    trips (the flows are done when the last is), the median over repeats, halved.
    `durations[rank]` holds every repeat of that rank."""
    ranks = [r for pair in pairs for r in pair]
    repeats = len(durations[ranks[0]])
    slowest = [max(durations[r][i] for r in ranks) for i in range(repeats)]
    return statistics.median(slowest) / 2


def link_points(
    moved: Sequence[float], seconds: Sequence[float], flows: int
) -> list[tuple[float, float]]:
    """(message bytes, bytes/s) of `flows` flows together, each moving `moved[i]` bytes one
    way in `seconds[i]` (the profile's convention for links between nodes: the fit for k
    devices per node is what the k flows reach together, each getting its share)."""
    return [(float(b), flows * b / t) for b, t in zip(moved, seconds, strict=True)]


def scope_of(a: Node, b: Node) -> str:
    """The profile scope of a pair: one zone (or none named), two zones of one region, two
    regions."""
    if a.zone == b.zone:
        return "inter_node"
    return "inter_zone" if a.region == b.region else "inter_region"


@dataclass(kw_only=True, slots=True)
class Filed:
    """One device's facts from the pairs: class fits, named links, and `meta` notes."""

    network: Network = field(default_factory=dict)
    links: list[MeasuredLink] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)


def file_pairs(
    cluster: Cluster,
    device: str,
    fits: Mapping[tuple[int, int], Mapping[int, BandwidthFit]],
) -> Filed:
    """`device`'s profile facts from each pair's fits (pair of node indices -> flows ->
    fit): see the module docstring. Pairs are visited in order, so a tie keeps the first."""
    classes: dict[tuple[str, int], list[tuple[BandwidthFit, Node, Node]]] = {}
    named: dict[tuple[str, str, str, int], list[tuple[BandwidthFit, Node, Node]]] = {}
    for (i, j), by_flows in sorted(fits.items()):
        a, b = cluster.nodes[i], cluster.nodes[j]
        if device not in (a.device, b.device):
            continue
        if a.device == b.device:
            for k, fit in by_flows.items():
                classes.setdefault((scope_of(a, b), k), []).append((fit, a, b))
        near, far = (a, b) if a.device == device else (b, a)
        if a.zone is None or (a.device == b.device and a.zone == b.zone):
            continue
        assert near.zone is not None and far.zone is not None
        ends = sorted((near.zone, far.zone)) if a.device == b.device else [near.zone, far.zone]
        for k, fit in by_flows.items():
            named.setdefault((ends[0], ends[1], far.device, k), []).append((fit, near, far))
    filed = Filed()
    for (scope, k), found in sorted(classes.items()):
        fit, a, b = _slowest(found)
        filed.network.setdefault(scope, {}).setdefault("p2p", {})[k] = fit
        filed.notes[f"{scope}.p2p[{k}]"] = (
            f"p2p {SCOPE_WORDS[scope]}, {plural(k, 'device')} per node sending at once, measured"
            f" under torchrun: the slowest peak of {plural(len(found), 'node pair')},"
            f" {a.label()} <-> {b.label()}"
        )
    for (source, target, peer, k), found in sorted(named.items()):
        fit, a, b = _slowest(found)
        filed.links.append(
            MeasuredLink(
                source=source, target=target, peer=peer, collective="p2p", devices=k, fit=fit
            )
        )
        filed.notes[f"links[{source} -> {target}, {peer}, {k} per node]"] = (
            "measured under torchrun by a ping-pong, so it holds both ways: the slowest peak"
            f" of {plural(len(found), 'node pair')}, {a.label()} <-> {b.label()}"
        )
    return filed


def _slowest(
    found: Sequence[tuple[BandwidthFit, Node, Node]],
) -> tuple[BandwidthFit, Node, Node]:
    return min(found, key=lambda entry: entry[0].peak)
