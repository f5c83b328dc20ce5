"""Reading a run's metrics (`hetc.costmodel.measured`): which steps count and how they are
summarised, against numbers computed by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetc.costmodel.measured import RunDataError, read_run, recorded_output
from hetc.schema import EnvironmentProblem

HASH = "ab" * 32


def _write(run: Path, rank: int, rows: list[tuple[int, float, float | None]]) -> None:
    """Lines of (step, seconds, peak bytes); compute is half the seconds, communication a
    quarter, idle the rest."""
    (run / "metrics").mkdir(parents=True, exist_ok=True)
    text = "".join(
        json.dumps(
            {
                "step": step,
                "rank": rank,
                "plan_hash": HASH,
                "seconds": seconds,
                "compute_seconds": seconds / 2,
                "communication_seconds": seconds / 4,
                "idle_seconds": seconds / 4,
                "peak_bytes": peak,
            }
        )
        + "\n"
        for step, seconds, peak in rows
    )
    with open(run / "metrics" / f"rank-{rank:05d}.jsonl", "a", encoding="utf-8") as file:
        file.write(text)


def test_a_rank_keeps_the_middle_half_of_its_steps_after_warm_up(tmp_path: Path) -> None:
    """Warm-up steps go, then the middle half by seconds is averaged (an outlier of 100 s
    and the fastest step are dropped); sections stay additive; the iteration time is the mean
    of the ranks' seconds."""
    _write(
        tmp_path,
        0,
        [
            (0, 50.0, None),
            (1, 7.0, None),
            *[(s, float(s), None) for s in range(2, 9)],
            (9, 100.0, None),
        ],
    )
    _write(tmp_path, 1, [(s, 2.0, None) for s in range(10)])
    run = read_run(tmp_path, plan_hash=HASH, world_size=2, warmup=2, cpu=False)
    assert run.steps == tuple(range(2, 10))
    # rank 0, steps 2..9: seconds 2..8 and 100; the middle half of the 8 drops 2 each side.
    rank0 = run.ranks[0]
    assert rank0.seconds == pytest.approx((4 + 5 + 6 + 7) / 4)
    assert rank0.compute + rank0.communication + rank0.idle == pytest.approx(rank0.seconds)
    assert run.ranks[1].seconds == 2.0
    assert run.iteration_time == pytest.approx((5.5 + 2.0) / 2)


def test_on_cpu_memory_tracked_steps_are_left_out_and_give_the_peak(tmp_path: Path) -> None:
    """CPU: steps with a peak are the tracker's slow ones; the peak is their largest. On a
    GPU every step has one and every step counts."""
    rows = [
        (s, 10.0 if s in (0, 1, 6) else 1.0, 9e6 if s == 6 else 8e6 if s < 2 else None)
        for s in range(10)
    ]
    _write(tmp_path, 0, rows)
    run = read_run(tmp_path, plan_hash=HASH, world_size=1, warmup=0, cpu=True)
    assert 6 not in run.steps and 0 not in run.steps
    assert run.ranks[0].seconds == 1.0
    assert run.ranks[0].peak_bytes == 9e6
    gpu = read_run(tmp_path, plan_hash=HASH, world_size=1, warmup=0, cpu=False)
    assert 6 in gpu.steps


def test_only_the_last_run_in_a_rank_file_counts(tmp_path: Path) -> None:
    """A second run into the same directory starts at step 0 again: the earlier lines go."""
    _write(tmp_path, 0, [(s, 9.0, None) for s in range(6)])
    _write(tmp_path, 0, [(s, 1.0, None) for s in range(6)])
    run = read_run(tmp_path, plan_hash=HASH, world_size=1, warmup=1, cpu=False)
    assert run.steps == (1, 2, 3, 4, 5)
    assert run.ranks[0].seconds == 1.0


def test_the_run_directory_names_the_compiled_output(tmp_path: Path) -> None:
    """The start-up records' `out_dir` is the output; none, or one that is not here, is an
    environment problem with a fix."""
    with pytest.raises(EnvironmentProblem, match="no start-up record"):
        recorded_output(tmp_path)
    out = tmp_path / "out.1234"
    (tmp_path / "startup").mkdir()
    (tmp_path / "startup" / "rank-00000.json").write_text(json.dumps({"out_dir": str(out)}))
    with pytest.raises(EnvironmentProblem, match=r"has no plan\.json here"):
        recorded_output(tmp_path)
    out.mkdir()
    (out / "plan.json").write_text("{}")
    assert recorded_output(tmp_path) == out


def test_steps_missing_on_one_rank_are_not_used(tmp_path: Path) -> None:
    """Only steps every rank has count; too few of them is refused with the ranks' spans."""
    _write(tmp_path, 0, [(s, 1.0, None) for s in range(8)])
    _write(tmp_path, 1, [(s, 1.0, None) for s in range(5)])
    assert read_run(tmp_path, plan_hash=HASH, world_size=2, warmup=2, cpu=False).steps == (2, 3, 4)
    with pytest.raises(RunDataError, match=r"2 steps usable .* rank 1: steps 3..4"):
        read_run(tmp_path, plan_hash=HASH, world_size=2, warmup=3, cpu=False)
