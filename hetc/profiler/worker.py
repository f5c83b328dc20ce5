"""One rank of a profiling group, and the parent that starts a group of them.

A TP degree above 1, or a collective, needs one process per device joined in a process group,
as the runtime's ranks are: the parent starts `python -m hetc.profiler.worker TASK RANK` per
rank (gloo over loopback on CPU, NCCL on GPU, a free localhost port), and each rank writes its
result as JSON beside the task file. A rank that fails prints one line on stderr and exits 1;
the parent stops the others and reports that line.

A layers group measures its microbatch sizes one point at a time (`run_layer_group`): after
each point every rank writes its numbers and waits for the parent's word, `go` or `stop`,
so that the parent can show progress and keep a time budget exactly at point boundaries. A
rank that runs out of memory writes which point it was measuring and exits with status
`OUT_OF_MEMORY`; the parent records that point as out of memory and stops the others (which
may be waiting in a TP collective for the rank that is gone).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

from hetc.profiler.layers import LayerTask, RankMeasurement, slowest

RANK_TIMEOUT_S = 600.0
"""The longest a rank's collective waits for the others, or a rank for the parent's word:
longer means one has died."""
OUT_OF_MEMORY = 3
"""A rank's exit status after running out of memory (its point is in `rank-<r>-oom.json`)."""
POLL_S = 0.02


class GroupFailed(RuntimeError):
    """A rank of a profiling group failed or did not finish; the message says which and why."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Group:
    """Running rank processes in a scratch folder; `poll` says whether all have finished."""

    def __init__(
        self, folder: Path, processes: list[subprocess.Popen[bytes]], logs: Sequence[IO[str]]
    ) -> None:
        self.folder, self.processes, self.logs = folder, processes, logs

    def poll(self, deadline: float) -> bool:
        """True once every rank exited 0; raises GroupFailed at a failure or past `deadline`."""
        codes = [p.poll() for p in self.processes]
        failed = next((r for r, code in enumerate(codes) if code not in (None, 0)), None)
        if failed is not None:
            self.logs[failed].seek(0)
            lines = [line for line in self.logs[failed].read().splitlines() if line.strip()]
            last = lines[-1] if lines else f"exit status {codes[failed]}"
            raise GroupFailed(f"rank {failed} of {len(self.processes)}: {last}")
        if all(code == 0 for code in codes):
            return True
        if time.monotonic() > deadline:
            raise GroupFailed(f"the {len(self.processes)} ranks did not finish in time")
        return False


@contextmanager
def _started(task: dict[str, Any], size: int, threads: int | None) -> Iterator[Group]:
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
            yield Group(folder, processes, logs)
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()


def run_group(
    task: dict[str, Any], size: int, *, threads: int | None, deadline_s: float
) -> list[Any]:
    """Each rank's result, in rank order, for a collectives task (`task["kind"]` "network"
    or "loopback")."""
    with _started(task, size, threads) as group:
        deadline = time.monotonic() + deadline_s
        while not group.poll(deadline):
            time.sleep(POLL_S)
        return [
            json.loads((group.folder / f"rank-{r}.json").read_text(encoding="utf-8"))
            for r in range(size)
        ]


PointSink = Callable[[int, RankMeasurement | None], bool]
"""Told each point's (microbatch, slowest rank's measurement or None for out of memory);
returns whether to measure the next."""


def run_layer_group(
    task: LayerTask, size: int, *, threads: int | None, deadline_s: float, on_point: PointSink
) -> None:
    """Measure `task`'s microbatch sizes on `size` TP ranks, point by point (see the module
    docstring); `on_point` gets each, and its answer goes to the ranks."""
    request = {"kind": "layers", "layers": task.to_json(), "cuda": task.cuda}
    with _started(request, size, threads) as group:
        follow(group, task.microbatches, time.monotonic() + deadline_s, on_point)


def follow(group: Group, microbatches: Sequence[int], deadline: float, on_point: PointSink) -> None:
    """The parent's side of a layers group: each point's files as the ranks write them,
    `on_point`'s word back to them, and a rank's out-of-memory exit as that point's None."""
    size = len(group.processes)
    index = 0
    while True:
        failure: GroupFailed | None = None
        try:
            finished = group.poll(deadline)
        except GroupFailed as exc:
            failure, finished = exc, True
        while index < len(microbatches) and all(
            (group.folder / f"rank-{r}-point-{index}.json").exists() for r in range(size)
        ):
            ranks = [
                RankMeasurement.from_json(
                    json.loads((group.folder / f"rank-{r}-point-{index}.json").read_text("utf-8"))
                )
                for r in range(size)
            ]
            go = on_point(microbatches[index], slowest(ranks))
            _write(group.folder / f"decision-{index}", "go" if go else "stop")
            index += 1
            if not go:
                return
        if failure is not None:
            oom = [group.folder / f"rank-{r}-oom.json" for r in range(size)]
            found = [json.loads(p.read_text("utf-8")) for p in oom if p.exists()]
            if not found:
                raise failure
            on_point(min(found), None)
            return
        if finished:
            return
        time.sleep(POLL_S)


def _write(path: Path, text: str) -> None:
    """Atomically: the reader polls for the name, and must never see half a file."""
    partial = path.with_name(f".{path.name}")
    partial.write_text(text, encoding="utf-8")
    partial.rename(path)


def _parent_says_go(folder: Path, index: int) -> bool:
    deadline = time.monotonic() + RANK_TIMEOUT_S
    decision = folder / f"decision-{index}"
    while not decision.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no word from the parent after point {index}")
        time.sleep(POLL_S)
    return decision.read_text(encoding="utf-8") == "go"


class _OutOfMemory(Exception):
    """This rank ran out of memory; the point is written, the exit status says so."""


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
            points = layers.measure_points(request, group, task["size"], rank, device)
            for index, (micro, measured) in enumerate(points):
                if measured is None:
                    _write(folder / f"rank-{rank}-oom.json", json.dumps(micro))
                    raise _OutOfMemory(f"ran out of memory at microbatch {micro}")
                _write(folder / f"rank-{rank}-point-{index}.json", json.dumps(measured.to_json()))
                if not _parent_says_go(folder, index):
                    break
            return
        if task["kind"] == "loopback":
            result = collectives.loopback_sweep(
                task["sizes"],
                task["flows"],
                warmup=task["warmup"],
                repeats=task["repeats"],
                rank=rank,
                node=task["size"] // 2,
            )
        else:
            result = collectives.sweep(
                task["sizes"],
                warmup=task["warmup"],
                repeats=task["repeats"],
                rank=rank,
                devices=task["size"],
                cuda=cuda,
            )
        _write(folder / f"rank-{rank}.json", json.dumps(result))
    finally:
        dist.destroy_process_group()


def main(argv: list[str]) -> int:
    task_path, rank = Path(argv[0]), int(argv[1])
    try:
        task = json.loads(task_path.read_text(encoding="utf-8"))
        _rank_main(task, rank, task_path.parent)
    except _OutOfMemory as exc:
        print(f"OutOfMemoryError: {exc}", file=sys.stderr, flush=True)
        return OUT_OF_MEMORY
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
