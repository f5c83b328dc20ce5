"""`hetc launch OUT_DIR`: every node of a compiled plan on this host, for laptops, CI and debugging.

It only starts the node scripts `hetc compile` wrote (never torch itself), each in its own
session so that stopping a node reaches its whole process group, all joined at one rendezvous on
a free local port. Like every launch path it resumes from the newest complete checkpoint of the
run's checkpoint_dir; `--from-scratch` is passed to each node script. A failed node ends the
run: on one host a retry would fail the same way, so the other nodes are stopped (SIGTERM: they
checkpoint and stop) rather than left waiting for a rendezvous that will not complete. What the
user needs from a failure is which node failed first (later failures are usually the others
losing their peer), what the run's end means and that node's last lines. torchrun exits 1
whatever its workers returned, so the meaning comes from the outcome records the ranks of this
run left (`hetc.plan.outcome`: a lost peer, a stop after SIGTERM, a failure), and from the node
script's exit status only where there are none.

The terminal is for the run, not the frameworks: each node's output (torchrun's agent, the
ranks' lines, DeepSpeed's and torch's warnings) goes to its log in the run directory, and the
terminal shows one progress line per node (`hetc.launch_progress`) and ends with a summary
(`hetc.launch_summary`). A node whose torchrun fails after all its ranks recorded the end of
training counts as done (`finished_ranks`): on one host the agents' teardown races (the agent
hosting the rendezvous store leaves after the exit barrier while another agent still closes
the rendezvous through that store), and its stack belongs in the node's log.

Exit status (returned, the CLI exits with it): 0 every node finished; 75 or 76 the first node to
stop lost a peer or was stopped by a signal after a checkpoint (run again to resume); 1 the
output is not unchanged hetc output, a node failed otherwise, or the run timed out; 2 `--node`
names no node of the plan; 130 interrupted (Ctrl-C), 143 or 129 on SIGTERM or SIGHUP. A missing
`bash` or `torchrun`, a HETC_TERM_GRACE that is not a number of seconds, or a plan this host
cannot run (`hetc.launch_host`; unless `force`) raises EnvironmentProblem (exit 4).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import queue
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from hetc.emit.launch import SHUTDOWN_MARGIN, TERM_GRACE
from hetc.launch_host import (
    HOST_FIX,
    STALE_AFTER,
    extension_roots,
    host_cores,
    host_gpus,
    host_problems,
    plan_ranks,
    recover_stale_locks,
)
from hetc.launch_progress import Board, MetricsTail
from hetc.launch_summary import summary_lines
from hetc.plan import RankFileError, read_cluster_file
from hetc.plan.outcome import (
    EXIT_DONE,
    EXIT_PEER_LOST,
    EXIT_PREEMPTED,
    OUTCOME_DIR,
    Outcome,
    OutcomeError,
    read_outcome,
    read_outcomes,
    run_code,
)
from hetc.schema import EnvironmentProblem
from hetc.units import plural

Echo = Callable[..., None]

TAIL_LINES = 20
STOP_SLACK = 5.0
"""Seconds between SIGTERM and SIGKILL beyond torchrun's own wait (HETC_TERM_GRACE +
SHUTDOWN_MARGIN): torchrun starts its workers in sessions of their own, out of reach of a signal
to its group, and killing it before it has killed them leaves workers behind until their
heartbeat sees their agent gone (hetc.runtime.heartbeat), without a checkpoint."""
TICK = 0.5
"""Seconds between progress refreshes while the nodes run."""
DRAIN_SECONDS = 5.0
"""How long to wait for the rest of a node's output once it has exited: a worker that outlived
its torchrun may hold the pipe open for ever."""
MANIFEST = "manifest.json"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""Besides Ctrl-C (SIGINT, Python's KeyboardInterrupt): stop every node, exit 128 + signal."""


class InvalidOutput(Exception):
    """OUT_DIR is not what `hetc compile` wrote, or was changed since."""

    def __init__(self, message: str, *, plan_edited: bool = False) -> None:
        super().__init__(message)
        self.plan_edited = plan_edited


