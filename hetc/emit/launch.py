"""What every launcher shares: the nodes that start processes, the sites that schedule them,
the rendezvous, and the `Launcher` protocol (`hetc.emit.launchers` holds one module per launcher).

Every node gets a torchrun script with its logical id as a literal (`HETC_NODE`), so it can be
started by hand or by any scheduler: the Slurm step, a SkyPilot task and a Kubernetes pod all
run the node script whose plan index they hold. User strings reach scripts through
`shlex.quote` only; a site's `prologue` is shell code by definition and is written as given to
`launch/<site>.prologue.sh`, which the scripts source (so shellcheck judges hetc's scripts, not
the user's prologue).

Every script resumes by default (the runtime does, unless HETC_FROM_SCRATCH is set, which
`--from-scratch` does) and stands between its signals and torchrun: torchrun passes on
whatever it handles and exits 1 whatever its workers returned, so the node script runs it in
the background with USR1, INT and HUP ignored, turns USR1 into a checkpoint request and TERM,
INT or HUP into one SIGTERM to torchrun, and exits 76 (`hetc.plan.outcome`) after such a stop.
docs/compile.md has the measurements behind these choices.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

import jinja2

from hetc.plan import Plan
from hetc.plan.outcome import EXIT_PREEMPTED
from hetc.plan.topology import Topology
from hetc.schema.spec import Pool, Site, Spec

DEFAULT_RDZV_PORT = 29500
MAX_RESTARTS = 0
"""torchrun's restarts by default: none. torchrun exits 1 whatever its workers returned and
restarts every local worker after any failure, so it would restart a rank that stopped on
SIGTERM (exit 76) and wait out its rendezvous timeout for a node that is gone (exit 75 on the
survivors). Whoever runs the script (Slurm's requeue, `hetc launch`, a user) resumes instead:
every run starts from the newest complete checkpoint. HETC_MAX_RESTARTS turns them back on."""
TERM_GRACE = 25
"""Seconds the ranks get to checkpoint after SIGTERM (HETC_TERM_GRACE, which the scripts
export so that the runtime and torchrun agree): under Slurm's default KillWait of 30 s."""
SHUTDOWN_MARGIN = 5
"""torchrun waits HETC_TERM_GRACE plus this between its SIGTERM to the workers and SIGKILL."""
CHECKPOINT_SIGNAL_LEAD = 120
"""Seconds before the time limit at which Slurm sends USR1 to the batch shell."""
MAX_TCP_STREAMS = 64
"""NCCL's limit on NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD."""
MAX_SOCKET_THREADS = 16


@cache
def environment() -> jinja2.Environment:
    """The templates' jinja2 environment (strict undefined, `sh` quoting filter)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("hetc", "templates"),
        autoescape=False,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["sh"] = shlex.quote
    env.tests["expandable"] = lambda text: "$" in text or "`" in text
    return env


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchNode:
    index: int
    id: str
    pool: str
    zone: str
    region: str
    device: str
    devices: int
    processes: int

    @property
    def script(self) -> str:
        return f"node{self.index:04d}.sh"


def launch_nodes(plan: Plan, topology: Topology) -> list[LaunchNode]:
    """The plan's nodes that start processes (a node with none would only idle)."""
    counts = {n.id: 0 for n in plan.nodes}
    for process in topology.processes:
        counts[process.node] += 1
    return [
        LaunchNode(
            index=i,
            id=n.id,
            pool=n.pool,
            zone=n.zone,
            region=n.region,
            device=n.device,
            devices=n.devices,
            processes=counts[n.id],
        )
        for i, n in enumerate(plan.nodes)
        if counts[n.id]
    ]


def nccl_stream_environment(spec: Spec, plan: Plan) -> list[tuple[str, str]]:
    """NCCL's TCP streams per connection, from the spec's link classes, where the plan crosses
    zones or regions (Atlas: many streams per WAN link). Threads x sockets stays <= 64."""
    regions = {n.region for n in plan.nodes}
    zones = {n.zone for n in plan.nodes}
    network = spec.network
    streams = 1
    if len(regions) > 1:
        streams = max(streams, network.inter_region.tcp_streams)
    if len(zones) > 1:
        streams = max(streams, network.inter_zone.tcp_streams)
    for link in network.links:
        if set(link.between) <= zones | regions and link.tcp_streams:
            streams = max(streams, link.tcp_streams)
    streams = min(streams, MAX_TCP_STREAMS)
    if streams <= 1:
        return []
    threads = min(MAX_SOCKET_THREADS, streams)
    return [
        ("NCCL_SOCKET_NTHREADS", str(threads)),
        ("NCCL_NSOCKS_PERTHREAD", str(max(1, streams // threads))),
    ]


def site_file_name(site: Site, index: int) -> str:
    """`<site>.sbatch` when the name is a plain file name, else `site<index>.sbatch`."""
    plain = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", site.name) is not None
    return f"{site.name if plain else f'site{index}'}.sbatch"


def prologue_file_name(site: Site, index: int) -> str:
    """The site's prologue, kept in its own file: it is the user's shell code, sourced by the
    scripts, so that the scripts hetc writes stay checkable on their own."""
    return site_file_name(site, index).removesuffix(".sbatch") + ".prologue.sh"


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolNodes:
    """The nodes of one pool at one site, in plan order: one Slurm het-job component, one
    SkyPilot task, one Kubernetes indexed Job."""

    zone: str
    pool: Pool
    cpu: bool
    nodes: tuple[LaunchNode, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchSite:
    """A site that starts some of the plan's nodes: one of the spec's `sites`, or, for a zone
    no site names, an implicit site of that zone alone (scheduler None: node scripts only,
    unless `--launcher` asks for more)."""

    site: Site
    index: int
    """Position in the spec's `sites`; implicit sites follow them."""
    scheduler: str | None
    pools: tuple[PoolNodes, ...]
    whole_plan: bool
    """Whether this site starts every node (then it can name the rendezvous host itself)."""
    stem: str
    """The stem of this site's launch file names: its name where that is a plain file name
    (and no earlier site's), else `site<index>`."""

    @property
    def nodes(self) -> tuple[LaunchNode, ...]:
        return tuple(n for p in self.pools for n in p.nodes)


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchContext:
    """What a launcher needs from the compiled plan. The command each node runs is its node
    script, `bash launch/<LaunchNode.script>` from the compiled output, whatever starts it."""

    spec: Spec
    plan: Plan
    topology: Topology
    nodes: tuple[LaunchNode, ...]
    """Every node that starts processes, in plan order."""
    sites: tuple[LaunchSite, ...]
    prologues: Mapping[str, str]
    """Site name -> its prologue file under launch/ (for sites that have one)."""
    rdzv_port: int
    common: Mapping[str, Any]
    """Values every template reads (version, spec name, plan hash, node count, ...)."""


class Launcher(Protocol):
    """One way of starting the plan's nodes. `files` returns text by path under the output
    directory (deterministic: the same context gives the same bytes); the compiler writes them
    with the rest of the output, atomically. A path ending in `.sh` or `.sbatch` (but a
    prologue) is written executable."""

    name: str
    """What `hetc compile --launcher` and a site's `scheduler` call it."""

    def files(self, context: LaunchContext, sites: tuple[LaunchSite, ...]) -> dict[str, str]:
        """The files that start `sites` (those of the context this launcher was asked for)."""
        ...


def _pool_of(spec: Spec, zone: str, pool: str) -> Pool:
    return next(p for z in spec.zones if z.name == zone for p in z.pools if p.name == pool)


def launch_sites(spec: Spec, nodes: tuple[LaunchNode, ...]) -> tuple[LaunchSite, ...]:
    """The spec's sites that start nodes, then one implicit site per zone no site names, in
    the order the nodes appear; each site's pools in the order their first node appears."""
    site_of = {zone: site for site in spec.sites for zone in site.zones}
    implicit: dict[str, Site] = {}
    for node in nodes:
        if node.zone not in site_of and node.zone not in implicit:
            implicit[node.zone] = Site(name=node.zone, scheduler="torchrun", zones=(node.zone,))
    listed: list[tuple[int, Site, str | None]] = [
        (i, s, s.scheduler) for i, s in enumerate(spec.sites)
    ]
    listed += [(len(spec.sites) + i, s, None) for i, s in enumerate(implicit.values())]
    result: list[LaunchSite] = []
    for index, site, scheduler in listed:
        groups: dict[tuple[str, str], list[LaunchNode]] = {}
        for node in nodes:
            if node.zone in site.zones:
                groups.setdefault((node.zone, node.pool), []).append(node)
        if not groups:
            continue
        pools = tuple(
            PoolNodes(
                zone=zone,
                pool=(pool := _pool_of(spec, zone, name)),
                cpu=spec.devices[pool.device].kind == "cpu",
                nodes=tuple(members),
            )
            for (zone, name), members in groups.items()
        )
        whole = sum(len(p.nodes) for p in pools) == len(nodes)
        stem = site_file_name(site, index).removesuffix(".sbatch")
        if any(r.stem == stem for r in result):
            stem = f"site{index}"
        result.append(
            LaunchSite(
                site=site,
                index=index,
                scheduler=scheduler if scheduler != "torchrun" else None,
                pools=pools,
                whole_plan=whole,
                stem=stem,
            )
        )
    return tuple(result)


def launch_context(spec: Spec, plan: Plan, topology: Topology) -> LaunchContext:
    """Everything a launcher reads, from the spec, the plan and its topology."""
    nodes = tuple(launch_nodes(plan, topology))
    prologues = {
        site.name: prologue_file_name(site, index)
        for index, site in enumerate(spec.sites)
        if site.prologue
    }
    common = {
        "hetc_version": plan.hetc_version,
        "spec_name": spec.name,
        "plan_hash": topology.plan_hash,
        "nodes": len(nodes),
        "max_restarts": MAX_RESTARTS,
        "term_grace": TERM_GRACE,
        "shutdown_margin": SHUTDOWN_MARGIN,
        "exit_preempted": EXIT_PREEMPTED,
        "default_endpoint": f"127.0.0.1:{DEFAULT_RDZV_PORT}",
        "environment": nccl_stream_environment(spec, plan),
    }
    return LaunchContext(
        spec=spec,
        plan=plan,
        topology=topology,
        nodes=nodes,
        sites=launch_sites(spec, nodes),
        prologues=prologues,
        rdzv_port=DEFAULT_RDZV_PORT,
        common=common,
    )


def job_name(spec: Spec) -> str:
    """The job's name for schedulers: `hetc-<spec name>`, letters, digits and . _ - only."""
    return "hetc-" + (re.sub(r"[^A-Za-z0-9._-]+", "-", spec.name).strip("-") or "job")


def dns_label(text: str, limit: int = 63) -> str:
    """`text` as a DNS label (RFC 1123: lowercase letters, digits and -, at most `limit`
    characters, a letter or digit at each end), for Kubernetes object names and host names;
    a name that had to be cut keeps a short hash of the whole, so two names stay apart."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "x"
    if label == text and len(label) <= limit:
        return label
    digest = hashlib.sha256(text.encode()).hexdigest()[:6]
    prefix = label[: max(0, limit - 7)].rstrip("-")
    return f"{prefix}-{digest}" if prefix else digest[:limit]
