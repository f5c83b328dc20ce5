"""Launch scripts: one torchrun script per node, one Slurm heterogeneous job per Slurm site.

Every node gets a torchrun script with its logical id as a literal (`HETC_NODE`), so it can be
started by hand, by any scheduler, or by the Slurm step. A Slurm site's batch script asks for
one het-job component per pool (a pool is one node shape, so one `--nodes`/GPU request fits all
its nodes), starts one task per node in a single `srun ... : ...` step, and each task runs the
node script whose index matches `SLURM_NODEID` (Slurm numbers a het step's nodes 0..N-1 across
its components in component order, the order written here). User strings reach scripts through
`shlex.quote` only; `#SBATCH` values are checked by `hetc validate` to be plain Slurm names,
since Slurm does not shell-parse those lines. The one exception is a site's `prologue`, which
is shell code by definition: it is written as given to `launch/<site>.prologue.sh`, which the
scripts source (so shellcheck judges hetc's scripts, not the user's prologue).

Every script resumes by default (the runtime does, unless HETC_FROM_SCRATCH is set, which
`--from-scratch` does) and stands between its signals and torchrun: torchrun passes on
whatever it handles and exits 1 whatever its workers returned, so the node script runs it in
the background with USR1, INT and HUP ignored, turns USR1 into a checkpoint request and TERM,
INT or HUP into one SIGTERM to torchrun, and exits 76 (`hetc.plan.outcome`) after such a stop.
The batch script does the same for its step, asks Slurm to requeue the job after a failure or
preemption, and keeps the run directory (the job id) across requeues. docs/compile.md has the
measurements behind these choices.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import cache

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
def _environment() -> jinja2.Environment:
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


@dataclass(frozen=True, kw_only=True, slots=True)
class Component:
    """One het-job component: the nodes of one pool at one site."""

    pool: Pool
    nodes: tuple[LaunchNode, ...]
    cpu: bool
    options: tuple[tuple[str, str], ...]


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


def _job_name(spec: Spec) -> str:
    return "hetc-" + (re.sub(r"[^A-Za-z0-9._-]+", "-", spec.name).strip("-") or "job")


def _pool_of(spec: Spec, zone: str, pool: str) -> Pool:
    return next(p for z in spec.zones if z.name == zone for p in z.pools if p.name == pool)


def _components(spec: Spec, site: Site, nodes: list[LaunchNode]) -> list[Component]:
    order: dict[tuple[str, str], list[LaunchNode]] = {}
    for node in nodes:
        if node.zone in site.zones:
            order.setdefault((node.zone, node.pool), []).append(node)
    components = []
    for (zone, pool_name), members in order.items():
        pool = _pool_of(spec, zone, pool_name)
        cpu = spec.devices[pool.device].kind == "cpu"
        settings = {
            "partition": site.partition,
            "account": site.account,
            "qos": site.qos,
            "time": site.time_limit,
            **pool.slurm,
        }
        options = [(k, v) for k, v in settings.items() if v]
        options.append(("nodes", str(len(members))))
        options.append(("ntasks-per-node", "1"))
        if cpu:
            options.append(("cpus-per-task", str(pool.gpus_per_node)))
        elif "gres" not in pool.slurm:
            options.append(("gpus-per-node", str(pool.gpus_per_node)))
        components.append(
            Component(pool=pool, nodes=tuple(members), cpu=cpu, options=tuple(options))
        )
    return components


def launch_files(spec: Spec, plan: Plan, topology: Topology) -> dict[str, str]:
    """Every launch script, by path under the output directory."""
    nodes = launch_nodes(plan, topology)
    site_of = {zone: site for site in spec.sites for zone in site.zones}
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
    env = _environment()
    files = {}
    prologue_of: dict[str, str] = {}
    for index, site in enumerate(spec.sites):
        if site.prologue:
            name = prologue_file_name(site, index)
            prologue_of[site.name] = name
            files[f"launch/{name}"] = site.prologue.rstrip("\n") + "\n"
    for node in nodes:
        owner = site_of.get(node.zone)
        files[f"launch/{node.script}"] = env.get_template("node.sh.j2").render(
            node=node, prologue=prologue_of.get(owner.name, "") if owner else "", **common
        )
    used_sites = {site_of[n.zone].name for n in nodes if n.zone in site_of}
    for index, site in enumerate(spec.sites):
        if site.scheduler != "slurm" or site.name not in used_sites:
            continue
        components = _components(spec, site, nodes)
        files[f"launch/{site_file_name(site, index)}"] = env.get_template("site.sbatch.j2").render(
            site=site,
            prologue=prologue_of.get(site.name, ""),
            components=components,
            job_name=_job_name(spec),
            signal_lead=CHECKPOINT_SIGNAL_LEAD,
            rdzv_port=DEFAULT_RDZV_PORT,
            whole_plan=all(n.zone in site.zones for n in nodes),
            step_scripts=" ".join(n.script for c in components for n in c.nodes),
            **common,
        )
    if any(path.endswith(".sbatch") for path in files):
        files["launch/slurm-step.sh"] = env.get_template("slurm-step.sh.j2").render(**common)
    return files
