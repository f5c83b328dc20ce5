"""The measuring steps of `hetc profile measure`, each reporting to a `Progress`.

Layer points run TP degree by TP degree (TP 1 in this process, a higher degree as that many
ranks, `hetc.profiler.worker`), each degree's microbatch sizes smallest first; a point that
runs out of memory ends its degree, and every larger microbatch size of that degree is
recorded as out of memory too (it holds more). After each point the caller's `go` decides
whether to measure the next, which is how `--budget` stops after the point in progress.
Then the collectives inside a node, and for a CPU device the link between two nodes over
loopback (`collectives.loopback_sweep`). The links between nodes under torchrun are
`hetc.profiler.cluster`'s.
"""

from __future__ import annotations

import platform
import socket
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import torch

import hetc
from hetc.costmodel.profile import BandwidthFit, LayerMemory, LayerProfile, MeasuredLink, Network
from hetc.profiler import collectives
from hetc.profiler.layers import KINDS, LayerTask, RankMeasurement, measure_points
from hetc.profiler.progress import Progress
from hetc.profiler.worker import run_group, run_layer_group
from hetc.schema.spec import Spec
from hetc.units import plural

ATTENTION = "sdpa"
"""`hetc.runtime.model.Attention` calls torch.nn.functional.scaled_dot_product_attention
(causal); torch picks its kernel (flash, memory-efficient, cuDNN or math) per call."""
GROUP_DEADLINE_S = 3600.0


@dataclass(kw_only=True, slots=True)
class Measured:
    """What this run measured so far."""

    points: dict[int, dict[int, RankMeasurement]] = field(default_factory=dict)
    """tp -> microbatch -> the slowest rank's numbers."""
    out_of_memory: dict[int, set[int]] = field(default_factory=dict)
    """microbatch -> TP degrees that ran out of memory."""
    network: Network = field(default_factory=dict)
    links: list[MeasuredLink] = field(default_factory=list)
    """Links measured between named zones (`network.links`)."""

    def count(self) -> int:
        return sum(len(p) for p in self.points.values()) + sum(
            len(t) for t in self.out_of_memory.values()
        )


def measure_layer_points(
    task_for: Callable[[Sequence[int]], LayerTask],
    todo: Sequence[tuple[int, int]],
    threads: int | None,
    measured: Measured,
    progress: Progress,
    go: Callable[[], bool],
) -> bool:
    """Measure the (tp, microbatch) points of `todo` into `measured`; False when `go` said
    stop after a point (points of `todo` are then left), True when all were done."""
    by_tp: dict[int, list[int]] = {}
    for tp, micro in todo:
        by_tp.setdefault(tp, []).append(micro)
    for tp, micros in by_tp.items():
        stopped = False

        def on_point(
            micro: int, result: RankMeasurement | None, tp: int = tp, micros: list[int] = micros
        ) -> bool:
            nonlocal stopped
            if result is None:
                larger = [m for m in micros if m >= micro]
                for m in larger:
                    measured.out_of_memory.setdefault(m, set()).add(tp)
                    cause = "" if m == micro else f" (as microbatch {micro} did)"
                    progress.point(f"TP {tp}, microbatch {m}: out of memory{cause}")
                stopped = not go()
                return False
            measured.points.setdefault(tp, {})[micro] = result
            progress.point(point_text(tp, micro, result))
            stopped = not go()
            return not stopped

        task = task_for(micros)
        if tp > 1:
            progress.note(f"hetc: starting {tp} processes for TP {tp} ...")
            run_layer_group(
                task, tp, threads=threads, deadline_s=GROUP_DEADLINE_S, on_point=on_point
            )
        else:
            _in_process(task, threads, on_point)
        if stopped:
            return False
    return True


def _in_process(
    task: LayerTask, threads: int | None, on_point: Callable[[int, RankMeasurement | None], bool]
) -> None:
    device = torch.device("cuda", torch.cuda.current_device()) if task.cuda else torch.device("cpu")
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    points = measure_points(task, None, 1, 0, device)
    try:
        for micro, result in points:
            if not on_point(micro, result):
                break
    finally:
        points.close()
        torch.set_num_threads(previous)


def measure_intra_node(
    sizes: Sequence[int],
    devices: int,
    warmup: int,
    repeats: int,
    cuda: bool,
    threads: int,
    progress: Progress,
) -> Network:
    """The node's all-reduce, all-gather and point-to-point fits over `devices` ranks."""
    request = {
        "kind": "network",
        "sizes": list(sizes),
        "warmup": warmup,
        "repeats": repeats,
        "cuda": cuda,
    }
    seconds = run_group(request, devices, threads=threads, deadline_s=GROUP_DEADLINE_S)[0]
    found = collectives.fits(seconds, sizes, devices)
    for collective, by_group in found.items():
        for n, fit in by_group.items():
            progress.note(f"hetc: {collective} over {n} devices: {fit_text(fit)}")
    progress.point(f"collectives inside a node of {devices} devices")
    return {"intra_node": found}


