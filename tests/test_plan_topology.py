"""Plan ranks, process groups, boundary transfers and batch triples (`hetc.plan.topology`)."""

from __future__ import annotations

import random
from collections import Counter
from fractions import Fraction

import pytest

from hetc.plan import Node, Pipeline, Plan, Replica, Stage, plan_problems, plan_to_json
from hetc.plan.settings import VOCAB_PAD, padded_vocab
from hetc.plan.topology import (
    batch_triple,
    boundary_chunk_elements,
    boundary_transfers,
    cluster_record,
    one_f_one_b_order,
    plan_hash,
    rank_file_name,
    rank_record,
    schedule_steps,
    stage_holds,
    topology_of,
)


def _node(node_id: str, device: str, devices: int = 4) -> Node:
    return Node(
        id=node_id, zone="z", region="r", pool=node_id.split("@")[0], device=device, devices=devices
    )


def docstring_plan() -> Plan:
    """The worked example of hetc/plan/topology.py's docstring."""
    return Plan(
        spec_hash="0" * 64,
        hetc_version="0.1.0",
        model_blocks=24,
        global_batch_size=64,
        microbatch_size=2,
        nodes=(_node("a100@z/n0", "A100"), _node("v100@z/n0", "V100"), _node("a100@z/n1", "A100")),
        stages=(
            Stage(
                first_block=0,
                end_block=10,
                replicas=(
                    Replica(device="V100", tp=2, node="v100@z/n0", local_ranks=(0, 1)),
                    Replica(device="V100", tp=2, node="v100@z/n0", local_ranks=(2, 3)),
                ),
            ),
            Stage(
                first_block=10,
                end_block=24,
                replicas=(
                    Replica(device="A100", tp=4, node="a100@z/n0", local_ranks=(0, 1, 2, 3)),
                    Replica(device="A100", tp=2, node="a100@z/n1", local_ranks=(0, 1)),
                ),
            ),
        ),
        pipelines=(
            Pipeline(replicas=(0, 0), microbatches=18),
            Pipeline(replicas=(1, 1), microbatches=14),
        ),
    )


def test_docstring_example_groups() -> None:
    plan = docstring_plan()
    assert plan_problems(plan) == []
    topology = topology_of(plan, tied_embeddings=True)
    groups = {g.name: g.ranks for g in topology.groups}
    assert [g.name for g in topology.groups][:4] == [
        "tp/stage0/replica0",
        "tp/stage0/replica1",
        "tp/stage1/replica0",
        "tp/stage1/replica1",
    ]
    assert groups == {
        "tp/stage0/replica0": (4, 5),
        "tp/stage0/replica1": (6, 7),
        "tp/stage1/replica0": (0, 1, 2, 3),
        "tp/stage1/replica1": (8, 9),
        "dp/stage0/shard0of2": (4, 6),
        "dp/stage0/shard1of2": (5, 7),
        "dp/stage1/shard0of4": (0, 8),
        "dp/stage1/shard1of4": (1, 8),
        "dp/stage1/shard2of4": (2, 9),
        "dp/stage1/shard3of4": (3, 9),
        "tied-embedding/shard0of4": (4, 6, 0, 8),
        "tied-embedding/shard1of4": (4, 6, 1, 8),
        "tied-embedding/shard2of4": (5, 7, 2, 9),
        "tied-embedding/shard3of4": (5, 7, 3, 9),
    }
    assert topology.world_size == plan.world_size == 10


