"""Several runs on one checkpoint directory: `--from-scratch` keeps what is there, and two runs
racing on one directory never replace each other's checkpoints nor move `latest` back.

The rule (hetc.runtime.history): a published `step-<k>` is never replaced; a run that reaches
a step that has one keeps it and publishes nothing for that step; `latest` moves only to a
higher step. The runs train MIXED_TP (one stage: a TP-1 and a TP-2 replica) with SGD and a
checkpoint after every step. Before this rule a run replaced an existing `step-<k>` and moved
`latest` to whatever step it wrote last; and `--from-scratch` did not exist.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from runtime_harness import Outcome, ranks_in_plan_order, seal, start_ranks, wait_for
from runtime_training import oracle_spec, write_compiled
from test_runtime_train import MIXED_TP

from hetc.plan.topology import topology_of

pytestmark = pytest.mark.slow


def _compiled(where: Path, checkpoints: Path) -> Path:
    """MIXED_TP compiled into `where/out`, checkpointing every step into `checkpoints`."""
    out = where / "out"
    out.mkdir(parents=True)
    write_compiled(MIXED_TP, oracle_spec(batch=MIXED_TP.global_batch_size), out)
    training = json.loads((out / "training.json").read_text())
    training["run"].update(checkpoint_every=1, checkpoint_dir=str(checkpoints))
    (out / "training.json").write_text(json.dumps(training))
    seal(out)
    return out


def _start(out: Path, run: Path, *arguments: str) -> tuple[list, list]:
    command = [sys.executable, "-m", "hetc.runtime", *arguments]
    ranks = ranks_in_plan_order(topology_of(MIXED_TP, tied_embeddings=True), command=command)
    return ranks, start_ranks(ranks, out, run, timeout=60)


def _finish(started: tuple[list, list]) -> list[Outcome]:
    ranks, processes = started
    outcomes = [wait_for(r, p, 120) for r, p in zip(ranks, processes, strict=True)]
    for outcome in outcomes:
        assert outcome.returncode == 0, outcome.stderr[-3000:]
    return outcomes


def _metas(checkpoints: Path) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in checkpoints.glob("step-*/meta.json")}


def _written_by(checkpoints: Path, step: int) -> dict[str, object]:
    meta = json.loads((checkpoints / f"step-{step}" / "meta.json").read_text())
    written: dict[str, object] = meta["written_by"]
    return written


def test_from_scratch_keeps_the_checkpoints_it_finds(tmp_path: Path) -> None:
    """Steps 1 and 2 of an earlier run stay byte for byte; the new run publishes step 3 only,
    says which checkpoints it kept, and `latest` moves to step-3."""
    checkpoints = tmp_path / "checkpoints"
    out = _compiled(tmp_path, checkpoints)
    _finish(_start(out, tmp_path / "run-a", "--steps", "2"))
    before = _metas(checkpoints)
    assert sorted(before) == ["step-1", "step-2"]
    outcomes = _finish(_start(out, tmp_path / "run-b", "--from-scratch", "--steps", "3"))
    assert "starting at step 0 (--from-scratch)" in outcomes[0].stdout
    assert "(newest step-2) are kept" in outcomes[0].stdout
    kept = [line for line in outcomes[0].stderr.splitlines() if "it is kept" in line]
    assert len(kept) == 2 and all("another run's checkpoint" in line for line in kept), kept
    after = _metas(checkpoints)
    assert {k: after[k] for k in before} == before, "step-1 and step-2 untouched"
    assert sorted(after) == ["step-1", "step-2", "step-3"]
    assert _written_by(checkpoints, 3)["started_from"] == 0
    assert _written_by(checkpoints, 3)["run"] != _written_by(checkpoints, 2)["run"]
    assert (checkpoints / "latest").read_text() == "step-3\n"
    assert not [p for p in checkpoints.iterdir() if re.search(r"\.(tmp|old)-", p.name)]


def test_two_runs_racing_on_one_directory_keep_every_published_checkpoint(
    tmp_path: Path,
) -> None:
    """A run resumed from step-2 and a run from scratch write steps 3 to 5 into one directory
    at the same time: each step is published once (by whichever run got there first) and
    never replaced, the seed run's step-2 is untouched, `latest` ends on step-5, and no
    temporary directory is left behind."""
    checkpoints = tmp_path / "checkpoints"
    out = _compiled(tmp_path, checkpoints)
    _finish(_start(out, tmp_path / "seed", "--steps", "2"))
    seed = _metas(checkpoints)
    resumed = _start(out, tmp_path / "run-resumed", "--steps", "3")
    scratch = _start(out, tmp_path / "run-scratch", "--from-scratch", "--steps", "5")
    outcomes = _finish(resumed) + _finish(scratch)
    after = _metas(checkpoints)
    assert sorted(after) == ["step-1", "step-2", "step-3", "step-4", "step-5"]
    assert {k: after[k] for k in seed} == seed
    assert (checkpoints / "latest").read_text() == "step-5\n"
    assert not [p for p in checkpoints.iterdir() if re.search(r"\.(tmp|old)-", p.name)]
    kept = sum("it is kept" in line for o in outcomes for line in o.stderr.splitlines())
    assert kept == 2 + 3, "the scratch run kept steps 1 and 2; for each of steps 3-5, one run"
    for step in (3, 4, 5):
        assert _written_by(checkpoints, step)["started_from"] in (0, 2)
