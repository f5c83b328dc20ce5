"""`hetc run` on a Slurm site: node states as a source of quotas, and a generation as a job.

Why the supervisor re-plans rather than Slurm: the generated sbatch script asks for a fixed
shape (so many nodes of each pool's partition). When one of its nodes goes DOWN, Slurm
requeues the job (`--requeue`), and the requeued job keeps that shape: it waits for nodes that
are gone. Only a new plan fits the nodes that remain, so the supervisor reads the partitions'
node states (`sinfo`), and when a pool's partition has fewer usable nodes it re-plans, cancels
the old generation's job (after a checkpoint where it still runs: TERM to the batch script,
whose ranks save and exit 76) and submits the next generation's sbatch script with the same
run directory, where it resumes.

A node counts as usable unless its state says down, drained or draining, failed, in
maintenance, or not responding (`*`). A pool's quota from Slurm is its usable nodes in its
`slurm.partition` times `gpus_per_node`, capped by the spec's quota; pools without a
partition are not limited by Slurm.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from hetc.elastic.availability import pool_label
from hetc.local_launch import NodeScript, node_scripts
from hetc.schema import EnvironmentProblem
from hetc.schema.spec import Spec

UNUSABLE = ("down", "drain", "fail", "maint", "reboot", "unknown", "future", "power")
"""Substrings of a `sinfo` node state (lower case) that make the node unusable."""
TERMINAL = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)
STOP_WAIT = 60.0
"""Seconds a job gets to checkpoint and end after TERM before it is cancelled outright."""
_STATE = re.compile(r"\bJobState=(\S+)")


def _slurm(*args: str) -> str:
    try:
        done = subprocess.run(args, capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentProblem(
            f"`{' '.join(args)}` did not run: {exc}", "install the Slurm client commands"
        ) from None
    if done.returncode != 0:
        raise EnvironmentProblem(
            f"`{' '.join(args)}` failed: {done.stderr.strip()[:300]}",
            "check that slurmctld answers (`scontrol ping`) and SLURM_CONF",
        )
    return done.stdout


def usable(state: str) -> bool:
    """Whether a node in this `sinfo` state (`%T`) can run a job."""
    lowered = state.lower()
    return not lowered.endswith("*") and not any(word in lowered for word in UNUSABLE)


def parse_sinfo(text: str) -> dict[str, set[str]]:
    """Usable nodes by partition, from `sinfo -h -N -o %N|%P|%T` (a `*` marks the default
    partition and is dropped)."""
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        node, partition, state = line.split("|")
        nodes = found.setdefault(partition.rstrip("*"), set())
        if usable(state):
            nodes.add(node)
    return found


def slurm_quotas(spec: Spec, sinfo_text: str | None = None) -> dict[str, int]:
    """Each Slurm pool's quota from its partition's usable nodes (module docstring)."""
    text = sinfo_text if sinfo_text is not None else _slurm("sinfo", "-h", "-N", "-o", "%N|%P|%T")
    nodes = parse_sinfo(text)
    quotas = {}
    for zone in spec.zones:
        for pool in zone.pools:
            partition = pool.slurm.get("partition")
            if partition is not None:
                up = len(nodes.get(partition, set()))
                quotas[pool_label(pool.name, zone.name)] = min(pool.quota, up * pool.gpus_per_node)
    return quotas


def slurm_site(spec: Spec) -> str | None:
    """The name of the spec's one site, where that site is Slurm's; else None."""
    if len(spec.sites) == 1 and spec.sites[0].scheduler == "slurm":
        return spec.sites[0].name
    return None


class SlurmJob:
    """One generation submitted with sbatch; the same questions as `hetc.local_launch.LocalJob`
    answers for a job on this host."""

    def __init__(
        self, out_dir: Path, *, site: str, run_dir: Path, from_scratch: bool = False
    ) -> None:
        pinned = out_dir.resolve()
        self.nodes: list[NodeScript] = node_scripts(pinned)
        run_dir.mkdir(parents=True, exist_ok=True)
        export = f"ALL,HETC_RUN_DIR={run_dir},HETC_OUT={pinned}"
        output = run_dir / "slurm-%j.out"
        args = ["sbatch", "--parsable", f"--export={export}", f"--output={output}"]
        script = [str(pinned / "launch" / f"{site}.sbatch")]
        script += ["--from-scratch"] if from_scratch else []
        self.job = _slurm(*args, *script).strip().split(";")[0]
        self.final: str | None = None

    def state(self) -> str:
        """The job's state (its worst component's for a heterogeneous job)."""
        if self.final is not None:
            return self.final
        text = _slurm("scontrol", "show", "job", self.job)
        states = _STATE.findall(text)
        ended = [s for s in states if s in TERMINAL]
        if states and len(ended) == len(states):
            worst = "COMPLETED" if all(s == "COMPLETED" for s in ended) else ended[0]
            self.final = worst
            return worst
        return "RUNNING" if "RUNNING" in states else (states[0] if states else "UNKNOWN")

    def exits(self) -> dict[int, int]:
        """Nothing while the job has not ended; then 0 for every node if it completed, 1 for
        every node otherwise (the outcome records say more)."""
        state = self.state()
        if state not in TERMINAL:
            return {}
        return {n.index: 0 if state == "COMPLETED" else 1 for n in self.nodes}

    def process_groups(self) -> Mapping[int, int]:
        return {}

    def running(self) -> bool:
        return self.state() not in TERMINAL

    def wait(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while self.running():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return True

    def stop(self) -> None:
        """TERM to the batch script where the job runs (the ranks checkpoint and stop, exit
        76), then cancel it, whatever its state (a requeued job waits for nodes otherwise)."""
        if self.state() == "RUNNING":
            _slurm("scancel", "--batch", "--signal=TERM", self.job)
            self.wait(STOP_WAIT)
        if self.running():
            _slurm("scancel", self.job)
            self.wait(STOP_WAIT)