def test_docstring_example_transfers_and_triples() -> None:
    plan = docstring_plan()
    topology = topology_of(plan, tied_embeddings=True)
    by_rank = {p.rank: p for p in topology.processes}
    sends = {
        r: [(t.peer, t.chunk, t.chunks) for t in boundary_transfers(plan, topology, by_rank[r], +1)]
        for r in (4, 5, 6, 7)
    }
    assert sends == {
        4: [(0, 0, 4), (1, 1, 4)],
        5: [(2, 2, 4), (3, 3, 4)],
        6: [(8, 0, 2)],
        7: [(9, 1, 2)],
    }
    assert boundary_transfers(plan, topology, by_rank[0], +1) == []
    t0, t1 = batch_triple(plan, by_rank[4]), batch_triple(plan, by_rank[6])
    assert (t0.micro, t0.accumulation, t0.data_parallel, t0.train_batch_size) == (2, 18, 2, 72)
    assert (t1.micro, t1.accumulation, t1.data_parallel, t1.train_batch_size) == (2, 14, 2, 56)
    assert (t0.loss_weight, t1.loss_weight) == (1.125, 0.875)


def random_plan(rng: random.Random) -> tuple[Plan, bool]:
    """A consistent random plan: 1-3 stages, mixed TP degrees, uneven shares, nodes of 4."""
    stages_count = rng.randint(1, 3)
    pipelines = rng.randint(1, 3)
    microbatch = rng.choice([1, 2])
    blocks = stages_count + rng.randint(0, 4)
    cuts = sorted(rng.sample(range(1, blocks), stages_count - 1))
    bounds = [0, *cuts, blocks]
    nodes: list[Node] = []
    free: list[tuple[str, int]] = []
    stages = []
    for i in range(stages_count):
        replicas = []
        for _ in range(pipelines):
            tp = rng.choice([1, 2, 4])
            node_id = f"pool{len(nodes)}@z/n0"
            nodes.append(_node(node_id, "G", 4))
            free.append((node_id, tp))
            replicas.append(Replica(device="G", tp=tp, node=node_id, local_ranks=tuple(range(tp))))
        stages.append(
            Stage(first_block=bounds[i], end_block=bounds[i + 1], replicas=tuple(replicas))
        )
    shares = [rng.randint(1, 5) for _ in range(pipelines)]
    plan = Plan(
        spec_hash="0" * 64,
        hetc_version="0.1.0",
        model_blocks=blocks,
        global_batch_size=microbatch * sum(shares),
        microbatch_size=microbatch,
        nodes=tuple(nodes),
        stages=tuple(stages),
        pipelines=tuple(
            Pipeline(replicas=(p,) * stages_count, microbatches=m) for p, m in enumerate(shares)
        ),
    )
    assert plan_problems(plan) == []
    return plan, rng.random() < 0.5


