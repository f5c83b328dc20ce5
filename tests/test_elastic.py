"""The pieces of `hetc run` that need no processes: the availability file, the quotas it
gives, the choice of the next plan, the generations' layout and `--status`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hetc.elastic.availability import (
    AvailabilityError,
    node_pool,
    parse_availability,
    pool_label,
    read_availability,
    spec_quotas,
    with_quotas,
)
from hetc.elastic.generations import (
    generations_dir,
    owned_link,
    point_out_at,
    record_path,
    state_dir,
    status_lines,
    write_json,
)
from hetc.elastic.replan import devices_by_pool, kept_devices, replan, same_layout
from hetc.elastic.slurm import parse_sinfo, slurm_quotas, slurm_site, usable
from hetc.schema import EnvironmentProblem, check_file
from hetc.schema.spec import Spec

ROOT = Path(__file__).resolve().parents[1]


def _spec(name: str) -> Spec:
    spec = check_file(str(ROOT / "examples" / name)).spec
    assert spec is not None
    return spec


def _errors(text: str, spec: Spec) -> list[str]:
    with pytest.raises(AvailabilityError) as caught:
        parse_availability(text, spec, file="a.yaml")
    return [d.format() for d in caught.value.diagnostics]


def test_labels_and_quotas_follow_the_spec_and_node_ids() -> None:
    """Pools are labelled `<pool>@<zone>` like the compiled node ids, with the spec's quotas."""
    spec = _spec("slurm-local-cpu.yaml")
    assert spec_quotas(spec) == {"cpu-fast@rack": 2, "cpu-slow@rack": 4}
    assert pool_label("cpu-fast", "rack") == "cpu-fast@rack"
    assert node_pool("cpu-fast@rack/n3") == "cpu-fast@rack"


def test_a_good_file_gives_the_quotas_it_names() -> None:
    """Named pools get their quota, others are not in the result (they keep the spec's)."""
    spec = _spec("slurm-local-cpu.yaml")
    found = parse_availability("pools:\n  cpu-slow@rack: 2\n", spec, file="a.yaml")
    assert found.quotas == {"cpu-slow@rack": 2}
    assert parse_availability("pools: {}\n", spec, file="a.yaml").quotas == {}


def test_each_bad_file_is_one_positioned_error() -> None:
    """Unparseable YAML, an unknown pool, a negative quota, more than the spec's quota, a
    quota that is not a whole number and an unknown key: each at its line and column."""
    spec = _spec("slurm-local-cpu.yaml")
    assert _errors("pools: [1\n", spec) == [
        "a.yaml:2:1: (root): YAML syntax: expected ',' or ']', but got '<stream end>'"
    ]
    assert _errors("pools:\n  cpu-fats@rack: 1\n", spec) == [
        "a.yaml:2:3: pools.cpu-fats@rack: unknown pool 'cpu-fats@rack' (did you mean"
        " 'cpu-fast@rack'?); the spec's pools are cpu-fast@rack, cpu-slow@rack"
    ]
    assert _errors("pools:\n  cpu-fast@rack: -2\n", spec) == [
        "a.yaml:2:18: pools.cpu-fast@rack: -2 devices: a quota cannot be negative (0 means"
        " none now)"
    ]
    (above,) = _errors("pools:\n  cpu-slow@rack: 5\n", spec)
    assert above.startswith("a.yaml:2:18: pools.cpu-slow@rack: 5 devices is more than the")
    assert "spec's quota 4" in above
    (fraction,) = _errors("pools:\n  cpu-slow@rack: 1.5\n", spec)
    assert fraction == "a.yaml:2:18: pools.cpu-slow@rack: 1.5 is not a whole number of devices"
    (key,) = _errors("pool:\n  cpu-slow@rack: 1\n", spec)
    assert key.startswith("a.yaml:1:1: pool: unknown key 'pool'")


def test_an_unreadable_file_is_an_environment_problem(tmp_path: Path) -> None:
    """A missing file raises EnvironmentProblem naming it."""
    with pytest.raises(EnvironmentProblem, match=r"nothing\.yaml"):
        read_availability(str(tmp_path / "nothing.yaml"), _spec("local-cpu.yaml"))


def test_with_quotas_replaces_only_the_named_pools() -> None:
    """The planning spec has the new quota for a named pool and the spec's for the others."""
    spec = _spec("slurm-local-cpu.yaml")
    changed = with_quotas(spec, {"cpu-slow@rack": 2})
    assert spec_quotas(changed) == {"cpu-fast@rack": 2, "cpu-slow@rack": 2}
    assert spec_quotas(spec) == {"cpu-fast@rack": 2, "cpu-slow@rack": 4}


