"""`hetc launch`: the compiled local-cpu example's node scripts, run as they are, with torchrun
replaced by a fake (HETC_TORCHRUN) that reports what it was given and then fails, sleeps or
floods its output on request; and once with the real torchrun, end to end."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.local_launch import NodeScript, finished_ranks
from hetc.plan.outcome import (
    EXIT_DONE,
    EXIT_PEER_LOST,
    EXIT_PREEMPTED,
    CheckpointRef,
    Outcome,
    outcome_path,
    write_outcome,
)

ROOT = Path(__file__).resolve().parent.parent
LOCAL = ROOT / "examples" / "local-cpu.yaml"
LONG = 3000
"""Characters in a flood line: more than a pipe writes atomically."""

FAKE_TORCHRUN = r"""#!/usr/bin/env bash
where="out=$HETC_OUT run=$HETC_RUN_DIR extra=${FAKE_EXTRA:-} scratch=${HETC_FROM_SCRATCH:-}"
echo "fake-torchrun node=$HETC_NODE $where $*"
echo "fake-torchrun stderr $HETC_NODE" >&2
record_pid() {  # atomically: a node stopped at once leaves no empty pid file
    local f; f=$(mktemp "$FAKE_PIDS/.new.XXXXXX"); echo "$1" > "$f"; mv "$f" "${f/.new./pid.}"
}
record_pid $$
if [[ -n "${FAKE_LINES:-}" ]]; then
    long=$(printf 'x%.0s' $(seq "$FAKE_LONG"))
    for i in $(seq "$FAKE_LINES"); do echo "flood $i $HETC_NODE $long"; done
fi
if [[ "$HETC_NODE" == "${FAKE_FAIL_NODE:-}" ]]; then
    for i in $(seq 30); do echo "fail line $i"; done
    if [[ -n "${FAKE_RECORD:-}" ]]; then  # an outcome record, stamped now
        mkdir -p "$HETC_RUN_DIR/outcome"
        sed "s/__NOW__/$(date +%s.%N)/" "$FAKE_RECORD" > "$HETC_RUN_DIR/outcome/rank-00001.json"
    fi
    exit "${FAKE_FAIL_CODE:-3}"
fi
sleep "${FAKE_SLEEP:-0}" &  # a child of its own: stopping the node must reach its group
record_pid $!
wait
"""

PREFIXED = re.compile(r"\[node(\d{4}) ([^\]]+)\] (.*)")


def _compile(out: Path) -> Path:
    result = CliRunner().invoke(app, ["compile", str(LOCAL), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _compile(tmp_path_factory.mktemp("compiled") / "out")


@pytest.fixture(scope="module")
def node_ids(compiled: Path) -> list[str]:
    cluster = json.loads((compiled / "topology" / "cluster.json").read_text(encoding="utf-8"))
    ids = [node["id"] for node in cluster["nodes"]]
    assert len(ids) == 2 and all(node["processes"] for node in cluster["nodes"])
    return ids


@pytest.fixture
def fake(tmp_path: Path) -> dict[str, str]:
    """The environment for a run with the fake torchrun; FAKE_PIDS collects its process ids."""
    script = tmp_path / "fake-torchrun"
    script.write_text(FAKE_TORCHRUN, encoding="utf-8")
    script.chmod(0o755)
    (tmp_path / "pids").mkdir()
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("HETC_", "FAKE_"))}
    return {
        **environ,
        "HETC_TORCHRUN": str(script),
        "FAKE_PIDS": str(tmp_path / "pids"),
        "FAKE_LONG": str(LONG),
    }


def _launch(
    out: Path, env: dict[str, str], *options: str, timeout: float = 60, verbose: bool = True
) -> subprocess.CompletedProcess[str]:
    """`hetc launch`, by default with --verbose (node lines on stdout, as these tests read
    them), in the fake's temporary folder (the default run directory lands there)."""
    return subprocess.run(
        [sys.executable, "-m", "hetc", "launch", str(out), *options]
        + (["--verbose"] if verbose else []),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=Path(env["FAKE_PIDS"]).parent if "FAKE_PIDS" in env else None,
    )


