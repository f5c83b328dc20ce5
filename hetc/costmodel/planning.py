"""The planner's cost model: iteration time and cost of a candidate given as replica counts.

The planner compares millions of candidates, so it scores a candidate before any Plan exists.
A candidate is a `Shape` (pipeline degree P, microbatch size, the block range of each stage,
data-parallel degree D) and an `Assignment`: for each stage, how many of its D replicas run
on each `ReplicaKind` (a spec pool, i.e. a device type in a zone, at a TP degree). The
search, the CP-SAT cross-check and the brute-force test oracle all optimise the function
`PlanningModel.estimate` defines, so "optimal" has one meaning. Its terms, for stage i with
the set U_i of kinds it uses (all maxima over U_i, or over pairs drawn from U_i):

    t_i   = max (forward + backward) per microbatch          (the stage's slowest replica)
    u_i   = max optimizer step (under ZeRO 1 and 2, of one replica's 1/D partition)
    s_i   = max send time of one microbatch's activations between a pool of U_i and a pool
            of U_(i+1) (the same time carries the gradient back), 0 after the last stage
    y_i   = max ring all-reduce time of the stage's gradients over D ranks, hop by hop, over
            every pair of kinds of U_i (a kind paired with itself included, so y_i depends
            on the set alone),
            plus, with tied embeddings and P > 1, the first and last stage's two-rank
            all-reduce of the embedding gradient over every (U_0, U_(P-1)) pair
    S     = max_i (t_i + s_i + s_(i-1))                       (the straggler period)
    F     = sum_i t_i + 2 sum_i s_i                           (fill and drain)
    m     = ceil(B / (mbs D))                                 (microbatches of the busiest pipeline)
    T     = F + (m - 1) S + max_i (y_i + u_i)

This is the schedule module's closed form with every pipeline as slow as the slowest replica
of each stage and the synchronisation after the slowest pipeline. The plan the builder makes
from the counts pairs the k-th fastest replicas of the stages into pipeline k and gives faster
pipelines more microbatches, so its closed form is at most T wherever transfers between
replicas that share a node are no slower than over the network (true of GPUs, whose NVLink or
PCIe beats the NIC; the simulator prices such hops on the intra-node link, which for a CPU
process's shared memory may be slower). For one kind per stage on distinct nodes the two are
equal (hops between nodes of one device in one zone that the device's profile measured are
priced by the measurement, `LayerProfile.between_nodes`, in both). T depends on the counts
only through which kinds are used, so it can be minimised
over sets, and money only through node counts:

    nodes_pool = ceil(sum of count x tp over the pool's kinds / gpus_per_node)
    cost       = T x sum_pool nodes x gpus_per_node x price + egress

Egress per iteration (the cost module's prices per ordered zone pair, taken at the worst pair
a term can use): every microbatch's activations and gradients across each stage boundary;
each stage's ring, whose replicas are ordered by zone so it crosses zones Z_i times when it
spans Z_i >= 2 zones, each crossing carrying 2 (D - 1) / D of the gradient bytes per TP rank
times the TP degree; the tied embedding's gradient between first and last stage per pipeline.

Byte sizes come from `traffic`, the one description of what the runtime sends: boundary
tensors in the compute type, gradient reductions in fp16 under fp16 and fp32 otherwise. The
simulator prices egress from that module's whole ledger, which also counts what this closed
form leaves out: ZeRO-2's reduction after every microbatch, ZeRO 1/2's gather of the updated
weights, TP and control collectives.

Memory is checked per kind (`tables.peak_memory`: ZeRO shards over D, stage i holds
min(P - i, m) microbatches in flight), so a kind that does not fit a stage is never used; a
(microbatch, TP) point its device's profile measured to run out of memory never fits.
With `measured_points` the model offers only what profiles measured: a device at a TP degree
its profile timed at some microbatch size, a microbatch size some such kind was timed at, and
a kind at a microbatch size only where that point was timed (`point_allowed`); a device
without a profile offers nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from itertools import pairwise
from operator import add, sub

from hetc.catalog import ModelArchitecture
from hetc.costmodel.classes import PoolClasses
from hetc.costmodel.compute import ComputeModel
from hetc.costmodel.memory import (
    FrameworkOverhead,
    StageShape,
    default_overhead,
    stage_parameters_per_rank,
    tied_table_parameters_per_rank,
)
from hetc.costmodel.network import MessageSizeCurve, ring_all_reduce_time, send_time
from hetc.costmodel.pricing import End, LinkPricer, slower_of
from hetc.costmodel.profile import LayerProfile
from hetc.costmodel.tables import StageTables, build_stage_tables, peak_memory
from hetc.costmodel.traffic import activation_bytes, gradient_element_bytes
from hetc.plan.settings import reduce_bucket_elements
from hetc.schema.spec import LinkClass, Pool, Spec, Zone

__all__ = [
    "Assignment",
    "Estimate",
    "PlanningModel",
    "PoolSlot",
    "ReplicaKind",
    "Shape",
    "valid_tp_degrees",
]


def valid_tp_degrees(arch: ModelArchitecture, gpus_per_node: int) -> tuple[int, ...]:
    """TP degrees a replica on one node may use: powers of two dividing the node's device
    count (so replicas pack whole nodes), the heads, the KV heads and the FFN width. The
    vocabulary is padded to a multiple of the degree, as Megatron does, so it never excludes one.
    """
    out = []
    tp = 1
    while tp <= gpus_per_node:
        if (
            gpus_per_node % tp == 0
            and arch.heads % tp == 0
            and arch.resolved_kv_heads % tp == 0
            and arch.resolved_ffn % tp == 0
        ):
            out.append(tp)
        tp *= 2
    return tuple(out)


@dataclass(frozen=True, slots=True)
class PoolSlot:
    """One pool of one zone of the spec, with its position in `PlanningModel.pools`."""

    index: int
    zone: Zone
    pool: Pool

    @property
    def label(self) -> str:
        return f"{self.pool.name}@{self.zone.name}"


@dataclass(frozen=True, slots=True)
class ReplicaKind:
    """A replica's device pool and TP degree; kinds are numbered pool by pool, TP ascending."""

    index: int
    pool: int
    device: str
    tp: int


