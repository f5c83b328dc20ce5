"""Per-layer compute model: FLOP counts, roofline, profile reuse, the fitted curve."""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from workspace import SAILOR_DATA

from hetc.catalog import ModelArchitecture, find_device
from hetc.costmodel.compute import (
    ComputeModel,
    DeviceEfficiency,
    EfficiencyCurve,
    adam_bytes_per_parameter,
    device_efficiency,
    efficiency_table,
    launch_bound_time,
    layer_work,
    pass_time,
    update_time,
)
from hetc.costmodel.profile import LayerProfile, ProfileError, parse_profile, read_profile

ROOT = Path(__file__).resolve().parent.parent
DATA = SAILOR_DATA
TINY = ModelArchitecture(layers=2, hidden=8, heads=2, ffn=32, vocab=100)


def _device(name: str):  # type: ignore[no-untyped-def]
    device = find_device(name)
    assert device is not None
    return device


def test_tiny_block_flops_by_hand() -> None:
    """Tiny block (h=8, a=2, d=4, f=32, s=4, m=1): 4*2*4*8*8 + 2*2*2*4*4*4 + 2*2*4*8*32 FLOPs."""
    work = layer_work(TINY, "block", seq_len=4, microbatch=1)
    qkv = 2 * 4 * 8 * 24  # 2 * tokens * h * (a*d + 2*kv*d) = 1536
    attention = 2 * (2 * 1 * 2 * 4 * 4 * 4)  # scores and weighted values: 512
    out = 2 * 4 * 8 * 8  # 512
    mlp = 2 * (2 * 4 * 8 * 32)  # two matrices: 4096
    assert work.forward.flops == qkv + attention + out + mlp == 6656
    assert work.backward.flops == 2 * 6656


def test_tiny_head_and_embedding_flops_by_hand() -> None:
    """Tiny head: logits 2*4*8*100 = 6400 FLOPs; the embedding is a gather (no FLOPs)."""
    assert layer_work(TINY, "head", seq_len=4, microbatch=1).forward.flops == 6400
    assert layer_work(TINY, "embedding", seq_len=4, microbatch=1).forward.flops == 0


def test_gpt_neo_block_flops_by_hand() -> None:
    """GPT-Neo-2.7B block 0 (global) and 1 (local, window 256), s=2048, m=1, written out."""
    neo = ModelArchitecture(
        layers=32,
        hidden=2560,
        heads=20,
        ffn=10240,
        vocab=50257,
        local_attention_window=256,
        attention_pattern=("global", "local"),
    )
    t, h, f, a, d = 2048, 2560, 10240, 20, 128
    dense = 2 * t * h * 3 * h + 2 * t * h * h + 2 * 2 * t * h * f  # 24*t*h^2 = 322,122,547,200
    assert dense == 322_122_547_200
    global_attn = 2 * 2 * a * t * t * d  # 4*s^2*h = 42,949,672,960
    local_attn = 2 * 2 * a * t * 256 * d  # 5,368,709,120
    g = layer_work(neo, "block", seq_len=2048, microbatch=1, block=0)
    loc = layer_work(neo, "block", seq_len=2048, microbatch=1, block=1)
    assert g.forward.flops == dense + global_attn == 365_072_220_160
    assert loc.forward.flops == dense + local_attn == 327_491_256_320


def test_gqa_and_swiglu_counted_exactly() -> None:
    """GQA shrinks K,V projections to kv_heads*d; swiglu has three h x f matrices."""
    arch = ModelArchitecture(
        layers=1, hidden=64, heads=8, kv_heads=2, ffn=96, vocab=10, mlp="swiglu"
    )
    t = 16
    expected = 2 * t * 64 * (64 + 2 * 16) + 2 * 2 * 8 * t * t * 8 + 2 * t * 64 * 64
    expected += 3 * 2 * t * 64 * 96
    assert layer_work(arch, "block", seq_len=16, microbatch=1).forward.flops == expected


