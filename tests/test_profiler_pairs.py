"""The pure side of measuring links between nodes under torchrun (`hetc.profiler.pairs`): the
rounds of pairs against an enumeration of every pair, the checks of the table the processes
exchange, the one-way time and bandwidth of a pair's flows against hand-computed numbers, and
where each pair's fit is filed in each device's profile, against a cluster laid out here.

Mutation checks done (each made a test here fail, then restored): `_slowest` keeping the
fastest peak; `pair_seconds` taking the fastest rank of a repeat; `rounds` without rotating
the seats; `file_pairs` filing a pair of two devices as a class fit, or a link of one device
between zones in node order rather than by zone name."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from hetc.costmodel.profile import BandwidthFit
from hetc.profiler.pairs import (
    Cluster,
    ClusterRefused,
    Node,
    Rank,
    cluster_of,
    file_pairs,
    link_points,
    pair_ranks,
    pair_seconds,
    rounds,
    scope_of,
)

REGIONS = {"a": "r1", "b": "r1", "c": "r2"}


def fit(peak: float) -> BandwidthFit:
    return BandwidthFit(coefficients=(0.0, 0.0, peak / 1e9), peak=peak)


def ranks_of(
    nodes: list[tuple[str, str | None]], per_node: int = 2, **changes: object
) -> list[Rank]:
    """The table a healthy cluster publishes: (device, zone) per node, `per_node` processes
    each, ranks numbered node by node; `changes` apply to every rank."""
    table = []
    for key, (device, zone) in enumerate(nodes):
        for local in range(per_node):
            rank = Rank(
                rank=key * per_node + local,
                node=key,
                local_rank=local,
                local_world=per_node,
                host=f"h{key}",
                device=device,
                kind="gpu",
                zone=zone,
                devices=4,
                flows=(1, per_node),
                sizes=(4096, 65536, 1048576),
                warmup=1,
                repeats=3,
                output=f"/out/{device}.json",
            )
            table.append(replace(rank, **changes))  # type: ignore[arg-type]
    return table


@pytest.mark.parametrize("count", range(1, 10))
def test_rounds_pair_every_two_nodes_once_and_each_node_once_a_round(count: int) -> None:
    """Every unordered pair exactly once; no node twice in a round; n - 1 rounds for an even
    count, n for an odd one (the fewest possible)."""
    found = rounds(count)
    pairs = [pair for round_ in found for pair in round_]
    assert sorted(pairs) == list(itertools.combinations(range(count), 2))
    for round_ in found:
        members = [node for pair in round_ for node in pair]
        assert len(members) == len(set(members))
    assert len(found) == (0 if count < 2 else count - 1 if count % 2 == 0 else count)


def test_a_healthy_table_gives_nodes_flows_and_one_writer_per_device() -> None:
    """Nodes by node key with their ranks by local rank, regions from the spec, the union of
    the flows asked for, and the first node of each device as its writer."""
    table = ranks_of([("A100", "a"), ("V100", "c"), ("A100", "b")])
    table[0] = replace(table[0], flows=(1,))
    cluster = cluster_of(list(reversed(table)), REGIONS)
    assert [(n.key, n.device, n.zone, n.region, n.ranks) for n in cluster.nodes] == [
        (0, "A100", "a", "r1", (0, 1)),
        (1, "V100", "c", "r2", (2, 3)),
        (2, "A100", "b", "r1", (4, 5)),
    ]
    assert cluster.flows == (1, 2) and cluster.writers == {"A100": 0, "V100": 1}
    assert [cluster.writes(r) for r in range(6)] == ["A100", None, "V100", None, None, None]


@pytest.mark.parametrize(
    ("change", "code", "message"),
    [
        (
            lambda t: (
                [replace(r, problem=("--zone 'x' is not a zone", 1, "")) for r in t[:2]] + t[2:]
            ),
            1,
            r"^node 0 \(h0\): --zone 'x' is not a zone$",
        ),
        (lambda t: t[:3], 2, r"node 1 \(h1\) has local ranks \[0\], not 0..1"),
        (
            lambda t: [replace(r, devices=1) for r in t],
            2,
            "node 0 \\(h0\\) runs 2 processes, and a A100 node has 1 device",
        ),
        (
            lambda t: [*t[:2], *(replace(r, sizes=(1, 2, 3)) for r in t[2:])],
            2,
            r"node 1 \(h1\) runs another --sizes than node 0",
        ),
        (
            lambda t: [*t[:2], *(replace(r, kind="cpu") for r in t[2:])],
            2,
            "nodes of a CPU device and of a GPU",
        ),
        (
            lambda t: [*t[:2], *(replace(r, zone=None) for r in t[2:])],
            2,
            r"node 1 \(h1\) name no zone, and the others do",
        ),
        (
            lambda t: [replace(r, zone=None, device=f"D{r.node}") for r in t],
            2,
            "nodes of 2 devices \\(D0, D1\\) name no zone",
        ),
        (
            lambda t: [replace(r, device=f"D{r.node}", output="/out/p.json") for r in t],
            2,
            r"node 0 \(h0, a\) writes the profile of D0 and node 1 \(h1, b\) that of D1, both",
        ),
        (
            lambda t: [
                replace(t[0], output_problem=("p.json holds another profile", 1, "")),
                *t[1:],
            ],
            1,
            r"^node 0 \(h0, a\): p.json holds another profile$",
        ),
    ],
)
def test_a_table_the_nodes_cannot_measure_together_is_refused_alike(
    change: object, code: int, message: str
) -> None:
    """A node's own refusal (once per node), ranks that are not one torchrun per node, more
    processes than devices, options or kinds that differ, zones partly named, two devices
    without zones, two writers of one file, and a writer's unusable -o: one line and code."""
    table = ranks_of([("A100", "a"), ("A100", "b")])
    with pytest.raises(ClusterRefused, match=message) as refused:
        cluster_of(change(table), REGIONS)  # type: ignore[operator]
    assert refused.value.code == code and len(refused.value.lines) == 1