@dataclass(frozen=True, slots=True)
class Shape:
    """The parallelisation skeleton a candidate fills with replicas."""

    microbatch: int
    boundaries: tuple[int, ...]
    """Block boundaries, 0 = b_0 < b_1 < ... < b_P = blocks: stage i runs [b_i, b_(i+1))."""
    pipelines: int
    """D: replicas per stage, one per pipeline."""

    @property
    def stages(self) -> int:
        return len(self.boundaries) - 1


StageKey = tuple[int, int, bool, bool]
"""(first_block, end_block, is_first, is_last): what a stage's gradient size depends on."""

Assignment = tuple[tuple[tuple[int, int], ...], ...]
"""For each stage, (kind index, replica count) pairs, kinds ascending, counts summing to D."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Estimate:
    """What `PlanningModel.estimate` says of one candidate."""

    iteration_time: float
    straggler: float
    fill: float
    sync: float
    """max_i (y_i + u_i): synchronisation and optimizer step after the last backward."""
    rate: float
    """USD per second of all rented nodes."""
    egress: float
    """USD per iteration."""
    nodes: tuple[int, ...]
    """Rented nodes per pool, in `PlanningModel.pools` order."""
    devices: int
    """Devices on those nodes (what max_gpus limits)."""
    problems: tuple[str, ...] = field(default=())
    """Why the candidate is not allowed (memory, quota, max_gpus, budget, throughput floor)."""

    @property
    def cost(self) -> float:
        """USD per iteration: rental for the iteration time plus egress."""
        return self.rate * self.iteration_time + self.egress

    @property
    def feasible(self) -> bool:
        return not self.problems


class PlanningModel:
    """Everything the planner looks up about one spec: pools, replica kinds, per-stage terms.

    Every term is cached on its arguments, so a search touching a (stage range, kind) twice
    computes it once. All seconds come from the same `tables`, `network` and `memory`
    functions `simulate` uses.
    """

    def __init__(
        self,
        spec: Spec,
        *,
        profiles: Sequence[LayerProfile] = (),
        overhead: FrameworkOverhead | Mapping[str, FrameworkOverhead] | None = None,
        measured_points: bool = False,
    ) -> None:
        self.spec = spec
        self.measured_points = measured_points
        self.arch = spec.model
        training = spec.training
        self.batch = training.global_batch_size
        self.blocks = self.arch.layers
        self.gradient_element = gradient_element_bytes(training.precision)
        """Bytes per element of a gradient reduction (`traffic`: fp16 in fp16, else fp32)."""
        self.mixed_tp_allowed = training.zero_stage == 0
        """Capability matrix: replicas of different TP share a stage only without ZeRO."""
        self._profiles = {p.device: p for p in profiles}
        self.pricer = LinkPricer(spec, self._profiles)
        self._links: dict[
            tuple[tuple[int, int, int], int], tuple[LinkClass, MessageSizeCurve, float]
        ] = {}
        self._overhead = overhead
        pools = [(z, p) for z in spec.zones for p in z.pools]
        self.pools = tuple(PoolSlot(i, z, p) for i, (z, p) in enumerate(pools))
        kinds: list[ReplicaKind] = []
        for slot in self.pools:
            for tp in valid_tp_degrees(self.arch, slot.pool.gpus_per_node):
                if self.point_allowed(slot.pool.device, tp):
                    kinds.append(ReplicaKind(len(kinds), slot.index, slot.pool.device, tp))
        self.kinds = tuple(kinds)
        self.classes = PoolClasses(
            pools, self.pricer.named, [k.pool for k in kinds], [k.tp for k in kinds]
        )
        """Pools by what prices them alike (`costmodel.classes`): every pair term is cached
        per class of pool pair, and questions over sets of kinds drop zones that add
        nothing, so memory and work stay bounded however many zones look alike."""
        self._models: dict[str, ComputeModel] = {}
        self._tables: dict[tuple[str, int, int], StageTables] = {}
        self._stage_time = cache(self._device_stage_time)
        self.layer_compute = cache(self._layer_compute)
        self._fits = cache(self._device_fits)
        self._sends: dict[tuple[tuple[int, int, int], int], float] = {}
        self._rings: dict[tuple[object, ...], float] = {}
        self._tieds: dict[tuple[tuple[int, int, int], int, int], float] = {}
        self.gradient_bytes = cache(self._gradient_bytes)
        """Per-TP-rank gradient bytes of a stage (`_gradient_bytes`), cached."""

    # -- structure ----------------------------------------------------------------------

    def microbatch_sizes(self) -> tuple[int, ...]:
        """Divisors of the global batch up to 16 (the range profiles measure), so the
        pipelines' shares always add up to the batch exactly; with `measured_points`, those
        some kind was timed at."""
        sizes = tuple(m for m in range(1, min(16, self.batch) + 1) if self.batch % m == 0)
        if not self.measured_points:
            return sizes
        return tuple(
            m for m in sizes if any(self.point_allowed(k.device, k.tp, m) for k in self.kinds)
        )

    def point_allowed(self, device: str, tp: int, microbatch: int | None = None) -> bool:
        """Whether a replica of `device` at `tp` (at `microbatch`, when given) may be used:
        never at a point its profile measured to run out of memory, and with
        `measured_points` only at a point its profile timed (at some microbatch size when
        none is given)."""
        profile = self._profiles.get(device)
        if (
            microbatch is not None
            and profile is not None
            and profile.ran_out_of_memory(microbatch, tp)
        ):
            return False
        if not self.measured_points:
            return True
        if profile is None:
            return False
        if microbatch is None:
            return any(tp in by_tp for by_tp in profile.times.values())
        return tp in profile.times.get(microbatch, {})

    def microbatches(self, shape: Shape) -> int:
        """m: microbatches the busiest pipeline processes with the batch spread evenly."""
        total = self.batch // shape.microbatch
        return -(-total // shape.pipelines)

    def layer_range(self, shape: Shape, stage: int) -> tuple[int, int]:
        """[first, end) in `compute.default_layout` indices: embedding 0, blocks, output end."""
        first_block, end_block = shape.boundaries[stage], shape.boundaries[stage + 1]
        first = 0 if stage == 0 else first_block + 1
        end = end_block + 2 if stage == shape.stages - 1 else end_block + 1
        return first, end

    def in_flight(self, shape: Shape, stage: int) -> int:
        return max(1, min(shape.stages - stage, self.microbatches(shape)))

    # -- per-kind terms -----------------------------------------------------------------

    def tables(self, device: str, tp: int, microbatch: int) -> StageTables:
        key = (device, tp, microbatch)
        if key not in self._tables:
            if device not in self._models:
                training = self.spec.training
                self._models[device] = ComputeModel(
                    arch=self.arch,
                    device=self.spec.devices[device],
                    seq_len=training.seq_len,
                    precision=training.precision,
                    activation_checkpointing=training.activation_checkpointing,
                    profile=self._profiles.get(device),
                )
            self._tables[key] = build_stage_tables(
                self._models[device],
                tp=tp,
                microbatch=microbatch,
                zero_stage=self.spec.training.zero_stage,
                optimizer=self.spec.training.optimizer.type,
                bucket_bytes=reduce_bucket_elements(self.arch.parameter_count()),
                overhead=self._framework_overhead(device),
                price_per_device_second=0.0,
            )
        return self._tables[key]

    @property
    def profiles(self) -> tuple[LayerProfile, ...]:
        """The measured profiles this model uses, one per device, by device name."""
        return tuple(self._profiles[d] for d in sorted(self._profiles))

    def _framework_overhead(self, device: str) -> FrameworkOverhead:
        given = self._overhead
        if isinstance(given, FrameworkOverhead):
            return given
        fallback = default_overhead(self.spec.devices[device])
        return dict(given or {}).get(device, fallback)

    def stage_time(
        self, kind: int, microbatch: int, first: int, end: int
    ) -> tuple[float, float, float]:
        """(forward + backward, backward, optimizer step) of one microbatch on `kind`,
        cached per device and TP (kinds of one device and TP in many pools share it)."""
        k = self.kinds[kind]
        return self._stage_time(k.device, k.tp, microbatch, first, end)

    def _device_stage_time(
        self, device: str, tp: int, microbatch: int, first: int, end: int
    ) -> tuple[float, float, float]:
        t = self.tables(device, tp, microbatch)
        fwd = t.forward[end] - t.forward[first]
        bwd = t.backward[end] - t.backward[first]
        return fwd + bwd, bwd, t.update[end] - t.update[first]

    def span_times(
        self, kind: int, microbatch: int, spans: Iterable[tuple[int, int]]
    ) -> list[float]:
        """`stage_time(kind, microbatch, first, end)[0]` of each (first, end) in `spans`:
        the same arithmetic, to the last bit, at one table lookup for all of them (the
        stage cover reads every run of blocks at three positions)."""
        k = self.kinds[kind]
        t = self.tables(k.device, k.tp, microbatch)
        f, b = t.forward, t.backward
        return [(f[end] - f[first]) + (b[end] - b[first]) for first, end in spans]

    def _layer_compute(self, device: str, tp: int, microbatch: int) -> tuple[float, ...]:
        """Each layer's `stage_time(...)[0]` alone, in layout order, for a replica of
        `device` at `tp`: the same arithmetic, so a bound built from these equals one built
        from `stage_time` to the last bit, at one table lookup per device and TP instead of
        one cached call per layer and kind."""
        t = self.tables(device, tp, microbatch)
        f, b = t.forward, t.backward
        n = t.layers
        return tuple(map(add, map(sub, f[1 : n + 1], f[:n]), map(sub, b[1 : n + 1], b[:n])))

    def fits(self, kind: int, microbatch: int, first: int, end: int, dp: int, flight: int) -> bool:
        """Whether `kind` holds layers [first, end) in memory (cached per device and TP)."""
        k = self.kinds[kind]
        return self._fits(k.device, k.tp, microbatch, first, end, dp, flight)

    def _device_fits(
        self, device: str, tp: int, microbatch: int, first: int, end: int, dp: int, flight: int
    ) -> bool:
        if not self.point_allowed(device, tp, microbatch):
            return False
        t = self.tables(device, tp, microbatch)
        return peak_memory(t, first, end, dp, flight) <= t.capacity

    def kind_fits(self, shape: Shape, stage: int, kind: int) -> bool:
        first, end = self.layer_range(shape, stage)
        return self.fits(
            kind, shape.microbatch, first, end, shape.pipelines, self.in_flight(shape, stage)
        )

    def activation_bytes(self, microbatch: int) -> float:
        """One microbatch's boundary activation (or its gradient), as `traffic` prices it."""
        training = self.spec.training
        return float(
            activation_bytes(
                microbatch=microbatch,
                seq_len=training.seq_len,
                hidden=self.arch.hidden,
                precision=training.precision,
            )
        )

    def end(self, pool: int) -> End:
        """A node of pool `pool` as one end of a transfer (`pricing.End`)."""
        slot = self.pools[pool]
        return End(slot.zone, slot.pool.device, slot.pool.nic_bandwidth)

    def measured_link(
        self, pool_a: int, pool_b: int, flows: int
    ) -> tuple[LinkClass, MessageSizeCurve, float]:
        """The link between replicas of two pools, its curve and NIC rate, for `flows`
        devices per node sending at once: the hop `pricing.LinkPricer` prices between their
        nodes, as the simulator does. Two replicas of one pool may also share a node (where
        the node holds more than `flows` devices: the placement decides), and a ring of n
        of them may even stay inside one (priced by the node's n-device all-reduce), so
        there the hop is the slowest of those (`pricing.slower_of`): the estimate is never
        below the simulator's price of any placement."""
        key = (self.classes.pair(pool_a, pool_b), flows)
        found = self._links.get(key)
        if found is None:
            hop = self.pricer.between_nodes(self.end(pool_a), self.end(pool_b), flows)
            slot = self.pools[pool_a]
            gpn = slot.pool.gpus_per_node
            if pool_a == pool_b and gpn > flows:
                device = slot.pool.device
                inside = (
                    self.pricer.inside_node(device, "p2p", 2),
                    *(self.pricer.inside_node(device, "all_reduce", n) for n in range(2, gpn + 1)),
                )
                hop = slower_of(hop, inside, flows)
            found = self._links[key] = (hop.link, hop.curve, hop.nic)
        return found

    def send(self, pool_a: int, pool_b: int, microbatch: int) -> float:
        """One microbatch's activations from a node of pool a to one of pool b, cached per
        class of pool pair."""
        key = (self.classes.pair(pool_a, pool_b), microbatch)
        found = self._sends.get(key)
        if found is None:
            link, curve, nic = self.measured_link(pool_a, pool_b, 1)
            found = self._sends[key] = send_time(
                self.activation_bytes(microbatch), link, nic_bandwidth=nic, curve=curve
            )
        return found

    def _gradient_bytes(self, stage_key: StageKey, tp: int) -> float:
        """Per-TP-rank gradient bytes of a stage; stage_key = (first_block, end_block,
        is_first, is_last), as `stage_key` returns."""
        first_block, end_block, is_first, is_last = stage_key
        shape = StageShape(
            first_block=first_block,
            end_block=end_block,
            has_embedding=is_first,
            has_head=is_last,
            tp=tp,
            microbatch=1,
            in_flight=1,
        )
        return float(stage_parameters_per_rank(self.arch, shape) * self.gradient_element)

    def ring(self, kind_a: int, kind_b: int, stage_key: StageKey, dp: int) -> float:
        """Ring all-reduce of the stage's gradients over `dp` ranks when every hop is as slow
        as the one between kinds a and b, cached per class of pool pair and TP degrees."""
        ka, kb = self.kinds[kind_a], self.kinds[kind_b]
        key = (self.classes.pair(ka.pool, kb.pool), ka.tp, kb.tp, stage_key, dp)
        found = self._rings.get(key)
        if found is None:
            found = self._rings[key] = self._ring(ka, kb, stage_key, dp)
        return found

    def _ring(self, ka: ReplicaKind, kb: ReplicaKind, stage_key: StageKey, dp: int) -> float:
        flows = max(ka.tp, kb.tp)
        link, curve, nic = self.measured_link(ka.pool, kb.pool, flows)
        return ring_all_reduce_time(
            self.gradient_bytes(stage_key, min(ka.tp, kb.tp)),
            dp,
            link,
            flows_on_nic=flows,
            nic_bandwidth=nic,
            curve=curve,
        )

    def tied(self, kind_first: int, kind_last: int) -> float:
        """The tied embedding's two-rank all-reduce between the two kinds, cached per class
        of pool pair and TP degrees."""
        ka, kb = self.kinds[kind_first], self.kinds[kind_last]
        key = (self.classes.pair(ka.pool, kb.pool), ka.tp, kb.tp)
        found = self._tieds.get(key)
        if found is None:
            link, curve, nic = self.measured_link(ka.pool, kb.pool, 1)
            nbytes = tied_table_parameters_per_rank(self.arch, ka.tp) * self.gradient_element
            found = self._tieds[key] = ring_all_reduce_time(
                float(nbytes), 2, link, nic_bandwidth=nic, curve=curve
            )
        return found

    def egress_price(self, pool_a: int, pool_b: int) -> float:
        """USD per byte from pool a's zone to pool b's (0 within a zone)."""
        if self.classes.zone[pool_a] == self.classes.zone[pool_b]:
            return 0.0
        za, zb = self.pools[pool_a].zone, self.pools[pool_b].zone
        network = self.spec.network
        return network.egress_inter_zone if za.region == zb.region else network.egress_inter_region

    def stage_key(self, shape: Shape, stage: int) -> StageKey:
        return (
            shape.boundaries[stage],
            shape.boundaries[stage + 1],
            stage == 0,
            stage == shape.stages - 1,
        )

    # -- candidates ---------------------------------------------------------------------

    def estimate(self, shape: Shape, assignment: Assignment) -> Estimate:
        """Iteration time, money and constraint violations of one candidate (see module doc)."""
        problems: list[str] = []
        dp = shape.pipelines
        used = [tuple(k for k, _ in stage) for stage in assignment]
        for i, stage in enumerate(assignment):
            if sum(c for _, c in stage) != dp or any(c < 1 for _, c in stage):
                problems.append(f"stage {i}: replica counts {stage} do not add up to D = {dp}")
            tps = {self.kinds[k].tp for k in used[i]}
            if len(tps) > 1 and not self.mixed_tp_allowed:
                problems.append(
                    f"stage {i}: mixes TP degrees {sorted(tps)}, which needs zero_stage 0"
                    " (capability cell mixed-tp-stage)"
                )
            for k in used[i]:
                if not self.kind_fits(shape, i, k):
                    problems.append(f"stage {i}: {self.describe(k)} runs out of memory")
        straggler, fill, sync, total = self.time_of_sets(shape, used)
        nodes = self.nodes(assignment)
        problems += self.resource_problems(nodes)
        rate = self.rental_rate(nodes)
        egress = self.egress(shape, used)
        estimate = Estimate(
            iteration_time=total,
            straggler=straggler,
            fill=fill,
            sync=sync,
            rate=rate,
            egress=egress,
            nodes=nodes,
            devices=self.rented_devices(nodes),
        )
        problems += self.objective_problems(estimate)
        return replace(estimate, problems=tuple(problems)) if problems else estimate

    def describe(self, kind: int) -> str:
        k = self.kinds[kind]
        return f"{k.device} TP{k.tp} in {self.pools[k.pool].label}"

    def time_of_sets(
        self, shape: Shape, used: Sequence[Sequence[int]]
    ) -> tuple[float, float, float, float]:
        """(S, F, max_i(y_i + u_i), T) for the kinds each stage uses (counts do not matter)."""
        stages, dp, mbs = shape.stages, shape.pipelines, shape.microbatch
        straggler, fill = self.pace_of_sets(shape, used)
        sync = [0.0] * stages
        for i in range(stages):
            first, end = self.layer_range(shape, i)
            sync[i] = self.stage_sync(used[i], self.stage_key(shape, i), dp, mbs, first, end)
        if stages > 1:
            tied = self.tied_time(used[0], used[-1])
            sync[0] += tied
            sync[-1] += tied
        worst_sync = max(sync)
        total = fill + (self.microbatches(shape) - 1) * straggler + worst_sync
        return straggler, fill, worst_sync, total

    def pace_of_sets(self, shape: Shape, used: Sequence[Sequence[int]]) -> tuple[float, float]:
        """(S, F) of `time_of_sets`, the same arithmetic without the rings, which cost the
        most: a search that knows a lower bound on max_i(y_i + u_i) drops most candidates on
        these two alone."""
        stages, mbs = shape.stages, shape.microbatch
        t = [0.0] * stages
        for i in range(stages):
            first, end = self.layer_range(shape, i)
            t[i] = self.stage_compute(used[i], mbs, first, end)
        sends = [self.send_between(used[i], used[i + 1], mbs) for i in range(stages - 1)]
        padded = [0.0, *sends, 0.0]
        straggler = max(t[i] + padded[i] + padded[i + 1] for i in range(stages))
        fill = sum(t, 0.0) + 2 * sum(sends, 0.0)
        return straggler, fill

    def stage_compute(self, kinds: Sequence[int], mbs: int, first: int, end: int) -> float:
        """t_i: the slowest kind's forward + backward of one microbatch over [first, end)
        (over the kinds of zones that differ: the others repeat a device and TP)."""
        (kinds,) = self.classes.keep(tuple(kinds))
        return max(self.stage_time(k, mbs, first, end)[0] for k in kinds)

    def stage_sync(
        self, kinds: Sequence[int], key: StageKey, dp: int, mbs: int, first: int, end: int
    ) -> float:
        """y_i + u_i without the tied embedding: the worst ring hop over every pair of kinds
        (a kind with itself included), then the slowest optimizer step."""
        ring = 0.0
        if dp > 1:
            (kinds,) = self.classes.keep(tuple(kinds))
            for x, a in enumerate(kinds):
                for b in kinds[x:]:
                    ring = max(ring, self.ring(a, b, key, dp))
        return ring + max(self.update_time(k, mbs, first, end, dp) for k in kinds)

    def update_time(self, kind: int, mbs: int, first: int, end: int, dp: int) -> float:
        """u_i of one kind: its optimizer step over [first, end); under ZeRO 1 and 2 each of
        the D replicas steps its 1/D partition of the optimizer state (the all-gather of
        the stepped weights is in the ring's second half), so 1/D of a whole step."""
        update = self.stage_time(kind, mbs, first, end)[2]
        return update / dp if self.spec.training.zero_stage >= 1 else update

    def tied_time(self, first_kinds: Sequence[int], last_kinds: Sequence[int]) -> float:
        """The tied embedding's two-rank all-reduce between first and last stage (P > 1)."""
        if not self.arch.tied_embeddings:
            return 0.0
        first_kinds, last_kinds = self.classes.keep(tuple(first_kinds), tuple(last_kinds))
        return max(self.tied(a, b) for a in first_kinds for b in last_kinds)

    def send_between(self, kinds_a: Sequence[int], kinds_b: Sequence[int], mbs: int) -> float:
        """s_i: the slowest activation send between a pool of one stage and one of the next."""
        kinds = self.kinds
        kinds_a, kinds_b = self.classes.keep(tuple(kinds_a), tuple(kinds_b))
        return max(self.send(kinds[a].pool, kinds[b].pool, mbs) for a in kinds_a for b in kinds_b)

    def _worst_price(self, kinds_a: Sequence[int], kinds_b: Sequence[int]) -> float:
        """The highest egress price between a pool of one and a pool of the other (prices
        are never negative)."""
        kinds = self.kinds
        kinds_a, kinds_b = self.classes.keep(tuple(kinds_a), tuple(kinds_b))
        pools_a = {kinds[a].pool for a in kinds_a}
        pools_b = {kinds[b].pool for b in kinds_b}
        return max((self.egress_price(a, b) for a in pools_a for b in pools_b), default=0.0)

    def boundary_egress(self, kinds_a: Sequence[int], kinds_b: Sequence[int], mbs: int) -> float:
        """USD per iteration for every microbatch's activations and gradients across one
        stage boundary, at the worst zone pair it may cross."""
        samples_bytes = self.activation_bytes(mbs) * (self.batch // mbs)
        return 2 * samples_bytes * self._worst_price(kinds_a, kinds_b)

    def ring_egress(self, kinds: Sequence[int], key: StageKey, dp: int) -> float:
        """USD per iteration of one stage's ring: Z_i zone crossings when it spans Z_i >= 2."""
        zones = {self.pools[self.kinds[k].pool].zone.name for k in kinds}
        if dp < 2 or len(zones) < 2:
            return 0.0
        tps = [self.kinds[k].tp for k in kinds]
        per_hop = 2 * (dp - 1) / dp * self.gradient_bytes(key, min(tps)) * max(tps)
        return len(zones) * per_hop * self._worst_price(kinds, kinds)

    def tied_egress(self, first_kinds: Sequence[int], last_kinds: Sequence[int], dp: int) -> float:
        """USD per iteration of the tied embedding's gradient, both ways, per pipeline."""
        if not self.arch.tied_embeddings:
            return 0.0
        first_kinds, last_kinds = self.classes.keep(tuple(first_kinds), tuple(last_kinds))
        return max(
            2
            * dp
            * tied_table_parameters_per_rank(self.arch, self.kinds[a].tp)
            * self.gradient_element
            * self.egress_price(self.kinds[a].pool, self.kinds[b].pool)
            for a in first_kinds
            for b in last_kinds
        )

    def nodes(self, assignment: Assignment) -> tuple[int, ...]:
        gpus = [0] * len(self.pools)
        for stage in assignment:
            for k, count in stage:
                kind = self.kinds[k]
                gpus[kind.pool] += count * kind.tp
        return tuple(
            -(-g // slot.pool.gpus_per_node) for g, slot in zip(gpus, self.pools, strict=True)
        )

    def rental_rate(self, nodes: Sequence[int]) -> float:
        return sum(
            (
                n * slot.pool.gpus_per_node * slot.pool.price
                for n, slot in zip(nodes, self.pools, strict=True)
            ),
            0.0,
        )

    def rented_devices(self, nodes: Sequence[int]) -> int:
        return sum(n * slot.pool.gpus_per_node for n, slot in zip(nodes, self.pools, strict=True))

    def resource_problems(self, nodes: Sequence[int]) -> list[str]:
        problems = [
            f"{slot.label}: {n} nodes of {slot.pool.gpus_per_node} exceed its quota of"
            f" {slot.pool.quota} devices"
            for n, slot in zip(nodes, self.pools, strict=True)
            if n > slot.pool.max_nodes
        ]
        limit = self.spec.constraints.max_gpus
        rented = self.rented_devices(nodes)
        if limit is not None and rented > limit:
            problems.append(f"rents {rented} devices, over max_gpus {limit}")
        return problems

    def objective_problems(self, estimate: Estimate) -> list[str]:
        """Budget and throughput-floor violations of an otherwise valid candidate."""
        constraints = self.spec.constraints
        problems = []
        budget = constraints.max_cost_per_iteration
        if budget is not None and estimate.cost > budget:
            problems.append(
                f"costs {estimate.cost:.4g} USD per iteration, over the budget of {budget:.4g}"
            )
        floor = constraints.min_throughput
        if floor is not None and 1.0 / estimate.iteration_time < floor:
            problems.append(
                f"does {1.0 / estimate.iteration_time:.4g} iterations/s, under the floor of"
                f" {floor:.4g}"
            )
        return problems

    def egress(self, shape: Shape, used: Sequence[Sequence[int]]) -> float:
        """USD per iteration of the traffic crossing zones (see the module docstring)."""
        mbs, dp = shape.microbatch, shape.pipelines
        total = sum((self.boundary_egress(a, b, mbs) for a, b in pairwise(used)), 0.0)
        total += sum(
            (self.ring_egress(kinds, self.stage_key(shape, i), dp) for i, kinds in enumerate(used)),
            0.0,
        )
        if shape.stages > 1:
            total += self.tied_egress(used[0], used[-1], dp)
        return total
