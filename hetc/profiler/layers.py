"""The runtime's layers, timed and sized on one TP rank.

The three layer kinds - the embedding, one transformer block, the output end (final norm,
LM head and loss) - are built as one-layer pipeline stages exactly as `StageTrainer` builds a
stage: `StageModule` from `training.json`'s model, with the spec's dropout and activation
checkpointing, its TP group, and `make_optimizer` from the DeepSpeed config the compiler
writes. An iteration is `train_step`'s for one microbatch through a three-stage pipeline:
each forward under the runtime's autocast (fp32 masters, bf16/fp16 compute), the last stage's
loss scaled by `loss scale / tokens per global batch` and backpropagated alone, each earlier
stage given its successor's input gradient (`torch.autograd.backward([out], [grad])`), then
each stage's optimizer step. The blocks of the runtime's GPT are identical, so one block
stands for all of them; it is timed as a chain of `chain_length` blocks and divided by their
number, so that, as in a stage of many blocks, a block's weights, gradients and optimizer
state are not still in the last-level cache from its previous run (a single small block's
state fits in a CPU's L3 and measured ~13% faster than it ran in a stage; bench/fidelity.py).

Timed iterations are the runtime's steady state, not a fresh start: gradients are kept from
one iteration to the next, so every timed backward adds into existing gradients as the second
and later microbatches of gradient accumulation do (the first microbatch of an iteration,
which sets them, is a little faster: the one place the profile is pessimistic). A layer's
`update` is everything the runtime does per parameter after the backward besides the
data-parallel collective itself: the flat copy the gradients are summed in (out and back,
`StageTrainer._synchronise`), the gradient-norm term of global clipping when the config clips
(`_clip`), and the optimizer step. Without these the profile measured the layers ~10% faster
than the runtime ran them (bench/fidelity.py). In a TP group the ranks meet at a barrier
before each timed iteration, so no rank's numbers include waiting for a late partner.

Memory, per layer and microbatch size (see `measure`): activation bytes are the bytes created
by the layer's forward that are still alive when it returns, with the caller holding the
output, as `train_step` holds it until the backward. That counts the tensors autograd saved,
the output itself (the next layer's input), and under autocast the low-precision weight
copies the matmuls saved (made anew by every microbatch's forward). It does not count the
layer's input (the previous layer's output, or a stage's received or loaded input), the
parameters, gradients or optimizer state. So a stage keeps, per microbatch in flight, its
input plus the sum of its layers' activation bytes.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import Tensor

from hetc.profiler.clock import Stopwatch
from hetc.runtime.metrics import LiveTensorBytes
from hetc.runtime.model import DropoutKey, ModelConfig, StageModule
from hetc.runtime.tensor_parallel import Group
from hetc.runtime.train import AUTOCAST, LossScaler, make_optimizer, square_norm

KINDS = ("embedding", "block", "output end")
"""The layer kinds in model order: profile index 0, every index 1..L, index L + 1."""
EMBEDDING, BLOCK, OUTPUT = range(3)
ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}

MEMORY_ITERATIONS = 3
"""Iterations sized after the timed ones. Gloo releases a collective's tensors from its own
thread, now and then a moment after the call has returned, so a reading can count bytes that
are not kept for the backward: each CPU reading in a TP group waits `SETTLE_S` first, and the
activations are the least over these iterations (the peak the most)."""
SETTLE_S = 0.01

Times = tuple[float, float, float]


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerTask:
    """What one rank measures; JSON-able, so a spawned rank reads the same request."""

    training: dict[str, Any]
    """`hetc.emit.compile.training_record` of the spec: what the runtime reads."""
    deepspeed: dict[str, Any]
    """`hetc.emit.deepspeed.deepspeed_config` of the spec: the optimizer and loss scaling."""
    microbatches: tuple[int, ...]
    warmup: int
    repeats: int
    cuda: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "training": self.training,
            "deepspeed": self.deepspeed,
            "microbatches": list(self.microbatches),
            "warmup": self.warmup,
            "repeats": self.repeats,
            "cuda": self.cuda,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LayerTask:
        return cls(
            training=dict(data["training"]),
            deepspeed=dict(data["deepspeed"]),
            microbatches=tuple(data["microbatches"]),
            warmup=data["warmup"],
            repeats=data["repeats"],
            cuda=data["cuda"],
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class RankMeasurement:
    """One TP rank's numbers, each list indexed by layer kind (`KINDS`)."""

    times: dict[int, list[Times]]
    """Microbatch size -> median (forward_s, backward_s, update_s) per kind."""
    weight_bytes: list[int]
    """This rank's parameters of each kind, at the profile's precision."""
    activation_bytes: dict[int, list[int]]
    """Microbatch size -> bytes each kind keeps from its forward for its backward."""
    peak_bytes: dict[int, int]
    """Microbatch size -> the peak of one iteration of all three kinds."""

    def to_json(self) -> dict[str, Any]:
        return {
            "times": {str(m): [list(t) for t in v] for m, v in self.times.items()},
            "weight_bytes": self.weight_bytes,
            "activation_bytes": {str(m): v for m, v in self.activation_bytes.items()},
            "peak_bytes": {str(m): v for m, v in self.peak_bytes.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RankMeasurement:
        return cls(
            times={int(m): [(t[0], t[1], t[2]) for t in v] for m, v in data["times"].items()},
            weight_bytes=list(data["weight_bytes"]),
            activation_bytes={int(m): list(v) for m, v in data["activation_bytes"].items()},
            peak_bytes={int(m): v for m, v in data["peak_bytes"].items()},
        )


class _Probe(Protocol):
    def section(self, kind: int, phase: str) -> contextlib.AbstractContextManager[Any]: ...


class _Untimed:
    """Warm-up: allocator pools, kernel choices and the optimizer's state settle here."""

    def section(self, kind: int, phase: str) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()


class _Timed:
    def __init__(self, cuda: bool) -> None:
        self.watch = Stopwatch(cuda)

    def section(self, kind: int, phase: str) -> contextlib.AbstractContextManager[Any]:
        return self.watch.section((kind, phase))


class _Kept:
    """Bytes still allocated after each forward that were not before it."""

    def __init__(self, allocated: Callable[[], int]) -> None:
        self.allocated = allocated
        self.kept = [0] * len(KINDS)

    @contextlib.contextmanager
    def section(self, kind: int, phase: str) -> Iterator[None]:
        before = self.allocated()
        yield
        if phase == "forward":
            self.kept[kind] = self.allocated() - before


STATE_BYTES_PER_PARAMETER = 16
"""fp32 weight, gradient and two optimizer moments: what a block's update and backward touch."""


def last_level_cache_bytes(device: torch.device) -> int:
    """The cache a block's state must not fit in to be timed as in a stage: a GPU's L2, a
    CPU's largest cache level (sysfs); 32 MiB where neither says."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).L2_cache_size)
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = entry.read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if text[:-1].isdigit() and text[-1] in "KM":
            sizes.append(int(text[:-1]) * (1024 if text[-1] == "K" else 1024 * 1024))
    return max(sizes, default=32 * 1024 * 1024)


def chain_length(block_parameters: int, layers: int, cache_bytes: int) -> int:
    """Blocks to time together: enough that their state is twice the cache (so each block's
    comes from memory, as in a stage of many), at most the model's blocks."""
    state = max(1, block_parameters * STATE_BYTES_PER_PARAMETER)
    return max(1, min(layers, math.ceil(2 * cache_bytes / state)))


class _Layers:
    """The three kinds as stages of this TP rank (the block kind a chain of `self.chain`
    blocks), with their optimizers."""

    def __init__(
        self, task: LayerTask, group: Group, tp_size: int, tp_rank: int, device: torch.device
    ) -> None:
        training = task.training
        config = ModelConfig.from_dict(training["model"])
        tail = ["final-norm", "head"] + (["token-table-copy"] if config.tied_embeddings else [])
        one_block = StageModule(config, 0, 1, [], group, tp_size, tp_rank, training["seed"])
        self.chain = chain_length(
            sum(p.numel() for p in one_block.parameters()),
            config.layers,
            last_level_cache_bytes(device),
        )
        del one_block
        cuts: list[tuple[int, int, list[str]]] = [
            (0, 0, ["embedding"]),
            (0, self.chain, []),
            (config.layers, config.layers, tail),
        ]
        self.modules = [
            StageModule(
                config,
                first,
                end,
                holds,
                group,
                tp_size,
                tp_rank,
                training["seed"],
                dropout=training.get("dropout", 0.0),
                checkpoint_activations=training["activation_checkpointing"],
            ).to(device)
            for first, end, holds in cuts
        ]
        self.optimizers = [
            make_optimizer(list(m.parameters()), task.deepspeed, training) for m in self.modules
        ]
        fp16 = task.deepspeed.get("fp16")
        self.scale = LossScaler.from_config(fp16).scale if fp16 and fp16.get("enabled") else 1.0
        self.tokens = training["global_batch_size"] * training["seq_len"]
        self.dtype = AUTOCAST.get(training["precision"])
        self.seed, self.seq, self.vocab = training["seed"], training["seq_len"], config.vocab
        self.device = device
        self.group = group
        self.grouped = group is not None
        self.clip = float(task.deepspeed.get("gradient_clipping", 0.0))

    def parameters(self, kind: int) -> list[Tensor]:
        return list(self.modules[kind].parameters())

    def clear_gradients(self) -> None:
        for module in self.modules:
            for parameter in module.parameters():
                parameter.grad = None

    def held_bytes(self) -> int:
        """Parameters, gradients and optimizer state: what exists before an iteration starts."""
        storages: dict[int, int] = {}
        tensors: list[Tensor] = []
        for kind, optimizer in enumerate(self.optimizers):
            for parameter in self.parameters(kind):
                tensors += [parameter] if parameter.grad is None else [parameter, parameter.grad]
            for state in optimizer.state.values():
                tensors += [v for v in state.values() if isinstance(v, Tensor)]
        for tensor in tensors:
            storage = tensor.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        return sum(storages.values())

    def _forward(
        self, kind: int, x: Tensor, targets: Tensor | None, noise: DropoutKey | None
    ) -> Tensor:
        """`StageTrainer._forward`: the module under the runtime's autocast."""
        autocast: contextlib.AbstractContextManager[Any] = (
            contextlib.nullcontext()
            if self.dtype is None
            else torch.autocast(self.device.type, dtype=self.dtype)
        )
        with autocast:
            out: Tensor = self.modules[kind](x, targets=targets, noise=noise)
        return out

    def step(self, micro: int, step: int, probe: _Probe, *, accumulate: bool = False) -> None:
        """One iteration of one microbatch (see the module docstring); with `accumulate`,
        the backward adds into the gradients the last iteration left."""
        if not accumulate:
            self.clear_gradients()
        if self.group is not None:
            dist.barrier(group=self.group)
        generator = torch.Generator().manual_seed(self.seed + step)
        ids, targets = (
            torch.randint(self.vocab, (micro, self.seq), generator=generator).to(self.device)
            for _ in range(2)
        )
        noise = None
        if self.modules[BLOCK].dropout > 0:
            noise = DropoutKey(self.seed, step, tuple(range(micro)))
        with probe.section(EMBEDDING, "forward"):
            embedded = self._forward(EMBEDDING, ids, None, noise)
        block_in = embedded.detach().requires_grad_()
        with probe.section(BLOCK, "forward"):
            hidden = self._forward(BLOCK, block_in, None, noise)
        head_in = hidden.detach().requires_grad_()
        with probe.section(OUTPUT, "forward"):
            loss = self._forward(OUTPUT, head_in, targets, noise)
            scaled = loss.float() * (self.scale / self.tokens)
        with probe.section(OUTPUT, "backward"):
            torch.autograd.backward([scaled])
        with probe.section(BLOCK, "backward"):
            torch.autograd.backward([hidden], [_grad(head_in).to(hidden.dtype)])
        with probe.section(EMBEDDING, "backward"):
            torch.autograd.backward([embedded], [_grad(block_in).to(embedded.dtype)])
        for kind, optimizer in enumerate(self.optimizers):
            with probe.section(kind, "update"):
                self._after_backward(kind)
                optimizer.step()

    def _after_backward(self, kind: int) -> float:
        """The runtime's per-parameter work between backward and step, less the collective:
        the flat copy it sums gradients in, and the clipping norm's share (returned; 0 when
        the config does not clip)."""
        gradients = [p.grad for p in self.parameters(kind) if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in gradients])
        offset = 0
        for gradient in gradients:
            gradient.copy_(flat[offset : offset + gradient.numel()].view(gradient.shape))
            offset += gradient.numel()
        if self.clip <= 0:
            return 0.0
        square = torch.zeros((), dtype=torch.float64, device=self.device)
        for gradient in gradients:
            square += square_norm(gradient)
        return math.sqrt(float(square))


def _grad(tensor: Tensor) -> Tensor:
    assert tensor.grad is not None, "the backward did not reach the layer's input"
    return tensor.grad


def _times(layers: _Layers, task: LayerTask, micro: int) -> list[Times]:
    for step in range(task.warmup):
        layers.step(micro, step, _Untimed(), accumulate=step > 0)
    timed = _Timed(task.cuda)
    for step in range(task.warmup, task.warmup + task.repeats):
        layers.step(micro, step, timed, accumulate=True)
    median = timed.watch.medians()
    times = [
        (median[(k, "forward")], median[(k, "backward")], median[(k, "update")])
        for k in range(len(KINDS))
    ]
    if task.training["activation_checkpointing"]:
        # The block's backward recomputed its forward; the cost model adds the forward to a
        # checkpointed backward itself, so the profile keeps the backward proper.
        forward, backward, update = times[BLOCK]
        times[BLOCK] = (forward, max(0.0, backward - forward), update)
    return times


def _memory(layers: _Layers, micro: int, step: int) -> tuple[list[int], int]:
    """Activation bytes per kind, and the iteration's peak, from one more iteration."""
    layers.clear_gradients()
    if layers.device.type == "cuda":
        torch.cuda.synchronize(layers.device)
        torch.cuda.reset_peak_memory_stats(layers.device)
        kept = _Kept(lambda: torch.cuda.memory_allocated(layers.device))
        layers.step(micro, step, kept)
        return kept.kept, torch.cuda.max_memory_allocated(layers.device)
    # Adopting what is live already keeps views of the weights (a transpose inside a linear
    # layer) from counting as new storage; the peak is then taken above that starting point,
    # plus this iteration's own held state, so nothing else in the process is counted.
    held = layers.held_bytes()
    with LiveTensorBytes(adopt_live=True) as tracker:
        start = tracker.current

        def settled() -> int:
            if layers.grouped:
                time.sleep(SETTLE_S)
            return tracker.current

        kept = _Kept(settled)
        layers.step(micro, step, kept)
    return kept.kept, held + tracker.peak - start


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is the device running out of memory: CUDA's allocator error, the CPU
    allocator's, or Python's MemoryError."""
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text
    )


def measure_points(
    task: LayerTask, group: Group, tp_size: int, tp_rank: int, device: torch.device
) -> Generator[tuple[int, RankMeasurement | None], None, None]:
    """Each microbatch size of the task in turn, timed then sized on this rank: its
    measurement, or None when it ran out of the device's memory, after which nothing larger
    is tried (a larger microbatch holds more). Every rank of `group` must advance it alike:
    the layers' TP collectives pair them up. The caller may stop between points."""
    try:
        layers = _Layers(task, group, tp_size, tp_rank, device)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        yield task.microbatches[0], None
        return
    element = ELEMENT_BYTES[task.training["precision"]]
    weights = [sum(p.numel() for p in layers.parameters(k)) * element for k in range(len(KINDS))]
    k = layers.chain
    weights[BLOCK] //= k
    for micro in task.microbatches:
        try:
            times = _times(layers, task, micro)
            first = task.warmup + task.repeats
            runs = [
                _memory(layers, micro, step) for step in range(first, first + MEMORY_ITERATIONS)
            ]
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            del layers
            if device.type == "cuda":
                torch.cuda.empty_cache()
            yield micro, None
            return
        kept = [min(run[0][kind] for run in runs) for kind in range(len(KINDS))]
        kept[BLOCK] //= k
        forward, backward, update = times[BLOCK]
        times[BLOCK] = (forward / k, backward / k, update / k)
        yield (
            micro,
            RankMeasurement(
                times={micro: times},
                weight_bytes=list(weights),
                activation_bytes={micro: kept},
                peak_bytes={micro: max(run[1] for run in runs)},
            ),
        )


def slowest(ranks: Sequence[RankMeasurement]) -> RankMeasurement:
    """Every number as the largest over the TP group's ranks: the group moves at the pace,
    and must fit the memory, of its slowest and fullest rank."""
    first = ranks[0]
    return RankMeasurement(
        times={
            m: [
                (
                    max(r.times[m][k][0] for r in ranks),
                    max(r.times[m][k][1] for r in ranks),
                    max(r.times[m][k][2] for r in ranks),
                )
                for k in range(len(KINDS))
            ]
            for m in first.times
        },
        weight_bytes=[max(r.weight_bytes[k] for r in ranks) for k in range(len(KINDS))],
        activation_bytes={
            m: [max(r.activation_bytes[m][k] for r in ranks) for k in range(len(KINDS))]
            for m in first.activation_bytes
        },
        peak_bytes={m: max(r.peak_bytes[m] for r in ranks) for m in first.peak_bytes},
    )
