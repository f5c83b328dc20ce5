"""Plans, output directories and launches for the runtime's multi-process tests.

`launch` starts each rank as `python -m hetc.runtime` with the environment torchrun would give
it: no agent processes to import torch on 2 cores, and a test chooses every rank's RANK,
HETC_NODE and LOCAL_RANK. Run as a script, this module is one rank that creates two named
process groups in swapped order (the mutation the group check must catch):

    python tests/runtime_harness.py GROUP_A GROUP_B OUT_DIR [--timeout SECONDS]
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetc.emit.output import MANIFEST, manifest_json
from hetc.plan import Node, Pipeline, Plan, Replica, Stage, plan_to_json
from hetc.plan.topology import (
    Topology,
    cluster_record,
    rank_file_name,
    rank_record,
    topology_of,
)

HASH = "0" * 64
NODE_A = "a100@z/n0"
NODE_B = "v100@z/n0"


def node(node_id: str, devices: int) -> Node:
    pool, zone = node_id.split("/")[0].split("@")
    device = {"a100": "A100-40GB", "v100": "V100-16GB"}[pool]
    return Node(id=node_id, zone=zone, region="r", pool=pool, device=device, devices=devices)


def replica(node_id: str, *local_ranks: int) -> Replica:
    device = "A100-40GB" if node_id.startswith("a100") else "V100-16GB"
    return Replica(device=device, tp=len(local_ranks), node=node_id, local_ranks=local_ranks)


def small_plan() -> Plan:
    """5 processes on 2 nodes: stage 0 has a TP-2 replica beside a TP-1 one, so plan rank 3
    (node B, local rank 0) is in both data-parallel shard groups of stage 0.

        node A: plan ranks 0 1 2     stage 0: (0, 1) TP2, (3) TP1
        node B: plan ranks 3 4       stage 1: (2) TP1, (4) TP1

    Node A leaves device 2 idle, so its LOCAL_RANK 2 drives device 3.
    """
    return Plan(
        spec_hash=HASH,
        hetc_version="0.1.0",
        model_blocks=4,
        global_batch_size=3,
        microbatch_size=1,
        nodes=(node(NODE_A, 4), node(NODE_B, 2)),
        stages=(
            Stage(first_block=0, end_block=2, replicas=(replica(NODE_A, 0, 1), replica(NODE_B, 0))),
            Stage(first_block=2, end_block=4, replicas=(replica(NODE_A, 3), replica(NODE_B, 1))),
        ),
        pipelines=(
            Pipeline(replicas=(0, 0), microbatches=2),
            Pipeline(replicas=(1, 1), microbatches=1),
        ),
    )


def one_stage_plan() -> Plan:
    """One stage, two TP-1 replicas on one node: the smallest data-parallel job."""
    return Plan(
        spec_hash=HASH,
        hetc_version="0.1.0",
        model_blocks=2,
        global_batch_size=4,
        microbatch_size=2,
        nodes=(node(NODE_A, 2),),
        stages=(
            Stage(first_block=0, end_block=2, replicas=(replica(NODE_A, 0), replica(NODE_A, 1))),
        ),
        pipelines=(
            Pipeline(replicas=(0,), microbatches=1),
            Pipeline(replicas=(1,), microbatches=1),
        ),
    )


def _dump(data: object) -> str:
    return json.dumps(data, sort_keys=True, indent=2) + "\n"


def write_output(plan: Plan, out_dir: Path, *, tied_embeddings: bool = True) -> Topology:
    """What `hetc compile` writes for the runtime's start-up: plan.json, the topology files,
    stand-ins for training.json and the DeepSpeed config where there are none yet (start-up
    checks them against the manifest but does not parse them), and the manifest."""
    topology = topology_of(plan, tied_embeddings=tied_embeddings)
    cluster = cluster_record(plan, topology)
    (out_dir / "topology" / "ranks").mkdir(parents=True, exist_ok=True)
    (out_dir / "deepspeed").mkdir(exist_ok=True)
    (out_dir / "plan.json").write_text(plan_to_json(plan), encoding="utf-8")
    for stand_in in ("training.json", "deepspeed/x.json"):
        if not (out_dir / stand_in).exists():  # a test may have written its own
            (out_dir / stand_in).write_text("{}\n", encoding="utf-8")
    (out_dir / "topology" / "cluster.json").write_text(_dump(cluster), encoding="utf-8")
    node_index = {n.id: i for i, n in enumerate(plan.nodes)}
    for process in topology.processes:
        record = rank_record(plan, topology, process, deepspeed_config="deepspeed/x.json")
        path = out_dir / "topology" / rank_file_name(process, node_index[process.node])
        path.write_text(_dump(record), encoding="utf-8")
    seal(out_dir)
    return topology


def seal(out_dir: Path) -> None:
    """Write manifest.json for the files now in `out_dir`, as `hetc compile` does; call it
    again after a test changes a file on purpose (the runtime refuses unlisted edits)."""
    files = {
        p.relative_to(out_dir).as_posix(): p.read_bytes()
        for p in sorted(out_dir.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    manifest = manifest_json(files, hetc_version="0.1.0", plan_hash=HASH)
    (out_dir / MANIFEST).write_bytes(manifest)


@dataclass(frozen=True)
class Rank:
    """One process to start: who it says it is, and optionally another command or out dir."""

    node: str
    local_rank: int
    torch_rank: int
    out_dir: Path | None = None
    command: list[str] | None = None
    """Replaces `python -m hetc.runtime`; OUT_DIR and --timeout are appended."""


@dataclass
class Outcome:
    rank: Rank
    returncode: int
    stdout: str
    stderr: str
    hetc_lines: list[str] = field(default_factory=list)
    """stdout and stderr lines that start with `hetc-runtime:`."""


PORT_SPAN = 2000
"""Ports each test worker hands out, below the kernel's ephemeral range (32768 and up here):
a port taken from that range can go, between the probe and the store's listen, to any
process's outgoing connection, and two workers probing at once can draw the same one."""

