"""Who is who at run time: processes, their process groups, and the files that tell each rank.

A plan names devices by `(node id, local device)`; the launcher starts one process per used
device and knows it only by `(HETC_NODE, LOCAL_RANK)`. This module fixes, once, the numbering
that everything else shares: the emitter writes it into `topology/cluster.json` and one rank file
per process, and the runtime reads it back and checks it (`hetc.runtime.startup`). torchrun's own
`RANK` is never trusted: elastic restarts renumber it, so the runtime maps plan ranks to torch
ranks by an all-gather of `(HETC_NODE, LOCAL_RANK, plan hash, hetc version)`.

Plan ranks: nodes in plan order, then each node's used devices in ascending order; the k-th
used device of a node is started as LOCAL_RANK k and runs on device index `device_index`.

Process groups, created by every rank in this one global order (gloo gives silently wrong
sums when ranks create groups in different orders):

1. `tp/stage{i}/replica{j}` - the TP ranks of one replica, in TP-rank order (size 1 for TP 1).
2. `dp/stage{i}/shard{c}of{C}` - data parallelism of stage i, by parameter shard. C is the
   largest TP degree among the stage's replicas; a replica with TP degree t holds shard c on its
   TP rank `c * t // C`. With one TP degree per stage this is Megatron's usual DP group (one per
   TP rank); with mixed degrees a TP-2 rank beside TP-4 replicas is in two shard groups, so every
   element is reduced exactly once per replica (hetc's chunked synchronisation).
3. `tied-embedding/shard{c}of{C}` - with tied embeddings and more than one stage: the holders of
   token-table shard c in the first and the last stage (C the largest TP degree among them).

Worked example (`P = 2`, 24 blocks, tied embeddings, global batch 64, microbatch 2):

    node a100@z/n0 (4 devices)   node v100@z/n0 (4 devices)   node a100@z/n1 (4 devices, 2 used)
      0 1 2 3                      4 5 6 7                      8 9
    stage 0 (blocks [0, 10)):  replica 0 = V100 TP2 on ranks (4, 5); replica 1 = V100 TP2 (6, 7)
    stage 1 (blocks [10, 24)): replica 0 = A100 TP4 on ranks (0..3); replica 1 = A100 TP2 (8, 9)
    pipelines: 0 = (s0 r0 -> s1 r0) x 18 microbatches, 1 = (s0 r1 -> s1 r1) x 14

    tp/stage0/replica0 = (4, 5)   tp/stage0/replica1 = (6, 7)
    tp/stage1/replica0 = (0, 1, 2, 3)   tp/stage1/replica1 = (8, 9)
    dp/stage0/shard0of2 = (4, 6)   dp/stage0/shard1of2 = (5, 7)
    dp/stage1/shard{0,1,2,3}of4 = (0, 8), (1, 8), (2, 9), (3, 9)   <- mixed TP: rank 8 holds
                                                                      shards 0 and 1 of 4
    tied-embedding/shard{c}of4 = (4, 6, 0, 8), (4, 6, 1, 8), (5, 7, 2, 9), (5, 7, 3, 9)

Pipeline 0 moves activations from TP 2 to TP 4: they are cut into max(2, 4) = 4 chunks; chunk c
goes from sender TP rank `c * 2 // 4` to receiver TP rank `c * 4 // 4` (rank 4 sends chunks 0,
1 to ranks 0, 1; rank 5 sends 2, 3 to ranks 2, 3), and the receivers all-gather the chunks in
their TP group. Every chunk has `boundary_chunk_elements` elements: the flat tensor is padded
with zeros to a multiple of the chunk count (an odd hidden width times an odd sequence length
does not divide), so that both sides of every send and of the all-gather agree on its size.
Gradients travel the same pairs backwards. Batch shares are uneven (18 vs 14 microbatches), so
each rank's DeepSpeed triple is its own: pipeline 0's ranks run `micro 2 x accumulation 18 x
data-parallel 2 = 72` and weight their loss by 2 * 18 / 32 = 1.125, pipeline 1's `2 x 14 x 2 =
56` with weight 0.875; DeepSpeed divides each pipeline's gradient by its own accumulation x D,
and the weights make the sum the mean over the whole global batch of 64.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from hetc.plan.codec import plan_to_json
from hetc.plan.ir import Plan

TOPOLOGY_FORMAT_VERSION = 2
SCHEDULE_RULE = "1f1b"


def one_f_one_b_order(stage: int, stages: int, microbatches: int) -> list[tuple[str, int]]:
    """The non-interleaved 1F1B order of one stage: warm-up forwards, alternate, drain."""
    warmup = min(stages - stage - 1, microbatches)
    order = [("F", j) for j in range(warmup)]
    forward, backward = warmup, 0
    while backward < microbatches:
        if forward < microbatches:
            order.append(("F", forward))
            forward += 1
        order.append(("B", backward))
        backward += 1
    return order


def schedule_record(stage: int, stages: int, microbatches: int) -> dict[str, object]:
    """A rank file's `schedule`: the rule and its two numbers, never the list of steps, so that
    a rank file's size does not grow with its pipeline's microbatches (`schedule_steps` expands
    it into `one_f_one_b_order(stage, stages, microbatches)`)."""
    return {
        "rule": SCHEDULE_RULE,
        "warmup": min(stages - stage - 1, microbatches),
        "microbatches": microbatches,
    }


def schedule_steps(schedule: Mapping[str, Any]) -> Iterator[tuple[str, int]]:
    """The steps of a rank file's `schedule`, one at a time (memory O(1) in microbatches):
    `warmup` forwards, then for each microbatch k the forward of k + warmup (while there is one)
    followed by the backward of k. This is 1F1B: a stage keeps at most warmup + 1 microbatches'
    activations, and k's backward comes after k's forward because k < k + warmup + 1."""
    if schedule["rule"] != SCHEDULE_RULE:
        raise ValueError(f"unknown schedule rule {schedule['rule']!r} (known: {SCHEDULE_RULE})")
    warmup, microbatches = schedule["warmup"], schedule["microbatches"]
    for k in range(min(warmup, microbatches)):
        yield "F", k
    for k in range(microbatches):
        if k + warmup < microbatches:
            yield "F", k + warmup
        yield "B", k


def plan_hash(plan: Plan) -> str:
    """sha256 of the plan's canonical JSON: what every rank compares at start-up."""
    return hashlib.sha256(plan_to_json(plan).encode("utf-8")).hexdigest()


