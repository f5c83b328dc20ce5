"""The environment a profile records, and the warnings when it is used in another: the
comparison (`hetc.plan.environment`), what this machine reports (`hetc.runtime.environment`),
`training.json`'s copy of it, and the runtime's start-up line."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch
from runtime_harness import NODE_A, launch, one_stage_plan, ranks_in_plan_order, write_output
from typer.testing import CliRunner

from hetc.cli import app
from hetc.costmodel.profile import LayerProfile, write_profile
from hetc.plan.environment import ENVIRONMENT_FIELDS, RUNTIME_FIELDS, environment_differences
from hetc.runtime.environment import (
    cpu_model,
    current_environment,
    gpu_driver_version,
    profile_warning,
)

runner = CliRunner()
RECORDED = {
    "torch": "2.11.0",
    "cuda": "13.0",
    "driver": "570.86.15",
    "device_name": "NVIDIA H100 80GB HBM3",
    "host": "gpu7",
    "threads": 16,
}


def test_differences_name_each_field_with_both_values() -> None:
    """Each differing field once, as "label mine (profiled with theirs)", in field order;
    none for the same record."""
    mine = {**RECORDED, "torch": "2.13.0", "threads": 1}
    assert environment_differences(RECORDED, mine) == [
        "torch 2.13.0 (profiled with 2.11.0)",
        "threads 1 (profiled with 16)",
    ]
    assert environment_differences(RECORDED, dict(RECORDED)) == []
    assert environment_differences({**RECORDED, "cuda": None}, RECORDED) == [
        "CUDA 13.0 (profiled with none)"
    ]


def test_an_unrecorded_environment_never_passes_for_the_same() -> None:
    """A version 1-2 profile recorded nothing: every field is named as not recorded."""
    found = environment_differences({}, RECORDED)
    assert len(found) == len(ENVIRONMENT_FIELDS)
    assert found[0] == "torch 2.11.0 (not recorded in the profile)"


def test_the_runtime_does_not_compare_host_names() -> None:
    """A profile serves every node of its device: another host is no difference there."""
    assert "host" not in RUNTIME_FIELDS
    assert environment_differences(RECORDED, {**RECORDED, "host": "gpu8"}, RUNTIME_FIELDS) == []


def test_cpu_model_and_driver_version_are_read_from_their_files(tmp_path: Path) -> None:
    """/proc/cpuinfo's model name; the driver version from /proc/driver/nvidia/version."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Example CPU 9000\n")
    assert cpu_model(cpuinfo) == "Example CPU 9000"
    version = tmp_path / "version"
    version.write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Fri Jan 3 2025\n"
        "GCC version:  gcc version 12.2.0\n"
    )
    assert gpu_driver_version(version) == "570.86.15"


def test_this_cpu_environment_has_no_cuda_and_names_the_host() -> None:
    found = current_environment(cuda=False, threads=3)
    assert set(found) == set(ENVIRONMENT_FIELDS)
    assert found["torch"] == torch.__version__ and found["host"] == socket.gethostname()
    assert found["cuda"] is None and found["driver"] is None and found["threads"] == 3
    assert found["device_name"] == cpu_model()


def _out_dir(tmp_path: Path, environment: dict[str, object]) -> Path:
    """A compiled output's cluster.json (via the runtime harness) and a training.json whose
    profiles record `environment` for the node's device."""
    out = tmp_path / "out"
    write_output(one_stage_plan(), out)
    record = {"profiles": [{"device": "A100-40GB", "file": "a.json", "environment": environment}]}
    (out / "training.json").write_text(json.dumps(record))
    return out


def test_profile_warning_names_what_differs_for_the_ranks_device(tmp_path: Path) -> None:
    """One line naming the device, the file and each difference; None when the same."""
    mine = current_environment(cuda=False, threads=1)
    out = _out_dir(tmp_path, {**mine, "torch": "0.1", "host": "elsewhere"})
    warning = profile_warning(out, NODE_A, cuda=False, threads=1)
    assert warning == (
        "the plan's predictions for A100-40GB come from a.json, measured in another"
        f" environment: torch {torch.__version__} (profiled with 0.1)"
    )
    same = _out_dir(tmp_path, {**mine, "host": "elsewhere"})
    assert profile_warning(same, NODE_A, cuda=False, threads=1) is None
    assert profile_warning(same, "no-such-node", cuda=False, threads=1) is None


@pytest.mark.slow  # two processes start torch
def test_each_rank_warns_at_start_up(tmp_path: Path) -> None:
    """`python -m hetc.runtime` prints the warning on every rank of a device whose profile
    came from another environment, and starts all the same."""
    out = _out_dir(tmp_path, {**current_environment(cuda=False, threads=1), "threads": 64})
    topology = write_output(one_stage_plan(), out)
    outcomes = launch(ranks_in_plan_order(topology), out, tmp_path / "run", timeout=60)
    for outcome in outcomes:
        assert outcome.returncode == 0, outcome.stderr
        warnings = [line for line in outcome.hetc_lines if "warning" in line]
        assert len(warnings) == 1 and "(profiled with 64)" in warnings[0]


def test_compile_records_each_profiles_environment_in_training_json(tmp_path: Path) -> None:
    """training.json lists the profile used by device, file name and environment."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        """version: 1
name: env
model:
  architecture: {layers: 2, hidden: 64, heads: 4, ffn: 256, vocab: 512, max_positions: 64}
training: {global_batch_size: 4, seq_len: 32, precision: fp32}
devices:
  - {name: CPU-A, kind: cpu, memory: 4GiB, peak_tflops: {fp32: 0.05},
     memory_bandwidth: 10GB/s, intra_node: {kind: shared-memory, bandwidth: 5GB/s},
     price: 1 USD/h}
zones:
  - name: z
    pools: [{device: CPU-A, quota: 1, gpus_per_node: 1}]
"""
    )
    times = {i: (1e-3, 2e-3, 1e-4) for i in range(4)}
    profile = LayerProfile(
        model="custom",
        device="CPU-A",
        precision="fp32",
        seq_len=32,
        times={m: {1: times} for m in (1, 2, 4)},
        environment=RECORDED,
    )
    write_profile(profile, tmp_path / "cpu.json")
    result = runner.invoke(
        app,
        [
            "compile",
            str(spec),
            "-o",
            str(tmp_path / "out"),
            "--profile",
            str(tmp_path / "cpu.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    training = json.loads((tmp_path / "out" / "training.json").read_text())
    assert training["profiles"] == [
        {"device": "CPU-A", "file": "cpu.json", "environment": RECORDED}
    ]
