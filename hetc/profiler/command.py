"""What `hetc profile measure` does between parsing its arguments and setting its exit code.

It refuses, before measuring anything, what the runtime could not run: a device the spec has
no pool of, a model the runtime does not build, a TP degree above the pool's node size or not
dividing the heads, KV heads, FFN width and padded vocabulary. Then it measures each TP degree
(TP 1 in this process; a higher degree as that many ranks, `hetc.profiler.worker`), measures
the node's collectives, and writes the profile once everything is measured, atomically.

Started by torchrun on several nodes, one process per node (`WORLD_SIZE` > 1 in the
environment), every process first times the collectives between the nodes over torchrun's
process group (`network.inter_node`, keyed 1: one device per node took part); then rank 0
measures its node as above and writes the profile, and the others stop.
"""

from __future__ import annotations

import os
import platform
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import hetc
from hetc.costmodel.profile import (
    BandwidthFit,
    LayerMemory,
    LayerProfile,
    Network,
    write_profile,
)
from hetc.emit.compile import training_record
from hetc.emit.deepspeed import ConfigKey, deepspeed_config
from hetc.plan.topology import BatchTriple
from hetc.profiler import collectives
from hetc.profiler.layers import KINDS, LayerTask, RankMeasurement, measure, slowest
from hetc.profiler.worker import GroupFailed, run_group
from hetc.runtime.model import ModelConfig
from hetc.schema import EnvironmentProblem
from hetc.schema.diagnostics import did_you_mean
from hetc.schema.spec import Spec
from hetc.units import UnitError, parse_quantity

Echo = Callable[..., None]
EXIT_INVALID, EXIT_USAGE, EXIT_ENVIRONMENT = 1, 2, 4
ATTENTION = "sdpa"
"""`hetc.runtime.model.Attention` calls torch.nn.functional.scaled_dot_product_attention
(causal); torch picks its kernel (flash, memory-efficient, cuDNN or math) per call."""
GROUP_DEADLINE_S = 3600.0


