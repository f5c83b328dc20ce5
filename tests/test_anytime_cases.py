"""The slow cases of issue 27 as a new user met them: each answers, states the gap it has
proven, and (where the search is stopped) with deterministic limits, never a clock.

Oracles: the max_throughput search of the same cluster at a price (the exactness tests prove
it equals the brute force on small specs) for the free min_cost answer; the uncrossed spec
with its zones renamed for the crossed one; the plan's own lower bound for the gap.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.costmodel.planning import PlanningModel
from hetc.schema import Spec, check_text
from hetc.solver.search import SearchOptions, search

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()

ZORSE = """\
version: 1
name: zorse
model: {preset: Llama-13B}
training:
  global_batch_size: 1024
  seq_len: 2048
  precision: fp16
  zero_stage: 2
  activation_checkpointing: true
objective: max_throughput
zones:
  - name: lab
    region: campus
    pools:
      - {device: A100-40GB, quota: 8, gpus_per_node: 8, price: 3.67 USD/h}
      - {device: A10G, quota: 16, gpus_per_node: 8, price: 1.0 USD/h}
      - {device: V100-16GB, quota: 16, gpus_per_node: 8, price: 2.48 USD/h}
      - {device: T4, quota: 24, gpus_per_node: 8, price: 0.35 USD/h}
"""

A100S = """\
version: 1
name: a100s
model: {preset: OPT-350M}
training: {global_batch_size: 1024, seq_len: 2048, precision: fp16, zero_stage: 1}
objective: OBJECTIVE
zones:
  - name: lab
    region: campus
    pools: [{device: A100-40GB, quota: 64, gpus_per_node: 8, price: PRICE USD/h}]
"""

CROSSED = """\
version: 1
name: crossed
model: {preset: OPT-350M}
training: {global_batch_size: 1024, seq_len: 2048, precision: fp16, zero_stage: 1}
objective: max_throughput
zones:
  - name: r1
    region: r2
    pools: [{device: A100-40GB, quota: 8, gpus_per_node: 8, price: 3.67 USD/h}]
  - name: r2
    region: r1
    pools: [{device: A100-40GB, quota: 8, gpus_per_node: 8, price: 3.67 USD/h}]
network:
  intra_zone: {bandwidth: 100Gbps, latency: 10us}
  inter_zone: {bandwidth: 50Gbps, latency: 1ms}
  inter_region: {bandwidth: 5Gbps, latency: 30ms}
