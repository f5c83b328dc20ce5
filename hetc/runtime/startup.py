"""Start-up of every process: find itself in the plan, agree with all others, build the groups.

torchrun numbers processes in an order of its own (anew on each elastic restart) and knows
nothing of the plan. A process that read another plan, was started twice or not at all, or
created the process groups in another order would train wrongly without an error (gloo gives
silently wrong sums). So each process first reads its files without acting on what is wrong,
then all of them all-gather who they are and what they read, and every one reaches the same
verdict from the same data, so that all stop with one message or all go on. The groups are then
created in cluster.json's one order and each is checked with an all-reduce of known values.
Every collective here runs under the start-up timeout: a missing peer ends in a StartupError,
never in a hang.

What each process reads is checked against the compiled output's manifest before anything
is parsed (`hetc.runtime.inputs`), and every process announces the sha256 of its manifest:
a file edited on one node, or an output recompiled on one node, stops every rank with one
message naming the file and the node.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import torch
import torch.distributed as dist

from hetc.plan import RankFileError
from hetc.plan.rankfiles import parse_cluster_file, parse_rank_file
from hetc.runtime.inputs import EDITED_PLAN, Inputs

CHECKPOINT_REQUEST = "checkpoint-request"
"""A file in the run directory whose existence asks for a checkpoint (the Slurm batch script's
USR1 trap creates it before the job's time runs out)."""

Key = tuple[str | None, int]
"""(HETC_NODE, LOCAL_RANK): how a process knows itself; None where HETC_NODE is unset."""
T = TypeVar("T")


class StartupError(RuntimeError):
    """Start-up cannot go on; the message says what is wrong and what would be right."""

    def __init__(self, message: str, *, rank_file: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.rank_file = rank_file
        """This process's rank file, where it was read: who it is in the plan."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Startup:
    """A started process: who it is in the plan and in torch, and its checked process groups."""

    plan_rank: int
    torch_rank: int
    world_size: int
    rank_file: dict[str, Any]
    groups: dict[str, dist.ProcessGroup]
    """The groups this rank is in, by name. A group's own ranks follow ascending torch rank, not
    cluster.json's plan-rank order (TP-rank order for tp/ groups); see `group_ranks`."""
    group_ranks: dict[str, tuple[int, ...]]
    """For each group in `groups`, its members' plan ranks in the group's own rank order."""
    torch_ranks: dict[int, int]
    """The torch rank of every plan rank."""
    run_dir: Path
    inputs: Inputs
    """The output directory's files this rank read, checked against the manifest."""


class Announcement(NamedTuple):
    """What each process tells all the others before anyone acts on the plan."""

    node: str | None
    local_rank: int
    plan_hash: str | None
    """cluster.json's plan hash; None when it could not be read."""
    hetc_version: str
    problem: str | None
    """What this process found wrong on its own (files, environment)."""
    manifest: str | None = None
    """The sha256 of the compiled output's manifest.json it read; None when unreadable."""


@dataclass(frozen=True, slots=True)
class _Local:
    """What this process read by itself; its problem is reported only once all have met."""

    cluster: dict[str, Any] | None
    rank_file: dict[str, Any] | None
    problem: str | None
    inputs: Inputs


def start(out_dir: Path, *, timeout: float) -> Startup:
    """Start this process of the plan compiled into `out_dir` (see the module docstring)."""
    began = time.monotonic()
    node, local_rank = _launcher_key()
    local = _read_local(out_dir, node, local_rank)
    backend = os.environ.get("HETC_BACKEND") or ("nccl" if torch.cuda.is_available() else "gloo")
    device = _join(backend, local, local_rank, timeout)
    mine = Announcement(
        node,
        local_rank,
        None if local.cluster is None else local.cluster["plan_hash"],
        installed_hetc_version(),
        local.problem,
        local.inputs.digest,
    )
    announcements = _all_gather(mine, "exchanging who each process is", timeout)
    problem = verdict(announcements, local.cluster)
    if problem is not None:
        raise StartupError(problem, rank_file=local.rank_file)
    assert local.cluster is not None and local.rank_file is not None  # a good verdict has both
    torch_ranks = _torch_ranks(announcements, local.cluster)
    plan_rank = local.rank_file["rank"]
    groups = _create_groups(local.cluster, torch_ranks, plan_rank, timeout)
    _check_groups(groups, plan_rank, device, timeout)
    started = Startup(
        plan_rank=plan_rank,
        torch_rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        rank_file=local.rank_file,
        groups={name: handle for name, (handle, _) in groups.items()},
        group_ranks={name: members for name, (_, members) in groups.items()},
        torch_ranks=torch_ranks,
        run_dir=Path(os.environ.get("HETC_RUN_DIR", "hetc-run")),
        inputs=local.inputs,
    )
    _write_record(started, node, local_rank, time.monotonic() - began, out_dir)
    return started


def checkpoint_requested(run_dir: Path) -> bool:
    """Whether a checkpoint was asked for; the training loop asks every iteration."""
    return (run_dir / CHECKPOINT_REQUEST).exists()


def _launcher_key() -> Key:
    missing = [v for v in ("LOCAL_RANK", "RANK", "WORLD_SIZE") if v not in os.environ]
    if missing:
        raise StartupError(
            f"{', '.join(missing)} not set: start the runtime with torchrun, as the launch"
            " scripts in the output directory do"
        )
    local_rank = os.environ["LOCAL_RANK"]
    if not local_rank.isdigit():
        raise StartupError(f"LOCAL_RANK is {local_rank!r}, not a number: start it with torchrun")
    return os.environ.get("HETC_NODE"), int(local_rank)


def _read_local(out_dir: Path, node: str | None, local_rank: int) -> _Local:
    """Read and check this process's inputs (`Inputs`), then parse cluster.json and its rank
    file; an unknown key is no local problem, for the verdict names it together with the key
    that nobody started. Files that differ from the manifest are a problem even where they
    parse: the verdict stops every rank on them."""
    inputs = Inputs.open(out_dir)
    cluster_path = out_dir / "topology" / "cluster.json"
    text = inputs.text("topology/cluster.json")
    if text is None:
        return _Local(None, None, inputs.problem(), inputs)
    try:
        cluster = parse_cluster_file(text, cluster_path)
    except RankFileError as exc:
        return _Local(None, None, _joined(inputs.problem(), str(exc)), inputs)
    if node is None:
        unset = "HETC_NODE is not set (the launch scripts export its node id)"
        return _Local(cluster, None, _joined(inputs.problem(), unset), inputs)
    process = _process_of(cluster, (node, local_rank))
    if process is None:
        return _Local(cluster, None, inputs.problem(), inputs)
    relative = f"topology/{process['rank_file']}"
    path = out_dir / relative
    inputs.check(relative)
    text = inputs.text(relative)
    if text is None:
        return _Local(cluster, None, inputs.problem(), inputs)
    try:
        rank_file = parse_rank_file(text, path)
    except RankFileError as exc:
        return _Local(cluster, None, _joined(inputs.problem(), str(exc)), inputs)
    inputs.check(rank_file["deepspeed_config"])
    problem = _joined(
        _disagreement(path, rank_file, cluster, node, process),
        _plan_file_problem(out_dir, cluster, inputs),
        inputs.problem(),
    )
    return _Local(cluster, rank_file, problem, inputs)


def _joined(*problems: str | None) -> str | None:
    return "; ".join(p for p in problems if p) or None


def _process_of(cluster: dict[str, Any], key: Key) -> dict[str, Any] | None:
    for n in cluster["nodes"]:
        for process in n["processes"]:
            if (n["id"], process["local_rank"]) == key:
                assert isinstance(process, dict)
                return process
    return None


def _disagreement(
    path: Path,
    rank_file: dict[str, Any],
    cluster: dict[str, Any],
    node: str,
    process: dict[str, Any],
) -> str | None:
    """Where a rank file contradicts cluster.json (a file copied from another compile or rank)."""
    told = {"plan_hash": cluster["plan_hash"], "version": cluster["version"], "node": node}
    told |= {k: process[k] for k in ("rank", "local_rank", "device_index")}
    differing = [
        f"{k} {rank_file[k]!r} (cluster.json: {v!r})" for k, v in told.items() if rank_file[k] != v
    ]
    if not differing:
        return None
    return (
        f"{path} does not match topology/cluster.json: {', '.join(differing)}; copy the whole"
        " output directory of one `hetc compile` again"
    )


def _plan_file_problem(out_dir: Path, cluster: dict[str, Any], inputs: Inputs) -> str | None:
    path = out_dir / "plan.json"
    if inputs.text("plan.json") is None:
        return None  # unreadable: `inputs` says so
    digest = inputs.digest_of("plan.json") or ""
    if digest == cluster["plan_hash"]:
        return None
    return (
        f"{path} has sha256 {digest[:12]}..., but topology/cluster.json was compiled from plan"
        f" {cluster['plan_hash'][:12]}...; copy the whole output directory of one `hetc compile`"
        " again" + EDITED_PLAN
    )


def _join(backend: str, local: _Local, local_rank: int, timeout: float) -> torch.device:
    """Join the job's default process group; returns the device that collectives use."""
    device = torch.device("cpu")
    if torch.cuda.is_available():
        index = local_rank if local.rank_file is None else local.rank_file["device_index"]
        torch.cuda.set_device(index)
        if backend == "nccl":
            device = torch.device("cuda", index)
    with _collective("joining the other processes", timeout):
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout))
    return device


