"""Helpers for the `hetc run` tests and bench/reconfigure.py: a short CPU example in a scratch
folder, the supervisor as a subprocess, killing one node's ranks as a lost machine would, and
reading a generation's records and metrics."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "local-cpu.yaml"


def cpu_spec(folder: Path, *, steps: int, checkpoint_every: int) -> Path:
    """examples/local-cpu.yaml with `steps` and `checkpoint_every`, beside its data."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "examples" / "data", folder / "data", dirs_exist_ok=True)
    text = EXAMPLE.read_text(encoding="utf-8").replace(
        "run: {steps: 20, checkpoint_dir: ckpt/}",
        f"run: {{steps: {steps}, checkpoint_every: {checkpoint_every}, checkpoint_dir: ckpt/}}",
    )
    assert f"steps: {steps}," in text, "examples/local-cpu.yaml's run line changed"
    spec = folder / "spec.yaml"
    spec.write_text(text, encoding="utf-8")
    return spec


def environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


def hetc(*args: str, cwd: Path, log: Path | None = None) -> subprocess.Popen[bytes]:
    """`python -m hetc ARGS` in its own session, output to `log` (or captured)."""
    out = open(log, "wb") if log is not None else subprocess.PIPE  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, "-m", "hetc", *args],
        cwd=cwd,
        env=environment(),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_for(what: str, check: Callable[[], Any], timeout: float, proc: Any = None) -> Any:
    """Poll `check` until it returns something truthy; fails after `timeout` seconds, or at
    once when `proc` (the supervisor) has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"waiting for {what}: the supervisor exited {proc.returncode}")
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def record(out: Path, number: int) -> dict[str, Any] | None:
    path = out.parent / f"{out.name}.elastic" / "generations" / f"{number:04d}.json"
    try:
        loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return loaded
    except (OSError, ValueError):
        return None


def training(out: Path, number: int) -> dict[str, Any] | None:
    """Generation `number`'s record once it has written its first step."""
    found = record(out, number)
    return found if found is not None and "training_at" in found else None


def losses(run_dir: Path, plan_hash: str) -> dict[int, float]:
    """Plan rank 0's loss by step, from the run's metrics, for one plan."""
    found: dict[int, float] = {}
    path = run_dir / "metrics" / "rank-00000.jsonl"
    if not path.exists():
        return found
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("plan_hash") == plan_hash:
            found[entry["step"]] = entry["loss"]
    return found


def node_processes(node_id: str, run_dir: Path) -> list[int]:
    """The processes of one node of the run: torchrun and its ranks (they carry HETC_NODE and
    the run directory in their environment)."""
    pids = []
    wanted = {f"HETC_NODE={node_id}".encode(), f"HETC_RUN_DIR={run_dir}".encode()}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if wanted <= environ:
            pids.append(int(entry.name))
    return pids


def kill_node(node_id: str, process_group: int, run_dir: Path) -> float:
    """Lose a node as a machine loss would: SIGKILL its node script's process group and every
    process of the node (torchrun starts its ranks in sessions of their own, out of reach of
    the group). Returns the time of the kill."""
    ranks = node_processes(node_id, run_dir)
    assert ranks, f"no process of {node_id} found"
    killed = time.time()
    os.killpg(process_group, signal.SIGKILL)
    for pid in ranks:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return killed
