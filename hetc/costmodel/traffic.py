"""Every communication call of one training iteration, rank by rank: the one description of
what the runtime sends, from which the planner and the simulator take their byte sizes.

`iteration_ledger(plan, spec)` lists, for each plan rank, the calls `hetc.runtime` makes in
one steady iteration (no fp16 overflow, no checkpoint written), each with how many times it
is made. tests/test_runtime_traffic.py runs the runtime with every torch.distributed call
recorded and requires the same calls, with the same sizes, on every rank.

What travels in which type (`hetc.runtime.train`'s WIRE and REDUCE, the emitted DeepSpeed
`communication_data_type`):

- Stage-boundary activations and their gradients: the compute type (bf16, fp16 or fp32), as
  Megatron's pipeline sends them in its params dtype (`config.pipeline_dtype`,
  megatron/core/pipeline_parallel/p2p_communication.py). `boundary_element_bytes`.
- Data-parallel, tied-embedding and TP-broadcast gradients: fp16 under fp16, fp32 under bf16
  and fp32 (`gradient_element_bytes`). fp16 gradients are loss-scaled and every rank agrees
  on overflow after the reduction, as DeepSpeed's fp16 engine reduces in fp16; bf16 keeps an
  8-bit mantissa, and Megatron turns on `accumulate_allreduce_grads_in_fp32` for bf16
  (megatron/training/arguments.py), so bf16 reduces in fp32.
- Inside a layer (TP): a row-parallel layer's all-reduce carries the matmul's output type;
  the all-reduce in the backward of a column-parallel input and the embedding's all-reduce
  carry the hidden states' type, fp32 on hetc's own path (autocast keeps the residual stream
  fp32) and the module's type on a DeepSpeed engine (which casts the module); the
  vocabulary-parallel cross-entropy's three all-reduces are fp32.
- Control values: one fp64 all-reduce over every rank per iteration, of the global loss, the
  clip's squared norm (when clipping), the fp16 overflow flag (under fp16) and the four flags
  of the checkpoint agreement.

The ZeRO 1/2 path (a DeepSpeed 0.19.8 engine per stage, `hetc.runtime.engine`) calls what
DeepSpeed calls (stage_1_and_2.py, read and observed): its reduce bucket
(`reduce_bucket_size` elements, filled with gradients in parameter order for ZeRO-1 and in
autograd's order for ZeRO-2, counted here as reversed parameter order) is all-reduced whole
in `communication_data_type` (`use_multi_rank_bucket_allreduce`, on by default: one
all-reduce per bucket, not a reduce per partition); ZeRO-1 once per iteration, ZeRO-2 after
every backward, pad backwards included. A parameter larger than the bucket is reduced alone,
in pieces cut at the partition boundaries and grouped while they fit the bucket. Then the
tied table's reduced gradient is assembled by an fp32 all-reduce of the whole table
(`get_full_hp_grad`), DeepSpeed checks overflow (uint8, under fp16 and bf16) over the
data-parallel group and the TP group, and all-gathers the updated weights
(`all_gather_into_tensor`, the flat group padded to 2 x D elements, model type). DeepSpeed's
own gradient norm is off (`compute_grad_norm`: hetc clips by the global norm itself), and a
collective over a group of one is not made on either path.

Bytes on the wire, per call and rank (S: the call's tensor on one rank, in bytes; n: the
group's size), as ring algorithms move them (NCCL's rings, and gloo's ring all-reduce):

- send / recv: the sender sends S, the receiver receives S.
- all-reduce: every rank sends 2 (n - 1) / n x S to its successor in the group's order and
  receives as much from its predecessor (reduce-scatter, then all-gather).
- all-gather (S each rank's input): every rank sends and receives (n - 1) x S, i.e.
  (n - 1) / n of the gathered whole; a reduce-scatter of an input of S would move
  (n - 1) / n x S each (none is made).
- broadcast from a root: a chain in group order starting at the root; the root sends S,
  every other rank receives S and sends it on, except the chain's last. A reduce to a root
  would be the mirror chain (none is made).
- a group of one moves nothing.

Pure Python; never imports torch.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from hetc.catalog import ModelArchitecture
from hetc.plan import Plan
from hetc.plan.settings import padded_vocab, reduce_bucket_elements
from hetc.plan.topology import (
    Process,
    Topology,
    boundary_chunk_elements,
    boundary_transfers,
    stage_holds,
    topology_of,
)
from hetc.schema.spec import Spec

ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
GRADIENT_TYPE = {"fp32": "fp32", "bf16": "fp32", "fp16": "fp16"}
"""The type gradients are reduced in, by training precision (module docstring)."""
FP64, FP32, UINT8 = 8, 4, 1
CHECKPOINT_FLAGS = 4
"""The checkpoint agreement's flags in the control all-reduce (`Checkpointer.observe`: a
request file, a signal, a write in flight, a write failed)."""
ZERO_ALIGNMENT = 2
"""DeepSpeed's `nccl_start_alignment_factor`: ZeRO pads its flat group to 2 x D elements."""

