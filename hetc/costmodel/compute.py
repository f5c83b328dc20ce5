"""Per-layer forward, backward and update time of one microbatch on one device.

Where a measured profile covers a (microbatch, TP) point, its numbers are returned exactly
(Sailor's approach, §4.1: measurements beat any formula). Elsewhere hetc estimates
(docs/costmodel-compute.md has the derivation, the fit and the error table):

    time(pass) = [overhead_s[pass]] + max(FLOP / (peak[precision] * eff(W)),
                                          bytes / memory_bandwidth)
               + scores * score_bytes[pass] / memory_bandwidth
               + chain_elements * chain_bytes[chain][pass] / memory_bandwidth
               + all_reduces * tp_all_reduce_time(all_reduce_bytes, tp, ...)

- the roofline over GEMM FLOPs and elementwise bytes, with `W` the FLOP count of that pass on
  one device and `eff` a fitted logistic (small GEMMs on a big GPU run far below peak);
- the unfused attention softmax chain (scale, mask, softmax, dropout and their gradients) as
  serial memory traffic: `score_bytes` effective bytes per attention-score element, one
  number per pass shared by every device;
- the unfused elementwise chains of the layers around the blocks, serial, at `chain_bytes`
  effective bytes per element beyond the counted bytes (global, fitted): the head's fp32
  vocab-parallel cross-entropy per logit (m*s*V/t), the final norm and the embedding's
  gather + position add + dropout per m*s*h element;
- the Megatron tensor-parallel all-reduces, explicit (2 per block pass, 1 in the vocab-parallel
  embedding forward, 1 in the head backward): a ring over the device's intra-node link
  (`network.tp_all_reduce_time`) at a fitted fraction of it per TP degree, with a fitted
  per-step latency; the cross-entropy's 3 per-token fp32 all-reduces are latency-bound and
  timed at the link's own latency;
- a fixed latency on layers with no matmul (embedding gather, final norm).

The optimizer update is memory-bound by nature (Adam reads and writes every parameter's
state once), so it is bytes / (bandwidth * efficiency).

FLOPs per layer kind, for microbatch `m`, sequence `s`, TP degree `t` (each matmul 2*m*n*k):

- block: QKV 2*m*s*h*(a*d + 2*kv*d)/t, scores 2*m*a*s*s'*d/t, weighted values the same,
  output projection 2*m*s*a*d*h/t, MLP (2 or 3 for swiglu)*2*m*s*h*f/t, where s' is the
  keys each query attends to: s, or min(window, s) on local-attention layers (the causal
  mask is not exploited: unfused attention computes the full square).
- head: logits 2*m*s*e*V/t (vocab-parallel), plus the hidden->e projection when the token
  embedding is narrower than hidden; the softmax cross-entropy is memory traffic.
- embedding: a gather (memory traffic), plus the e->hidden projection where e != hidden.
- norm: the final layer norm alone (memory traffic).

Backward is 2x the forward FLOPs and bytes (gradients w.r.t. inputs and weights), the head's
logits GEMM included (`HEAD_BACKWARD_GEMMS`); with activation checkpointing the forward is
recomputed, so backward gets one more forward.

The fitted numbers are data, in `efficiency.json` beside this module, fitted on OPT-350M and
GPT-Neo-2.7B profiles only by `bench/costmodel.py --fit`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from typing import Literal

from hetc.catalog import DeviceType, ModelArchitecture
from hetc.costmodel.network import INTRA_NODE_LATENCY, tp_all_reduce_time
from hetc.costmodel.profile import LayerProfile

LayerKind = Literal["embedding", "block", "norm", "head"]
Pass = Literal["forward", "backward"]

DTYPE_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
"""Bytes of one activation element per training precision."""

HEAD_BACKWARD_GEMMS = 2.0
"""Logits-GEMM FLOPs of the head's backward, in units of its forward GEMM: the input gradient
and the weight gradient (see the docs: the fit set's backward ~ forward comes from the
cross-entropy traffic, not from a missing GEMM)."""


@dataclass(frozen=True, slots=True)
class LayerTimes:
    """Seconds of one layer for one microbatch on one device."""

    forward: float
    backward: float
    update: float


@dataclass(frozen=True, slots=True)
class PassWork:
    """What one pass of one layer costs on one device: FLOPs, bytes moved, TP all-reduces."""

    flops: float
    bytes: float
    all_reduces: int = 0
    """Tensor-parallel all-reduces in this pass (0 at TP 1)."""
    all_reduce_bytes: float = 0.0
    """Bytes of each of them (every rank's full buffer)."""
    scores: float = 0.0
    """Attention-score elements (m * heads * s * keys / tp) whose unfused scale, mask, softmax
    and dropout chain runs at memory speed, serially after the GEMMs."""
    chain: str = ""
    """Which fitted unfused elementwise chain this pass runs serially (`DeviceEfficiency.
    chain_bytes`): "logits" (the head's fp32 cross-entropy), "norm" (the final norm),
    "embedding" (gather, position add, dropout); "" for none."""
    chain_elements: float = 0.0
    """Elements that chain runs over on one device: logits m*s*V/t, or the m*s*h activations."""
    small_all_reduces: int = 0
    """Latency-bound TP all-reduces (a few bytes per token, e.g. the vocab-parallel loss's max,
    target logit and sum(exp)); timed at the link's own latency, not the fitted TP numbers."""
    small_all_reduce_bytes: float = 0.0
    """Bytes of each small all-reduce."""


@dataclass(frozen=True, slots=True)
class LayerWork:
    """Forward and backward work of one layer on one device, and its parameters there."""

    forward: PassWork
    backward: PassWork
    parameters: float
    """Parameters held (and updated) by one device of the TP group."""


@dataclass(frozen=True, kw_only=True, slots=True)
class EfficiencyCurve:
    """Achieved fraction of peak FLOP/s as a function of the work W (FLOPs on one device).

    eff(W) = e_max / (1 + 2 ** ((x0 - log2 W) / width)).  A logistic in log2 W: near zero for
    tiny GEMMs (launch- and tile-bound), e_max for large ones, half of e_max at W = 2**x0.
    Monotone non-decreasing in W for width > 0 and three numbers per device and pass.
    """

    e_max: float
    x0: float
    width: float

    def __call__(self, work: float) -> float:
        if work <= 0:
            return self.e_max
        z = (self.x0 - math.log2(work)) / self.width
        return float(self.e_max / (1.0 + 2.0 ** min(z, 1000.0)))


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceEfficiency:
    """The fitted numbers of one device type (or the default for types never measured)."""

    forward: EfficiencyCurve
    backward: EfficiencyCurve
    overhead_s: dict[str, float] = field(default_factory=lambda: {"forward": 0.0, "backward": 0.0})
    """Fixed seconds per layer and pass (kernel launches, framework hooks)."""
    update_bandwidth_efficiency: float = 1.0
    """Achieved fraction of memory bandwidth in the optimizer step."""
    score_bytes: dict[str, float] = field(default_factory=lambda: {"forward": 0.0, "backward": 0.0})
    """Effective bytes moved per attention-score element and pass (at full memory bandwidth)."""
    tp_step_latency_s: float = INTRA_NODE_LATENCY
    """Seconds per ring step of a TP all-reduce (NCCL launch, rank skew), not just the wire's."""
    tp_bandwidth_efficiency: dict[int, float] = field(default_factory=dict)
    """TP degree -> achieved fraction of the intra-node link (`network.intra_node_link`) in a
    TP all-reduce. Degrees not listed take the nearest listed degree below (else above);
    empty means 1.0 (the link's full speed)."""
    chain_bytes: dict[str, dict[str, float]] = field(default_factory=dict)
    """Chain name -> pass -> effective bytes per element (at full memory bandwidth) that the
    unfused elementwise chain moves beyond the pass's counted `bytes`, serially. Missing
    entries are 0 (only the counted bytes)."""

    def curve(self, which: Pass) -> EfficiencyCurve:
        return self.forward if which == "forward" else self.backward

    def tp_efficiency(self, tp: int) -> float:
        """The achieved fraction of the intra-node link for a TP group of `tp` devices."""
        table = self.tp_bandwidth_efficiency
        if not table:
            return 1.0
        if tp in table:
            return table[tp]
        below = [t for t in table if t <= tp]
        return table[max(below)] if below else table[min(table)]


@dataclass(frozen=True, slots=True)
class LinkFraction:
    """A flat message-size curve at `fraction` of the link (hashable, for `network`'s cache)."""

    fraction: float

    def __call__(self, nbytes: float) -> float:
        return self.fraction


def _curve(data: dict[str, float]) -> EfficiencyCurve:
    return EfficiencyCurve(e_max=data["e_max"], x0=data["x0"], width=data["width"])


def efficiency_from_mapping(data: dict[str, object]) -> DeviceEfficiency:
    """Build a `DeviceEfficiency` from its `efficiency.json` spelling."""
    fwd, bwd, over = data["forward"], data["backward"], data.get("overhead_s", {})
    assert isinstance(fwd, dict) and isinstance(bwd, dict) and isinstance(over, dict)
    upd = data.get("update_bandwidth_efficiency", 1.0)
    latency = data.get("tp_step_latency_s", INTRA_NODE_LATENCY)
    tp_eff = data.get("tp_bandwidth_efficiency", {})
    score = data.get("score_bytes", {})
    chains = data.get("chain_bytes", {})
    assert isinstance(score, dict) and isinstance(chains, dict)
    assert isinstance(upd, (int, float)) and isinstance(latency, (int, float))
    assert isinstance(tp_eff, dict)
    return DeviceEfficiency(
        forward=_curve(fwd),
        backward=_curve(bwd),
        overhead_s={"forward": 0.0, "backward": 0.0, **over},
        update_bandwidth_efficiency=float(upd),
        score_bytes={"forward": 0.0, "backward": 0.0, **score},
        tp_step_latency_s=float(latency),
        tp_bandwidth_efficiency={int(k): float(v) for k, v in tp_eff.items()},
        chain_bytes={
            str(name): {str(w): float(b) for w, b in per_pass.items()}
            for name, per_pass in chains.items()
        },
    )


@cache
def efficiency_table() -> dict[str, object]:
    """The bundled `efficiency.json`, as written."""
    text = resources.files(__package__).joinpath("efficiency.json").read_text(encoding="utf-8")
    loaded = json.loads(text)
    assert isinstance(loaded, dict)
    return loaded


def adam_bytes_per_parameter() -> float:
    """Bytes the mixed-precision Adam step reads and writes per parameter (efficiency.json)."""
    value = efficiency_table()["adam_bytes_per_parameter"]
    assert isinstance(value, (int, float))
    return float(value)


def device_efficiency(
    device: str, overrides: dict[str, DeviceEfficiency] | None = None, *, kind: str = "gpu"
) -> DeviceEfficiency:
    """The curve for `device`: an override, else its fitted entry, else the default entry
    for its kind (`cpu` processes run flat: no launch-bound small-GEMM regime to fit)."""
    if overrides and device in overrides:
        return overrides[device]
    return _bundled_efficiency(device, kind)


@cache
def _bundled_efficiency(device: str, kind: str) -> DeviceEfficiency:
    """`device_efficiency` without overrides, parsed once: every layer estimate asks for it
    (the planner's stage tables for 15 (TP, microbatch) pairs of OPT-350M spent a quarter
    of their time re-reading efficiency.json's entry)."""
    table = efficiency_table()
    devices = table["devices"]
    assert isinstance(devices, dict)
    entry = devices.get(device, table["cpu_default" if kind == "cpu" else "default"])
    assert isinstance(entry, dict)
    return efficiency_from_mapping(entry)


@cache
def _layer_keys(
    arch: ModelArchitecture, layers: tuple[tuple[LayerKind, ...], ...]
) -> tuple[tuple[tuple[tuple[LayerKind, ...], bool | None], int], ...]:
    """Per layer, what its estimate depends on (its kinds, and for a block whether its
    attention is local) and its block index: cached per model and layout, because
    `ComputeModel.all_layer_times` runs for every (device, TP, microbatch) the planner
    considers, and walking the layout anew each time was 4% of the smallest bench search."""
    keys = []
    block = 0
    for kinds in layers:
        keys.append(((kinds, _is_local(arch, block) if "block" in kinds else None), block))
        if "block" in kinds:
            block += 1
    return tuple(keys)


def _is_local(arch: ModelArchitecture, block: int) -> bool:
    pattern = arch.attention_pattern
    return pattern[block % len(pattern)] == "local"


def layer_work(
    arch: ModelArchitecture,
    kind: LayerKind,
    *,
    seq_len: int,
    microbatch: int,
    tp: int = 1,
    block: int = 0,
    precision: str = "fp16",
) -> LayerWork:
    """FLOPs and bytes of one layer kind for one microbatch on one device of a TP group.

    `block` is the block's 0-based index (it picks global or local attention). Sharded
    matmuls (Megatron-style: QKV and MLP-in by columns, output and MLP-out by rows, vocab-
    parallel embedding and logits) are divided by `tp`; replicated work (norms, residuals,
    position embeddings, OPT's projections) is not.
    """
    m, s, t = microbatch, seq_len, tp
    h, v, e = arch.hidden, arch.vocab, arch.embedding_width
    a, kv, d = arch.heads, arch.resolved_kv_heads, arch.resolved_head_dim
    f = arch.resolved_ffn
    b = DTYPE_BYTES[precision]
    tokens = m * s
    norm_bytes = 2 * tokens * h * b  # read input, write output
    hidden_bytes = tokens * h * b  # one activation tensor: what a TP all-reduce carries
    sharded = t > 1
    if kind == "block":
        keys = min(arch.local_attention_window or s, s) if _is_local(arch, block) else s
        matrices = 3 if arch.mlp == "swiglu" else 2
        flops = (
            2 * tokens * h * (a * d + 2 * kv * d) / t  # QKV projection
            + 2 * 2 * m * a * s * keys * d / t  # scores Q.K^T and weighted values P.V
            + 2 * tokens * a * d * h / t  # output projection
            + matrices * 2 * tokens * h * f / t  # MLP
        )
        elementwise = (
            2 * norm_bytes  # two norms
            + 2 * 3 * tokens * h * b  # two residual adds: read two, write one
            + (matrices - 1) * 2 * tokens * f * b / t  # activation (and swiglu's product)
        )
        scores = m * a * s * keys / t  # their traffic is `score_bytes` per element, serial
        params = arch.layer_parameters() / t
        # Megatron: the row-parallel attention output and MLP-out all-reduce forward; the
        # column-parallel QKV and MLP-in inputs all-reduce their gradients backward.
        reduces = 2 if sharded else 0
        fwd = PassWork(flops, elementwise, reduces, hidden_bytes, scores)
        bwd = PassWork(2 * flops, 2 * elementwise, reduces, hidden_bytes, scores)
    elif kind == "head":
        gemm = 2 * tokens * e * v / t
        projection = 2 * tokens * h * e if e != h else 0.0
        logits = tokens * v / t
        # Counted: fp16 logits written, then fp32 softmax cross-entropy: read, exp/sum, write.
        # The rest of the unfused fp32 chain (cast, max, subtract, exp, sum, divide; backward:
        # softmax - one-hot, scale, cast) is the "logits" chain, serial after the GEMM.
        loss_bytes = logits * (b + 3 * 4)
        params = (0 if arch.tied_embeddings else v * e) / t + (h * e if e != h else 0)
        # Vocab-parallel cross-entropy all-reduces max, target logit and sum(exp): 3 x fp32
        # per token forward, latency-bound; backward all-reduces the input gradient of the
        # logits GEMM (hidden states).
        fwd = PassWork(
            gemm + projection,
            loss_bytes,
            chain="logits",
            chain_elements=logits,
            small_all_reduces=3 if sharded else 0,
            small_all_reduce_bytes=tokens * 4.0,
        )
        # Backward: input and weight gradients of the logits GEMM (HEAD_BACKWARD_GEMMS).
        bwd = PassWork(
            HEAD_BACKWARD_GEMMS * gemm + 2 * projection,
            loss_bytes,
            1 if sharded else 0,
            hidden_bytes,
            chain="logits",
            chain_elements=logits,
        )
    elif kind == "embedding":
        gathered = 2 * tokens * e * b  # read the rows, write them
        flops = 0.0
        if arch.position == "learned":
            gathered += 3 * tokens * h * b  # read positions, add, write
        if e != h:
            flops = float(2 * tokens * e * h)
        params = v * e / t + (arch.max_positions + arch.position_offset) * h * (
            arch.position == "learned"
        )
        if e != h:
            params += e * h
        # Vocab-parallel: every rank gathers its rows (zeros elsewhere), then one all-reduce.
        fwd = PassWork(
            flops,
            gathered,
            1 if sharded else 0,
            tokens * e * b,
            chain="embedding",
            chain_elements=tokens * h,
        )
        bwd = PassWork(2 * flops, 2 * gathered)
    elif kind == "norm":
        params = float(2 * h if arch.norm == "layernorm" else h)
        fwd = PassWork(0.0, norm_bytes, chain="norm", chain_elements=tokens * h)
        bwd = PassWork(0.0, 2 * norm_bytes, chain="norm", chain_elements=tokens * h)
    else:
        raise ValueError(f"unknown layer kind {kind!r} (embedding, block, norm or head)")
    return LayerWork(forward=fwd, backward=bwd, parameters=params)


def tp_time(work: PassWork, device: DeviceType, eff: DeviceEfficiency, tp: int) -> float:
    """Seconds of the pass's TP all-reduces: rings over the intra-node link at the device's
    achieved fraction of it, with its fitted per-step latency (`network.tp_all_reduce_time`);
    the small latency-bound ones at the link's own latency and speed."""
    if tp <= 1:
        return 0.0
    total = 0.0
    if work.all_reduces:
        one = tp_all_reduce_time(
            work.all_reduce_bytes,
            tp,
            device,
            latency=eff.tp_step_latency_s,
            curve=LinkFraction(eff.tp_efficiency(tp)),
        )
        total += work.all_reduces * one
    if work.small_all_reduces:
        small = tp_all_reduce_time(work.small_all_reduce_bytes, tp, device)
        total += work.small_all_reduces * small
    return total


def chain_time(work: PassWork, device: DeviceType, eff: DeviceEfficiency, which: Pass) -> float:
    """Seconds of the pass's unfused elementwise chain beyond its counted bytes (serial)."""
    if not work.chain or work.chain_elements <= 0:
        return 0.0
    per_element = eff.chain_bytes.get(work.chain, {}).get(which, 0.0)
    return work.chain_elements * per_element / device.memory_bandwidth


def launch_bound_time(flops: float, peak: float, curve: EfficiencyCurve) -> float:
    """Seconds of `flops` at the curve's efficiency, and never more than the half-efficiency
    work 2**x0 takes: a GEMM smaller than that is launch- and tile-bound, so shrinking it
    further cannot make it slower (the logistic alone, with width < 1, would say it does,
    without bound, for tiny layers)."""
    if flops <= 0:
        return 0.0
    half = 2.0**curve.x0
    ceiling = half / (peak * curve.e_max / 2.0)
    return (
        min(flops / (peak * curve(flops)), ceiling)
        if flops < half
        else flops / (peak * curve(flops))
    )


def pass_time(
    work: PassWork,
    device: DeviceType,
    eff: DeviceEfficiency,
    which: Pass,
    precision: str,
    tp: int = 1,
) -> float:
    """Roofline time of one pass: max(compute time, memory time), plus the fixed latency,
    plus the pass's TP all-reduces (`tp_time`; none at TP 1).

    The fixed latency applies to memory-bound layers only (no matmul): for matmul layers the
    efficiency curve was fitted on whole measured compute times, so it already holds their
    launches.
    """
    peak = device.peak_flops.get(precision)
    if peak is None:
        raise ValueError(
            f"{device.name} has no {precision} peak (it has {sorted(device.peak_flops)})"
        )
    compute = launch_bound_time(work.flops, peak, eff.curve(which))
    memory = work.bytes / device.memory_bandwidth
    overhead = eff.overhead_s.get(which, 0.0) if work.flops == 0 else 0.0
    softmax = work.scores * eff.score_bytes.get(which, 0.0) / device.memory_bandwidth
    chain = chain_time(work, device, eff, which)
    return overhead + max(compute, memory) + softmax + chain + tp_time(work, device, eff, tp)


def update_time(parameters: float, device: DeviceType, eff: DeviceEfficiency) -> float:
    """Adam step over `parameters`: bytes touched per parameter / achieved bandwidth.

    Memory-bound whatever the device: a handful of FLOPs per 28 bytes moved is far left of
    every GPU's ridge point, so the roofline is always its bandwidth side.
    """
    bandwidth = device.memory_bandwidth * eff.update_bandwidth_efficiency
    return parameters * adam_bytes_per_parameter() / bandwidth


def default_layout(arch: ModelArchitecture) -> tuple[tuple[LayerKind, ...], ...]:
    """hetc's layer order: embedding, every block, then the output end (final norm + head)."""
    tail: tuple[LayerKind, ...] = ("norm", "head") if arch.final_norm else ("head",)
    return (("embedding",), *((("block",),) * arch.layers), tail)


@dataclass(frozen=True, kw_only=True, slots=True)
class ComputeModel:
    """Per-layer times of one model on one device type, measured where known, else estimated.

    `layout[i]` lists the layer kinds that layer index i is made of (a profiler may fold the
    final norm into the head, as Sailor does for OPT); it must match the profile's indices.
    """

    arch: ModelArchitecture
    device: DeviceType
    seq_len: int = 2048
    precision: str = "fp16"
    profile: LayerProfile | None = None
    activation_checkpointing: bool = False
    efficiency: DeviceEfficiency | None = None
    """None means the bundled fit for this device (or the default)."""
    layout: Sequence[tuple[LayerKind, ...]] | None = None

    def __post_init__(self) -> None:
        if self.profile is not None and (
            self.profile.seq_len != self.seq_len or self.profile.precision != self.precision
        ):
            raise ValueError(
                f"profile {self.profile.source} was measured at seq_len {self.profile.seq_len}, "
                f"{self.profile.precision}; this model runs seq_len {self.seq_len}, "
                f"{self.precision} (profile the same setting, or drop the profile)"
            )

    def layers(self) -> Sequence[tuple[LayerKind, ...]]:
        return self.layout if self.layout is not None else default_layout(self.arch)

    def without_profile(self) -> ComputeModel:
        return replace(self, profile=None)

    def estimate(
        self, kinds: Sequence[LayerKind], microbatch: int, tp: int, block: int = 0
    ) -> LayerTimes:
        """The formula's times of a layer made of `kinds` (no profile consulted)."""
        eff = self.efficiency or device_efficiency(self.device.name, kind=self.device.kind)
        fwd = bwd = upd = 0.0
        for kind in kinds:
            work = layer_work(
                self.arch,
                kind,
                seq_len=self.seq_len,
                microbatch=microbatch,
                tp=tp,
                block=block,
                precision=self.precision,
            )
            f = pass_time(work.forward, self.device, eff, "forward", self.precision, tp)
            fwd += f
            bwd += pass_time(work.backward, self.device, eff, "backward", self.precision, tp)
            if self.activation_checkpointing:
                bwd += f
            upd += update_time(work.parameters, self.device, eff)
        return LayerTimes(fwd, bwd, upd)

    def layer_times(self, index: int, microbatch: int, tp: int = 1) -> LayerTimes:
        """Times of layer `index`: the profile's exact numbers if measured, else `estimate`."""
        layers = self.layers()
        if not 0 <= index < len(layers):
            raise IndexError(f"layer {index} out of range (the model has {len(layers)})")
        measured = self._measured(index, microbatch, tp)
        if measured is not None:
            return measured
        block = sum(1 for kinds in layers[:index] if "block" in kinds)
        return self.estimate(layers[index], microbatch, tp, block)

    def all_layer_times(self, microbatch: int, tp: int = 1) -> list[LayerTimes]:
        """`layer_times` of every layer in order. The formula's estimate is computed once per
        distinct layer (its kinds, and for a block whether its attention is local) and
        shared: the planner builds these for every (device, TP, microbatch) it considers."""
        estimates: dict[tuple[tuple[LayerKind, ...], bool | None], LayerTimes] = {}
        out = []
        measured = self.profile is not None
        for index, (key, block) in enumerate(_layer_keys(self.arch, tuple(self.layers()))):
            times = self._measured(index, microbatch, tp) if measured else None
            if times is None:
                times = estimates.get(key)
                if times is None:
                    times = self.estimate(key[0], microbatch, tp, block)
                    estimates[key] = times
            out.append(times)
        return out

    def _measured(self, index: int, microbatch: int, tp: int) -> LayerTimes | None:
        if self.profile is None:
            return None
        measured = self.profile.lookup(microbatch, tp, index)
        if measured is None:
            return None
        fwd, bwd, upd = measured
        if self.activation_checkpointing:
            bwd += fwd
        return LayerTimes(fwd, bwd, upd)
