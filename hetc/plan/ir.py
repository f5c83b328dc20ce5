"""The Plan IR: the layout of one training job, as the solver returns it and everything reads it.

A plan says which nodes are rented, how the model's transformer blocks are cut into pipeline
stages, which replicas (device type, TP degree, node, local devices) run each stage, and how
the global batch is split into microbatches over pipelines. It can express more than the first
runtime runs (asymmetric replica counts, mixed TP degrees in a stage); `capability` says what
is supported, and `plan_problems` says whether a plan is consistent at all.

Worked example (4 A100 + 4 V100 nodes' worth of devices, 24 blocks, global batch 64, mbs 2):

    stage 0: blocks [0, 10) + embedding   replicas: V100 TP2 on v100@z/n0 ranks (0,1)
                                                    V100 TP2 on v100@z/n0 ranks (2,3)
    stage 1: blocks [10, 24) + head       replicas: A100 TP4 on a100@z/n0 ranks (0,1,2,3)
                                                    A100 TP2 on a100@z/n1 ranks (0,1)
    pipelines: (0 -> 0) x 18 microbatches, (1 -> 1) x 14 microbatches   (18 + 14) x 2 = 64

Pipeline p visits replica `pipelines[p].replicas[i]` of stage i. Here stage 1 mixes TP degrees
(4 and 2), and the batch shares are uneven (36 and 28 samples) because the replicas differ in
speed; both are representable, and the capability matrix decides whether they can run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PLAN_FORMAT_VERSION = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class Node:
    """One rented node: paid for in full, even where some of its devices idle."""

    id: str
    """Logical id, `<pool>@<zone>/n<k>`; never a hostname (Slurm picks hosts at run time)."""
    zone: str
    region: str
    pool: str
    device: str
    devices: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Replica:
    """One data-parallel copy of a stage: TP ranks on one node (TP never spans nodes)."""

    device: str
    tp: int
    node: str
    local_ranks: tuple[int, ...]
    """The node's devices this replica uses, one per TP rank, in TP-rank order."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Stage:
    """A contiguous range of transformer blocks and the replicas that run it."""

    first_block: int
    end_block: int
    """Blocks [first_block, end_block); the first stage also holds the embedding, the last the
    final norm, output head and loss (both ends hold the embedding when it is tied)."""
    replicas: tuple[Replica, ...]

    @property
    def blocks(self) -> int:
        return self.end_block - self.first_block


@dataclass(frozen=True, kw_only=True, slots=True)
class Pipeline:
    """A path through the stages, one replica per stage, and its share of the batch."""

    replicas: tuple[int, ...]
    """Index into `stages[i].replicas` for each stage i."""
    microbatches: int
    """Microbatches this pipeline processes per iteration."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Predictions:
    """What the cost model expects of the plan; absent until a simulator has run."""

    iteration_time: float
    """Seconds."""
    samples_per_second: float
    tokens_per_second: float
    achieved_flops: float
    """FLOP/s of useful model work (no recomputation)."""
    mfu: float
    """achieved_flops over the plan's total peak FLOP/s at the training precision."""
    cost_per_iteration: float
    """USD: compute (every device of every rented node) plus egress."""
    egress_cost_per_iteration: float
    peak_memory: dict[str, float] = field(default_factory=dict)
    """Bytes, by rank key `<node id>#<local rank>`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """One complete layout; see the module docstring for a worked example."""

    version: int = PLAN_FORMAT_VERSION
    spec_hash: str
    """Hash of the normalised spec the plan was made for."""
    hetc_version: str
    model_blocks: int
    """Transformer blocks in the model; the stages cover [0, model_blocks)."""
    global_batch_size: int
    microbatch_size: int
    model: str | None = None
    """The spec's model (preset or `name`) the plan was made for; with `seq_len` and
    `precision`, what a simulation or compilation of the plan must agree with (None in plans
    written before these were recorded, and in hand-built plans)."""
    seq_len: int | None = None
    precision: str | None = None
    nodes: tuple[Node, ...]
    stages: tuple[Stage, ...]
    pipelines: tuple[Pipeline, ...]
    predictions: Predictions | None = None

    def node(self, node_id: str) -> Node | None:
        return next((n for n in self.nodes if n.id == node_id), None)

    @property
    def world_size(self) -> int:
        """Processes the job starts: one per device used by some replica."""
        return sum(r.tp for s in self.stages for r in s.replicas)


PlanPath = tuple[str | int, ...]
"""Where in the plan's JSON a value stands: ("stages", 0, "replicas", 1, "tp")."""


@dataclass(frozen=True, slots=True)
class PlanIssue:
    """One inconsistency of a plan, at the JSON path of the offending value."""

    path: PlanPath
    message: str


def plan_problems(plan: Plan) -> list[str]:
    """Every inconsistency of `plan`, each message qualified by stage or pipeline; [] if none."""
    return [issue.message for issue in plan_issues(plan)]


