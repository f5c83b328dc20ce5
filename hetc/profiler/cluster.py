"""The links between the nodes torchrun started, timed pair by pair (`hetc profile measure`
under torchrun on several nodes).

Every process publishes its `pairs.Rank` in torchrun's store before any process group
exists, and reads everyone's: a node that refused its request (a zone the spec lacks, a
device it has no pool of, more processes than devices) then makes every node refuse at once
with the same lines, where a process group would leave the others waiting in a collective
for an hour. `pairs.cluster_of` checks the table; then one process group (gloo on CPU, NCCL
between GPUs) times each round of `pairs.rounds`: for each flow count k and message size,
`warmup` ping-pongs, then `repeats` from a barrier, local rank i < k of each node of a pair
with local rank i of the other, all pairs of the round at once. Every rank gathers every
rank's round trips, so that each computes every pair's one-way time (`pairs.pair_seconds`)
and fit (`pairs.link_points`, `fit_bandwidth`); the writer of each device files them
(`pairs.file_pairs`). A pair's bytes are the cost model's: S / t per flow, the k flows'
together.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import PrefixStore, Store
from torch.distributed.rendezvous import rendezvous

from hetc.costmodel.profile import BandwidthFit, fit_bandwidth
from hetc.profiler.clock import Stopwatch
from hetc.profiler.collectives import FLOAT_BYTES, message_bytes
from hetc.profiler.pairs import (
    Cluster,
    ClusterRefused,
    Filed,
    Rank,
    cluster_of,
    file_pairs,
    link_points,
    pair_ranks,
    pair_seconds,
    rounds,
)
from hetc.profiler.steps import fit_text
from hetc.profiler.worker import GroupFailed
from hetc.schema import EnvironmentProblem
from hetc.units import plural

__all__ = ["between_nodes", "identity"]

Echo = Callable[..., None]
DEADLINE_S = 3600.0
"""The longest a process waits for the others (a node that never arrives has failed)."""
EXIT_ENVIRONMENT = 4
Seconds = dict[tuple[int, int], dict[int, list[float]]]
"""Pair of node indices -> flows -> one-way seconds per message size."""


def identity() -> tuple[int, int, int, int, int]:
    """(rank, world size, node key, local rank, local world size) from torchrun's
    environment; the node key is `GROUP_RANK`, else the rank over the local world size (a
    launcher that numbers each node's ranks in one block)."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    node = int(os.environ.get("GROUP_RANK", str(rank // max(local_world, 1))))
    return rank, world, node, local, local_world


def between_nodes(me: Rank, regions: Mapping[str, str], *, world: int, echo: Echo) -> Filed | int:
    """Join the others, time every pair of nodes, and return what this process files in its
    device's profile (it writes that profile) or its exit code (0: measured, another node
    writes; else refused or failed, every node alike)."""
    loud = me.local_rank == 0
    store = _store(me.rank, world)
    table = [Rank.from_json(t) for t in _exchange(store, "ranks", me.to_json(), me.rank, world)]
    try:
        cluster = cluster_of(table, regions)
    except ClusterRefused as refused:
        if loud:
            for line in refused.lines:
                echo(f"hetc: {line}", err=True)
            if refused.to_fix:
                echo(f"To fix: {refused.to_fix}", err=True)
        return refused.code
    cuda = cluster.kind == "gpu"
    if cuda:
        torch.cuda.set_device(me.local_rank)
    mine = next(n for n in cluster.nodes if me.rank in n.ranks)
    if loud:
        echo(
            f"hetc: {mine.label()} of {len(cluster.nodes)}: timing the links between every"
            f" two nodes, {','.join(map(str, cluster.flows))} flows per node, in"
            f" {plural(len(rounds(len(cluster.nodes))), 'round')} ...",
            err=True,
        )
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        store=PrefixStore("default_pg", store),
        rank=me.rank,
        world_size=world,
        timeout=timedelta(seconds=DEADLINE_S),
    )
    try:
        seconds = _sweep(cluster, me.rank, cuda)
        dist.barrier()
    except (RuntimeError, dist.DistError) as exc:
        raise GroupFailed(
            f"the links between nodes: {str(exc).splitlines()[0] if str(exc) else exc!r}"
        ) from None
    finally:
        dist.destroy_process_group()
    fits = _fits(cluster, seconds)
    if loud:
        for (i, j), by_flows in sorted(fits.items()):
            if mine.index in (i, j):
                a, b = cluster.nodes[i], cluster.nodes[j]
                for k, fit in sorted(by_flows.items()):
                    echo(
                        f"hetc: {a.label()} <-> {b.label()}, {plural(k, 'flow')}: {fit_text(fit)}",
                        err=True,
                    )
    device = cluster.writes(me.rank)
    if device is None:
        if loud:
            writer = cluster.nodes[cluster.writers[mine.device]]
            echo(
                f"hetc: links between nodes measured; {writer.label()} writes the profile of"
                f" {mine.device}",
                err=True,
            )
        return 0
    return file_pairs(cluster, device, fits)