def test_tp_halves_sharded_flops() -> None:
    """TP 2 halves every sharded matmul of a block and of the vocab-parallel logits."""
    for kind in ("block", "head"):
        one = layer_work(TINY, kind, seq_len=64, microbatch=2, tp=1).forward.flops
        two = layer_work(TINY, kind, seq_len=64, microbatch=2, tp=2).forward.flops
        assert two == pytest.approx(one / 2)


def test_roofline_update_is_bandwidth_bound() -> None:
    """The Adam step costs params * bytes / (bandwidth * eff), independent of peak FLOP/s."""
    a100 = _device("A100-40GB")
    eff = device_efficiency("A100-40GB")
    t = update_time(1e9, a100, eff)
    expected = (
        1e9 * adam_bytes_per_parameter() / (a100.memory_bandwidth * eff.update_bandwidth_efficiency)
    )
    assert t == pytest.approx(expected)


def test_roofline_switches_to_bandwidth_for_memory_bound_work() -> None:
    """With few FLOPs and many bytes the pass time is bytes / bandwidth, not FLOP time."""
    from hetc.costmodel.compute import PassWork

    a100 = _device("A100-40GB")
    flat = EfficiencyCurve(e_max=1.0, x0=0.0, width=1.0)
    eff = DeviceEfficiency(forward=flat, backward=flat)
    heavy = PassWork(flops=1e6, bytes=1e10)
    assert pass_time(heavy, a100, eff, "forward", "fp16") == pytest.approx(
        1e10 / a100.memory_bandwidth
    )
    light = PassWork(flops=1e15, bytes=1.0)
    assert pass_time(light, a100, eff, "forward", "fp16") == pytest.approx(1e15 / 312e12, rel=1e-3)


def test_activation_checkpointing_adds_one_forward() -> None:
    """Checkpointing makes backward = backward + forward."""
    a100 = _device("A100-40GB")
    plain = ComputeModel(arch=TINY, device=a100, seq_len=64)
    ckpt = ComputeModel(arch=TINY, device=a100, seq_len=64, activation_checkpointing=True)
    p, c = plain.layer_times(1, 2), ckpt.layer_times(1, 2)
    assert c.backward == pytest.approx(p.backward + p.forward)


def _profile() -> LayerProfile:
    raw = {
        "2": {
            "1": {
                "0": [0.001, 0.000003, 0.002],
                "1": [0.0123, 0.0456, 0.0021],
                "2": [0.0124, 0.0457, 0.0021],
                "3": [0.003, 0.004, 0.0021],
            }
        }
    }
    return parse_profile(raw, model="tiny", device="A100-40GB")


def test_exact_profile_reuse() -> None:
    """Measured (mbs, tp) points come back exactly; unmeasured ones fall back to the formula."""
    profile = _profile()
    cm = ComputeModel(arch=TINY, device=_device("A100-40GB"), profile=profile)
    for index in range(4):
        got = cm.layer_times(index, 2, 1)
        assert (got.forward, got.backward, got.update) == profile.lookup(2, 1, index)
    assert cm.layer_times(1, 4, 1) == cm.without_profile().layer_times(1, 4, 1)