def _started(stdout: str) -> dict[str, list[str]]:
    """Node id -> the fake's first line in each of its runs (one per start)."""
    starts: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        match = PREFIXED.fullmatch(line)
        if match and match[3].startswith("fake-torchrun node="):
            assert match[3].startswith(f"fake-torchrun node={match[2]} "), line
            starts.setdefault(match[2], []).append(match[3])
    return starts


def _running(pid: int) -> bool:
    """Alive and not a zombie: an orphan's zombie waits for init, which reaps when it likes."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _assert_all_gone(env: dict[str, str]) -> None:
    """Every process the fake torchruns started has ended: none was left behind."""
    pids = [int(p.read_text()) for p in Path(env["FAKE_PIDS"]).glob("pid.*")]
    assert pids
    deadline = time.monotonic() + 5  # a killed process can take a moment to go
    while any(map(_running, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in pids if _running(pid)]


def test_every_node_starts_once_and_every_line_arrives_whole(
    compiled: Path, node_ids: list[str], fake: dict[str, str], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    lines = 200
    env = {**fake, "FAKE_LINES": str(lines), "FAKE_EXTRA": "passed-through"}
    done = _launch(compiled, env, "--run-dir", str(run_dir))
    assert done.returncode == 0, done.stderr
    starts = _started(done.stdout)
    assert sorted(starts) == sorted(node_ids)
    assert all(len(runs) == 1 for runs in starts.values())
    endpoints, ids = set(), set()
    for (first,) in starts.values():
        assert f" out={compiled.resolve()} run={run_dir} extra=passed-through " in first
        assert "--max-restarts=0 " in first and first.endswith(
            f"-m hetc.runtime {compiled.resolve()}"
        )
        endpoints |= set(re.findall(r"--rdzv-endpoint=(127\.0\.0\.1:\d+) ", first))
        ids |= set(re.findall(r"--rdzv-id=(local-\d+) ", first))
    assert len(endpoints) == 1 and len(ids) == 1
    floods = {node_id: 0 for node_id in node_ids}
    for line in done.stdout.splitlines():
        match = PREFIXED.fullmatch(line)
        assert match, line[:200]
        assert node_ids[int(match[1])] == match[2]
        if match[3].startswith("flood "):
            assert match[3] == f"flood {floods[match[2]] + 1} {match[2]} {'x' * LONG}"
            floods[match[2]] += 1
    assert floods == {node_id: lines for node_id in node_ids}
    for node_id in node_ids:
        assert f"] fake-torchrun stderr {node_id}" in done.stderr
    end = done.stderr.splitlines()
    assert end[end.index("hetc: done: all 2 nodes exited 0") + 1] == "hetc: summary"


def test_the_users_restarts_setting_is_kept(compiled: Path, fake: dict[str, str]) -> None:
    done = _launch(compiled, {**fake, "HETC_MAX_RESTARTS": "2"})
    assert done.returncode == 0, done.stderr
    assert all("--max-restarts=2 " in run[0] for run in _started(done.stdout).values())


def test_a_failing_node_stops_the_others_and_is_named(
    compiled: Path, node_ids: list[str], fake: dict[str, str]
) -> None:
    failing = node_ids[1]
    began = time.monotonic()
    done = _launch(compiled, {**fake, "FAKE_FAIL_NODE": failing, "FAKE_SLEEP": "60"})
    elapsed = time.monotonic() - began
    assert done.returncode == 1, done.stderr
    assert elapsed < 20, elapsed
    _, _, summary = done.stderr.partition(f"hetc: node0001 {failing} failed first, exit code 3")
    assert summary, done.stderr
    tail = [line.strip() for line in summary.splitlines()[1:-1]]
    # the node's stdout and stderr are read apart, so its one stderr line may land anywhere
    fails = [line for line in tail if line.startswith("fail line")]
    assert len(tail) == 20 and len(fails) >= 19
    assert fails == [f"fail line {i}" for i in range(31 - len(fails), 31)]
    assert summary.splitlines()[-1] == (
        f"hetc: failed: node0001 {failing} exited first (exit code 3);"
        f" stopped node0000 {node_ids[0]}"
    )
    _assert_all_gone(fake)


@pytest.mark.parametrize(
    ("code", "meaning", "status"),
    [(75, "peer lost", 75), (76, "preempted", 76), (1, "failed", 1)],
)
def test_the_last_line_says_what_the_first_nodes_exit_status_means(
    compiled: Path,
    node_ids: list[str],
    fake: dict[str, str],
    code: int,
    meaning: str,
    status: int,
) -> None:
    """A node script's 75 or 76 (hetc.plan.outcome) is a run that can resume: hetc launch says
    so and exits with it; any other status is a failure, exit 1."""
    failing = node_ids[1]
    env = {**fake, "FAKE_FAIL_NODE": failing, "FAKE_FAIL_CODE": str(code), "FAKE_SLEEP": "60"}
    done = _launch(compiled, env)
    assert done.returncode == status, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith(
        f"hetc: {meaning}: node0001 {failing} exited first (exit code {code});"
        f" stopped node0000 {node_ids[0]}"
    ), last
    resumable = "resumes from its newest complete checkpoint" in last
    assert resumable == (meaning != "failed")
    _assert_all_gone(fake)


def test_the_ranks_outcome_records_say_a_peer_was_lost_where_torchrun_says_1(
    compiled: Path, node_ids: list[str], fake: dict[str, str], tmp_path: Path
) -> None:
    """torchrun exits 1 whatever its workers returned: a survivor's outcome record of this run
    (exit 75, naming the lost rank) makes the run "peer lost", exit 75, with the record's
    reason; a record older than the launch is a previous run's and is ignored. Checked to
    fail without the records (the last line says "failed", exit 1)."""
    reason = "peer lost: plan rank 0 (node 'x', local rank 0) stopped answering"

    def record(stamp: float) -> Outcome:
        return Outcome(
            code=EXIT_PEER_LOST,
            reason=reason,
            rank=1,
            node=node_ids[1],
            local_rank=0,
            plan_hash=None,
            step=3,
            time=stamp,
        )

    template = tmp_path / "record.json"
    template.write_text(json.dumps(record(0.0).to_json()).replace('"time": 0.0', '"time": __NOW__'))
    run_dir = tmp_path / "run"
    env = {**fake, "FAKE_FAIL_NODE": node_ids[1], "FAKE_FAIL_CODE": "1", "FAKE_SLEEP": "60"}
    done = _launch(compiled, {**env, "FAKE_RECORD": str(template)}, "--run-dir", str(run_dir))
    assert done.returncode == EXIT_PEER_LOST, done.stderr
    assert f"hetc: the ranks' outcome records say: plan rank 1: {reason}" in done.stderr
    assert done.stderr.splitlines()[-1].startswith(
        f"hetc: peer lost: node0001 {node_ids[1]} exited first (exit code 1)"
    )
    write_outcome(outcome_path(run_dir, 1), record(time.time() - 60))
    done = _launch(compiled, env, "--run-dir", str(run_dir))
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1].startswith(f"hetc: failed: node0001 {node_ids[1]}")


def test_resuming_is_the_default_and_from_scratch_reaches_every_node(
    compiled: Path, fake: dict[str, str]
) -> None:
    """Without --from-scratch no node starts over, even with HETC_FROM_SCRATCH left in the
    caller's environment; with it, every node script gets --from-scratch."""
    done = _launch(compiled, {**fake, "HETC_FROM_SCRATCH": "1"})
    assert done.returncode == 0, done.stderr
    assert all(" scratch= " in run[0] for run in _started(done.stdout).values())
    assert "(resuming from the newest complete checkpoint, if any)" in done.stderr
    done = _launch(compiled, fake, "--from-scratch", "--node", "1")
    assert done.returncode == 0, done.stderr
    assert all(" scratch=1 " in run[0] for run in _started(done.stdout).values())
    assert "(from scratch)" in done.stderr
    join = next(line for line in done.stderr.splitlines() if "to join it:" in line)
    assert join.endswith("node0000.sh --from-scratch")


