"""Small random specs for checking the planner's search against exhaustive enumeration.

Each instance is a pure function of its seed, so a failing seed is a reproducer by itself. The
instances are kept small (few blocks, few devices) because the brute force enumerates every
candidate; within that size they vary everything the planning model reads: device speed and
memory (custom devices barely larger than the model, so memory decides some stages), TP
degrees (heads, KV heads and FFN width limit them), zones and regions with distinct links and
egress prices, ZeRO stage (mixed TP only without ZeRO), optimizer, checkpointing, objective.

`random_instance` may carry a `max_gpus` limit chosen from the quotas alone; `binding_instance`
additionally calibrates a budget or a throughput floor against the solved unconstrained
instance, so that it cuts off the unconstrained optimum.
"""

from __future__ import annotations

import io
import random
from typing import Any

from ruamel.yaml import YAML

from hetc.catalog import architecture_from_mapping
from hetc.costmodel.planning import Estimate, PlanningModel
from hetc.schema import check_text
from hetc.solver.search import search

__all__ = [
    "MAX_BLOCKS",
    "MAX_DEVICES",
    "binding_instance",
    "instance_data",
    "random_instance",
    "relaxed",
    "to_yaml",
]

MAX_BLOCKS = 4
"""Transformer blocks at most: the splits into stages grow as 2^(blocks - 1)."""
MAX_DEVICES = 10
"""Devices over all pools at most: the replica-count assignments grow combinatorially in it."""

_CATALOG = {
    "A100-40GB": ("fp32", "fp16", "bf16"),
    "V100-16GB": ("fp32", "fp16"),
    "T4": ("fp32", "fp16"),
}
_GIB = 2**30
_FIXED_OVERHEAD = 1.0 * _GIB
"""The planning model's default framework overhead per process; custom memories sit above it."""


def _architecture(rng: random.Random, seq_len: int) -> dict[str, Any]:
    hidden = rng.choice([64, 128, 256, 512])
    heads = rng.choice([h for h in (1, 2, 4, 8) if hidden % h == 0])
    arch: dict[str, Any] = {
        "layers": rng.randint(1, MAX_BLOCKS),
        "hidden": hidden,
        "heads": heads,
        "ffn": hidden * rng.choice([2, 3, 4]),
        "vocab": rng.choice([256, 1000, 4096, 8192]),
        "max_positions": rng.choice([seq_len, 2 * seq_len, 1024]),
    }
    if heads > 1 and rng.random() < 0.3:
        arch["kv_heads"] = rng.choice([k for k in (1, 2, 4) if heads % k == 0 and k < heads])
    if rng.random() < 0.3:
        arch["tied_embeddings"] = False
    if rng.random() < 0.3:
        arch["mlp"] = rng.choice(["relu", "swiglu"])
    if rng.random() < 0.2:
        arch["position"] = "rope"
    return arch


def _custom_device(rng: random.Random, name: str, footprint: float) -> dict[str, Any]:
    """A device whose memory is the framework overhead plus a fraction (sometimes under one)
    of the whole model's training state, so it must split the model or may not hold it."""
    memory_mb = int((_FIXED_OVERHEAD + rng.uniform(0.4, 1.6) * footprint) / 1e6) + 1
    peak = rng.choice([2.0, 5.0, 10.0, 20.0, 40.0])
    return {
        "name": name,
        "memory": f"{memory_mb}MB",
        "peak_tflops": {"fp32": peak, "fp16": 4 * peak, "bf16": 4 * peak},
        "memory_bandwidth": f"{rng.choice([100, 300, 900])}GB/s",
        # One direction (half the figure) beats every network link below, as on real GPUs:
        # the planning model bounds the plan only where a shared node is no slower.
        "intra_node": {"kind": "pcie", "bandwidth": f"{rng.choice([32, 64, 128])}GB/s"},
        "price": f"{rng.choice([0.2, 0.5, 1.0, 2.5])} USD/h",
    }


def _network(rng: random.Random, zones: list[dict[str, Any]]) -> dict[str, Any]:
    network: dict[str, Any] = {
        "intra_zone": {
            "bandwidth": f"{rng.choice([10, 25, 100])}Gbps",
            "latency": f"{rng.choice([5, 10, 50])}us",
        },
        "inter_zone": {
            "bandwidth": f"{rng.choice([2, 10, 50])}Gbps",
            "latency": f"{rng.choice([0.5, 1, 2])}ms",
        },
        "inter_region": {
            "bandwidth": f"{rng.choice([1, 5])}Gbps",
            "latency": f"{rng.choice([10, 30])}ms",
            "tcp_streams": rng.choice([1, 4]),
            "tcp_window": f"{rng.choice([1, 4, 16])}MiB",
        },
        "egress_price": {
            "inter_zone": f"{rng.choice([0, 0.001, 0.01])} USD/GB",
            "inter_region": f"{rng.choice([0, 0.002, 0.02, 0.05])} USD/GB",
        },
    }
    if len(zones) > 1 and rng.random() < 0.5:
        a, b = rng.sample([z["name"] for z in zones], 2)
        network["links"] = [
            {"between": [a, b], "bandwidth": f"{rng.choice([1, 20])}Gbps", "latency": "3ms"}
        ]
    return network


