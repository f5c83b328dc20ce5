"""A compiled het-job on a real (local) Slurm: every rank of the plan starts, finds its rank
file, joins the process group, verifies its groups and trains the run's steps; USR1 reaches the
batch shell as a checkpoint request without stopping the step. scripts/slurm-local.sh starts the
cluster."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_cluster import (
    cluster_is_up,
    ensure_cluster,
    show_job,
    stop_cluster,
    submit,
    test_only,
    wait_for_job,
)

from hetc.plan import plan_from_json
from hetc.plan.topology import topology_of

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "examples" / "slurm-local-cpu.yaml"
VENV_BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def slurm_env() -> Iterator[dict[str, str]]:
    """The local cluster, started for these tests (and stopped after them) unless it was up."""
    if os.geteuid() != 0 and shutil.which("slurmctld") is None:
        pytest.skip("a local Slurm needs root to install and start")
    was_up = cluster_is_up()
    env = ensure_cluster()
    yield env
    if not was_up:
        stop_cluster()


def _compile(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    result = subprocess.run(
        [str(VENV_BIN / "hetc"), "compile", str(SPEC), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_every_generated_batch_script_passes_sbatch_test_only(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    out = _compile(tmp_path)
    scripts = sorted((out / "launch").glob("*.sbatch"))
    assert [s.name for s in scripts] == ["ci.sbatch"]
    for script in scripts:
        checked = test_only(script, slurm_env)
        assert checked.returncode == 0, checked.stderr
        assert "to start at" in checked.stderr


def test_gpu_pools_ask_for_gpus_and_pass_sbatch_test_only(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    """The same pools as GPUs: each component asks for its GPUs (the local cluster's nodes
    carry two fake GPUs each), and Slurm accepts the job."""
    text = SPEC.read_text().replace("kind: cpu", "kind: gpu")
    text = text.replace(
        "{kind: shared-memory, bandwidth: 5GB/s}", "{kind: nvlink, bandwidth: 100GB/s}"
    )
    spec = tmp_path / "gpu.yaml"
    spec.write_text(text)
    out = tmp_path / "out"
    done = subprocess.run(
        [str(VENV_BIN / "hetc"), "compile", str(spec), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    script = out / "launch" / "ci.sbatch"
    lines = script.read_text().splitlines()
    assert lines.count("#SBATCH --gpus-per-node=2") == 2
    assert not any("--cpus-per-task" in line for line in lines)
    checked = test_only(script, slurm_env)
    assert checked.returncode == 0, checked.stderr


def test_het_job_starts_every_rank_and_takes_a_checkpoint_request(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    out = _compile(tmp_path)
    plan = plan_from_json((out / "plan.json").read_text())
    cluster = json.loads((out / "topology" / "cluster.json").read_text())
    topology = topology_of(plan, tied_embeddings=cluster["tied_embeddings"])
    run_dir = tmp_path / "run"
    env = {
        **os.environ,
        **slurm_env,
        "HETC_TORCHRUN": str(VENV_BIN / "torchrun"),
        "HETC_MAX_RESTARTS": "0",
        "HETC_RUN_DIR": str(run_dir),
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
    }
    log = tmp_path / "job.out"
    job = submit(out / "launch" / "ci.sbatch", env, [f"--output={log}"])
    deadline = time.monotonic() + 60
    while "JobState=RUNNING" not in show_job(job, env):
        assert time.monotonic() < deadline, show_job(job, env)
        time.sleep(0.2)
    time.sleep(1.0)
    subprocess.run(["scancel", "--batch", "--signal=USR1", job], env=env, check=True)
    state = wait_for_job(job, env, timeout=240)
    text = log.read_text()
    assert state == "COMPLETED", text

    # USR1 left a request, the step ran on, and the ranks took a checkpoint for it before the
    # run's final one (then removed the request).
    assert "USR1 received" in text
    assert not (run_dir / "checkpoint-request").exists(), text
    taken = sorted(p.name for p in (run_dir / "ckpt").glob("step-*") if ".tmp-" not in p.name)
    assert len(taken) >= 2 and "step-20" in taken, taken

    # Every rank of the plan started exactly once and verified each of its groups.
    records = [json.loads(p.read_text()) for p in sorted((run_dir / "startup").glob("*.json"))]
    assert len(records) == plan.world_size == topology.world_size == 6
    started = sorted((r["node"], r["local_rank"]) for r in records)
    expected = sorted((p.node, p.local_rank) for p in topology.processes)
    assert started == expected
    for record in records:
        names = sorted(g.name for g in topology.groups_of(record["rank"]))
        assert sorted(record["groups"]) == names
    assert len({r["torch_rank"] for r in records}) == 6
    assert text.count("ready (node") == 6
    # ... and trained the run's steps, every rank logging every step's (global) loss.
    steps = 20
    assert f"step {steps - 1} loss" in text
    for rank in range(6):
        lines = (run_dir / "metrics" / f"rank-{rank:05d}.jsonl").read_text().splitlines()
        logged = [json.loads(line) for line in lines]
        assert [m["step"] for m in logged] == list(range(steps))
        assert len({m["loss"] for m in logged}) == steps
    # The plan crosses two pools: the job had two het components on two partitions.
    assert len({p.node.split("@")[0] for p in topology.processes}) == 2


def test_a_requeued_job_resumes_in_the_same_run_directory(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    """`scontrol requeue` a running job submitted with `--from-scratch`: Slurm's SIGTERM
    reaches every torchrun through the node scripts (exit 76), the second run keeps the job
    id and so the run directory (hence checkpoint_dir), resumes (no HETC_FROM_SCRATCH), and
    the job's log keeps both runs. torchrun is tests/fake_torchrun.py: the runtime is not the
    subject. Checked to fail on the scripts before this change (no --from-scratch reached the
    first run) and without `--open-mode=append` (the requeue truncated the first run's log)."""
    out = _compile(tmp_path)
    fake = tmp_path / "torchrun"
    fake.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).parent / "fake_torchrun.py"}" "$@"\n'
    )
    fake.chmod(0o755)
    log, release, job_log = tmp_path / "torchrun.jsonl", tmp_path / "release", tmp_path / "job.out"
    env = {**os.environ, **slurm_env, "HETC_TORCHRUN": str(fake), "FAKE_LOG": str(log)}
    env = {k: v for k, v in env.items() if k not in ("HETC_RUN_DIR", "HETC_FROM_SCRATCH")}
    env["FAKE_RELEASE"] = str(release)
    submit_dir = tmp_path / "submit"
    submit_dir.mkdir()
    job = submit(
        out / "launch" / "ci.sbatch",
        env,
        [f"--output={job_log}"],
        script_args=["--from-scratch"],
        cwd=submit_dir,
    )

    def events(kind: str) -> list[dict[str, object]]:
        if not log.exists():
            return []
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        return [e for e in lines if e["event"] == kind]

    def wait_for_starts(count: int) -> None:
        deadline = time.monotonic() + 60
        while len(events("start")) < count:
            log_text = job_log.read_text() if job_log.exists() else ""
            assert time.monotonic() < deadline, show_job(job, env) + log_text
            time.sleep(0.2)

    nodes = 3
    wait_for_starts(nodes)
    subprocess.run(["scontrol", "requeue", job], env=env, check=True)
    # A requeued job starts again once its credentials expire: scripts/slurm-local.sh sets
    # cred_expire=10 s (Slurm's default is 120 s). Forcing StartTime=now before that makes
    # slurmctld kill the job ("Job credential revoked").
    wait_for_starts(2 * nodes)
    release.touch()
    assert wait_for_job(job, env, timeout=60) == "COMPLETED", job_log.read_text()

    starts = events("start")
    first, second = starts[:nodes], starts[nodes:]
    environment = [s["env"] for s in starts]
    assert all(isinstance(e, dict) for e in environment)
    assert {e["HETC_RUN_DIR"] for e in environment} == {str(submit_dir / f"hetc-run-{job}")}  # type: ignore[index]
    assert [s["env"]["HETC_FROM_SCRATCH"] for s in first] == ["1"] * nodes  # type: ignore[index]
    assert [s["env"]["HETC_FROM_SCRATCH"] for s in second] == [None] * nodes  # type: ignore[index]
    assert [s["env"]["SLURM_RESTART_COUNT"] for s in second] == ["1"] * nodes  # type: ignore[index]
    stopped = {e["pid"] for e in events("signal") if e["signal"] == "SIGTERM"}
    assert stopped == {s["pid"] for s in first}, "Slurm's TERM reached each first torchrun"
    text = job_log.read_text()
    assert text.count("stopped on TERM (torchrun exited") == nodes, text
    assert f"hetc: job {job} requeued (restart 1): resuming" in text
    assert text.index("stopped on TERM") < text.index("requeued (restart 1)"), "both runs kept"
