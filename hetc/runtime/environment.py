"""This process's environment, as a profile records it, and the start-up check against the
profiles a plan was compiled with.

`hetc profile measure` records `current_environment` in the profile it writes; `hetc compile`
copies each used profile's record into `training.json` (`profiles`); at start-up every rank
compares its own environment with the record for its device and prints one warning line
naming what differs (`profile_warning`): the plan's predictions were made from times measured
elsewhere. A warning, not a refusal: the plan still trains correctly, only slower or faster
than predicted.
"""

from __future__ import annotations

import json
import platform
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import torch

from hetc.plan.environment import RUNTIME_FIELDS, environment_differences

NVIDIA_VERSION_FILE = Path("/proc/driver/nvidia/version")
CPU_INFO_FILE = Path("/proc/cpuinfo")


def current_environment(
    *, cuda: bool, threads: int, device_index: int | None = None
) -> dict[str, Any]:
    """torch, cuda, driver, device_name, host, threads (`hetc.plan.environment`) of this
    process: on a GPU, CUDA's version, the driver's and the device's name; on CPU None for
    the first two and the CPU model."""
    return {
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda) if cuda else None,
        "driver": gpu_driver_version() if cuda else None,
        "device_name": torch.cuda.get_device_name(device_index) if cuda else cpu_model(),
        "host": socket.gethostname(),
        "threads": threads,
    }


def cpu_model(cpuinfo: Path = CPU_INFO_FILE) -> str:
    """The CPU's model name from /proc/cpuinfo (Linux); else what `platform` says."""
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def gpu_driver_version(version_file: Path = NVIDIA_VERSION_FILE) -> str | None:
    """The NVIDIA kernel driver's version ("570.86.15"): from /proc/driver/nvidia/version,
    else `nvidia-smi`; None when neither says (torch reports only the CUDA API version the
    driver supports, which two driver releases can share)."""
    try:
        text = version_file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for word in text.split():
        parts = word.split(".")
        if len(parts) >= 2 and all(p.isdigit() for p in parts):
            return word
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        found = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = found.stdout.split()
    return lines[0] if found.returncode == 0 and lines else None


def profile_warning(
    out_dir: Path, node: str, *, cuda: bool, threads: int, device_index: int | None = None
) -> str | None:
    """One line naming how this rank's environment differs from the one its device's profile
    was measured in, or None (same environment, or the plan used no profile for it)."""
    try:
        training = json.loads((out_dir / "training.json").read_text(encoding="utf-8"))
        cluster = json.loads((out_dir / "topology" / "cluster.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # start-up has read both already; nothing to compare without them
    device = next((n["device"] for n in cluster.get("nodes", []) if n.get("id") == node), None)
    record = next((p for p in training.get("profiles", []) if p.get("device") == device), None)
    if record is None:
        return None
    mine = current_environment(cuda=cuda, threads=threads, device_index=device_index)
    differences = environment_differences(record.get("environment", {}), mine, RUNTIME_FIELDS)
    if not differences:
        return None
    return (
        f"the plan's predictions for {device} come from {record.get('file', 'a profile')},"
        f" measured in another environment: {'; '.join(differences)}"
    )
