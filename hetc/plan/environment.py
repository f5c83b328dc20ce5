"""The environment a profile was measured in, and how another one differs from it.

A profile's times hold for the software and hardware that produced them: another torch or
CUDA version picks other kernels, another driver or device model runs them at another speed,
another thread count changes a CPU rank's pace. A profile records these facts
(`hetc.costmodel.profile`, section `environment`), `hetc profile measure` re-measures a file
from another environment, and each rank of the runtime compares its own with the profiles its
plan was compiled with (`training.json`'s `profiles`). Comparing is here, in the bottom layer,
because both sides read it: the runtime imports nothing of hetc but `hetc.plan`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

ENVIRONMENT_FIELDS = ("torch", "cuda", "driver", "device_name", "host", "threads")
"""What a profile records: torch's version, CUDA's (None on CPU), the GPU driver's (None on
CPU), the device's name (torch's CUDA device name, or the CPU model), the host name, and the
threads each rank used."""

RUNTIME_FIELDS = tuple(f for f in ENVIRONMENT_FIELDS if f != "host")
"""What a rank compares: a profile is measured on one node and serves every node of its
device type, so every other node's host name differs by construction and says nothing."""

LABELS = {
    "torch": "torch",
    "cuda": "CUDA",
    "driver": "GPU driver",
    "device_name": "device",
    "host": "host",
    "threads": "threads",
}


def environment_differences(
    recorded: Mapping[str, object],
    current: Mapping[str, object],
    fields: Iterable[str] = ENVIRONMENT_FIELDS,
) -> list[str]:
    """One phrase per field of `fields` whose value differs, "torch 2.13.0 (profiled with
    2.11.0)"; a field the record lacks is "not recorded" (versions 1 and 2 of the profile
    format recorded none), so an unrecorded environment never passes for the same one."""
    found = []
    for name in fields:
        mine = current.get(name)
        if name not in recorded:
            found.append(f"{LABELS.get(name, name)} {_shown(mine)} (not recorded in the profile)")
        elif recorded[name] != mine:
            found.append(
                f"{LABELS.get(name, name)} {_shown(mine)} (profiled with {_shown(recorded[name])})"
            )
    return found


def _shown(value: object) -> str:
    return "none" if value is None else str(value)
