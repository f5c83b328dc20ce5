"""The launchers `hetc compile` can write, behind one protocol (`hetc.emit.launch.Launcher`).

Without `--launcher`, each site gets the launcher its `scheduler` names (a site without one,
or a zone no site names, gets the node scripts alone): today's torchrun scripts and Slurm
batch scripts. `--launcher a,b` writes those launchers' files for every site instead. The node
scripts are always written: every launcher starts them.
"""

from __future__ import annotations

from collections.abc import Sequence

from hetc.emit.launch import Launcher, launch_context
from hetc.emit.launchers.kubernetes import KubernetesLauncher
from hetc.emit.launchers.skypilot import SkyPilotLauncher
from hetc.emit.launchers.slurm import SlurmLauncher
from hetc.emit.launchers.torchrun import TorchrunLauncher
from hetc.plan import Plan
from hetc.plan.topology import Topology
from hetc.schema.spec import Spec

LAUNCHERS: dict[str, Launcher] = {
    launcher.name: launcher
    for launcher in (TorchrunLauncher(), SlurmLauncher(), SkyPilotLauncher(), KubernetesLauncher())
}
"""Every launcher by name, in the order their files are written."""


class UnknownLauncher(ValueError):
    """A `--launcher` name hetc does not know."""


def parse_launchers(text: str) -> tuple[str, ...]:
    """`--launcher`'s comma-separated names, checked and in LAUNCHERS' order; raises
    UnknownLauncher naming the valid ones."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in LAUNCHERS]
    if unknown or not names:
        given = ", ".join(repr(n) for n in unknown) if unknown else "no launcher"
        raise UnknownLauncher(
            f"--launcher: {given}: not a launcher; valid: {', '.join(LAUNCHERS)} (comma-separated)"
        )
    return tuple(name for name in LAUNCHERS if name in names)


def launch_files(
    spec: Spec, plan: Plan, topology: Topology, launchers: Sequence[str] | None = None
) -> dict[str, str]:
    """Every launch file, by path under the output directory: the node scripts, and for each
    launcher in `launchers` (None: each site's own scheduler) its files for the sites it
    starts."""
    context = launch_context(spec, plan, topology)
    files: dict[str, str] = {}
    for name, launcher in LAUNCHERS.items():
        if name == "torchrun" or (launchers is not None and name in launchers):
            sites = context.sites
        elif launchers is None:
            sites = tuple(s for s in context.sites if s.scheduler == name)
        else:
            continue
        if sites:
            files.update(launcher.files(context, sites))
    return files
