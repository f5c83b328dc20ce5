"""Evaluate one plan under one spec: iteration time, throughput, memory per rank, cost.

This is where the pieces meet: `compute` gives each layer's seconds on each device, `network`
the transfers and collectives, `schedule` turns per-stage numbers into an iteration (the event
simulator is authoritative; the closed form is reported beside it), `memory` each rank's
peak and `cost` the money. Choices made here, each documented where it is made:

- a pipeline stage's activations (and, backwards, their gradients) cross to the next stage
  once per microbatch, not once per TP rank (the split or gather happens on the fast side);
- a stage's data-parallel gradient all-reduce runs, per TP rank, as a ring over the stage's
  replicas, bounded by the slowest link of the ring; all TP ranks of a node do it at once, so
  they share the node's NIC. Replicas with mixed TP degrees synchronise the shard size of the
  smallest TP degree (hetc's chunked synchronisation moves each element once per replica);
- with tied embeddings and more than one stage, the last stage holds a copy of the token
  table only (positions stay on the first stage, as in Megatron's pipeline), and the first and
  last stages all-reduce that table's gradient, counted in both stages' synchronisation;
- the optimizer update runs once per iteration, after synchronisation.
"""

from __future__ import annotations

import itertools
import os
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from hetc.catalog import (
    DeviceType,
    ModelArchitecture,
    architecture_differences,
    architecture_from_mapping,
)
from hetc.costmodel.compute import ComputeModel, LayerTimes, default_layout, layer_work
from hetc.costmodel.cost import IterationCost, budget_to_train, cost_per_million_tokens
from hetc.costmodel.cost import iteration_cost as price_iteration
from hetc.costmodel.memory import (
    FrameworkOverhead,
    MemoryBreakdown,
    StageShape,
    check_fits,
    default_overhead,
    rank_memory,
    stage_parameters_per_rank,
    tied_table_parameters_per_rank,
)
from hetc.costmodel.network import ring_all_reduce_time, send_time
from hetc.costmodel.pricing import End, Hop, LinkPricer
from hetc.costmodel.profile import LayerProfile, ProfileError, read_profile
from hetc.costmodel.schedule import (
    PipelineTimes,
    Timeline,
    closed_form_iteration,
    simulate_1f1b,
)
from hetc.costmodel.traffic import (
    activation_bytes,
    gradient_element_bytes,
    iteration_ledger,
    zone_traffic,
)
from hetc.plan import Node, Plan, PlanIssue, Replica
from hetc.plan.settings import reduce_bucket_elements
from hetc.plan.topology import topology_of
from hetc.schema.spec import Spec, Zone
from hetc.units import plural


@dataclass(frozen=True, kw_only=True, slots=True)
class RankReport:
    """One process of the plan: where it runs, what it holds, how busy it is."""

    key: str
    """`<node id>#<local rank>`."""
    device: str
    stage: int
    replica: int
    tp_rank: int
    blocks: tuple[int, int]
    memory: MemoryBreakdown
    capacity: float
    busy_fraction: float
    problem: str | None
    """None when the rank's memory fits; else what is over and by how much."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Simulation:
    """Everything `hetc simulate` prints about one plan."""

    iteration_time: float
    """Seconds, from the event simulator."""
    closed_form_time: float
    samples_per_second: float
    tokens_per_second: float
    achieved_flops: float
    """Model FLOP/s (forward + backward, no recomputation)."""
    peak_flops: float
    """Sum of the used devices' dense peak at the training precision."""
    cost: IterationCost
    cost_per_million_tokens: float
    budget: tuple[float, float] | None
    """(seconds, USD) to train `training.tokens`, when the spec gives it."""
    ranks: tuple[RankReport, ...]
    traffic: dict[tuple[str, str], float]
    """Bytes per iteration from zone to zone: every call of the iteration
    (`traffic.iteration_ledger`: pipeline, data-parallel, tied-embedding, ZeRO, control)."""
    timeline: Timeline

    @property
    def mfu(self) -> float:
        return self.achieved_flops / self.peak_flops if self.peak_flops else 0.0

    @property
    def fits(self) -> bool:
        return all(r.problem is None for r in self.ranks)