@dataclass(frozen=True, kw_only=True, slots=True)
class Process:
    """One process of the job, in plan-rank order."""

    rank: int
    node: str
    local_rank: int
    """The launcher's LOCAL_RANK on that node."""
    device_index: int
    """The node's device this process drives (the plan's local rank)."""
    stage: int
    replica: int
    tp_rank: int
    pipeline: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Group:
    name: str
    ranks: tuple[int, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Transfer:
    """One chunk of a stage boundary's activation (forwards) or its gradient (backwards)."""

    peer: int
    chunk: int
    chunks: int


@dataclass(frozen=True, kw_only=True, slots=True)
class BatchTriple:
    """A rank's own DeepSpeed batch settings, consistent by DeepSpeed's rule, and its loss
    weight: the factor that makes uneven batch shares add up to the global batch's update."""

    micro: int
    accumulation: int
    data_parallel: int
    loss_weight: float

    @property
    def train_batch_size(self) -> int:
        return self.micro * self.accumulation * self.data_parallel


@dataclass(frozen=True, kw_only=True, slots=True)
class Topology:
    plan_hash: str
    processes: tuple[Process, ...]
    groups: tuple[Group, ...]
    """Every process group, in the one order all ranks create them."""
    tied_embeddings: bool
    microbatches_total: int
    """The sum of the plan's pipelines' microbatches."""
    _ranks: dict[tuple[int, int, int], int] = field(init=False, repr=False, compare=False)
    _groups_of: dict[int, list[Group]] = field(init=False, repr=False, compare=False)
    _on_node: dict[str, list[Process]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ranks = {(p.stage, p.replica, p.tp_rank): p.rank for p in self.processes}
        object.__setattr__(self, "_ranks", ranks)
        groups_of: dict[int, list[Group]] = {p.rank: [] for p in self.processes}
        for group in self.groups:
            for rank in dict.fromkeys(group.ranks):
                groups_of[rank].append(group)
        object.__setattr__(self, "_groups_of", groups_of)
        on_node: dict[str, list[Process]] = {}
        for process in self.processes:
            on_node.setdefault(process.node, []).append(process)
        object.__setattr__(self, "_on_node", on_node)

    @property
    def world_size(self) -> int:
        return len(self.processes)

    def rank_of(self, stage: int, replica: int, tp_rank: int) -> int:
        """The plan rank of a replica's TP rank (a lookup: every rank's files ask)."""
        return self._ranks[stage, replica, tp_rank]

    def groups_of(self, rank: int) -> list[Group]:
        """The groups `rank` is in, in creation order (a lookup: every rank file asks)."""
        return list(self._groups_of.get(rank, ()))

    def processes_on(self, node: str) -> list[Process]:
        """The processes of `node`, in LOCAL_RANK order."""
        return list(self._on_node.get(node, ()))


def _chunk_holder(chunk: int, chunks: int, tp: int) -> int:
    """The TP rank of a TP-`tp` replica that holds chunk `chunk` of `chunks`."""
    return chunk * tp // chunks


def topology_of(plan: Plan, *, tied_embeddings: bool, plan_json: str | None = None) -> Topology:
    """Number the plan's processes and name its process groups (see the module docstring).
    `plan_json`, the plan's canonical JSON where the caller has it (compile writes it as
    `plan.json`), saves serialising a large plan a second time for its hash."""
    pipeline_of = {
        (stage, index): p
        for p, pipeline in enumerate(plan.pipelines)
        for stage, index in enumerate(pipeline.replicas)
    }
    role: dict[tuple[str, int], tuple[int, int, int]] = {}
    for i, stage in enumerate(plan.stages):
        for j, replica in enumerate(stage.replicas):
            for t, device in enumerate(replica.local_ranks):
                role[replica.node, device] = (i, j, t)
    used_on: dict[str, list[int]] = {}
    for node_id, device in role:
        used_on.setdefault(node_id, []).append(device)
    processes: list[Process] = []
    rank_of: dict[tuple[int, int, int], int] = {}
    for node in plan.nodes:
        for local_rank, device in enumerate(sorted(used_on.get(node.id, ()))):
            i, j, t = role[node.id, device]
            rank_of[i, j, t] = len(processes)
            processes.append(
                Process(
                    rank=len(processes),
                    node=node.id,
                    local_rank=local_rank,
                    device_index=device,
                    stage=i,
                    replica=j,
                    tp_rank=t,
                    pipeline=pipeline_of[i, j],
                )
            )
    groups: list[Group] = []
    for i, stage in enumerate(plan.stages):
        for j, replica in enumerate(stage.replicas):
            members = tuple(rank_of[i, j, t] for t in range(replica.tp))
            groups.append(Group(name=f"tp/stage{i}/replica{j}", ranks=members))
    for i, stage in enumerate(plan.stages):
        groups += _shard_groups(
            f"dp/stage{i}", [(i, j, r.tp) for j, r in enumerate(stage.replicas)], rank_of
        )
    last = len(plan.stages) - 1
    if tied_embeddings and last > 0:
        holders = [(i, j, r.tp) for i in (0, last) for j, r in enumerate(plan.stages[i].replicas)]
        groups += _shard_groups("tied-embedding", holders, rank_of)
    return Topology(
        plan_hash=(
            plan_hash(plan)
            if plan_json is None
            else hashlib.sha256(plan_json.encode("utf-8")).hexdigest()
        ),
        processes=tuple(processes),
        groups=tuple(groups),
        tied_embeddings=tied_embeddings,
        microbatches_total=sum(p.microbatches for p in plan.pipelines),
    )


def _shard_groups(
    prefix: str, holders: list[tuple[int, int, int]], rank_of: dict[tuple[int, int, int], int]
) -> list[Group]:
    chunks = max(tp for _, _, tp in holders)
    return [
        Group(
            name=f"{prefix}/shard{c}of{chunks}",
            ranks=tuple(rank_of[i, j, _chunk_holder(c, chunks, tp)] for i, j, tp in holders),
        )
        for c in range(chunks)
    ]


def boundary_chunk_elements(elements: int, chunks: int) -> int:
    """The size of each of the `chunks` chunks of a stage-boundary tensor of `elements`
    elements: the ceiling of the quotient. The sender cuts the tensor, padded with zeros to
    `chunks` times this, into equal chunks; the receiver drops the padding after gathering.
    One rule for sender, receiver and the traffic ledger (`hetc.costmodel.traffic`)."""
    return -(-elements // chunks)


def boundary_transfers(
    plan: Plan, topology: Topology, process: Process, direction: int
) -> list[Transfer]:
    """The chunks `process` exchanges with the neighbouring stage of its pipeline: `direction`
    +1 for the next stage (activations out, gradients in), -1 for the previous one."""
    neighbour = process.stage + direction
    if not 0 <= neighbour < len(plan.stages):
        return []
    mine = plan.stages[process.stage].replicas[process.replica].tp
    other_index = plan.pipelines[process.pipeline].replicas[neighbour]
    other = plan.stages[neighbour].replicas[other_index].tp
    chunks = max(mine, other)
    return [
        Transfer(
            peer=topology.rank_of(neighbour, other_index, _chunk_holder(c, chunks, other)),
            chunk=c,
            chunks=chunks,
        )
        for c in range(chunks)
        if _chunk_holder(c, chunks, mine) == process.tp_rank
    ]


def batch_triple(
    plan: Plan, process: Process, *, microbatches_total: int | None = None
) -> BatchTriple:
    """`process`'s DeepSpeed batch triple and loss weight (see the module docstring).
    `microbatches_total`, the sum of the pipelines' microbatches, saves summing them again
    where the caller asks for every rank (`Topology.microbatches_total`)."""
    accumulation = plan.pipelines[process.pipeline].microbatches
    data_parallel = len(plan.stages[process.stage].replicas)
    total = (
        sum(p.microbatches for p in plan.pipelines)
        if microbatches_total is None
        else microbatches_total
    )
    return BatchTriple(
        micro=plan.microbatch_size,
        accumulation=accumulation,
        data_parallel=data_parallel,
        loss_weight=data_parallel * accumulation / total,
    )


def stage_holds(plan: Plan, stage: int, tied_embeddings: bool) -> list[str]:
    """What a stage holds besides its blocks, by the runtime's names (`hetc.runtime.model`)."""
    last = len(plan.stages) - 1
    holds = []
    if stage == 0:
        holds.append("embedding")
    if stage == last:
        holds += ["final-norm", "head"]
        if tied_embeddings and last > 0:
            holds.append("token-table-copy")
    return holds


def rank_record(
    plan: Plan, topology: Topology, process: Process, *, deepspeed_config: str
) -> dict[str, object]:
    """The content of one rank file (`rank.schema.json`); `deepspeed_config` is the path of the
    rank's DeepSpeed config relative to the output directory."""
    stage = plan.stages[process.stage]
    replica = stage.replicas[process.replica]
    triple = batch_triple(plan, process, microbatches_total=topology.microbatches_total)
    tp_group = f"tp/stage{process.stage}/replica{process.replica}"
    dp_prefix = f"dp/stage{process.stage}/"

    def transfers(direction: int) -> list[dict[str, int]]:
        return [
            {"peer": t.peer, "chunk": t.chunk, "chunks": t.chunks}
            for t in boundary_transfers(plan, topology, process, direction)
        ]

    groups = topology.groups_of(process.rank)
    return {
        "version": TOPOLOGY_FORMAT_VERSION,
        "plan_hash": topology.plan_hash,
        "hetc_version": plan.hetc_version,
        "node": process.node,
        "local_rank": process.local_rank,
        "device_index": process.device_index,
        "rank": process.rank,
        "world_size": topology.world_size,
        "stage": process.stage,
        "stages": len(plan.stages),
        "blocks": [stage.first_block, stage.end_block],
        "holds": stage_holds(plan, process.stage, topology.tied_embeddings),
        "replica": process.replica,
        "pipeline": process.pipeline,
        "tp": {"group": tp_group, "size": replica.tp, "rank": process.tp_rank},
        "data_parallel": [g.name for g in groups if g.name.startswith(dp_prefix)],
        "tied_embedding": [g.name for g in groups if g.name.startswith("tied-embedding/")],
        "previous_stage": transfers(-1),
        "next_stage": transfers(+1),
        "schedule": schedule_record(process.stage, len(plan.stages), triple.accumulation),
        "batch": {
            "micro": triple.micro,
            "accumulation": triple.accumulation,
            "data_parallel": triple.data_parallel,
            "train_batch_size": triple.train_batch_size,
            "loss_weight": triple.loss_weight,
        },
        "deepspeed_config": deepspeed_config,
        "groups": [g.name for g in groups],
    }


def rank_file_name(process: Process, node_index: int) -> str:
    """A rank file's path under `topology/`: by node index, never by node id (ids carry users'
    pool and zone names, which may contain anything but a newline)."""
    return f"ranks/node{node_index:04d}-local{process.local_rank:02d}.json"


def cluster_record(plan: Plan, topology: Topology) -> dict[str, object]:
    """The content of `topology/cluster.json` (`cluster.schema.json`)."""
    nodes = []
    for index, node in enumerate(plan.nodes):
        processes = topology.processes_on(node.id)
        nodes.append(
            {
                "id": node.id,
                "index": index,
                "pool": node.pool,
                "zone": node.zone,
                "region": node.region,
                "device": node.device,
                "devices": node.devices,
                "processes": [
                    {
                        "local_rank": p.local_rank,
                        "device_index": p.device_index,
                        "rank": p.rank,
                        "stage": p.stage,
                        "replica": p.replica,
                        "tp_rank": p.tp_rank,
                        "pipeline": p.pipeline,
                        "rank_file": rank_file_name(p, index),
                    }
                    for p in processes
                ],
            }
        )
    return {
        "version": TOPOLOGY_FORMAT_VERSION,
        "plan_hash": topology.plan_hash,
        "hetc_version": plan.hetc_version,
        "world_size": topology.world_size,
        "tied_embeddings": topology.tied_embeddings,
        "nodes": nodes,
        "groups": [{"name": g.name, "ranks": list(g.ranks)} for g in topology.groups],
    }
