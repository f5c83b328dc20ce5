"""Node scripts and Slurm batch scripts under signals, run as real processes: torchrun replaced
by tests/fake_torchrun.py (it records its arguments, environment and the signals that reach it,
and exits as torchrun does), srun by a shell script that starts each node's task in the
background and passes SIGTERM on, as srun does.

What is pinned: USR1 (to the script, or to torchrun itself) asks for a checkpoint and the run
goes on; TERM, INT and HUP reach torchrun as one SIGTERM and the script exits 76 (preempted)
whatever torchrun returns; a requeued Slurm job resumes (HETC_FROM_SCRATCH only on its first
run); `--from-scratch` reaches the runtime's environment. Each of these tests failed on the
scripts that exec'd torchrun (checked once, before the change)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.emit.launch import MAX_RESTARTS, SHUTDOWN_MARGIN, TERM_GRACE
from hetc.plan.outcome import EXIT_PREEMPTED

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "examples" / "slurm-local-cpu.yaml"
FAKE = Path(__file__).resolve().parent / "fake_torchrun.py"
WAIT_S = 20.0
"""The longest a test waits for a script to react (a loaded 2-core machine is slow)."""

FAKE_SRUN = """#!/usr/bin/env bash
# One task per node of the step in the background, SLURM_NODEID set; SIGTERM goes to every task
# (srun signals the whole step); exits with the highest task status.
echo "$*" >> "$FAKE_LOG.srun"
while [[ "$1" != bash ]]; do shift; done
shift
read -r -a nodes <<< "$HETC_STEP_NODES"
pids=()
for (( i = 0; i < ${#nodes[@]}; i++ )); do
    SLURM_NODEID=$i bash "$1" &
    pids+=($!)
done
trap 'echo TERM >> "$FAKE_LOG.srun"; kill -TERM "${pids[@]}" 2>/dev/null' TERM
worst=0
for pid in "${pids[@]}"; do
    while true; do
        code=0
        wait "$pid" || code=$?
        if (( code > 128 )) && kill -0 "$pid" 2>/dev/null; then continue; fi
        break
    done
    (( code > worst )) && worst=$code
done
exit "$worst"
"""

FAKE_SCONTROL = """#!/usr/bin/env bash
if [[ "$1 $2" == "show job" ]]; then
    printf 'JobId=%s JobName=x\\n   Command=%s\\n' "$3" "$FAKE_SUBMITTED"
elif [[ "$1 $2" == "show hostnames" ]]; then
    echo fake-host-1
fi
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("compiled") / "out"
    result = CliRunner().invoke(app, ["compile", str(SPEC), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


class Fake:
    """The fake torchrun's files: its executable, log and release file."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "fakebin"
        self.bin.mkdir()
        self.torchrun = self.bin / "torchrun"
        self.torchrun.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
        self.torchrun.chmod(0o755)
        for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)
        self.log = root / "torchrun.jsonl"
        self.release = root / "release"
        self.run_dir = root / "run"

    def env(self, **extra: str) -> dict[str, str]:
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("HETC_", "FAKE_"))}
        return {
            **environ,
            "PATH": f"{self.bin}{os.pathsep}{environ['PATH']}",
            "HETC_TORCHRUN": str(self.torchrun),
            "HETC_RUN_DIR": str(self.run_dir),
            "FAKE_LOG": str(self.log),
            "FAKE_RELEASE": str(self.release),
            **extra,
        }

    def events(self) -> list[dict[str, object]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def of(self, kind: str) -> list[dict[str, object]]:
        return [e for e in self.events() if e["event"] == kind]


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _start(script: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", str(script), *args],
        env=env,
        cwd=script.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


@pytest.fixture
def fake(tmp_path: Path) -> Fake:
    return Fake(tmp_path)


def _node_script(compiled: Path) -> Path:
    return compiled / "launch" / "node0000.sh"


def test_usr1_to_the_script_or_to_torchrun_requests_a_checkpoint_and_training_goes_on(
    compiled: Path, fake: Fake
) -> None:
    """USR1 writes the checkpoint request and nothing stops; torchrun (and through it the
    workers) starts with USR1 ignored, so one sent to torchrun by mistake is harmless."""
    process = _start(_node_script(compiled), fake.env())
    _wait_until(lambda: bool(fake.of("start")), "torchrun to start")
    (start,) = fake.of("start")
    assert "SIGUSR1" in start["ignored"]  # type: ignore[operator]
    process.send_signal(signal.SIGUSR1)
    request = fake.run_dir / "checkpoint-request"
    _wait_until(request.exists, "the checkpoint request")
    os.kill(int(start["pid"]), signal.SIGUSR1)  # type: ignore[call-overload]
    time.sleep(0.3)
    assert process.poll() is None, process.communicate()[0]
    fake.release.touch()
    output, _ = process.communicate(timeout=WAIT_S)
    assert process.returncode == 0, output
    assert "USR1: checkpoint requested" in output
    assert not fake.of("signal")
    assert fake.of("exit") == [{"pid": start["pid"], "event": "exit", "code": 0}]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_reaches_torchrun_as_one_sigterm_and_the_script_exits_preempted(
    compiled: Path, fake: Fake, sig: signal.Signals
) -> None:
    """TERM (or HUP) to the script: torchrun gets one SIGTERM (it passes it to the workers,
    which checkpoint), the script waits for it and exits 76 though torchrun exits 1."""
    process = _start(_node_script(compiled), fake.env())
    _wait_until(lambda: bool(fake.of("start")), "torchrun to start")
    process.send_signal(sig)
    output, _ = process.communicate(timeout=WAIT_S)
    assert [e["signal"] for e in fake.of("signal")] == ["SIGTERM"], output
    assert [e["code"] for e in fake.of("exit")] == [1]
    assert process.returncode == EXIT_PREEMPTED, output
    assert f"{sig.name.removeprefix('SIG')}: the ranks checkpoint and stop" in output
    (start,) = fake.of("start")
    env = start["env"]
    assert isinstance(env, dict)
    assert env["HETC_TERM_GRACE"] == str(TERM_GRACE)
    assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == str(TERM_GRACE + SHUTDOWN_MARGIN)


def test_ctrl_c_reaches_torchrun_as_one_sigterm_not_sigint(compiled: Path, fake: Fake) -> None:
    """A terminal's Ctrl-C signals the script's whole process group: torchrun ignores SIGINT
    (its workers would die of it without a checkpoint) and gets the script's SIGTERM."""
    process = _start(_node_script(compiled), fake.env(HETC_TERM_GRACE="7"))
    _wait_until(lambda: bool(fake.of("start")), "torchrun to start")
    os.killpg(process.pid, signal.SIGINT)
    output, _ = process.communicate(timeout=WAIT_S)
    assert [e["signal"] for e in fake.of("signal")] == ["SIGTERM"], output
    assert process.returncode == EXIT_PREEMPTED, output
    (start,) = fake.of("start")
    assert "SIGINT" in start["ignored"]  # type: ignore[operator]
    env = start["env"]
    assert isinstance(env, dict)
    assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == str(7 + SHUTDOWN_MARGIN), "follows the grace"


@pytest.mark.parametrize(("outcome", "code"), [("0", 0), ("1", 1), ("kill", 128 + 9)])
def test_without_a_signal_the_script_exits_with_torchruns_status(
    compiled: Path, fake: Fake, outcome: str, code: int
) -> None:
    """Done is 0, a failed rank is torchrun's 1, a killed torchrun its 128 + signal."""
    fake.release.touch()
    done = subprocess.run(
        ["bash", str(_node_script(compiled))],
        env=fake.env(FAKE_EXIT=outcome),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert done.returncode == code, done.stderr


def test_from_scratch_reaches_the_runtime_and_resuming_is_the_default(
    compiled: Path, fake: Fake
) -> None:
    """`--from-scratch` exports HETC_FROM_SCRATCH=1 to the ranks; without it none is set and
    no flag is passed (the runtime resumes by default); torchrun does not restart by itself."""
    fake.release.touch()
    script = _node_script(compiled)
    for args in ((), ("--from-scratch",)):
        done = subprocess.run(
            ["bash", str(script), *args], env=fake.env(), capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    first, second = fake.of("start")
    assert first["env"]["HETC_FROM_SCRATCH"] is None  # type: ignore[index]
    assert second["env"]["HETC_FROM_SCRATCH"] == "1"  # type: ignore[index]
    for start in (first, second):
        argv = start["argv"]
        assert isinstance(argv, list)
        assert argv[-3:] == ["-m", "hetc.runtime", str(compiled.resolve())]
        assert f"--max-restarts={MAX_RESTARTS}" in argv and MAX_RESTARTS == 0

    wrong = subprocess.run(["bash", str(script), "--resume"], env=fake.env(), capture_output=True)
    assert wrong.returncode == 2
    assert b"usage: bash node0000.sh [--from-scratch]" in wrong.stderr
    grace = fake.env(HETC_TERM_GRACE="1m")
    wrong = subprocess.run(["bash", str(script)], env=grace, capture_output=True)
    assert wrong.returncode == 2
    assert b"HETC_TERM_GRACE=1m is not a whole number of seconds" in wrong.stderr
    assert len(fake.of("start")) == 2, "nothing started"


def _batch_env(fake: Fake, compiled: Path, work: Path, **extra: str) -> dict[str, str]:
    work.mkdir(exist_ok=True)
    return fake.env(
        SLURM_JOB_ID="4242",
        SLURM_JOB_NODELIST_HET_GROUP_0="fake-host-[1-2]",
        SLURM_SUBMIT_DIR=str(work),
        FAKE_SUBMITTED=str(compiled / "launch" / "ci.sbatch"),
        **extra,
    )


def test_term_to_the_batch_shell_reaches_every_torchrun_and_the_job_exits_preempted(
    compiled: Path, fake: Fake, tmp_path: Path
) -> None:
    """`scancel --batch --signal=TERM`, or `--signal=B:TERM@...`: the batch shell passes it to
    the step, every node script to its torchrun; the job's status is 76."""
    env = _batch_env(fake, compiled, tmp_path / "work")
    nodes = 3
    process = _start(compiled / "launch" / "ci.sbatch", env)
    _wait_until(lambda: len(fake.of("start")) == nodes, "every torchrun to start")
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=WAIT_S)
    assert process.returncode == EXIT_PREEMPTED, output
    assert [e["signal"] for e in fake.of("signal")] == ["SIGTERM"] * nodes, output
    assert "TERM received: the ranks checkpoint and stop" in output


def test_a_requeued_job_resumes_in_the_same_run_directory(
    compiled: Path, fake: Fake, tmp_path: Path
) -> None:
    """`--from-scratch` holds for the job's first run only: a requeue (SLURM_RESTART_COUNT > 0,
    same job id) resumes what the first run saved, in the same HETC_RUN_DIR."""
    fake.release.touch()
    work = tmp_path / "work"
    script = compiled / "launch" / "ci.sbatch"
    runs = []
    for restart, args in (("0", ("--from-scratch",)), ("1", ("--from-scratch",))):
        env = _batch_env(fake, compiled, work, SLURM_RESTART_COUNT=restart)
        env.pop("HETC_RUN_DIR")
        done = subprocess.run(
            ["bash", str(script), *args], env=env, cwd=work, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
        runs.append(done.stderr)
        env = _batch_env(fake, compiled, work, SLURM_RESTART_COUNT=restart, HETC_FROM_SCRATCH="1")
        env.pop("HETC_RUN_DIR")
        done = subprocess.run(["bash", str(script)], env=env, cwd=work, capture_output=True)
        assert done.returncode == 0, done.stderr
    starts = fake.of("start")
    assert len(starts) == 4 * 3
    scratch = [s["env"]["HETC_FROM_SCRATCH"] for s in starts]  # type: ignore[index]
    assert scratch == ["1"] * 6 + [None] * 6
    assert {s["env"]["HETC_RUN_DIR"] for s in starts} == {str(work / "hetc-run-4242")}  # type: ignore[index]
    assert "requeued (restart 1): resuming" in runs[1]


WORKER = r"""
import json, os, signal, sys, time
def note(**event):
    with open(os.environ["WORKER_LOG"], "a") as log:
        log.write(json.dumps({"rank": int(os.environ["LOCAL_RANK"]), **event}) + "\n")
def on_term(signum, frame):
    note(event="term")
    time.sleep(0.5)  # a checkpoint's worth of work
    note(event="exit", code=76)
    os._exit(76)
signal.signal(signal.SIGTERM, on_term)
note(event="start", usr1_ignored=signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN)
code = int(os.environ.get("WORKER_EXIT", "-1"))
if code >= 0:
    note(event="exit", code=code)
    sys.exit(code)
time.sleep(120)
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.slow
def test_real_torchrun_passes_sigterm_on_and_reports_any_worker_exit_as_1(
    tmp_path: Path,
) -> None:
    """torch's torchrun under a node script, with workers that act as the runtime promises
    (exit 75 or 76): USR1 to torchrun itself is ignored; SIGTERM to the script reaches every
    worker once, which stop with 76, torchrun exits 1 and the script 76; workers that exit 75
    on their own make torchrun exit 1, which the script passes on (what docs/compile.md says
    torchrun does with the runtime's codes)."""
    spec = tmp_path / "one.yaml"
    spec.write_text(
        (ROOT / "examples" / "local-cpu.yaml")
        .read_text()
        .replace("quota: 4, gpus_per_node: 2", "quota: 2, gpus_per_node: 2")
        .replace("data/tiny-corpus.bin", str(ROOT / "examples" / "data" / "tiny-corpus.bin"))
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["compile", str(spec), "-o", str(out)])
    assert result.exit_code == 0, result.output
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER)
    wrapper = tmp_path / "torchrun"
    real = Path(sys.executable).parent / "torchrun"
    # the node script's torchrun, with the worker in place of `-m hetc.runtime OUT`
    wrapper.write_text(f'#!/usr/bin/env bash\nexec "{real}" "${{@:1:$#-3}}" "{worker}"\n')
    wrapper.chmod(0o755)
    log = tmp_path / "workers.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HETC_", "WORKER_"))}
    env.update(
        HETC_TORCHRUN=str(wrapper),
        HETC_RUN_DIR=str(tmp_path / "run"),
        HETC_RDZV_ENDPOINT=f"127.0.0.1:{_free_port()}",
        WORKER_LOG=str(log),
    )

    def events() -> list[dict[str, object]]:
        return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []

    script = out / "launch" / "node0000.sh"
    process = _start(script, env)
    deadline = time.monotonic() + 120
    while len([e for e in events() if e["event"] == "start"]) < 2:
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[0]
        time.sleep(0.2)
    assert all(e["usr1_ignored"] for e in events() if e["event"] == "start")
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    (agent,) = [int(pid) for pid in children]
    os.kill(agent, signal.SIGUSR1)
    time.sleep(0.5)
    assert process.poll() is None, "USR1 to torchrun stopped nothing"
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == EXIT_PREEMPTED, output
    assert "(torchrun exited 1)" in output
    ends = sorted((e["rank"], e["event"], e.get("code")) for e in events() if e["event"] != "start")
    assert ends == [(0, "exit", 76), (0, "term", None), (1, "exit", 76), (1, "term", None)]

    log.unlink()
    done = subprocess.run(
        ["bash", str(script)],
        # a port of its own: the first agent's store may still hold the old one
        env={**env, "WORKER_EXIT": "75", "HETC_RDZV_ENDPOINT": f"127.0.0.1:{_free_port()}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert [e["code"] for e in events() if e["event"] == "exit"] == [75, 75]
    assert done.returncode == 1, done.stderr