def test_timeout_stops_every_node_and_fails(compiled: Path, fake: dict[str, str]) -> None:
    began = time.monotonic()
    done = _launch(compiled, {**fake, "FAKE_SLEEP": "60"}, "--timeout", "1")
    assert done.returncode == 1, done.stderr
    assert time.monotonic() - began < 20
    assert "hetc: failed: timed out after 1 s; stopped node0000" in done.stderr
    _assert_all_gone(fake)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_stops_every_node(
    compiled: Path, fake: dict[str, str], sig: signal.Signals, code: int
) -> None:
    hetc = subprocess.Popen(
        [sys.executable, "-m", "hetc", "launch", str(compiled)],
        env={**fake, "FAKE_SLEEP": "60"},
        cwd=Path(fake["FAKE_PIDS"]).parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while len(list(Path(fake["FAKE_PIDS"]).iterdir())) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # the pid files are written; let each fake reach its `wait`
    hetc.send_signal(sig)
    _, stderr = hetc.communicate(timeout=30)
    assert hetc.returncode == code, stderr
    assert stderr.splitlines()[-1] == (
        f"hetc: {sig.name}: stopped every node (preempted); `hetc launch {compiled}` resumes"
        " from its newest complete checkpoint"
    ), "each node script forwarded the stop to its torchrun and exited 76"
    _assert_all_gone(fake)


def test_node_option_starts_only_that_node(
    compiled: Path, node_ids: list[str], fake: dict[str, str]
) -> None:
    done = _launch(compiled, fake, "--node", "1")
    assert done.returncode == 0, done.stderr
    assert list(_started(done.stdout)) == [node_ids[1]]
    assert f"hetc: not starting node0000 {node_ids[0]}; to join it: HETC_RDZV_ENDPOINT=" in (
        done.stderr
    )

    done = _launch(compiled, fake, "--node", "2")
    assert done.returncode == 2
    assert "hetc: --node 2: the plan's nodes are 0, 1" in done.stderr


def test_edited_or_foreign_output_is_refused(tmp_path: Path, fake: dict[str, str]) -> None:
    out = _compile(tmp_path / "out")
    script = out / "launch" / "node0000.sh"
    script.write_text(script.read_text(encoding="utf-8") + "echo hi\n", encoding="utf-8")
    (out / "notes.txt").write_text("mine\n", encoding="utf-8")
    done = _launch(out, fake)
    assert done.returncode == 1
    assert "launch/node0000.sh was edited" in done.stderr
    assert "notes.txt is not in the manifest" in done.stderr
    assert not _started(done.stdout)
    assert "--plan" not in done.stderr

    plan = out / "plan.json"
    plan.write_text(
        plan.read_text(encoding="utf-8").replace('"microbatches": 2', '"microbatches": 2 ')
    )
    done = _launch(out, fake)
    assert done.returncode == 1
    hint = f"hetc: to run the edited plan: hetc compile SPEC --plan {out}/plan.json -o {out}"
    assert done.stderr.splitlines()[-1] == hint

    (tmp_path / "plain").mkdir()
    done = _launch(tmp_path / "plain", fake)
    assert done.returncode == 1 and "it is not hetc compile output" in done.stderr
    done = _launch(tmp_path / "absent", fake)
    assert done.returncode == 1 and "is not a directory" in done.stderr
    assert not list(Path(fake["FAKE_PIDS"]).iterdir())


def test_a_missing_torchrun_is_an_environment_problem(
    compiled: Path, fake: dict[str, str], tmp_path: Path
) -> None:
    done = _launch(compiled, {**fake, "HETC_TORCHRUN": str(tmp_path / "no-torchrun")})
    assert done.returncode == 4
    assert "is not an executable" in done.stderr and "To fix:" in done.stderr


def test_launch_imports_neither_torch_nor_deepspeed(compiled: Path, fake: dict[str, str]) -> None:
    probe = (
        "import sys\n"
        "from hetc.cli import app\n"
        f"try:\n    app(['launch', {str(compiled)!r}], prog_name='hetc')\n"
        "except SystemExit as e:\n    assert not e.code, e.code\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'deepspeed')]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=fake, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stderr


@pytest.mark.slow
def test_real_torchrun_starts_every_rank(compiled: Path, tmp_path: Path) -> None:
    """The real torchrun beside this Python, found without HETC_TORCHRUN or an activated venv."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HETC_")}
    env = {**environ, "PATH": "/usr/bin:/bin", "HETC_BACKEND": "gloo"}
    env["HETC_STARTUP_TIMEOUT"] = "60"
    env.pop("VIRTUAL_ENV", None)
    done = _launch(
        compiled, env, "--run-dir", str(tmp_path / "run"), "--timeout", "240", timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "hetc: done: all 2 nodes exited 0" in done.stderr.splitlines()
    for rank in range(4):
        ready = [
            line
            for line in done.stdout.splitlines()
            # torchrun's --tee prefixes each worker's lines with `[default<local rank>]:`
            if PREFIXED.fullmatch(line) and f"hetc-runtime: rank {rank} of 4 ready" in line
        ]
        assert len(ready) == 1, (rank, done.stdout[-3000:])


def test_a_term_grace_that_is_not_seconds_is_an_environment_problem(
    compiled: Path, fake: dict[str, str]
) -> None:
    """HETC_TERM_GRACE sets how long hetc waits before SIGKILL (and the scripts' arithmetic):
    a value that is not whole seconds stops hetc launch before any node starts."""
    done = _launch(compiled, {**fake, "HETC_TERM_GRACE": "soon"})
    assert done.returncode == 4
    assert "HETC_TERM_GRACE=soon is not a whole number of seconds" in done.stderr
    assert "To fix:" in done.stderr
    assert not list(Path(fake["FAKE_PIDS"]).iterdir())


def test_node_output_goes_to_the_node_logs_not_the_terminal(
    compiled: Path, node_ids: list[str], fake: dict[str, str], tmp_path: Path
) -> None:
    """Without --verbose no node line reaches the terminal; each node's log holds all of its
    own lines (stdout and stderr), whole, and none of the other node's."""
    run_dir = tmp_path / "run"
    env = {**fake, "FAKE_LINES": "50"}
    done = _launch(compiled, env, "--run-dir", str(run_dir), verbose=False)
    assert done.returncode == 0, done.stderr
    assert "flood" not in done.stdout + done.stderr
    assert "fake-torchrun" not in done.stdout + done.stderr
    assert f"each node's output goes to {run_dir / 'logs'}/node<NNNN>.log" in done.stderr
    for index, node_id in enumerate(node_ids):
        log = (run_dir / "logs" / f"node{index:04d}.log").read_text(encoding="utf-8")
        floods = [line for line in log.splitlines() if line.startswith("flood ")]
        assert floods == [f"flood {i} {node_id} {'x' * LONG}" for i in range(1, 51)]
        assert f"fake-torchrun stderr {node_id}" in log
        assert node_ids[1 - index] not in log


def test_quiet_prints_only_the_summary(
    compiled: Path, fake: dict[str, str], tmp_path: Path
) -> None:
    """--quiet: no start line, no progress, no done line; the summary alone."""
    run_dir = tmp_path / "run"
    done = _launch(compiled, fake, "--run-dir", str(run_dir), "--quiet", verbose=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0] == "hetc: summary", done.stderr
    assert [line.split()[0] for line in lines[1:]] == [
        "final",
        "throughput",
        "peak",
        "checkpoint",
        "metrics",
        "logs",
    ]


FAKE_METRICS = r"""#!/usr/bin/env bash
# A torchrun whose two "ranks" write metrics lines and done outcome records as the runtime
# does, then print a C++ stack; on FAKE_FAIL_AFTER_DONE's node it exits 1, as an agent whose
# rendezvous host left first does.
rank_base=$(( ${HETC_NODE##*/n} * 2 ))
mkdir -p "$HETC_RUN_DIR/metrics" "$HETC_RUN_DIR/outcome"
for step in 0 1 2 3 4; do
    for r in $rank_base $((rank_base + 1)); do
        line='{"step": %d, "loss": %d.5, "seconds": 0.5, "samples_per_second": 16.0,'
        line+=' "peak_bytes": %d, "rank": %d}\n'
        # shellcheck disable=SC2059
        printf "$line" "$step" $(( 10 - step )) $(( 1048576 * (r + 1) )) "$r" \
            >> "$HETC_RUN_DIR/metrics/rank-0000$r.jsonl"
    done
done
for r in $rank_base $((rank_base + 1)); do
    sed -e "s/__NOW__/$(date +%s.%N)/" -e "s/__RANK__/$r/" "$FAKE_DONE" \
        > "$HETC_RUN_DIR/outcome/.rank-0000$r.tmp"  # atomically, as the runtime writes it
    mv "$HETC_RUN_DIR/outcome/.rank-0000$r.tmp" "$HETC_RUN_DIR/outcome/rank-0000$r.json"
done
echo "Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:670" >&2
if [[ "$HETC_NODE" == "${FAKE_FAIL_AFTER_DONE:-}" ]]; then exit 1; fi
"""


def _metrics_fake(tmp_path: Path, fake: dict[str, str]) -> dict[str, str]:
    """The environment for FAKE_METRICS: every rank records steps 0-4 and a done outcome."""
    script = tmp_path / "fake-metrics-torchrun"
    script.write_text(FAKE_METRICS, encoding="utf-8")
    script.chmod(0o755)
    done = Outcome(
        code=0,
        reason="trained steps 0 to 4",
        rank=0,
        node=None,
        local_rank=0,
        plan_hash=None,
        step=5,
        checkpoint=CheckpointRef(path="/ckpt/step-5", step=5, sample=40),
        time=0.0,
    )
    template = json.dumps(done.to_json())
    template = template.replace('"time": 0.0', '"time": __NOW__')
    template = template.replace('"rank": 0', '"rank": __RANK__')
    (tmp_path / "done.json").write_text(template, encoding="utf-8")
    return {**fake, "HETC_TORCHRUN": str(script), "FAKE_DONE": str(tmp_path / "done.json")}


def test_the_summary_reports_the_runs_metrics_against_the_plan(
    compiled: Path, fake: dict[str, str], tmp_path: Path
) -> None:
    """Final loss (10.5 - step, at step 4), throughput of the steps after the first two
    (8 samples / 0.5 s = 16/s) against plan.json's samples_per_second, the largest peak
    (rank 3: 4 MiB) against the plan's largest, the outcome records' checkpoint, the metrics
    and logs paths; a metrics line written before the launch (step 99, a huge peak) is not
    counted."""
    run_dir = tmp_path / "run"
    (run_dir / "metrics").mkdir(parents=True)
    old = '{"step": 99, "loss": 0.1, "seconds": 1.0, "peak_bytes": 999999999, "rank": 0}\n'
    (run_dir / "metrics" / "rank-00000.jsonl").write_text(old, encoding="utf-8")
    done = _launch(
        compiled, _metrics_fake(tmp_path, fake), "--run-dir", str(run_dir), verbose=False
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads((compiled / "plan.json").read_text(encoding="utf-8"))["predictions"]
    rate = plan["samples_per_second"]
    peak = max(plan["peak_memory"].values())
    lines = done.stderr.splitlines()
    assert lines[lines.index("hetc: summary") :] == [
        "hetc: summary",
        "  final loss    6.5000 (step 4)",
        f"  throughput    16.0 samples/s, mean of steps 2-4; predicted {rate:.1f}"
        f" ({16 / rate:.2f}x)",
        f"  peak memory   4.0 MiB on the largest rank; predicted {peak / 2**20:.1f} MiB"
        f" ({4 * 2**20 / peak:.2f}x)",
        "  checkpoint    /ckpt/step-5 (resumes at step 5)",
        f"  metrics       {run_dir / 'metrics'}",
        f"  logs          {run_dir / 'logs'}/node<NNNN>.log",
    ]
    progress = [line for line in lines if line.startswith("hetc: node0001 ")]
    assert progress[-1].endswith(": step 4, loss 6.5000, 16.0 samples/s"), progress
    assert "Utils.hpp" not in done.stderr


def test_a_torchrun_failing_after_its_ranks_finished_is_a_done_node(
    compiled: Path, node_ids: list[str], fake: dict[str, str], tmp_path: Path
) -> None:
    """The teardown race: node0000's torchrun exits 1 with a C++ stack after both its ranks
    recorded the end of training. The run is done (exit 0, a summary, no stack on the
    terminal); the node's log keeps the stack and says why the node counted as done.
    Checked to fail with `finished_ranks` returning False (exit 1, "failed first")."""
    run_dir = tmp_path / "run"
    env = {**_metrics_fake(tmp_path, fake), "FAKE_FAIL_AFTER_DONE": node_ids[0]}
    done = _launch(compiled, env, "--run-dir", str(run_dir), verbose=False)
    assert done.returncode == 0, done.stderr
    assert "Utils.hpp" not in done.stderr and "Traceback" not in done.stderr
    assert (
        f"hetc: done: every rank of all 2 nodes finished (node0000 {node_ids[0]}:"
        " torchrun failed in its teardown after that; see its log)"
    ) in done.stderr
    assert "hetc: summary" in done.stderr
    log = (run_dir / "logs" / "node0000.log").read_text(encoding="utf-8")
    assert "Utils.hpp" in log
    assert "torchrun exited 1 after every rank of this node recorded the end of training" in log


def test_a_torchrun_failing_before_its_ranks_finished_still_fails(
    compiled: Path, node_ids: list[str], fake: dict[str, str], tmp_path: Path
) -> None:
    """Done records a previous launch left in the run directory do not excuse a failure."""
    run_dir = tmp_path / "run"
    env = _metrics_fake(tmp_path, fake)
    assert _launch(compiled, env, "--run-dir", str(run_dir), verbose=False).returncode == 0
    env = {**fake, "FAKE_FAIL_NODE": node_ids[0], "FAKE_SLEEP": "60"}
    done = _launch(compiled, env, "--run-dir", str(run_dir), verbose=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1].startswith(f"hetc: failed: node0000 {node_ids[0]}")
    _assert_all_gone(fake)


@pytest.mark.slow
def test_the_two_node_example_ends_cleanly_every_time_under_load(
    compiled: Path, tmp_path: Path
) -> None:
    """Three real launches of the two-node example while two busy loops load the cores (the
    load under which a node's torchrun once failed in its teardown): each exits 0 with the
    summary and its final loss, and no stack or node line reaches the terminal."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HETC_")}
    env = {**environ, "HETC_BACKEND": "gloo", "HETC_STARTUP_TIMEOUT": "120"}
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        for attempt in range(3):
            run_dir = tmp_path / f"run{attempt}"
            done = _launch(
                compiled,
                env,
                *("--run-dir", str(run_dir), "--from-scratch", "--timeout", "400"),
                timeout=450,
                verbose=False,
            )
            output = done.stdout + done.stderr
            assert done.returncode == 0, (attempt, output[-3000:])
            assert done.stdout == ""
            lines = done.stderr.splitlines()
            summary = lines[lines.index("hetc: summary") :]
            assert re.fullmatch(r"  final loss    \d+\.\d{4} \(step 19\)", summary[1]), summary
            assert summary[4] == f"  checkpoint    {run_dir}/ckpt/step-20 (resumes at step 20)"
            for noise in ("Traceback", "Exception raised from", "WARNING", "hetc-runtime:"):
                assert noise not in output, (attempt, noise)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def test_finished_ranks_reads_only_what_it_can_of_other_nodes(tmp_path: Path) -> None:
    """A node whose ranks recorded "done" after the launch began is finished, even while
    another node's record is half written; a rank recorded before the launch, or not done,
    leaves it unfinished."""
    node = NodeScript(index=0, id="n0", script=tmp_path / "node0000.sh", ranks=(0, 1))
    done = Outcome(code=EXIT_DONE, reason="trained", rank=0, node=None, local_rank=0,
                   plan_hash=None, step=5, checkpoint=None, time=100.0)  # fmt: skip
    for rank in (0, 1):
        write_outcome(outcome_path(tmp_path, rank), replace(done, rank=rank))
    outcome_path(tmp_path, 2).write_text('{"code": 0, "rea', encoding="utf-8")
    assert finished_ranks(tmp_path, node, since=50.0)
    assert not finished_ranks(tmp_path, node, since=150.0)
    write_outcome(outcome_path(tmp_path, 1), replace(done, rank=1, code=EXIT_PREEMPTED))
    assert not finished_ranks(tmp_path, node, since=50.0)
