"""Helpers for tests that run jobs on the local Slurm cluster of scripts/slurm-local.sh.

Not a test module: tests import it. `ensure_cluster()` starts the cluster if it is not up and
returns the environment additions (SLURM_CONF) that every Slurm command needs; `submit`,
`wait_for_job` and `test_only` wrap sbatch and scontrol. There is no accounting storage on that
cluster (no sacct): job states come from `scontrol show job`, which keeps a finished job for
MinJobAge (300 s).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from hetc.elastic.slurm import TERMINAL

ROOT = Path(__file__).resolve().parent.parent
SLURM_SCRIPT = ROOT / "scripts" / "slurm-local.sh"
"""Starts, stops and reports on the local cluster (`bash SLURM_SCRIPT start|stop|status|env`)."""

POLL_S = 0.2
"""How often `wait_for_job` asks `scontrol show job` (`sbatch --wait` polls every 2-10 s)."""

TERMINAL_STATES = TERMINAL
"""Job states after which a job (or het-job component) never runs again."""

# Worst first: the overall state of a het job is that of its worst component.
_SEVERITY = (
    "BOOT_FAIL",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "DEADLINE",
    "TIMEOUT",
    "FAILED",
    "PREEMPTED",
    "CANCELLED",
    "COMPLETED",
)
_STATE = re.compile(r"\bJobState=(\S+)")
_ENV_LINE = re.compile(r"^export SLURM_CONF=(\S+)$", re.MULTILINE)


def _slurm_env(env: Mapping[str, str] | None) -> dict[str, str]:
    merged = dict(os.environ)
    if env:
        merged.update(env)
    return merged


def _script(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SLURM_SCRIPT), command],
        capture_output=True,
        text=True,
        check=False,
    )


def cluster_is_up() -> bool:
    """Whether the local cluster answers (`slurm-local.sh status`)."""
    return _script("status").returncode == 0


def stop_cluster() -> None:
    """Stop the local cluster (by its PID files); raises RuntimeError if that fails."""
    result = _script("stop")
    if result.returncode != 0:
        raise RuntimeError(f"{SLURM_SCRIPT} stop failed:\n{result.stdout}{result.stderr}")


def ensure_cluster() -> dict[str, str]:
    """Start the local cluster unless it is up; return {"SLURM_CONF": ...} for Slurm commands.

    Raises RuntimeError, with the script's output, if the cluster cannot be started.
    """
    result = _script("status")
    if result.returncode != 0:
        result = _script("start")
        if result.returncode != 0:
            raise RuntimeError(
                f"{SLURM_SCRIPT} start failed (exit {result.returncode}):\n"
                f"{result.stdout}{result.stderr}"
            )
    else:
        result = _script("env")
    found = _ENV_LINE.search(result.stdout)
    if found is None:
        raise RuntimeError(
            f"{SLURM_SCRIPT} printed no `export SLURM_CONF=...` line:\n"
            f"{result.stdout}{result.stderr}"
        )
    return {"SLURM_CONF": found.group(1)}


def submit(
    script_path: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
    *,
    script_args: Sequence[str] = (),
    cwd: str | os.PathLike[str] | None = None,
) -> str:
    """Submit a batch script with `sbatch --parsable` (from `cwd`, the job's submit directory;
    `script_args` after the script); return the job id (of a het job: the leader's id, which
    `scontrol show job` and `scancel` accept for the whole job)."""
    result = subprocess.run(
        ["sbatch", "--parsable", *extra_args, os.fspath(script_path), *script_args],
        capture_output=True,
        text=True,
        env=_slurm_env(env),
        check=False,
        cwd=cwd,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"sbatch {script_path} failed (exit {result.returncode}):\n"
            f"{result.stdout}{result.stderr}"
        )
    # --parsable prints "jobid" or "jobid;cluster".
    return result.stdout.strip().split(";", 1)[0]


def show_job(job_id: str, env: Mapping[str, str] | None = None) -> str:
    """`scontrol show job` of a job: one record per component for a het job."""
    result = subprocess.run(
        ["scontrol", "show", "job", job_id],
        capture_output=True,
        text=True,
        env=_slurm_env(env),
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"scontrol show job {job_id} failed (exit {result.returncode}):\n"
            f"{result.stdout}{result.stderr}"
        )
    return result.stdout


def job_states(record: str) -> list[str]:
    """The JobState of each component in a `scontrol show job` output."""
    return _STATE.findall(record)


def overall_state(states: Sequence[str]) -> str:
    """One state for a job whose components are all in a terminal state: the worst of them."""
    for state in _SEVERITY:
        if state in states:
            return state
    return states[0]


def wait_for_job(job_id: str, env: Mapping[str, str] | None = None, timeout: float = 120.0) -> str:
    """Poll until every component of the job is in a terminal state; return the overall state
    (COMPLETED, FAILED, CANCELLED, TIMEOUT, ...).

    On timeout the job is cancelled and TimeoutError is raised with its last record.
    """
    deadline = time.monotonic() + timeout
    while True:
        record = show_job(job_id, env)
        states = job_states(record)
        if not states:
            raise RuntimeError(f"no JobState in `scontrol show job {job_id}`:\n{record}")
        if all(state in TERMINAL_STATES for state in states):
            return overall_state(states)
        if time.monotonic() >= deadline:
            subprocess.run(
                ["scancel", job_id],
                capture_output=True,
                env=_slurm_env(env),
                check=False,
            )
            raise TimeoutError(
                f"job {job_id} not finished after {timeout:g} s (cancelled); states {states}:\n"
                f"{record}"
            )
        time.sleep(POLL_S)


def test_only(
    script_path: str | os.PathLike[str], env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Check a batch script with `sbatch --test-only` without running it (the verdict, e.g.
    "sbatch: Job 7 to start at ...", is on stderr; returncode 0 means it would be accepted)."""
    return subprocess.run(
        ["sbatch", "--test-only", os.fspath(script_path)],
        capture_output=True,
        text=True,
        env=_slurm_env(env),
        check=False,
    )


# pytest would collect a module-level function named test_*; this one is a helper.
test_only.__test__ = False  # type: ignore[attr-defined]
