"""`hetc run` on the local Slurm cluster (scripts/slurm-local.sh): a node of the running job set
DOWN mid-run (and kept out, drained), the supervisor re-plans on the nodes left, and the next
generation's job resumes from the checkpoint the old one saved."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_cluster import cluster_is_up, ensure_cluster, stop_cluster

from tests.elastic_harness import ROOT, environment, losses, record, training, wait_for

VENV_BIN = Path(sys.executable).parent
DOWN = "hetc-n3"
"""A node of partition cpu-b, which the first plan fills (pool cpu-slow@rack, 4 devices on 2
nodes)."""


@pytest.fixture(scope="module")
def slurm_env() -> Iterator[dict[str, str]]:
    """The local cluster, started for these tests (and stopped after them) unless it was up."""
    was_up = cluster_is_up()
    env = ensure_cluster()
    yield env
    if not was_up:
        stop_cluster()


def _scontrol(env: dict[str, str], *args: str) -> None:
    subprocess.run(["scontrol", *args], env={**os.environ, **env}, check=True, capture_output=True)


@pytest.mark.slow
def test_a_node_set_down_replans_on_the_nodes_left(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    """Node DOWN (then drained, so that slurmd's next registration does not return it) while
    generation 1 trains on 3 nodes: generation 2 is planned for cpu-slow's 2 devices left,
    submitted as a new job, resumes from a checkpoint past step 0, and the job completes."""
    spec = tmp_path / "spec.yaml"
    text = (ROOT / "examples" / "slurm-local-cpu.yaml").read_text(encoding="utf-8")
    changed = text.replace(
        "run: {steps: 20, checkpoint_dir: ckpt/}",
        "run: {steps: 300, checkpoint_every: 20, checkpoint_dir: ckpt/}",
    )
    assert changed != text
    spec.write_text(changed, encoding="utf-8")
    env = {
        **environment(),
        **slurm_env,
        "HETC_TORCHRUN": str(VENV_BIN / "torchrun"),
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
    }
    out, run = tmp_path / "out", tmp_path / "out.elastic" / "run"
    log = tmp_path / "supervisor.log"
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "hetc", "run", "spec.yaml", "-o", "out"],
        cwd=tmp_path,
        env=env,
        stdout=open(log, "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        first = wait_for("generation 1", lambda: record(out, 1), 60, supervisor)
        assert len(first["plan"]["nodes"]) == 3
        wait_for(
            "a checkpoint and more steps",
            lambda: (
                (run / "ckpt" / "step-20").is_dir()
                and max(losses(run, first["plan"]["hash"]), default=0) > 30
            ),
            180,
            supervisor,
        )
        _scontrol(slurm_env, "update", f"nodename={DOWN}", "state=down", "reason=hetc-test")
        _scontrol(slurm_env, "update", f"nodename={DOWN}", "state=drain", "reason=hetc-test")
        second = wait_for("generation 2 training", lambda: training(out, 2), 180, supervisor)
        assert supervisor.wait(timeout=300) == 0, log.read_text()[-3000:]
    finally:
        _scontrol(slurm_env, "update", f"nodename={DOWN}", "state=resume")
        if supervisor.poll() is None:
            supervisor.send_signal(signal.SIGTERM)
            supervisor.wait(timeout=120)
    assert second["reason"] == "slurm node states: cpu-slow@rack 4 -> 2"
    assert second["quotas"] == {"cpu-fast@rack": 2, "cpu-slow@rack": 2}
    assert second["plan"]["world_size"] == 4 and len(second["plan"]["nodes"]) == 2
    assert second["slurm_job"] != first["slurm_job"]
    assert second["resumed"] > 0 and (run / "ckpt" / f"step-{second['resumed']}").is_dir()
    trained = losses(run, second["plan"]["hash"])
    assert sorted(trained) == list(range(second["resumed"], 300))
    assert record(out, 2)["ended"] == "done: every step trained"  # type: ignore[index]
