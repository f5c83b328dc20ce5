"""Kubernetes manifests: every document validated strictly by kubernetes-validate against the
official schemas for every example, with Jobs, GPUs and the rendezvous host checked against
the plan, and the pod command executed with Kubernetes' JOB_COMPLETION_INDEX.

Mutation checks: a misspelled field or a wrong type is refused by the validator (tests below);
asking for gpus_per_node + 1 GPUs per pod in kubernetes.py fails
test_every_example_validates_with_the_plans_jobs_and_gpus (done by hand, then restored)."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from hetc.emit.launch import SHUTDOWN_MARGIN, TERM_GRACE
from hetc.emit.launchers.kubernetes import DEVICE_LABEL
from tests.launcher_examples import (
    EXAMPLES,
    example_files,
    example_spec,
    nodes_per_pool,
    shellcheck_problems,
)

VERSION = kubernetes_validate.latest_version()


def _documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def _validate(document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, VERSION, strict=True)


@pytest.mark.parametrize("stem", EXAMPLES)
def test_every_example_validates_with_the_plans_jobs_and_gpus(stem: str) -> None:
    """Every document validates; Jobs hold the plan's nodes per pool with one node's devices."""
    spec = example_spec(stem)
    pools = {(z.name, p.name): p for z in spec.zones for p in z.pools}
    files = example_files(stem, ("kubernetes",))
    manifests = {p: t for p, t in files.items() if p.startswith("launch/kubernetes/")}
    assert manifests
    asked: Counter[tuple[str, str, int]] = Counter()
    scripts: list[str] = []
    for text in manifests.values():
        service, *jobs = _documents(text)
        for document in (service, *jobs):
            _validate(document)
        assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
        first = jobs[0]["metadata"]["name"]
        for job in jobs:
            assert job["kind"] == "Job" and job["spec"]["completionMode"] == "Indexed"
            count = job["spec"]["completions"]
            assert job["spec"]["parallelism"] == count
            pod = job["spec"]["template"]["spec"]
            assert pod["subdomain"] == service["metadata"]["name"]
            assert set(service["spec"]["selector"].items()) <= set(
                job["spec"]["template"]["metadata"]["labels"].items()
            )
            (container,) = pod["containers"]
            command = container["command"][2]
            if "HETC_RDZV_ENDPOINT:-" in command:
                assert f"{first}-0.{service['metadata']['name']}:29500" in command
            listed = command.split("scripts=(", 1)[1].split(")", 1)[0].split()
            assert len(listed) == count
            scripts += listed
            resources = container["resources"]
            if "limits" in resources:
                device = pod["nodeSelector"][DEVICE_LABEL]
                asked[(device, "gpu", resources["limits"]["nvidia.com/gpu"])] += count
            else:
                asked[("cpu", "cpu", int(resources["requests"]["cpu"]))] += count
    want: Counter[tuple[str, str, int]] = Counter()
    for (zone, pool), count in nodes_per_pool(stem).items():
        p = pools[(zone, pool)]
        if spec.devices[p.device].kind == "cpu":
            want[("cpu", "cpu", p.gpus_per_node)] += count
        else:
            want[(p.device, "gpu", p.gpus_per_node)] += count
    assert asked == want
    node_scripts = sorted(p.removeprefix("launch/") for p in files if p.startswith("launch/node"))
    assert sorted(scripts) == node_scripts


def _command(text: str, job: int = 0) -> str:
    return str(_documents(text)[1 + job]["spec"]["template"]["spec"]["containers"][0]["command"][2])


def _fake_output(tmp_path: Path, files: dict[str, str]) -> Path:
    """The volume's layout: out/launch/ with node scripts that print their name and rendezvous."""
    for path in files:
        if path.startswith("launch/node"):
            script = tmp_path / "out" / path
            script.parent.mkdir(parents=True, exist_ok=True)
            script.write_text(f'echo "{script.name} $HETC_RDZV_ENDPOINT $HETC_RUN_DIR"\n')
    return tmp_path