def test_a_non_writer_output_problem_is_not_a_refusal() -> None:
    """Only the node that writes its device's profile needs a usable -o."""
    table = ranks_of([("A100", "a"), ("A100", "b")])
    table[2] = replace(table[2], output_problem=("p.json is not valid JSON", 1, ""))
    assert cluster_of(table, REGIONS).writers == {"A100": 0}


def test_a_rank_survives_its_json() -> None:
    """What a process publishes is what the others read."""
    rank = replace(ranks_of([("A100", "a")])[1], problem=("no", 4, "fix"))
    assert Rank.from_json(rank.to_json()) == rank


def test_a_pair_takes_the_slowest_flow_of_each_repeat_then_the_median_halved() -> None:
    """Repeat by repeat the slowest of the pair's ranks (4, 6, 3 s), their median 4 s, one
    way 2 s; an idle rank's durations do not count."""
    durations = [[1.0, 6.0, 3.0], [4.0, 1.0, 1.0], [100.0, 100.0, 100.0], [2.0, 2.0, 2.0]]
    assert pair_seconds(durations, [(0, 1), (3, 0)]) == 2.0
    a = Node(index=0, key=0, host="h", device="D", zone=None, region=None, ranks=(0, 1), output="")
    b = replace(a, index=1, key=1, ranks=(2, 3))
    assert pair_ranks(a, b, 1) == [(0, 2)] and pair_ranks(a, b, 2) == [(0, 2), (1, 3)]


def test_flows_together_move_flows_times_the_message_over_the_time() -> None:
    """k flows of S bytes in t seconds: k S / t."""
    assert link_points([1000.0, 4000.0], [0.5, 1.0], 2) == [(1000.0, 4000.0), (4000.0, 8000.0)]


def test_each_pair_is_filed_by_the_class_of_its_zones_and_devices() -> None:
    """Nodes: A100 in a (x2), A100 in b, V100 in c (another region). For A100: the a-a pair
    is `inter_node`, the slower of the two a-b pairs `inter_zone` and the a -> b link, each
    A100-V100 pair a link from the A100's zone with peer V100, nothing `inter_region` (no two
    A100s across regions). For V100: only links, from c."""
    table = ranks_of([("A100", "a"), ("A100", "a"), ("A100", "b"), ("V100", "c")])
    cluster = cluster_of(table, REGIONS)
    peaks = {(0, 1): 9e9, (0, 2): 5e9, (1, 2): 3e9, (0, 3): 1e9, (1, 3): 2e9, (2, 3): 4e9}
    fits = {pair: {2: fit(peak)} for pair, peak in peaks.items()}
    filed = file_pairs(cluster, "A100", fits)
    assert {
        s: {c: {k: f.peak for k, f in by.items()} for c, by in v.items()}
        for s, v in filed.network.items()
    } == {
        "inter_node": {"p2p": {2: 9e9}},
        "inter_zone": {"p2p": {2: 3e9}},
    }
    assert [(li.source, li.target, li.peer, li.devices, li.fit.peak) for li in filed.links] == [
        ("a", "b", "A100", 2, 3e9),
        ("a", "c", "V100", 2, 1e9),
        ("b", "c", "V100", 2, 4e9),
    ]
    assert filed.notes["inter_zone.p2p[2]"].endswith(
        "the slowest peak of 2 node pairs, node 1 (h1, a) <-> node 2 (h2, b)"
    )
    assert filed.notes["links[a -> c, V100, 2 per node]"].endswith(
        "the slowest peak of 2 node pairs, node 0 (h0, a) <-> node 3 (h3, c)"
    )
    assert sorted(filed.notes) == [
        "inter_node.p2p[2]",
        "inter_zone.p2p[2]",
        "links[a -> b, A100, 2 per node]",
        "links[a -> c, V100, 2 per node]",
        "links[b -> c, V100, 2 per node]",
    ]
    other = file_pairs(cluster, "V100", fits)
    assert other.network == {}
    assert [(li.source, li.target, li.peer, li.fit.peak) for li in other.links] == [
        ("c", "a", "A100", 1e9),
        ("c", "b", "A100", 4e9),
    ]


def test_without_named_zones_every_pair_is_between_nodes_of_one_zone() -> None:
    """No zone named (one device): every pair is `inter_node`, and no link is filed."""
    cluster = cluster_of(ranks_of([("A100", None)] * 3, per_node=1), REGIONS)
    assert scope_of(cluster.nodes[0], cluster.nodes[2]) == "inter_node"
    fits = {(0, 1): {1: fit(2e9)}, (0, 2): {1: fit(1e9)}, (1, 2): {1: fit(3e9)}}
    filed = file_pairs(cluster, "A100", fits)
    assert filed.network["inter_node"]["p2p"][1].peak == 1e9 and filed.links == []
    assert isinstance(cluster, Cluster)


def test_two_regions_file_inter_region() -> None:
    """Two nodes of one device in zones of two regions: `inter_region` and the link."""
    cluster = cluster_of(ranks_of([("A100", "c"), ("A100", "a")]), REGIONS)
    filed = file_pairs(cluster, "A100", {(0, 1): {2: fit(1e8)}})
    assert list(filed.network) == ["inter_region"]
    assert [(li.source, li.target) for li in filed.links] == [("a", "c")]
