"""A checkpoint written under one plan resumes under another (other stages, data-parallel
width and TP degrees, hetc's own path or ZeRO 1/2 engines) to exactly the run that was never
interrupted; a damaged checkpoint stops every rank with one message, and an interrupted write
never becomes `latest`. Run as a script, this module is one rank of the runtime with a
deliberate bug, the mutation check of resuming into engines:

    python tests/test_runtime_checkpoint.py fresh-engine-state [runtime arguments...]

(each DeepSpeed engine loads the weights but leaves its optimizer state fresh).
"""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import signal
import sys
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from runtime_harness import Outcome, launch, ranks_in_plan_order, seal
from runtime_training import (
    ADAMW,
    oracle_spec,
    reference_run,
    run_losses,
    saved_weights,
    write_compiled,
)
from test_runtime_train import MIXED_TP, NEIGHBOURS, _assert_matches, _plan, _replica

from hetc.plan import Plan, Stage
from hetc.runtime.checkpoint import Checkpointer
from hetc.runtime.signals import Signals
from hetc.runtime.startup import CHECKPOINT_REQUEST
from hetc.schema.spec import Spec

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent
ADAMW_SPEC = {"optimizer": ADAMW, "clip": 0.05}
"""AdamW with a binding clip, as in test_runtime_train: without it Adam blows the rounding noise
of gradients that are zero in exact arithmetic (key biases) up to the learning rate, under any
plan, interrupted or not."""
STEPS, SAVED = 5, 2
"""The uninterrupted run's steps; the steps trained before the checkpoint."""
TWO_STAGES = _plan(  # two processes, each a whole stage: rank 1 never reads block 0's files
    4,
    [
        Stage(first_block=0, end_block=1, replicas=(_replica(0, 0),)),
        Stage(first_block=1, end_block=4, replicas=(_replica(1, 0),)),
    ],
    [4],
)


def _run(
    plan: Plan,
    spec: Spec,
    where: Path,
    *arguments: str,
    every: int | None = None,
    request: bool = False,
    mutation: str | None = None,
    hook: str | None = None,
    deepspeed: dict[str, object] | None = None,
) -> tuple[list[Outcome], Path]:
    """Train under `plan` with outputs in `where`, with a `mutation` of runtime_training.py or a
    `hook` of this module; returns each rank's outcome and the run directory (checkpoints go to
    its `checkpoints/`)."""
    out, run = where / "out", where / "run"
    out.mkdir(parents=True)
    run.mkdir()
    topology = write_compiled(plan, spec, out)
    if every is not None:
        training = json.loads((out / "training.json").read_text())
        training["run"]["checkpoint_every"] = every
        (out / "training.json").write_text(json.dumps(training))
    if deepspeed is not None:
        for config in (out / "deepspeed").glob("*.json"):
            record = json.loads(config.read_text())
            record["fp16"].update(deepspeed)
            config.write_text(json.dumps(record))
    seal(out)
    if request:
        (run / CHECKPOINT_REQUEST).write_text("")
    command = [sys.executable, "-m", "hetc.runtime"]
    if mutation is not None:
        command = [sys.executable, str(HERE / "runtime_training.py"), mutation]
    if hook is not None:
        command = [sys.executable, str(HERE / "test_runtime_checkpoint.py"), hook]
    ranks = ranks_in_plan_order(topology, command=[*command, *arguments])
    return launch(ranks, out, run, timeout=60), run


def _succeeded(outcomes: list[Outcome]) -> None:
    for outcome in outcomes:
        assert outcome.returncode == 0, outcome.stderr[-3000:]


def _failure(outcomes: list[Outcome]) -> str:
    """The one checkpoint error every rank stopped with (each line names its rank first)."""
    lines = set()
    for outcome in outcomes:
        assert outcome.returncode == 1, outcome.stderr[-3000:]
        failed = [line for line in outcome.hetc_lines if "checkpoint failed" in line]
        assert len(failed) == 1, outcome.stderr[-3000:]
        assert "Traceback" not in outcome.stderr
        lines.add(re.sub(r"^hetc-runtime: rank \d+: ", "", failed[0]))
    assert len(lines) == 1, lines
    return lines.pop()


@pytest.fixture(scope="module")
def sgd_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """NEIGHBOURS (stages TP 1 then TP 2) trains SAVED steps of SGD, asked at once for a
    checkpoint by the request file; the run directory."""
    where = tmp_path_factory.mktemp("sgd")
    spec = oracle_spec(batch=NEIGHBOURS.global_batch_size)
    outcomes, run = _run(NEIGHBOURS, spec, where, "--steps", str(SAVED), request=True)
    _succeeded(outcomes)
    return run