def test_pod_runs_the_node_script_of_its_completion_index(tmp_path: Path) -> None:
    """Pod index i of the second Job runs that Job's i-th script, rendezvous at Job 0's pod 0."""
    files = example_files("slurm-local-cpu", ("kubernetes",))
    text = files["launch/kubernetes/ci.yaml"]
    command = _command(text, job=1)
    listed = command.split("scripts=(", 1)[1].split(")", 1)[0].split()
    out = _fake_output(tmp_path, files)
    env = {"PATH": os.environ["PATH"], "JOB_COMPLETION_INDEX": "1", "HETC_RDZV_ENDPOINT": ""}
    done = subprocess.run(["bash", "-c", command], cwd=out, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    service = _documents(text)[0]["metadata"]["name"]
    first = _documents(text)[1]["metadata"]["name"]
    assert done.stdout.split() == [listed[1], f"{first}-0.{service}:29500", f"{out}/run"]


def test_a_multi_site_plan_needs_an_endpoint(tmp_path: Path) -> None:
    """A site that starts part of the plan stops unless HETC_RDZV_ENDPOINT is set, else uses it."""
    files = example_files("opt350m-5zones", ("kubernetes",))
    command = _command(files["launch/kubernetes/us-central1-c.yaml"])
    out = _fake_output(tmp_path, files)
    env = {"PATH": os.environ["PATH"], "JOB_COMPLETION_INDEX": "0", "HETC_RDZV_ENDPOINT": ""}
    done = subprocess.run(["bash", "-c", command], cwd=out, env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "this plan spans several sites" in done.stderr
    env["HETC_RDZV_ENDPOINT"] = "rdzv.example:1234"
    done = subprocess.run(["bash", "-c", command], cwd=out, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[1] == "rdzv.example:1234"


def test_names_stay_valid_for_long_and_odd_spec_names() -> None:
    """A long spec name with odd characters still gives valid object and host names."""
    spec = example_spec(
        "local-cpu", ("name: local-cpu-tiny", "name: 'Ünïcode job/" + "x" * 70 + "'")
    )
    files = example_files("local-cpu", ("kubernetes",), spec)
    (text,) = [t for p, t in files.items() if p.startswith("launch/kubernetes/")]
    service, job = _documents(text)
    for document in (service, job):
        _validate(document)
    name = job["metadata"]["name"]
    assert len(f"{name}-0") <= 63 and len(service["metadata"]["name"]) <= 63
    for label in (name, service["metadata"]["name"]):
        assert label == label.lower() and label[0].isalnum() and label[-1].isalnum()


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("  completionMode: Indexed", "  completionMod: Indexed"),
        ("  backoffLimit: 0", '  backoffLimit: "zero"'),
        ("      restartPolicy: Never", "      restartPolicy: [Never]"),
    ],
)
def test_kubernetes_validate_refuses_a_broken_field(old: str, new: str) -> None:
    """Mutation check: the strict validator is not vacuous (a broken Job is refused)."""
    text = example_files("opt350m-a100", ("kubernetes",))["launch/kubernetes/us-central1-a.yaml"]
    assert old in text
    job = _documents(text.replace(old, new))[1]
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(job)


@pytest.mark.parametrize("stem", ["slurm-local-cpu", "opt350m-5zones"])
def test_pod_commands_pass_shellcheck(stem: str, tmp_path: Path) -> None:
    """Every pod command hetc writes is clean under shellcheck."""
    for path, text in example_files(stem, ("kubernetes",)).items():
        if path.startswith("launch/kubernetes/"):
            for job in _documents(text)[1:]:
                command = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
                assert shellcheck_problems(command, tmp_path) == "", path


def test_pods_outlast_the_ranks_checkpoint_grace() -> None:
    """Kubernetes' SIGKILL comes after torchrun's own (HETC_TERM_GRACE + its margin)."""
    text = example_files("local-cpu", ("kubernetes",))["launch/kubernetes/local.yaml"]
    job = _documents(text)[1]
    assert job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > (
        TERM_GRACE + SHUTDOWN_MARGIN
    )
