"""Precomputed per-stage tables, so the planner can evaluate one candidate stage in O(1).

The planner tries millions of candidate stages: a range [first, end) of the model's layer
sequence (embedding, every block, the output end, as `compute.default_layout` orders them), a
multiset of replicas {(device, tp): count}, a microbatch size and a number of in-flight
microbatches. Calling `ComputeModel.layer_times` and `memory.rank_memory` for each would cost
O(layers) object work per candidate. Everything those functions return is a sum over the
layers of the range plus a few non-additive corrections, so this module sums once:

- `StageTables` holds, for one (model, device, TP, microbatch, precision, ZeRO stage,
  checkpointing), prefix sums over the layer sequence of forward, backward and update seconds
  (taken from `ComputeModel.layer_times`, so measured profiles win exactly as there), of
  parameters per rank and of activation bytes per in-flight microbatch per rank. A range is a
  subtraction. Parameter and activation counts are Python ints, so their sums are exact.
- The non-additive parts of `rank_memory` are reproduced from the summed parts: the tied
  embedding's second copy (held by the last stage only when it is not also the first), the
  checkpointing recompute working set (the largest block of the range, via a sparse table:
  O(1) range maximum), the DeepSpeed buckets (constant, or the capped flat copy), the
  fragmentation overhead, and the peak over the backward, reduce and step moments.
- `evaluate_stage` works on those plain lists and numbers only (no objects built, no caches),
  and returns a plain tuple, so a solver can call it in a tight loop.

The DP degree is not a table key: ZeRO divides per-parameter bytes by it, which is two
divisions per evaluation, so one table serves every DP degree (dp = 1 included).

The times are whatever `layer_times` returns (so TP all-reduces are in them exactly when
the compute model puts them there). Not here: pipeline sends, the DP gradient sync and
whole-node rental rounding; `network`, `schedule` and `cost` add those at the pipeline and
plan level, where they depend on placement.

Pure Python; never imports torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate

from hetc.catalog import DeviceType, ModelArchitecture
from hetc.costmodel.compute import ComputeModel, LayerKind
from hetc.costmodel.memory import (
    ACTIVATION_BYTES,
    BOUNDARY_TRANSIENTS,
    FrameworkOverhead,
    StageShape,
    block_parameters_per_rank,
    embedding_activation_bytes,
    embedding_parameters_per_rank,
    head_activation_bytes,
    head_backward_bytes,
    head_parameters_per_rank,
    largest_parameter_per_rank,
    layer_activation_bytes,
    received_input_bytes,
    stage_output_bytes,
    token_bytes,
)
from hetc.costmodel.optimizer_layout import (
    DEEPSPEED_LAYOUT,
    FALLBACK_ALLREDUCE_ELEMENTS,
    OPTIMIZER_STATES,
)

__all__ = [
    "DEFAULT_BUCKET_BYTES",
    "StageEvaluation",
    "StageTables",
    "build_all",
    "build_stage_tables",
    "evaluate_stage",
    "peak_memory",
    "stage_shape",
]

DEFAULT_BUCKET_BYTES = 5e8
"""DeepSpeed's default reduce_bucket_size (read by DeepSpeed as elements; see memory._buckets).
Pass the value the emitted config writes when it differs."""

_UNCAPPED = 1 << 62
"""Cap on flat-copy elements when the copy is not chunked (larger than any rank's params)."""

StageEvaluation = tuple[float, float, float, bool, float]
"""(forward_s, backward_s, update_s, fits, cost_rate): see `evaluate_stage`."""


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class StageTables:
    """Prefix sums and constants for one (model, device, TP, microbatch, training setting).

    Index i of every prefix list is the sum over layers [0, i) of the layer sequence, so a
    range [first, end) is `x[end] - x[first]`. Lists rather than numpy arrays: indexing a
    Python list returns a Python number in tens of nanoseconds, indexing a numpy array builds
    a numpy scalar, several times slower, and the solver's loop is scalar. `eq=False`: tables
    are compared by identity (they are built once and shared).
    """

    device: str
    tp: int
    microbatch: int
    layers: int
    """Length of the layer sequence (blocks + 2 for GPT-style models)."""
    forward: list[float]
    backward: list[float]
    update: list[float]
    parameters: list[int]
    """Parameters per rank; the output end counts its own copy of a tied embedding."""
    activations: list[int]
    """Bytes per in-flight microbatch per rank (under checkpointing: each block's input)."""
    stage_output: int
    """Bytes of one microbatch's stage output, kept per in-flight microbatch by a stage that
    does not end with the head (`memory.stage_output_bytes`); 0 with measured activations,
    which count each layer's output."""
    stage_input: int
    """With measured activations (which do not count inputs), the input a stage after the
    first keeps per in-flight microbatch (`memory.received_input_bytes`); else 0."""
    boundary_transient: int
    """Once, on a stage after the first: `memory.BOUNDARY_TRANSIENTS` received-input sizes."""
    head_backward: int
    """The logits' gradient, alive once in the head's backward (`memory.head_backward_bytes`)."""
    tokens: int
    """One microbatch's token ids and targets (`memory.token_bytes`): per in-flight
    microbatch plus one at the backward peak, one at the reduction and the step."""
    end_gradient: float
    block_gradient: float
    """Bytes of the largest parameter's gradient at an end (token table or output matrix) and
    in a block: computed whole before it is accumulated (`memory.largest_parameter_per_rank`)."""
    tied_copy: int
    """Parameters to subtract when one stage holds the whole model (the tied output matrix is
    then the embedding itself, not a copy)."""
    checkpointing: bool
    block_input: int
    """Bytes of one block's input (the checkpoint), subtracted from the recompute set."""
    recompute_max: list[list[int]]
    """Sparse table: row k, index i = max full activation bytes of layers [i, i + 2**k)
    (0 for non-block layers); empty without checkpointing."""
    backward_replicated: float
    backward_sharded: float
    """Weights + gradients + optimizer bytes per parameter at the backward peak: replicated
    plus sharded / dp (the reduce moment holds the same)."""
    step_replicated: float
    step_sharded: float
    """The same at the optimizer step (DeepSpeed's fp32 gradient copies)."""
    bucket_backward: float
    """ZeRO's reduce bucket(s), alive in backward; 0 for the flat-copy layouts."""
    reduce_copy_bytes: float
    reduce_copy_cap: int
    """Flat-copy all-reduce: min(params, cap) x bytes, alive after backward."""
    fixed_overhead: float
    fragmentation: float
    capacity: float
    """Bytes of one device."""
    price_per_second: float
    """USD per second for one replica (its `tp` devices)."""

    def with_price(self, price_per_device_second: float) -> StageTables:
        """The same tables for a pool with another price (lists shared, not copied)."""
        return replace(self, price_per_second=price_per_device_second * self.tp)


def _layer_roles(layout: Sequence[tuple[LayerKind, ...]], arch: ModelArchitecture) -> None:
    """Check that the layout is embedding, `arch.layers` blocks, output end, as memory assumes."""
    middle = layout[1:-1]
    if (
        len(layout) != arch.layers + 2
        or "embedding" not in layout[0]
        or "head" not in layout[-1]
        or any(kinds != ("block",) for kinds in middle)
    ):
        raise ValueError(
            "stage tables need the layer sequence embedding, one layer per block, output end"
            f" ({arch.layers + 2} layers); got {len(layout)} (use compute.default_layout)"
        )


def _sparse_max(values: list[int]) -> list[list[int]]:
    """Sparse table for O(1) range maxima: row k holds maxima of windows of 2**k."""
    rows = [values]
    width = 1
    while 2 * width <= len(values):
        prev = rows[-1]
        rows.append([max(prev[i], prev[i + width]) for i in range(len(prev) - width)])
        width *= 2
    return rows


def build_stage_tables(
    compute: ComputeModel,
    *,
    tp: int,
    microbatch: int,
    zero_stage: int,
    optimizer: str = "adam",
    bucket_bytes: float = DEFAULT_BUCKET_BYTES,
    overlap_comm: bool = False,
    overhead: FrameworkOverhead | None = None,
    price_per_device_second: float | None = None,
    capacity: float | None = None,
) -> StageTables:
    """Sum every per-layer term once for `compute`'s model and device at (tp, microbatch).

    Precision, sequence length and activation checkpointing come from `compute`, so the
    times and the memory describe the same run. `price_per_device_second` defaults to the
    device's catalog price (pool prices come from the spec: pass them, or use `with_price`);
    `capacity` defaults to the device's memory. O(layers) work, once per table.
    """
    arch, device = compute.arch, compute.device
    layout = compute.layers()
    _layer_roles(layout, arch)
    if tp < 1 or microbatch < 1:
        raise ValueError("tp and microbatch must be at least 1")
    precision, seq_len = compute.precision, compute.seq_len
    checkpointing = compute.activation_checkpointing
    overhead = overhead if overhead is not None else FrameworkOverhead()
    price = price_per_device_second if price_per_device_second is not None else device.price
    if price is None:
        raise ValueError(
            f"{device.name} has no catalog price: pass price_per_device_second (the pool's)"
        )
    try:
        layout_row = DEEPSPEED_LAYOUT[(precision, zero_stage)]
        states = OPTIMIZER_STATES[optimizer]
    except KeyError:
        raise ValueError(
            f"no memory layout for {precision!r}, ZeRO {zero_stage}, optimizer {optimizer!r}"
            f" (precisions {sorted({p for p, _ in DEEPSPEED_LAYOUT})}, ZeRO 0-2,"
            f" optimizers {', '.join(OPTIMIZER_STATES)})"
        ) from None

    n = len(layout)
    times = compute.all_layer_times(microbatch, tp)

    block_params = block_parameters_per_rank(arch, tp)
    head_alone = head_parameters_per_rank(arch, tp, holds_embedding=False)
    head_with_embedding = head_parameters_per_rank(arch, tp, holds_embedding=True)
    params = [embedding_parameters_per_rank(arch, tp), *([block_params] * arch.layers)]
    params.append(head_alone)

    e = ACTIVATION_BYTES[precision]
    block_input = e * seq_len * microbatch * arch.hidden
    # a block's bytes depend on it only through its phase of the attention pattern
    period = len(arch.attention_pattern)
    per_phase = [
        int(
            layer_activation_bytes(
                arch, b, seq_len=seq_len, microbatch=microbatch, tp=tp, precision=precision
            )
        )
        for b in range(min(period, arch.layers))
    ]
    full = [per_phase[b % period] for b in range(arch.layers)]
    ends = (
        int(
            embedding_activation_bytes(
                arch, seq_len=seq_len, microbatch=microbatch, precision=precision
            )
        ),
        int(
            head_activation_bytes(
                arch, seq_len=seq_len, microbatch=microbatch, tp=tp, precision=precision
            )
        ),
    )
    stored = [block_input] * arch.layers if checkpointing else full
    acts = [ends[0], *stored, ends[1]]
    output = int(
        stage_output_bytes(arch, seq_len=seq_len, microbatch=microbatch, precision=precision)
    )
    received = 0
    profile = compute.profile
    if profile is not None and not checkpointing:
        measured = [profile.activation_bytes(microbatch, tp, i) for i in range(n)]
        if all(v is not None for v in measured):
            acts = [int(v or 0) for v in measured]
            output = 0
            received = int(received_input_bytes(arch, seq_len=seq_len, microbatch=microbatch))

    def sharded(per: str) -> tuple[float, float]:
        w, g, m, s = (
            layout_row.weights,
            getattr(layout_row, per),
            layout_row.master,
            layout_row.state,
        )
        return (
            w.replicated + g.replicated + m.replicated + states * s.replicated,
            w.sharded + g.sharded + m.sharded + states * s.sharded,
        )

    backward_rep, backward_sh = sharded("gradients")
    whole_gradient = layout_row.gradients.replicated + layout_row.gradients.sharded
    one = dict(tp=tp, microbatch=microbatch, in_flight=1)
    end_shape = StageShape(first_block=0, end_block=0, has_embedding=True, has_head=True, **one)
    block_shape = StageShape(first_block=0, end_block=1, has_embedding=False, has_head=False, **one)
    step_rep, step_sh = sharded("step_gradients")
    ipg = layout_row.reduce == "ipg_bucket"
    return StageTables(
        device=device.name,
        tp=tp,
        microbatch=microbatch,
        layers=n,
        forward=[0.0, *accumulate(t.forward for t in times)],
        backward=[0.0, *accumulate(t.backward for t in times)],
        update=[0.0, *accumulate(t.update for t in times)],
        parameters=[0, *accumulate(params)],
        activations=[0, *accumulate(acts)],
        stage_output=output,
        stage_input=received,
        boundary_transient=int(
            BOUNDARY_TRANSIENTS * received_input_bytes(arch, seq_len=seq_len, microbatch=microbatch)
        ),
        head_backward=int(head_backward_bytes(arch, seq_len=seq_len, microbatch=microbatch, tp=tp)),
        tokens=int(token_bytes(seq_len=seq_len, microbatch=microbatch)),
        end_gradient=largest_parameter_per_rank(arch, end_shape) * whole_gradient,
        block_gradient=largest_parameter_per_rank(arch, block_shape) * whole_gradient,
        tied_copy=head_alone - head_with_embedding,
        checkpointing=checkpointing,
        block_input=block_input,
        recompute_max=_sparse_max([0, *full, 0]) if checkpointing else [],
        backward_replicated=backward_rep,
        backward_sharded=backward_sh,
        step_replicated=step_rep,
        step_sharded=step_sh,
        bucket_backward=(
            bucket_bytes * layout_row.bucket_element_bytes * (2 if overlap_comm else 1)
            if ipg
            else 0.0
        ),
        reduce_copy_bytes=0.0 if ipg else layout_row.reduce_copy_bytes,
        reduce_copy_cap=FALLBACK_ALLREDUCE_ELEMENTS if layout_row.reduce_copy_capped else _UNCAPPED,
        fixed_overhead=overhead.fixed_bytes,
        fragmentation=overhead.fragmentation,
        capacity=capacity if capacity is not None else device.memory,
        price_per_second=price * tp,
    )


def build_all(
    arch: ModelArchitecture,
    devices: Iterable[DeviceType],
    tps: Iterable[int],
    microbatches: Iterable[int],
    *,
    seq_len: int,
    precision: str,
    zero_stage: int,
    checkpointing: bool = False,
    optimizer: str = "adam",
    bucket_bytes: float = DEFAULT_BUCKET_BYTES,
    overhead: FrameworkOverhead | None = None,
    prices: Mapping[str, float] | None = None,
) -> dict[tuple[str, int, int], StageTables]:
    """Tables for every (device, tp, microbatch), keyed so (the estimate: no profiles).

    `prices` maps device names to USD per device-second; missing ones use the catalog's.
    """
    tps, microbatches = tuple(tps), tuple(microbatches)
    out: dict[tuple[str, int, int], StageTables] = {}
    for device in devices:
        compute = ComputeModel(
            arch=arch,
            device=device,
            seq_len=seq_len,
            precision=precision,
            activation_checkpointing=checkpointing,
        )
        for tp in tps:
            for m in microbatches:
                out[device.name, tp, m] = build_stage_tables(
                    compute,
                    tp=tp,
                    microbatch=m,
                    zero_stage=zero_stage,
                    optimizer=optimizer,
                    bucket_bytes=bucket_bytes,
                    overhead=overhead,
                    price_per_device_second=(prices or {}).get(device.name),
                )
    return out


def stage_shape(tables: StageTables, first: int, end: int, in_flight: int) -> StageShape:
    """The `memory.StageShape` of layer range [first, end): for checks against rank_memory."""
    blocks = tables.layers - 2
    return StageShape(
        first_block=max(first, 1) - 1,
        end_block=min(end, blocks + 1) - 1,
        has_embedding=first == 0,
        has_head=end == tables.layers,
        tp=tables.tp,
        microbatch=tables.microbatch,
        in_flight=in_flight,
    )


def peak_memory(t: StageTables, first: int, end: int, dp: int, in_flight: int) -> float:
    """Peak bytes of one rank of layers [first, end): `memory.rank_memory(...).total`, in O(1).

    Same three moments as rank_memory: backward (static + activations + bucket, with
    fragmentation on the dynamic part), reduce (static + flat copy) and step (fp32 copies).
    """
    params = t.parameters[end] - t.parameters[first]
    if first == 0 and end == t.layers:
        params -= t.tied_copy
    acts = in_flight * (t.activations[end] - t.activations[first])
    acts += t.head_backward if end == t.layers else in_flight * t.stage_output
    if first > 0:
        acts += in_flight * t.stage_input + t.boundary_transient
    if t.checkpointing and end > first:
        k = (end - first).bit_length() - 1
        row = t.recompute_max[k]
        a, b = row[first], row[end - (1 << k)]
        widest = a if a > b else b
        if widest:
            acts += widest - t.block_input
    has_end = first == 0 or end == t.layers
    has_block = max(first, 1) < min(end, t.layers - 1)
    accumulating = max(t.end_gradient if has_end else 0.0, t.block_gradient if has_block else 0.0)
    acts += (in_flight + 1) * t.tokens
    static = params * (t.backward_replicated + t.backward_sharded / dp)
    bucket = t.bucket_backward
    frag, fixed = t.fragmentation, t.fixed_overhead
    peak = static + accumulating + acts + bucket + fixed + frag * (acts + bucket)
    copy = (params if params < t.reduce_copy_cap else t.reduce_copy_cap) * t.reduce_copy_bytes
    reduce = static + t.tokens + copy + fixed + frag * (t.tokens + copy)
    step = params * (t.step_replicated + t.step_sharded / dp) + t.tokens + fixed + frag * t.tokens
    if reduce > peak:
        peak = reduce
    return step if step > peak else peak


def evaluate_stage(
    replicas: Sequence[tuple[StageTables, int]], first: int, end: int, in_flight: int
) -> StageEvaluation:
    """One candidate stage: layers [first, end) run by `replicas`, (tables, count) pairs.

    Returns (forward_s, backward_s, update_s, fits, cost_rate):

    - forward_s, backward_s: per microbatch, of the slowest replica (largest forward +
      backward), because the stage's data-parallel group meets at the gradient sync, so the
      stage goes at its slowest member's pace; update_s is the largest optimizer step.
      `layer_times` seconds only: see the module docstring for what the caller adds.
    - fits: every replica's rank peak (`peak_memory`, ZeRO sharded over dp = the total
      replica count) is within its device's capacity.
    - cost_rate: USD per second of all replicas' devices.

    All tables must share the microbatch size and training setting; not checked here, it is
    the hot path. O(replica kinds), independent of the number of layers.
    """
    dp = 0
    for _, count in replicas:
        dp += count
    worst = -1.0
    fwd = bwd = upd = rate = 0.0
    fits = True
    for t, count in replicas:
        f = t.forward[end] - t.forward[first]
        b = t.backward[end] - t.backward[first]
        if f + b > worst:
            worst, fwd, bwd = f + b, f, b
        u = t.update[end] - t.update[first]
        if u > upd:
            upd = u
        rate += count * t.price_per_second
        if fits and peak_memory(t, first, end, dp, in_flight) > t.capacity:
            fits = False
    return fwd, bwd, upd, fits, rate
