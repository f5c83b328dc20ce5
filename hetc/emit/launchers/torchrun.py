"""The torchrun launcher: one script per node, with the node's logical id as a literal.

Every other launcher starts these scripts (a Slurm step, a SkyPilot task, a Kubernetes pod
each run the node script whose plan index they hold), so `hetc compile` always writes them.
Each script starts one torchrun that joins the plan-wide c10d rendezvous at
HETC_RDZV_ENDPOINT; run by hand, every node must be given the same endpoint.
"""

from __future__ import annotations

from hetc.emit.launch import LaunchContext, LaunchSite, environment


class TorchrunLauncher:
    """The node scripts (`launch/nodeNNNN.sh`) and the sites' prologues they source."""

    name = "torchrun"

    def files(self, context: LaunchContext, sites: tuple[LaunchSite, ...]) -> dict[str, str]:
        """Every prologue of the spec's sites, then the node script of each node of `sites`."""
        files = {}
        for site in context.spec.sites:
            if site.prologue:
                name = context.prologues[site.name]
                files[f"launch/{name}"] = site.prologue.rstrip("\n") + "\n"
        owner = {n.id: s.site.name for s in sites for n in s.nodes}
        template = environment().get_template("node.sh.j2")
        for node in context.nodes:
            if node.id not in owner:
                continue
            files[f"launch/{node.script}"] = template.render(
                node=node, prologue=context.prologues.get(owner[node.id], ""), **context.common
            )
        return files
