"""Bytes per parameter of one rank's weights, gradients and optimizer state, as DeepSpeed 0.19.8
allocates them for each precision and ZeRO stage: the table `memory.rank_memory` reads for the
parameter terms of a rank's peak (its communication buffers come from the same rows).

Every row cites the DeepSpeed file, class and function it was read from; the layouts are data,
kept apart from the arithmetic of `memory` so that a new DeepSpeed release is a change here.
Pure Python; never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Phase = Literal["backward", "reduce", "step"]
"""A moment of an iteration (`memory.rank_memory`)."""

DS = "deepspeed/runtime/"
OPTIMIZER_STATES: Final[dict[str, int]] = {"adam": 2, "adamw": 2, "sgd": 1}
"""fp32 state tensors per parameter: Adam/AdamW keep exp_avg and exp_avg_sq; SGD with momentum
keeps momentum_buffer (the spec's sgd has momentum 0.9 by default)."""

FALLBACK_ALLREDUCE_ELEMENTS: Final = 500_000_000
"""`MEMORY_OPT_ALLREDUCE_SIZE` in deepspeed/runtime/engine.py: elements per flattened chunk of
`DeepSpeedEngine.buffered_allreduce_fallback`, the non-ZeRO gradient all-reduce."""


@dataclass(frozen=True, slots=True)
class PerParam:
    """Bytes per parameter: `replicated` on every DP rank plus `sharded` split over DP."""

    replicated: float
    sharded: float = 0.0

    def at(self, dp: int) -> float:
        return self.replicated + self.sharded / dp


@dataclass(frozen=True, kw_only=True, slots=True)
class OptimizerLayout:
    """Where DeepSpeed keeps each copy for one (precision, ZeRO stage), per parameter."""

    wrapper: str
    """The DeepSpeed class that wraps the optimizer, as engine.py picks it."""
    weights: PerParam
    gradients: PerParam
    """Held at the end of backward (with the activations)."""
    step_gradients: PerParam
    """Held at the peak of the optimizer step (fp32 copies made there, activations gone)."""
    master: PerParam
    state: PerParam
    """One optimizer state tensor (fp32); multiplied by `OPTIMIZER_STATES`."""
    reduce: Literal["ipg_bucket", "flat_copy"]
    """`ipg_bucket`: ZeRO's reduce bucket, `bucket_bytes` elements of the model dtype, alive in
    backward. `flat_copy`: `buffered_allreduce_fallback` flattens the gradients into a copy of
    `reduce_copy_bytes` per element after backward."""
    reduce_copy_bytes: float = 0.0
    reduce_copy_capped: bool = True
    """Whether the copy is chunked at `FALLBACK_ALLREDUCE_ELEMENTS` (many tensors) or whole
    (one flat tensor cast to the communication dtype)."""
    bucket_element_bytes: float = 0.0
    citation: str


_FP16_OPTIMIZER = OptimizerLayout(
    wrapper="FP16_Optimizer",
    weights=PerParam(2),
    gradients=PerParam(2),
    # step(): `_flatten_dense_tensors([p.grad.to(fp32) for p in group])` materialises every
    # fp32 copy in the list (4) and then the flat fp32 result (4) while the fp16 grads (2)
    # are still alive; `p.grad = None` comes after.
    step_gradients=PerParam(2 + 4 + 4),
    master=PerParam(4),
    state=PerParam(4),
    reduce="flat_copy",
    reduce_copy_bytes=2,
    citation=(
        DS + "fp16/fused_optimizer.py FP16_Optimizer.__init__ (fp16_groups_flat, fp32_groups_flat"
        " = clone().float()) and .step (flattened fp32 grads); engine.py "
        "DeepSpeedEngine._do_optimizer_sanity_check -> FP16/DDP_BFLOAT16 -> "
        "_configure_fp16_optimizer (FusedAdam); all-reduce: engine.py allreduce_gradients -> "
        "buffered_allreduce_fallback -> allreduce_bucket (self.flatten copy)"
    ),
)

DEEPSPEED_LAYOUT: Final[dict[tuple[str, int], OptimizerLayout]] = {
    # fp32, no ZeRO: the engine returns the bare torch/Fused optimizer; grads are param.grad.
    ("fp32", 0): OptimizerLayout(
        wrapper="none (basic optimizer)",
        weights=PerParam(4),
        gradients=PerParam(4),
        step_gradients=PerParam(4),
        master=PerParam(0),
        state=PerParam(4),
        reduce="flat_copy",
        reduce_copy_bytes=4,
        citation=(
            DS + "engine.py DeepSpeedEngine._do_optimizer_sanity_check (model dtype == grad "
            "accum dtype == fp32 -> None: no wrapper); buffered_allreduce_fallback flattens"
        ),
    ),
    # fp32 ZeRO-1: DeepSpeedZeroOptimizer still clones the fp32 partition as "master".
    ("fp32", 1): OptimizerLayout(
        wrapper="DeepSpeedZeroOptimizer",
        weights=PerParam(4),
        gradients=PerParam(4),
        step_gradients=PerParam(0, 4 + 4),
        master=PerParam(0, 4),
        state=PerParam(0, 4),
        reduce="ipg_bucket",
        bucket_element_bytes=4,
        citation=(
            DS + "zero/stage_1_and_2.py DeepSpeedZeroOptimizer.__init__ (weights_partition = "
            "...detach().clone().to(master dtype)), .step (free_grad_in_param_list of other "
            "partitions, then self.flatten(averaged_gradients) copy), .setup_buckets"
        ),
    ),
    ("fp32", 2): OptimizerLayout(
        wrapper="DeepSpeedZeroOptimizer",
        weights=PerParam(4),
        gradients=PerParam(0, 4),
        step_gradients=PerParam(0, 4 + 4),
        master=PerParam(0, 4),
        state=PerParam(0, 4),
        reduce="ipg_bucket",
        bucket_element_bytes=4,
        citation=(
            DS + "zero/stage_1_and_2.py DeepSpeedZeroOptimizer.copy_grads_in_partition "
            "(grads_in_partition: partition-sized buffer of the model dtype), "
            "reduce_ipg_grads (clear_grad_attribute for other partitions), .step"
        ),
    ),
    ("fp16", 0): _FP16_OPTIMIZER,
    # fp16 ZeRO-1: full fp16 grads until the boundary reduction; master + states sharded.
    ("fp16", 1): OptimizerLayout(
        wrapper="DeepSpeedZeroOptimizer",
        weights=PerParam(2),
        gradients=PerParam(2),
        # in-partition fp16 grads (2) + self.flatten copy (2) + .to(fp32) (4), all /dp
        step_gradients=PerParam(0, 2 + 2 + 4),
        master=PerParam(0, 4),
        state=PerParam(0, 4),
        reduce="ipg_bucket",
        bucket_element_bytes=2,
        citation=(
            DS + "zero/stage_1_and_2.py DeepSpeedZeroOptimizer.__init__ "
            "(single_partition_of_fp32_groups), .step (single_grad_partition = "
            "flat_grad_partition.to(fp32)), .setup_buckets (torch.empty(reduce_bucket_size, "
            "dtype=_gradient_reduction_buffer_dtype()))"
        ),
    ),
    ("fp16", 2): OptimizerLayout(
        wrapper="DeepSpeedZeroOptimizer",
        weights=PerParam(2),
        gradients=PerParam(0, 2),
        step_gradients=PerParam(0, 2 + 2 + 4),
        master=PerParam(0, 4),
        state=PerParam(0, 4),
        reduce="ipg_bucket",
        bucket_element_bytes=2,
        citation=(
            DS + "zero/stage_1_and_2.py DeepSpeedZeroOptimizer.copy_grads_in_partition "
            "(grads_in_partition, fp16), reduce_ipg_grads, .step"
        ),
    ),
    # bf16 ZeRO-0: DeepSpeed refuses bf16 weights with fp32 gradient accumulation without ZeRO
    # (engine.py _do_optimizer_sanity_check raises NotImplementedError "unsupported mix"), so the
    # emitted config must set data_types.grad_accum_dtype = bf16, which takes DDP_BFLOAT16 ->
    # FP16_Optimizer(low_precision_dtype=bf16): the fp16 layout with bf16 in place of fp16.
    ("bf16", 0): _FP16_OPTIMIZER,
    # bf16 ZeRO-1 with grad_accum_dtype fp32: BF16_Optimizer. Its fp32 gradient buffer is the
    # whole (unsharded) flat group, and the bf16 lp grads stay allocated (zeroed, not freed).
    ("bf16", 1): OptimizerLayout(
        wrapper="BF16_Optimizer",
        weights=PerParam(2),
        gradients=PerParam(2 + 4),
        step_gradients=PerParam(2 + 4),
        master=PerParam(0, 4),
        state=PerParam(0, 4),
        reduce="flat_copy",
        reduce_copy_bytes=2,
        reduce_copy_capped=False,
        citation=(
            DS + "bf16_optimizer.py BF16_Optimizer._setup_for_real_optimizer "
            "(fp32_groups_flat_partition = partition.clone().float(); fp32_groups_gradients_flat"
            " = torch.zeros_like(bf16_groups_flat, dtype=grad_acc_dtype)), .clear_lp_grads "
            "(zeroes, keeps lp grads); engine.py _do_optimizer_sanity_check (bf16 + fp32 accum "
            "+ stage 1 -> BFLOAT16), communication_data_type (bf16) -> allreduce_bucket "
            ".to(bf16) copy of the flat fp32 buffer"
        ),
    ),
    # bf16 ZeRO-2 with grad_accum_dtype fp32: DeepSpeedZeroOptimizer keeps a compact fp32
    # gradient partition; the reduce bucket stays bf16 (use_grad_accum_attribute is False).
    ("bf16", 2): OptimizerLayout(
        wrapper="DeepSpeedZeroOptimizer",
        weights=PerParam(2),
        gradients=PerParam(0, 4),
        step_gradients=PerParam(0, 4),
        master=PerParam(0, 4),
        state=PerParam(0, 4),
        reduce="ipg_bucket",
        bucket_element_bytes=2,
        citation=(
            DS + "zero/stage_1_and_2.py DeepSpeedZeroOptimizer._use_compact_grad_partition_buffer"
            " / _build_compact_grad_partition_buffer (fp32 partition), "
            "_gradient_reduction_buffer_dtype (model dtype at stage 2), .step "
            "(_get_preflattened_grad_partition: no flatten copy)"
        ),
    ),
}
"""One row per (precision, ZeRO stage): DeepSpeed 0.19.8 with the config hetc emits (FusedAdam,
contiguous_gradients true, no offload, fp16 without grad_accum_dtype, bf16 with
grad_accum_dtype fp32 at ZeRO 1 and 2 and bf16 at ZeRO 0). Sums per parameter, Adam, D = dp:

| precision | ZeRO | weights | gradients (backward) | master + states | total (backward)  |
|-----------|------|---------|----------------------|-----------------|-------------------|
| fp32      | 0    | 4       | 4                    | 0 + 8           | 16                |
| fp32      | 1    | 4       | 4                    | (4 + 8)/D       | 8 + 12/D          |
| fp32      | 2    | 4       | 4/D                  | (4 + 8)/D       | 4 + 16/D          |
| fp16      | 0    | 2       | 2                    | 4 + 8           | 16                |
| fp16      | 1    | 2       | 2                    | (4 + 8)/D       | 4 + 12/D          |
| fp16      | 2    | 2       | 2/D                  | (4 + 8)/D       | 2 + 14/D          |
| bf16      | 0    | 2       | 2                    | 4 + 8           | 16                |
| bf16      | 1    | 2       | 2 + 4                | (4 + 8)/D       | 8 + 12/D          |
| bf16      | 2    | 2       | 4/D                  | (4 + 8)/D       | 2 + 16/D          |

SGD replaces the 8 (two states) with 4. Step-time gradient copies are in `step_gradients`.
"""


def bytes_per_parameter(
    precision: str, zero_stage: int, optimizer: str, dp: int, *, phase: Phase = "backward"
) -> dict[str, float]:
    """Weights, gradients and optimizer bytes per parameter of one rank, from the table."""
    layout = layout_of(precision, zero_stage)
    states = states_of(optimizer)
    grads = layout.step_gradients if phase == "step" else layout.gradients
    return {
        "weights": layout.weights.at(dp),
        "gradients": grads.at(dp),
        "optimizer": layout.master.at(dp) + states * layout.state.at(dp),
    }


def layout_of(precision: str, zero_stage: int) -> OptimizerLayout:
    """The `DEEPSPEED_LAYOUT` row of (precision, ZeRO stage); ValueError naming the values
    there are for any other."""
    try:
        return DEEPSPEED_LAYOUT[(precision, zero_stage)]
    except KeyError:
        raise ValueError(
            f"no memory layout for precision {precision!r} with ZeRO stage {zero_stage}"
            " (precision is fp32, fp16 or bf16; ZeRO stage 0, 1 or 2)"
        ) from None


def states_of(optimizer: str) -> int:
    """`OPTIMIZER_STATES` of the optimizer; ValueError naming the optimizers for any other."""
    try:
        return OPTIMIZER_STATES[optimizer]
    except KeyError:
        raise ValueError(
            f"unknown optimizer {optimizer!r} (one of {', '.join(OPTIMIZER_STATES)})"
        ) from None


__all__ = [
    "DEEPSPEED_LAYOUT",
    "FALLBACK_ALLREDUCE_ELEMENTS",
    "OPTIMIZER_STATES",
    "OptimizerLayout",
    "PerParam",
    "Phase",
    "bytes_per_parameter",
    "layout_of",
    "states_of",
]
