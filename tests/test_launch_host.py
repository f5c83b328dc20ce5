"""`hetc launch` refuses a plan this host cannot run (GPU ranks without GPUs, far more ranks
than cores) unless --force, and removes stale build locks from torch's extension cache, all
before any node starts. Checked against compiled examples and fake /dev and cache folders."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.launch_host import (
    RANKS_PER_CORE,
    STALE_AFTER,
    extension_roots,
    host_gpus,
    host_problems,
    plan_ranks,
    recover_stale_locks,
)
from hetc.units import plural

ROOT = Path(__file__).resolve().parent.parent
HETC_LAUNCH = (sys.executable, "-m", "hetc", "launch")
FAKE_TORCHRUN = '#!/usr/bin/env bash\necho started >> "$FAKE_STARTS"\n'


def _compile(spec: Path, out: Path) -> Path:
    result = CliRunner().invoke(app, ["compile", str(spec), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def gpu_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gpu") / "out"
    return _compile(ROOT / "examples" / "gptneo-a100-v100.yaml", out)


@pytest.fixture(scope="module")
def cpu_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _compile(ROOT / "examples" / "local-cpu.yaml", tmp_path_factory.mktemp("cpu") / "out")


def _launch(
    out: Path, tmp_path: Path, *options: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """`hetc launch` with a torchrun that only notes each start in FAKE_STARTS."""
    fake = tmp_path / "fake-torchrun"
    fake.write_text(FAKE_TORCHRUN, encoding="utf-8")
    fake.chmod(0o755)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HETC_")}
    return subprocess.run(
        [*HETC_LAUNCH, str(out), "--run-dir", str(tmp_path / "run"), *options],
        env={
            **environ,
            "HETC_TORCHRUN": str(fake),
            "FAKE_STARTS": str(tmp_path / "starts"),
            "TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions"),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_host_gpus_counts_the_nvidia_device_files(tmp_path: Path) -> None:
    """nvidia0 and nvidia1 are GPUs; nvidiactl and nvidia-uvm are the driver's other files."""
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "null"):
        (tmp_path / name).touch()
    assert host_gpus(tmp_path) == 2
    assert host_gpus(tmp_path / "absent") == 0


def test_plan_ranks_reads_the_device_kind_of_each_rank(cpu_plan: Path, gpu_plan: Path) -> None:
    """The CPU example's 4 ranks are CPU ranks; every rank of the A100/V100 example is a GPU
    rank (its plan's processes, counted from cluster.json independently here)."""
    assert plan_ranks(cpu_plan) == {"cpu": 4, "gpu": 0}
    text = (gpu_plan / "topology" / "cluster.json").read_text(encoding="utf-8")
    processes = text.count('"rank_file"')
    assert plan_ranks(gpu_plan) == {"cpu": 0, "gpu": processes}


def test_host_problems_at_and_past_each_limit() -> None:
    """GPU ranks up to the host's GPUs and ranks up to RANKS_PER_CORE per core pass; one
    more of either is a problem."""
    cores = 2
    most = RANKS_PER_CORE * cores
    assert host_problems({"gpu": 4}, gpus=4, cores=cores) == []
    assert host_problems({"cpu": most}, gpus=0, cores=cores) == []
    (gpu,) = host_problems({"gpu": 5}, gpus=4, cores=cores)
    assert gpu.startswith("the plan runs 5 ranks on GPUs and this host has 4 GPUs")
    (ranks,) = host_problems({"cpu": most + 1}, gpus=0, cores=cores)
    assert ranks.startswith(f"the plan starts {most + 1} ranks and this host has 2 cores")


def test_a_gpu_plan_on_this_cpu_host_is_refused_before_any_node_starts(
    gpu_plan: Path, tmp_path: Path
) -> None:
    """Exit 4, the reason and a To fix: line, and no node started."""
    assert host_gpus() < plan_ranks(gpu_plan)["gpu"]
    done = _launch(gpu_plan, tmp_path)
    assert done.returncode == 4, done.stderr
    assert "ranks on GPUs and this host has" in done.stderr
    assert "To fix: launch on the plan's machines" in done.stderr and "--force" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "starts").exists()


