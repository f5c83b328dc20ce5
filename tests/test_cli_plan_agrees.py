"""`hetc plan` and `plan_spec` (what bench/zones.py runs) choose the same plan given the same
options, on bench/zones.py's batch-10^6 spec. Issue 29 saw 64 pipelines from one and 128 from
the other; the two agree at every commit since the bench was written (128 pipelines, a
complete search in a fraction of a second), and differ only where the options differ: a
search stopped early (a time limit that binds, or an evaluation limit) returns another plan.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from typer.testing import CliRunner

from hetc.cli import app
from hetc.plan import plan_to_json
from hetc.schema import check_text
from hetc.solver.budget import command_budget
from hetc.solver.planner import plan_spec

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def _bench() -> ModuleType:
    loaded = importlib.util.spec_from_file_location("bench_zones", ROOT / "bench" / "zones.py")
    assert loaded is not None and loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


def _cli_plan(path: Path, *options: str) -> dict[str, object]:
    done = runner.invoke(app, ["plan", str(path), "--json", "--top", "1", *options])
    assert done.exit_code == 0, done.output
    plan = json.loads(done.stdout)["plans"][0]["plan"]
    assert isinstance(plan, dict)
    return plan


def test_cli_and_bench_worker_agree_on_the_batch_spec(tmp_path: Path) -> None:
    """The CLI's plan (its default budget) is the one plan_spec builds under the same budget,
    and bench/zones.py's worker (a fresh process, no limit) counts the same pipelines: 128,
    one per A100."""
    text = _bench().batch_spec(10**6)
    path = tmp_path / "batch.yaml"
    path.write_text(text)
    spec = check_text(text, "batch.yaml").spec
    assert spec is not None
    cli = _cli_plan(path)
    result = plan_spec(spec, top=1, budget=command_budget())
    assert result.search.complete
    assert cli == json.loads(plan_to_json(result.proposals[0].plan))
    worker = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "zones.py"), "--worker"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    counted = json.loads(worker.stdout.strip().splitlines()[-1])["pipelines"]
    assert counted == len(result.proposals[0].plan.pipelines) == 128
    assert len(cli["pipelines"]) == 128  # type: ignore[arg-type]


def test_a_search_stopped_early_agrees_given_the_same_limit(tmp_path: Path) -> None:
    """With the same evaluation limit (a deterministic early stop) both return the same
    plan: a stopped search is where they can differ. On 20 zones one scored candidate does
    not finish the search."""
    text = _bench().zones_spec(20)
    path = tmp_path / "zones.yaml"
    path.write_text(text)
    spec = check_text(text, "zones.yaml").spec
    assert spec is not None
    stopped = plan_spec(spec, top=1, eval_limit=1)
    assert not stopped.search.complete
    expected = json.loads(plan_to_json(stopped.proposals[0].plan))
    assert _cli_plan(path, "--eval-limit", "1") == expected