def test_a_request_checkpoints_at_the_next_iteration_and_is_removed(sgd_run: Path) -> None:
    checkpoints = sgd_run / "checkpoints"
    assert not (sgd_run / CHECKPOINT_REQUEST).exists()
    listed = sorted(p.name for p in checkpoints.iterdir() if p.name != ".latest.lock")
    assert listed == ["latest", "step-1", "step-2"]
    assert (checkpoints / "latest").read_text() == "step-2\n"
    meta = json.loads((checkpoints / "step-1" / "meta.json").read_text())
    assert meta["step"] == meta["data_position"]["step"] == 1
    _, reference, _ = reference_run(oracle_spec(batch=4), 0, 1)
    names = sorted(p.name for p in (checkpoints / "step-1" / "params").iterdir())
    assert names == sorted(f"{name}.pt" for name in reference), "each parameter once, whole"
    assert set(meta["files"]) == {f"params/{name}" for name in names}, "SGD keeps no state"


def test_sgd_resumes_under_another_plan_as_if_never_interrupted(
    sgd_run: Path, tmp_path: Path
) -> None:
    spec = oracle_spec(batch=MIXED_TP.global_batch_size)
    weights = tmp_path / "weights"
    outcomes, run = _run(
        MIXED_TP,
        spec,
        tmp_path,
        "--resume",
        str(sgd_run / "checkpoints"),
        "--save-weights",
        str(weights),
    )
    _succeeded(outcomes)
    assert len(run_losses(run)) == STEPS - SAVED, "run.steps less the checkpoint's"
    losses = run_losses(sgd_run) + run_losses(run)
    _assert_matches(losses, saved_weights(weights), reference_run(spec, STEPS, 1), 1e-5)
    assert (run / "checkpoints" / "latest").read_text() == f"step-{STEPS}\n"


