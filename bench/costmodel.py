"""Accuracy of hetc's no-profile compute model against Sailor's measured per-layer times.

Prints, per model, device, column (forward, backward, update) and layer kind (embedding,
block, head), the median and p90 absolute relative error |estimate - measured| / measured.
OPT-350 and GPT-Neo-2.7 are the fit set; OPT-30 and LLAMA-3-8, and every model on GH200, are
held out (never used to fit). `--fit` refits the efficiency curves on the fit set and rewrites
hetc/costmodel/efficiency.json, so the bundled numbers are reproducible.

Usage: python bench/costmodel.py [--fit] [--data DIR]
  DIR defaults to $HETC_SAILOR_DATA or shared/data/sailor-measurements beside the checkout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hetc.catalog import DeviceType, ModelArchitecture, find_device  # noqa: E402
from hetc.costmodel.compute import (  # noqa: E402
    ComputeModel,
    DeviceEfficiency,
    EfficiencyCurve,
    LayerKind,
    LayerWork,
    adam_bytes_per_parameter,
    efficiency_from_mapping,
    layer_work,
    pass_time,
    tp_time,
)
from hetc.costmodel.profile import LayerProfile, read_profile  # noqa: E402
from hetc.costmodel.published import DEVICE_NAMES  # noqa: E402

DEFAULT_DATA = next(
    (
        c
        for c in (
            Path(__file__).resolve().parents[2] / "shared" / "data" / "sailor-measurements",
            Path("/work/shared/data/sailor-measurements"),
        )
        if c.is_dir()
    ),
    Path(__file__).resolve().parents[2] / "shared" / "data" / "sailor-measurements",
)
EFFICIENCY_JSON = ROOT / "hetc" / "costmodel" / "efficiency.json"

E_MAX_CAP = 0.8
"""Highest fraction of datasheet fp16 peak a fitted curve may reach: dense fp16 GEMMs top out
near 70-80% of peak on these GPUs; without the cap the GEMM rate and the softmax traffic trade
off freely and the fit can put GEMMs at 100% of peak (it did, on A100-40)."""

_FLAT = EfficiencyCurve(e_max=1.0, x0=0.0, width=1.0)

DEVICES = {
    gpu: DEVICE_NAMES.get(gpu, gpu)
    for gpu in ("A100-40", "A100-80", "GH-96", "V100-16", "Titan-RTX", "RTX-2080", "RTX-3090")
}
"""Sailor's GPU directory names -> hetc catalog names (the importer's mapping)."""

HELD_OUT_GPUS = frozenset({"GH-96"})
"""GPUs never used to fit, whatever the model: GH200 checks the analytical model on hardware
it was not fitted to (bench/plan_quality.py reports it apart). Its curve is the `default`."""

EXCLUDED = {
    ("GPT-Neo-2.7", "GH-96"): "byte-identical to OPT-350/GH-96 (26 layers): not a GPT-Neo profile"
}


@dataclass(frozen=True)
class SailorModel:
    """A model as Sailor profiled it: its shape and what each profile index holds.

    The shapes come from the parameter counts in Sailor's layer-memory.json (Megatron-style
    GPT: vocab padded to 50304, no OPT embedding projection), not from the HF presets.
    """

    arch: ModelArchitecture
    layout: tuple[tuple[LayerKind, ...], ...]
    fit: bool


def _layout(
    blocks: int, tail: tuple[tuple[LayerKind, ...], ...]
) -> tuple[tuple[LayerKind, ...], ...]:
    return (("embedding",), *((("block",),) * blocks), *tail)


def sailor_models() -> dict[str, SailorModel]:
    """The four profiled models. Layer 0 embedding; blocks; then the output end, which holds
    final norm + logits + loss for the OPTs, only the final norm for GPT-Neo (5120 params in
    layer-memory.json: the tied logits are not in it), and norm, head as two layers for LLAMA."""
    opt350 = ModelArchitecture(
        layers=24, hidden=1024, heads=16, ffn=4096, vocab=50304, tied_embeddings=False
    )
    neo = ModelArchitecture(
        layers=32, hidden=2560, heads=32, head_dim=80, ffn=10240, vocab=50304, tied_embeddings=True
    )
    # Sailor's LLAMA-3-8: hidden 4096, 32 heads, NO grouped-query attention, swiglu FFN 16384,
    # linear biases, rmsnorm, rope, untied head, vocab 50304 (layer-memory.json's counts).
    llama = ModelArchitecture(
        layers=32,
        hidden=4096,
        heads=32,
        ffn=16384,
        vocab=50304,
        mlp="swiglu",
        position="rope",
        tied_embeddings=False,
        norm="rmsnorm",
        linear_bias=True,
    )
    # OPT-30B: 48 layers, hidden 7168, 56 heads, ffn 28672, vocab 50272 (padded 50304).
    opt30 = ModelArchitecture(
        layers=48, hidden=7168, heads=56, ffn=28672, vocab=50304, mlp="relu", tied_embeddings=False
    )
    return {
        "OPT-350": SailorModel(opt350, _layout(24, (("norm", "head"),)), fit=True),
        "GPT-Neo-2.7": SailorModel(neo, _layout(32, (("norm",),)), fit=True),
        "OPT-30": SailorModel(opt30, _layout(48, (("norm", "head"),)), fit=False),
        "LLAMA-3-8": SailorModel(llama, _layout(32, (("norm",), ("head",))), fit=False),
    }


def report_kind(kinds: tuple[LayerKind, ...]) -> str:
    """The bench's three groups: embedding, block, and everything after the blocks (head)."""
    if "embedding" in kinds:
        return "embedding"
    return "block" if "block" in kinds else "head"


