"""A lost rank (killed, or frozen with SIGSTOP) stops every survivor with one line naming it,
the step and the last complete checkpoint, an outcome record and exit 75, within the
heartbeat timeout: never a gloo traceback, never the process group's 300 s timeout.

Both runs train NEIGHBOURS (plan rank 0 on node n0; ranks 1 and 2, one TP-2 replica, on node
n1) with a checkpoint after every step, and plan rank 1 dies or freezes as step 2 starts
(tests/runtime_hooks.py). Before the heartbeat the killed case ended in "Connection reset by
peer" tracebacks and exit 1, and the frozen case waited out the 300 s timeout (here the test
kills everything after 60 s and fails).
"""

from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path

import pytest
from runtime_harness import Outcome, ranks_in_plan_order, seal, start_ranks, wait_for
from runtime_training import oracle_spec, write_compiled
from test_runtime_train import NEIGHBOURS

from hetc.plan.outcome import EXIT_PEER_LOST, outcome_path, read_outcome

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent
HEARTBEAT = 5.0
"""The heartbeat timeout of these runs; the process group's stays at its default 300 s."""
LOST = "plan rank 1 (node 'cpu@z/n1', local rank 0)"


AGENT = (
    "import os, subprocess, sys; os.environ['TORCHELASTIC_RUN_ID'] = 'agents';"
    " sys.exit(subprocess.call(sys.argv[1:]))"
)
"""Starts a rank as its child, as torchrun's agent does (and says so, as torchrun does)."""


def _lose_rank(
    tmp_path: Path, hook: str, lost: int = 1, *, agent: bool = False
) -> tuple[list[Outcome], Path]:
    """Train with `hook` making plan rank `lost` die or freeze at step 2 (each rank under a
    stand-in agent with `agent`); the survivors' outcomes and the run directory. The lost rank
    is killed afterwards."""
    spec = oracle_spec(batch=NEIGHBOURS.global_batch_size)
    out, run = tmp_path / "out", tmp_path / "run"
    out.mkdir()
    topology = write_compiled(NEIGHBOURS, spec, out)
    training = json.loads((out / "training.json").read_text())
    training["run"]["checkpoint_every"] = 1
    (out / "training.json").write_text(json.dumps(training))
    seal(out)
    command = [sys.executable, str(HERE / "runtime_hooks.py"), hook]
    command += ["--heartbeat-timeout", str(HEARTBEAT), "--steps", "5"]
    if agent:
        command = [sys.executable, "-c", AGENT, *command]
    ranks = ranks_in_plan_order(topology, command=command)
    processes = start_ranks(ranks, out, run, timeout=300)
    try:
        alive = [i for i in range(len(ranks)) if i != lost]
        survivors = [wait_for(ranks[i], processes[i], HEARTBEAT + 60) for i in alive]
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
            process.communicate()
    return survivors, run


def _assert_one_message(survivors: list[Outcome], run: Path, silent: str) -> None:
    """Exit 75, one line naming rank 1, its step and the last complete checkpoint, no
    traceback, and an outcome record that says the same."""
    for outcome in survivors:
        assert outcome.returncode == EXIT_PEER_LOST, outcome.stderr[-3000:]
        assert "Traceback" not in outcome.stderr, outcome.stderr[-3000:]
        lines = [line for line in outcome.stderr.splitlines() if line.startswith("hetc-runtime")]
        assert len(lines) == 1, lines
        line = lines[0]
        assert f"peer lost: {LOST} stopped answering ({silent}" in line, line
        assert re.search(r"; at step [23]; ", line), line
        assert re.search(r"last complete checkpoint: \S+/step-[12] \(step [12], sample", line)
        record = read_outcome(outcome_path(run, outcome.rank.torch_rank))
        assert record.code == EXIT_PEER_LOST and record.reason in line
        assert record.lost is not None and (record.lost.rank, record.lost.node) == (1, "cpu@z/n1")
        assert record.checkpoint is not None and record.checkpoint.step in (1, 2)
        assert Path(record.checkpoint.path, "meta.json").is_file()
        assert record.checkpoint.sample == record.checkpoint.step * 4


def test_a_killed_rank_is_named_by_every_survivor(tmp_path: Path) -> None:
    """SIGKILL: the survivors' gloo calls fail at once; the heartbeat then names the silent
    rank after a few missed beats ("connection lost and no heartbeat for ...")."""
    survivors, run = _lose_rank(tmp_path, "kill-rank-1-step-2")
    _assert_one_message(survivors, run, "connection lost and no heartbeat")


def test_a_frozen_rank_is_named_within_the_heartbeat_timeout(tmp_path: Path) -> None:
    """SIGSTOP: nothing fails, every survivor waits in a collective; the heartbeat names the
    rank once it missed HEARTBEAT seconds of beats, long before the 300 s timeout."""
    survivors, run = _lose_rank(tmp_path, "stop-rank-1-step-2")
    _assert_one_message(survivors, run, "no heartbeat for")


def test_the_rank_that_hosts_the_store_is_named_when_killed(tmp_path: Path) -> None:
    """Without torchrun's agent, plan rank 0 hosts the c10d store, so killing it takes the
    heartbeat's store too: the survivors name it as the store's host and exit 75 within a
    few beats, and the outcome record says the same. Checked to fail when `after_error`
    returns at once (the survivors then report the raw gloo error, exit 1)."""
    survivors, run = _lose_rank(tmp_path, "kill-rank-0-step-2", lost=0)
    for outcome in survivors:
        assert outcome.returncode == EXIT_PEER_LOST, outcome.stderr[-3000:]
        assert "Traceback" not in outcome.stderr, outcome.stderr[-3000:]
        lines = [line for line in outcome.stderr.splitlines() if line.startswith("hetc-runtime")]
        assert len(lines) == 1, lines
        assert "plan rank 0 (node 'cpu@z/n0', local rank 0)" in lines[0], lines[0]
        record = read_outcome(outcome_path(run, outcome.rank.torch_rank))
        assert record.lost is not None and (record.lost.rank, record.lost.node) == (0, "cpu@z/n0")


def test_a_rank_whose_agent_is_gone_stops_and_its_node_is_named(tmp_path: Path) -> None:
    """torchrun's agent killed outright leaves its workers (in sessions of their own) running:
    the orphan notices its parent changed, stops with exit 75 naming its own node, and every
    survivor reports that rank lost. Checked to fail without the parent check (the orphan
    trains to the end, exit 0)."""
    survivors, run = _lose_rank(tmp_path, "orphan-rank-1-step-2", agent=True)
    orphan = read_outcome(outcome_path(run, 1))
    assert orphan.code == EXIT_PEER_LOST and "torchrun's agent on this node" in orphan.reason
    assert orphan.lost is not None and (orphan.lost.rank, orphan.lost.node) == (1, "cpu@z/n1")
    for outcome in survivors:
        assert outcome.returncode == EXIT_PEER_LOST, outcome.stderr[-3000:]
        assert "Traceback" not in outcome.stderr, outcome.stderr[-3000:]
        record = read_outcome(outcome_path(run, outcome.rank.torch_rank))
        assert record.lost is not None and record.lost.rank == 1, record
