"""`hetc run`'s local job (`hetc.local_launch.LocalJob`) judges a node as `hetc launch` does:
a torchrun that fails in its teardown after every rank of its node recorded the end of
training is a done node, and a plan this host cannot run is refused before any node starts.

The fake torchruns and the compiled two-node CPU example are tests/test_cli_launch.py's (the
oracle there for `hetc launch`). Mutation check (done): with the `finished_ranks` branch of
`LocalJob.exits` removed, the first test fails ({0: 1, 1: 0}); with the `_check_host` call
removed, the GPU-plan test fails (the nodes start).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_cli_launch import _metrics_fake, compiled, fake, node_ids
from typer.testing import CliRunner

from hetc.cli import app
from hetc.local_launch import LocalJob
from hetc.schema.diagnostics import EnvironmentProblem

__all__ = ["compiled", "fake", "node_ids"]

ROOT = Path(__file__).resolve().parent.parent
NOTE = "=== hetc run: torchrun exited 1 after every rank of this node recorded the end of training"


def _environment(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """Make `env` the process environment LocalJob hands its node scripts."""
    for key in [k for k in os.environ if k.startswith(("HETC_", "FAKE_"))]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def _quiet(*_args: object, **_kwargs: object) -> None:
    return None


def test_a_torchrun_failing_after_its_ranks_finished_counts_as_done(
    compiled: Path,
    node_ids: list[str],
    fake: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """node0000's torchrun exits 1 after both its ranks recorded done: its exit reads 0 and
    its log says why; the other node's 0 stays 0."""
    _environment(
        monkeypatch, {**_metrics_fake(tmp_path, fake), "FAKE_FAIL_AFTER_DONE": node_ids[0]}
    )
    job = LocalJob(compiled, run_dir=tmp_path / "run", echo=_quiet)
    assert job.wait(60)
    assert job.exits() == {0: 0, 1: 0}
    assert job.exits() == {0: 0, 1: 0}
    log = (tmp_path / "run" / "logs" / "node0000.log").read_text(encoding="utf-8")
    assert log.count(NOTE) == 1
    assert NOTE not in (tmp_path / "run" / "logs" / "node0001.log").read_text(encoding="utf-8")


def test_a_torchrun_failing_before_its_ranks_finished_is_a_failure(
    compiled: Path,
    node_ids: list[str],
    fake: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Done records of an earlier job in the same run directory excuse nothing."""
    run_dir = tmp_path / "run"
    _environment(monkeypatch, _metrics_fake(tmp_path, fake))
    earlier = LocalJob(compiled, run_dir=run_dir, echo=_quiet)
    assert earlier.wait(60) and earlier.exits() == {0: 0, 1: 0}
    _environment(monkeypatch, {**fake, "FAKE_FAIL_NODE": node_ids[0]})
    job = LocalJob(compiled, run_dir=run_dir, echo=_quiet)
    assert job.wait(60)
    assert job.exits()[0] == 3


def test_a_gpu_plan_on_this_cpu_host_is_refused_before_any_node_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPT-Neo example's GPU plan: EnvironmentProblem, no node started; with `force`,
    the nodes start after a warning naming the problem (the site's prologue, which activates
    a venv of the plan's machines, skipped)."""
    out = tmp_path / "out"
    compiled_gpu = CliRunner().invoke(
        app, ["compile", str(ROOT / "examples" / "gptneo-a100-v100.yaml"), "-o", str(out)]
    )
    assert compiled_gpu.exit_code == 0, compiled_gpu.output
    torchrun = tmp_path / "fake-torchrun"
    torchrun.write_text('#!/usr/bin/env bash\necho started >> "$FAKE_STARTS"\n', encoding="utf-8")
    torchrun.chmod(0o755)
    starts = tmp_path / "starts"
    _environment(
        monkeypatch,
        {
            "HETC_TORCHRUN": str(torchrun),
            "FAKE_STARTS": str(starts),
            "TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions"),
            "HETC_PROLOGUE_DONE": "1",
        },
    )
    with pytest.raises(EnvironmentProblem, match=r"ranks on GPUs and this host has"):
        LocalJob(out, run_dir=tmp_path / "run", echo=_quiet)
    assert not starts.exists()
    said: list[str] = []
    job = LocalJob(
        out, run_dir=tmp_path / "run", echo=lambda line, **_: said.append(line), force=True
    )
    assert job.wait(60)
    assert starts.read_text(encoding="utf-8").count("started") == len(job.nodes)
    assert any(line.startswith("hetc: warning (--force): the plan runs") for line in said)