def load_profiles(data: Path) -> list[tuple[str, str, LayerProfile]]:
    """Every usable (model, sailor gpu, profile), skipping the ones `EXCLUDED` names."""
    found = []
    for model in sailor_models():
        for gpu in sorted(DEVICES):
            path = data / "layer-profiles" / model / gpu / "profile.json"
            if path.exists() and (model, gpu) not in EXCLUDED:
                profile = read_profile(path, model=model, device=DEVICES[gpu])
                found.append((model, gpu, profile))
    return found


def _device(gpu: str) -> DeviceType:
    device = find_device(DEVICES[gpu])
    assert device is not None
    return device


def _works(spec: SailorModel, index: int, mbs: int, tp: int) -> list[LayerWork]:
    return [
        layer_work(spec.arch, k, seq_len=2048, microbatch=mbs, tp=tp) for k in spec.layout[index]
    ]


def step_indices(spec: SailorModel) -> list[int]:
    """The layers of the model Sailor's profiler actually built and stepped: the embedding,
    ONE block (it reduces repeated layers to one instance, §4.1) and the output layers. Its
    update column repeats that one optimizer step's time on every layer index (see the docs)."""
    n = len(spec.layout)
    tail = [i for i in range(n) if "block" not in spec.layout[i] and i != 0]
    return [0, 1, *tail]


def _fit_tp(
    samples: list[tuple[int, float, float]], bandwidth: float
) -> tuple[float, dict[int, float]]:
    """Per-step latency and per-degree link efficiency of the TP all-reduce.

    samples: (tp, all-reduce bytes, measured seconds of one all-reduce). A ring all-reduce
    costs 2(t-1) * latency + 2(t-1)/t * bytes / (bandwidth * eff_t). Grid-search the
    latency; each eff_t is then the median of what its points need; minimise the median
    |log error| over all points.
    """
    best: tuple[float, float, dict[int, float]] = (math.inf, 0.0, {})
    degrees = sorted({t for t, _, _ in samples})
    for latency in 10.0 ** np.arange(-6.0, -3.0, 0.05):
        effs: dict[int, float] = {}
        for t in degrees:
            need = [
                2 * (t - 1) / t * nbytes / bandwidth / (y - 2 * (t - 1) * latency)
                for tt, nbytes, y in samples
                if tt == t and y > 2 * (t - 1) * latency
            ]
            effs[t] = min(1.0, float(np.median(need))) if need else 1.0
        logs = [
            abs(
                math.log(
                    (2 * (t - 1) * latency + 2 * (t - 1) / t * nbytes / (bandwidth * effs[t])) / y
                )
            )
            for t, nbytes, y in samples
            if y > 0
        ]
        score = float(np.median(logs))
        if score < best[0]:
            best = (score, float(latency), effs)
    _, latency, effs = best
    return latency, {t: round(e, 5) for t, e in effs.items()}


