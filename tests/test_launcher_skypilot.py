"""SkyPilot task YAML: loaded by SkyPilot's own loader for every example, with node counts and
accelerators checked against the plan, and the run script executed with SkyPilot's env vars.

Mutation checks: a broken num_nodes or accelerator count is refused by the loader (tests
below); setting the accelerator count to gpus_per_node + 1 in skypilot.py fails
test_every_example_loads_in_skypilot_with_the_plans_nodes (done by hand, then restored)."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml
from sky.utils import dag_utils

from hetc.emit.launchers.skypilot import ACCELERATORS
from hetc.units import plural
from tests.launcher_examples import (
    EXAMPLES,
    example_files,
    example_spec,
    nodes_per_pool,
    shellcheck_problems,
)


def _load(text: str) -> list[object]:
    """The tasks of a task or job-group YAML, as SkyPilot's CLI loads them."""
    return list(dag_utils.load_dag_from_yaml_str(text).tasks)


@pytest.mark.parametrize("stem", EXAMPLES)
def test_every_example_loads_in_skypilot_with_the_plans_nodes(stem: str) -> None:
    """Each site's YAML loads; its tasks ask for the plan's nodes and GPUs per pool."""
    spec = example_spec(stem)
    pools = {(z.name, p.name): p for z in spec.zones for p in z.pools}
    files = example_files(stem, ("skypilot",))
    yamls = {p: t for p, t in files.items() if p.startswith("launch/skypilot/")}
    assert yamls
    asked: Counter[tuple[str, int]] = Counter()
    scripts: list[str] = []
    for text in yamls.values():
        for task in _load(text):
            (resources,) = task.resources  # type: ignore[attr-defined]
            accelerators = resources.accelerators or {}
            asked[(next(iter(accelerators), "cpu"), *accelerators.values())] += task.num_nodes  # type: ignore[attr-defined]
            run = task.run  # type: ignore[attr-defined]
            listed = run.split("scripts=(", 1)[1].split(")", 1)[0].split()
            assert len(listed) == task.num_nodes  # type: ignore[attr-defined]
            scripts += listed
    want: Counter[tuple[str, int]] = Counter()
    for (zone, pool), count in nodes_per_pool(stem).items():
        p = pools[(zone, pool)]
        if spec.devices[p.device].kind == "cpu":
            want[("cpu",)] += count
        else:
            want[(ACCELERATORS.get(p.device, p.device), p.gpus_per_node)] += count
    assert asked == want
    node_scripts = sorted(p.removeprefix("launch/") for p in files if p.startswith("launch/node"))
    assert sorted(scripts) == node_scripts


def test_cloud_region_and_zone_reach_skypilot() -> None:
    """A site's cloud, with its zone's region and zone, is what SkyPilot's resources hold."""
    spec = example_spec("gptneo-a100-v100", ("partition: gpu,", "cloud: gcp, partition: gpu,"))
    (text,) = [
        t for p, t in example_files("gptneo-a100-v100", ("skypilot",), spec).items() if "sky" in p
    ]
    for task in _load(text):
        (resources,) = task.resources  # type: ignore[attr-defined]
        assert str(resources.cloud) == "GCP"
        assert (resources.region, resources.zone) == ("us-central1", "us-central1-a")


def _run_block(text: str, document: int = 0) -> str:
    docs = [d for d in yaml.safe_load_all(text) if "run" in d]
    return str(docs[document]["run"])


def _fake_output(tmp_path: Path, files: dict[str, str]) -> Path:
    """An output directory whose node scripts print their name and the rendezvous."""
    for path in files:
        if path.startswith("launch/node"):
            script = tmp_path / path
            script.parent.mkdir(parents=True, exist_ok=True)
            script.write_text(f'echo "{script.name} $HETC_RDZV_ENDPOINT $HETC_RUN_DIR"\n')
    return tmp_path