def simulate(
    plan: Plan,
    spec: Spec,
    *,
    profiles: Sequence[LayerProfile] = (),
    overhead: FrameworkOverhead | Mapping[str, FrameworkOverhead] | None = None,
) -> Simulation:
    """Evaluate `plan` for `spec` (the plan must be consistent: see `plan_problems`).

    `profiles` are measured per-layer times (see `read_spec_profiles`); a device with one uses
    its numbers exactly wherever they cover the (microbatch, TP) point, the formula elsewhere.
    `overhead` is the framework's fixed memory per process: one for every device, or a map by
    device name (devices it does not name get the default), since CUDA contexts differ by GPU.
    """
    context = _Context(plan, spec, {p.device: p for p in profiles})
    pipelines = [context.pipeline_times(p) for p in range(len(plan.pipelines))]
    sync = [context.sync_time(i) for i in range(len(plan.stages))]
    update = [context.update_time(i) for i in range(len(plan.stages))]
    timeline = simulate_1f1b(pipelines, sync, update)
    closed = closed_form_iteration(pipelines, sync, update)
    iteration = timeline.iteration_time
    traffic = context.traffic()
    cost = price_iteration(plan, spec, iteration, traffic)
    tokens = spec.training.global_batch_size * spec.training.seq_len
    return Simulation(
        iteration_time=iteration,
        closed_form_time=closed,
        samples_per_second=spec.training.global_batch_size / iteration,
        tokens_per_second=tokens / iteration,
        achieved_flops=context.model_flops() / iteration,
        peak_flops=context.peak_flops(),
        cost=cost,
        cost_per_million_tokens=cost_per_million_tokens(cost, spec),
        budget=budget_to_train(cost, iteration, spec),
        ranks=context.ranks(timeline, _overheads(overhead, spec)),
        traffic=traffic,
        timeline=timeline,
    )


def _overheads(
    given: FrameworkOverhead | Mapping[str, FrameworkOverhead] | None, spec: Spec
) -> Callable[[str], FrameworkOverhead]:
    """Overhead by device name, from one value, a map, or the device kind's default."""
    if isinstance(given, FrameworkOverhead):
        return lambda _device: given
    table = dict(given or {})
    return lambda device: table.get(device) or default_overhead(spec.devices[device])