def fit(data: Path) -> dict[str, object]:
    """Fit every device's numbers on OPT-350 and GPT-Neo-2.7, in this order:

    1. overhead_s[pass] and the embedding / final-norm chain bytes (`_fit_memory_chains`):
       on the layers with no matmul (embedding forward at TP 1, GPT-Neo's final-norm layer),
       time = overhead + counted bytes / bandwidth + elements * chain bytes / bandwidth; the
       chain bytes are global, the overhead per device.
    2. TP all-reduce: the embedding forward at TP t minus the same microbatch at TP 1 is one
       vocab-parallel all-reduce of the hidden states (the gather is the same bytes either
       way); `_fit_tp` turns those into a per-step latency and a link efficiency per degree.
    3. compute curve per pass: over blocks and OPT heads at every TP degree, on the measured
       time minus the modelled TP all-reduces (2 per block pass); grid search over (x0,
       width); log e_max is the median log residual; the grid point minimises the mean over
       models of the median |log error| of their blocks (so neither model is given up).
       The head points keep their whole time (as before this fit had the loss chain): they
       only anchor the curve at large W and no group's error is measured on them.
    4. the cross-entropy chain bytes per logit (`_fit_logit_bytes`), per pass: what the
       OPT-350 output layers leave once the rest is modelled.
    5. update_bandwidth_efficiency: median of (params * adam bytes / bandwidth) / measured
       over the step the profiler ran (embedding + one block + output layers,
       `step_indices`): Sailor's update column is that one step, repeated on every layer.
    """
    models = sailor_models()
    per_device: dict[str, dict[str, list[tuple[float, float, float, str]]]] = {}
    heads: list[tuple[str, list[LayerWork], int, str, float]] = []
    tp_samples: dict[str, list[tuple[int, float, float]]] = {}
    profiles = [
        (m, g, p) for m, g, p in load_profiles(data) if models[m].fit and g not in HELD_OUT_GPUS
    ]
    for model, gpu, profile in profiles:
        spec = models[model]
        device = _device(gpu)
        for mbs, tp in profile.points():
            base = profile.lookup(mbs, 1, 0)
            here = profile.lookup(mbs, tp, 0)
            if tp > 1 and base is not None and here is not None:
                emb = _works(spec, 0, mbs, tp)[0].forward
                tp_samples.setdefault(gpu, []).append((tp, emb.all_reduce_bytes, here[0] - base[0]))
    tp_fit = {
        gpu: _fit_tp(samples, _device(gpu).intra_node_bandwidth / 2.0)
        for gpu, samples in tp_samples.items()
    }
    for model, gpu, profile in profiles:
        spec = models[model]
        device = _device(gpu)
        latency, effs = tp_fit[gpu]
        comm = DeviceEfficiency(
            forward=_FLAT,
            backward=_FLAT,
            tp_step_latency_s=latency,
            tp_bandwidth_efficiency=effs,
        )
        bucket = per_device.setdefault(
            gpu, {k: [] for k in ("ov_forward", "ov_backward", "forward", "backward", "update")}
        )
        for mbs, tp in profile.points():
            for index, kinds in enumerate(spec.layout):
                measured = profile.lookup(mbs, tp, index)
                assert measured is not None
                works = _works(spec, index, mbs, tp)
                for p, which in enumerate(("forward", "backward")):
                    passes = [getattr(w, which) for w in works]
                    flops = sum(w.flops for w in passes)
                    nbytes = sum(w.bytes for w in passes)
                    memory = nbytes / device.memory_bandwidth
                    small = kinds == ("norm",) or (
                        kinds == ("embedding",) and tp == 1 and which == "forward"
                    )
                    if small:
                        chain = passes[0].chain_elements / device.memory_bandwidth
                        tag = f"{kinds[0]}|{model}"
                        bucket[f"ov_{which}"].append(
                            (measured[p] - memory, chain, measured[p], tag)
                        )
                    if "head" in kinds:
                        heads.append((gpu, works, tp, which, measured[p]))
                    if flops > 0:
                        tp_s = sum(tp_time(w, device, comm, tp) for w in passes)
                        compute = max(measured[p] - tp_s, 0.2 * measured[p])
                        per_byte = sum(w.scores for w in passes) / device.memory_bandwidth
                        block = model if "block" in kinds else ""
                        bucket[which].append((flops, compute, per_byte, block))
            step = profile.lookup(mbs, tp, 0)
            assert step is not None
            if step[2] > 0:
                params = sum(
                    w.parameters for i in step_indices(spec) for w in _works(spec, i, mbs, tp)
                )
                ideal = params * adam_bytes_per_parameter() / device.memory_bandwidth
                bucket["update"].append((ideal / step[2], 0.0, 0.0, ""))
    chain_bytes, overheads = _fit_memory_chains(per_device)
    # Devices with no backward-overhead sample take the median of the others.
    known = list(overheads["backward"].values())
    for gpu in per_device:
        overheads["backward"].setdefault(gpu, float(np.median(known)))
    score_bytes = {w: _fit_score_bytes(per_device, w) for w in ("forward", "backward")}
    fitted = _device_entries(per_device, score_bytes, overheads, tp_fit, tp_samples)
    chain_bytes["logits"] = _fit_logit_bytes(heads, fitted, chain_bytes)
    default: dict[str, object] = {}
    for which in ("forward", "backward"):
        default[which] = {
            k: float(np.median([e[which][k] for e in fitted.values()]))  # type: ignore[index]
            for k in ("e_max", "x0", "width")
        }
    default["overhead_s"] = {
        w: float(np.median([e["overhead_s"][w] for e in fitted.values()]))  # type: ignore[index]
        for w in ("forward", "backward")
    }
    measured_upd = [
        u
        for e in fitted.values()
        if not math.isnan(u := float(e["update_bandwidth_efficiency"]))  # type: ignore[arg-type]
    ]
    default["update_bandwidth_efficiency"] = float(np.median(measured_upd))
    for e in fitted.values():  # devices whose profiles record no update take the median
        if math.isnan(float(e["update_bandwidth_efficiency"])):  # type: ignore[arg-type]
            e["update_bandwidth_efficiency"] = default["update_bandwidth_efficiency"]
    default["score_bytes"] = score_bytes
    for e in (*fitted.values(), default):
        e["chain_bytes"] = chain_bytes
    default["tp_step_latency_s"] = float(np.median([lat for lat, _ in tp_fit.values()]))
    degrees = sorted({t for _, effs in tp_fit.values() for t in effs})
    default["tp_bandwidth_efficiency"] = {
        str(t): round(float(np.median([effs[t] for _, effs in tp_fit.values() if t in effs])), 5)
        for t in degrees
    }
    return {
        "_about": (
            "Fitted numbers of hetc's no-profile compute model (hetc/costmodel/compute.py; "
            "docs/costmodel-compute.md). eff(W) = e_max / (1 + 2 ** ((x0 - log2 W) / width)), "
            "W = FLOPs of one layer pass on one device; time = [overhead_s[pass], only on "
            "layers with no matmul] + max(W / (peak_fp16 * eff(W)), bytes / memory_bandwidth) "
            "+ scores * score_bytes[pass] / memory_bandwidth + chain elements * "
            "chain_bytes[chain][pass] / memory_bandwidth (unfused elementwise chains beyond the "
            "counted bytes: logits = the head's fp32 cross-entropy, per logit; norm = the final "
            "norm and embedding = gather + position add + dropout, per token x hidden element) "
            "+ TP all-reduces (ring over the intra-node link at tp_bandwidth_efficiency[tp] of "
            "it, tp_step_latency_s per ring step; the loss's 3 small ones at the link's own "
            "latency); optimizer update = parameters * "
            "adam_bytes_per_parameter / (memory_bandwidth * update_bandwidth_efficiency). "
            "Fitted by `python bench/costmodel.py --fit` on Sailor's measured layer profiles of "
            "OPT-350 and GPT-Neo-2.7 only (fp16 mixed precision, seq len 2048), never on GH200 "
            "(held out: bench/plan_quality.py checks the model there; GPT-Neo-2.7/GH-96 also "
            "duplicates OPT-350/GH-96). `default` (median of the per-device fits) serves device "
            "types never fitted, GH200 among them; `cpu_default` (written by hand, kept by the "
            "fit) kind: cpu processes. Override per device with ComputeModel(efficiency=...)."
        ),
        "form": "logistic in log2(per-device FLOPs of the pass)",
        "precision": "fp16",
        "seq_len": 2048,
        "adam_bytes_per_parameter": 28,
        "_adam_bytes": (
            "fp16 grad read 2 + fp32 master, m, v read and written 3 x 8 + fp16 weight write 2"
        ),
        "default": default,
        "cpu_default": json.loads(EFFICIENCY_JSON.read_text(encoding="utf-8"))["cpu_default"],
        "devices": dict(sorted(fitted.items())),
    }


