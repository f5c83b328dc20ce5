"""What `hetc profile measure` does between parsing its arguments and setting its exit code.

It refuses, before measuring anything, what the runtime could not run: a device the spec has
no pool of, a model the runtime does not build, a TP degree above the pool's node size or not
dividing the heads, KV heads, FFN width and padded vocabulary; and an output file that holds
another profile (`points.identity_problem`) or is not a profile at all. Then it measures the
points the planner may choose that the output file does not hold yet (`points`), with a
progress display (`progress`) and an optional time budget, the node's collectives and, for a
CPU device, the link between two nodes over loopback (`steps`); and writes the profile,
atomically, with what it measured and what the file held.

Started by torchrun on several nodes (`WORLD_SIZE` > 1 in the environment), n processes per
node, every process first takes part in timing the links between every two nodes
(`hetc.profiler.cluster`; which pairs and where their fits are filed: `hetc.profiler.pairs`).
Each node names its zone (`--zone`, `$HETC_ZONE`) and its device (`--device`); the first node
of each device then measures itself as above and writes that device's profile into its `-o`,
and the other processes stop. A refusal on any node refuses every node, with the same lines.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from hetc.costmodel.profile import (
    LayerProfile,
    ProfileError,
    read_profile,
    write_profile,
)
from hetc.emit.compile import training_record
from hetc.emit.deepspeed import ConfigKey, deepspeed_config
from hetc.plan.topology import BatchTriple
from hetc.profiler import collectives
from hetc.profiler.cluster import between_nodes, identity
from hetc.profiler.layers import LayerTask
from hetc.profiler.pairs import Filed, Rank
from hetc.profiler.points import (
    identity_problem,
    merged,
    missing_points,
    planner_points,
    reuse_differences,
)
from hetc.profiler.progress import Progress
from hetc.profiler.steps import (
    ATTENTION,
    Measured,
    build_profile,
    measure_intra_node,
    measure_layer_points,
    measure_loopback,
    meta,
    settings,
)
from hetc.profiler.worker import GroupFailed
from hetc.runtime.environment import current_environment
from hetc.runtime.model import ModelConfig
from hetc.schema import EnvironmentProblem
from hetc.schema.diagnostics import did_you_mean
from hetc.schema.spec import Spec
from hetc.units import UnitError, parse_quantity, plural

__all__ = ["ATTENTION", "layer_task", "run_measure_command"]

Echo = Callable[..., None]
EXIT_INVALID, EXIT_USAGE, EXIT_ENVIRONMENT = 1, 2, 4


class _Refused(Exception):
    """The request cannot be measured: the message, the exit code, and what to do."""

    def __init__(self, message: str, code: int, to_fix: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.to_fix = to_fix


def run_measure_command(
    spec: Spec,
    spec_path: Path,
    device: str,
    output: Path,
    *,
    echo: Echo,
    zone: str | None = None,
    microbatch: str | None = None,
    tp: str | None = None,
    warmup: int = 3,
    repeats: int = 10,
    threads: int | None = None,
    network: bool = True,
    network_devices: int | None = None,
    sizes: str | None = None,
    budget: float | None = None,
    remeasure: bool = False,
    terminal: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Measure what the output file lacks and write the profile; returns the exit code (0
    written or nothing to measure, 1 a device, zone, model, TP degree or output file the spec
    cannot use, 2 a malformed option, 4 this machine cannot measure it). `zone`: the spec's
    zone this node is in (None: `$HETC_ZONE`, else the spec's only zone, else unnamed).
    `terminal`: stderr is a terminal, so progress is one bar redrawn in place. `clock` times
    the budget."""
    began = clock()
    rank, world, _, _, local_world = identity()
    try:
        name, node, where = _placed(spec, spec_path, device, zone)
        config = _model(spec)
        planned_micro, planned_tp = planner_points(spec, name)
        microbatches = (
            planned_micro if microbatch is None else _integers(microbatch, "--microbatch")
        )
        degrees = _degrees(config, node, name, tp, planned_tp)
        messages = _sizes(sizes) if network else ()
    except _Refused as refused:
        if world > 1 and network:  # the other nodes wait for this one in the exchange
            problem = (_plain(str(refused)), refused.code, refused.to_fix)
            refusal = _join(_rank(problem=problem), spec, world, echo)
            assert isinstance(refusal, int)  # a node's refusal refuses every node
            return refusal
        echo(f"hetc: {refused}", err=True)
        return refused.code
    group = network_devices if network_devices is not None else node
    cuda = spec.devices[name].kind == "gpu"
    loopback = _loopback_flows(cuda, messages, world, degrees, node)
    filed = Filed()
    if world > 1 and messages:
        flows = [t for t in sorted({*degrees, local_world}) if t <= local_world]
        found = _between(
            spec, name, node, where, output, echo, flows=flows, sizes=messages, warmup=warmup,
            repeats=repeats, processes=max(*degrees, group),
        )  # fmt: skip
        if isinstance(found, int):
            return found
        filed = found
    _check_machine(name, cuda, max(degrees), group if messages else 1, output)
    if threads is None and not cuda:
        # As `python -m hetc.runtime`: one thread per rank unless OpenMP is told otherwise.
        given = os.environ.get("OMP_NUM_THREADS", "")
        threads = int(given) if given.isdigit() and int(given) > 0 else 1
    per_rank = threads if threads is not None else torch.get_num_threads()
    environment = current_environment(cuda=cuda, threads=per_rank)
    if world > 1 and not messages and rank != 0:
        echo("hetc: --no-network: rank 0 measures its node and writes the profile", err=True)
        return 0
    try:
        existing = _existing(output, spec, name, environment, remeasure=remeasure, echo=echo)
    except _Refused as refused:
        echo(str(refused), err=True)
        echo(f"To fix: {refused.to_fix}", err=True)
        return refused.code
    todo = missing_points(existing, microbatches, degrees)
    intra = bool(messages) and group >= 2 and not _has_intra_node(existing, group)
    loopback = [n for n in loopback if not _has_inter_node(existing, n)]
    between = bool(filed.network or filed.links)
    total = len(todo) + intra + bool(loopback)
    held = (
        ""
        if existing is None
        else f"; {output} holds {plural(len(existing.points()), 'point')} already"
    )
    echo(
        f"hetc: profiling the model of {spec_path} ({spec.model_name}) on {name}:"
        f" {spec.training.precision}, seq_len {spec.training.seq_len},"
        f" microbatch {_list(microbatches)}, TP {_list(degrees)},"
        f" {plural(per_rank, 'thread')} per rank, {warmup} warm-up + {repeats} timed"
        f" iterations{held}",
        err=True,
    )
    if not total and not between:
        echo(f"hetc: {output} holds every point asked for: nothing to measure", err=True)
        return 0
    if not cuda:
        _warn_oversubscribed(max(degrees) * per_rank, "the largest TP degree", echo)
        _warn_oversubscribed(2 * max(loopback, default=0) * per_rank, "the loopback link", echo)
    measured = Measured(network=filed.network, links=filed.links)
    progress = Progress(echo, total, terminal=terminal, clock=clock)

    def go() -> bool:
        return budget is None or clock() - began < budget

    complete, failure = False, None
    try:
        task_for = _task_maker(spec, warmup, repeats, cuda)
        complete = measure_layer_points(task_for, todo, threads, measured, progress, go)
        if complete and intra:
            measured.network.update(
                measure_intra_node(messages, group, warmup, repeats, cuda, per_rank, progress)
            )
            complete = go() or not loopback
        if complete and loopback:
            found_loopback = measure_loopback(
                messages, loopback, warmup, repeats, per_rank, progress
            )
            measured.network.setdefault("inter_node", {}).update(found_loopback["inter_node"])
    except (GroupFailed, torch.cuda.OutOfMemoryError) as exc:
        failure = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        complete = False
    finally:
        progress.close()
    facts = {**meta(spec, per_rank, warmup, repeats, cuda), **filed.notes}
    new = build_profile(spec, name, measured, environment, facts)
    wrote = bool(measured.count() or measured.network or measured.links) and _write(
        merged(existing, new), output
    )
    if failure is not None:
        echo(f"hetc: measuring failed: {failure}", err=True)
        echo(
            "To fix: free the devices (or memory) it needs, or ask for less with --tp,"
            " --microbatch or --no-network"
            + (
                f"; {output} keeps what was measured, and the same command measures the rest"
                if wrote
                else ""
            ),
            err=True,
        )
        return EXIT_ENVIRONMENT
    if not wrote:
        echo(
            f"hetc: every point ran out of {name}'s memory: nothing to write",
            err=True,
        )
        echo(
            "To fix: measure on a device with more memory, or train with activation"
            " checkpointing or a shorter sequence",
            err=True,
        )
        return EXIT_ENVIRONMENT
    summary = (
        f"hetc: wrote {output}: {plural(measured.count(), 'point')} measured"
        + (f", {len(existing.points())} kept" if existing is not None else "")
        + f", {spec.model.layers + 2} layers each"
        + (", collectives inside a node" if intra and "intra_node" in measured.network else "")
        + (", the links between nodes" if between or "inter_node" in measured.network else "")
        + f" ({clock() - began:.1f} s)"
    )
    echo(summary, err=True)
    if not complete:
        left = _left(todo, measured, intra, loopback)
        echo(
            f"hetc: the budget of {budget:g} s is spent; not measured: {'; '.join(left)}", err=True
        )
        echo(
            "hetc: to measure them (the points in the file are kept): "
            + _rerun(
                spec_path,
                name,
                output,
                microbatch,
                tp,
                threads,
                warmup,
                repeats,
                network,
                network_devices,
                sizes,
            ),
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


def _task_maker(
    spec: Spec, warmup: int, repeats: int, cuda: bool
) -> Callable[[Sequence[int]], LayerTask]:
    return lambda micros: layer_task(spec, micros, warmup=warmup, repeats=repeats, cuda=cuda)


def _existing(
    output: Path,
    spec: Spec,
    name: str,
    environment: dict[str, object],
    *,
    remeasure: bool,
    echo: Echo,
) -> LayerProfile | None:
    """The profile in `output` whose points can be kept, or None (no file, `remeasure`, or
    measured otherwise: a warning says how). Refused: a file that is not a profile hetc
    reads, or that profiles another model, device, precision or sequence length."""
    existing = _readable(output, spec, name)
    if existing is None or remeasure:
        return None
    differences = reuse_differences(existing, settings(spec), environment)
    if differences:
        echo(
            f"hetc: warning: {output} was measured differently: {'; '.join(differences)}:"
            " measuring every point again",
            err=True,
        )
        return None
    return existing


def _readable(output: Path, spec: Spec, name: str) -> LayerProfile | None:
    """The profile `output` holds, or None (no file); refused: a file hetc cannot read, or
    the profile of another model, device, precision or sequence length."""
    if not output.exists():
        return None
    try:
        existing = read_profile(output)
    except ProfileError as exc:
        raise _Refused(
            str(exc),
            EXIT_INVALID,
            f"remove {output} (it is not a profile hetc can read), or pass another -o",
        ) from None
    problem = identity_problem(existing, spec, name)
    if problem is not None:
        raise _Refused(
            f"hetc: {output} holds another profile: {problem}",
            EXIT_INVALID,
            f"pass another -o, or remove {output} to replace it",
        )
    return existing


def _between(
    spec: Spec,
    name: str,
    node: int,
    zone: str | None,
    output: Path,
    echo: Echo,
    *,
    flows: Sequence[int],
    sizes: Sequence[int],
    warmup: int,
    repeats: int,
    processes: int,
) -> Filed | int:
    """Under torchrun: this node's part in timing the links between the nodes
    (`hetc.profiler.cluster`); what this process files in its device's profile, or its exit
    code. Its machine's problems, and where its node writes the profile, its `-o`'s and the
    devices its own measurement needs (`processes`), refuse every node before the links are
    timed rather than after."""
    _, world, _, local_rank, local_world = identity()
    cuda = spec.devices[name].kind == "gpu"
    problem = None
    try:
        _check_devices(name, cuda, local_world)
    except EnvironmentProblem as exc:
        problem = (exc.what, EXIT_ENVIRONMENT, exc.to_fix)
    output_problem = None
    if local_rank == 0:
        try:
            _check_folder(output)
            _check_devices(name, cuda, processes)
            _readable(output, spec, name)
        except _Refused as refused:
            output_problem = (_plain(str(refused)), refused.code, refused.to_fix)
        except EnvironmentProblem as exc:
            output_problem = (exc.what, EXIT_ENVIRONMENT, exc.to_fix)
    me = _rank(
        device=name,
        kind=spec.devices[name].kind,
        zone=zone,
        devices=node,
        flows=tuple(flows),
        sizes=tuple(sizes),
        warmup=warmup,
        repeats=repeats,
        output=str(output.resolve()),
        problem=problem,
        output_problem=output_problem,
    )
    return _join(me, spec, world, echo)


def _join(me: Rank, spec: Spec, world: int, echo: Echo) -> Filed | int:
    try:
        return between_nodes(me, _regions(spec), world=world, echo=echo)
    except GroupFailed as exc:
        echo(f"hetc: measuring failed: {exc}", err=True)
        echo(
            "To fix: check that every node's torchrun is running and that the nodes reach each"
            " other, then run the same command on every node again",
            err=True,
        )
        return EXIT_ENVIRONMENT


def _rank(**fields: Any) -> Rank:
    """What this process tells the others (`pairs.Rank`)."""
    rank, _, node, local_rank, local_world = identity()
    return Rank(
        rank=rank,
        node=node,
        local_rank=local_rank,
        local_world=local_world,
        host=socket.gethostname(),
        **fields,
    )


def _regions(spec: Spec) -> dict[str, str]:
    return {z.name: z.region for z in spec.zones}


def _plain(message: str) -> str:
    """A refusal's text without the leading `hetc: ` (a node's name goes there)."""
    return message.removeprefix("hetc: ")


def _has_intra_node(existing: LayerProfile | None, devices: int) -> bool:
    if existing is None:
        return False
    fits = existing.network.get("intra_node", {})
    return all((2 if c == "p2p" else devices) in fits.get(c, {}) for c in collectives.COLLECTIVES)


def _has_inter_node(existing: LayerProfile | None, flows: int) -> bool:
    if existing is None:
        return False
    return flows in existing.network.get("inter_node", {}).get("p2p", {})


def _loopback_flows(
    cuda: bool, messages: Sequence[int], world: int, degrees: Sequence[int], node: int
) -> list[int]:
    """The flow counts of a CPU device's link between nodes to measure over loopback: each
    TP degree (a ring's hop carries that many flows per node) and the node's device count;
    none for a GPU, without the sweep, or under torchrun (which measures the real link)."""
    if cuda or not messages or world > 1:
        return []
    return sorted({*degrees, node})


def _write(profile: LayerProfile, output: Path) -> bool:
    """Write `profile` if it holds a point; whether it did."""
    if not profile.times:
        return False
    try:
        write_profile(profile, output)
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot write {output}: {exc.strerror or exc}", "pass a writable -o"
        ) from None
    return True