class _Refused(Exception):
    """The request cannot be measured: the message, and the exit code that goes with it."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def run_measure_command(
    spec: Spec,
    spec_path: Path,
    device: str,
    output: Path,
    *,
    echo: Echo,
    microbatch: str = "1,2",
    tp: str | None = None,
    warmup: int = 3,
    repeats: int = 10,
    threads: int | None = None,
    network: bool = True,
    network_devices: int | None = None,
    sizes: str | None = None,
) -> int:
    """Measure and write the profile; returns the exit code (0 written, 1 a device, model or
    TP degree the spec cannot use, 2 a malformed option, 4 this machine cannot measure it)."""
    began = time.monotonic()
    try:
        name, node = _device(spec, device)
        config = _model(spec)
        microbatches = _integers(microbatch, "--microbatch")
        degrees = _degrees(config, node, name, tp)
        messages = _sizes(sizes) if network else ()
        group = network_devices if network_devices is not None else node
        if (
            int(os.environ.get("WORLD_SIZE", "1")) > 1
            and os.environ.get("LOCAL_WORLD_SIZE", "1") != "1"
        ):
            raise _Refused(
                "started by torchrun with several processes per node: run one per node"
                " (torchrun --nproc-per-node 1); each measures its own node's devices itself",
                EXIT_USAGE,
            )
    except _Refused as refused:
        echo(f"hetc: {refused}", err=True)
        return refused.code
    cuda = spec.devices[name].kind == "gpu"
    _check_machine(name, cuda, max(degrees), group if messages else 1, output)
    if threads is None and not cuda:
        # As `python -m hetc.runtime`: one thread per rank unless OpenMP is told otherwise.
        given = os.environ.get("OMP_NUM_THREADS", "")
        threads = int(given) if given.isdigit() and int(given) > 0 else 1
    task = layer_task(spec, microbatches, warmup=warmup, repeats=repeats, cuda=cuda)
    per_rank = threads if threads is not None else torch.get_num_threads()
    echo(
        f"hetc: profiling the model of {spec_path} ({spec.model_name}) on {name}:"
        f" {spec.training.precision}, seq_len {spec.training.seq_len},"
        f" microbatch {_list(microbatches)}, TP {_list(degrees)},"
        f" {per_rank} thread(s) per rank, {warmup} warm-up + {repeats} timed iteration(s)",
        err=True,
    )
    if not cuda:
        _warn_oversubscribed(max(degrees) * per_rank, "the largest TP degree", echo)
    measured: dict[int, RankMeasurement] = {}
    between: dict[str, dict[int, BandwidthFit]] = {}
    try:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1 and messages:
            between = _inter_node(messages, warmup, repeats, cuda, echo)
            if int(os.environ.get("RANK", "0")) != 0:
                echo("hetc: inter-node collectives measured; rank 0 writes the profile", err=True)
                return 0
        for t in degrees:
            ranks = f" ({t} processes)" if t > 1 else ""
            echo(f"hetc: measuring TP {t}{ranks} ...", err=True)
            measured[t] = _measure_tp(task, t, threads)
            _echo_point(t, measured[t], echo)
        fits = _network(messages, group, warmup, repeats, cuda, per_rank, echo)
    except (GroupFailed, torch.cuda.OutOfMemoryError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        echo(f"hetc: measuring failed: {message}", err=True)
        echo(
            "To fix: free the devices (or memory) it needs, or ask for less with --tp,"
            " --microbatch or --no-network",
            err=True,
        )
        return EXIT_ENVIRONMENT
    if between:
        fits = {**fits, "inter_node": between}
    profile = _profile(spec, name, measured, fits, per_rank, warmup, repeats, cuda)
    try:
        write_profile(profile, output)
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot write {output}: {exc.strerror or exc}", "pass a writable -o"
        ) from None
    echo(
        f"hetc: wrote {output}: {len(microbatches)} microbatch size(s) x {len(degrees)} TP"
        f" degree(s), {spec.model.layers + 2} layers each"
        f"{f', collectives over {group} devices' if fits else ''}"
        f" ({time.monotonic() - began:.1f} s)",
        err=True,
    )
    return 0


def layer_task(
    spec: Spec, microbatches: Sequence[int], *, warmup: int, repeats: int, cuda: bool
) -> LayerTask:
    """The request every rank measures: the runtime's own records of the spec (any batch
    triple: the profiled iteration takes only the optimizer and loss scaling from it)."""
    triple = BatchTriple(micro=1, accumulation=1, data_parallel=1, loss_weight=1.0)
    return LayerTask(
        training=training_record(spec),
        deepspeed=deepspeed_config(spec, ConfigKey(triple=triple, on_cpu=not cuda)),
        microbatches=tuple(microbatches),
        warmup=warmup,
        repeats=repeats,
        cuda=cuda,
    )


def _device(spec: Spec, device: str) -> tuple[str, int]:
    """The spec's canonical device name and its pools' node size."""
    name = next((d for d in spec.devices if d.casefold() == device.casefold()), None)
    if name is None:
        raise _Refused(
            f"--device {device!r} is not a device of the spec (its devices:"
            f" {', '.join(spec.devices)}){did_you_mean(device, list(spec.devices))}",
            EXIT_INVALID,
        )
    nodes = [p.gpus_per_node for z in spec.zones for p in z.pools if p.device == name]
    return name, max(nodes)


def _model(spec: Spec) -> ModelConfig:
    try:
        return ModelConfig.from_dict(asdict(spec.model))
    except ValueError as exc:
        raise _Refused(
            f"the runtime cannot train {spec.model_name}, so there is nothing to profile: {exc}",
            EXIT_INVALID,
        ) from None


def _integers(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(sorted({int(v) for v in text.split(",") if v.strip()}))
    except ValueError:
        values = ()
    if not values or values[0] < 1:
        raise _Refused(f"{option} {text!r}: give positive integers, e.g. 1,2", EXIT_USAGE)
    return values


def _degrees(config: ModelConfig, node: int, name: str, tp: str | None) -> tuple[int, ...]:
    """The TP degrees asked for, each one the runtime can split the model by on one node;
    by default the powers of two the planner considers (dividing the node size)."""
    if tp is None:
        powers = (2**k for k in range(node.bit_length()))
        return tuple(t for t in powers if node % t == 0 and not _unsplittable(config, t))
    degrees = _integers(tp, "--tp")
    for t in degrees:
        if t > node:
            raise _Refused(
                f"--tp {t}: {name} nodes have {node} device(s); a TP group stays within a node",
                EXIT_INVALID,
            )
        reason = _unsplittable(config, t)
        if reason:
            raise _Refused(f"--tp {t}: {reason}", EXIT_INVALID)
    return degrees


def _unsplittable(config: ModelConfig, tp: int) -> str:
    """Why the runtime cannot split the model `tp` ways (`hetc.runtime.model`), or ''."""
    for what, size in (
        ("heads", config.heads),
        ("kv_heads", config.kv_heads),
        ("ffn", config.ffn),
        ("padded vocabulary", config.padded_vocab),
    ):
        if size % tp:
            return (
                f"the runtime splits {what} ({size}) equally over TP ranks; {tp} does not divide it"
            )
    return ""


def _sizes(text: str | None) -> tuple[int, ...]:
    if text is None:
        return collectives.DEFAULT_SIZES
    try:
        values = tuple(sorted({int(parse_quantity(v.strip(), "size")) for v in text.split(",")}))
    except UnitError as exc:
        raise _Refused(f"--sizes {text!r}: {exc}", EXIT_USAGE) from None
    if len(values) < 3:
        raise _Refused(
            f"--sizes {text!r}: the bandwidth fit needs at least three distinct sizes", EXIT_USAGE
        )
    return values


def _check_machine(name: str, cuda: bool, processes: int, devices: int, output: Path) -> None:
    """What this machine must offer; checked before minutes of measuring."""
    if not output.parent.is_dir():
        raise EnvironmentProblem(
            f"cannot write {output}: {output.parent} is not a directory",
            "create the directory, or pass another -o",
        )
    if not cuda:
        return
    if not torch.cuda.is_available():
        raise EnvironmentProblem(
            f"{name} is a GPU, and torch sees no CUDA device on this machine",
            f"run on a machine with {name} GPUs and a CUDA build of torch",
        )
    count = torch.cuda.device_count()
    if max(processes, devices) > count:
        raise EnvironmentProblem(
            f"the measurement needs {max(processes, devices)} GPUs; this machine has {count}",
            "ask for less with --tp and --network-devices",
        )


def _warn_oversubscribed(processes: int, what: str, echo: Echo) -> None:
    cores = len(os.sched_getaffinity(0))
    if processes > cores:
        echo(
            f"hetc: warning: {what} runs {processes} threads in all on {cores} core(s): the"
            " ranks will wait for each other's cores and time slower than they are",
            err=True,
        )


def _measure_tp(task: LayerTask, tp: int, threads: int | None) -> RankMeasurement:
    if tp > 1:
        request = {"kind": "layers", "layers": task.to_json(), "cuda": task.cuda}
        ranks = run_group(request, tp, threads=threads, deadline_s=GROUP_DEADLINE_S)
        return slowest([RankMeasurement.from_json(r) for r in ranks])
    device = torch.device("cuda", torch.cuda.current_device()) if task.cuda else torch.device("cpu")
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return measure(task, None, 1, 0, device)
    finally:
        torch.set_num_threads(previous)


def _network(
    sizes: Sequence[int],
    devices: int,
    warmup: int,
    repeats: int,
    cuda: bool,
    threads: int,
    echo: Echo,
) -> Network:
    if not sizes:
        return {}
    if devices < 2:
        echo(
            f"hetc: a node has {devices} device: no collectives between devices to measure",
            err=True,
        )
        return {}
    if not cuda:
        _warn_oversubscribed(devices * threads, "the network group", echo)
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
            low, high = fit.points[0], fit.points[-1]
            echo(
                f"hetc: {collective} over {n} devices: {_rate(low[1])} at {_size(low[0])} .."
                f" {_rate(high[1])} at {_size(high[0])}; fit residual {fit.residual:.1%}",
                err=True,
            )
    return {"intra_node": found}


def _inter_node(
    sizes: Sequence[int], warmup: int, repeats: int, cuda: bool, echo: Echo
) -> dict[str, dict[int, BandwidthFit]]:
    """The collectives between the nodes torchrun started, one process on each: p2p between
    ranks 0 and 1, all-reduce and all-gather over all of them."""
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ.get("RANK", "0"))
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    echo(f"hetc: measuring the collectives between {world} nodes (rank {rank}) ...", err=True)
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=GROUP_DEADLINE_S))
    try:
        seconds = collectives.sweep(
            sizes, warmup=warmup, repeats=repeats, rank=rank, devices=world, cuda=cuda
        )
    finally:
        dist.destroy_process_group()
    found = collectives.fits(seconds, sizes, world, per_node=1)
    for collective, by_key in found.items():
        for fit in by_key.values():
            low, high = fit.points[0], fit.points[-1]
            echo(
                f"hetc: {collective} between {world} nodes: {_rate(low[1])} at {_size(low[0])}"
                f" .. {_rate(high[1])} at {_size(high[0])}; fit residual {fit.residual:.1%}",
                err=True,
            )
    return found


def _spread(layers: int, per_kind: Sequence[Any]) -> dict[int, Any]:
    """Profile layer index -> the measurement of its kind: 0 the embedding, 1..L the one block
    measured (the runtime's blocks are identical), L + 1 the output end."""
    return {
        0: per_kind[0],
        **dict.fromkeys(range(1, layers + 1), per_kind[1]),
        layers + 1: per_kind[2],
    }


def _profile(
    spec: Spec,
    name: str,
    measured: dict[int, RankMeasurement],
    network: Network,
    threads: int,
    warmup: int,
    repeats: int,
    cuda: bool,
) -> LayerProfile:
    layers = spec.model.layers
    times: dict[int, dict[int, dict[int, tuple[float, float, float]]]] = {}
    peaks: dict[int, dict[int, float]] = {}
    memory: dict[int, dict[int, LayerMemory]] = {}
    for t, result in measured.items():
        for micro, per_kind in result.times.items():
            times.setdefault(micro, {})[t] = _spread(layers, per_kind)
            peaks.setdefault(micro, {})[t] = float(result.peak_bytes[micro])
        kinds = [
            LayerMemory(
                weight_bytes=float(result.weight_bytes[k]),
                activation_bytes={m: float(a[k]) for m, a in result.activation_bytes.items()},
            )
            for k in range(len(KINDS))
        ]
        memory[t] = _spread(layers, kinds)
    return LayerProfile(
        model=spec.model_name,
        device=name,
        precision=spec.training.precision,
        seq_len=spec.training.seq_len,
        times=times,
        architecture=asdict(spec.model),
        memory=memory,
        peak_bytes=peaks,
        network=network,
        meta=_meta(spec, threads, warmup, repeats, cuda),
    )


def _meta(spec: Spec, threads: int, warmup: int, repeats: int, cuda: bool) -> dict[str, object]:
    software = {
        "hetc": hetc.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    if cuda:
        software["cuda"] = str(torch.version.cuda)
        software["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))  # type: ignore[no-untyped-call]
    return {
        "origin": f"measured by hetc profile measure on {socket.gethostname()}",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "attention": ATTENTION,
        "threads": threads,
        "software": software,
        "hardware": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
        "spec": spec.name,
        "activation_checkpointing": spec.training.activation_checkpointing,
        "dropout": spec.training.dropout,
        "optimizer": spec.training.optimizer.type,
        "timing": f"median of {repeats} after {warmup} warm-up, the slowest TP rank;"
        f" {'CUDA events' if cuda else 'time.perf_counter'}",
        "memory": "CUDA caching allocator" if cuda else "live tensor storage (LiveTensorBytes)",
        "layers": "0 embedding; 1..L one measured block; L+1 final norm, head and loss",
    }


def _echo_point(tp: int, result: RankMeasurement, echo: Echo) -> None:
    for micro, per_kind in result.times.items():
        parts = ", ".join(
            f"{kind} {'/'.join(f'{s * 1e3:.3g}' for s in t)} ms"
            for kind, t in zip(KINDS, per_kind, strict=True)
        )
        kept = "/".join(_size(b) for b in result.activation_bytes[micro])
        echo(
            f"hetc: TP {tp}, microbatch {micro}: {parts} (forward/backward/update);"
            f" activations {kept}; peak {_size(result.peak_bytes[micro])}",
            err=True,
        )


def _list(values: Sequence[int]) -> str:
    return ",".join(map(str, values))


def _size(value: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} B"


def _rate(value: float) -> str:
    return f"{value / 1e9:.3g} GB/s"
