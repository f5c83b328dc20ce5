"""Training under heterogeneous plans equals a single-process reference of the same model,
data and seed (losses each step, final weights), and stops being equal when a
synchronisation step is deliberately broken."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from runtime_harness import launch, ranks_in_plan_order, seal
from runtime_training import (
    ADAMW,
    oracle_spec,
    reference_run,
    run_losses,
    saved_weights,
    write_compiled,
)

from hetc.plan import Node, Pipeline, Plan, Replica, Stage
from hetc.runtime.train import learning_rate

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent
STEPS = 5


def _node(k: int) -> Node:
    return Node(id=f"cpu@z/n{k}", zone="z", region="z", pool="cpu", device="CPU", devices=4)


def _replica(k: int, *devices: int) -> Replica:
    return Replica(device="CPU", tp=len(devices), node=f"cpu@z/n{k}", local_ranks=devices)


def _plan(batch: int, stages: list[Stage], shares: list[int], micro: int = 1) -> Plan:
    nodes = sorted({r.node for s in stages for r in s.replicas})
    return Plan(
        spec_hash="0" * 64,
        hetc_version="0.1.0",
        model_blocks=4,
        global_batch_size=batch,
        microbatch_size=micro,
        nodes=tuple(_node(int(n.rsplit("n", 1)[1])) for n in nodes),
        stages=tuple(stages),
        pipelines=tuple(
            Pipeline(replicas=(p,) * len(stages), microbatches=m) for p, m in enumerate(shares)
        ),
    )


MIXED_TP = _plan(  # one stage, a TP-1 and a TP-2 replica, uneven shares 3 and 1
    4, [Stage(first_block=0, end_block=4, replicas=(_replica(0, 0), _replica(1, 0, 1)))], [3, 1]
)
NEIGHBOURS = _plan(  # two stages with uneven blocks, TP 1 then TP 2, tied embeddings
    4,
    [
        Stage(first_block=0, end_block=1, replicas=(_replica(0, 0),)),
        Stage(first_block=1, end_block=4, replicas=(_replica(1, 0, 1),)),
    ],
    [4],
)
PIPELINES = _plan(  # 2 stages x 2 pipelines, shares 5 and 3, tied embeddings
    8,
    [
        Stage(first_block=0, end_block=2, replicas=(_replica(0, 0), _replica(0, 1))),
        Stage(first_block=2, end_block=4, replicas=(_replica(1, 0), _replica(1, 1))),
    ],
    [5, 3],
)


def _train(
    plan: Plan,
    spec_kwargs: dict[str, object],
    tmp: Path,
    mutation: str | None = None,
    *,
    steps: int = STEPS,
    initial_scale_power: int = 16,
):
    spec = oracle_spec(batch=plan.global_batch_size, **spec_kwargs)  # type: ignore[arg-type]
    out, run, weights = tmp / "out", tmp / "run", tmp / "weights"
    out.mkdir()
    topology = write_compiled(plan, spec, out)
    for config in (out / "deepspeed").glob("*.json"):
        text = json.loads(config.read_text())
        if "fp16" in text:
            text["fp16"]["initial_scale_power"] = initial_scale_power
            config.write_text(json.dumps(text))
    seal(out)
    command = [sys.executable, "-m", "hetc.runtime"]
    if mutation is not None:
        command = [sys.executable, str(HERE / "runtime_training.py"), mutation]
    ranks = ranks_in_plan_order(
        topology, command=[*command, "--steps", str(steps), "--save-weights", str(weights)]
    )
    outcomes = launch(ranks, out, run, timeout=120)
    for outcome in outcomes:
        assert outcome.returncode == 0, outcome.stderr[-3000:]
    reference = reference_run(
        spec, steps, plan.microbatch_size, initial_scale_power=initial_scale_power
    )
    return run_losses(run), saved_weights(weights), reference


def _assert_matches(losses, weights, reference, tolerance: float, atol: float = 1e-7) -> None:
    """Losses within `tolerance` relative; weights within it relative or `atol` absolute
    (Adam normalises tiny gradients, so near-zero weights differ by rounding, not by a bug)."""
    ref_losses, ref_weights, _ = reference
    assert losses == pytest.approx(ref_losses, rel=tolerance)
    assert set(weights) == set(ref_weights)
    for name, copies in weights.items():
        for value in copies:
            torch.testing.assert_close(value, ref_weights[name], rtol=tolerance, atol=atol)


def test_mixed_tp_replicas_with_uneven_shares_match_the_reference(tmp_path: Path) -> None:
    losses, weights, reference = _train(MIXED_TP, {}, tmp_path)
    _assert_matches(losses, weights, reference, 1e-5)
    # every rank's metrics: one line per step, time split three ways, memory on steps 0 and 1
    for rank in range(MIXED_TP.world_size):
        path = tmp_path / "run" / "metrics" / f"rank-{rank:05d}.jsonl"
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert [m["step"] for m in lines] == list(range(STEPS))
        for m in lines:
            parts = m["compute_seconds"] + m["communication_seconds"] + m["idle_seconds"]
            assert parts == pytest.approx(m["seconds"], abs=1e-6)
            assert m["samples_per_second"] == pytest.approx(4 / m["seconds"])
            assert m["loss"] == pytest.approx(losses[m["step"]])
            assert m["resident_bytes"] > 0
        assert [m["peak_bytes"] is not None for m in lines] == [True, True, False, False, False]
        assert lines[0]["peak_bytes"] > 0


def test_neighbours_with_different_tp_and_tied_embeddings_match(tmp_path: Path) -> None:
    losses, weights, reference = _train(NEIGHBOURS, {}, tmp_path)
    _assert_matches(losses, weights, reference, 1e-5)
    assert len(weights["embedding.tokens.weight"]) == 2, "first and last stage hold the table"


def test_two_pipelines_uneven_shares_adamw_and_a_binding_clip_match(tmp_path: Path) -> None:
    losses, weights, reference = _train(PIPELINES, {"optimizer": ADAMW, "clip": 0.05}, tmp_path)
    _assert_matches(losses, weights, reference, 1e-3, atol=1e-5)
    ref_losses, _, norms = reference
    assert losses == pytest.approx(ref_losses, rel=1e-6)
    assert min(norms) > 0.05, "the clip binds on every step"


def test_an_odd_boundary_from_tp1_to_tp2_matches_the_reference(tmp_path: Path) -> None:
    """Hidden 65, seq 63: a boundary tensor of 4095 elements crosses from a TP-1 stage into a
    TP-2 one in two chunks, which sender and receiver must cut alike (2048 + 2047 elements
    padded to 2048 + 2048, `hetc.plan.topology.boundary_chunk_elements`); the run matches the
    single-process reference. Before that rule the sender cut 2048 + 2047 and the receiver
    waited for 2047 + 2047: gloo failed the first step with a size mismatch."""
    losses, weights, reference = _train(NEIGHBOURS, {"hidden": 65, "seq": 63}, tmp_path, steps=3)
    _assert_matches(losses, weights, reference, 1e-5)


def test_dropout_and_recomputation_match_a_reference_with_the_same_masks(tmp_path: Path) -> None:
    """Dropout 0.2 with activation checkpointing, two pipelines with uneven shares: masks come
    from (seed, step, sample, layer), so the plan's run drops exactly what one process drops
    (and recomputation draws the same masks again)."""
    losses, weights, reference = _train(PIPELINES, {"dropout": 0.2, "recompute": True}, tmp_path)
    _assert_matches(losses, weights, reference, 1e-5)
    _, plain, _ = reference_run(oracle_spec(batch=8), STEPS, 1)
    moved = max(float((weights[n][0] - plain[n]).abs().max()) for n in plain)
    assert moved > 1e-3, "dropout changes what is learned"


def test_bf16_matches_a_bf16_reference(tmp_path: Path) -> None:
    """bf16 autocast on both sides; the tolerance covers bf16's 8-bit mantissa under other
    reduction orders (TP all-reduces, chunked sums)."""
    losses, weights, reference = _train(MIXED_TP, {"precision": "bf16"}, tmp_path)
    _assert_matches(losses, weights, reference, 2e-2, atol=2e-3)


def test_fp16_overflow_is_agreed_and_skipped_like_the_reference(tmp_path: Path) -> None:
    """Loss scale 2^19: steps 0 and 1 overflow (the first is absorbed by hysteresis, the
    second halves the scale), every rank of both stages skips them, and the run still matches
    an fp16 reference that applies DeepSpeed's rules (torch runs fp16 autocast on CPU). The
    gradients are reduced in fp16 (hetc.runtime.train's REDUCE), so a scaled gradient past
    fp16's range overflows; the reference rounds its gradients to fp16 before its check, the
    same criterion (at 2^20, step 0 already overflows in fp16 though not in fp32)."""
    losses, weights, reference = _train(
        NEIGHBOURS, {"precision": "fp16"}, tmp_path, steps=6, initial_scale_power=19
    )
    assert [n == float("inf") for n in reference[2]] == [True, True, False, False, False, False]
    _assert_matches(losses, weights, reference, 1e-2, atol=1e-3)


@pytest.mark.parametrize(
    ("mutation", "plan"),
    [("tp-grad", NEIGHBOURS), ("unweighted", MIXED_TP), ("untied", NEIGHBOURS)],
)
def test_broken_synchronisation_is_caught(tmp_path: Path, mutation: str, plan: Plan) -> None:
    losses, weights, reference = _train(plan, {}, tmp_path, mutation)
    with pytest.raises(AssertionError):
        _assert_matches(losses, weights, reference, 1e-5)


def test_learning_rate_follows_deepspeeds_formulas() -> None:
    cosine = {
        "type": "WarmupCosineLR",
        "params": {
            "total_num_steps": 10,
            "warmup_num_steps": 4,
            "warmup_min_ratio": 0.0,
            "warmup_type": "linear",
            "cos_min_ratio": 0.1,
        },
    }
    assert learning_rate(cosine, 1.0, 0) == 0.0
    assert learning_rate(cosine, 1.0, 2) == pytest.approx(0.5)
    # after warm-up: (step - 4 + 1) / 6 of the way along the cosine from 1 to 0.1
    assert learning_rate(cosine, 1.0, 4) == pytest.approx(0.1 + 0.9 * (1 + 0.8660254) / 2)
    assert learning_rate(cosine, 1.0, 9) == pytest.approx(0.1)
    warm = {
        "type": "WarmupLR",
        "params": {
            "warmup_min_lr": 0.0,
            "warmup_max_lr": 2.0,
            "warmup_num_steps": 4,
            "warmup_type": "linear",
        },
    }
    assert [learning_rate(warm, 2.0, s) for s in range(6)] == [0.0, 0.5, 1.0, 1.5, 2.0, 2.0]
    assert learning_rate(None, 3.0, 7) == 3.0


def test_loss_scaler_follows_deepspeeds_dynamic_rules() -> None:
    """Hysteresis 2: the first overflow keeps the scale, later ones halve it (not below the
    minimum); `window` clean steps after the last overflow double it."""
    from hetc.runtime.train import LossScaler

    scaler = LossScaler(scale=16.0, window=3, minimum=4.0, hysteresis=2)
    seen = []
    for overflow in [True, True, True, True, False, False, False, False]:
        scaler.update(overflow)
        seen.append(scaler.scale)
    assert seen == [16.0, 8.0, 4.0, 4.0, 4.0, 4.0, 8.0, 8.0]


def test_a_plan_outside_the_capability_matrix_is_refused_on_every_rank(tmp_path: Path) -> None:
    """Mixed TP degrees in a stage with ZeRO 1 (a cell the matrix marks unsupported): every
    rank stops at start-up with the cell's name, before training."""
    spec = oracle_spec(batch=MIXED_TP.global_batch_size)
    out = tmp_path / "out"
    out.mkdir()
    topology = write_compiled(MIXED_TP, spec, out)
    record = json.loads((out / "training.json").read_text())
    record["zero_stage"] = 1
    (out / "training.json").write_text(json.dumps(record))
    seal(out)
    ranks = ranks_in_plan_order(
        topology, command=[sys.executable, "-m", "hetc.runtime", "--steps", "1"]
    )
    for outcome in launch(ranks, out, tmp_path / "run", timeout=60):
        assert outcome.returncode == 1
        assert "mixed-tp-stage/zero-1: not supported" in outcome.stderr
        assert "Traceback" not in outcome.stderr