class _Context:
    """Lookups shared by the steps of one simulation (zones, nodes, compute models)."""

    def __init__(self, plan: Plan, spec: Spec, profiles: dict[str, LayerProfile]) -> None:
        self.plan, self.spec, self.profiles = plan, spec, profiles
        self.arch: ModelArchitecture = spec.model
        self.zones: dict[str, Zone] = {z.name: z for z in spec.zones}
        self.nodes: dict[str, Node] = {n.id: n for n in plan.nodes}
        self.nic = {(z.name, p.name): p.nic_bandwidth for z in spec.zones for p in z.pools}
        self.gradient_element = gradient_element_bytes(spec.training.precision)
        self.pricer = LinkPricer(spec, profiles)
        self._models: dict[str, ComputeModel] = {}
        self._stage_times: dict[tuple[int, str, int], LayerTimes] = {}

    def device(self, replica: Replica) -> DeviceType:
        return self.spec.devices[replica.device]

    def model(self, replica: Replica) -> ComputeModel:
        if replica.device not in self._models:
            self._models[replica.device] = ComputeModel(
                arch=self.arch,
                device=self.device(replica),
                seq_len=self.spec.training.seq_len,
                precision=self.spec.training.precision,
                activation_checkpointing=self.spec.training.activation_checkpointing,
                profile=self.profiles.get(replica.device),
            )
        return self._models[replica.device]

    def layer_indices(self, stage: int) -> range:
        """Indices into `compute.default_layout`: embedding 0, blocks 1..L, output end L+1."""
        first, end = self.plan.stages[stage].first_block, self.plan.stages[stage].end_block
        start = 0 if stage == 0 else first + 1
        stop = end + 2 if stage == len(self.plan.stages) - 1 else end + 1
        return range(start, stop)

    def stage_times(self, stage: int, replica: Replica) -> LayerTimes:
        """The stage's summed layer times on the replica's device at its TP degree, computed
        once per (stage, device, TP): a plan of thousands of replicas has a few such kinds."""
        key = (stage, replica.device, replica.tp)
        found = self._stage_times.get(key)
        if found is None:
            model, mbs = self.model(replica), self.plan.microbatch_size
            parts = [model.layer_times(i, mbs, replica.tp) for i in self.layer_indices(stage)]
            found = LayerTimes(
                sum(p.forward for p in parts),
                sum(p.backward for p in parts),
                sum(p.update for p in parts),
            )
            self._stage_times[key] = found
        return found

    def measured_activations(self, stage: int, replica: Replica) -> list[float] | None:
        """The profile's activation bytes of every layer of the stage, or None when the
        device has no profile or it lacks one of them at this (microbatch, TP)."""
        profile = self.profiles.get(replica.device)
        if profile is None:
            return None
        mbs = self.plan.microbatch_size
        found = [profile.activation_bytes(mbs, replica.tp, i) for i in self.layer_indices(stage)]
        return None if any(v is None for v in found) else [float(v or 0.0) for v in found]

    def replica(self, stage: int, index: int) -> Replica:
        return self.plan.stages[stage].replicas[index]

    def end(self, replica: Replica) -> End:
        node = self.nodes[replica.node]
        return End(self.zones[node.zone], replica.device, self.nic[node.zone, node.pool])

    def hop(self, a: Replica, b: Replica, *, flows: int = 1) -> Hop:
        """How a flow from replica a's node to replica b's is priced (`pricing.LinkPricer`):
        inside one node the device's intra-node link, between nodes the most specific
        measured link, else the spec's."""
        if a.node == b.node:
            return self.pricer.inside_node(a.device, "p2p", 2)
        return self.pricer.between_nodes(self.end(a), self.end(b), flows)

    def activation_bytes(self) -> float:
        """One microbatch's hidden states at a stage boundary (sent once, not per TP rank),
        as `traffic` prices them."""
        training = self.spec.training
        return float(
            activation_bytes(
                microbatch=self.plan.microbatch_size,
                seq_len=training.seq_len,
                hidden=self.arch.hidden,
                precision=training.precision,
            )
        )

    def pipeline_times(self, p: int) -> PipelineTimes:
        path = self.plan.pipelines[p]
        replicas = [self.replica(i, j) for i, j in enumerate(path.replicas)]
        times = [self.stage_times(i, r) for i, r in enumerate(replicas)]
        sends = []
        for a, b in itertools.pairwise(replicas):
            hop = self.hop(a, b)
            sends.append(
                send_time(self.activation_bytes(), hop.link, nic_bandwidth=hop.nic, curve=hop.curve)
            )
        return PipelineTimes(
            forward=tuple(t.forward for t in times),
            backward=tuple(t.backward for t in times),
            send_activation=tuple(sends),
            send_gradient=tuple(sends),
            microbatches=path.microbatches,
        )

    def gradient_bytes(self, stage: int) -> float:
        """Per-TP-rank gradient bytes the stage's ring carries (smallest TP's shard)."""
        tp = min(r.tp for r in self.plan.stages[stage].replicas)
        shape = self.shape(stage, tp, 1)
        return float(stage_parameters_per_rank(self.arch, shape) * self.gradient_element)

    def shape(self, stage: int, tp: int, in_flight: int) -> StageShape:
        last = len(self.plan.stages) - 1
        s = self.plan.stages[stage]
        return StageShape(
            first_block=s.first_block,
            end_block=s.end_block,
            has_embedding=stage == 0,
            has_head=stage == last,
            tp=tp,
            microbatch=self.plan.microbatch_size,
            in_flight=in_flight,
        )

    def ring(self, replicas: tuple[Replica, ...], flows: int) -> list[Hop]:
        """The distinct hops of a ring over `replicas` in their order: one intra-node
        all-reduce hop when the ring never leaves a node, else each consecutive pair's hop
        (each with its own curve: a step takes as long as its slowest hop)."""
        if len({r.node for r in replicas}) == 1:
            return [self.pricer.inside_node(replicas[0].device, "all_reduce", len(replicas))]
        hops: list[Hop] = []
        for a, b in zip(replicas, (*replicas[1:], replicas[0]), strict=True):
            hop = self.hop(a, b, flows=flows)
            if hop not in hops:
                hops.append(hop)
        return hops

    def sync_time(self, stage: int) -> float:
        replicas = self.plan.stages[stage].replicas
        seconds = 0.0
        if len(replicas) > 1:
            flows = max(r.tp for r in replicas)
            nbytes = self.gradient_bytes(stage)
            seconds += max(
                ring_all_reduce_time(
                    nbytes,
                    len(replicas),
                    hop.link,
                    flows_on_nic=flows,
                    nic_bandwidth=hop.nic,
                    curve=hop.curve,
                )
                for hop in self.ring(replicas, flows)
            )
        return seconds + self.tied_embedding_time(stage)

    def tied_embedding_time(self, stage: int) -> float:
        """First and last stage all-reduce the tied token table's gradient, pair by pair."""
        last = len(self.plan.stages) - 1
        if not self.arch.tied_embeddings or last == 0 or stage not in (0, last):
            return 0.0
        worst = 0.0
        for path in self.plan.pipelines:
            first, final = self.replica(0, path.replicas[0]), self.replica(last, path.replicas[-1])
            hop = self.hop(first, final)
            nbytes = tied_table_parameters_per_rank(self.arch, first.tp) * self.gradient_element
            seconds = ring_all_reduce_time(
                float(nbytes), 2, hop.link, nic_bandwidth=hop.nic, curve=hop.curve
            )
            worst = max(worst, seconds)
        return worst

    def update_time(self, stage: int) -> float:
        """The stage's slowest optimizer step; under ZeRO 1 and 2 each replica steps its 1/D
        partition of the optimizer state."""
        replicas = self.plan.stages[stage].replicas
        update = max(self.stage_times(stage, r).update for r in replicas)
        return update / len(replicas) if self.spec.training.zero_stage >= 1 else update

    def traffic(self) -> dict[tuple[str, str], float]:
        """Bytes per iteration from zone to zone: every call of the iteration, as
        `traffic.iteration_ledger` lists them, on ring-algorithm flows."""
        topology = topology_of(self.plan, tied_embeddings=self.arch.tied_embeddings)
        zone_of = {p.rank: self.nodes[p.node].zone for p in topology.processes}
        return zone_traffic(iteration_ledger(self.plan, self.spec, topology), zone_of)

    def model_flops(self) -> float:
        """FLOPs of one iteration's forward and backward at TP 1 (no recomputation)."""
        seq, precision = self.spec.training.seq_len, self.spec.training.precision
        per_sample, block = 0.0, 0
        for kinds in default_layout(self.arch):
            for kind in kinds:
                work = layer_work(
                    self.arch,
                    kind,
                    seq_len=seq,
                    microbatch=1,
                    tp=1,
                    block=block,
                    precision=precision,
                )
                per_sample += work.forward.flops + work.backward.flops
            block += "block" in kinds
        return per_sample * self.spec.training.global_batch_size

    def peak_flops(self) -> float:
        precision = self.spec.training.precision
        return sum(
            r.tp * self.device(r).peak_flops[precision]
            for s in self.plan.stages
            for r in s.replicas
        )

    def ranks(
        self, timeline: Timeline, overhead: Callable[[str], FrameworkOverhead]
    ) -> tuple[RankReport, ...]:
        """One report per rank. The pipelines through each replica are indexed once, and a
        rank's memory is computed once per (stage, device, TP, microbatches in flight), the
        only inputs `rank_memory` reads that vary within a plan."""
        reports = []
        stages = len(self.plan.stages)
        memories: dict[tuple[int, str, int, int], MemoryBreakdown] = {}
        for i, s in enumerate(self.plan.stages):
            through: defaultdict[int, list[int]] = defaultdict(list)
            for p, path in enumerate(self.plan.pipelines):
                through[path.replicas[i]].append(p)
            for j, replica in enumerate(s.replicas):
                paths = through[j]
                microbatches = sum(self.plan.pipelines[p].microbatches for p in paths)
                in_flight = max(1, min(stages - i, microbatches))
                kind = (i, replica.device, replica.tp, in_flight)
                memory = memories.get(kind)
                if memory is None:
                    memory = rank_memory(
                        self.arch,
                        self.shape(i, replica.tp, in_flight),
                        seq_len=self.spec.training.seq_len,
                        precision=self.spec.training.precision,
                        optimizer=self.spec.training.optimizer.type,
                        zero_stage=self.spec.training.zero_stage,
                        dp=len(s.replicas),
                        checkpointing=self.spec.training.activation_checkpointing,
                        bucket_bytes=reduce_bucket_elements(self.arch.parameter_count()),
                        overhead=overhead(replica.device),
                        measured_activations=self.measured_activations(i, replica),
                    )
                    memories[kind] = memory
                busy = 1.0 - min(timeline.bubble_fraction(p, i) for p in paths)
                capacity = self.device(replica).memory
                profile = self.profiles.get(replica.device)
                mbs = self.plan.microbatch_size
                oom = profile is not None and profile.ran_out_of_memory(mbs, replica.tp)
                for tp_rank, local in enumerate(replica.local_ranks):
                    key = f"{replica.node}#{local}"
                    reports.append(
                        RankReport(
                            key=key,
                            device=replica.device,
                            stage=i,
                            replica=j,
                            tp_rank=tp_rank,
                            blocks=(s.first_block, s.end_block),
                            memory=memory,
                            capacity=capacity,
                            busy_fraction=busy,
                            problem=(
                                f"{key}: {replica.device} ran out of memory at microbatch"
                                f" {mbs}, TP {replica.tp} when profiled ({profile.source})"
                                if oom and profile is not None
                                else check_fits(memory, capacity, key)
                            ),
                        )
                    )
        return tuple(reports)