def _left(
    todo: Sequence[tuple[int, int]], measured: Measured, intra: bool, loopback: Sequence[int]
) -> list[str]:
    """What the run did not measure, in words."""
    done = {(t, m) for t, by in measured.points.items() for m in by}
    done |= {(t, m) for m, tps in measured.out_of_memory.items() for t in tps}
    left: dict[int, list[int]] = {}
    for tp, micro in todo:
        if (tp, micro) not in done:
            left.setdefault(tp, []).append(micro)
    words = [f"TP {tp} at microbatch {_list(micros)}" for tp, micros in left.items()]
    if intra and "intra_node" not in measured.network:
        words.append("the collectives inside a node")
    if loopback and "p2p" not in measured.network.get("inter_node", {}):
        words.append("the link between nodes")
    return words


def _rerun(
    spec_path: Path,
    name: str,
    output: Path,
    microbatch: str | None,
    tp: str | None,
    threads: int | None,
    warmup: int,
    repeats: int,
    network: bool,
    network_devices: int | None,
    sizes: str | None,
) -> str:
    """The command that measures the rest: this one, with the options it was given."""
    words = ["hetc profile measure", str(spec_path), "--device", name, "-o", str(output)]
    for option, value, default in (
        ("--microbatch", microbatch, None),
        ("--tp", tp, None),
        ("--threads", threads, None),
        ("--warmup", warmup, 3),
        ("--repeats", repeats, 10),
        ("--network-devices", network_devices, None),
        ("--sizes", sizes, None),
    ):
        if value != default:
            words += [option, str(value)]
    if not network:
        words.append("--no-network")
    return " ".join(words)