_next_port = itertools.count()


def free_port() -> int:
    """A free port of this worker's own span (`PORT_SPAN` ports from 20000 per pytest-xdist
    worker), never the same twice in one worker's run, so no other test holds it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
    low = 20000 + PORT_SPAN * (int(worker) % 6 if worker.isdigit() else 0)
    for _ in range(PORT_SPAN):
        port = low + next(_next_port) % PORT_SPAN
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {low}-{low + PORT_SPAN - 1}")


def ranks_in_plan_order(topology: Topology, command: list[str] | None = None) -> list[Rank]:
    """Every process of `topology` in plan order, each started with `command` if given."""
    return [
        Rank(node=p.node, local_rank=p.local_rank, torch_rank=p.rank, command=command)
        for p in topology.processes
    ]


def launch(
    ranks: list[Rank],
    out_dir: Path,
    run_dir: Path,
    *,
    timeout: float,
    world_size: int | None = None,
) -> list[Outcome]:
    """Start every rank at once and wait for all; a rank still running after `timeout` + 60 s is
    killed and fails the test (start-up must never hang)."""
    started = start_ranks(ranks, out_dir, run_dir, timeout=timeout, world_size=world_size)
    return [
        wait_for(rank, process, timeout + 60) for rank, process in zip(ranks, started, strict=True)
    ]


def start_ranks(
    ranks: list[Rank],
    out_dir: Path,
    run_dir: Path,
    *,
    timeout: float,
    world_size: int | None = None,
) -> list[subprocess.Popen[str]]:
    """Start every rank at once (`--timeout` `timeout`); `wait_for` each."""
    port = free_port()
    size = len(ranks) if world_size is None else world_size
    started = []
    for rank in ranks:
        env = {
            **os.environ,
            "HETC_NODE": rank.node,
            "LOCAL_RANK": str(rank.local_rank),
            "RANK": str(rank.torch_rank),
            "WORLD_SIZE": str(size),
            "LOCAL_WORLD_SIZE": str(sum(r.node == rank.node for r in ranks)),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "HETC_RUN_DIR": str(run_dir),
            "HETC_BACKEND": "gloo",
        }
        command = rank.command or [sys.executable, "-m", "hetc.runtime", "--startup-only"]
        argv = [*command, str(rank.out_dir or out_dir), "--timeout", str(timeout)]
        started.append(
            subprocess.Popen(
                argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    return started


def wait_for(rank: Rank, process: subprocess.Popen[str], limit: float) -> Outcome:
    """The rank's outcome; a rank still running after `limit` seconds is killed and fails the
    test."""
    try:
        stdout, stderr = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        raise AssertionError(f"{rank} still ran after {limit} s:\n{stderr}") from None
    lines = [line for line in (stdout + stderr).splitlines() if line.startswith("hetc-runtime:")]
    return Outcome(rank, process.returncode, stdout, stderr, lines)


def startup_record(run_dir: Path, plan_rank: int) -> dict[str, Any]:
    loaded = json.loads((run_dir / "startup" / f"rank-{plan_rank:05d}.json").read_text())
    assert isinstance(loaded, dict)
    return loaded


def swapped_groups_command(first: str, second: str) -> list[str]:
    return [sys.executable, __file__, first, second]


def _run_with_groups_swapped(argv: list[str]) -> int:
    """One rank that reads cluster.json with two groups' places exchanged."""
    from hetc.runtime import __main__ as entry
    from hetc.runtime import startup

    first, second, *rest = argv
    parse = startup.parse_cluster_file

    def swapped(text: str, path: str | Path) -> dict[str, Any]:
        cluster = parse(text, path)
        groups = cluster["groups"]
        names = [g["name"] for g in groups]
        i, j = names.index(first), names.index(second)
        groups[i], groups[j] = groups[j], groups[i]
        return cluster

    startup.parse_cluster_file = swapped  # type: ignore[assignment]
    return entry.main(["--startup-only", *rest])


if __name__ == "__main__":
    sys.exit(_run_with_groups_swapped(sys.argv[1:]))
