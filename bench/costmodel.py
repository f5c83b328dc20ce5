"""Accuracy of hetc's no-profile compute model against Sailor's measured per-layer times.

Prints, per model, device, column (forward, backward, update) and layer kind (embedding,
block, head), the median and p90 absolute relative error |estimate - measured| / measured.
OPT-350 and GPT-Neo-2.7 are the fit set; OPT-30 and LLAMA-3-8 are held out (never used to
fit). `--fit` refits the efficiency curves on the fit set and rewrites
hetc/costmodel/efficiency.json, so the bundled numbers are reproducible.

Usage: python bench/costmodel.py [--fit] [--data DIR]
  DIR defaults to $HETC_SAILOR_DATA or shared/data/sailor-measurements beside the checkout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hetc.catalog import DeviceType, ModelArchitecture, find_device  # noqa: E402
from hetc.costmodel.compute import (  # noqa: E402
    ComputeModel,
    LayerKind,
    adam_bytes_per_parameter,
    layer_work,
)
from hetc.costmodel.profile import LayerProfile, read_profile  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "sailor-measurements"
EFFICIENCY_JSON = ROOT / "hetc" / "costmodel" / "efficiency.json"

DEVICES = {
    "A100-40": "A100-40GB",
    "A100-80": "A100-80GB",
    "GH-96": "GH200",
    "V100-16": "V100-16GB",
    "Titan-RTX": "Titan-RTX",
    "RTX-2080": "RTX-2080",
    "RTX-3090": "RTX-3090",
}
"""Sailor's GPU directory names -> hetc catalog names."""

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


def fit(data: Path) -> dict[str, object]:
    """Fit overheads, curves and update efficiency per device on OPT-350 and GPT-Neo-2.7.

    1. overhead_s[pass]: median of (measured - bytes/bandwidth) over layers with no matmul
       (embedding forward at TP 1, GPT-Neo's final-norm layer); TP > 1 embedding times hold
       an all-reduce, which is communication, not compute.
    2. curve per pass: over blocks and OPT heads at every TP degree (TP > 1 times hold the
       TP all-reduces, which pull the curve down at small per-device work); grid search over
       (x0, width); log e_max is the median log residual (minimises the median |log error|).
    3. update_bandwidth_efficiency: median of (params * adam bytes / bandwidth) / measured
       over the embedding layer (Sailor's update column repeats one number on every layer;
       its size tracks the embedding's parameters, see the docs).
    """
    models = sailor_models()
    per_device: dict[str, dict[str, list[tuple[float, float, float]]]] = {}
    for model, gpu, profile in load_profiles(data):
        spec = models[model]
        if not spec.fit:
            continue
        device = _device(gpu)
        bucket = per_device.setdefault(
            gpu, {k: [] for k in ("ov_forward", "ov_backward", "forward", "backward", "update")}
        )
        for mbs, tp in profile.points():
            for index, kinds in enumerate(spec.layout):
                measured = profile.lookup(mbs, tp, index)
                assert measured is not None
                works = [
                    layer_work(spec.arch, k, seq_len=2048, microbatch=mbs, tp=tp) for k in kinds
                ]
                for p, which in enumerate(("forward", "backward")):
                    flops = sum(getattr(w, which).flops for w in works)
                    nbytes = sum(getattr(w, which).bytes for w in works)
                    memory = nbytes / device.memory_bandwidth
                    small = kinds == ("norm",) or (
                        kinds == ("embedding",) and tp == 1 and which == "forward"
                    )
                    if small:
                        bucket[f"ov_{which}"].append((measured[p] - memory, 0.0, 0.0))
                    if flops > 0:
                        bucket[which].append((flops, measured[p], 0.0))
                if kinds == ("embedding",) and measured[2] > 0:
                    params = sum(w.parameters for w in works)
                    ideal = params * adam_bytes_per_parameter() / device.memory_bandwidth
                    bucket["update"].append((ideal / measured[2], 0.0, 0.0))
    fitted: dict[str, dict[str, object]] = {}
    for gpu, bucket in per_device.items():
        device = _device(gpu)
        peak = device.peak_flops["fp16"]
        overhead = {
            w: max(0.0, float(np.median([x for x, _, _ in bucket[f"ov_{w}"]])))
            if bucket[f"ov_{w}"]
            else math.nan
            for w in ("forward", "backward")
        }
        entry: dict[str, object] = {}
        for which in ("forward", "backward"):
            pts = np.array([(f, t) for f, t, _ in bucket[which]])
            entry[which] = _fit_curve(pts[:, 0], pts[:, 1], peak)
        entry["overhead_s"] = overhead
        updates = [x for x, _, _ in bucket["update"]]
        entry["update_bandwidth_efficiency"] = float(np.median(updates)) if updates else math.nan
        entry["points"] = {w: len(bucket[w]) for w in ("forward", "backward", "update")}
        fitted[DEVICES[gpu]] = entry
    # Devices with no backward-overhead sample take the median of the others.
    known = [
        e["overhead_s"]["backward"]
        for e in fitted.values()  # type: ignore[index]
        if not math.isnan(e["overhead_s"]["backward"])
    ]  # type: ignore[index]
    for e in fitted.values():
        ov = e["overhead_s"]
        assert isinstance(ov, dict)
        if math.isnan(ov["backward"]):
            ov["backward"] = float(np.median(known))
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
    return {
        "_about": (
            "Fitted compute-efficiency numbers of hetc's no-profile compute model "
            "(hetc/costmodel/compute.py). eff(W) = e_max / (1 + 2 ** ((x0 - log2 W) / width)), "
            "W = FLOPs of one layer pass on one device; time = [overhead_s[pass], only on "
            "layers with no matmul] + "
            "max(W / (peak_fp16 * eff(W)), bytes / memory_bandwidth); optimizer update = "
            "parameters * adam_bytes_per_parameter / (memory_bandwidth * "
            "update_bandwidth_efficiency). Fitted by `python bench/costmodel.py --fit` on "
            "Sailor's measured layer profiles of OPT-350 and GPT-Neo-2.7 only (fp16 mixed "
            "precision, seq len 2048; GPT-Neo-2.7/GH-96 excluded: it duplicates OPT-350/GH-96). "
            "`default` (median of the per-device fits) serves device types never measured. "
            "Override per device with ComputeModel(efficiency=...)."
        ),
        "form": "logistic in log2(per-device FLOPs of the pass)",
        "precision": "fp16",
        "seq_len": 2048,
        "adam_bytes_per_parameter": 28,
        "_adam_bytes": (
            "fp16 grad read 2 + fp32 master, m, v read and written 3 x 8 + fp16 weight write 2"
        ),
        "default": default,
        "devices": dict(sorted(fitted.items())),
    }


