"""Outcome records (hetc.plan.outcome): written atomically, read back as written, and summed
up into the run's code the way a launcher must act on it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hetc.plan.outcome import (
    EXIT_DONE,
    EXIT_FAILED,
    EXIT_PEER_LOST,
    EXIT_PREEMPTED,
    CheckpointRef,
    LostPeer,
    Outcome,
    OutcomeError,
    outcome_path,
    read_outcome,
    read_outcomes,
    run_code,
    write_outcome,
)


def _outcome(code: int, rank: int | None = 0) -> Outcome:
    return Outcome(
        code=code,
        reason="peer lost: plan rank 3 stopped answering",
        rank=rank,
        node="a100@z/n0",
        local_rank=0,
        plan_hash="ab" * 32,
        step=7,
        lost=LostPeer(node="a100@z/n1", rank=3, local_rank=1),
        checkpoint=CheckpointRef(path="/ckpt/step-6", step=6, sample=6 * 64),
        time=1.5,
    )


def test_a_record_reads_back_as_written_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    """Every field survives the round trip; the folder holds the record alone."""
    path = outcome_path(tmp_path, 2)
    assert path == tmp_path / "outcome" / "rank-00002.json"
    write_outcome(path, _outcome(EXIT_PEER_LOST))
    write_outcome(path, _outcome(EXIT_PEER_LOST, rank=2))
    assert read_outcome(path) == _outcome(EXIT_PEER_LOST, rank=2)
    assert [p.name for p in path.parent.iterdir()] == ["rank-00002.json"]
    assert json.loads(path.read_text())["code_name"] == "peer lost"
    assert read_outcome(path).restartable


def test_a_process_without_a_plan_rank_is_named_by_its_torch_rank(tmp_path: Path) -> None:
    """Start-up can fail before a process knows its plan rank."""
    assert outcome_path(tmp_path, None, torch_rank=4).name == "torch-rank-4.json"


def test_malformed_records_are_refused_naming_the_file(tmp_path: Path) -> None:
    """Another format, a missing field or broken JSON: OutcomeError with the path."""
    path = tmp_path / "rank-00000.json"
    record = _outcome(EXIT_DONE).to_json()
    for broken in ({**record, "format": 2}, {k: v for k, v in record.items() if k != "code"}):
        path.write_text(json.dumps(broken))
        with pytest.raises(OutcomeError, match=r"rank-00000\.json: not an outcome record"):
            read_outcome(path)
    path.write_text("{")
    with pytest.raises(OutcomeError, match=r"rank-00000\.json"):
        read_outcome(path)


def test_the_runs_code_is_the_worst_of_its_ranks(tmp_path: Path) -> None:
    """Failed beats peer lost beats preempted beats done; no records, no code."""
    assert read_outcomes(tmp_path) == [] and run_code([]) is None
    codes = [EXIT_DONE, EXIT_PREEMPTED, EXIT_PEER_LOST]
    for rank, code in enumerate(codes):
        write_outcome(outcome_path(tmp_path, rank), _outcome(code, rank))
    outcomes = read_outcomes(tmp_path)
    assert [o.rank for o in outcomes] == [0, 1, 2]
    assert run_code(outcomes) == EXIT_PEER_LOST
    assert run_code(outcomes[:2]) == EXIT_PREEMPTED
    assert run_code([*outcomes, _outcome(EXIT_FAILED)]) == EXIT_FAILED
    assert run_code([_outcome(EXIT_DONE), _outcome(-9)]) == EXIT_FAILED


def test_reading_records_needs_no_torch() -> None:
    """Launchers and the supervisor read records in processes that never import torch."""
    probe = "import sys, hetc.plan.outcome; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr
