"""A seeded family of specs unlike the benchmark scenarios: what a new user might write.

`family_spec(rng)` draws 1-6 device types of the catalog, 1-12 zones in 1-4 regions (zone
and region names crossed: zone `r<j>` may sit in region `r<k>`), quotas of 4 to 4,096
devices per pool, nodes of 1, 2, 4 or 8 devices, prices that are zero, all equal, or the
catalog's, a model of the catalog, either objective, and sometimes max_gpus, a budget or a
throughput floor. `small_spec(rng)` draws the same kinds of specs at a size the exact search
finishes in seconds (OPT-350M or GPT-3-1.3B, 1-2 zones, 1-2 pools, up to 8 devices a pool),
for tests that compare with the search's own verdict.
"""

from __future__ import annotations

import random

from hetc.schema import check_text
from hetc.schema.spec import Spec

DEVICES = (
    "A100-40GB",
    "A100-80GB",
    "H100-80GB",
    "V100-16GB",
    "V100-32GB",
    "A10G",
    "L4",
    "T4",
    "RTX-3090",
)
MODELS = ("OPT-350M", "GPT-3-1.3B", "GPT-Neo-2.7B", "Llama-7B", "Llama-13B", "Llama-65B")
"""Catalog models the family draws from."""


def _text(
    rng: random.Random,
    *,
    model: str,
    batch: int,
    zones: list[tuple[str, str, list[tuple[str, int, int]]]],
    prices: str,
    floors: bool,
) -> str:
    """The YAML of one spec: zones as (name, region, [(device, quota, gpus_per_node)])."""
    equal = round(rng.uniform(0.5, 4.0), 2)
    lines = []
    for name, region, pools in zones:
        lines.append(f"  - name: {name}\n    region: {region}\n    pools:")
        for device, quota, gpn in pools:
            price = {"zero": ", price: 0 USD/h", "equal": f", price: {equal} USD/h"}.get(prices, "")
            lines.append(
                f"      - {{device: {device}, quota: {quota}, gpus_per_node: {gpn}{price}}}"
            )
    constraints = []
    if floors and rng.random() < 0.25:
        constraints.append(f"max_gpus: {rng.choice([1, 2, 4, 8, 16, 64, 256])}")
    if floors and rng.random() < 0.2:
        constraints.append(f"max_cost_per_iteration: {10 ** rng.uniform(-4, 1):.3g}")
    if floors and rng.random() < 0.2:
        constraints.append(f"min_throughput: {10 ** rng.uniform(-2.5, 1):.3g}")
    zero = rng.choice([0, 1, 2])
    checkpointing = str(rng.random() < 0.5).lower()
    return (
        f"version: 1\nname: family\nmodel: {{preset: {model}}}\n"
        f"training: {{global_batch_size: {batch}, seq_len: {rng.choice([512, 1024, 2048])},"
        f" precision: fp16, zero_stage: {zero}, activation_checkpointing: {checkpointing}}}\n"
        f"objective: {rng.choice(['max_throughput', 'min_cost'])}\n"
        + (f"constraints: {{{', '.join(constraints)}}}\n" if constraints else "")
        + "zones:\n"
        + "\n".join(lines)
        + "\n"
    )


def _zones(
    rng: random.Random, devices: list[str], zones: int, regions: int, quota: tuple[int, int]
) -> list[tuple[str, str, list[tuple[str, int, int]]]]:
    """Zones named `r<i>` (crossing the region names) or `z<i>`, each with some of the
    devices, quotas drawn log-uniformly in `quota` and rounded to whole nodes."""
    crossed = rng.random() < 0.3
    out = []
    for z in range(zones):
        region = f"r{rng.randrange(regions)}"
        name = f"r{z}" if crossed else f"z{z}"
        pools = []
        for device in rng.sample(devices, rng.randint(1, len(devices))):
            gpn = rng.choice([1, 2, 4, 8])
            low, high = quota
            devices_wanted = int(2 ** rng.uniform(low.bit_length() - 1, high.bit_length() - 1))
            pools.append((device, max(gpn, devices_wanted // gpn * gpn), gpn))
        out.append((name, region, pools))
    return out


def _checked(text: str) -> Spec:
    result = check_text(text, "family.yaml")
    if result.spec is None:
        raise ValueError("\n".join(d.format() for d in result.diagnostics) + "\n" + text)
    return result.spec


def family_text(rng: random.Random) -> str:
    """The YAML of one spec of the planner family (see the module docstring), for tools that
    run hetc on files."""
    devices = rng.sample(DEVICES, rng.randint(1, 6))
    regions = rng.randint(1, 4)
    zones = _zones(rng, devices, rng.randint(1, 12), regions, (4, 4096))
    return _text(
        rng,
        model=rng.choice(MODELS),
        batch=rng.choice([64, 256, 512, 1024, 2048]),
        zones=zones,
        prices=rng.choice(["zero", "equal", "catalog", "catalog"]),
        floors=True,
    )


def family_spec(rng: random.Random) -> Spec:
    """One spec of the planner family (see the module docstring)."""
    return _checked(family_text(rng))


def small_spec(rng: random.Random) -> Spec:
    """One spec small enough for the exact search without a time limit (module docstring)."""
    devices = rng.sample(DEVICES, rng.randint(1, 2))
    zones = _zones(rng, devices, rng.randint(1, 2), 2, (1, 8))
    for _, _, pools in zones:
        del pools[2:]
    return _checked(
        _text(
            rng,
            model=rng.choice(["OPT-350M", "OPT-350M", "GPT-3-1.3B"]),
            batch=rng.choice([8, 16]),
            zones=zones,
            prices=rng.choice(["zero", "equal", "catalog"]),
            floors=True,
        )
    )