def _placed(
    spec: Spec, spec_path: Path, device: str, zone: str | None
) -> tuple[str, int, str | None]:
    """The spec's canonical device name, its node size, and the zone this node is in:
    `zone`, else `$HETC_ZONE`, else the spec's only zone, else None (not named). A named zone
    must be the spec's and hold a pool of the device; the node size is its pools' (else the
    largest of the device's pools)."""
    name = next((d for d in spec.devices if d.casefold() == device.casefold()), None)
    if name is None:
        raise _Refused(
            f"--device {device!r} is not a device of the spec (its devices:"
            f" {', '.join(spec.devices)}){did_you_mean(device, list(spec.devices))}",
            EXIT_INVALID,
        )
    source = "--zone"
    if zone is None and os.environ.get("HETC_ZONE"):
        zone, source = os.environ["HETC_ZONE"], "$HETC_ZONE"
    names = [z.name for z in spec.zones]
    if zone is None and len(names) == 1:
        zone = names[0]
    pools = [(z, p) for z in spec.zones for p in z.pools if p.device == name]
    if zone is None:
        return name, max(p.gpus_per_node for _, p in pools), None
    if zone not in names:
        raise _Refused(
            f"{source} {zone!r} is not a zone of {spec_path} (its zones: {', '.join(names)})"
            f"{did_you_mean(zone, names)}",
            EXIT_INVALID,
        )
    sizes = [p.gpus_per_node for z, p in pools if z.name == zone]
    if not sizes:
        raise _Refused(
            f"{source} {zone!r}: the zone has no pool of {name} in {spec_path} (zones with"
            f" {name}: {', '.join(sorted({z.name for z, _ in pools}))})",
            EXIT_INVALID,
        )
    return name, max(sizes), zone


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


