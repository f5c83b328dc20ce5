"""Which terms of a plan's prediction rest on a formula rather than a measurement.

A device with a profile is priced from it wherever the profile covers the term, and by the
analytical model elsewhere (`hetc.costmodel.profile`): at a (microbatch, TP) point it did not
time, under activation checkpointing, on a link it did not measure. A prediction is only as
good as its weakest term, and "measured profiles" said nothing of which terms those were: a
plan at microbatch 8 from a profile of microbatches 1 and 2 predicted a tenth of the time its
measured points gave. So for a plan this lists, per device and per term, what is not measured:

- `layer times`: the plan's (microbatch, TP) points of that device its profile did not time;
- `activation memory`: measured per layer at the point, or the formula (no memory section,
  the point not measured, or activation checkpointing, which the profile's per-layer bytes
  do not describe);
- `intra-node collectives`: pipeline sends and data-parallel rings between devices of one
  node (the profile's `intra_node` fits);
- `links between nodes`, `links between zones`, `links between regions`: hops between two
  nodes of one zone, of two zones of a region, of two regions.

Whether a hop is measured is what `hetc.costmodel.pricing.LinkPricer` says of it, the pricing
the planner and the simulator both use, so this list cannot disagree with the prediction.
`hetc plan`, `hetc simulate` and report.md print the list; `--strict-profiles` refuses a plan
it is not empty for, with the commands that would measure what is missing (`fix_lines`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise

from hetc.costmodel.pricing import End, LinkPricer, scope_between
from hetc.costmodel.profile import LayerProfile
from hetc.plan import Plan, Replica
from hetc.schema.spec import Spec

TERMS = (
    "layer times",
    "activation memory",
    "intra-node collectives",
    "links between nodes",
    "links between zones",
    "links between regions",
)
MEASURE, TORCHRUN, NOTHING = "measure", "torchrun", ""
"""How a missing term could be measured: `hetc profile measure` on one node of the device;
the same command started by torchrun on two nodes (each naming its zone where the link
crosses zones, and its own device); no hetc command measures it."""


@dataclass(frozen=True, kw_only=True, slots=True, order=True)
class Fallback:
    """One device's term that rests (at least in part) on a formula."""

    device: str
    """A device name, or "A / B" for a link between nodes of two devices."""
    term: str
    """One of `TERMS`."""
    missing: str
    """What is not measured, "; "-separated where there are several."""
    fix: str
    """`MEASURE`, `TORCHRUN` or `NOTHING` (see there)."""

    def line(self) -> str:
        return f"{self.device}: {self.term}: {self.missing}"


def plan_coverage(spec: Spec, profiles: Sequence[LayerProfile], plan: Plan) -> list[Fallback]:
    """Every (device, term) of `plan`'s prediction that rests on a formula, sorted; empty
    when every term is measured. `profiles` are those the prediction used
    (`read_spec_profiles`), one per device."""
    by_device = {p.device: p for p in profiles}
    found: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    mbs = plan.microbatch_size
    checkpointing = spec.training.activation_checkpointing
    for device, tps in sorted(_points(plan).items()):
        profile = by_device.get(device)
        if profile is None:
            for term in TERMS[:2]:
                found[device, term, MEASURE].append("no profile")
            continue
        for tp in sorted(tps):
            point = f"microbatch {mbs} at TP {tp} not measured"
            timed = profile.lookup(mbs, tp, 0) is not None
            if not timed and not profile.ran_out_of_memory(mbs, tp):
                found[device, "layer times", MEASURE].append(point)
            if checkpointing:
                continue
            if not profile.memory:
                found[device, "activation memory", MEASURE].append(
                    "the profile has no memory section"
                )
            elif not profile.ran_out_of_memory(mbs, tp) and any(
                profile.activation_bytes(mbs, tp, i) is None for i in profile.layer_indices()
            ):
                found[device, "activation memory", MEASURE].append(point)
        if checkpointing:
            found[device, "activation memory", NOTHING].append(
                "formula under activation checkpointing (a profile measures layers that keep"
                " their activations)"
            )
    pricer = LinkPricer(spec, by_device)
    for hop in _hops(spec, plan):
        for key, what in _hop_fallback(hop, pricer, spec):
            found[key].append(what)
    return sorted(
        Fallback(device=d, term=t, missing="; ".join(dict.fromkeys(w)), fix=f)
        for (d, t, f), w in found.items()
    )


def fix_lines(
    fallbacks: Sequence[Fallback], spec_file: str, profiles: Sequence[LayerProfile]
) -> list[str]:
    """What would cover `fallbacks`: per device the `hetc profile measure` command (into its
    profile's file, where it keeps the points already measured), the torchrun form where the
    link between nodes must be measured on two nodes (with each node's zone where the link
    crosses zones or joins two devices), and what no command measures."""
    files = {p.device: p.source for p in profiles}
    lines: list[str] = []
    devices = sorted({f.device for f in fallbacks if f.fix == MEASURE})
    for device in devices:
        output = files.get(device) or f"{device.lower()}.json"
        lines.append(f"hetc profile measure {spec_file} --device {device} -o {output}")
    torchrun: defaultdict[str, set[str]] = defaultdict(set)
    for f in fallbacks:
        if f.fix == TORCHRUN:
            torchrun[f.device].add(f.term)
    for device, terms in sorted(torchrun.items()):
        # A link between zones, or between two devices, is filed by the nodes' zone names.
        devices = device.split(" / ")
        named = len(devices) > 1 or terms != {"links between nodes"}
        command = (
            "torchrun --nnodes 2 --nproc-per-node N --rdzv-backend c10d --rdzv-endpoint"
            f" HOST:29500 $(which hetc) profile measure {spec_file}"
        )
        ends = [
            f"--device {d} -o {files.get(d) or f'{d.lower()}.json'}"
            + (" --zone ITS-ZONE" if named else "")
            for d in devices
        ]
        if len(devices) == 1:
            lines.append(f"on two nodes of the device: {command} {ends[0]}")
        else:
            lines.append(
                f"on a node of each device: {command} {ends[0]} (on the {devices[1]} node:"
                f" {ends[1]})"
            )
    unmeasurable = [f"{f.device}: {f.term}" for f in fallbacks if f.fix == NOTHING]
    if unmeasurable:
        lines.append(
            f"no hetc command measures {', '.join(unmeasurable)}: drop --strict-profiles to"
            " accept their formulas, or change the spec so that the plan avoids them"
        )
    return lines