def test_run_starts_the_node_script_of_its_rank_with_the_head_as_rendezvous(
    tmp_path: Path,
) -> None:
    """Node rank r of a one-pool site runs the r-th script; rendezvous = first SKYPILOT_NODE_IPS."""
    files = example_files("opt350m-a100", ("skypilot",))
    run = _run_block(files["launch/skypilot/us-central1-a.yaml"])
    count = sum(1 for p in files if p.startswith("launch/node"))
    out = _fake_output(tmp_path, files)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "SKYPILOT_NODE_IPS": "10.0.0.7\n10.0.0.8",
        "SKYPILOT_NUM_NODES": str(count),
        "SKYPILOT_NODE_RANK": "3",
        "HETC_RDZV_ENDPOINT": "",
    }
    done = subprocess.run(["bash", "-c", run], cwd=out, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["node0003.sh", "10.0.0.7:29500", f"{tmp_path}/hetc-run"]
    env["SKYPILOT_NUM_NODES"] = str(count + 1)
    done = subprocess.run(["bash", "-c", run], cwd=out, env=env, capture_output=True, text=True)
    assert done.returncode == 2
    assert f"this task starts {plural(count, 'node')}, SkyPilot gave {count + 1}" in done.stderr


def test_job_group_names_its_first_tasks_head_and_multi_site_needs_an_endpoint(
    tmp_path: Path,
) -> None:
    """Several pools: a job group whose rendezvous is `<task0>-0.<group>`; several sites: the
    run stops unless HETC_RDZV_ENDPOINT is given, and uses it when it is."""
    (text,) = [t for p, t in example_files("gptneo-a100-v100", ("skypilot",)).items() if "sky" in p]
    header, first, second = yaml.safe_load_all(text)
    assert header == {"name": "hetc-gptneo-a100-v100-campus", "execution": "parallel"}
    host = f"{first['name']}-0.{header['name']}"
    group = example_files("gptneo-a100-v100", ("skypilot",))
    group_out = _fake_output(tmp_path / "group", group)
    for task, rank in ((first, 0), (second, 5)):
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "SKYPILOT_NUM_NODES": str(task["num_nodes"]),
            "SKYPILOT_NODE_RANK": str(rank),
        }
        done = subprocess.run(
            ["bash", "-c", task["run"]], cwd=group_out, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        listed = task["run"].split("scripts=(", 1)[1].split(")", 1)[0].split()
        assert done.stdout.split()[:2] == [listed[rank], f"{host}:29500"]
    files = example_files("opt350m-5zones", ("skypilot",))
    run = _run_block(files["launch/skypilot/us-central1-b.yaml"])
    count = run.split("scripts=(", 1)[1].split(")", 1)[0].count(".sh")
    out = _fake_output(tmp_path, files)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "SKYPILOT_NUM_NODES": str(count),
        "SKYPILOT_NODE_RANK": "0",
        "HETC_RDZV_ENDPOINT": "",
    }
    done = subprocess.run(["bash", "-c", run], cwd=out, env=env, capture_output=True, text=True)
    assert done.returncode == 2
    assert "this plan spans several sites" in done.stderr
    env["HETC_RDZV_ENDPOINT"] = "rdzv.example:1234"
    done = subprocess.run(["bash", "-c", run], cwd=out, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[1] == "rdzv.example:1234"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("num_nodes: 32", "num_nodes: 0", "num_nodes should be a positive int"),
        ('{"A100": 4}', '{"A100": -4}', "Accelerator count must be a positive number"),
        ("workdir: .", "workdirr: .", "Invalid task YAML"),
    ],
)
def test_skypilots_loader_refuses_a_broken_field(old: str, new: str, message: str) -> None:
    """Mutation check: SkyPilot's loader is not vacuous (a broken field is refused)."""
    text = example_files("opt350m-a100", ("skypilot",))["launch/skypilot/us-central1-a.yaml"]
    assert old in text
    with pytest.raises(Exception, match=message):
        _load(text.replace(old, new))


@pytest.mark.parametrize("stem", ["gptneo-a100-v100", "opt350m-5zones", "local-cpu"])
def test_setup_and_run_pass_shellcheck(stem: str, tmp_path: Path) -> None:
    """Every setup and run block hetc writes is clean under shellcheck."""
    for path, text in example_files(stem, ("skypilot",)).items():
        if path.startswith("launch/skypilot/"):
            for document in yaml.safe_load_all(text):
                for key in ("setup", "run"):
                    if key in document:
                        assert shellcheck_problems(document[key], tmp_path) == "", path
