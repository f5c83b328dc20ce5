"""The checkpoint directory's rules (hetc.runtime.history): a published step is never
replaced, `latest` only moves forward even when processes race, and the newest complete
checkpoint is the highest published step whatever `latest` says."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from hetc.runtime.history import (
    advance_latest,
    checkpoints,
    latest_step,
    newest_checkpoint,
    publish,
)


def _checkpoint(path: Path, content: str) -> Path:
    path.mkdir(parents=True)
    (path / "meta.json").write_text(content)
    return path


def test_a_published_checkpoint_is_never_replaced(tmp_path: Path) -> None:
    """Publishing onto an existing step directory leaves it as it was and says so."""
    mine = _checkpoint(tmp_path / "step-3", "first")
    theirs = _checkpoint(tmp_path / "step-3.tmp-b", "second")
    assert not publish(theirs, mine)
    assert (mine / "meta.json").read_text() == "first"
    assert theirs.exists(), "the loser's directory is the loser's to remove"
    fresh = _checkpoint(tmp_path / "step-4.tmp-c", "third")
    assert publish(fresh, tmp_path / "step-4")
    assert (tmp_path / "step-4" / "meta.json").read_text() == "third"


def test_latest_only_moves_forward(tmp_path: Path) -> None:
    """Forward moves happen, backward ones do not."""
    assert latest_step(tmp_path) is None
    assert advance_latest(tmp_path, 4)
    assert not advance_latest(tmp_path, 2)
    assert not advance_latest(tmp_path, 4)
    assert advance_latest(tmp_path, 6)
    assert (tmp_path / "latest").read_text() == "step-6\n"


def _advance_many(root: str, steps: list[int]) -> None:
    for step in steps:
        advance_latest(Path(root), step)


@pytest.mark.slow
def test_racing_processes_leave_latest_on_the_highest_step(tmp_path: Path) -> None:
    """Four processes move `latest` through interleaved steps at once, 500 times each; the
    lock makes every read-compare-replace atomic, so the highest step wins. (Without the lock
    - `fcntl.lockf` made a no-op - this ends below 1999 in most runs: a mutation check.)"""
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=_advance_many, args=(str(tmp_path), list(range(k, 2000, 4))))
        for k in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    assert latest_step(tmp_path) == 1999


def test_the_newest_checkpoint_is_the_highest_published_step(tmp_path: Path) -> None:
    """Temporary and unrelated directories do not count; `latest` is not consulted."""
    assert newest_checkpoint(tmp_path / "none") is None
    for name in ("step-2", "step-10", "step-11.tmp-ab", "step-x", "other"):
        (tmp_path / name).mkdir()
    (tmp_path / "latest").write_text("step-2\n")
    assert sorted(checkpoints(tmp_path)) == [2, 10]
    assert newest_checkpoint(tmp_path) == (tmp_path / "step-10", 10)