def _fit_curve(flops: np.ndarray, target: np.ndarray, peak: float) -> dict[str, float]:
    """Grid-search x0 and width; e_max closed form (median log residual). Min median |log|."""
    x = np.log2(flops)
    base = np.log(flops / (peak * target))  # log of eff needed = log e_max - log(1 + 2^z)
    best = (math.inf, 0.0, 0.0, 0.0)
    for x0 in np.arange(20.0, 46.0, 0.25):
        for width in np.arange(0.25, 8.01, 0.25):
            penalty = np.log1p(2.0 ** ((x0 - x) / width))
            log_e = float(np.median(base + penalty))
            if log_e > 0:  # e_max above 1 is not physical
                continue
            err = float(np.median(np.abs(base + penalty - log_e)))
            if err < best[0]:
                best = (err, float(np.exp(log_e)), float(x0), float(width))
    _, e_max, x0, width = best
    return {"e_max": round(e_max, 5), "x0": x0, "width": width}


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
                    ("forward", "backward", "update"),
                    measured,
                    (est.forward, est.backward, est.update),
                    strict=True,
                ):
                    if m > 0:
                        rel.setdefault((col, kind), []).append(abs(e - m) / m)
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
        tag = "fit" if models[model].fit else "held"
        print(f"{model:12} {tag:5} {gpu:10} {col:9} {kind:10} {med:7.1%} {p90:7.1%} {n:4d}")
    print()
    print("summary: median over all points of a (set, column, kind)")
    for tag in ("fit", "held"):
        for col in ("forward", "backward", "update"):
            for kind in ("embedding", "block", "head"):
                meds = [
                    r[4]
                    for r in rows
                    if r[2] == col and r[3] == kind and (models[r[0]].fit == (tag == "fit"))
                ]
                if meds:
                    print(
                        f"  {tag:5} {col:9} {kind:10} median of per-device medians "
                        f"{float(np.median(meds)):7.1%}"
                    )
    for name, why in EXCLUDED.items():
        print(f"excluded {'/'.join(name)}: {why}")


if __name__ == "__main__":
    main()