class _Signalled(Exception):
    """hetc itself was told to stop. The nodes run in sessions of their own, out of reach of
    the terminal's or a supervisor's signals, so hetc must pass the stop on or leave orphans."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_signalled(signum: int, _frame: object) -> None:
    raise _Signalled(signum)


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeScript:
    index: int
    id: str
    script: Path
    ranks: tuple[int, ...] = ()
    """The plan ranks its processes run."""

    @property
    def label(self) -> str:
        return f"node{self.index:04d} {self.id}"


@dataclass(kw_only=True, slots=True)
class _Running:
    node: NodeScript
    process: subprocess.Popen[bytes]
    log: IO[str] | None = None
    """The node's log file (`node_log`): every line of its output."""
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    readers: list[threading.Thread] = field(default_factory=list)
    exited: threading.Event = field(default_factory=threading.Event)


def _edits(out_dir: Path) -> list[str]:
    """How `out_dir` differs from its manifest; raises InvalidOutput without a hetc manifest.
    Unlike `hetc.emit.output.unchanged_hetc_output`, it says which files, for the message."""
    try:
        record = json.loads((out_dir / MANIFEST).read_text(encoding="utf-8"))
        listed = {e["path"]: e["sha256"] for e in record["files"]}
        if record.get("generator") != "hetc":
            raise ValueError
    except FileNotFoundError:
        raise InvalidOutput(f"{out_dir} has no {MANIFEST}: it is not hetc compile output") from None
    except (ValueError, KeyError, TypeError, AttributeError):
        raise InvalidOutput(f"{out_dir}/{MANIFEST} is not a hetc manifest") from None
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot read {out_dir}/{MANIFEST}: {exc.strerror or exc}", f"make {out_dir} readable"
        ) from None
    try:
        present = {
            p.relative_to(out_dir).as_posix()
            for p in out_dir.rglob("*")
            if p.is_file() or p.is_symlink()
        } - {MANIFEST}
        edited = [
            path
            for path in sorted(set(listed) & present)
            if hashlib.sha256((out_dir / path).read_bytes()).hexdigest() != listed[path]
        ]
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot read {out_dir}: {exc.strerror or exc}", f"make {out_dir} readable"
        ) from None
    problems = [f"{path} is missing" for path in sorted(set(listed) - present)]
    problems += [f"{path} is not in the manifest" for path in sorted(present - set(listed))]
    problems += [f"{path} was edited" for path in edited]
    return problems


def node_scripts(out_dir: Path) -> list[NodeScript]:
    """The node scripts of an unchanged compiled output, in plan order; raises InvalidOutput.
    Edited files are refused because the runtime's start-up checks trust them."""
    if not out_dir.is_dir():
        raise InvalidOutput(f"{out_dir} is not a directory")
    edits = _edits(out_dir)
    if edits:
        raise InvalidOutput(
            f"{out_dir} was changed since hetc compiled it: {'; '.join(edits)}."
            " Compile again instead of editing the output",
            plan_edited="plan.json was edited" in edits,
        )
    try:
        cluster = read_cluster_file(out_dir / "topology" / "cluster.json")
    except RankFileError as exc:
        raise InvalidOutput("; ".join(exc.problems)) from None
    nodes = [
        NodeScript(
            index=node["index"],
            id=node["id"],
            script=out_dir / "launch" / f"node{node['index']:04d}.sh",
            ranks=tuple(p["rank"] for p in node["processes"]),
        )
        for node in cluster["nodes"]
        if node["processes"]
    ]
    missing = [n.label for n in nodes if not n.script.is_file()]
    if missing:
        raise InvalidOutput(f"{out_dir} has no launch script for {', '.join(missing)}")
    return nodes


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _torchrun(environ: dict[str, str]) -> str:
    """The user's HETC_TORCHRUN, else the torchrun installed with this Python (so a venv works
    without being activated), else torchrun on PATH."""
    given = environ.get("HETC_TORCHRUN")
    if given:
        if shutil.which(given) is None:
            raise EnvironmentProblem(
                f"HETC_TORCHRUN={given} is not an executable",
                "point HETC_TORCHRUN at torchrun, or unset it",
            )
        return given
    beside = Path(sys.executable).parent / "torchrun"
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("torchrun")
    if found is None:
        raise EnvironmentProblem(
            f"torchrun is neither beside {sys.executable} nor on PATH",
            "install torch in this environment, or set HETC_TORCHRUN=/path/to/torchrun",
        )
    return found


