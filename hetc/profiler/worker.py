"""One rank of a profiling group, and the parent that starts a group of them.

A TP degree above 1, or a collective, needs one process per device joined in a process group,
as the runtime's ranks are: `run_group` starts `python -m hetc.profiler.worker TASK RANK` per
rank (gloo over loopback on CPU, NCCL on GPU, a free localhost port), and each rank writes its
result as JSON beside the task file. A rank that fails prints one line on stderr and exits 1;
the parent stops the others and reports that line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

RANK_TIMEOUT_S = 600.0
"""The longest a rank's collective waits for the others: longer means one has died."""


class GroupFailed(RuntimeError):
    """A rank of a profiling group failed or did not finish; the message says which and why."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def run_group(
    task: dict[str, Any], size: int, *, threads: int | None, deadline_s: float
) -> list[Any]:
    """Each rank's result, in rank order. `task["kind"]` is "layers" or "network"."""
    with tempfile.TemporaryDirectory(prefix="hetc-profile-") as scratch, ExitStack() as files:
        folder = Path(scratch)
        task_path = folder / "task.json"
        task_path.write_text(
            json.dumps({**task, "size": size, "port": _free_port(), "threads": threads}),
            encoding="utf-8",
        )
        env = dict(os.environ)
        if threads is not None:
            env["OMP_NUM_THREADS"] = str(threads)
        logs = [
            files.enter_context(open(folder / f"rank-{r}.err", "w+", encoding="utf-8"))
            for r in range(size)
        ]
        processes = [
            subprocess.Popen(
                [sys.executable, "-m", "hetc.profiler.worker", str(task_path), str(r)],
                stdout=subprocess.DEVNULL,
                stderr=logs[r],
                env=env,
            )
            for r in range(size)
        ]
        try:
            _wait(processes, logs, time.monotonic() + deadline_s)
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        return [
            json.loads((folder / f"rank-{r}.json").read_text(encoding="utf-8")) for r in range(size)
        ]


def _wait(
    processes: list[subprocess.Popen[bytes]], logs: Sequence[IO[str]], deadline: float
) -> None:
    while True:
        codes = [p.poll() for p in processes]
        failed = next((r for r, code in enumerate(codes) if code not in (None, 0)), None)
        if failed is not None:
            logs[failed].seek(0)
            lines = [line for line in logs[failed].read().splitlines() if line.strip()]
            last = lines[-1] if lines else f"exit status {codes[failed]}"
            raise GroupFailed(f"rank {failed} of {len(processes)}: {last}")
        if all(code == 0 for code in codes):
            return
        if time.monotonic() > deadline:
            raise GroupFailed(f"the {len(processes)} ranks did not finish in time")
        time.sleep(0.05)


def _rank_main(task: dict[str, Any], rank: int, folder: Path) -> None:
    import torch
    import torch.distributed as dist

    from hetc.profiler import collectives, layers

    if task["threads"] is not None:
        torch.set_num_threads(task["threads"])
    cuda = task["cuda"]
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"tcp://127.0.0.1:{task['port']}",
        rank=rank,
        world_size=task["size"],
        timeout=timedelta(seconds=RANK_TIMEOUT_S),
    )
    try:
        result: Any
        if task["kind"] == "layers":
            group = dist.new_group(list(range(task["size"])))
            device = torch.device("cuda", rank) if cuda else torch.device("cpu")
            request = layers.LayerTask.from_json(task["layers"])
            result = layers.measure(request, group, task["size"], rank, device).to_json()
        else:
            result = collectives.sweep(
                task["sizes"],
                warmup=task["warmup"],
                repeats=task["repeats"],
                rank=rank,
                devices=task["size"],
                cuda=cuda,
            )
        partial = folder / f".rank-{rank}.json"
        partial.write_text(json.dumps(result), encoding="utf-8")
        partial.rename(folder / f"rank-{rank}.json")
    finally:
        dist.destroy_process_group()


def main(argv: list[str]) -> int:
    task_path, rank = Path(argv[0]), int(argv[1])
    try:
        task = json.loads(task_path.read_text(encoding="utf-8"))
        _rank_main(task, rank, task_path.parent)
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