def _device_entries(
    per_device: dict[str, dict[str, list[tuple[float, float, float, str]]]],
    score_bytes: dict[str, float],
    overheads: dict[str, dict[str, float]],
    tp_fit: dict[str, tuple[float, dict[int, float]]],
    tp_samples: dict[str, list[tuple[int, float, float]]],
) -> dict[str, dict[str, object]]:
    """Every device's efficiency.json entry from its buckets and the global numbers."""
    fitted: dict[str, dict[str, object]] = {}
    for gpu, bucket in per_device.items():
        device = _device(gpu)
        peak = device.peak_flops["fp16"]
        overhead = {w: overheads[w][gpu] for w in ("forward", "backward")}
        entry: dict[str, object] = {}
        for which in ("forward", "backward"):
            pts = np.array([x[:3] for x in bucket[which]])
            target = _less_softmax(pts, score_bytes[which])
            groups = np.array([x[3] for x in bucket[which]])
            entry[which] = _fit_curve(pts[:, 0], target, peak, groups)
        entry["overhead_s"] = overhead
        entry["score_bytes"] = score_bytes
        updates = [x[0] for x in bucket["update"]]
        entry["update_bandwidth_efficiency"] = float(np.median(updates)) if updates else math.nan
        latency, effs = tp_fit[gpu]
        entry["tp_step_latency_s"] = latency
        entry["tp_bandwidth_efficiency"] = {str(t): e for t, e in sorted(effs.items())}
        entry["points"] = {
            **{w: len(bucket[w]) for w in ("forward", "backward", "update")},
            "tp": len(tp_samples[gpu]),
        }
        fitted[DEVICES[gpu]] = entry
    return fitted