def plan_spec_problems(plan: Plan, spec: Spec) -> list[str]:
    """Why `plan` cannot be evaluated for `spec`: nodes from pools or zones the spec lacks,
    or more nodes of a pool than its quota allows."""
    return [issue.message for issue in plan_spec_issues(plan, spec)]


def plan_spec_issues(plan: Plan, spec: Spec) -> list[PlanIssue]:
    """`plan_spec_problems` at the plan's offending value: a node's zone, pool, region,
    device or size, or the first node of a pool past its quota."""
    zones = {z.name: z for z in spec.zones}
    pools = {(z.name, p.name): p for z in spec.zones for p in z.pools}
    problems: list[PlanIssue] = []
    rented: dict[tuple[str, str], int] = defaultdict(int)
    for node in plan.nodes:
        rented[node.zone, node.pool] += node.devices
    used: dict[tuple[str, str], int] = defaultdict(int)
    for i, node in enumerate(plan.nodes):
        zone = zones.get(node.zone)
        if zone is None:
            problems.append(
                PlanIssue(
                    ("nodes", i, "zone"),
                    f"node {node.id}: the spec has no zone {node.zone!r}"
                    f" (its zones: {', '.join(sorted(zones))})",
                )
            )
            continue
        pool = pools.get((node.zone, node.pool))
        if pool is None:
            problems.append(
                PlanIssue(
                    ("nodes", i, "pool"),
                    f"node {node.id}: the spec has no pool {node.pool!r} in zone {node.zone!r}"
                    f" (its pools: {', '.join(p.name for p in zone.pools)})",
                )
            )
            continue
        if zone.region != node.region:
            problems.append(
                PlanIssue(
                    ("nodes", i, "region"),
                    f"node {node.id}: zone {zone.name!r} is in region {zone.region!r},"
                    f" not {node.region!r}",
                )
            )
        if pool.device != node.device:
            problems.append(
                PlanIssue(
                    ("nodes", i, "device"),
                    f"node {node.id}: is {node.device}, but pool {pool.name!r} rents {pool.device}",
                )
            )
        if pool.gpus_per_node != node.devices:
            problems.append(
                PlanIssue(
                    ("nodes", i, "devices"),
                    f"node {node.id}: has {node.devices} devices, but pool {pool.name!r}"
                    f" rents nodes of {pool.gpus_per_node}",
                )
            )
        key = (node.zone, node.pool)
        used[key] += node.devices
        if used[key] > pool.quota >= used[key] - node.devices:
            problems.append(
                PlanIssue(
                    ("nodes", i),
                    f"pool {pool.name!r} in zone {node.zone!r}: the plan rents {rented[key]}"
                    f" devices, over its quota of {pool.quota} (at most"
                    f" {plural(pool.max_nodes, 'node')} of {pool.gpus_per_node}); this is the first"
                    " node past it",
                )
            )
    return problems


