"""Whether this host can run a compiled plan, checked by `hetc launch` before any node starts.

A plan made for GPUs started on a CPU-only host does not fail fast: DeepSpeed first builds its
fused Adam op for about 90 s, then every rank runs a GPU-sized model on CPU. Many more ranks
than cores (32 nodes' worth on a laptop) thrash until the rendezvous times out. Both are
refused (exit 4) unless `--force`. Devices are counted without torch (`hetc launch` never
imports it): NVIDIA GPUs as the driver's `/dev/nvidia<N>` device files.

Torch builds an extension (DeepSpeed's JIT ops) under a lock file in its extension cache; a
build that was interrupted leaves the lock behind, and every later build waits on it silently
for ever. The lock holds no owner, so a lock is taken as stale when it and every file in its
build folder are older than STALE_AFTER: a live build writes objects and ninja's log as it
goes. Stale locks are removed, and said so.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path

from hetc.units import plural

RANKS_PER_CORE = 4
"""More ranks than this many per core are refused: 4 ranks on 2 cores train the CPU example in
seconds; beyond a few per core each rank's share of a core is too small to keep gloo's and
the rendezvous's timeouts."""
STALE_AFTER = 600.0
"""Seconds without a change in a build folder after which its lock is stale."""
_NVIDIA = re.compile(r"nvidia\d+")


HOST_FIX = (
    "launch on the plan's machines (its launch/ scripts), compile a spec for this host"
    " (e.g. examples/local-cpu.yaml), or pass --force to start it here anyway"
)


def host_gpus(dev: Path = Path("/dev")) -> int:
    """NVIDIA GPUs this host has: the driver's device files (none without a driver)."""
    try:
        return sum(1 for p in dev.iterdir() if _NVIDIA.fullmatch(p.name))
    except OSError:
        return 0


def host_cores() -> int:
    """Cores this process may run on (its affinity, as a container or taskset limits it)."""
    return len(os.sched_getaffinity(0))


def plan_ranks(out_dir: Path) -> dict[str, int]:
    """Ranks per device kind ("cpu" or "gpu") of a compiled output: each rank's node device,
    its kind from the output's spec.json (a device the spec does not name counts as a GPU)."""
    cluster = json.loads((out_dir / "topology" / "cluster.json").read_text(encoding="utf-8"))
    try:
        compiled = json.loads((out_dir / "spec.json").read_text(encoding="utf-8"))
        devices: Mapping[str, object] = compiled["spec"]["devices"]
    except (OSError, ValueError, KeyError, TypeError):
        devices = {}
    counts = {"cpu": 0, "gpu": 0}
    for node in cluster["nodes"]:
        entry = devices.get(node["device"])
        kind = entry.get("kind") if isinstance(entry, dict) else None
        counts["cpu" if kind == "cpu" else "gpu"] += len(node["processes"])
    return counts


def host_problems(ranks: Mapping[str, int], *, gpus: int, cores: int) -> list[str]:
    """What keeps this host from running `ranks` (from `plan_ranks`); HOST_FIX says what to
    do about any of them."""
    problems = []
    if ranks.get("gpu", 0) > gpus:
        problems.append(
            f"the plan runs {plural(ranks['gpu'], 'rank')} on GPUs and this host has"
            f" {plural(gpus, 'GPU') if gpus else 'no GPUs'}: DeepSpeed would build GPU ops for"
            " minutes, then train a GPU-sized model on CPU"
        )
    total = sum(ranks.values())
    if total > RANKS_PER_CORE * cores:
        problems.append(
            f"the plan starts {total} ranks and this host has {plural(cores, 'core')} (at most"
            f" {RANKS_PER_CORE} ranks per core run here)"
        )
    return problems


def extension_roots(environ: Mapping[str, str]) -> list[Path]:
    """Where torch builds extensions: TORCH_EXTENSIONS_DIR, else its user cache folder."""
    given = environ.get("TORCH_EXTENSIONS_DIR")
    if given:
        return [Path(given)]
    cache = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return [Path(cache) / "torch_extensions"]


def _newest_change(folder: Path) -> float:
    return max((p.lstat().st_mtime for p in folder.rglob("*")), default=0.0)


def recover_stale_locks(roots: list[Path], *, now: float | None = None) -> list[Path]:
    """Remove the build locks under `roots` (`<root>/<op>/lock` with TORCH_EXTENSIONS_DIR,
    `<root>/<py_accelerator>/<op>/lock` otherwise) whose build folder has not changed for
    STALE_AFTER seconds; return the removed paths."""
    moment = time.time() if now is None else now
    removed = []
    for root in roots:
        for lock in [*root.glob("*/lock"), *root.glob("*/*/lock")]:
            try:
                if moment - _newest_change(lock.parent) < STALE_AFTER:
                    continue
                lock.unlink()
            except OSError:
                continue
            removed.append(lock)
    return removed