@pytest.mark.parametrize("seed", range(40))
def test_groups_cover_every_shard_once_per_replica(seed: int) -> None:
    """Brute force over elements: an element of a stage's parameters (chunk e of the finest
    split, the LCM of TP degrees) lives on TP rank e*tp//L of each replica; every DP group
    that contains it must contain exactly one holder per replica, and each element must be
    reduced by exactly one group."""
    plan, tied = random_plan(random.Random(seed))
    topology = topology_of(plan, tied_embeddings=tied)
    rank_of = {(p.stage, p.replica, p.tp_rank): p.rank for p in topology.processes}
    assert sorted(rank_of.values()) == list(range(plan.world_size))
    for i, stage in enumerate(plan.stages):
        finest = 4  # every TP degree divides 4
        dp = [g for g in topology.groups if g.name.startswith(f"dp/stage{i}/")]
        for element in range(finest):
            holders = tuple(
                rank_of[i, j, element * r.tp // finest] for j, r in enumerate(stage.replicas)
            )
            assert sum(1 for g in dp if g.ranks == holders) >= 1
        chunks = max(r.tp for r in stage.replicas)
        assert len(dp) == chunks
        for g in dp:
            assert len(g.ranks) == len(stage.replicas)
    # Each rank's groups are exactly those that name it.
    for process in topology.processes:
        names = {g.name for g in topology.groups_of(process.rank)}
        assert f"tp/stage{process.stage}/replica{process.replica}" in names


@pytest.mark.parametrize("seed", range(40))
def test_boundary_transfers_pair_up(seed: int) -> None:
    """Every chunk of every pipeline boundary is sent by exactly one rank and received by
    exactly one, and the two ends name each other."""
    plan, tied = random_plan(random.Random(seed))
    topology = topology_of(plan, tied_embeddings=tied)
    sent: Counter[tuple[int, int, int]] = Counter()
    received: Counter[tuple[int, int, int]] = Counter()
    pairs = set()
    for process in topology.processes:
        for t in boundary_transfers(plan, topology, process, +1):
            sent[process.pipeline, process.stage, t.chunk] += 1
            pairs.add((process.rank, t.peer, t.chunk))
        for t in boundary_transfers(plan, topology, process, -1):
            received[process.pipeline, process.stage - 1, t.chunk] += 1
    assert sent == received
    assert all(count == 1 for count in sent.values())
    for p in range(len(plan.pipelines)):
        for i in range(len(plan.stages) - 1):
            a = plan.stages[i].replicas[plan.pipelines[p].replicas[i]].tp
            b = plan.stages[i + 1].replicas[plan.pipelines[p].replicas[i + 1]].tp
            assert sorted(c for (q, s, c) in sent if (q, s) == (p, i)) == list(range(max(a, b)))
    back = {
        (t.peer, process.rank, t.chunk)
        for process in topology.processes
        for t in boundary_transfers(plan, topology, process, -1)
    }
    assert back == pairs


@pytest.mark.parametrize("seed", range(20))
def test_loss_weights_give_the_global_batch_mean(seed: int) -> None:
    """Independent arithmetic: each engine divides its summed microbatch-mean gradients by
    accumulation x data-parallel size (DeepSpeed's GAS scaling and DP averaging); with the
    loss weights the sum over pipelines must be the mean over the whole global batch."""
    rng = random.Random(seed)
    plan, _ = random_plan(rng)
    topology = topology_of(plan, tied_embeddings=False)
    samples = [
        [Fraction(rng.randint(-9, 9)) for _ in range(plan.microbatch_size)]
        for _ in range(plan.global_batch_size // plan.microbatch_size)
    ]
    global_mean = sum(sum(mb) for mb in samples) / plan.global_batch_size
    first = [p for p in topology.processes if p.stage == 0 and p.tp_rank == 0]
    total = Fraction(0)
    cursor = 0
    for process in sorted(first, key=lambda p: p.pipeline):
        triple = batch_triple(plan, process)
        weight = Fraction(triple.loss_weight).limit_denominator(10**6)
        mine = samples[cursor : cursor + triple.accumulation]
        cursor += triple.accumulation
        engine = sum(weight * sum(mb) / len(mb) for mb in mine) / triple.accumulation
        total += engine / triple.data_parallel
        assert triple.train_batch_size == triple.micro * triple.accumulation * triple.data_parallel
    assert cursor == len(samples)
    assert total == global_mean


def test_records_and_names() -> None:
    plan = docstring_plan()
    topology = topology_of(plan, tied_embeddings=True)
    cluster = cluster_record(plan, topology)
    assert cluster["plan_hash"] == plan_hash(plan) == topology.plan_hash
    files = [p["rank_file"] for n in cluster["nodes"] for p in n["processes"]]  # type: ignore[index, union-attr]
    assert len(files) == len(set(files)) == 10
    process = next(p for p in topology.processes if p.rank == 8)
    assert rank_file_name(process, 2) == "ranks/node0002-local00.json"
    record = rank_record(plan, topology, process, deepspeed_config="deepspeed/x.json")
    assert record["rank"] == 8 and record["node"] == "a100@z/n1" and record["device_index"] == 0
    assert record["holds"] == ["final-norm", "head", "token-table-copy"]
    assert record["data_parallel"] == ["dp/stage1/shard0of4", "dp/stage1/shard1of4"]
    assert record["schedule"] == {"rule": "1f1b", "warmup": 0, "microbatches": 14}
    assert list(schedule_steps(record["schedule"])) == one_f_one_b_order(1, 2, 14)
    assert record["previous_stage"] == [{"peer": 6, "chunk": 0, "chunks": 2}]


def test_local_rank_follows_used_devices() -> None:
    """A node whose used devices are not 0..k-1 still starts LOCAL_RANK 0..k-1, each driving
    the plan's device (a hand-written plan may leave holes)."""
    plan = Plan(
        spec_hash="0" * 64,
        hetc_version="0.1.0",
        model_blocks=2,
        global_batch_size=2,
        microbatch_size=1,
        nodes=(_node("g@z/n0", "G", 8),),
        stages=(
            Stage(
                first_block=0,
                end_block=2,
                replicas=(
                    Replica(device="G", tp=2, node="g@z/n0", local_ranks=(6, 7)),
                    Replica(device="G", tp=1, node="g@z/n0", local_ranks=(3,)),
                ),
            ),
        ),
        pipelines=(
            Pipeline(replicas=(0,), microbatches=1),
            Pipeline(replicas=(1,), microbatches=1),
        ),
    )
    topology = topology_of(plan, tied_embeddings=False)
    assert [(p.local_rank, p.device_index, p.replica, p.tp_rank) for p in topology.processes] == [
        (0, 3, 1, 0),
        (1, 6, 0, 0),
        (2, 7, 0, 1),
    ]


def test_rank_of_and_stage_holds_follow_the_docstring_example() -> None:
    """Replica 1 of stage 1 is ranks 8, 9 (node a100@z/n1); the ends hold the embedding and,
    tied over two stages, the head with its copy of the token table."""
    plan = docstring_plan()
    topology = topology_of(plan, tied_embeddings=True)
    assert [topology.rank_of(1, 1, t) for t in (0, 1)] == [8, 9]
    assert [topology.rank_of(0, 0, t) for t in (0, 1)] == [4, 5]
    assert stage_holds(plan, 0, True) == ["embedding"]
    assert stage_holds(plan, 1, True) == ["final-norm", "head", "token-table-copy"]
    assert stage_holds(plan, 1, False) == ["final-norm", "head"]


def test_the_vocabulary_pads_to_a_multiple_of_128() -> None:
    """50257 rows (GPT-2) pad to 50304; a multiple of 128 stays; every power-of-two TP degree
    up to 128 then splits the table equally."""
    assert padded_vocab(50257) == 50304 == 393 * VOCAB_PAD
    assert padded_vocab(32000) == 32000
    assert all(padded_vocab(50257) % tp == 0 for tp in (1, 2, 4, 8, 16, 32, 64, 128))


def test_boundary_chunks_are_the_smallest_equal_size_that_covers_the_tensor() -> None:
    """Chunks of one size whose total covers the tensor with less than one chunk of padding:
    for 63 x 65 = 4095 elements in 2 chunks, 2048 each (1 element of padding)."""
    assert boundary_chunk_elements(4095, 2) == 2048
    for elements in range(1, 200):
        for chunks in (1, 2, 3, 4, 8):
            size = boundary_chunk_elements(elements, chunks)
            assert size * chunks >= elements > (size - 1) * chunks


def test_indexes_agree_with_scanning_the_plan() -> None:
    """The topology's lookups (groups of a rank, processes of a node, the microbatch total,
    the hash from given JSON) equal a scan of every group, process and pipeline."""
    plan = docstring_plan()
    topology = topology_of(plan, tied_embeddings=True)
    for process in topology.processes:
        scanned = [g for g in topology.groups if process.rank in g.ranks]
        assert topology.groups_of(process.rank) == scanned
        assert batch_triple(
            plan, process, microbatches_total=topology.microbatches_total
        ) == batch_triple(plan, process)
    for n in plan.nodes:
        assert topology.processes_on(n.id) == [p for p in topology.processes if p.node == n.id]
    assert topology.microbatches_total == 18 + 14
    given = topology_of(plan, tied_embeddings=True, plan_json=plan_to_json(plan))
    assert given == topology