def read_profiles_for_command(
    spec: Spec,
    spec_dir: str,
    spec_file: str,
    extra: Sequence[str],
    echo: Callable[..., None],
) -> list[LayerProfile] | None:
    """`read_spec_profiles` for a command: warnings on stderr, and a refused profile printed
    (its line and its `To fix:`) with None returned, for the command to exit 1."""
    try:
        return read_spec_profiles(
            spec,
            spec_dir,
            extra=extra,
            warn=lambda message: echo(f"hetc: warning: {message}", err=True),
            spec_file=spec_file,
        )
    except ProfileError as exc:
        echo(str(exc))
        if exc.to_fix:
            echo(f"To fix: {exc.to_fix}")
        return None


def read_spec_profiles(
    spec: Spec,
    spec_dir: str,
    *,
    extra: Sequence[str] = (),
    warn: Callable[[str], None] = lambda _message: None,
    spec_file: str = "SPEC",
) -> list[LayerProfile]:
    """The spec's `profiles:` files (paths relative to the spec) and `extra` ones (paths as
    given, e.g. `hetc compile --profile`), each checked against what the spec trains.

    Refused with a `ProfileError` naming the file and the mismatch, and what to do: another
    model (name, the recorded architecture, or the number of layers), another sequence length
    or precision (its times are another computation's), two profiles for one device. Warned
    about and skipped: a device no pool of the spec rents.
    """
    found: dict[str, LayerProfile] = {}
    names = [os.path.join(spec_dir, name) for name in spec.profiles] + list(extra)
    for path in names:
        profile = read_profile(path)
        where = profile.source
        device = next((d for d in spec.devices if d.casefold() == profile.device.casefold()), None)
        if device is None:
            warn(f"{where}: profiles {profile.device!r}, which no pool of the spec rents: ignored")
            continue
        remeasure = (
            f"list a profile of the spec's training, measured with: hetc profile measure"
            f" {spec_file} --device {device} -o NEW_PROFILE.json"
        )
        check_profile_model(profile, spec, remeasure)
        if profile.seq_len != spec.training.seq_len:
            raise ProfileError(
                f"{where}: measured at seq_len {profile.seq_len}; the spec trains seq_len"
                f" {spec.training.seq_len}",
                remeasure,
            )
        if profile.precision != spec.training.precision:
            raise ProfileError(
                f"{where}: measured at {profile.precision}; the spec trains"
                f" {spec.training.precision}, whose layers run other kernels at another speed",
                remeasure,
            )
        if device in found:
            raise ProfileError(
                f"{where}: a second profile for {device} (first: {found[device].source})",
                "list one profile per device",
            )
        found[device] = replace(profile, device=device)
    return list(found.values())


