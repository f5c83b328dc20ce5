"""The Slurm launcher: one heterogeneous batch job per site.

A site's batch script asks for one het-job component per pool (a pool is one node shape, so
one `--nodes`/GPU request fits all its nodes), starts one task per node in a single
`srun ... : ...` step, and each task runs the node script whose index matches `SLURM_NODEID`
(Slurm numbers a het step's nodes 0..N-1 across its components in component order, the order
written here). `#SBATCH` values are checked by `hetc validate` to be plain Slurm names, since
Slurm does not shell-parse those lines. The batch script stands between its signals and the
step like the node scripts do, asks Slurm to requeue the job after a failure or preemption,
and keeps the run directory (the job id) across requeues.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetc.emit.launch import (
    CHECKPOINT_SIGNAL_LEAD,
    LaunchContext,
    LaunchNode,
    LaunchSite,
    environment,
    job_name,
)
from hetc.schema.spec import Pool


@dataclass(frozen=True, kw_only=True, slots=True)
class Component:
    """One het-job component: the nodes of one pool at one site, and its #SBATCH options."""

    pool: Pool
    nodes: tuple[LaunchNode, ...]
    options: tuple[tuple[str, str], ...]


def components(site: LaunchSite) -> list[Component]:
    """The site's het-job components, one per pool, with the site's settings overridden by
    the pool's `slurm:` mapping."""
    result = []
    for group in site.pools:
        pool = group.pool
        settings = {
            "partition": site.site.partition,
            "account": site.site.account,
            "qos": site.site.qos,
            "time": site.site.time_limit,
            **pool.slurm,
        }
        options = [(k, v) for k, v in settings.items() if v]
        options.append(("nodes", str(len(group.nodes))))
        options.append(("ntasks-per-node", "1"))
        if group.cpu:
            options.append(("cpus-per-task", str(pool.gpus_per_node)))
        elif "gres" not in pool.slurm:
            options.append(("gpus-per-node", str(pool.gpus_per_node)))
        result.append(Component(pool=pool, nodes=group.nodes, options=tuple(options)))
    return result


class SlurmLauncher:
    """`launch/<site>.sbatch` per site and the `launch/slurm-step.sh` their steps run."""

    name = "slurm"

    def files(self, context: LaunchContext, sites: tuple[LaunchSite, ...]) -> dict[str, str]:
        """One batch script per site of `sites`, and the step script when there is one."""
        env = environment()
        files = {}
        for site in sites:
            parts = components(site)
            files[f"launch/{site.stem}.sbatch"] = env.get_template("site.sbatch.j2").render(
                site=site.site,
                prologue=context.prologues.get(site.site.name, ""),
                components=parts,
                job_name=job_name(context.spec),
                signal_lead=CHECKPOINT_SIGNAL_LEAD,
                rdzv_port=context.rdzv_port,
                whole_plan=site.whole_plan,
                step_scripts=" ".join(n.script for n in site.nodes),
                **context.common,
            )
        if files:
            files["launch/slurm-step.sh"] = env.get_template("slurm-step.sh.j2").render(
                **context.common
            )
        return files