Kind = Literal["send", "recv", "all_reduce", "all_gather", "broadcast"]


def boundary_element_bytes(precision: str) -> int:
    """Bytes per element of a stage-boundary activation or its gradient."""
    return ELEMENT_BYTES[precision]


def gradient_element_bytes(precision: str) -> int:
    """Bytes per element of a gradient reduction (data-parallel, tied embedding)."""
    return ELEMENT_BYTES[GRADIENT_TYPE[precision]]


def activation_bytes(*, microbatch: int, seq_len: int, hidden: int, precision: str) -> int:
    """One microbatch's hidden states at a stage boundary, whole (before any TP split)."""
    return microbatch * seq_len * hidden * boundary_element_bytes(precision)


@dataclass(frozen=True, slots=True)
class Call:
    """One communication call as one rank makes it."""

    kind: Kind
    group: tuple[int, ...]
    """Plan ranks in the group's order (a ring's order); (sender, receiver) for send/recv."""
    elements: int
    """Of this rank's tensor: the buffer reduced or broadcast, a gather's input, the message."""
    element_bytes: int
    root: int | None = None
    """The broadcast's source."""
    op: Literal["sum", "max"] | None = None
    """An all-reduce's reduction."""

    @property
    def nbytes(self) -> int:
        return self.elements * self.element_bytes


@dataclass(frozen=True, slots=True)
class Entry:
    """A call, how many times a rank makes it in one iteration, and what it carries."""

    call: Call
    count: int
    what: str


Ledger = dict[int, tuple[Entry, ...]]
"""Plan rank -> the calls it makes in one iteration."""


def calls(entries: Iterable[Entry]) -> Counter[Call]:
    """The calls of `entries` as a multiset."""
    found: Counter[Call] = Counter()
    for entry in entries:
        found[entry.call] += entry.count
    return found


def flows(call: Call, rank: int) -> list[tuple[int, Fraction]]:
    """(receiver, bytes) that `rank` sends in `call` (module docstring's convention)."""
    return [
        (to, Fraction(numerator, denominator)) for to, numerator, denominator in _flows(call, rank)
    ]


def _flows(
    call: Call, rank: int, position: Mapping[int, int] | None = None
) -> list[tuple[int, int, int]]:
    """`flows` as (receiver, numerator, denominator): exact without Fraction's cost, which
    dominates the zone traffic of a plan of thousands of ranks. `position` maps each rank of
    `call.group` to its index there, for a caller that meets one group many times (looking
    a rank up in a group of thousands, rank by rank, is quadratic)."""
    group, size = call.group, call.nbytes
    n = len(group)
    if call.kind == "send":
        return [(group[1], size, 1)]
    if call.kind == "recv" or n == 1:
        return []
    at = group.index(rank) if position is None else position[rank]
    successor = group[(at + 1) % n]
    if call.kind == "all_reduce":
        return [(successor, 2 * (n - 1) * size, n)]
    if call.kind == "all_gather":
        return [(successor, (n - 1) * size, 1)]
    assert call.root is not None
    start = group.index(call.root) if position is None else position[call.root]
    return [] if (at - start) % n == n - 1 else [(successor, size, 1)]


def sent_bytes(call: Call, rank: int) -> Fraction:
    """Bytes `rank` sends in `call`."""
    return sum((b for _, b in flows(call, rank)), Fraction(0))


def received_bytes(call: Call, rank: int) -> Fraction:
    """Bytes `rank` receives in `call`: what its predecessor sends it (the sender, for a
    recv)."""
    group = call.group
    if call.kind == "recv":
        return Fraction(call.nbytes)
    if call.kind == "send" or len(group) == 1:
        return Fraction(0)
    if call.kind == "broadcast" and rank == call.root:
        return Fraction(0)
    predecessor = group[group.index(rank) - 1]
    return sum((b for to, b in flows(call, predecessor) if to == rank), Fraction(0))


