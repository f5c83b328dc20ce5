"""Peak memory of one rank: what each source holds, in bytes, so the planner can reject OOM plans.

Sailor (SOSP'25, sections 2 C2 and 4.3) shows that planners go wrong on memory in two ways:
they leave sources out (optimizer state, communication buffers, fragmentation) and they assume
every pipeline stage holds the same. This module therefore models one *rank* (one stage, one
tensor-parallel shard, one data-parallel replica) and keeps every source as its own term, the
way Zorse (section 4.3.5) splits parameters, gradients, optimizer state and activations.

Sources, each documented where it is computed:

- weights, gradients, optimizer state: `optimizer_layout.DEEPSPEED_LAYOUT`, one row per
  precision and ZeRO stage, read off DeepSpeed 0.19.8's source (each row cites file, class,
  function);
- activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models" (MLSys'23), section 4, tensor parallelism *without* sequence
  parallelism, re-derived per tensor so that GQA, SwiGLU/ReLU, an FFN width other than 4h,
  local attention and fp32 change the right terms (:func:`layer_activation_bytes`);
- communication buffers: what DeepSpeed allocates for gradient reduction (:func:`_buckets`);
- overhead: CUDA context, library workspaces and allocator slack (:class:`FrameworkOverhead`).

The peak is taken over three moments of an iteration, because DeepSpeed's largest transient
buffers live when the activations are already gone:

- ``backward``: activations of every in-flight microbatch, full gradients, ZeRO's reduce bucket;
- ``reduce``: after the last backward, the non-ZeRO all-reduce's flattened gradient copy;
- ``step``: the optimizer step, with its fp32 copies of the gradients.

:func:`rank_memory` returns the breakdown of the largest moment; its ``phase`` names it.

Pure Python; never imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from hetc.catalog import DeviceType, ModelArchitecture
from hetc.costmodel.optimizer_layout import (
    FALLBACK_ALLREDUCE_ELEMENTS,
    OptimizerLayout,
    Phase,
    layout_of,
    states_of,
)

TERMS: Final = ("weights", "gradients", "optimizer", "activations", "buckets", "overhead")

GIB: Final = 2.0**30


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryBreakdown:
    """Bytes one rank holds at its peak moment, each source separately."""

    weights: float
    gradients: float
    optimizer: float
    """fp32 master weights plus the optimizer's state tensors."""
    activations: float
    buckets: float
    """Communication buffers for gradient reduction."""
    overhead: float
    """CUDA context, workspaces and allocator fragmentation."""
    phase: Phase = "backward"
    """The moment of the iteration these numbers describe (the one with the largest total)."""

    @property
    def total(self) -> float:
        return (
            self.weights
            + self.gradients
            + self.optimizer
            + self.activations
            + self.buckets
            + self.overhead
        )

    def terms(self) -> dict[str, float]:
        """The six sources by name, in a fixed order."""
        return {name: float(getattr(self, name)) for name in TERMS}

    def dominant(self) -> str:
        """Name of the largest term (the first in `TERMS` order on a tie)."""
        terms = self.terms()
        return max(terms, key=lambda name: terms[name])


@dataclass(frozen=True, kw_only=True, slots=True)
class FrameworkOverhead:
    """Memory the model does not explain by tensors: per-device constant plus allocator slack.

    Overridable per device type, because the CUDA context and kernel images differ by GPU
    generation and driver.
    """

    fixed_bytes: float = 1.0 * GIB
    """CUDA context + cuBLAS/cuDNN workspaces + NCCL communicator buffers, per process.

    The default, 1 GiB, is an engineering estimate, not a measurement made for hetc: the CUDA
    context of a PyTorch process is several hundred MiB (it holds the kernel images of torch,
    cuBLAS and cuDNN; lazy module loading, the default since CUDA 11.7, lowers it), each NCCL
    communicator keeps per-channel buffers of NCCL_BUFFSIZE (4 MiB by default) per peer, and
    a rank here is in up to three communicators (TP, DP, pipeline). None of it is visible to
    `torch.cuda.memory_allocated`, which is why Sailor's measured footprints (Figure 3) exceed
    tensor counts. Measure `torch.cuda.mem_get_info` before and after the first collective on
    each device type and override this.
    """
    fragmentation: float = 0.10
    """Multiplicative slack on dynamic memory (activations and buckets): 0.1 = +10%.

    PyTorch's caching allocator rounds blocks and cannot always reuse freed ones for
    differently shaped requests (`memory_reserved` > `memory_allocated`). Parameters,
    gradients and optimizer state are excluded because DeepSpeed allocates them as a few
    flat buffers up front (`flatten_dense_tensors_aligned` in stage_1_and_2.py, the flat
    groups of bf16_optimizer.py and fp16/fused_optimizer.py), which do not fragment.
    """

    def __post_init__(self) -> None:
        if self.fixed_bytes < 0 or self.fragmentation < 0:
            raise ValueError("overhead terms must be zero or more")