def measure_loopback(
    sizes: Sequence[int],
    flows: Sequence[int],
    warmup: int,
    repeats: int,
    threads: int,
    progress: Progress,
) -> Network:
    """The link between two nodes of a CPU device on this host, for each flow count."""
    node = max(flows)
    request = {
        "kind": "loopback",
        "sizes": list(sizes),
        "flows": list(flows),
        "warmup": warmup,
        "repeats": repeats,
        "cuda": False,
    }
    seconds = run_group(request, 2 * node, threads=threads, deadline_s=GROUP_DEADLINE_S)[0]
    found = collectives.loopback_fits(seconds, sizes)
    for n, fit in found.items():
        progress.note(
            f"hetc: between two nodes over loopback, {plural(n, 'flow')}: {fit_text(fit)}"
        )
    progress.point(f"link between nodes over loopback, {','.join(map(str, flows))} flows")
    return {"inter_node": {"p2p": found}}


def _spread(layers: int, per_kind: Sequence[Any]) -> dict[int, Any]:
    """Profile layer index -> the measurement of its kind: 0 the embedding, 1..L the one block
    measured (the runtime's blocks are identical), L + 1 the output end."""
    return {
        0: per_kind[0],
        **dict.fromkeys(range(1, layers + 1), per_kind[1]),
        layers + 1: per_kind[2],
    }


def build_profile(
    spec: Spec,
    name: str,
    measured: Measured,
    environment: dict[str, Any],
    meta: dict[str, object],
) -> LayerProfile:
    """The profile of what this run measured (its `times` empty when no point was)."""
    layers = spec.model.layers
    times: dict[int, dict[int, dict[int, tuple[float, float, float]]]] = {}
    peaks: dict[int, dict[int, float]] = {}
    memory: dict[int, dict[int, LayerMemory]] = {}
    for tp, by_micro in measured.points.items():
        for micro, result in by_micro.items():
            times.setdefault(micro, {})[tp] = _spread(layers, result.times[micro])
            peaks.setdefault(micro, {})[tp] = float(result.peak_bytes[micro])
        first = next(iter(by_micro.values()))
        kinds = [
            LayerMemory(
                weight_bytes=float(first.weight_bytes[k]),
                activation_bytes={m: float(r.activation_bytes[m][k]) for m, r in by_micro.items()},
            )
            for k in range(len(KINDS))
        ]
        memory[tp] = _spread(layers, kinds)
    return LayerProfile(
        model=spec.model_name,
        device=name,
        precision=spec.training.precision,
        seq_len=spec.training.seq_len,
        times=times,
        architecture=asdict(spec.model),
        memory=memory,
        peak_bytes=peaks,
        network=measured.network,
        links=tuple(measured.links),
        out_of_memory={m: frozenset(t) for m, t in measured.out_of_memory.items()},
        environment=environment,
        meta=meta,
    )


def settings(spec: Spec) -> dict[str, object]:
    """What the layers were set up with that changes their numbers (`points.SETTINGS`)."""
    training = spec.training
    return {
        "activation_checkpointing": training.activation_checkpointing,
        "dropout": training.dropout,
        "optimizer": training.optimizer.type,
        "gradient_clipping": training.gradient_clipping,
        "attention": ATTENTION,
    }


def meta(spec: Spec, threads: int, warmup: int, repeats: int, cuda: bool) -> dict[str, object]:
    software = {
        "hetc": hetc.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    if cuda:
        software["cuda"] = str(torch.version.cuda)
        software["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))  # type: ignore[no-untyped-call]
    return {
        **settings(spec),
        "origin": f"measured by hetc profile measure on {socket.gethostname()}",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "threads": threads,
        "software": software,
        "hardware": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
        "spec": spec.name,
        "timing": f"median of {repeats} after {warmup} warm-up, the slowest TP rank;"
        f" {'CUDA events' if cuda else 'time.perf_counter'}",
        "memory": "CUDA caching allocator" if cuda else "live tensor storage (LiveTensorBytes)",
        "layers": "0 embedding; 1..L one measured block; L+1 final norm, head and loss",
    }


def point_text(tp: int, micro: int, result: RankMeasurement) -> str:
    parts = ", ".join(
        f"{kind} {'/'.join(f'{s * 1e3:.3g}' for s in t)} ms"
        for kind, t in zip(KINDS, result.times[micro], strict=True)
    )
    kept = "/".join(size_text(b) for b in result.activation_bytes[micro])
    return (
        f"TP {tp}, microbatch {micro}: {parts} (forward/backward/update);"
        f" activations {kept}; peak {size_text(result.peak_bytes[micro])}"
    )


def fit_text(fit: BandwidthFit) -> str:
    low, high = fit.points[0], fit.points[-1]
    return (
        f"{_rate(low[1])} at {size_text(low[0])} .. {_rate(high[1])} at {size_text(high[0])};"
        f" fit residual {fit.residual:.1%}"
    )


def size_text(value: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def _rate(value: float) -> str:
    return f"{value / 1e9:.3g} GB/s"