def instance_data(seed: int) -> dict[str, Any]:
    """The spec of `random_instance(seed)` as plain data (to modify before writing it out)."""
    rng = random.Random(seed)
    seq_len = rng.choice([64, 128, 256, 512])
    arch = _architecture(rng, seq_len)
    footprint = 16.0 * architecture_from_mapping(arch).parameter_count()

    custom: list[dict[str, Any]] = []
    names: list[str] = []
    for i in range(rng.randint(1, 3)):
        if rng.random() < 0.5:
            custom.append(_custom_device(rng, f"TINY-{i}", footprint))
            names.append(custom[-1]["name"])
        else:
            names.append(rng.choice([n for n in _CATALOG if n not in names]))
    supported = set.intersection(*(set(_CATALOG.get(n, ("fp32", "fp16", "bf16"))) for n in names))
    precision = rng.choice(sorted(supported))

    zone_count = rng.randint(1, 3)
    regions = ["r0"] if zone_count == 1 else rng.choice([["r0"], ["r0", "r1"]])
    zones: list[dict[str, Any]] = [
        {"name": f"z{i}", "region": regions[i % len(regions)], "pools": []}
        for i in range(zone_count)
    ]
    # Every device type somewhere, then a few more pools; each pool whole nodes of 1, 2 or 4.
    placements = [(rng.randrange(zone_count), n) for n in names]
    for _ in range(rng.randint(0, 2)):
        placements.append((rng.randrange(zone_count), rng.choice(names)))
    left = MAX_DEVICES
    for index, (zone, name) in enumerate(placements):
        pools = zones[zone]["pools"]
        if any(p["device"] == name for p in pools):
            continue
        reserve = len(placements) - index - 1
        room = left - reserve
        sizes = [g for g in (1, 2, 4) if g <= room]
        if not sizes:
            continue
        per_node = rng.choice(sizes)
        quota = per_node * rng.randint(1, max(1, min(3, room // per_node)))
        left -= quota
        pool: dict[str, Any] = {"device": name, "quota": quota, "gpus_per_node": per_node}
        if rng.random() < 0.5:
            pool["price"] = f"{rng.choice([0.3, 1.0, 2.0, 4.0])} USD/h"
        if rng.random() < 0.2:
            pool["nic_bandwidth"] = f"{rng.choice([5, 25])}Gbps"
        pools.append(pool)
    zones = [z for z in zones if z["pools"]]
    used = {p["device"] for z in zones for p in z["pools"]}
    custom = [d for d in custom if d["name"] in used]

    data: dict[str, Any] = {
        "version": 1,
        "name": f"oracle-{seed}",
        "model": {"architecture": arch},
        "training": {
            "global_batch_size": rng.choice([8, 12, 16, 24, 32]),
            "seq_len": seq_len,
            "precision": precision,
            "optimizer": {"type": rng.choice(["adamw", "adam", "sgd"])},
            "zero_stage": rng.choice([0, 0, 1, 2]),
            "activation_checkpointing": rng.random() < 0.3,
        },
        "objective": rng.choice(["max_throughput", "min_cost"]),
    }
    if custom:
        data["devices"] = custom
    data["zones"] = zones
    data["network"] = _network(rng, zones)
    total = sum(p["quota"] for z in zones for p in z["pools"])
    if total > 1 and rng.random() < 0.4:
        data["constraints"] = {"max_gpus": rng.randint(1, total - 1)}
    return data


def to_yaml(data: dict[str, Any]) -> str:
    """Block style with flow-style leaves, keys in spec order: a failing seed's spec reads
    like the examples."""
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = None
    yaml.sort_base_mapping_type_on_output = False
    yaml.width = 100
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def random_instance(seed: int) -> str:
    """YAML text of a small valid spec, the same for the same seed."""
    return to_yaml(instance_data(seed))


def relaxed(data: dict[str, Any]) -> dict[str, Any]:
    """The same spec without its explicit constraints (budget, floor, max_gpus)."""
    return {k: v for k, v in data.items() if k != "constraints"}


def binding_instance(seed: int) -> str:
    """`random_instance(seed)` with a budget or throughput floor that cuts off its optimum.

    Solves the unconstrained instance for both objectives with the search (the constraint's
    value is the only thing taken from it; correctness is judged by the brute force). For
    max_throughput the budget lies strictly between the cheapest plan's cost and the fastest
    plan's; for min_cost the floor lies strictly between the cheapest plan's throughput and
    the fastest plan's. Where the two plans agree, max_gpus is one device short of what the
    optimum rents, unless that leaves nothing feasible (a trivial way to bind); then, or when
    the instance is infeasible already, it is `random_instance(seed)` as is.
    """
    data = instance_data(seed)
    base = relaxed(data)
    best = {}
    for objective in ("max_throughput", "min_cost"):
        found = _solve({**base, "objective": objective})
        if found is None:
            return to_yaml(data)
        best[objective] = found
    fast, cheap = best["max_throughput"], best["min_cost"]
    rng = random.Random(f"binding-{seed}")
    share = rng.uniform(0.2, 0.8)
    if data["objective"] == "max_throughput" and fast.cost > cheap.cost * (1 + 1e-6):
        budget = cheap.cost + share * (fast.cost - cheap.cost)
        return to_yaml({**base, "constraints": {"max_cost_per_iteration": budget}})
    if data["objective"] == "min_cost" and cheap.iteration_time > fast.iteration_time * (1 + 1e-6):
        time = fast.iteration_time + share * (cheap.iteration_time - fast.iteration_time)
        return to_yaml({**base, "constraints": {"min_throughput": 1.0 / time}})
    optimum = fast if data["objective"] == "max_throughput" else cheap
    fewer = {**base, "constraints": {"max_gpus": optimum.devices - 1}}
    if optimum.devices > 1 and _solve(fewer) is not None:
        return to_yaml(fewer)
    return to_yaml(data)


def _solve(data: dict[str, Any]) -> Estimate | None:
    spec = check_text(to_yaml(data)).spec
    assert spec is not None
    found = search(PlanningModel(spec)).candidates
    return found[0].estimate if found else None