@contextmanager
def _collective(what: str, timeout: float) -> Iterator[None]:
    """Turn torch's timeout and lost-peer errors into a StartupError that says what to check."""
    try:
        yield
    except (RuntimeError, ValueError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0].rstrip(".")
        raise StartupError(
            f"{what} failed (timeout {timeout:g} s): {reason}. Start every process of the plan"
            f" on every node within {timeout:g} s of each other, and check that they reach"
            " MASTER_ADDR:MASTER_PORT"
        ) from None


def _all_gather(item: T, what: str, timeout: float) -> list[T]:
    gathered: list[Any] = [None] * dist.get_world_size()
    with _collective(what, timeout):
        dist.all_gather_object(gathered, item)
    return gathered


def installed_hetc_version() -> str:
    """The installed hetc's version (the runtime reads hetc only through hetc.plan, so not
    `hetc.__version__`); a node with another hetc installed must not join the job."""
    try:
        return importlib.metadata.version("hetc")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (hetc is not installed)"


def verdict(announcements: Sequence[Announcement], cluster: dict[str, Any] | None) -> str | None:
    """The one message every rank raises, or None if the processes match the plan.

    `announcements` are in torch-rank order, the same on every rank. `cluster` (this rank's
    cluster.json) is read only when every rank read a cluster.json of one plan hash, so every
    rank reaches the same verdict.
    """
    problems = _agreement_problems(announcements)
    if not problems and cluster is not None:
        problems = _layout_problems(announcements, cluster)
    if not problems:
        return None
    return "the processes do not match the plan or each other: " + " ".join(problems)