def coverage_lines(fallbacks: Sequence[Fallback]) -> list[str]:
    """The list as `hetc plan`, `hetc simulate` and report.md print it."""
    if not fallbacks:
        return ["every term measured"]
    return [f.line() for f in fallbacks]


@dataclass(frozen=True, slots=True)
class _Hop:
    """Two replicas that exchange data, and what: `p2p` (pipeline send, tied embedding,
    a ring's hop between nodes) or `all_reduce` over `devices` (a ring inside one node)."""

    a: Replica
    b: Replica
    end_a: End
    end_b: End
    same_node: bool
    collective: str
    devices: int


def _points(plan: Plan) -> dict[str, set[int]]:
    """device -> the TP degrees its replicas use (all at the plan's microbatch size)."""
    points: dict[str, set[int]] = defaultdict(set)
    for stage in plan.stages:
        for replica in stage.replicas:
            points[replica.device].add(replica.tp)
    return points


def _hops(spec: Spec, plan: Plan) -> Iterator[_Hop]:
    """Every transfer the simulator prices: pipeline sends, with tied embeddings the
    all-reduce of the token table between first and last stage, and each stage's
    data-parallel ring (one all-reduce fit inside one node; else hop by hop)."""
    nodes = {n.id: n for n in plan.nodes}
    zones = {z.name: z for z in spec.zones}
    nics = {(z.name, p.name): p.nic_bandwidth for z in spec.zones for p in z.pools}

    def end(r: Replica) -> End:
        node = nodes[r.node]
        return End(zones[node.zone], r.device, nics[node.zone, node.pool])

    def hop(a: Replica, b: Replica, collective: str = "p2p", devices: int = 2) -> _Hop:
        return _Hop(a, b, end(a), end(b), a.node == b.node, collective, devices)

    last = len(plan.stages) - 1
    for path in plan.pipelines:
        path_replicas = [plan.stages[i].replicas[j] for i, j in enumerate(path.replicas)]
        for a, b in pairwise(path_replicas):
            yield hop(a, b)
        if spec.model.tied_embeddings and last > 0:
            yield hop(path_replicas[0], path_replicas[-1])
    for stage in plan.stages:
        ring = stage.replicas
        if len(ring) < 2:
            continue
        if len({r.node for r in ring}) == 1:
            yield hop(ring[0], ring[1], "all_reduce", len(ring))
            continue
        for a, b in zip(ring, (*ring[1:], ring[0]), strict=True):
            yield hop(a, b)


_TERMS_BETWEEN = {
    "inter_node": "links between nodes",
    "inter_zone": "links between zones",
    "inter_region": "links between regions",
}


def _hop_fallback(
    hop: _Hop, pricer: LinkPricer, spec: Spec
) -> list[tuple[tuple[str, str, str], str]]:
    """The (device, term, fix) key and what is not measured of one hop, if anything."""
    a, b = hop.a.device, hop.b.device
    if hop.same_node:
        if pricer.inside_node(a, hop.collective, hop.devices).measured:
            return []
        term = "intra-node collectives"
        what = (
            "no profile" if a not in pricer.profiles else "collectives inside a node not measured"
        )
        return [((a, term, MEASURE), what)]
    if pricer.between_nodes(hop.end_a, hop.end_b, 1).measured:
        return []
    scope = scope_between(hop.end_a.zone, hop.end_b.zone)
    term = _TERMS_BETWEEN[scope]
    if a != b:
        pair = " / ".join(sorted({a, b}))
        return [((pair, term, TORCHRUN), "the spec's network figure (nodes of two devices)")]
    # A CPU device's "nodes" in a local run are processes of one host: `hetc profile
    # measure` measures their link over loopback; a GPU's, or one between zones, needs two
    # real nodes.
    fix = MEASURE if spec.devices[a].kind == "cpu" and scope == "inter_node" else TORCHRUN
    return [((a, term, fix), "no profile" if a not in pricer.profiles else "not measured")]


def refusal_lines(
    what: str, fallbacks: Sequence[Fallback], spec_file: str, profiles: Sequence[LayerProfile]
) -> list[str]:
    """What `--strict-profiles` prints when `what` (e.g. "plan 1's prediction") rests on a
    formula: the list, then one `To fix:` line with the commands that would measure it."""
    return [
        f"hetc: --strict-profiles: {what} rests on formulas where nothing was measured:",
        *(f"  {line}" for line in coverage_lines(fallbacks)),
        "To fix: " + "; ".join(fix_lines(fallbacks, spec_file, profiles)),
    ]