def test_too_many_ranks_for_the_cores_are_refused(tmp_path: Path) -> None:
    """A CPU plan with more ranks than RANKS_PER_CORE per core of this host: exit 4."""
    cores = len(os.sched_getaffinity(0))
    ranks = RANKS_PER_CORE * cores + 2
    spec = (ROOT / "examples" / "local-cpu.yaml").read_text(encoding="utf-8")
    spec = spec.replace("quota: 4, gpus_per_node: 2", f"quota: {ranks}, gpus_per_node: 2")
    spec = spec.replace("global_batch_size: 8", f"global_batch_size: {2 * ranks}")
    (tmp_path / "big.yaml").write_text(spec, encoding="utf-8")
    out = _compile(tmp_path / "big.yaml", tmp_path / "out")
    assert plan_ranks(out) == {"cpu": ranks, "gpu": 0}
    done = _launch(out, tmp_path)
    assert done.returncode == 4, done.stderr
    assert f"the plan starts {ranks} ranks and this host has {plural(cores, 'core')}" in done.stderr
    assert not (tmp_path / "starts").exists()


def test_force_starts_the_refused_plan_with_a_warning(gpu_plan: Path, tmp_path: Path) -> None:
    """--force: every node script starts (the fake torchrun notes it), after a warning (the
    site's prologue, which activates a venv of the plan's machines, is skipped)."""
    done = _launch(gpu_plan, tmp_path, "--force", "--quiet", HETC_PROLOGUE_DONE="1")
    assert done.returncode == 0, done.stderr
    assert "hetc: warning (--force): the plan runs" in done.stderr
    nodes = len(list((gpu_plan / "launch").glob("node*.sh")))
    assert (tmp_path / "starts").read_text(encoding="utf-8").count("started") == nodes


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_only_locks_of_builds_idle_past_the_limit_are_removed(tmp_path: Path) -> None:
    """A lock whose folder has not changed for STALE_AFTER goes (both cache layouts); one
    just taken, or one whose build still writes files, stays."""
    stale = tmp_path / "fused_adam" / "lock"
    layered = tmp_path / "py311_cpu" / "cpu_adam" / "lock"
    fresh = tmp_path / "building" / "lock"
    active = tmp_path / "active" / "lock"
    for lock in (stale, layered, fresh, active):
        lock.parent.mkdir(parents=True)
        lock.touch()
    (active.parent / "cpu_adam.o").touch()
    for path in (stale, layered, stale.parent, layered.parent, active):
        _age(path, STALE_AFTER + 60)
    removed = recover_stale_locks([tmp_path])
    assert sorted(removed) == sorted([stale, layered])
    assert not stale.exists() and not layered.exists()
    assert fresh.exists() and active.exists()


def test_extension_roots_follow_torchs_rules(tmp_path: Path) -> None:
    """TORCH_EXTENSIONS_DIR wins; else XDG_CACHE_HOME/torch_extensions."""
    assert extension_roots({"TORCH_EXTENSIONS_DIR": "/x"}) == [Path("/x")]
    assert extension_roots({"XDG_CACHE_HOME": "/c"}) == [Path("/c/torch_extensions")]


def test_launch_removes_a_stale_lock_and_says_so(cpu_plan: Path, tmp_path: Path) -> None:
    """The lock an interrupted build left (every later build would wait on it for ever) is
    gone after `hetc launch`, with a line naming it."""
    lock = tmp_path / "extensions" / "fused_adam" / "lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    _age(lock, STALE_AFTER + 60)
    _age(lock.parent, STALE_AFTER + 60)
    done = _launch(cpu_plan, tmp_path, "--quiet")
    assert done.returncode == 0, done.stderr
    assert f"hetc: removed the stale lock {lock}" in done.stderr
    assert not lock.exists()