def _who(key: Key, torch_rank: int | None = None) -> str:
    node = "(HETC_NODE unset)" if key[0] is None else repr(key[0])
    suffix = "" if torch_rank is None else f" (torch rank {torch_rank})"
    return f"node {node} local rank {key[1]}{suffix}"


def _agreement_problems(announcements: Sequence[Announcement]) -> list[str]:
    problems = [
        f"{_who((a.node, a.local_rank), r)}: {a.problem}."
        for r, a in enumerate(announcements)
        if a.problem is not None
    ]
    problems += _differences(
        "plan hashes",
        [a.plan_hash for a in announcements],
        announcements,
        "copy the output directory of one `hetc compile` to every node",
    )
    problems += _differences(
        "compiled outputs (sha256 of manifest.json)",
        [None if a.manifest is None else f"{a.manifest[:12]}..." for a in announcements],
        announcements,
        "copy the output directory of one `hetc compile` to every node unchanged",
    )
    problems += _differences(
        "hetc versions",
        [a.hetc_version for a in announcements],
        announcements,
        "install the same hetc on every node",
    )
    return problems


def _differences(
    what: str, values: list[str | None], announcements: Sequence[Announcement], fix: str
) -> list[str]:
    distinct = sorted({v for v in values if v is not None})
    if len(distinct) < 2:
        return []
    parts = [
        f"{value} on "
        + ", ".join(
            _who((a.node, a.local_rank), r)
            for r, a in enumerate(announcements)
            if values[r] == value
        )
        for value in distinct
    ]
    return [f"the {what} differ: {'; '.join(parts)}. To fix: {fix}."]


def _layout_problems(announcements: Sequence[Announcement], cluster: dict[str, Any]) -> list[str]:
    """Processes started twice, not at all, or unknown to the plan."""
    expected: list[Key] = [
        (n["id"], p["local_rank"]) for n in cluster["nodes"] for p in n["processes"]
    ]
    started: dict[Key, list[int]] = {}
    for r, a in enumerate(announcements):
        started.setdefault((a.node, a.local_rank), []).append(r)
    problems = []
    if len(announcements) != cluster["world_size"]:
        problems.append(
            f"{len(announcements)} processes were started; the plan has {cluster['world_size']}."
        )
    for key, ranks in started.items():
        listed = ", ".join(map(str, ranks))
        if key not in expected:
            torch_ranks = f"torch rank{'s' if len(ranks) > 1 else ''} {listed}"
            problems.append(f"{_who(key)} ({torch_ranks}) is not in the plan{_hint(key, cluster)}.")
        elif len(ranks) > 1:
            problems.append(f"{_who(key)} was started {len(ranks)} times (torch ranks {listed}).")
    problems += [f"Nobody started {_who(key)}." for key in expected if key not in started]
    if problems:
        counts = ", ".join(
            f"{n['id']!r} {len(n['processes'])}" for n in cluster["nodes"] if n["processes"]
        )
        problems.append(
            "To fix: start each node of the plan with HETC_NODE set to its id and as many"
            f" processes as the plan gives it ({counts}), as the emitted launch scripts do."
        )
    return problems


