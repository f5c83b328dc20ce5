"""Precomputed stage tables: prefix sums, O(1) memory against rank_memory, replica evaluation."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetc.catalog import ModelArchitecture, devices, models
from hetc.costmodel.compute import ComputeModel
from hetc.costmodel.memory import FrameworkOverhead, rank_memory
from hetc.costmodel.profile import LayerProfile
from hetc.costmodel.tables import (
    StageTables,
    build_stage_tables,
    evaluate_stage,
    peak_memory,
    stage_shape,
)

A100 = devices()["A100-40GB"]
V100 = devices()["V100-16GB"]
NEO = models()["GPT-Neo-2.7B"].architecture
OPT = models()["OPT-350M"].architecture
LLAMA = models()["Llama-7B"].architecture
# Untied, RMSNorm, no biases, GQA and SwiGLU with an odd head count: the ceil-sharding paths.
ODD = ModelArchitecture(
    layers=5,
    hidden=96,
    heads=6,
    kv_heads=3,
    vocab=1001,
    ffn=250,
    mlp="swiglu",
    position="rope",
    tied_embeddings=False,
    norm="rmsnorm",
    linear_bias=False,
    local_attention_window=64,
    attention_pattern=("local", "global", "global"),
)
ARCHES = {"neo": NEO, "opt": OPT, "llama": LLAMA, "odd": ODD}
SEQ = 2048


def tables(
    arch: ModelArchitecture = NEO,
    device: object = A100,
    *,
    tp: int = 1,
    microbatch: int = 1,
    zero_stage: int = 1,
    checkpointing: bool = False,
    **kw: object,
) -> StageTables:
    compute = ComputeModel(
        arch=arch,
        device=device,  # type: ignore[arg-type]
        seq_len=SEQ,
        precision=str(kw.pop("precision", "fp16")),
        activation_checkpointing=checkpointing,
    )
    return build_stage_tables(
        compute,
        tp=tp,
        microbatch=microbatch,
        zero_stage=zero_stage,
        **kw,  # type: ignore[arg-type]
    )


@st.composite
def layer_range(draw: st.DrawFn, layers: int) -> tuple[int, int]:
    first = draw(st.integers(0, layers - 1))
    return first, draw(st.integers(first + 1, layers))


@settings(max_examples=60, deadline=None)
@given(
    arch=st.sampled_from(sorted(ARCHES)),
    tp=st.sampled_from([1, 2, 4, 8]),
    microbatch=st.sampled_from([1, 2, 8]),
    checkpointing=st.booleans(),
    data=st.data(),
)
def test_prefix_range_equals_direct_sum_of_layer_times(
    arch: str, tp: int, microbatch: int, checkpointing: bool, data: st.DataObject
) -> None:
    """A prefix-sum range equals the direct sum of ComputeModel.layer_times over the range."""
    compute = ComputeModel(
        arch=ARCHES[arch], device=A100, seq_len=SEQ, activation_checkpointing=checkpointing
    )
    t = build_stage_tables(compute, tp=tp, microbatch=microbatch, zero_stage=1)
    first, end = data.draw(layer_range(t.layers))
    direct = [compute.layer_times(i, microbatch, tp) for i in range(first, end)]
    for got, want in (
        (t.forward[end] - t.forward[first], math.fsum(x.forward for x in direct)),
        (t.backward[end] - t.backward[first], math.fsum(x.backward for x in direct)),
        (t.update[end] - t.update[first], math.fsum(x.update for x in direct)),
    ):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-15)


def test_profile_numbers_are_summed_exactly() -> None:
    """Measured profile entries reach the tables unchanged (layer_times prefers them)."""
    measured = {0: (1e-3, 2e-3, 3e-4), 3: (7e-3, 9e-3, 1e-4)}
    profile = LayerProfile(
        model="odd", device=A100.name, precision="fp16", seq_len=SEQ, times={2: {2: measured}}
    )
    compute = ComputeModel(arch=ODD, device=A100, seq_len=SEQ, profile=profile)
    t = build_stage_tables(compute, tp=2, microbatch=2, zero_stage=0)
    assert t.forward[1] == 1e-3 and t.backward[1] == 2e-3 and t.update[1] == 3e-4
    assert t.forward[4] - t.forward[3] == pytest.approx(7e-3, rel=1e-12)
    estimate = compute.without_profile().layer_times(1, 2, 2)
    assert t.forward[2] - t.forward[1] == pytest.approx(estimate.forward, rel=1e-12)


@settings(max_examples=300, deadline=None)
@given(
    arch=st.sampled_from(sorted(ARCHES)),
    precision=st.sampled_from(["fp32", "fp16", "bf16"]),
    zero_stage=st.sampled_from([0, 1, 2]),
    optimizer=st.sampled_from(["adam", "sgd"]),
    tp=st.sampled_from([1, 2, 3, 4, 8]),
    microbatch=st.sampled_from([1, 2, 4]),
    checkpointing=st.booleans(),
    overlap_comm=st.booleans(),
    bucket_bytes=st.sampled_from([0.0, 5e7, 5e8]),
    overhead=st.sampled_from(
        [FrameworkOverhead(), FrameworkOverhead(fixed_bytes=0.0, fragmentation=0.0)]
    ),
    dp=st.integers(1, 64),
    in_flight=st.integers(1, 16),
    data=st.data(),
)
def test_memory_equals_rank_memory(
    arch: str,
    precision: str,
    zero_stage: int,
    optimizer: str,
    tp: int,
    microbatch: int,
    checkpointing: bool,
    overlap_comm: bool,
    bucket_bytes: float,
    overhead: FrameworkOverhead,
    dp: int,
    in_flight: int,
    data: st.DataObject,
) -> None:
    """The O(1) peak equals memory.rank_memory(...).total for random stages and settings."""
    model = ARCHES[arch]
    t = tables(
        model,
        tp=tp,
        microbatch=microbatch,
        zero_stage=zero_stage,
        checkpointing=checkpointing,
        precision=precision,
        optimizer=optimizer,
        overlap_comm=overlap_comm,
        bucket_bytes=bucket_bytes,
        overhead=overhead,
    )
    whole = data.draw(st.booleans())
    first, end = (0, t.layers) if whole else data.draw(layer_range(t.layers))
    want = rank_memory(
        model,
        stage_shape(t, first, end, in_flight),
        seq_len=SEQ,
        precision=precision,
        optimizer=optimizer,
        zero_stage=zero_stage,
        dp=dp,
        checkpointing=checkpointing,
        bucket_bytes=bucket_bytes,
        overhead=overhead,
        overlap_comm=overlap_comm,
    ).total
    assert peak_memory(t, first, end, dp, in_flight) == pytest.approx(want, rel=1e-9)


def test_stage_shape_maps_layer_ranges_to_blocks() -> None:
    """Layer 0 is the embedding, layers 1..L the blocks, layer L+1 the output end."""
    t = tables(ODD)
    assert t.layers == ODD.layers + 2
    whole = stage_shape(t, 0, t.layers, 1)
    assert (whole.first_block, whole.end_block, whole.has_embedding, whole.has_head) == (
        0,
        5,
        True,
        True,
    )
    head = stage_shape(t, t.layers - 1, t.layers, 1)
    assert (head.blocks, head.has_embedding, head.has_head) == (0, False, True)
    middle = stage_shape(t, 2, 4, 1)
    assert (middle.first_block, middle.end_block, middle.has_embedding, middle.has_head) == (
        1,
        3,
        False,
        False,
    )


def test_slowest_replica_dominates() -> None:
    """The stage runs at its slowest replica's pace, whichever order the replicas come in."""
    fast, slow = tables(NEO, A100, tp=2), tables(NEO, V100, tp=2)
    first, end = 1, 9
    slow_f = slow.forward[end] - slow.forward[first]
    slow_b = slow.backward[end] - slow.backward[first]
    fast_f = fast.forward[end] - fast.forward[first]
    assert slow_f > fast_f
    for replicas in (((fast, 3), (slow, 1)), ((slow, 1), (fast, 3))):
        fwd, bwd, upd, fits, rate = evaluate_stage(replicas, first, end, 2)
        assert (fwd, bwd) == (slow_f, slow_b)
        assert upd == max(t.update[end] - t.update[first] for t in (fast, slow))
        assert fits
        assert rate == pytest.approx(3 * 2 * A100.price + 2 * V100.price)  # type: ignore[operator]
    alone = evaluate_stage(((fast, 4),), first, end, 2)
    assert alone[0] == fast_f