def plan_issues(plan: Plan) -> list[PlanIssue]:
    """`plan_problems` with the path of each offending value, so that a reader of a plan file
    can point at it."""
    problems: list[PlanIssue] = []
    if plan.version != PLAN_FORMAT_VERSION:
        problems.append(
            PlanIssue(
                ("version",),
                f"plan format version {plan.version}; this hetc reads {PLAN_FORMAT_VERSION}",
            )
        )
    if plan.microbatch_size < 1 or plan.global_batch_size < 1:
        problems.append(
            PlanIssue(
                ("microbatch_size" if plan.microbatch_size < 1 else "global_batch_size",),
                "global_batch_size and microbatch_size must be positive",
            )
        )
    nodes: dict[str, Node] = {}
    for i, node in enumerate(plan.nodes):
        if node.id in nodes:
            problems.append(PlanIssue(("nodes", i, "id"), "node ids repeat"))
        nodes.setdefault(node.id, node)
    problems += _stage_problems(plan, nodes)
    problems += _pipeline_problems(plan)
    return problems


def _stage_problems(plan: Plan, nodes: dict[str, Node]) -> list[PlanIssue]:
    problems: list[PlanIssue] = []
    if not plan.stages:
        return [PlanIssue(("stages",), "a plan needs at least one stage")]
    expected_start = 0
    used: dict[tuple[str, int], str] = {}
    for i, stage in enumerate(plan.stages):
        where = f"stage {i}"
        if stage.first_block != expected_start:
            problems.append(
                PlanIssue(
                    ("stages", i, "first_block"),
                    f"{where}: starts at block {stage.first_block}, not {expected_start}"
                    " (stages must cover the blocks contiguously)",
                )
            )
        end_stage = i in (0, len(plan.stages) - 1)
        if stage.end_block < stage.first_block or (stage.blocks == 0 and not end_stage):
            problems.append(
                PlanIssue(
                    ("stages", i, "end_block"),
                    f"{where}: empty or reversed block range"
                    f" [{stage.first_block}, {stage.end_block})",
                )
            )
        expected_start = stage.end_block
        if not stage.replicas:
            problems.append(PlanIssue(("stages", i, "replicas"), f"{where}: has no replica"))
        for j, replica in enumerate(stage.replicas):
            problems += _replica_problems(
                ("stages", i, "replicas", j), f"{where} replica {j}", replica, nodes, used
            )
    if expected_start != plan.model_blocks:
        problems.append(
            PlanIssue(
                ("stages", len(plan.stages) - 1, "end_block"),
                f"stages end at block {expected_start}; the model has {plan.model_blocks}",
            )
        )
    return problems


def _replica_problems(
    at: PlanPath,
    where: str,
    replica: Replica,
    nodes: dict[str, Node],
    used: dict[tuple[str, int], str],
) -> list[PlanIssue]:
    problems: list[PlanIssue] = []
    node = nodes.get(replica.node)
    if node is None:
        return [PlanIssue((*at, "node"), f"{where}: runs on unknown node {replica.node!r}")]
    if node.device != replica.device:
        problems.append(
            PlanIssue(
                (*at, "device"),
                f"{where}: is {replica.device} but node {node.id} has {node.device}",
            )
        )
    if replica.tp < 1 or len(replica.local_ranks) != replica.tp:
        problems.append(
            PlanIssue(
                (*at, "local_ranks"),
                f"{where}: TP {replica.tp} needs exactly {replica.tp} local ranks,"
                f" got {len(replica.local_ranks)}",
            )
        )
    for k, rank in enumerate(replica.local_ranks):
        if not 0 <= rank < node.devices:
            problems.append(
                PlanIssue(
                    (*at, "local_ranks", k),
                    f"{where}: local rank {rank} outside node {node.id} ({node.devices} devices)",
                )
            )
        elif (node.id, rank) in used:
            problems.append(
                PlanIssue(
                    (*at, "local_ranks", k),
                    f"{where}: device {node.id}#{rank} is already used by {used[node.id, rank]}",
                )
            )
        else:
            used[node.id, rank] = where
    return problems


def _pipeline_problems(plan: Plan) -> list[PlanIssue]:
    problems: list[PlanIssue] = []
    if not plan.pipelines:
        return [PlanIssue(("pipelines",), "a plan needs at least one pipeline")]
    visited: set[tuple[int, int]] = set()
    for p, pipeline in enumerate(plan.pipelines):
        where = f"pipeline {p}"
        if len(pipeline.replicas) != len(plan.stages):
            problems.append(
                PlanIssue(
                    ("pipelines", p, "replicas"),
                    f"{where}: visits {len(pipeline.replicas)} stages,"
                    f" the plan has {len(plan.stages)}",
                )
            )
            continue
        if pipeline.microbatches < 1:
            problems.append(
                PlanIssue(
                    ("pipelines", p, "microbatches"), f"{where}: needs at least one microbatch"
                )
            )
        for i, index in enumerate(pipeline.replicas):
            if not 0 <= index < len(plan.stages[i].replicas):
                problems.append(
                    PlanIssue(
                        ("pipelines", p, "replicas", i),
                        f"{where}: stage {i} has no replica {index}",
                    )
                )
            visited.add((i, index))
    for i, stage in enumerate(plan.stages):
        for j in range(len(stage.replicas)):
            if (i, j) not in visited:
                problems.append(
                    PlanIssue(
                        ("stages", i, "replicas", j),
                        f"stage {i} replica {j}: no pipeline runs through it",
                    )
                )
    samples = sum(p.microbatches for p in plan.pipelines) * plan.microbatch_size
    if samples != plan.global_batch_size:
        problems.append(
            PlanIssue(
                ("pipelines",),
                f"pipelines process {samples} samples per iteration; the global batch"
                f" is {plan.global_batch_size} (it must be met exactly)",
            )
        )
    return problems