@pytest.fixture(scope="module")
def adamw_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MIXED_TP (hetc's own path) trains SAVED steps of AdamW, checkpointing after each; the
    run directory."""
    spec = oracle_spec(batch=MIXED_TP.global_batch_size, **ADAMW_SPEC)
    where = tmp_path_factory.mktemp("adamw")
    outcomes, run = _run(MIXED_TP, spec, where, "--steps", str(SAVED), every=1)
    _succeeded(outcomes)
    return run


@pytest.fixture(scope="module")
def adamw_reference() -> tuple[list[float], dict[str, torch.Tensor], list[float]]:
    return reference_run(oracle_spec(batch=MIXED_TP.global_batch_size, **ADAMW_SPEC), STEPS, 1)


Resumed = tuple[list[float], dict[str, list[torch.Tensor]]]
"""The losses of both parts of an interrupted run, and the resumed run's final weights."""


def _resume_adamw(
    first: Path, plan: Plan, where: Path, *, zero: int = 0, hook: str | None = None
) -> Resumed:
    """Resume `first`'s checkpoint of step SAVED under `plan` (ZeRO `zero`) to the end."""
    spec = oracle_spec(batch=plan.global_batch_size, zero=zero, **ADAMW_SPEC)
    weights = where / "weights"
    checkpoint = first / "checkpoints" / f"step-{SAVED}"
    resume = ["--resume", str(checkpoint), "--save-weights", str(weights)]
    outcomes, second = _run(plan, spec, where / "run", *resume, hook=hook)
    _succeeded(outcomes)
    return run_losses(first) + run_losses(second), saved_weights(weights)


def _assert_adamw_matches(resumed: Resumed, reference: Any) -> None:
    """The uninterrupted run's, within the tolerances of test_runtime_deepspeed."""
    losses, weights = resumed
    _assert_matches(losses, weights, reference, 1e-3, atol=1e-5)
    assert losses == pytest.approx(reference[0], rel=1e-6)


def test_adamw_state_round_trips_between_plans(
    adamw_run: Path, adamw_reference: Any, tmp_path: Path
) -> None:
    checkpoint = adamw_run / "checkpoints" / f"step-{SAVED}"
    assert (adamw_run / "checkpoints" / "step-1" / "meta.json").exists(), "checkpoint_every 1"
    meta = json.loads((checkpoint / "meta.json").read_text())
    assert meta["optimizer"] == "AdamW"
    assert "optim/embedding.tokens.weight.pt" in meta["files"]
    _assert_adamw_matches(_resume_adamw(adamw_run, NEIGHBOURS, tmp_path), adamw_reference)


ENGINE_STAGES = _plan(  # 2 stages x 2 TP-1 replicas, shares 3 and 1: ZeRO-2 pads, tied table
    4,
    [
        Stage(first_block=0, end_block=2, replicas=(_replica(0, 0), _replica(0, 1))),
        Stage(first_block=2, end_block=4, replicas=(_replica(1, 0), _replica(1, 1))),
    ],
    [3, 1],
)
ENGINE_REPLICAS = _plan(  # one stage, two TP-1 replicas, shares 3 and 1: each holds half
    4, [Stage(first_block=0, end_block=4, replicas=(_replica(0, 0), _replica(0, 1)))], [3, 1]
)


def test_a_zero2_engine_checkpoint_is_complete_and_resumes_on_hetcs_own_path(
    adamw_run: Path, adamw_reference: Any, tmp_path: Path
) -> None:
    spec = oracle_spec(batch=ENGINE_STAGES.global_batch_size, zero=2, **ADAMW_SPEC)
    outcomes, first = _run(ENGINE_STAGES, spec, tmp_path / "engine", "--steps", str(SAVED))
    _succeeded(outcomes)
    checkpoint, own = (r / "checkpoints" / f"step-{SAVED}" for r in (first, adamw_run))
    meta, own_meta = (json.loads((c / "meta.json").read_text()) for c in (checkpoint, own))
    assert meta["unsaved_state"] == [] and meta["optimizer"] == own_meta["optimizer"]
    assert set(meta["files"]) == set(own_meta["files"]), "the files of hetc's own path"
    for relative in (f for f in meta["files"] if f.startswith("optim/")):
        state, own_state = (torch.load(c / relative) for c in (checkpoint, own))
        layout = {k: (v.shape, v.dtype) for k, v in state.items()}
        assert layout == {k: (v.shape, v.dtype) for k, v in own_state.items()}, relative
        assert state["step"] == own_state["step"] == SAVED
    _assert_adamw_matches(_resume_adamw(first, MIXED_TP, tmp_path / "own"), adamw_reference)


def test_an_own_path_checkpoint_resumes_in_zero1_engines(
    adamw_run: Path, adamw_reference: Any, tmp_path: Path
) -> None:
    resumed = _resume_adamw(adamw_run, ENGINE_REPLICAS, tmp_path, zero=1)
    _assert_adamw_matches(resumed, adamw_reference)


def test_an_engine_that_leaves_the_optimizer_state_fresh_is_caught(
    adamw_run: Path, adamw_reference: Any, tmp_path: Path
) -> None:
    resumed = _resume_adamw(adamw_run, ENGINE_REPLICAS, tmp_path, zero=1, hook="fresh-engine-state")
    with pytest.raises(AssertionError):
        _assert_adamw_matches(resumed, adamw_reference)


def test_a_corrupted_file_stops_every_rank_with_one_message(sgd_run: Path, tmp_path: Path) -> None:
    checkpoint = tmp_path / "step-2"
    shutil.copytree(sgd_run / "checkpoints" / "step-2", checkpoint)
    damaged = checkpoint / "params" / "blocks.0.mlp.fc1.weight.pt"  # read by plan rank 0 only
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    spec = oracle_spec(batch=TWO_STAGES.global_batch_size)
    outcomes, run = _run(TWO_STAGES, spec, tmp_path, "--resume", str(checkpoint))
    message = _failure(outcomes)
    assert str(damaged) in message and "corrupted or truncated" in message
    assert not (run / "metrics").exists(), "no rank trained"


def test_a_write_that_fails_before_the_rename_leaves_latest_on_the_previous(
    tmp_path: Path,
) -> None:
    spec = oracle_spec(batch=TWO_STAGES.global_batch_size)
    outcomes, run = _run(
        TWO_STAGES, spec, tmp_path, "--steps", "2", every=1, mutation="fail-publish-2"
    )
    assert "simulated crash before the rename" in _failure(outcomes)
    checkpoints = run / "checkpoints"
    assert (checkpoints / "latest").read_text() == "step-1\n"
    assert (checkpoints / "step-1" / "meta.json").exists()
    assert not (checkpoints / "step-2").exists()
    assert [p.name.split(".tmp-")[0] for p in checkpoints.glob("*.tmp-*")] == ["step-2"]


def test_a_sigusr1_to_one_rank_checkpoints_every_rank_at_the_next_iteration(
    tmp_path: Path,
) -> None:
    spec = oracle_spec(batch=TWO_STAGES.global_batch_size)
    outcomes, run = _run(TWO_STAGES, spec, tmp_path, "--steps", "3", hook="sigusr1-rank-1-step-0")
    _succeeded(outcomes)
    checkpoints = run / "checkpoints"
    assert sorted(p.name for p in checkpoints.glob("step-*")) == ["step-1", "step-3"]
    meta = json.loads((checkpoints / "step-1" / "meta.json").read_text())
    assert meta["step"] == 1 and len(meta["files"]) == len(
        json.loads((checkpoints / "step-3" / "meta.json").read_text())["files"]
    ), "both stages wrote their part"


def test_the_signal_handler_does_not_keep_the_trainer_alive(tmp_path: Path) -> None:
    """The handlers count into `Signals`, which holds no trainer: Python holds a signal handler
    until interpreter shutdown, and a handler reaching the trainer kept its gloo groups until
    then, where the process aborted after a clean error exit. The checkpointer reads the
    counts: a SIGUSR1 is 1 in the agreement's signal field, a SIGTERM world size + 1."""

    class Trainer:
        def __init__(self) -> None:
            self.training = {"run": {"checkpoint_every": None}}
            self.started = SimpleNamespace(plan_rank=0, world_size=3, run_dir=tmp_path)
            self.members: dict[int, Any] = {}

    previous = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
    try:
        signals = Signals().install()
        trainer = Trainer()
        checkpointer = Checkpointer(
            trainer,  # type: ignore[arg-type]
            Path("unused"),
            timeout=1,
            start_step=0,
            signals=signals,
        )
        alive = weakref.ref(trainer)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert signals.checkpoints == 1
        assert checkpointer.observe() == [0.0, 1.0, 0.0, 0.0]
        assert checkpointer.observe() == [0.0, 0.0, 0.0, 0.0], "each signal counts once"
        os.kill(os.getpid(), signal.SIGTERM)
        assert checkpointer.observe() == [0.0, 4.0, 0.0, 0.0]
        del trainer, checkpointer
        gc.collect()
        assert alive() is None
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


ONE = _plan(4, [Stage(first_block=0, end_block=4, replicas=(_replica(0, 0),))], [4])


def test_fp16_resumes_with_the_loss_scale_it_had_reached(tmp_path: Path) -> None:
    # From 2**22, halving on each overflow, the first two steps overflow and are skipped and
    # the next two are not: a resumed run that started its scaler afresh would skip them too.
    spec = oracle_spec(batch=ONE.global_batch_size, optimizer=ADAMW, precision="fp16")
    scaling = {"initial_scale_power": 22, "hysteresis": 1}
    whole, first, second = (tmp_path / n for n in ("whole", "first", "second"))
    outcomes, whole_run = _run(
        ONE, spec, whole, "--save-weights", str(whole / "weights"), deepspeed=scaling
    )
    _succeeded(outcomes)
    outcomes, first_run = _run(ONE, spec, first, "--steps", str(SAVED), deepspeed=scaling)
    _succeeded(outcomes)
    meta = json.loads((first_run / "checkpoints" / f"step-{SAVED}" / "meta.json").read_text())
    assert meta["loss_scaler"]["scale"] == 2.0**20, "both steps overflowed"
    resume = ["--resume", str(first_run / "checkpoints"), "--save-weights", str(second / "weights")]
    outcomes, second_run = _run(ONE, spec, second, *resume, deepspeed=scaling)
    _succeeded(outcomes)
    assert run_losses(first_run) + run_losses(second_run) == run_losses(whole_run)
    resumed = saved_weights(second / "weights")
    for name, [value] in saved_weights(whole / "weights").items():
        assert torch.equal(resumed[name][0], value), name


def _fresh_engine_state() -> None:
    from hetc.runtime import engine

    load_full = engine.StageEngine.load_full

    def weights_only(self: Any, parameter: Any, master: Any, state: Any) -> None:
        load_full(self, parameter, master, {})

    engine.StageEngine.load_full = weights_only  # type: ignore[method-assign]


def _sigusr1_rank_1_step_0() -> None:
    """Plan rank 1 signals itself while it trains step 0 (before the iteration's agreement),
    as Slurm's USR1 would arrive."""
    from hetc.runtime.train import StageTrainer

    train_step = StageTrainer.train_step

    def signalled(self: StageTrainer, step: int) -> float:
        if self.started.plan_rank == 1 and step == 0:
            os.kill(os.getpid(), signal.SIGUSR1)
        return train_step(self, step)

    StageTrainer.train_step = signalled  # type: ignore[method-assign]


HOOKS = {"fresh-engine-state": _fresh_engine_state, "sigusr1-rank-1-step-0": _sigusr1_rank_1_step_0}

if __name__ == "__main__":
    if sys.argv[1] not in HOOKS:
        raise SystemExit(f"unknown hook {sys.argv[1]}")
    HOOKS[sys.argv[1]]()
    from hetc.runtime.__main__ import main

    sys.exit(main(sys.argv[2:]))