def launch_environment(out_dir: Path, run_dir: Path, environ: dict[str, str]) -> dict[str, str]:
    """What every node script gets: the caller's environment, one rendezvous, and HETC_OUT
    pinned to the checked directory (a recompile during the run swaps `out`'s link, and a stray
    HETC_OUT would override the scripts' own path). A HETC_FROM_SCRATCH left in the caller's
    environment is dropped: only `--from-scratch` starts over, a launch resumes otherwise."""
    return {
        **{k: v for k, v in environ.items() if k != "HETC_FROM_SCRATCH"},
        "HETC_OUT": str(out_dir),
        "HETC_RDZV_ENDPOINT": f"127.0.0.1:{_free_port()}",
        "HETC_RDZV_ID": f"local-{os.getpid()}",
        "HETC_RUN_DIR": str(run_dir),
        "HETC_TORCHRUN": _torchrun(environ),
    }


def stop_grace(environ: dict[str, str]) -> float:
    """Seconds from SIGTERM to SIGKILL for a node: the ranks' grace to checkpoint, torchrun's
    margin after it, and STOP_SLACK. Raises EnvironmentProblem for a HETC_TERM_GRACE that is
    not a number of seconds (the node scripts' arithmetic would fail on it too)."""
    given = environ.get("HETC_TERM_GRACE", str(TERM_GRACE))
    if not given.isdigit():
        raise EnvironmentProblem(
            f"HETC_TERM_GRACE={given} is not a whole number of seconds",
            f"set it to the seconds the ranks get to checkpoint after SIGTERM, or unset it"
            f" (default {TERM_GRACE})",
        )
    return int(given) + SHUTDOWN_MARGIN + STOP_SLACK


def _all_nodes(count: int) -> str:
    """'the node' or 'all 3 nodes', for the final line."""
    return "the node" if count == 1 else f"all {count} nodes"


