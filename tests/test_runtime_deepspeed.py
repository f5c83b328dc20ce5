"""Uniform-TP stages under ZeRO 1 and 2 train through DeepSpeed engines (`hetc.runtime.engine`)
and still equal the single-process reference: uneven shares, the tied embedding across stages,
a global-norm clip, AdamW's partitioned state. Run as a script, this module is one rank of the
runtime with test hooks (comma-separated) applied first:

    python tests/test_runtime_deepspeed.py HOOKS [runtime arguments...]

HOOKS: `probe=DIR` (after training, each rank writes DIR/rank-<r>.json: its optimizer's class
and how many Adam moment elements it holds), `unweighted` (the rank file's loss_weight read as
1: the mutation), `cpu-fp16` (DeepSpeed's CPU accelerator lets fp16 run where oneDNN has no
fp16 kernels, as on this project's CI machines), `overflow-at=STEP` (replica 0 of the last
stage writes an inf into its gradient at STEP), `none`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

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
from test_runtime_train import PIPELINES, _assert_matches

from hetc.plan import Plan

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve()
STEPS = 4


def _train(
    plan: Plan,
    spec_kwargs: dict[str, Any],
    tmp: Path,
    hooks: str = "none",
    *,
    steps: int = STEPS,
    initial_scale_power: int = 16,
) -> tuple[list[float], dict[str, list[torch.Tensor]], Any]:
    spec = oracle_spec(batch=plan.global_batch_size, **spec_kwargs)
    out, run, weights = tmp / "out", tmp / "run", tmp / "weights"
    out.mkdir()
    topology = write_compiled(plan, spec, out)
    for config in (out / "deepspeed").glob("*.json"):
        text = json.loads(config.read_text())
        if "fp16" in text:
            text["fp16"]["initial_scale_power"] = initial_scale_power
            config.write_text(json.dumps(text))
    seal(out)
    command = [sys.executable, str(HERE), hooks, "--steps", str(steps)]
    ranks = ranks_in_plan_order(topology, command=[*command, "--save-weights", str(weights)])
    outcomes = launch(ranks, out, run, timeout=120)
    for outcome in outcomes:
        assert outcome.returncode == 0, outcome.stderr[-3000:]
    reference = reference_run(
        spec, steps, plan.microbatch_size, initial_scale_power=initial_scale_power
    )
    return run_losses(run), saved_weights(weights), reference


@pytest.mark.parametrize("zero", [1, 2])
def test_sgd_with_uneven_shares_and_tied_embeddings_matches(tmp_path: Path, zero: int) -> None:
    """Shares 5 and 3 over two stages whose first and last hold the token table: ZeRO-2
    pads the shorter pipeline with zero-gradient microbatches, ZeRO-1 reduces once."""
    losses, weights, reference = _train(PIPELINES, {"zero": zero}, tmp_path)
    _assert_matches(losses, weights, reference, 1e-5)
    assert len(weights["embedding.tokens.weight"]) == 2, "first and last stage hold the table"


@pytest.mark.parametrize("zero", [1, 2])
def test_adamw_with_a_binding_clip_partitions_state_and_matches(tmp_path: Path, zero: int) -> None:
    probe = tmp_path / "probe"
    losses, weights, reference = _train(
        PIPELINES, {"zero": zero, "optimizer": ADAMW, "clip": 0.05}, tmp_path, f"probe={probe}"
    )
    _assert_matches(losses, weights, reference, 1e-3, atol=1e-5)
    ref_losses, _, norms = reference
    assert losses == pytest.approx(ref_losses, rel=1e-6)
    assert min(norms) > 0.05, "the clip binds on every step"
    for path in sorted(probe.glob("rank-*.json")):
        seen = json.loads(path.read_text())
        assert seen["optimizer"] == "deepspeed.runtime.zero.stage_1_and_2.DeepSpeedZeroOptimizer"
        # two replicas per stage: each rank keeps Adam's moments for about half its stage
        assert 0.45 < seen["moment_elements"] / seen["parameters"] <= 0.55, seen


def test_bf16_matches_a_bf16_reference(tmp_path: Path) -> None:
    """DeepSpeed's bf16 computes with bf16 weights (fp32 masters in the optimizer), the
    reference under autocast with fp32 weights: the tolerance is bf16's, as on hetc's path."""
    losses, weights, reference = _train(PIPELINES, {"zero": 2, "precision": "bf16"}, tmp_path)
    _assert_matches(losses, weights, reference, 2e-2, atol=2e-3)


def test_fp16_overflow_on_one_stage_is_skipped_by_all(tmp_path: Path) -> None:
    """An inf in one last-stage gradient at step 1: every engine of both stages skips that
    step (DeepSpeed alone would skip it on the last stage only) and keeps its loss scale
    (hysteresis 2); the steps before it match the fp16 reference. DeepSpeed computes with fp16
    weights, the reference under autocast: fp16's tolerance."""
    probe = tmp_path / "probe"
    losses, _, reference = _train(
        PIPELINES,
        {"zero": 2, "precision": "fp16"},
        tmp_path,
        f"cpu-fp16,overflow-at=1,probe={probe}",
    )
    assert losses[:2] == pytest.approx(reference[0][:2], rel=1e-5)
    seen = [json.loads(p.read_text()) for p in sorted(probe.glob("rank-*.json"))]
    assert [(s["skipped_steps"], s["loss_scale"]) for s in seen] == [(1, 2.0**16)] * 4