def _hint(key: Key, cluster: dict[str, Any]) -> str:
    node = next((n for n in cluster["nodes"] if n["id"] == key[0]), None)
    if node is None:
        ids = ", ".join(repr(n["id"]) for n in cluster["nodes"])
        return f", which has no node {key[0]!r} (its nodes: {ids})"
    return f", which runs local ranks 0 to {len(node['processes']) - 1} on node {key[0]!r}"


def _torch_ranks(announcements: Sequence[Announcement], cluster: dict[str, Any]) -> dict[int, int]:
    plan_rank = {
        (n["id"], p["local_rank"]): p["rank"] for n in cluster["nodes"] for p in n["processes"]
    }
    return {plan_rank[a.node, a.local_rank]: r for r, a in enumerate(announcements)}


def _create_groups(
    cluster: dict[str, Any], torch_ranks: dict[int, int], plan_rank: int, timeout: float
) -> dict[str, tuple[dist.ProcessGroup, tuple[int, ...]]]:
    """Create every group of cluster.json, in its order, on every rank (gloo needs both); keep
    this rank's groups with their members' plan ranks in group-rank (torch-rank) order."""
    mine = {}
    for group in cluster["groups"]:
        members = tuple(sorted(group["ranks"], key=torch_ranks.__getitem__))
        with _collective(f"creating process group {group['name']}", timeout):
            handle = dist.new_group(
                ranks=[torch_ranks[r] for r in members], timeout=timedelta(seconds=timeout)
            )
        if plan_rank in members:
            assert isinstance(handle, dist.ProcessGroup)
            mine[group["name"]] = (handle, members)
    return mine


def _signature(plan_ranks: Sequence[int]) -> list[int]:
    """Count, sum and sum of squares of plan rank + 1: what an all-reduce of each member's own
    values gives when exactly these ranks meet in the group."""
    return [len(plan_ranks), sum(r + 1 for r in plan_ranks), sum((r + 1) ** 2 for r in plan_ranks)]


def _check_groups(
    groups: dict[str, tuple[dist.ProcessGroup, tuple[int, ...]]],
    plan_rank: int,
    device: torch.device,
    timeout: float,
) -> None:
    """All-reduce known values in each of this rank's groups, then let every rank know every
    mismatch, so all stop with one message."""
    wrong = []
    for name, (handle, members) in groups.items():
        values = torch.tensor(_signature([plan_rank]), dtype=torch.int64, device=device)
        with _collective(f"checking process group {name}", timeout):
            dist.all_reduce(values, group=handle)
        expected, got = _signature(members), values.tolist()
        if got != expected:
            wrong.append(
                f"group {name} on plan rank {plan_rank}: expected [count, sum, sum of squares]"
                f" of member plan ranks + 1 = {expected}, got {got}"
            )
    found = [w for ws in _all_gather(wrong, "comparing group checks", timeout) for w in ws]
    if found:
        raise StartupError(
            "the process groups do not hold the ranks cluster.json gives them: "
            + "; ".join(found)
            + ". Every rank must create cluster.json's groups in its order; with one plan hash"
            " and hetc version on every rank (both were checked) this is a hetc bug: please"
            " report it."
        )


def _write_record(
    started: Startup, node: str | None, local_rank: int, seconds: float, out_dir: Path
) -> None:
    """Write the rank's start-up record atomically: a reader never sees half a file. It names
    the compiled output and plan hash the rank ran, so that `hetc calibrate RUN_DIR` finds
    them from the run directory however the run was started."""
    folder = started.run_dir / "startup"
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "backend": dist.get_backend(),
        "node": node,
        "local_rank": local_rank,
        "rank": started.plan_rank,
        "torch_rank": started.torch_rank,
        "world_size": started.world_size,
        "groups": list(started.groups),
        "seconds": round(seconds, 3),
        "out_dir": str(out_dir.resolve()),
        "plan_hash": started.rank_file["plan_hash"],
    }
    path = folder / f"rank-{started.plan_rank:05d}.json"
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=folder, prefix=f".{path.name}.", delete=False
    ) as file:
        file.write(json.dumps(record, sort_keys=True, indent=2) + "\n")
    os.replace(file.name, path)