def rank_bytes(ledger: Ledger) -> dict[int, tuple[Fraction, Fraction]]:
    """Per plan rank, (bytes sent, bytes received) in one iteration."""
    return {
        rank: (
            sum((e.count * sent_bytes(e.call, rank) for e in entries), Fraction(0)),
            sum((e.count * received_bytes(e.call, rank) for e in entries), Fraction(0)),
        )
        for rank, entries in ledger.items()
    }


# -- the runtime's parameters ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Parameter:
    """One tensor of the runtime's parameter contract (`hetc.runtime.model.param_specs`)."""

    name: str
    elements: int
    """Of the whole tensor."""
    sharded: bool
    """Split equally over TP (else every TP rank holds it whole)."""

    def local(self, tp: int) -> int:
        """Elements one rank of a TP-`tp` replica holds."""
        return self.elements // tp if self.sharded else self.elements


TOKEN_TABLE = "embedding.tokens.weight"


def stage_parameters(
    arch: ModelArchitecture, first_block: int, end_block: int, holds: Sequence[str]
) -> list[Parameter]:
    """The parameters of a stage of blocks [first_block, end_block) that also holds `holds`,
    in the runtime's order (the order of `StageModule.named_parameters()`)."""
    h, d, f = arch.hidden, arch.resolved_head_dim, arch.resolved_ffn
    q, kv = arch.heads * d, arch.resolved_kv_heads * d
    bias = arch.linear_bias
    qkv_bias = bias if arch.qkv_bias is None else arch.qkv_bias
    table = padded_vocab(arch.vocab) * h
    found: list[Parameter] = []

    def norm(prefix: str) -> None:
        found.append(Parameter(f"{prefix}.weight", h, False))
        if arch.norm == "layernorm":
            found.append(Parameter(f"{prefix}.bias", h, False))

    def linear(prefix: str, outputs: int, inputs: int, *, column: bool, with_bias: bool) -> None:
        found.append(Parameter(f"{prefix}.weight", outputs * inputs, True))
        if with_bias:
            found.append(Parameter(f"{prefix}.bias", outputs, column))

    if "embedding" in holds or "token-table-copy" in holds:
        found.append(Parameter(TOKEN_TABLE, table, True))
    if "embedding" in holds and arch.position == "learned":
        rows = arch.max_positions + arch.position_offset
        found.append(Parameter("embedding.positions.weight", rows * h, False))
    for i in range(first_block, end_block):
        a, m = f"blocks.{i}.attention", f"blocks.{i}.mlp"
        norm(f"{a}.norm")
        for name, width in (("query", q), ("key", kv), ("value", kv)):
            linear(f"{a}.{name}", width, h, column=True, with_bias=qkv_bias)
        linear(f"{a}.output", h, q, column=False, with_bias=bias)
        norm(f"{m}.norm")
        for up in ("gate", "up") if arch.mlp == "swiglu" else ("fc1",):
            linear(f"{m}.{up}", f, h, column=True, with_bias=bias)
        linear(f"{m}.fc2", h, f, column=False, with_bias=bias)
    if "final-norm" in holds and arch.final_norm:
        norm("final_norm")
    if "head" in holds and not arch.tied_embeddings:
        found.append(Parameter("head.weight", table, True))
    return found


# -- the ledger -----------------------------------------------------------------------------


def iteration_ledger(plan: Plan, spec: Spec, topology: Topology | None = None) -> Ledger:
    """Every call each plan rank makes in one steady iteration of `plan` (module docstring);
    `topology` is the plan's (`topology_of`), given where the caller already has it."""
    if topology is None:
        topology = topology_of(plan, tied_embeddings=spec.model.tied_embeddings)
    ledger = _LedgerBuilder(plan, spec, topology)
    return {p.rank: tuple(ledger.rank(p)) for p in topology.processes}


