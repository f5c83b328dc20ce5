"""Per-layer forward, backward and update time of one microbatch on one device.

Where a measured profile covers a (microbatch, TP) point, its numbers are returned exactly
(Sailor's approach, §4.1: measurements beat any formula). Elsewhere hetc estimates:

    time(pass) = [overhead_s[pass]] + max(FLOP / (peak[precision] * eff(W)),
                                        bytes / memory_bandwidth)

a roofline, plus a fixed latency on layers with no matmul (embedding gather, final norm).
`W` is the FLOP count of that pass on one device;
`eff` is a fitted curve (below) because small GEMMs on a big GPU run far below peak, which is
what a plain roofline gets most wrong. The optimizer update is memory-bound by nature (Adam
reads and writes every parameter's state once), so it is bytes / (bandwidth * efficiency).

FLOPs per layer kind, for microbatch `m`, sequence `s`, TP degree `t` (each matmul 2*m*n*k):

- block: QKV 2*m*s*h*(a*d + 2*kv*d)/t, scores 2*m*a*s*s'*d/t, weighted values the same,
  output projection 2*m*s*a*d*h/t, MLP (2 or 3 for swiglu)*2*m*s*h*f/t, where s' is the
  keys each query attends to: s, or min(window, s) on local-attention layers (the causal
  mask is not exploited: unfused attention computes the full square).
- head: logits 2*m*s*e*V/t (vocab-parallel), plus the hidden->e projection when the token
  embedding is narrower than hidden; the softmax cross-entropy is memory traffic.
- embedding: a gather (memory traffic), plus the e->hidden projection where e != hidden.
- norm: the final layer norm alone (memory traffic).

Backward is 2x the forward FLOPs and bytes (gradients w.r.t. inputs and weights); with
activation checkpointing the forward is recomputed, so backward gets one more forward.

The efficiency curve (`EfficiencyCurve`) is data, in `efficiency.json` beside this module,
fitted on OPT-350M and GPT-Neo-2.7B profiles only by `bench/costmodel.py --fit`.
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
from hetc.costmodel.profile import LayerProfile

LayerKind = Literal["embedding", "block", "norm", "head"]
Pass = Literal["forward", "backward"]

DTYPE_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
"""Bytes of one activation element per training precision."""


@dataclass(frozen=True, slots=True)
class LayerTimes:
    """Seconds of one layer for one microbatch on one device."""

    forward: float
    backward: float
    update: float


@dataclass(frozen=True, slots=True)
class PassWork:
    """What one pass of one layer costs on one device: FLOPs and bytes moved."""

    flops: float
    bytes: float


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

    def curve(self, which: Pass) -> EfficiencyCurve:
        return self.forward if which == "forward" else self.backward


def _curve(data: dict[str, float]) -> EfficiencyCurve:
    return EfficiencyCurve(e_max=data["e_max"], x0=data["x0"], width=data["width"])


def efficiency_from_mapping(data: dict[str, object]) -> DeviceEfficiency:
    """Build a `DeviceEfficiency` from its `efficiency.json` spelling."""
    fwd, bwd, over = data["forward"], data["backward"], data.get("overhead_s", {})
    assert isinstance(fwd, dict) and isinstance(bwd, dict) and isinstance(over, dict)
    upd = data.get("update_bandwidth_efficiency", 1.0)
    assert isinstance(upd, (int, float))
    return DeviceEfficiency(
        forward=_curve(fwd),
        backward=_curve(bwd),
        overhead_s={"forward": 0.0, "backward": 0.0, **over},
        update_bandwidth_efficiency=float(upd),
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
    device: str, overrides: dict[str, DeviceEfficiency] | None = None
) -> DeviceEfficiency:
    """The curve for `device`: an override, else its fitted entry, else the default entry."""
    if overrides and device in overrides:
        return overrides[device]
    table = efficiency_table()
    devices = table["devices"]
    assert isinstance(devices, dict)
    entry = devices.get(device, table["default"])
    assert isinstance(entry, dict)
    return efficiency_from_mapping(entry)


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
            + 4 * m * a * s * keys * b / t  # scale/mask and softmax over the scores
        )
        params = arch.layer_parameters() / t
        fwd = PassWork(flops, elementwise)
    elif kind == "head":
        flops = 2 * tokens * e * v / t
        if e != h:
            flops += 2 * tokens * h * e
        # fp16 logits written, then fp32 softmax cross-entropy: read, exp/sum, write.
        loss_bytes = tokens * v / t * (b + 3 * 4)
        params = (0 if arch.tied_embeddings else v * e) / t + (h * e if e != h else 0)
        fwd = PassWork(flops, loss_bytes)
    elif kind == "embedding":
        gathered = 2 * tokens * e * b  # read the rows, write them
        flops = 0.0
        if arch.position == "learned":
            gathered += 3 * tokens * h * b  # read positions, add, write
        if e != h:
            flops = 2 * tokens * e * h
        params = v * e / t + (arch.max_positions + arch.position_offset) * h * (
            arch.position == "learned"
        )
        if e != h:
            params += e * h
        fwd = PassWork(flops, gathered)
    elif kind == "norm":
        params = 2 * h if arch.norm == "layernorm" else h
        fwd = PassWork(0.0, norm_bytes)
    else:
        raise ValueError(f"unknown layer kind {kind!r} (embedding, block, norm or head)")
    return LayerWork(
        forward=fwd, backward=PassWork(2 * fwd.flops, 2 * fwd.bytes), parameters=params
    )


def pass_time(
    work: PassWork, device: DeviceType, eff: DeviceEfficiency, which: Pass, precision: str
) -> float:
    """Roofline time of one pass: max(compute time, memory time), plus the fixed latency.

    The fixed latency applies to memory-bound layers only (no matmul): for matmul layers the
    efficiency curve was fitted on whole measured times, so it already holds their launches.
    """
    peak = device.peak_flops.get(precision)
    if peak is None:
        raise ValueError(
            f"{device.name} has no {precision} peak (it has {sorted(device.peak_flops)})"
        )
    compute = work.flops / (peak * eff.curve(which)(work.flops)) if work.flops > 0 else 0.0
    memory = work.bytes / device.memory_bandwidth
    overhead = eff.overhead_s.get(which, 0.0) if work.flops == 0 else 0.0
    return overhead + max(compute, memory)


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
        eff = self.efficiency or device_efficiency(self.device.name)
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
            f = pass_time(work.forward, self.device, eff, "forward", self.precision)
            fwd += f
            bwd += pass_time(work.backward, self.device, eff, "backward", self.precision)
            if self.activation_checkpointing:
                bwd += f
            upd += update_time(work.parameters, self.device, eff)
        return LayerTimes(fwd, bwd, upd)

    def layer_times(self, index: int, microbatch: int, tp: int = 1) -> LayerTimes:
        """Times of layer `index`: the profile's exact numbers if measured, else `estimate`."""
        layers = self.layers()
        if not 0 <= index < len(layers):
            raise IndexError(f"layer {index} out of range (the model has {len(layers)})")
        if self.profile is not None:
            measured = self.profile.lookup(microbatch, tp, index)
            if measured is not None:
                fwd, bwd, upd = measured
                if self.activation_checkpointing:
                    bwd += fwd
                return LayerTimes(fwd, bwd, upd)
        block = sum(1 for kinds in layers[:index] if "block" in kinds)
        return self.estimate(layers[index], microbatch, tp, block)