"""


def _spec(text: str) -> Spec:
    result = check_text(text, "case.yaml")
    assert result.spec is not None and not result.errors, result.diagnostics
    return result.spec


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_four_device_types_with_small_quotas_answer_with_their_gap(tmp_path: Path) -> None:
    """The Zorse-style cluster stopped after 200 candidates: a plan, and a gap in (0, 1)
    from a lower bound below every returned plan's planner estimate, in JSON and text."""
    path = _write(tmp_path, "zorse.yaml", ZORSE)
    result = runner.invoke(app, ["plan", str(path), "--eval-limit", "200", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["plans"] and not data["complete"]
    assert 0 < data["gap"] < 1
    times = [p["planner_iteration_time"] for p in data["plans"]]
    assert 0 < data["lower_bound"] <= min(times)
    text = runner.invoke(app, ["plan", str(path), "--eval-limit", "200", "--top", "1"])
    assert text.exit_code == 0
    assert f"gap at most {100 * data['gap']:.1f}%" in text.stdout + text.stderr


def test_min_cost_on_64_free_a100_is_the_fastest_plan_and_finishes() -> None:
    """Price 0 on 64 A100: within 1,000 candidates the search completes (gap 0), costs 0,
    and runs as fast as the max_throughput optimum of the same cluster at a price."""
    free = _spec(A100S.replace("OBJECTIVE", "min_cost").replace("PRICE", "0"))
    priced = _spec(A100S.replace("OBJECTIVE", "max_throughput").replace("PRICE", "3.67"))
    answer = search(PlanningModel(free), SearchOptions(eval_limit=1000))
    fastest = search(PlanningModel(priced), SearchOptions())
    assert answer.complete and answer.gap == 0 and fastest.complete
    best = answer.candidates[0]
    assert best.estimate.cost == 0
    assert best.estimate.iteration_time == fastest.candidates[0].estimate.iteration_time


def _renamed(data: dict[str, object], names: dict[str, str]) -> str:
    """A plan's JSON text with zone names swapped by `names`."""
    text = json.dumps(data, sort_keys=True)
    for old, new in names.items():
        text = text.replace(f"@{old}/", f"@{new}/").replace(f'"{old}"', f'"{new}"')
    return text


def test_zone_names_that_cross_region_names_plan_as_the_uncrossed_spec(tmp_path: Path) -> None:
    """Zone r1 in region r2 and zone r2 in region r1 give, at every evaluation limit, the
    uncrossed spec's plans, bound and gap with its zones renamed (a time limit far above
    what the evaluation limits take, so that they, not the clock, stop the search)."""
    crossed = _write(tmp_path, "crossed.yaml", CROSSED)
    plain = CROSSED.replace("name: r1\n", "name: za\n").replace("name: r2\n", "name: zb\n")
    uncrossed = _write(tmp_path, "uncrossed.yaml", plain)
    for limit in ("1", "2", "4"):
        got = []
        for path in (crossed, uncrossed):
            result = runner.invoke(
                app, ["plan", str(path), "--eval-limit", limit, "--time-limit", "120", "--json"]
            )
            assert result.exit_code == 0, result.output
            got.append(json.loads(result.stdout))
        a, b = got
        assert a["gap"] is not None and a["gap"] == b["gap"]
        assert a["lower_bound"] == b["lower_bound"] and a["evaluations"] == b["evaluations"]
        mine = [json.dumps(p["plan"]["stages"], sort_keys=True) for p in a["plans"]]
        theirs = [_renamed(p["plan"]["stages"], {"za": "r1", "zb": "r2"}) for p in b["plans"]]
        assert mine == theirs


def _read_until(fd: int, needle: bytes, seen: bytearray) -> bool:
    """Read the pty into `seen` until `needle` shows or the child closes it (a hang guard of
    300 s, not a timing assertion)."""
    while needle not in seen:
        ready, _, _ = select.select([fd], [], [], 300)
        if not ready:
            return False
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            return False
        if not chunk:
            return False
        seen += chunk
    return True


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_exact_plan_shows_progress_and_a_signal_returns_the_best_so_far(signum: int) -> None:
    """`hetc plan --exact` on the GPT-Neo example, stderr a terminal: a progress line with
    best, bound and gap appears, and SIGINT (Ctrl-C) or SIGTERM (a scheduler's stop) then
    ends it with exit 0, plan 1 on stdout and a warning naming the interruption and the gap
    on stderr."""
    main, child = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    spec = ROOT / "examples/gptneo-a100-v100.yaml"
    process = subprocess.Popen(
        [sys.executable, "-m", "hetc", "plan", str(spec), "--exact", "--top", "1"],
        stdout=subprocess.PIPE,
        stderr=child,
        env=env,
        cwd=ROOT,
    )
    os.close(child)
    seen = bytearray()
    try:
        shown = _read_until(main, b"best ", seen)
        assert shown, seen.decode(errors="replace")
        _read_until(main, b"scored", seen)
        assert b", gap " in seen and b"bound " in seen and b"shapes left" in seen
        process.send_signal(signum)
        stdout, _ = process.communicate(timeout=300)
        _read_until(main, b"\x00", seen)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(main)
    err = seen.decode(errors="replace")
    assert process.returncode == 0, err
    assert "plan 1:" in stdout.decode()
    assert "warning: interrupted (Ctrl-C or SIGTERM): the best plan so far" in err
    assert "gap at most" in err
