"""Every rank checks every input it reads against the compiled output's manifest at start-up,
and all ranks agree: a file edited on one node stops every rank with one message naming the
file and the node, before any training.

NEIGHBOURS runs plan rank 0 on node n0 and ranks 1 and 2 on node n1; node n1's ranks read
their own copy of the output directory, edited in one place. Before this check, each of these
edits trained to exit 0 with other losses than the plan's (issue 26).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from runtime_harness import launch, ranks_in_plan_order, seal
from runtime_training import oracle_spec, write_compiled
from test_runtime_train import NEIGHBOURS

from hetc.runtime.inputs import Inputs

NODE_1 = "cpu@z/n1"


def _edit_json(relative: str, change: Callable[[dict], None]) -> Callable[[Path], str]:
    def edit(out: Path) -> str:
        path = out / relative
        record = json.loads(path.read_text())
        change(record)
        path.write_text(json.dumps(record, indent=2))
        return relative

    return edit


def _deepspeed_of_rank_1(out: Path) -> str:
    rank_file = json.loads((out / "topology" / "ranks" / "node0001-local00.json").read_text())
    relative = str(rank_file["deepspeed_config"])
    _edit_json(relative, lambda c: c.update(gradient_clipping=0.5))(out)
    return relative


def _recompiled(out: Path) -> str:
    """training.json's seed changed and the manifest rewritten to match, as a recompile of
    another spec on that node would leave it: only the manifests' hashes differ."""
    _edit_json("training.json", lambda t: t.update(seed=8))(out)
    seal(out)
    return "manifest.json"


EDITS = {
    "training.json seed": _edit_json("training.json", lambda t: t.update(seed=8)),
    "DeepSpeed config": _deepspeed_of_rank_1,
    "rank file schedule": _edit_json(
        "topology/ranks/node0001-local00.json",
        lambda r: r["schedule"].update(warmup=r["schedule"]["warmup"] + 1),
    ),
    "recompiled on one node": _recompiled,
}


@pytest.mark.slow
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_input_edited_on_one_node_stops_every_rank_at_start_up(
    tmp_path: Path, edit: str
) -> None:
    """One line on every rank, the same, naming node n1 and the edited file; exit 1; no rank
    trained a step."""
    out, edited = tmp_path / "out", tmp_path / "node1-out"
    out.mkdir()
    topology = write_compiled(NEIGHBOURS, oracle_spec(batch=NEIGHBOURS.global_batch_size), out)
    shutil.copytree(out, edited)
    changed = EDITS[edit](edited)
    command = [sys.executable, "-m", "hetc.runtime", "--steps", "2"]
    ranks = [
        type(r)(
            node=r.node,
            local_rank=r.local_rank,
            torch_rank=r.torch_rank,
            command=command,
            out_dir=edited if r.node == NODE_1 else out,
        )
        for r in ranks_in_plan_order(topology)
    ]
    outcomes = launch(ranks, out, tmp_path / "run", timeout=60)
    assert [o.returncode for o in outcomes] == [1, 1, 1], [o.stderr[-2000:] for o in outcomes]
    lines = {tuple(line for line in o.hetc_lines if "ready" not in line) for o in outcomes}
    assert len(lines) == 1, lines
    (line,) = lines.pop()
    assert line.startswith("hetc-runtime: start-up failed: "), line
    if changed != "manifest.json":
        assert f"{edited / changed} was changed after `hetc compile`" in line, line
        assert f"node '{NODE_1}' local rank" in line, line
    else:
        assert "the compiled outputs (sha256 of manifest.json) differ" in line, line
        assert f"on node '{NODE_1}' local rank 0" in line, line
    assert "To fix: copy the output directory of one `hetc compile`" in line
    assert all("Traceback" not in o.stderr for o in outcomes)
    assert not (tmp_path / "run" / "metrics").exists(), "no rank trained"


def test_inputs_report_every_file_that_differs_from_the_manifest(tmp_path: Path) -> None:
    """Edited, unlisted and missing files each give one problem naming the file; unchanged
    files none; `text` hands out only what was checked."""
    for name, data in {"plan.json": "p", "training.json": "t", "extra.json": "x"}.items():
        (tmp_path / name).write_text(data)
    (tmp_path / "topology").mkdir()
    (tmp_path / "topology" / "cluster.json").write_text("c")
    seal(tmp_path)
    assert Inputs.open(tmp_path).problem() is None
    (tmp_path / "training.json").write_text("T")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "new.json").write_text("n")
    (tmp_path / "plan.json").unlink()
    inputs = Inputs.open(tmp_path)
    inputs.check("extra.json")
    inputs.check("profiles/new.json")
    assert len(inputs.problems) == 3, inputs.problems
    problem = inputs.problem()
    assert problem is not None
    assert f"{tmp_path / 'training.json'} was changed after `hetc compile`" in problem
    assert f"{tmp_path / 'plan.json'}: cannot read" in problem
    assert f"{tmp_path / 'profiles' / 'new.json'} is not in manifest.json" in problem
    assert inputs.text("training.json") == "T" and inputs.text("spec.json") is None


def test_an_edited_plan_is_pointed_at_compile_plan(tmp_path: Path) -> None:
    """plan.json changed after compiling: the problem says how to run an edited plan
    (`hetc compile --plan`); another edited file does not get that advice."""
    for name in ("plan.json", "training.json"):
        (tmp_path / name).write_text("x")
    seal(tmp_path)
    (tmp_path / "plan.json").write_text("edited")
    (tmp_path / "training.json").write_text("edited")
    problems = Inputs.open(tmp_path).problems
    plan, training = (next(p for p in problems if name in p) for name in ("plan", "training"))
    assert plan.endswith("hetc compile SPEC --plan OUT/plan.json -o OUT"), plan
    assert "--plan" not in training, training


def test_an_output_without_a_manifest_is_refused(tmp_path: Path) -> None:
    """No manifest.json: not `hetc compile` output (or copied in part)."""
    (tmp_path / "plan.json").write_text("p")
    problem = Inputs.open(tmp_path).problem()
    assert problem is not None and "manifest.json is missing" in problem