class _LedgerBuilder:
    """The plan's groups and the settings every rank's calls depend on."""

    def __init__(self, plan: Plan, spec: Spec, topology: Topology) -> None:
        self.plan, self.spec, self.topology = plan, spec, topology
        self.arch = spec.model
        training = spec.training
        self.precision, self.zero = training.precision, training.zero_stage
        self.element = ELEMENT_BYTES[self.precision]
        self.gradient = gradient_element_bytes(self.precision)
        self.wire = boundary_element_bytes(self.precision)
        self.groups = {g.name: g.ranks for g in topology.groups}
        self.world = tuple(range(topology.world_size))
        self.stages = len(plan.stages)
        self.tied = self.arch.tied_embeddings and self.stages > 1
        self._stage_parameters: dict[int, list[Parameter]] = {}
        self._engine_stages = [
            self.zero in (1, 2) and len({r.tp for r in s.replicas}) == 1 for s in plan.stages
        ]
        tied_names = sorted(n for n in self.groups if n.startswith("tied-embedding/"))
        self._tied_chunks = int(tied_names[0].rsplit("of", 1)[1]) if tied_names else 0
        self._buckets: dict[tuple[int, int, int], tuple[list[int], int]] = {}
        """ZeRO reduce-bucket sizes and the elements a rank holds, by (stage, TP,
        data-parallel width): the same for every rank of that stage and TP degree."""

    def _engine_stage(self, stage: int) -> bool:
        """Whether the stage trains through DeepSpeed (`hetc.runtime.train.wants_engine`):
        ZeRO 1 or 2 and one TP degree over its replicas."""
        return self._engine_stages[stage]

    def rank(self, p: Process) -> list[Entry]:
        entries = self._boundaries(p) + self._layers(p)
        entries += self._engine(p) if self._engine_stage(p.stage) else self._synchronise(p)
        entries.append(self._control())
        return [e for e in entries if e.count > 0 and not _alone(e.call)]

    def _tp_group(self, p: Process) -> tuple[int, ...]:
        return self.groups[f"tp/stage{p.stage}/replica{p.replica}"]

    def _boundaries(self, p: Process) -> list[Entry]:
        """Activations in and out each forward, their gradients back each backward; chunks
        from a narrower neighbour are all-gathered over TP (`_receive_full`)."""
        micro = self.plan.microbatch_size * self.spec.training.seq_len * self.arch.hidden
        count = self.plan.pipelines[p.pipeline].microbatches
        tp_group = self._tp_group(p)
        entries: list[Entry] = []
        for direction, into, out in (
            (-1, "activation", "gradient"),
            (+1, "gradient", "activation"),
        ):
            transfers = boundary_transfers(self.plan, self.topology, p, direction)
            for t in transfers:
                size = boundary_chunk_elements(micro, t.chunks)
                entries.append(
                    Entry(
                        Call("recv", (t.peer, p.rank), size, self.wire), count, f"boundary {into}"
                    )
                )
                entries.append(
                    Entry(Call("send", (p.rank, t.peer), size, self.wire), count, f"boundary {out}")
                )
            if transfers and len(tp_group) > 1:
                local = boundary_chunk_elements(micro, transfers[0].chunks) * len(transfers)
                gather = Call("all_gather", tp_group, local, self.wire)
                entries.append(Entry(gather, count, f"boundary {into} over TP"))
        return entries

    def _layers(self, p: Process) -> list[Entry]:
        """TP all-reduces inside the stage's layers, for its microbatches and, on a ZeRO-2
        engine, its pad backwards (one token)."""
        tp_group = self._tp_group(p)
        if len(tp_group) == 1:
            return []
        training = self.spec.training
        own = self.plan.pipelines[p.pipeline].microbatches
        counts = {self.plan.microbatch_size * training.seq_len: own}
        pads = self._pads(p)
        if pads:
            counts[1] = counts.get(1, 0) + pads
        stage = self.plan.stages[p.stage]
        blocks = stage.end_block - stage.first_block
        # Recomputation runs a block's forward again, up to the last tensor its backward
        # saved (torch's non-reentrant checkpoint stops early): without dropout, that is the
        # MLP's second matmul, so only the attention's all-reduce runs twice; with dropout
        # the MLP's mask multiplies the reduced output, and both do.
        rows = 2 * blocks
        if training.activation_checkpointing:
            rows += 2 * blocks if training.dropout > 0 else blocks
        h = self.arch.hidden
        stream = self.element if self._engine_stage(p.stage) else FP32
        found: Counter[tuple[Call, str]] = Counter()
        for tokens, count in counts.items():
            hidden = tokens * h
            row = Call("all_reduce", tp_group, hidden, self.element)
            column = Call("all_reduce", tp_group, hidden, stream)
            found[row, "TP row-parallel output"] += rows * count
            found[column, "TP column-parallel input gradient"] += 2 * blocks * count
            if p.stage == 0:
                found[column, "TP vocabulary-parallel embedding"] += count
            if p.stage == self.stages - 1:
                found[column, "TP head input gradient"] += count
                maximum = Call("all_reduce", tp_group, tokens, FP32, op="max")
                found[maximum, "TP cross-entropy maximum"] += count
                sums = Call("all_reduce", tp_group, tokens, FP32)
                found[sums, "TP cross-entropy target logit and sum"] += 2 * count
        return [Entry(call, count, what) for (call, what), count in found.items()]

    def _pads(self, p: Process) -> int:
        """Zero-gradient backwards a ZeRO-2 engine adds to match the longest pipeline."""
        if self.zero != 2 or not self._engine_stage(p.stage):
            return 0
        longest = max(q.microbatches for q in self.plan.pipelines)
        return longest - self.plan.pipelines[p.pipeline].microbatches

    def _parameters(self, p: Process) -> list[Parameter]:
        """The stage's parameters, listed once per stage (every rank of a stage reads the
        same list, and a stage of a large model has thousands)."""
        found = self._stage_parameters.get(p.stage)
        if found is None:
            stage = self.plan.stages[p.stage]
            holds = stage_holds(self.plan, p.stage, self.arch.tied_embeddings)
            found = stage_parameters(self.arch, stage.first_block, stage.end_block, holds)
            self._stage_parameters[p.stage] = found
        return found

    def _control(self) -> Entry:
        """hetc's control values, over every rank in one fp64 all-reduce
        (`StageTrainer.agree`): the global loss, the clip's squared norm (when clipping), the
        fp16 overflow flag (under fp16) and the checkpoint agreement's flags."""
        fields = 1 + CHECKPOINT_FLAGS
        fields += self.spec.training.gradient_clipping > 0
        fields += self.precision == "fp16"
        return Entry(Call("all_reduce", self.world, fields, FP64), 1, "control values")

    def _tied_sums(self, p: Process) -> list[Entry]:
        """The token table's gradient summed over every holder, chunk by chunk."""
        if not self.tied or p.stage not in (0, self.stages - 1):
            return []
        chunks = self._tied_chunks
        tp = len(self._tp_group(p))
        mine = range(p.tp_rank * chunks // tp, (p.tp_rank + 1) * chunks // tp)
        size = padded_vocab(self.arch.vocab) * self.arch.hidden // chunks
        return [
            Entry(
                Call(
                    "all_reduce",
                    self.groups[f"tied-embedding/shard{c}of{chunks}"],
                    size,
                    self.gradient,
                ),
                1,
                "tied embedding gradient",
            )
            for c in mine
        ]

    def _synchronise(self, p: Process) -> list[Entry]:
        """hetc's own path (`StageTrainer._synchronise`): one all-reduce per shard group this
        rank holds (replicated gradients in chunk 0's), the replicated gradients broadcast over
        TP, the tied table summed."""
        stage = self.plan.stages[p.stage]
        chunks = max(r.tp for r in stage.replicas)
        tp_group = self._tp_group(p)
        tp = len(tp_group)
        parameters = [q for q in self._parameters(p) if not (self.tied and q.name == TOKEN_TABLE)]
        sharded = sum(q.elements for q in parameters if q.sharded) // chunks
        replicated = sum(q.elements for q in parameters if not q.sharded)
        entries: list[Entry] = []
        for c in range(p.tp_rank * chunks // tp, (p.tp_rank + 1) * chunks // tp):
            group = self.groups[f"dp/stage{p.stage}/shard{c}of{chunks}"]
            size = sharded + (replicated if c == 0 else 0)
            if size and len(group) > 1:
                call = Call("all_reduce", group, size, self.gradient)
                entries.append(Entry(call, 1, "data-parallel gradient"))
        if tp > 1 and replicated:
            root = tp_group[0]
            call = Call("broadcast", tp_group, replicated, self.gradient, root=root)
            entries.append(Entry(call, 1, "replicated gradient over TP"))
        return entries + self._tied_sums(p)

    def _engine(self, p: Process) -> list[Entry]:
        """A DeepSpeed ZeRO 1/2 engine's calls and hetc's around it (`StageEngine.step`)."""
        stage = self.plan.stages[p.stage]
        tp = stage.replicas[p.replica].tp
        dp_group = self.groups[f"dp/stage{p.stage}/shard{p.tp_rank}of{tp}"]
        tp_group = self._tp_group(p)
        rounds = 1
        if self.zero == 2:
            rounds = self.plan.pipelines[p.pipeline].microbatches + self._pads(p)
        found: Counter[tuple[Call, str]] = Counter()
        key = (p.stage, tp, len(dp_group))
        known = self._buckets.get(key)
        if known is None:
            local = [q.local(tp) for q in self._parameters(p)]
            bucket = reduce_bucket_elements(self.arch.parameter_count())
            sizes = _bucket_sizes(local, reverse=self.zero == 2, bucket=bucket, dp=len(dp_group))
            known = self._buckets[key] = (sizes, sum(local))
        sizes, held = known
        for size in sizes:
            call = Call("all_reduce", dp_group, size, self.gradient)
            found[call, "ZeRO reduce bucket"] += rounds
        entries = [Entry(call, count, what) for (call, what), count in found.items()]
        if self.tied and p.stage in (0, self.stages - 1):
            table = padded_vocab(self.arch.vocab) * self.arch.hidden // tp
            whole = Call("all_reduce", dp_group, table, FP32)
            entries.append(Entry(whole, 1, "tied table assembled (get_full_hp_grad)"))
        entries += self._tied_sums(p)
        groups = [dp_group] + ([tp_group] if len(tp_group) > 1 else [])
        for group in groups:
            if self.precision != "fp32":
                flag = Call("all_reduce", group, 1, UINT8, op="max")
                entries.append(Entry(flag, 1, "DeepSpeed overflow check"))
        d = len(dp_group)
        if d > 1:
            alignment = ZERO_ALIGNMENT * d
            padded = -(-held // alignment) * alignment
            gather = Call("all_gather", dp_group, padded // d, self.element)
            entries.append(Entry(gather, 1, "ZeRO updated weights"))
        return entries


def _alone(call: Call) -> bool:
    """A collective over a group of one, which the runtime does not make (it would move
    nothing): hetc's own path skips them, and its DeepSpeed engines' backend returns at once
    (`hetc.runtime.engine.SkipsGroupsOfOne`)."""
    return call.kind not in ("send", "recv") and len(call.group) == 1


def _bucket_sizes(local: Sequence[int], *, reverse: bool, bucket: int, dp: int) -> list[int]:
    """The all-reduces one reduction makes: gradients of `local` elements (parameter order,
    the order of ZeRO's flat group) reaching DeepSpeed's reduce bucket of `bucket` elements
    in that order or `reverse`d, the flat group cut into `dp` partitions."""
    sizes: list[int] = []
    filled = 0
    offsets, at = [], 0
    for numel in local:
        offsets.append(at)
        at += numel
    alignment = ZERO_ALIGNMENT * dp
    partition = -(-at // alignment) * alignment // dp
    order = list(zip(local, offsets, strict=True))
    for numel, offset in reversed(order) if reverse else order:
        if filled + numel > bucket and filled:
            sizes.append(filled)
            filled = 0
        if numel > bucket:
            sizes += _large_pieces(offset, numel, partition, bucket)
            continue
        filled += numel
    if filled:
        sizes.append(filled)
    return sizes


def _large_pieces(offset: int, numel: int, partition: int, bucket: int) -> list[int]:
    """A parameter larger than the bucket, reduced alone: its slices at the partition
    boundaries, grouped until a group exceeds the bucket (`allreduce_and_scatter`)."""
    pieces, start, group = [], offset, 0
    end = offset + numel
    while start < end:
        stop = min(end, (start // partition + 1) * partition)
        group += stop - start
        if group > bucket:
            pieces.append(group)
            group = 0
        start = stop
    return [*pieces, group] if group else pieces


def zone_traffic(ledger: Ledger, zone_of: Mapping[int, str]) -> dict[tuple[str, str], float]:
    """Bytes per iteration from zone to zone (pairs within a zone left out), for plan ranks
    placed in zones by `zone_of`."""
    total: defaultdict[tuple[str, str], float] = defaultdict(float)
    positions: dict[int, dict[int, int]] = {}
    """Each group's rank-to-index map by the group tuple's identity (ranks of one group share
    one tuple, which the ledger keeps alive while this runs)."""
    for rank, entries in ledger.items():
        here = zone_of[rank]
        for entry in entries:
            group = entry.call.group
            position = positions.get(id(group))
            if position is None:
                position = positions[id(group)] = {r: i for i, r in enumerate(group)}
            for to, numerator, denominator in _flows(entry.call, rank, position):
                if zone_of[to] != here:
                    total[here, zone_of[to]] += entry.count * numerator / denominator
    return dict(sorted(total.items()))