CHAIN_GRID = np.arange(0.0, 161.0, 2.0)
"""Candidate effective bytes per element of an unfused memory chain (2 B steps)."""


def _fit_memory_chains(
    per_device: dict[str, dict[str, list[tuple[float, float, float, str]]]],
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Bytes per element of the embedding and final-norm chains (global) and every device's
    `overhead_s` (its intercept), jointly, on the layers with no matmul.

    Samples: (measured - counted bytes / bandwidth, chain elements / bandwidth, measured, tag).
    For each grid pair (embedding B, norm B) every device's overhead is the median of what
    its samples leave; the pair chosen gives the smallest mean over (layer kind, model,
    device) of the median relative error. Backward has only norm samples (the embedding's
    backward is a hook, see the docs)."""
    chains: dict[str, dict[str, float]] = {"embedding": {}, "norm": {}}
    overheads: dict[str, dict[str, float]] = {}
    for which in ("forward", "backward"):
        key = f"ov_{which}"
        groups = {
            gpu: (
                np.array([x[0] for x in b[key]]),
                np.array([x[1] for x in b[key]]),
                np.array([x[2] for x in b[key]]),
                np.array([x[3] for x in b[key]]),
            )
            for gpu, b in per_device.items()
            if b[key]
        }
        grid_emb = CHAIN_GRID if which == "forward" else np.array([0.0])
        masks = [
            (
                rest,
                elems,
                measured,
                np.char.startswith(tags, "embedding"),
                [tags == t for t in sorted(set(tags))],
            )
            for rest, elems, measured, tags in groups.values()
        ]
        best = (math.inf, 0.0, 0.0)
        for b_emb in grid_emb:
            for b_norm in CHAIN_GRID:
                medians = []
                for rest, elems, measured, is_emb, by_tag in masks:
                    chain = elems * np.where(is_emb, b_emb, b_norm)
                    overhead = max(0.0, float(np.median(rest - chain)))
                    rel = np.abs(overhead + chain - rest) / measured
                    medians += [float(np.median(rel[m])) for m in by_tag]
                score = float(np.mean(medians))
                if score < best[0]:
                    best = (score, float(b_emb), float(b_norm))
        _, b_emb, b_norm = best
        if which == "forward":
            chains["embedding"][which] = b_emb
        chains["norm"][which] = b_norm
        overheads[which] = {}
        for gpu, (rest, elems, _, tags) in groups.items():
            is_emb = np.char.startswith(tags, "embedding")
            chain = elems * np.where(is_emb, b_emb, b_norm)
            overheads[which][gpu] = max(0.0, float(np.median(rest - chain)))
    return chains, overheads


def _fit_logit_bytes(
    heads: list[tuple[str, list[LayerWork], int, str, float]],
    fitted: dict[str, dict[str, object]],
    chains: dict[str, dict[str, float]],
) -> dict[str, float]:
    """Bytes per logit of the cross-entropy chain, per pass, shared by every device: what the
    OPT-350 output layers (final norm + logits GEMM + loss) leave once everything else is
    modelled (GEMMs on the fitted curves, counted bytes, norm chain, TP all-reduces), per
    logit, at full bandwidth; the median over devices of each device's median."""
    per: dict[str, dict[str, list[float]]] = {"forward": {}, "backward": {}}
    for gpu, works, tp, which, measured in heads:
        device = _device(gpu)
        eff = efficiency_from_mapping({**fitted[DEVICES[gpu]], "chain_bytes": chains})
        modelled = sum(
            pass_time(getattr(w, which), device, eff, which, "fp16", tp)  # type: ignore[arg-type]
            for w in works
        )
        logits = sum(getattr(w, which).chain_elements for w in works if w.forward.chain == "logits")
        implied = (measured - modelled) * device.memory_bandwidth / logits
        per[which].setdefault(gpu, []).append(implied)
    return {
        w: round(float(np.median([np.median(v) for v in per[w].values()])), 1)
        for w in ("forward", "backward")
    }


def _less_softmax(pts: np.ndarray, per_score: float) -> np.ndarray:
    """Compute time left for the GEMM curve once the softmax-chain traffic is taken off
    (floored at 5% of the measured time: a curve cannot fit a negative time)."""
    return np.maximum(pts[:, 1] - per_score * pts[:, 2], 0.05 * pts[:, 1])


def _fit_score_bytes(
    per_device: dict[str, dict[str, list[tuple[float, float, float, str]]]], which: str
) -> float:
    """One global bytes-per-attention-score for `which` pass, shared by every device: the
    value whose per-device curve refits give the smallest mean, over (device, model), of
    the median block error (the mean, so that no one group is given up). A grid of 4-byte
    steps; the curves are refitted at each."""
    best = (math.inf, 0.0)
    for per_score in np.arange(0.0, 129.0, 4.0):
        medians = []
        for gpu, bucket in per_device.items():
            peak = _device(gpu).peak_flops["fp16"]
            pts = np.array([x[:3] for x in bucket[which]])
            target = _less_softmax(pts, per_score)
            groups = np.array([x[3] for x in bucket[which]])
            c = _fit_curve(pts[:, 0], target, peak, groups)
            curve = EfficiencyCurve(e_max=c["e_max"], x0=c["x0"], width=c["width"])
            pred = np.array([f / (peak * curve(f)) for f in pts[:, 0]]) + per_score * pts[:, 2]
            rel = np.abs(pred - pts[:, 1]) / pts[:, 1]
            medians += [float(np.median(rel[groups == g])) for g in set(groups) - {""}]
        score = float(np.mean(medians))
        if score < best[0]:
            best = (score, float(per_score))
    return best[1]


def _fit_curve(
    flops: np.ndarray, target: np.ndarray, peak: float, groups: np.ndarray | None = None
) -> dict[str, float]:
    """Grid-search x0 and width; e_max closed form (median log residual, capped at
    `E_MAX_CAP`). Minimises the median |log error| (with `groups`: the mean over the named
    groups of each one's median, so that no model is given up); ties go to the first."""
    x = np.log2(flops)
    base = np.log(flops / (peak * target))  # log of eff needed = log e_max - log(1 + 2^z)
    x0s = np.arange(20.0, 46.0, 0.25)
    widths = np.arange(0.25, 8.01, 0.25)
    z = (x0s[:, None, None] - x[None, None, :]) / widths[None, :, None]
    residual = base[None, None, :] + np.logaddexp(0.0, z * math.log(2.0))  # + log(1 + 2^z)
    log_e = np.minimum(math.log(E_MAX_CAP), np.median(residual, axis=2))
    dev = np.abs(residual - log_e[:, :, None])
    if groups is None or len(set(groups) - {""}) < 2:
        err = np.median(dev, axis=2)
    else:
        err = np.mean(
            [np.median(dev[:, :, groups == g], axis=2) for g in sorted(set(groups) - {""})],
            axis=0,
        )
    i, j = np.unravel_index(int(np.argmin(err)), err.shape)
    return {
        "e_max": round(float(np.exp(log_e[i, j])), 5),
        "x0": float(x0s[i]),
        "width": float(widths[j]),
    }


def errors(data: Path) -> list[tuple[str, str, str, str, float, float, int]]:
    """(model, gpu, column, kind, median, p90, n) of |estimate - measured| / measured."""
    models = sailor_models()
    rows = []
    for model, gpu, profile in load_profiles(data):
        spec = models[model]
        cm = ComputeModel(arch=spec.arch, device=_device(gpu), layout=spec.layout)
        rel: dict[tuple[str, str], list[float]] = {}
        for mbs, tp in profile.points():
            for index, kinds in enumerate(spec.layout):
                measured = profile.lookup(mbs, tp, index)
                assert measured is not None
                est = cm.layer_times(index, mbs, tp)
                kind = report_kind(kinds)
                for col, m, e in zip(
                    ("forward", "backward"), measured[:2], (est.forward, est.backward), strict=True
                ):
                    if m > 0:
                        rel.setdefault((col, kind), []).append(abs(e - m) / m)
            # The update column is one optimizer step of the profiled model (embedding, one
            # block, output layers), repeated on every index: compare that step, once.
            step = profile.lookup(mbs, tp, 0)
            assert step is not None
            if step[2] > 0:
                e = sum(cm.layer_times(i, mbs, tp).update for i in step_indices(spec))
                rel.setdefault(("update", "step"), []).append(abs(e - step[2]) / step[2])
        for (col, kind), values in sorted(rel.items()):
            arr = np.array(values)
            rows.append(
                (
                    model,
                    gpu,
                    col,
                    kind,
                    float(np.median(arr)),
                    float(np.percentile(arr, 90)),
                    len(arr),
                )
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="refit and rewrite efficiency.json")
    parser.add_argument(
        "--data", type=Path, default=Path(os.environ.get("HETC_SAILOR_DATA", DEFAULT_DATA))
    )
    parser.add_argument("--no-speed", action="store_true", help="skip the speed benchmark")
    args = parser.parse_args()
    if args.fit:
        table = fit(args.data)
        EFFICIENCY_JSON.write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {EFFICIENCY_JSON.relative_to(ROOT)}")
        from hetc.costmodel.compute import efficiency_table

        efficiency_table.cache_clear()
    rows = errors(args.data)
    print("abs relative error of the no-profile estimate vs Sailor's measurements (fp16, seq 2048)")
    print(
        f"{'model':12} {'set':5} {'gpu':10} {'column':9} {'kind':10} {'median':>7} "
        f"{'p90':>7} {'n':>4}"
    )
    models = sailor_models()
    for model, gpu, col, kind, med, p90, n in rows:
        tag = "fit" if models[model].fit and gpu not in HELD_OUT_GPUS else "held"
        print(f"{model:12} {tag:5} {gpu:10} {col:9} {kind:10} {med:7.1%} {p90:7.1%} {n:4d}")
    print()
    print("summary: median over all points of a (set, column, kind)")
    for tag in ("fit", "held"):
        for col in ("forward", "backward", "update"):
            for kind in ("embedding", "block", "head", "step"):
                meds = [
                    r[4]
                    for r in rows
                    if r[2] == col
                    and r[3] == kind
                    and ((models[r[0]].fit and r[1] not in HELD_OUT_GPUS) == (tag == "fit"))
                ]
                if meds:
                    print(
                        f"  {tag:5} {col:9} {kind:10} median of per-device medians "
                        f"{float(np.median(meds)):7.1%}"
                    )
    for name, why in EXCLUDED.items():
        print(f"excluded {'/'.join(name)}: {why}")
    if not args.no_speed:
        print("\ncandidate-stage evaluations per second (bench/costmodel_speed.py):")
        subprocess.run(
            [sys.executable, str(Path(__file__).with_name("costmodel_speed.py"))], check=True
        )


if __name__ == "__main__":
    main()