def test_stage_not_fitting_on_one_replica_is_reported() -> None:
    """One replica whose device is too small makes the whole stage not fit."""
    big, small = tables(NEO, A100, tp=1), tables(NEO, V100, tp=1)
    first, end, in_flight = 0, 12, 4
    need = peak_memory(big, first, end, 2, in_flight)
    assert small.capacity < need <= big.capacity
    assert evaluate_stage(((big, 2),), first, end, in_flight)[3]
    assert not evaluate_stage(((big, 1), (small, 1)), first, end, in_flight)[3]
    assert not evaluate_stage(((small, 1), (big, 1)), first, end, in_flight)[3]
    # A capacity override (say, a pool that reserves memory) is honoured the same way.
    tight = replace(big, capacity=need - 1.0)
    assert not evaluate_stage(((tight, 2),), first, end, in_flight)[3]


def test_dp_shards_zero_state_across_all_replicas() -> None:
    """ZeRO divides by the stage's whole replica count, mixed devices included."""
    a, v = tables(NEO, A100, zero_stage=2), tables(NEO, V100, zero_stage=2)
    first, end = 1, 17
    mixed = peak_memory(a, first, end, 4, 1)
    assert peak_memory(a, first, end, 1, 1) > mixed
    assert peak_memory(v, first, end, 4, 1) == mixed  # memory is device-independent
    # dp = 1 + 3 = 4 in the evaluator: fits exactly when the dp=4 peak does.
    fits = evaluate_stage(((a, 1), (v, 3)), first, end, 1)[3]
    assert fits == (mixed <= V100.memory)


def test_with_price_and_missing_price() -> None:
    """Pool prices replace catalog ones; a device with no price must be given one."""
    t = tables(NEO, A100, tp=4)
    assert t.with_price(1e-3).price_per_second == pytest.approx(4e-3)
    assert t.with_price(1e-3).forward is t.forward
    unpriced = replace(A100, price=None)
    with pytest.raises(ValueError, match="price_per_device_second"):
        tables(NEO, unpriced)
    assert tables(NEO, unpriced, price_per_device_second=2e-4).price_per_second == 2e-4


def test_rejects_unknown_layout() -> None:
    """A layer sequence other than embedding, blocks, output end is refused, not misread."""
    compute = ComputeModel(arch=ODD, device=A100, layout=(("embedding", "block"),) * 7)
    with pytest.raises(ValueError, match="default_layout"):
        build_stage_tables(compute, tp=1, microbatch=1, zero_stage=1)
