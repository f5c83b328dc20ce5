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
- `links between nodes`: hops between two nodes of one zone (`inter_node` point-to-point,
  `LayerProfile.between_nodes`; nodes of different devices keep the spec's link);
- `links between zones`, `links between regions`: hops between zones of one region and
  between regions.

Whether a link is priced from a profile is read through `measured_link` alone, the one place
to extend when the profile format and the cost model learn another scope. `hetc plan`,
`hetc simulate` and report.md print the list; `--strict-profiles` refuses a plan it is not
empty for, with the commands that would measure what is missing (`fix_lines`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise

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
the same command started by torchrun on two nodes; no hetc command measures it."""


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


def measured_link(profile: LayerProfile | None, scope: str) -> bool:
    """Whether the cost model prices a hop of `scope` ("inter_node", "inter_zone",
    "inter_region") between nodes of the profiled device from `profile`. Today only the
    inter-node point-to-point fit is used (`LayerProfile.between_nodes`); links between zones
    and regions are the spec's `network:` figures whatever a profile holds."""
    if profile is None:
        return False
    if scope == "inter_node":
        return bool(profile.network.get("inter_node", {}).get("p2p"))
    return False


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
    for hop in _hops(plan, tied=spec.model.tied_embeddings):
        cpu = spec.devices[hop.a.device].kind == "cpu"
        for key, what in _hop_fallback(hop, by_device, cpu):
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
    link between nodes must be measured on two nodes, and what no command measures."""
    files = {p.device: p.source for p in profiles}
    lines: list[str] = []
    devices = sorted({f.device for f in fallbacks if f.fix == MEASURE})
    for device in devices:
        output = files.get(device) or f"{device.lower()}.json"
        lines.append(f"hetc profile measure {spec_file} --device {device} -o {output}")
    for device in sorted({f.device for f in fallbacks if f.fix == TORCHRUN}):
        output = files.get(device) or f"{device.lower()}.json"
        lines.append(
            "on two nodes of the device: torchrun --nnodes 2 --nproc-per-node 1"
            " --rdzv-backend c10d --rdzv-endpoint HOST:29500 $(which hetc) profile measure"
            f" {spec_file} --device {device} -o {output}"
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
    zone_a: str
    zone_b: str
    region_a: str
    region_b: str
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


def _hops(plan: Plan, *, tied: bool) -> Iterator[_Hop]:
    """Every transfer the simulator prices: pipeline sends, with `tied` embeddings the
    all-reduce of the token table between first and last stage, and each stage's
    data-parallel ring (one all-reduce fit inside one node; else hop by hop)."""
    nodes = {n.id: n for n in plan.nodes}

    def hop(a: Replica, b: Replica, collective: str = "p2p", devices: int = 2) -> _Hop:
        na, nb = nodes[a.node], nodes[b.node]
        same = a.node == b.node
        return _Hop(a, b, na.zone, nb.zone, na.region, nb.region, same, collective, devices)

    last = len(plan.stages) - 1
    for path in plan.pipelines:
        path_replicas = [plan.stages[i].replicas[j] for i, j in enumerate(path.replicas)]
        for a, b in pairwise(path_replicas):
            yield hop(a, b)
        if tied and last > 0:
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


def _hop_fallback(
    hop: _Hop, profiles: dict[str, LayerProfile], cpu: bool
) -> list[tuple[tuple[str, str, str], str]]:
    """The (device, term, fix) key and what is not measured of one hop, if anything."""
    a, b = hop.a.device, hop.b.device
    if hop.same_node:
        profile = profiles.get(a)
        term = "intra-node collectives"
        if profile is None:
            return [((a, term, MEASURE), "no profile")]
        # A ring inside one node without an all-reduce fit goes hop by hop over the
        # point-to-point fit, as the simulator prices it.
        if profile.bandwidth("intra_node", "p2p", 2) is not None or (
            hop.collective == "all_reduce"
            and profile.bandwidth("intra_node", "all_reduce", hop.devices) is not None
        ):
            return []
        return [((a, term, MEASURE), "collectives inside a node not measured")]
    if hop.zone_a == hop.zone_b:
        scope, term = "inter_node", "links between nodes"
    elif hop.region_a == hop.region_b:
        scope, term = "inter_zone", "links between zones"
    else:
        scope, term = "inter_region", "links between regions"
    if a != b:
        pair = " / ".join(sorted({a, b}))
        return [((pair, term, NOTHING), "the spec's network figure (nodes of two devices)")]
    profile = profiles.get(a)
    if measured_link(profile, scope):
        return []
    if scope != "inter_node":
        return [((a, term, NOTHING), "the spec's network figure (no profile measures it)")]
    # A CPU device's "nodes" in a local run are processes of one host: `hetc profile
    # measure` measures their link over loopback; a GPU's needs two real nodes.
    fix = MEASURE if cpu else TORCHRUN
    return [((a, term, fix), "no profile" if profile is None else "not measured")]


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