CPU_OVERHEAD: Final = FrameworkOverhead(fixed_bytes=0.0, fragmentation=0.0)
"""A CPU process has no CUDA context and no caching allocator: what a rank's tensors need is
what the runtime measures there (every live tensor storage, `hetc.runtime.metrics`). The
interpreter and libraries (a few hundred MiB of resident memory) are outside the prediction."""


def default_overhead(device: DeviceType) -> FrameworkOverhead:
    """The overhead assumed for `device` when none is given: GPUs the CUDA default, CPUs none."""
    return CPU_OVERHEAD if device.kind == "cpu" else FrameworkOverhead()


@dataclass(frozen=True, kw_only=True, slots=True)
class StageShape:
    """What one rank holds: a contiguous range of blocks, its TP shard and its 1F1B depth."""

    first_block: int
    end_block: int
    """Transformer blocks [first_block, end_block)."""
    has_embedding: bool
    """Token (and learned position) embedding: the first pipeline stage."""
    has_head: bool
    """Final norm, output head, logits and loss: the last pipeline stage. With tied
    embeddings the last stage holds its own copy of the embedding matrix (DeepSpeed and
    Megatron both do; the two copies' gradients are all-reduced)."""
    tp: int
    microbatch: int
    in_flight: int
    """Microbatches whose activations are alive at once; under 1F1B stage i of P holds P - i."""

    def __post_init__(self) -> None:
        if not 0 <= self.first_block <= self.end_block:
            raise ValueError(f"bad block range [{self.first_block}, {self.end_block})")
        if self.tp < 1 or self.microbatch < 1 or self.in_flight < 1:
            raise ValueError("tp, microbatch and in_flight must be at least 1")

    @property
    def blocks(self) -> int:
        return self.end_block - self.first_block


# --------------------------------------------------------------------------------------------
# Parameters per rank
# --------------------------------------------------------------------------------------------


