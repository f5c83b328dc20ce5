"""Runtime start-up: real multi-process runs on gloo, each a few seconds on 2 cores."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runtime_harness import (
    NODE_A,
    NODE_B,
    Outcome,
    Rank,
    free_port,
    launch,
    ranks_in_plan_order,
    small_plan,
    startup_record,
    swapped_groups_command,
    write_output,
)

from hetc.plan.topology import Topology
from hetc.runtime.startup import Announcement, checkpoint_requested, verdict

READY = "hetc-runtime: start-up verified"


def _assert_started(topology: Topology, run_dir: Path, torch_rank: dict[int, int]) -> None:
    """Every plan rank wrote a record with its own groups, in cluster.json's order."""
    for process in topology.processes:
        record = startup_record(run_dir, process.rank)
        assert record["groups"] == [g.name for g in topology.groups_of(process.rank)]
        assert (record["node"], record["local_rank"]) == (process.node, process.local_rank)
        assert record["world_size"] == topology.world_size
        assert record["torch_rank"] == torch_rank[process.rank]


def _assert_one_failure(outcomes: list[Outcome]) -> str:
    """Every rank failed with status 1 and the same one line, and printed no traceback."""
    assert [o.returncode for o in outcomes] == [1] * len(outcomes), [o.stderr for o in outcomes]
    assert all("Traceback" not in o.stderr for o in outcomes)
    messages = {tuple(o.hetc_lines) for o in outcomes}
    assert len(messages) == 1, messages
    (line,) = messages.pop()
    assert line.startswith("hetc-runtime: start-up failed: ")
    return line


def test_checkpoint_request_is_a_file_in_the_run_dir(tmp_path: Path) -> None:
    """The USR1 trap's file asks for a checkpoint; without it none is asked for."""
    assert not checkpoint_requested(tmp_path)
    (tmp_path / "checkpoint-request").touch()
    assert checkpoint_requested(tmp_path)


def _ok(local_rank: int, plan_hash: str = "h", version: str = "1") -> Announcement:
    return Announcement("n", local_rank, plan_hash, version, None)


@pytest.mark.parametrize(
    ("announced", "expected"),
    [
        ([_ok(0), _ok(1)], None),
        ([_ok(0), _ok(1, version="2")], "the hetc versions differ: 1 on node 'n' local rank 0"),
        ([_ok(0), _ok(1, plan_hash="g")], "the plan hashes differ: g on node 'n' local rank 1"),
        (
            [_ok(0)],
            "1 processes were started; the plan has 2. Nobody started node 'n' local rank 1",
        ),
        (
            [_ok(0), Announcement("n", 1, None, "1", "bad file")],
            "node 'n' local rank 1 (torch rank 1): bad file.",
        ),
        (
            [Announcement(None, 0, "h", "1", "HETC_NODE is not set"), _ok(1)],
            "node (HETC_NODE unset) local rank 0 (torch rank 0): HETC_NODE is not set.",
        ),
    ],
)
def test_verdict(announced: list[Announcement], expected: str | None) -> None:
    """One message from the gathered announcements, naming who differs and what is right."""
    cluster = {
        "world_size": 2,
        "nodes": [{"id": "n", "processes": [{"local_rank": 0}, {"local_rank": 1}]}],
    }
    result = verdict(announced, cluster)
    if expected is None:
        assert result is None
    else:
        assert result is not None and expected in result


@pytest.mark.slow
def test_torchrun_two_nodes(tmp_path: Path) -> None:
    """Two torchrun invocations, 3 and 2 processes, start a heterogeneous plan."""
    topology = write_output(small_plan(), tmp_path / "out")
    torchrun = Path(sys.executable).parent / "torchrun"
    endpoint = f"127.0.0.1:{free_port()}"
    agents = []
    for node, processes in ((NODE_A, 3), (NODE_B, 2)):
        command = [str(torchrun), "--nnodes", "2", "--nproc-per-node", str(processes)]
        command += ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "x"]
        command += [
            "-m",
            "hetc.runtime",
            "--startup-only",
            str(tmp_path / "out"),
            "--timeout",
            "60",
        ]
        env = {"HETC_NODE": node, "HETC_RUN_DIR": str(tmp_path / "run"), "HETC_BACKEND": "gloo"}
        agents.append(
            subprocess.Popen(command, env={**os.environ, **env}, stdout=subprocess.PIPE, text=True)
        )
    outputs = [agent.communicate(timeout=120)[0] for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0]
    assert "".join(outputs).count(READY) == topology.world_size
    records = [startup_record(tmp_path / "run", p.rank) for p in topology.processes]
    assert sorted(r["torch_rank"] for r in records) == list(range(topology.world_size))
    torch_rank = {r["rank"]: r["torch_rank"] for r in records}
    _assert_started(topology, tmp_path / "run", torch_rank)