def check_profile_model(
    profile: LayerProfile,
    spec: Spec,
    to_fix: str = "profile the spec's model (hetc profile measure)",
) -> None:
    """Refuse a profile of another model: its layers are not the ones the spec trains.

    A profile that records the architecture it timed serves exactly the specs that train that
    architecture, whatever either calls it (a measured custom model, or Sailor's Megatron
    builds of OPT-350M and GPT-Neo-2.7B, which are not the catalog's); one that records none
    serves the model of its name with its number of layers."""
    where = profile.source
    if profile.architecture is not None:
        try:
            timed = architecture_from_mapping(dict(profile.architecture))
        except (TypeError, ValueError, KeyError) as exc:
            raise ProfileError(
                f"{where}: `architecture` is not a model's shape ({exc})", to_fix
            ) from None
        differ = architecture_differences(timed, spec.model)
        if differ:
            raise ProfileError(
                f"{where}: profiled {profile.model}, another model than the spec's"
                f" {spec.model_name} ({'; '.join(differ[:3])}, profile's vs spec's)",
                to_fix,
            )
    elif profile.model.casefold() != spec.model_name.casefold():
        raise ProfileError(
            f"{where}: profiles model {profile.model!r}; the spec trains {spec.model_name!r}",
            to_fix,
        )
    layers = profile.layer_indices()
    wanted = list(range(spec.model.layers + 2))
    if layers != wanted:
        raise ProfileError(
            f"{where}: times layers {layers[0]}..{layers[-1]} ({len(layers)}); the spec's model"
            f" has {len(wanted)} (embedding, {spec.model.layers} blocks, output end)",
            to_fix,
        )
