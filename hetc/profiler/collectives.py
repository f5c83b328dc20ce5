"""Bandwidth of the collectives between one node's devices, in the cost model's terms.

The runtime's data-parallel and TP reductions are all-reduces, its boundary reassembly an
all-gather, its pipeline traffic sends and receives; each is timed over a sweep of message
sizes on the node's own process group (gloo over loopback between CPU processes, NCCL between
GPUs), converted to the bandwidth the cost model's ring formulas divide by, and fitted to its
log-quadratic bandwidth-vs-size curve (`hetc.costmodel.profile.fit_bandwidth`).

`loopback_sweep` times the link between two "nodes" of a CPU device run on one host, as a
local CPU plan runs them: each node's processes talk to the other's over loopback TCP (gloo),
`n` pairs at once for `n` flows per node. That is the link such a plan's traffic between
nodes takes, and only such a plan's: CPU nodes on two machines talk over their NIC, which a
profile measures by `hetc profile measure` under torchrun on two nodes.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from hetc.costmodel.profile import BandwidthFit, fit_bandwidth
from hetc.profiler.clock import Stopwatch

COLLECTIVES = ("all_reduce", "all_gather", "p2p")
DEFAULT_SIZES = tuple(4096 * 4**k for k in range(8))
"""4 KiB to 64 MiB by powers of 4: eight sizes, from latency-bound to bandwidth-bound."""
FLOAT_BYTES = 4


def bandwidth(collective: str, size: float, devices: int, seconds: float) -> float:
    """Bytes/s that the cost model divides `size` by to predict `seconds` (the profile
    format's definitions): a ring all-reduce moves 2 (n - 1) / n of the message through each
    link, an all-gather (of `size` bytes in all) (n - 1) / n, a send the whole message."""
    if collective == "all_reduce":
        return 2 * (devices - 1) / devices * size / seconds
    if collective == "all_gather":
        return (devices - 1) / devices * size / seconds
    if collective == "p2p":
        return size / seconds
    raise ValueError(f"unknown collective {collective!r}")


def message_bytes(collective: str, size: int, devices: int) -> int:
    """The bytes actually moved for a requested `size`: whole float32 elements, split evenly
    over the ranks for an all-gather."""
    share = FLOAT_BYTES * devices if collective == "all_gather" else FLOAT_BYTES
    return max(1, size // share) * share


def _operation(
    collective: str, size: int, rank: int, devices: int, device: torch.device
) -> Callable[[], None]:
    """One timed operation. p2p is a ping-pong between ranks 0 and 1 (timed as a round trip,
    halved by the caller); the other ranks wait it out."""
    elements = message_bytes(collective, size, devices) // FLOAT_BYTES
    if collective == "all_gather":
        mine = torch.zeros(elements // devices, device=device)
        outputs = [torch.empty_like(mine) for _ in range(devices)]

        def all_gather() -> None:
            dist.all_gather(outputs, mine)

        return all_gather
    buffer = torch.zeros(elements, device=device)  # zeros: repeated sums stay finite
    if collective == "all_reduce":

        def all_reduce() -> None:
            dist.all_reduce(buffer)

        return all_reduce

    def ping_pong() -> None:
        if rank == 0:
            dist.send(buffer, 1)
            dist.recv(buffer, 1)
        elif rank == 1:
            dist.recv(buffer, 0)
            dist.send(buffer, 0)

    return ping_pong


def sweep(
    sizes: Sequence[int], *, warmup: int, repeats: int, rank: int, devices: int, cuda: bool
) -> dict[str, list[float]]:
    """Median seconds of each collective at each size, every rank of the default group
    calling it alike. Each repeat starts from a barrier and counts the slowest rank's time
    (the operation is done when every rank is done)."""
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    medians: dict[str, list[float]] = {}
    for collective in COLLECTIVES:
        medians[collective] = []
        for size in sizes:
            run = _operation(collective, size, rank, devices, device)
            for _ in range(warmup):
                run()
            watch = Stopwatch(cuda)
            for _ in range(repeats):
                dist.barrier()
                with watch.section(size):
                    run()
            mine = torch.tensor(watch.durations()[size], dtype=torch.float64, device=device)
            dist.all_reduce(mine, op=dist.ReduceOp.MAX)
            seconds = statistics.median(mine.tolist())
            medians[collective].append(seconds / 2 if collective == "p2p" else seconds)
    return medians


def fits(
    medians: dict[str, list[float]], sizes: Sequence[int], devices: int
) -> dict[str, dict[int, BandwidthFit]]:
    """collective -> group size -> fit of the collectives inside a node: a point to point
    transfer involves two devices whatever the node's size, so p2p is filed under 2."""
    found: dict[str, dict[int, BandwidthFit]] = {}
    for collective, seconds in medians.items():
        points = []
        for size, t in zip(sizes, seconds, strict=True):
            moved = message_bytes(collective, size, devices)
            points.append((float(moved), bandwidth(collective, moved, devices, t)))
        group = 2 if collective == "p2p" else devices
        found[collective] = {group: fit_bandwidth(points)}
    return found


def loopback_sweep(
    sizes: Sequence[int], flows: Sequence[int], *, warmup: int, repeats: int, rank: int, node: int
) -> dict[str, list[float]]:
    """Median seconds of a one-way transfer at each size, per number of flows (a JSON key),
    between two nodes of `node` ranks each (ranks 0..node-1 and node..2 node-1): for `n`
    flows, ranks i < n ping-pong with rank node + i at once (half the round trip, the slowest
    pair's); the rest wait. Every rank of the default group calls it alike."""
    device = torch.device("cpu")
    medians: dict[str, list[float]] = {}
    for n in flows:
        medians[str(n)] = []
        for size in sizes:
            buffer = torch.zeros(message_bytes("p2p", size, 2) // FLOAT_BYTES, device=device)
            run = _pair(buffer, rank, node, n)
            for _ in range(warmup):
                run()
            watch = Stopwatch(False)
            for _ in range(repeats):
                dist.barrier()
                with watch.section(size):
                    run()
            mine = torch.tensor(watch.durations()[size], dtype=torch.float64)
            dist.all_reduce(mine, op=dist.ReduceOp.MAX)
            medians[str(n)].append(statistics.median(mine.tolist()) / 2)
    return medians


def _pair(buffer: torch.Tensor, rank: int, node: int, flows: int) -> Callable[[], None]:
    """One round trip between rank i < flows and its peer node + i on the other node."""

    def ping_pong() -> None:
        if rank < flows:
            dist.send(buffer, node + rank)
            dist.recv(buffer, node + rank)
        elif node <= rank < node + flows:
            dist.recv(buffer, rank - node)
            dist.send(buffer, rank - node)

    return ping_pong


def loopback_fits(medians: dict[str, list[float]], sizes: Sequence[int]) -> dict[int, BandwidthFit]:
    """flows -> the fit of the bandwidth the `n` flows moved together (n S / t), as the
    profile files links between nodes (`network.inter_node.p2p[n]`: the peak is the flows'
    together, each gets its share)."""
    found: dict[int, BandwidthFit] = {}
    for key, seconds in medians.items():
        n = int(key)
        points = []
        for size, t in zip(sizes, seconds, strict=True):
            moved = message_bytes("p2p", size, 2)
            points.append((float(moved), n * bandwidth("p2p", moved, 2, t)))
        found[n] = fit_bandwidth(points)
    return found