def _store(rank: int, world: int) -> Store:
    """torchrun's store (its agent's, or rank 0's under a plain env:// launch)."""
    try:
        timeout = timedelta(seconds=DEADLINE_S)
        store: Store = next(rendezvous("env://", rank=rank, world_size=world, timeout=timeout))[0]
    except (ValueError, RuntimeError) as exc:
        raise EnvironmentProblem(
            f"WORLD_SIZE is {world}, and the processes cannot meet: {str(exc).splitlines()[0]}",
            "start it with torchrun, one per node (docs/profile.md, 'Between nodes'),"
            " or unset WORLD_SIZE to profile this node alone",
        ) from None
    return store


def _exchange(store: Store, name: str, value: str, rank: int, world: int) -> list[str]:
    """Every rank's `value`, in rank order. Rank 0 leaves last: under a plain env:// launch
    it holds the store the others read."""
    prefix = f"hetc-profile/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{name}"
    store.set(f"{prefix}/{rank}", value)
    values = [store.get(f"{prefix}/{r}").decode("utf-8") for r in range(world)]
    store.add(f"{prefix}/read", 1)
    deadline = time.monotonic() + DEADLINE_S
    while rank == 0 and store.add(f"{prefix}/read", 0) < world:
        if time.monotonic() > deadline:
            raise GroupFailed("the other nodes did not read the table of nodes")
        time.sleep(0.02)
    return values


def _sweep(cluster: Cluster, rank: int, cuda: bool) -> Seconds:
    """Every pair's one-way seconds per flow count and message size (module docstring)."""
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    world = sum(len(n.ranks) for n in cluster.nodes)
    seconds: Seconds = {}
    for pairs in rounds(len(cluster.nodes)):
        for flows in cluster.flows:
            flowing = {
                (i, j): pair_ranks(cluster.nodes[i], cluster.nodes[j], flows) for i, j in pairs
            }
            peer = _peer(flowing.values(), rank)
            for size in cluster.sizes:
                elements = message_bytes("p2p", size, 2) // FLOAT_BYTES
                run = _ping_pong(torch.zeros(elements, device=device), peer)
                for _ in range(cluster.warmup):
                    run()
                watch = Stopwatch(cuda)
                for _ in range(cluster.repeats):
                    dist.barrier()
                    with watch.section(size):
                        run()
                mine = torch.tensor(watch.durations()[size], dtype=torch.float64, device=device)
                every = [torch.empty_like(mine) for _ in range(world)]
                dist.all_gather(every, mine)
                durations = [t.tolist() for t in every]
                for pair, ranks in flowing.items():
                    by_flows = seconds.setdefault(pair, {})
                    by_flows.setdefault(flows, []).append(pair_seconds(durations, ranks))
    return seconds


def _peer(flowing: Iterable[Sequence[tuple[int, int]]], rank: int) -> tuple[int, bool] | None:
    """(the rank this one ping-pongs with, whether it sends first), or None when idle."""
    for ranks in flowing:
        for first, second in ranks:
            if rank == first:
                return second, True
            if rank == second:
                return first, False
    return None


def _ping_pong(buffer: torch.Tensor, peer: tuple[int, bool] | None) -> Callable[[], None]:
    """One round trip with `peer` (nothing for an idle rank): the first sends, then waits."""

    def run() -> None:
        if peer is None:
            return
        other, first = peer
        if first:
            dist.send(buffer, other)
            dist.recv(buffer, other)
        else:
            dist.recv(buffer, other)
            dist.send(buffer, other)

    return run


def _fits(cluster: Cluster, seconds: Seconds) -> dict[tuple[int, int], dict[int, BandwidthFit]]:
    moved = [message_bytes("p2p", size, 2) for size in cluster.sizes]
    return {
        pair: {k: fit_bandwidth(link_points(moved, times, k)) for k, times in by_flows.items()}
        for pair, by_flows in seconds.items()
    }