@pytest.mark.slow
def test_torch_ranks_in_reverse_map_to_plan_ranks(tmp_path: Path) -> None:
    """torchrun's RANK is not the plan rank: reversed torch ranks still find their groups."""
    topology = write_output(small_plan(), tmp_path / "out")
    last = topology.world_size - 1
    ranks = [Rank(r.node, r.local_rank, last - r.torch_rank) for r in ranks_in_plan_order(topology)]
    outcomes = launch(ranks, tmp_path / "out", tmp_path / "run", timeout=60)
    assert [o.returncode for o in outcomes] == [0] * len(ranks), [o.stderr for o in outcomes]
    assert all(o.hetc_lines[-1] == READY for o in outcomes)
    _assert_started(topology, tmp_path / "run", {p.rank: last - p.rank for p in topology.processes})


def _other_plan_json(out: Path, tmp_path: Path) -> Path:
    """A copy of the output directory whose plan.json is not the one cluster.json was made for."""
    other = tmp_path / "other"
    shutil.copytree(out, other)
    plan = other / "plan.json"
    plan.write_text(plan.read_text().replace('"global_batch_size": 3', '"global_batch_size": 4'))
    return other


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("plan.json changed", "node 'v100@z/n0' local rank 1 (torch rank 4): "),
        ("started twice", "node 'v100@z/n0' local rank 0 was started 2 times (torch ranks 3, 4)."),
        ("unknown node", "node 'c@z/n9' local rank 0 (torch rank 4) is not in the plan, which"),
    ],
    ids=["plan.json changed", "started twice", "unknown node"],
)
def test_mismatch_stops_every_rank_with_one_message(
    tmp_path: Path, case: str, expected: str
) -> None:
    """A rank that read another plan, or is not the plan's, stops all ranks with one line."""
    out = tmp_path / "out"
    topology = write_output(small_plan(), out)
    ranks = ranks_in_plan_order(topology)
    last = ranks[-1]
    if case == "plan.json changed":
        ranks[-1] = Rank(
            last.node, last.local_rank, last.torch_rank, _other_plan_json(out, tmp_path)
        )
    elif case == "started twice":
        ranks[-1] = Rank(last.node, 0, last.torch_rank)
    else:
        ranks[-1] = Rank("c@z/n9", 0, last.torch_rank)
    line = _assert_one_failure(launch(ranks, out, tmp_path / "run", timeout=60))
    assert expected in line
    if case == "plan.json changed":
        assert "plan.json has sha256" in line
    else:
        assert "Nobody started node 'v100@z/n0' local rank 1." in line
    assert not (tmp_path / "run" / "startup").exists()


@pytest.mark.slow
def test_groups_created_in_another_order_fail_the_check(tmp_path: Path) -> None:
    """One rank swapping two groups' creation order gives wrong sums, which the check names."""
    topology = write_output(small_plan(), tmp_path / "out")
    first, second = "dp/stage0/shard0of2", "dp/stage0/shard1of2"
    ranks = ranks_in_plan_order(topology)
    swapped = ranks[3]  # node B local rank 0: in both groups
    ranks[3] = Rank(swapped.node, 0, 3, command=swapped_groups_command(first, second))
    line = _assert_one_failure(launch(ranks, tmp_path / "out", tmp_path / "run", timeout=60))
    assert f"group {first} on plan rank 3: expected [count, sum, sum of squares]" in line
    assert "= [2, 5, 17], got [2, 6, 20]" in line


@pytest.mark.slow
def test_missing_peer_fails_within_the_timeout(tmp_path: Path) -> None:
    """A process that never arrives makes the others fail after the timeout, not hang."""
    topology = write_output(small_plan(), tmp_path / "out")
    ranks = ranks_in_plan_order(topology)[:-1]
    began = time.monotonic()
    outcomes = launch(
        ranks, tmp_path / "out", tmp_path / "run", timeout=10, world_size=topology.world_size
    )
    assert time.monotonic() - began < 10 + 30  # the timeout, and torch's import by 4 processes
    assert [o.returncode for o in outcomes] == [1] * len(ranks)
    for outcome in outcomes:
        (line,) = outcome.hetc_lines
        assert line.startswith(
            "hetc-runtime: start-up failed: joining the other processes failed (timeout 10 s): "
        )
        assert "Traceback" not in outcome.stderr


def test_installed_hetc_version_is_the_distributions() -> None:
    """The version a rank announces is the installed distribution's, as pip records it."""
    import importlib.metadata

    from hetc.runtime.startup import installed_hetc_version

    assert installed_hetc_version() == importlib.metadata.version("hetc")


def test_chunk_groups_reads_shard_names() -> None:
    """`dp/stage<i>/shard<c>of<C>` names give chunk c -> (C, its group)."""
    from hetc.runtime.train import chunk_groups

    groups = {"dp/stage1/shard0of2": "g0", "dp/stage1/shard1of2": "g1", "tp/x": "t"}
    assert chunk_groups(["dp/stage1/shard1of2", "dp/stage1/shard0of2"], groups) == {
        0: (2, "g0"),
        1: (2, "g1"),
    }