def test_ignoring_the_loss_weight_is_caught(tmp_path: Path) -> None:
    losses, weights, reference = _train(PIPELINES, {"zero": 1}, tmp_path, "unweighted")
    with pytest.raises(AssertionError):
        _assert_matches(losses, weights, reference, 1e-5)


def _probe(directory: Path) -> None:
    from hetc.runtime import train

    original = train.full_weights

    def probing(trainer: Any) -> dict[str, torch.Tensor] | None:
        state = trainer.optimizer.state.values()
        seen = {
            "optimizer": f"{type(trainer.optimizer).__module__}.{type(trainer.optimizer).__name__}",
            "moment_elements": sum(s["exp_avg"].numel() for s in state if "exp_avg" in s),
            "parameters": sum(p.numel() for p in trainer.parameters.values()),
            "skipped_steps": trainer.engine.engine.skipped_steps,
            "loss_scale": float(trainer.optimizer.loss_scale),
        }
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"rank-{trainer.started.plan_rank}.json").write_text(json.dumps(seen))
        return original(trainer)

    train.full_weights = probing


def _unweighted() -> None:
    from hetc.runtime import train

    original = train.StageTrainer.__init__

    def init(self: Any, started: Any, *args: Any, **kwargs: Any) -> None:
        started.rank_file["batch"]["loss_weight"] = 1.0
        original(self, started, *args, **kwargs)

    train.StageTrainer.__init__ = init  # type: ignore[method-assign]


def _overflow_at(step: int) -> None:
    from hetc.runtime import engine

    original = engine.StageEngine._overflowed

    def overflowing(self: Any, fragments: list[torch.Tensor]) -> bool:
        chosen = self.trainer.last and self.trainer.rank_file["replica"] == 0
        if chosen and self.engine.global_steps == step:
            fragments[0].view(-1)[0] = float("inf")
        return bool(original(self, fragments))

    engine.StageEngine._overflowed = overflowing  # type: ignore[method-assign]


def _cpu_fp16() -> None:
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

    CPU_Accelerator.is_fp16_supported = lambda self: True  # type: ignore[method-assign]


if __name__ == "__main__":
    for hook in sys.argv[1].split(","):
        name, _, value = hook.partition("=")
        if name == "probe":
            _probe(Path(value))
        elif name == "unweighted":
            _unweighted()
        elif name == "overflow-at":
            _overflow_at(int(value))
        elif name == "cpu-fp16":
            _cpu_fp16()
        elif name != "none":
            raise SystemExit(f"unknown hook {hook}")
    from hetc.runtime.__main__ import main

    sys.exit(main(sys.argv[2:]))