def _degrees(
    config: ModelConfig, node: int, name: str, tp: str | None, planned: Sequence[int]
) -> tuple[int, ...]:
    """The TP degrees asked for, each one the runtime can split the model by on one node;
    by default the planner's (`planned`) that the runtime can split the model by."""
    if tp is None:
        return tuple(t for t in planned if not _unsplittable(config, t)) or (1,)
    degrees = _integers(tp, "--tp")
    for t in degrees:
        if t > node:
            raise _Refused(
                f"--tp {t}: {name} nodes have {plural(node, 'device')}; a TP group stays within"
                " a node",
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
    _check_folder(output)
    _check_devices(name, cuda, max(processes, devices))


def _check_folder(output: Path) -> None:
    if not output.parent.is_dir():
        raise EnvironmentProblem(
            f"cannot write {output}: {output.parent} is not a directory",
            "create the directory, or pass another -o",
        )


def _check_devices(name: str, cuda: bool, needed: int) -> None:
    if not cuda:
        return
    if not torch.cuda.is_available():
        raise EnvironmentProblem(
            f"{name} is a GPU, and torch sees no CUDA device on this machine",
            f"run on a machine with {name} GPUs and a CUDA build of torch",
        )
    count = torch.cuda.device_count()
    if needed > count:
        raise EnvironmentProblem(
            f"the measurement needs {needed} GPUs; this machine has {count}",
            "ask for less with --tp, --network-devices or torchrun's --nproc-per-node",
        )


def _warn_oversubscribed(processes: int, what: str, echo: Echo) -> None:
    cores = len(os.sched_getaffinity(0))
    if processes > cores:
        echo(
            f"hetc: warning: {what} runs {processes} threads in all on {plural(cores, 'core')}: the"
            " ranks will wait for each other's cores and time slower than they are",
            err=True,
        )


def _list(values: Sequence[int]) -> str:
    return ",".join(map(str, values))