def _shard(n: int, tp: int) -> int:
    """Per-rank share of a dimension split over `tp` ranks (ceil: a remainder is padded)."""
    return -(-n // tp)


def block_parameters_per_rank(arch: ModelArchitecture, tp: int) -> int:
    """Parameters of one transformer block held by one TP rank (Megatron layout, no SP): see
    `ModelArchitecture.layer_parameters`, which owns the layout."""
    return arch.layer_parameters(tp)


def embedding_parameters_per_rank(arch: ModelArchitecture, tp: int) -> int:
    """Parameters of the embedding end on one TP rank.

    The token table is vocab-parallel (rows ceil-divided by `tp`); the learned position table
    and OPT's 512->hidden input projection are replicated (Megatron keeps position embeddings
    whole; the projection is a plain Linear). tp = 1 gives `parameter_breakdown()["embedding"]`.
    """
    e = arch.embedding_width
    n = _shard(arch.vocab, tp) * e
    if arch.position == "learned":
        n += (arch.max_positions + arch.position_offset) * arch.hidden
    if e != arch.hidden:
        n += e * arch.hidden
    return n


def tied_table_parameters_per_rank(arch: ModelArchitecture, tp: int) -> int:
    """The tied token table's share on one TP rank: the only part of the embedding the last
    stage holds a copy of (and the first and last stages all-reduce); positions stay on the
    first stage, as in Megatron's pipeline."""
    return _shard(arch.vocab, tp) * arch.embedding_width if arch.tied_embeddings else 0


def head_parameters_per_rank(arch: ModelArchitecture, tp: int, *, holds_embedding: bool) -> int:
    """Parameters of the output end on one TP rank: final norm, projection out, output matrix.

    The output matrix is vocab-parallel. With tied embeddings it is a copy of the token table,
    counted here only when the same rank does not already hold the embedding
    (`holds_embedding`), i.e. when the pipeline has more than one stage.
    """
    h, e = arch.hidden, arch.embedding_width
    n = 0
    if arch.final_norm:
        n += 2 * h if arch.norm == "layernorm" else h
    if e != h:
        n += h * e
    if not arch.tied_embeddings or not holds_embedding:
        n += _shard(arch.vocab, tp) * e
    return n


def largest_parameter_per_rank(arch: ModelArchitecture, stage: StageShape) -> int:
    """Elements of the largest parameter tensor one rank of `stage` holds: the vocab-parallel
    token table (or output matrix) at either end, else a block's widest FFN matrix.

    Gradient accumulation makes one such gradient twice: the backward of a later microbatch
    computes a parameter's new gradient whole before adding it into `.grad`. Parameters go
    one at a time, so the largest is the transient to add at the backward peak (measured on
    the runtime's first stage: the token table's gradient)."""
    ends = _shard(arch.vocab, stage.tp) * arch.embedding_width
    ffn = {"swiglu": 2}.get(arch.mlp, 1) * _shard(arch.resolved_ffn, stage.tp) * arch.hidden
    widest = ffn if stage.blocks else 0
    return max(widest, ends) if stage.has_embedding or stage.has_head else widest


def stage_parameters_per_rank(arch: ModelArchitecture, stage: StageShape) -> int:
    """All parameters one rank of `stage` holds (and keeps gradients and optimizer state for)."""
    n = stage.blocks * block_parameters_per_rank(arch, stage.tp)
    if stage.has_embedding:
        n += embedding_parameters_per_rank(arch, stage.tp)
    if stage.has_head:
        n += head_parameters_per_rank(arch, stage.tp, holds_embedding=stage.has_embedding)
    return n


# --------------------------------------------------------------------------------------------
# Activations (Korthikanti et al. 2022, tensor parallel without sequence parallelism)
# --------------------------------------------------------------------------------------------

ACTIVATION_BYTES: Final[dict[str, int]] = {"fp32": 4, "fp16": 2, "bf16": 2}
MASK_BYTES: Final = 1
"""Dropout masks are bool tensors: one byte whatever the precision (so fp32 does not double
them; Korthikanti's sbh and a*s^2*b mask terms stay)."""
LOSS_LOGIT_BYTES: Final = 4
"""The vocab-parallel cross entropy works on logits cast to fp32 and keeps them for backward
(Megatron `vocab_parallel_cross_entropy` calls `.float()` first)."""


def attended_keys(arch: ModelArchitecture, layer: int, seq_len: int) -> int:
    """Keys each query attends to in `layer`: the window for local layers, else the sequence."""
    kind = arch.attention_pattern[layer % len(arch.attention_pattern)]
    if kind == "local" and arch.local_attention_window is not None:
        return min(arch.local_attention_window, seq_len)
    return seq_len


def layer_activation_bytes(
    arch: ModelArchitecture, layer: int, *, seq_len: int, microbatch: int, tp: int, precision: str
) -> float:
    """Bytes one block stores for backward, per microbatch, on one TP rank.

    Korthikanti et al. 2022 section 4.1 count, for a GPT block with 2-byte activations,
    s*b*h*(34 + 5*a*s/h); with tensor parallelism but no sequence parallelism (section 4.2.2,
    eq. 2) s*b*h*(10 + 24/t + 5*a*s/(h*t)). Re-derived tensor by tensor (e = activation bytes,
    q = heads*head_dim and k = kv_heads*head_dim per rank, f = FFN width per rank, a = heads per
    rank, s_k = attended keys, m = 1 byte per mask element), the same count reads:

    replicated over TP (TP without SP keeps these whole on every rank):
      2 norm inputs 2*e*sbh; QKV input e*sbh; MLP input e*sbh; two dropout masks 2*m*sbh
    split over TP:
      Q and K for QK^T e*sb(q + k); V e*sb*k; output-projection input e*sb*q;
      softmax output e*a*s*s_k*b, its dropout mask m*a*s*s_k*b, dropout output e*a*s*s_k*b;
      MLP inner: GeLU 2*e*sb*f (GeLU input, down-projection input), ReLU 1*e*sb*f (its output
      is both what ReLU's backward reads and the down projection's input), SwiGLU 3*e*sb*f
      (Megatron's fused bias_swiglu keeps the concatenated gate/up input, 2f, plus the down
      projection's input; eager PyTorch would keep 4f).

    With e = 2, q = k = h, f = 4h, GeLU: 10 replicated + 24/t split + 5*a*s_k/(h*t) — the paper.
    Local-attention layers use s_k = min(window, s) (the score terms shrink, nothing else).
    Dropout masks are counted for every architecture (conservative for models trained
    without dropout, e.g. Llama).
    """
    e = ACTIVATION_BYTES[precision]
    h, d = arch.hidden, arch.resolved_head_dim
    sb = seq_len * microbatch
    a = _shard(arch.heads, tp)
    q = a * d
    k = _shard(arch.resolved_kv_heads, tp) * d
    f = _shard(arch.resolved_ffn, tp)
    s_k = attended_keys(arch, layer, seq_len)
    replicated = (2 * e + e + e + 2 * MASK_BYTES) * sb * h
    attention = e * sb * (q + k) + e * sb * k + e * sb * q
    scores = (2 * e + MASK_BYTES) * a * seq_len * s_k * microbatch
    inner = {"gelu": 2, "relu": 1, "swiglu": 3}[arch.mlp] * e * sb * f
    return float(replicated + attention + scores + inner)


def embedding_activation_bytes(
    arch: ModelArchitecture, *, seq_len: int, microbatch: int, precision: str
) -> float:
    """Embedding end: its output (e*sbh) and the embedding dropout mask (sbh), replicated.

    Under checkpointing this output is also the first block's checkpointed input; it is
    counted here once and by the blocks once (an overlap of one e*sbh, kept for simplicity).
    """
    e = ACTIVATION_BYTES[precision]
    return float((e + MASK_BYTES) * seq_len * microbatch * arch.hidden)


def head_activation_bytes(
    arch: ModelArchitecture, *, seq_len: int, microbatch: int, tp: int, precision: str
) -> float:
    """Output end: final-norm input and head input (e*sbh each, replicated) and the fp32
    logits s*b*vocab/t that the vocab-parallel cross entropy keeps for its backward."""
    e = ACTIVATION_BYTES[precision]
    sb = seq_len * microbatch
    norm = e * sb * arch.hidden if arch.final_norm else 0
    return float(norm + e * sb * arch.hidden + LOSS_LOGIT_BYTES * sb * _shard(arch.vocab, tp))


def head_backward_bytes(
    arch: ModelArchitecture, *, seq_len: int, microbatch: int, tp: int
) -> float:
    """The fp32 gradient of the logits, s*b*vocab/t, that the cross entropy's backward
    materialises while the saved logits are still alive: the largest transient of a backward
    (attention's are a few s*s*b*a/t), counted once, since one microbatch runs backward at a
    time. Measured on the runtime (bench/fidelity.py), leaving it out under-predicted the last
    stage's peak by about its size."""
    return float(LOSS_LOGIT_BYTES * seq_len * microbatch * _shard(arch.vocab, tp))


def stage_output_bytes(
    arch: ModelArchitecture, *, seq_len: int, microbatch: int, precision: str
) -> float:
    """A non-last stage's output, e*s*b*h: the pipeline schedule keeps it until the gradient
    of exactly that tensor comes back, but no layer of the stage saves it (its last operation,
    the residual add, keeps nothing), so the layer counts miss it."""
    return float(ACTIVATION_BYTES[precision] * seq_len * microbatch * arch.hidden)


def token_bytes(*, seq_len: int, microbatch: int) -> float:
    """One microbatch's token ids and targets, int64: 16 s*b. Each in-flight microbatch keeps
    them, and the last one read is still referenced through the reduction and the step (a
    few KiB the runtime measured above the model's prediction until counted)."""
    return float(2 * 8 * seq_len * microbatch)


RECEIVED_BYTES: Final = 4
"""hetc's runtime sends and receives stage boundaries in fp32 whatever the precision."""


BOUNDARY_TRANSIENTS: Final = 3
"""Boundary-sized fp32 buffers a stage after the first holds around a backward, besides its
inputs: the chunks received for the next forward and their concatenation
(`StageTrainer._receive_full`), and the input gradient being sent back while the previous
one may still be in flight. Counted once; leaving them out under-predicted such stages by
about three boundaries (bench/fidelity.py)."""


def received_input_bytes(arch: ModelArchitecture, *, seq_len: int, microbatch: int) -> float:
    """A later stage's input as received, fp32 s*b*h, kept per in-flight microbatch (with
    measured layer activations, which count outputs, not inputs)."""
    return float(RECEIVED_BYTES * seq_len * microbatch * arch.hidden)


def stage_activation_bytes(
    arch: ModelArchitecture,
    stage: StageShape,
    *,
    seq_len: int,
    precision: str,
    checkpointing: bool,
    measured: Sequence[float] | None = None,
) -> float:
    """Activations alive at the backward peak of `stage`: `in_flight` microbatches' worth.

    `measured`, from a profile, gives the bytes each of the stage's layers (embedding, blocks,
    head, in order) leaves alive after its forward per microbatch, its output included and
    its input not (`hetc profile measure`'s convention). It replaces the per-layer formulas
    and the stage output; the stage's input is added, fp32 as the runtime receives it, on
    stages after the first; the transients stay (a one-layer profile does not see them).
    Under checkpointing the formulas are used: a profile measures layers without it.

    Without checkpointing every block keeps everything `layer_activation_bytes` lists. With
    full checkpointing (Korthikanti section 5: "only the input to each transformer layer")
    each block keeps its input, e*s*b*h (replicated under TP without SP), and the backward of
    one block at a time recomputes its full activations for one microbatch: that working set,
    less the block input already stored, is added once, not per in-flight microbatch. The
    embedding and head ends are not checkpointed.
    """
    b, t = stage.microbatch, stage.tp
    e = ACTIVATION_BYTES[precision]
    layers = range(stage.first_block, stage.end_block)
    full = [
        layer_activation_bytes(arch, i, seq_len=seq_len, microbatch=b, tp=t, precision=precision)
        for i in layers
    ]
    per_microbatch = (
        float(e * seq_len * b * arch.hidden * len(full)) if checkpointing else sum(full)
    )
    if stage.has_embedding:
        per_microbatch += embedding_activation_bytes(
            arch, seq_len=seq_len, microbatch=b, precision=precision
        )
    once = 0.0
    if stage.has_head:
        per_microbatch += head_activation_bytes(
            arch, seq_len=seq_len, microbatch=b, tp=t, precision=precision
        )
        once = head_backward_bytes(arch, seq_len=seq_len, microbatch=b, tp=t)
    else:
        per_microbatch += stage_output_bytes(
            arch, seq_len=seq_len, microbatch=b, precision=precision
        )
    if measured is not None and not checkpointing:
        per_microbatch = float(sum(measured))
        if not stage.has_embedding:
            per_microbatch += received_input_bytes(arch, seq_len=seq_len, microbatch=b)
    if not stage.has_embedding:
        once += BOUNDARY_TRANSIENTS * received_input_bytes(arch, seq_len=seq_len, microbatch=b)
    # The recomputed block's first norm input *is* its stored checkpoint: count it once.
    recompute = max(full) - e * seq_len * b * arch.hidden if checkpointing and full else 0.0
    return stage.in_flight * per_microbatch + recompute + once


# --------------------------------------------------------------------------------------------
# Communication buffers and the whole rank
# --------------------------------------------------------------------------------------------


def _buckets(
    layout: OptimizerLayout, params: int, bucket_bytes: float, overlap_comm: bool
) -> tuple[float, float]:
    """(bytes alive during backward, bytes alive in the post-backward reduction).

    ZeRO 1/2 (`DeepSpeedZeroOptimizer.setup_buckets`, stage_1_and_2.py, called from the
    gradient hooks of the first backward): `torch.empty(int(reduce_bucket_size),
    dtype=_gradient_reduction_buffer_dtype())`, a second one when overlap_comm is on.
    DeepSpeed reads reduce_bucket_size as a number of *elements*, so `bucket_bytes` — the value
    the emitted config writes — allocates bucket_bytes x element size bytes, whatever the
    model's size. allgather_bucket_size allocates nothing: `all_gather_dp_groups`
    (runtime/utils.py) gathers in place with all_gather_into_tensor when NCCL has it.

    ZeRO 0 and BF16_Optimizer (engine.py `buffered_allreduce_fallback` -> `allreduce_bucket`):
    the gradients are flattened (a copy when there are several tensors, chunked at
    `FALLBACK_ALLREDUCE_ELEMENTS`) or cast to the communication dtype (BF16_Optimizer's single
    flat fp32 buffer to bf16, not chunked). reduce_bucket_size plays no part there.
    """
    if layout.reduce == "ipg_bucket":
        return bucket_bytes * layout.bucket_element_bytes * (2 if overlap_comm else 1), 0.0
    elements = min(params, FALLBACK_ALLREDUCE_ELEMENTS) if layout.reduce_copy_capped else params
    return 0.0, elements * layout.reduce_copy_bytes


def rank_memory(
    arch: ModelArchitecture,
    stage: StageShape,
    *,
    seq_len: int,
    precision: str,
    optimizer: str,
    zero_stage: int,
    dp: int,
    checkpointing: bool,
    bucket_bytes: float,
    overhead: FrameworkOverhead,
    overlap_comm: bool = False,
    measured_activations: Sequence[float] | None = None,
) -> MemoryBreakdown:
    """Peak memory of one rank of `stage`, each source separately.

    Evaluates the backward, reduce and step moments (module docstring) and returns the one with
    the largest total. `dp` is the stage's data-parallel degree (ZeRO shards over it);
    `bucket_bytes` is the reduce_bucket_size the emitted DeepSpeed config sets (read by
    DeepSpeed as elements, see `_buckets`). Fragmentation applies to activations and buckets.
    """
    if dp < 1:
        raise ValueError("dp must be at least 1")
    if seq_len < 1:
        raise ValueError("seq_len must be at least 1")
    if bucket_bytes < 0:
        raise ValueError("bucket_bytes must be zero or more")
    layout = layout_of(precision, zero_stage)
    states = states_of(optimizer)
    params = stage_parameters_per_rank(arch, stage)
    weights = params * layout.weights.at(dp)
    opt = params * (layout.master.at(dp) + states * layout.state.at(dp))
    activations = stage_activation_bytes(
        arch,
        stage,
        seq_len=seq_len,
        precision=precision,
        checkpointing=checkpointing,
        measured=measured_activations,
    )
    bucket_backward, bucket_reduce = _buckets(layout, params, bucket_bytes, overlap_comm)

    def moment(phase: Phase, gradients: float, acts: float, buckets: float) -> MemoryBreakdown:
        return MemoryBreakdown(
            weights=weights,
            gradients=gradients,
            optimizer=opt,
            activations=acts,
            buckets=buckets,
            overhead=overhead.fixed_bytes + overhead.fragmentation * (acts + buckets),
            phase=phase,
        )

    grads = params * layout.gradients.at(dp)
    whole_gradient = layout.gradients.replicated + layout.gradients.sharded
    accumulating = largest_parameter_per_rank(arch, stage) * whole_gradient
    tokens = token_bytes(seq_len=seq_len, microbatch=stage.microbatch)
    moments = (
        moment(
            "backward",
            grads + accumulating,
            activations + (stage.in_flight + 1) * tokens,
            bucket_backward,
        ),
        moment("reduce", grads, tokens, bucket_reduce),
        moment("step", params * layout.step_gradients.at(dp), tokens, 0.0),
    )
    return max(moments, key=lambda m: m.total)


def _bytes(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def check_fits(breakdown: MemoryBreakdown, capacity: float, rank: str) -> str | None:
    """None when `breakdown` fits in `capacity` bytes; else a message for the planner's report.

    The message names the rank, the shortfall in bytes and percent of capacity, the phase, and
    the dominant term, so the fix (more TP, ZeRO, checkpointing, a smaller microbatch) is
    obvious from it.
    """
    if capacity <= 0:
        raise ValueError("capacity must be positive")
    total = breakdown.total
    if total <= capacity:
        return None
    over = total - capacity
    top = breakdown.dominant()
    return (
        f"{rank}: needs {_bytes(total)} at its {breakdown.phase} peak but has {_bytes(capacity)}:"
        f" over by {over:.0f} bytes ({_bytes(over)}, {100 * over / capacity:.1f}% of capacity);"
        f" largest term: {top} {_bytes(breakdown.terms()[top])}"
    )


__all__ = [
    "BOUNDARY_TRANSIENTS",
    "CPU_OVERHEAD",
    "FrameworkOverhead",
    "MemoryBreakdown",
    "StageShape",
    "block_parameters_per_rank",
    "check_fits",
    "default_overhead",
    "embedding_parameters_per_rank",
    "head_backward_bytes",
    "head_parameters_per_rank",
    "largest_parameter_per_rank",
    "layer_activation_bytes",
    "rank_memory",
    "received_input_bytes",
    "stage_activation_bytes",
    "stage_output_bytes",
    "stage_parameters_per_rank",
    "token_bytes",
]