def test_hetc_profile_round_trip(tmp_path: Path) -> None:
    """hetc's own profile format writes and reads back the same table and metadata."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_profile().to_json()), encoding="utf-8")
    again = read_profile(path)
    assert again.times == _profile().times
    assert (again.model, again.device, again.precision, again.seq_len) == (
        "tiny",
        "A100-40GB",
        "fp16",
        2048,
    )


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", "not valid JSON"),
        ('{"x": {"1": {"0": [1, 2, 3]}}}', "not a positive integer"),
        ('{"1": {"1": {"0": [1, 2]}}}', r"\[forward_s, backward_s, update_s\]"),
        ('{"1": {"1": {"0": [1, -2, 3]}}}', "non-negative"),
        ('{"1": {"1": {"0": [1, 2, 3]}, "2": {"1": [1, 2, 3]}}}', "differ from"),
        (
            '{"format": "hetc-layer-profile", "version": 1, "model": "m", "device": "d",'
            ' "precision": "fp16", "seq_len": 2048, "units": "ms", "times": {}}',
            "units",
        ),
    ],
)
def test_profile_reader_errors(tmp_path: Path, text: str, match: str) -> None:
    """Malformed profile files raise ProfileError naming the file and what is wrong."""
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ProfileError, match=match):
        read_profile(path, model="m", device="d")


def test_sailor_profile_needs_model_and_device() -> None:
    """A Sailor profile does not say what it measured, so the caller must."""
    with pytest.raises(ProfileError, match="pass model= and device="):
        parse_profile({"1": {"1": {"0": [1, 2, 3]}}})


def test_fitted_curves_are_monotone() -> None:
    """Every bundled efficiency curve is non-decreasing in work and stays within (0, 1]."""
    table = efficiency_table()
    entries = {"default": table["default"], **table["devices"]}  # type: ignore[dict-item]
    work = 2.0 ** np.arange(10, 50, 0.25)
    for name in entries:
        eff = device_efficiency(name) if name != "default" else device_efficiency("no-such")
        for curve in (eff.forward, eff.backward):
            values = np.array([curve(w) for w in work])
            assert np.all(np.diff(values) >= 0), name
            assert np.all((values > 0) & (values <= 1)), name


def _bench():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_costmodel", ROOT / "bench/costmodel.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_costmodel"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(
    not (DATA / "layer-profiles").is_dir(),
    reason="Sailor measurements not present (set HETC_SAILOR_DATA)",
)
def test_fit_set_block_accuracy() -> None:
    """Regression guard on the fit set: the median over (model, device) of the median block
    forward/backward error is under 6%, and no (model, device) group's median exceeds 15%
    (measured at the last refit: 4.4% / 4.5%, worst group 11.9%)."""
    bench = _bench()
    rows = bench.errors(DATA)
    fit = {name for name, m in bench.sailor_models().items() if m.fit}
    rows = [r for r in rows if r[1] not in bench.HELD_OUT_GPUS]
    for column in ("forward", "backward"):
        medians = [r[4] for r in rows if r[0] in fit and r[2] == column and r[3] == "block"]
        assert medians and float(np.median(medians)) < 0.06, (column, medians)
        assert max(medians) < 0.15, (column, medians)


@pytest.mark.skipif(
    not (DATA / "layer-profiles").is_dir(),
    reason="Sailor measurements not present (set HETC_SAILOR_DATA)",
)
def test_fit_set_head_and_embedding_accuracy() -> None:
    """Regression guard on the fit set's output layers and embedding forward: the median over
    (model, device) of the median error is under 10% for the head forward and backward and
    under 15% for the embedding forward (measured at the last refit: 6.5% / 5.8% / 11.7%)."""
    bench = _bench()
    rows = [r for r in bench.errors(DATA) if r[1] not in bench.HELD_OUT_GPUS]
    fit = {name for name, m in bench.sailor_models().items() if m.fit}
    for column, kind, limit in (
        ("forward", "head", 0.10),
        ("backward", "head", 0.10),
        ("forward", "embedding", 0.15),
    ):
        medians = [r[4] for r in rows if r[0] in fit and r[2] == column and r[3] == kind]
        assert medians and float(np.median(medians)) < limit, (column, kind, medians)


def test_head_backward_has_both_gemms_and_serial_loss_chain() -> None:
    """The head backward holds the logits GEMM's input and weight gradients (2x its forward
    FLOPs); the cross-entropy chain adds chain_bytes per logit at memory speed, after the GEMM
    (not hidden under it), and the loss's small all-reduces are timed at the link's latency."""
    from hetc.costmodel.compute import chain_time

    head = layer_work(TINY, "head", seq_len=4, microbatch=1)
    assert head.backward.flops == 2 * head.forward.flops
    assert head.forward.chain == head.backward.chain == "logits"
    assert head.forward.chain_elements == 4 * TINY.vocab
    a100 = _device("A100-40GB")
    flat = EfficiencyCurve(e_max=1.0, x0=0.0, width=1.0)
    plain = DeviceEfficiency(forward=flat, backward=flat)
    chained = DeviceEfficiency(
        forward=flat, backward=flat, chain_bytes={"logits": {"forward": 50.0, "backward": 25.0}}
    )
    extra = 4 * TINY.vocab * 50.0 / a100.memory_bandwidth
    assert chain_time(head.forward, a100, chained, "forward") == pytest.approx(extra)
    assert pass_time(head.forward, a100, chained, "forward", "fp16") == pytest.approx(
        pass_time(head.forward, a100, plain, "forward", "fp16") + extra
    )
    sharded = layer_work(TINY, "head", seq_len=4, microbatch=1, tp=2)
    assert sharded.forward.all_reduces == 0 and sharded.forward.small_all_reduces == 3
    assert sharded.backward.all_reduces == 1


def test_tp_all_reduces_are_explicit() -> None:
    """A block at TP > 1 carries two all-reduces of its hidden states per pass (Megatron),
    timed by network.tp_all_reduce_time; at TP 1 there are none."""
    from hetc.costmodel.compute import LinkFraction, tp_time
    from hetc.costmodel.network import tp_all_reduce_time

    a100 = _device("A100-40GB")
    eff = device_efficiency("A100-40GB")
    one = layer_work(TINY, "block", seq_len=64, microbatch=2, tp=1)
    assert one.forward.all_reduces == one.backward.all_reduces == 0
    two = layer_work(TINY, "block", seq_len=64, microbatch=2, tp=2)
    assert two.forward.all_reduces == two.backward.all_reduces == 2
    assert two.forward.all_reduce_bytes == 2 * 64 * TINY.hidden * 2
    expected = 2 * tp_all_reduce_time(
        two.forward.all_reduce_bytes,
        2,
        a100,
        latency=eff.tp_step_latency_s,
        curve=LinkFraction(eff.tp_efficiency(2)),
    )
    assert tp_time(two.forward, a100, eff, 2) == pytest.approx(expected)
    assert tp_time(one.forward, a100, eff, 1) == 0.0


def test_tp_efficiency_falls_back_to_nearest_degree_below() -> None:
    """Unfitted TP degrees take the nearest fitted one below (else above); none fitted: 1."""
    flat = EfficiencyCurve(e_max=1.0, x0=0.0, width=1.0)
    eff = DeviceEfficiency(forward=flat, backward=flat, tp_bandwidth_efficiency={2: 0.5, 4: 0.25})
    assert eff.tp_efficiency(4) == 0.25
    assert eff.tp_efficiency(8) == 0.25
    assert eff.tp_efficiency(1) == 0.5
    assert DeviceEfficiency(forward=flat, backward=flat).tp_efficiency(8) == 1.0


def test_launch_bound_time_caps_tiny_gemms_at_the_half_efficiency_time() -> None:
    """Below 2**x0 a pass never takes longer than the half-efficiency work does; above it the
    logistic is untouched; and time never falls as work grows (the property the cap restores
    for curves with width < 1, whose plain logistic explodes for tiny work)."""
    curve = EfficiencyCurve(e_max=0.8, x0=35.5, width=0.5)
    peak = 312e12
    half = 2.0**35.5
    ceiling = half / (peak * 0.4)
    assert launch_bound_time(half, peak, curve) == pytest.approx(ceiling)
    assert launch_bound_time(1e3, peak, curve) == pytest.approx(ceiling)
    assert 1e3 / (peak * curve(1e3)) > 1e6 * ceiling  # what the cap prevents
    big = 2.0**40
    assert launch_bound_time(big, peak, curve) == big / (peak * curve(big))
    times = [launch_bound_time(w, peak, curve) for w in 2.0 ** np.arange(10, 48, 0.25)]
    assert all(b >= a * (1 - 1e-12) for a, b in itertools.pairwise(times))
    assert launch_bound_time(0.0, peak, curve) == 0.0


def test_cpu_devices_run_at_a_flat_fraction_of_peak() -> None:
    """`kind: cpu` devices take the flat cpu_default curve: time is work / (peak x 0.5) for
    any size, so a tiny CPU model costs microseconds, not the GPU curve's launch-bound time."""
    eff = device_efficiency("LOCAL-CPU", kind="cpu")
    for work in (1e3, 1e6, 1e12):
        assert eff.forward(work) == pytest.approx(0.5, rel=1e-6)
    gpu = device_efficiency("LOCAL-CPU")
    assert gpu.forward(1e6) < 1e-3