def _describe(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def outcome(code: int) -> str:
    """What a node script's exit status says about its ranks (`hetc.plan.outcome`)."""
    if code == EXIT_DONE:
        return "done"
    if code == EXIT_PEER_LOST:
        return "peer lost"
    if code == EXIT_PREEMPTED:
        return "preempted"
    return "failed"


def _signal_groups(runs: Iterable[_Running], sig: signal.Signals) -> None:
    """Signal each node's process group, leader gone or not: what it left behind goes too."""
    for run in runs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(run.process.pid, sig)


def _stop(runs: Sequence[_Running], grace: float) -> list[_Running]:
    """SIGTERM every node's group (the ranks checkpoint and stop), SIGKILL after `grace`
    seconds (at once on a second Ctrl-C); returns the nodes that were still running."""
    alive = [r for r in runs if not r.exited.is_set()]
    _signal_groups(runs, signal.SIGTERM)
    deadline = time.monotonic() + grace
    try:
        for run in alive:
            run.exited.wait(max(0.0, deadline - time.monotonic()))
    except (KeyboardInterrupt, _Signalled):
        pass
    _signal_groups(runs, signal.SIGKILL)
    for run in alive:
        run.process.wait()
    return alive


def _drain(runs: Sequence[_Running]) -> None:
    """Wait for the rest of each node's output, then close its log (a reader still copying
    from a pipe a stray worker holds writes to the terminal only from then on)."""
    deadline = time.monotonic() + DRAIN_SECONDS
    for run in runs:
        for reader in run.readers:
            reader.join(max(0.0, deadline - time.monotonic()))
    for run in runs:
        log, run.log = run.log, None
        if log is not None:
            log.close()


def node_log(run_dir: Path, node: NodeScript) -> Path:
    """Where `hetc launch` keeps everything a node script printed (torchrun's agent, the
    ranks' output as torchrun tees it, framework warnings): `RUN_DIR/logs/node<NNNN>.log`,
    beside torchrun's own per-rank files in `RUN_DIR/logs/node<NNNN>/`."""
    return run_dir / "logs" / f"node{node.index:04d}.log"


def _append(run: _Running, line: str) -> None:
    """One line into the node's log, if it is still open (`_drain` closes it)."""
    log = run.log
    if log is not None:
        with contextlib.suppress(ValueError):  # closed meanwhile
            log.write(line + "\n")
            log.flush()


class _Terminal:
    """Whole lines from every node, one writer at a time, into each node's log; with
    `verbose` also onto the terminal, each line prefixed with its node."""

    def __init__(self, echo: Echo, *, verbose: bool = True) -> None:
        self._echo = echo
        self._verbose = verbose
        self._lock = threading.Lock()

    def say(self, message: str) -> None:
        with self._lock:
            self._echo(message, err=True)

    def write(self, text: str) -> None:
        """Text as it is (progress redraws), without a newline of its own."""
        with self._lock:
            self._echo(text, err=True, nl=False)

    def note(self, run: _Running, line: str) -> None:
        """A line of hetc's own into a node's log only."""
        with self._lock:
            _append(run, line)

    def copy(self, run: _Running, pipe: IO[bytes], err: bool) -> None:
        prefix = f"[{run.node.label}] "
        for raw in pipe:
            line = raw.decode("utf-8", errors="replace").rstrip("\n").removesuffix("\r")
            with self._lock:
                run.tail.append(line)
                _append(run, line)
                if self._verbose:
                    self._echo(prefix + line, err=err)
        pipe.close()


@dataclass(kw_only=True, slots=True)
class _Launch:
    """One `hetc launch`: what starts every node, and the nodes started so far."""

    env: dict[str, str]
    args: tuple[str, ...]
    """Arguments of every node script (`--from-scratch`)."""
    grace: float
    terminal: _Terminal
    run_dir: Path
    started: float = field(default_factory=time.time)
    """Seconds since the epoch: outcome records older than this are a previous run's."""
    quiet: bool = False
    """Only errors and the summary on the terminal."""
    summarise: Callable[[], None] = lambda: None
    """Print the run's summary: on success last, otherwise before the line saying why the
    run ended (that line stays the last)."""
    runs: list[_Running] = field(default_factory=list)
    exits: queue.Queue[_Running] = field(default_factory=queue.Queue)
    """Each node as it exits, in order."""

    def stop(self) -> list[_Running]:
        return _stop(self.runs, self.grace)


def _start(nodes: Sequence[NodeScript], launch: _Launch) -> None:
    """Start every node script, adding each to `launch.runs` at once (so that an interrupt
    while starting stops those already started)."""
    bash = shutil.which("bash")
    if bash is None:
        raise EnvironmentProblem("bash is not on PATH", "install bash; the node scripts need it")
    for node in nodes:
        path = node_log(launch.run_dir, node)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            log = open(path, "a", encoding="utf-8")  # noqa: SIM115  # closed by _close_logs
        except OSError as exc:
            launch.stop()
            raise EnvironmentProblem(
                f"cannot write the node log {path}: {exc.strerror or exc}",
                "pass a writable --run-dir",
            ) from None
        log.write(f"=== hetc launch: {node.label}: bash {node.script} {' '.join(launch.args)}\n")
        try:
            process = subprocess.Popen(
                [bash, str(node.script), *launch.args],
                env=launch.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            log.close()
            launch.stop()
            raise EnvironmentProblem(
                f"cannot start {node.script}: {exc.strerror or exc}",
                "check that the output directory is readable and the system can start processes",
            ) from None
        run = _Running(node=node, process=process, log=log)
        launch.runs.append(run)
        for pipe, err in ((process.stdout, False), (process.stderr, True)):
            assert pipe is not None
            reader = threading.Thread(
                target=launch.terminal.copy, args=(run, pipe, err), daemon=True
            )
            reader.start()
            run.readers.append(reader)
        threading.Thread(target=_reap, args=(run, launch.exits), daemon=True).start()


def _reap(run: _Running, exits: queue.Queue[_Running]) -> None:
    run.process.wait()
    run.exited.set()
    exits.put(run)


def _resume_hint(out_dir: Path) -> str:
    return f"`hetc launch {shlex.quote(str(out_dir))}` resumes from its newest complete checkpoint"


def ranks_verdict(run_dir: Path, since: float) -> tuple[int, str] | None:
    """The run's code and the line that says why, from the outcome records its ranks wrote
    at or after `since` (`hetc.plan.outcome`): torchrun exits 1 whatever its workers
    returned, so a node script's status cannot tell a lost peer from a failure, but the
    survivors' records can. None when no rank of this run left a readable record."""
    try:
        fresh = [o for o in read_outcomes(run_dir) if o.time >= since]
    except OutcomeError:
        return None
    code = run_code(fresh)
    if code is None or code == EXIT_DONE:
        return None
    first: Outcome = next(o for o in fresh if o.code == code)
    who = f"plan rank {first.rank}" if first.rank is not None else "a rank"
    return code, f"{who}: {first.reason}"


def finished_ranks(run_dir: Path, node: NodeScript, since: float) -> bool:
    """Whether every rank of `node` recorded, at or after `since`, that it trained to the end
    (`hetc.plan.outcome`, code done). Then the node's work is over whatever its torchrun
    returns: the ranks pass a final barrier together before they record it, and what can
    still fail is the agents' own teardown, e.g. a torchrun agent whose rendezvous store's
    host (another node's agent) exited first, which prints a C++ stack and exits 1. A record
    that cannot be read (another node's, being written) says nothing about this node."""
    fresh: dict[int | None, int] = {}
    for path in sorted((run_dir / OUTCOME_DIR).glob("*.json")):
        try:
            record = read_outcome(path)
        except OutcomeError:
            continue
        if record.time >= since:
            fresh[record.rank] = record.code
    return bool(node.ranks) and all(fresh.get(r) == EXIT_DONE for r in node.ranks)


def _failed(launch: _Launch, run: _Running, out_dir: Path) -> int:
    """The first node that failed: stop the others, say why, return the run's code."""
    status = run.process.returncode
    terminal = launch.terminal
    stopped = launch.stop()
    _drain(launch.runs)
    launch.summarise()
    verdict = ranks_verdict(launch.run_dir, launch.started)
    code, why = verdict if verdict is not None else (status, None)
    meaning = outcome(code)
    others = (
        "stopped " + ", ".join(r.node.label for r in stopped)
        if stopped
        else "no other node was still running"
    )
    hint = f"; {_resume_hint(out_dir)}" if meaning != "failed" else ""
    records = f"hetc: the ranks' outcome records say: {why}\n" if why else ""
    terminal.say(
        f"hetc: {run.node.label} {'failed' if meaning == 'failed' else 'stopped'} first,"
        f" {_describe(status)}; its last {plural(len(run.tail), 'line')}"
        f" (all in {node_log(launch.run_dir, run.node)}):\n"
        + "".join(f"  {line}\n" for line in run.tail)
        + records
        + f"hetc: {meaning}: {run.node.label} exited first ({_describe(status)});"
        f" {others}{hint}"
    )
    return code if meaning in ("peer lost", "preempted") else 1


def _supervise(launch: _Launch, timeout: float | None, out_dir: Path, board: Board | None) -> int:
    """Wait for every node, refreshing the progress `board` every TICK seconds; the first
    node to fail stops the others. A node whose torchrun exits non-zero after every one of
    its ranks recorded the end of training (`finished_ranks`) counts as done, with a line
    in its log. The last line says what the run's end means: done, failed, peer lost or
    preempted."""
    runs, terminal = launch.runs, launch.terminal
    deadline = None if timeout is None else time.monotonic() + timeout
    left, teardown = len(runs), []
    while left:
        wait = TICK if deadline is None else min(TICK, max(0.0, deadline - time.monotonic()))
        try:
            run = launch.exits.get(timeout=wait)
        except queue.Empty:
            if deadline is not None and time.monotonic() >= deadline:
                stopped = launch.stop()
                _drain(runs)
                launch.summarise()
                terminal.say(
                    f"hetc: failed: timed out after {timeout:g} s; stopped "
                    + ", ".join(r.node.label for r in stopped)
                )
                return 1
            if board is not None:
                board.refresh(time.monotonic())
            continue
        left -= 1
        status = run.process.returncode
        if status and finished_ranks(launch.run_dir, run.node, launch.started):
            teardown.append(run.node.label)
            terminal.note(
                run,
                f"=== hetc launch: torchrun exited {status} after every rank of this node"
                " recorded the end of training; counted as done",
            )
        elif status:
            return _failed(launch, run, out_dir)
    _drain(runs)
    if board is not None:
        board.refresh(time.monotonic(), final=True)
    if launch.quiet:
        launch.summarise()
        return 0
    if teardown:
        terminal.say(
            f"hetc: done: every rank of {_all_nodes(len(runs))} finished ({', '.join(teardown)}:"
            " torchrun failed in its teardown after that; see its log)"
        )
    else:
        terminal.say(f"hetc: done: {_all_nodes(len(runs))} exited 0")
    launch.summarise()
    return 0


def run_launch(
    out_dir: Path,
    *,
    run_dir: Path,
    timeout: float | None,
    only: Collection[int],
    echo: Echo,
    from_scratch: bool = False,
    quiet: bool = False,
    verbose: bool = False,
    force: bool = False,
    on_terminal: bool = False,
) -> int:
    """Start the node scripts (resuming, or `from_scratch`), show one progress line per node
    (redrawn when `on_terminal`), keep each node's output in its log (`node_log`; also on
    the terminal when `verbose`), end with the summary (`hetc.launch_summary`), and return
    the exit status (see the module docstring). `quiet` shows only errors and the summary.
    Raises EnvironmentProblem when bash, torchrun or the run directory is missing, and when
    this host cannot run the plan (`hetc.launch_host`) unless `force`."""
    pinned = out_dir.resolve()
    try:
        nodes = node_scripts(pinned)
    except InvalidOutput as exc:
        echo(f"hetc: {exc}", err=True)
        if exc.plan_edited:
            echo(
                f"hetc: to run the edited plan: hetc compile SPEC --plan {out_dir}/plan.json"
                f" -o {out_dir}",
                err=True,
            )
        return 1
    unknown = sorted(set(only) - {n.index for n in nodes})
    if unknown:
        echo(
            f"hetc: --node {', '.join(map(str, unknown))}: the plan's nodes are"
            f" {', '.join(str(n.index) for n in nodes)}",
            err=True,
        )
        return 2
    _check_host(pinned, force=force, echo=echo)
    run_dir = Path(os.path.abspath(run_dir))
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot create the run directory {run_dir}: {exc.strerror or exc}",
            "pass a writable --run-dir",
        ) from None
    env = launch_environment(pinned, run_dir, dict(os.environ))
    launch = _Launch(
        env=env,
        args=("--from-scratch",) if from_scratch else (),
        grace=stop_grace(env),
        terminal=_Terminal(echo, verbose=verbose),
        run_dir=run_dir,
        quiet=quiet,
    )
    chosen = [n for n in nodes if not only or n.index in only]
    terminal = launch.terminal
    start = (
        "from scratch" if from_scratch else "resuming from the newest complete checkpoint, if any"
    )
    tail = MetricsTail(run_dir=run_dir, ranks=[r for n in nodes for r in n.ranks])
    launch.summarise = functools.partial(_summarise, launch, tail, pinned)
    board = (
        None
        if quiet or verbose
        else Board(
            nodes=[(n.label, n.ranks) for n in chosen],
            tail=tail,
            write=terminal.write,
            terminal=on_terminal,
        )
    )

    def say(message: str) -> None:
        if not quiet:
            terminal.say(message)

    say(
        f"hetc: starting {len(chosen)} of {plural(len(nodes), 'node')} of {out_dir} ({start}):"
        f" rendezvous {env['HETC_RDZV_ENDPOINT']}, id {env['HETC_RDZV_ID']},"
        f" run directory {run_dir}"
    )
    say(f"hetc: each node's output goes to {run_dir / 'logs'}/node<NNNN>.log")
    for left_out in (n for n in nodes if n not in chosen):
        terminal.say(
            f"hetc: not starting {left_out.label}; to join it: HETC_RDZV_ENDPOINT="
            f"{env['HETC_RDZV_ENDPOINT']} HETC_RDZV_ID={env['HETC_RDZV_ID']}"
            f" HETC_RUN_DIR={shlex.quote(str(run_dir))} bash {shlex.quote(str(left_out.script))}"
            + "".join(f" {a}" for a in launch.args)
        )
    previous = {sig: signal.signal(sig, _raise_signalled) for sig in STOP_SIGNALS}
    try:
        _start(chosen, launch)
        return _supervise(launch, timeout, out_dir, board)
    except (KeyboardInterrupt, _Signalled) as exc:
        signum = exc.signum if isinstance(exc, _Signalled) else signal.SIGINT
        launch.stop()
        _drain(launch.runs)
        launch.summarise()
        codes = sorted({r.process.returncode for r in launch.runs})
        ends = ", ".join(outcome(c) if c >= 0 else _describe(c) for c in codes)
        hint = f"; {_resume_hint(out_dir)}" if ends == "preempted" else ""
        terminal.say(f"hetc: {signal.Signals(signum).name}: stopped every node ({ends}){hint}")
        return 128 + signum
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _summarise(launch: _Launch, tail: MetricsTail, out_dir: Path) -> None:
    tail.poll()
    try:
        fresh = [o for o in read_outcomes(launch.run_dir) if o.time >= launch.started]
    except OutcomeError:
        fresh = []
    launch.terminal.say(
        "\n".join(
            summary_lines(
                out_dir=out_dir, run_dir=launch.run_dir, records=tail.records, outcomes=fresh
            )
        )
    )


def _check_host(out_dir: Path, *, force: bool, echo: Echo) -> None:
    """Refuse (EnvironmentProblem) a plan this host cannot run unless `force`; remove stale
    build locks in torch's extension cache, saying so (`hetc.launch_host`)."""
    problems = host_problems(plan_ranks(out_dir), gpus=host_gpus(), cores=host_cores())
    if problems and not force:
        raise EnvironmentProblem("; and ".join(problems), HOST_FIX)
    for problem in problems:
        echo(f"hetc: warning (--force): {problem}", err=True)
    for lock in recover_stale_locks(extension_roots(os.environ)):
        echo(
            f"hetc: removed the stale lock {lock}: an interrupted build of the"
            f" {lock.parent.name} op left it, and nothing in its folder changed for"
            f" {STALE_AFTER / 60:.0f} minutes (a build would have waited on it for ever)",
            err=True,
        )


class LocalJob:
    """The node scripts of one compiled output running in the background on this host, for a
    supervisor (`hetc run`) that watches other things while they run. Unlike `run_launch` it
    neither waits nor handles signals: the caller polls `exits` and calls `stop`."""

    def __init__(
        self,
        out_dir: Path,
        *,
        run_dir: Path,
        echo: Echo,
        from_scratch: bool = False,
        force: bool = False,
    ) -> None:
        """Start every node of `out_dir` (checked as `node_scripts` does: raises
        InvalidOutput), resuming unless `from_scratch`; raises EnvironmentProblem like
        `run_launch`, for a plan this host cannot run too (`_check_host`) unless `force`."""
        pinned = out_dir.resolve()
        self.nodes = node_scripts(pinned)
        _check_host(pinned, force=force, echo=echo)
        self._teardown: set[int] = set()  # done, though torchrun failed (`exits`)
        run_dir.mkdir(parents=True, exist_ok=True)
        env = launch_environment(pinned, run_dir, dict(os.environ))
        self.launch = _Launch(
            env=env,
            args=("--from-scratch",) if from_scratch else (),
            grace=stop_grace(env),
            terminal=_Terminal(echo),
            run_dir=run_dir,
        )
        _start(self.nodes, self.launch)

    def exits(self) -> dict[int, int]:
        """Exit status by node index of the nodes that have exited so far (negative: killed
        by that signal); 0 for a torchrun that failed after all its node's ranks recorded
        the end of training (`finished_ranks`: its teardown failed), said in its log."""
        found, launch = {}, self.launch
        for run in (r for r in launch.runs if r.exited.is_set()):
            index, status = run.node.index, run.process.returncode
            if (
                status
                and index not in self._teardown
                and finished_ranks(launch.run_dir, run.node, launch.started)
            ):
                self._teardown.add(index)
                launch.terminal.note(
                    run,
                    f"=== hetc run: torchrun exited {status} after every rank of this node"
                    " recorded the end of training; counted as done",
                )
            if status is not None:
                found[index] = 0 if index in self._teardown else status
        return found

    def process_groups(self) -> dict[int, int]:
        """Each node script's process group (its pid: each runs in a session of its own)."""
        return {r.node.index: r.process.pid for r in self.launch.runs}

    def running(self) -> bool:
        return any(not r.exited.is_set() for r in self.launch.runs)

    def wait(self, seconds: float) -> bool:
        """Wait up to `seconds` for every node to exit; whether they all have."""
        deadline = time.monotonic() + seconds
        for run in self.launch.runs:
            if not run.exited.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def stop(self) -> None:
        """SIGTERM every node (the ranks checkpoint and stop, exit 76), SIGKILL after the
        grace period; returns once every node has exited and its output is copied."""
        self.launch.stop()
        _drain(self.launch.runs)