def test_replan_keeps_the_running_plan_within_the_tolerance() -> None:
    """Quota raised from 2 to 4 on the CPU example: the running 2-rank plan (about twice as
    slow as the best) is kept with a tolerance of 100%, replaced by the 4-rank best with 5%;
    the 4-rank plan keeps both running devices (hand count)."""
    spec = _spec("local-cpu.yaml")
    small = replan(with_quotas(spec, {"local-cpu@localhost": 2}), None).choice
    assert small is not None and devices_by_pool(small.plan) == {"local-cpu@localhost": 2}
    kept = replan(spec, small.plan, tolerance=1.0).choice
    grown = replan(spec, small.plan, tolerance=0.05).choice
    assert kept is not None and grown is not None
    assert kept.source == "current" and same_layout(kept.plan, small.plan)
    assert not same_layout(grown.plan, small.plan)
    assert grown.source == "planner #1"
    assert devices_by_pool(grown.plan) == {"local-cpu@localhost": 4}
    assert grown.objective < kept.objective / 1.05
    assert grown.kept == kept_devices(grown.plan, small.plan) == 2


def test_replan_refuses_with_a_reason_when_nothing_fits() -> None:
    """Every quota 0: no plan, a diagnosis saying so."""
    spec = with_quotas(_spec("slurm-local-cpu.yaml"), {"cpu-fast@rack": 0, "cpu-slow@rack": 0})
    refused = replan(spec, None)
    assert refused.choice is None
    assert refused.diagnosis == "no pool has a whole node's devices now"


def test_status_shows_each_generation_and_the_current_one(tmp_path: Path) -> None:
    """`--status` lists every record with its reason, plan, phases and end, and marks the
    generation `out` points at."""
    out = tmp_path / "out"
    compiled = generations_dir(out) / "0002.abc"
    compiled.mkdir(parents=True)
    plan = {"hash": "f" * 64, "world_size": 2, "nodes": ["p@z/n0"], "stages": 1}
    plan |= {"pipelines": 2, "iteration_time": 0.5}
    write_json(record_path(out, 1), {"generation": 1, "reason": "start", "quotas": {"p@z": 4}})
    write_json(
        record_path(out, 2),
        {
            "generation": 2,
            "reason": "node lost: p@z/n1",
            "quotas": {"p@z": 2},
            "plan": plan,
            "compiled": str(compiled),
            "timings": {"plan": 0.01, "compile": 0.02},
            "resumed": 40,
            "ended": None,
        },
    )
    point_out_at(out, compiled)
    assert owned_link(out)
    lines = status_lines(out)
    assert lines[0] == f"{out}: 2 generations; run directory {state_dir(out) / 'run'}"
    assert "generation 0002 (current): node lost: p@z/n1" in lines
    assert "  reconfiguration: plan 0.01 s, compile 0.02 s" in lines
    assert "  resumed at step 40" in lines and lines[-1] == "  ended: running"
    assert json.loads(record_path(out, 2).read_text())["resumed"] == 40


def test_out_is_never_replaced_unless_it_is_the_runs_own_link(tmp_path: Path) -> None:
    """A directory at `out` that `hetc run` did not make is refused; status of a folder that
    was never run says so."""
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(EnvironmentProblem, match="not the link `hetc run` keeps"):
        point_out_at(out, tmp_path)
    with pytest.raises(EnvironmentProblem, match="was not run by `hetc run`"):
        status_lines(out)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hetc", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )


def test_run_refuses_a_bad_availability_file_before_starting(tmp_path: Path) -> None:
    """`hetc run` with a bad availability file: its positioned error, exit 1, nothing
    compiled or started; without SPEC and -o: a usage error (exit 2)."""
    (tmp_path / "a.yaml").write_text("pools:\n  local-cpu@localhost: 9\n", encoding="utf-8")
    spec = str(ROOT / "examples" / "local-cpu.yaml")
    done = _cli("run", spec, "-o", "out", "--availability", "a.yaml", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout.startswith("a.yaml:2:24: pools.local-cpu@localhost: 9 devices is more")
    assert "a.yaml: nothing was started" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml"]
    usage = _cli("run", cwd=tmp_path)
    assert usage.returncode == 2 and "run needs SPEC and -o OUT" in usage.stderr


def test_the_supervisor_does_not_import_torch() -> None:
    """`hetc run` only starts processes: importing it and the CLI loads no torch."""
    probe = (
        "import sys, hetc.cli, hetc.elastic.supervisor\n"
        "print(sorted(m for m in ('torch', 'deepspeed') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "[]"


SINFO = """hetc-n1|all*|mixed
hetc-n1|cpu-a|mixed
hetc-n2|cpu-a|idle
hetc-n3|cpu-b|drained
hetc-n4|cpu-b|idle*
hetc-n5|cpu-b|allocated
hetc-n6|cpu-b|down
"""


def test_slurm_node_states_cap_the_pools_quotas() -> None:
    """Usable nodes per partition times gpus_per_node, capped by the spec's quota: cpu-a has
    2 usable nodes (4 devices, capped at 2), cpu-b 1 (n3 drained, n4 not responding, n6
    down), so 2 devices."""
    spec = _spec("slurm-local-cpu.yaml")
    assert usable("mixed") and usable("allocated") and usable("idle")
    assert not usable("idle*") and not usable("draining") and not usable("down")
    assert parse_sinfo(SINFO)["cpu-b"] == {"hetc-n5"}
    assert slurm_quotas(spec, SINFO) == {"cpu-fast@rack": 2, "cpu-slow@rack": 2}
    assert slurm_site(spec) == "ci" and slurm_site(_spec("local-cpu.yaml")) is None
