"""SIGUSR1 and SIGTERM: remembered from start-up on and acted on at an iteration boundary;
SIGTERM checkpoints and stops every rank with exit 76; a restart resumes by default from the
newest complete checkpoint and trains on as if never interrupted.

Every run here trains NEIGHBOURS (plan rank 0 on node n0, ranks 1 and 2 as a TP-2 replica on
node n1) with SGD, and signals arrive through tests/runtime_hooks.py. The oracle of the
interrupted runs is the single-process reference (runtime_training.reference_run), as in
tests/test_runtime_checkpoint.py. Before this behaviour a signal during start-up or loading
killed the process (both signals' default action), SIGTERM mid-training killed it too, and a
restart trained from step 0 again.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from runtime_harness import Outcome, launch, ranks_in_plan_order
from runtime_training import oracle_spec, reference_run, run_losses, write_compiled
from test_runtime_train import NEIGHBOURS

from hetc.plan.outcome import EXIT_DONE, EXIT_PREEMPTED, outcome_path, read_outcome
from hetc.plan.topology import topology_of

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent
STEPS = 5


def _compiled(where: Path) -> Path:
    out = where / "out"
    out.mkdir(parents=True)
    write_compiled(NEIGHBOURS, oracle_spec(batch=NEIGHBOURS.global_batch_size), out)
    return out


def _run(out: Path, run: Path, *arguments: str, hooks: str | None = None) -> list[Outcome]:
    """Every rank of NEIGHBOURS compiled into `out`, with `hooks` (tests/runtime_hooks.py)."""
    command = [sys.executable, "-m", "hetc.runtime"]
    if hooks is not None:
        command = [sys.executable, str(HERE / "runtime_hooks.py"), hooks]
    ranks = ranks_in_plan_order(
        topology_of(NEIGHBOURS, tied_embeddings=True), command=[*command, *arguments]
    )
    return launch(ranks, out, run, timeout=60)


def _codes(outcomes: list[Outcome]) -> list[int]:
    for outcome in outcomes:
        assert "Traceback" not in outcome.stderr, outcome.stderr[-3000:]
    return [o.returncode for o in outcomes]


def _steps(run: Path) -> list[str]:
    """The published checkpoints (not the temporary directories of unfinished ones)."""
    return sorted(p.name for p in (run / "checkpoints").glob("step-*") if ".tmp-" not in p.name)


def test_signals_during_start_up_and_loading_are_deferred_to_a_checkpoint(tmp_path: Path) -> None:
    """SIGUSR1 on plan rank 1 while it starts up: the first iteration ends with a checkpoint
    (step-1, besides the run's last, step-2). Then SIGUSR1 on every rank while the resumed run
    reads that checkpoint: again a checkpoint after its first iteration (step-3)."""
    out, run = _compiled(tmp_path), tmp_path / "run"
    outcomes = _run(out, run, "--steps", "2", hooks="usr1-in-startup-rank-1")
    assert _codes(outcomes) == [EXIT_DONE] * 3, [o.stderr[-2000:] for o in outcomes]
    assert _steps(run) == ["step-1", "step-2"]
    outcomes = _run(out, run, "--resume", "--steps", "2", hooks="usr1-in-loading")
    assert _codes(outcomes) == [EXIT_DONE] * 3, [o.stderr[-2000:] for o in outcomes]
    assert _steps(run) == ["step-1", "step-2", "step-3", "step-4"]


def test_sigterm_checkpoints_stops_with_76_and_a_restart_resumes_as_if_uninterrupted(
    tmp_path: Path,
) -> None:
    """SIGTERM on plan rank 1 during start-up (deferred): every rank stops after step 0 with
    exit 76 and the checkpoint step-1. A plain restart resumes from it, and SIGTERM at step 2
    stops it after step-3. A second plain restart trains steps 3 and 4. The five losses are
    the uninterrupted single-process run's."""
    out, run = _compiled(tmp_path), tmp_path / "run"
    first = _run(out, run, hooks="term-in-startup-rank-1")
    assert _codes(first) == [EXIT_PREEMPTED] * 3, [o.stderr[-2000:] for o in first]
    for rank in range(3):
        record = read_outcome(outcome_path(run, rank))
        assert record.code == EXIT_PREEMPTED and record.checkpoint_saved
        assert record.checkpoint is not None and record.checkpoint.step == record.step == 1
    assert _steps(run) == ["step-1"]
    second = _run(out, run, hooks="term-rank-1-step-2")
    assert _codes(second) == [EXIT_PREEMPTED] * 3, [o.stderr[-2000:] for o in second]
    assert f"resumed from {run / 'checkpoints' / 'step-1'} at step 1, sample 4" in second[0].stdout
    assert _steps(run) == ["step-1", "step-3"]
    third = _run(out, run)
    assert _codes(third) == [EXIT_DONE] * 3, [o.stderr[-2000:] for o in third]
    assert f"resumed from {run / 'checkpoints' / 'step-3'} at step 3, sample 12" in third[0].stdout
    assert _steps(run) == ["step-1", "step-3", "step-5"]
    losses = run_losses(run)
    spec = oracle_spec(batch=NEIGHBOURS.global_batch_size)
    reference, _, _ = reference_run(spec, STEPS, 1)
    assert len(losses) == STEPS, "each step trained once"
    assert losses == pytest.approx(reference, rel=1e-5)


def test_sigterm_without_a_checkpoint_in_the_grace_period_says_so(tmp_path: Path) -> None:
    """Checkpoint writers that take 60 s and a grace of 3 s: every rank stops with exit 76
    once its grace ran out, saying there is no checkpoint, and none is published."""
    out, run = _compiled(tmp_path), tmp_path / "run"
    outcomes = _run(out, run, "--term-grace", "3", hooks="term-rank-1-step-1,slow-write")
    assert _codes(outcomes) == [EXIT_PREEMPTED] * 3, [o.stderr[-2000:] for o in outcomes]
    for rank, outcome in enumerate(outcomes):
        (line,) = [x for x in outcome.stderr.splitlines() if x.startswith("hetc-runtime")]
        assert "preempted" in line and "stopped without one" in line, line
        assert "last complete checkpoint: none" in line, line
        record = read_outcome(outcome_path(run, rank))
        assert not record.checkpoint_saved and record.checkpoint is None
    assert _steps(run) == []
