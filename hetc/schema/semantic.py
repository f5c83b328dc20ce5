"""Checks a schema cannot express: names that must exist, agree, or be unique; arithmetic.

Runs on the plain data whatever the structural result, so one run reports every problem; each
check reads defensively and stays silent where the shape is wrong (the schema already said so).
Messages say what to do, in the manner of Zorse's `validate() -> list[str]`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from hetc import catalog
from hetc.schema.diagnostics import Finding, Path, did_you_mean
from hetc.schema.names import name_findings
from hetc.schema.plausible import plausibility_findings
from hetc.schema.structure import conforms, iter_quantities, schema_default
from hetc.schema.trainable import untrainable
from hetc.units import UnitError, parse_quantity

REQUIRED_FOR_NEW_DEVICE = ("memory", "peak_tflops", "memory_bandwidth")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def semantic_findings(data: Any, spec_dir: str = ".") -> list[Finding]:
    """All semantic problems (errors and warnings) of a spec document."""
    if not isinstance(data, dict):
        return []
    found: list[Finding] = []
    for check in (_quantities, _model, _training, _devices, _zones, _network, _sites, _run):
        found.extend(check(data))
    found.extend(_profiles(data, spec_dir))
    found.extend(_data_file(data, spec_dir))
    found.extend(name_findings(data))
    found.extend(plausibility_findings(data))
    return found


def _quantities(data: dict[str, Any]) -> Iterator[Finding]:
    for path, dimension, value in iter_quantities(data):
        try:
            parse_quantity(value, dimension)
        except UnitError as exc:
            yield Finding(path, str(exc))


def _model(data: dict[str, Any]) -> Iterator[Finding]:
    model = _dict(data.get("model"))
    preset = _str(model.get("preset"))
    if preset is not None and "architecture" not in model and catalog.find_model(preset) is None:
        names = [m.name for m in catalog.models().values()]
        names += [a for m in catalog.models().values() for a in m.aliases]
        yield Finding(
            ("model", "preset"),
            f"unknown model preset {preset!r}{did_you_mean(preset, names)}"
            f" (presets: {', '.join(catalog.models())}; or describe it under `architecture:`)",
        )
    arch = resolved_architecture(data)
    if arch is None:
        return
    if "architecture" in model:
        for field, message in arch.problems():
            yield Finding(("model", "architecture", field), message)
    yield from untrainable(model, arch)
    seq_len = _int(
        _dict(data.get("training")).get("seq_len", schema_default("training", "seq_len"))
    )
    if arch.position == "learned" and seq_len is not None and seq_len > arch.max_positions:
        yield Finding(
            ("training", "seq_len"),
            f"seq_len {seq_len} exceeds the model's {arch.max_positions} learned positions"
            f" (use at most {arch.max_positions})",
        )


def resolved_architecture(data: dict[str, Any]) -> catalog.ModelArchitecture | None:
    """The model the spec names or describes, or None where that part is malformed."""
    model = _dict(data.get("model"))
    if "architecture" in model:
        shape = model["architecture"]
        schema_path = ("properties", "model", "properties", "architecture")
        if not conforms(shape, *schema_path):
            return None
        return catalog.architecture_from_mapping(shape)
    preset = _str(model.get("preset"))
    found = catalog.find_model(preset) if preset is not None else None
    return found.architecture if found is not None else None


TOKENS_PER_ITERATION = 2**40
"""Most tokens one iteration may hold (global_batch_size x seq_len): 65,536 times the largest
published training batches (about 2^24 tokens); beyond it the spec is not a training run, and
the plan's microbatch counts would outgrow every integer the runtime's frameworks hold."""


def _training(data: dict[str, Any]) -> Iterator[Finding]:
    training = _dict(data.get("training"))
    batch = _int(training.get("global_batch_size"))
    seq_len = _int(training.get("seq_len", schema_default("training", "seq_len")))
    if max(batch or 0, seq_len or 0) > TOKENS_PER_ITERATION:
        batch = None  # beyond the schema's maxima, which say so; no product of them to print
    if batch is not None and seq_len is not None and batch * seq_len > TOKENS_PER_ITERATION:
        yield Finding(
            ("training", "global_batch_size"),
            f"{batch} sequences of {seq_len} tokens are {batch * seq_len:.3g} tokens per"
            f" iteration, more than the 2^40 = {TOKENS_PER_ITERATION:.3g} a training run"
            f" could use (the largest published batches hold about 2^24 tokens); use at most"
            f" {TOKENS_PER_ITERATION // seq_len} sequences",
        )
    if _int(training.get("zero_stage")) == 3:
        yield Finding(
            ("training", "zero_stage"),
            "ZeRO stage 3 is not supported (use 0, 1 or 2; 2 shards gradients and optimizer"
            " states)",
        )
    optimizer = _dict(training.get("optimizer"))
    schedule = _dict(training.get("lr_schedule"))
    lr, min_lr = optimizer.get("lr", 3e-4), schedule.get("min_lr", 0.0)
    if (
        isinstance(lr, (int, float))
        and isinstance(min_lr, (int, float))
        and not isinstance(min_lr, bool)
        and min_lr > lr
    ):
        yield Finding(
            ("training", "lr_schedule", "min_lr"),
            f"min_lr {min_lr} is above the peak lr {lr} (use a value of at most {lr})",
        )
    steps = _int(_dict(data.get("run")).get("steps", schema_default("run", "steps")))
    warmup = _int(schedule.get("warmup_steps"))
    if steps is not None and warmup is not None and warmup >= steps:
        yield Finding(
            ("training", "lr_schedule", "warmup_steps"),
            f"{warmup} warm-up steps cover the whole run of {steps} steps",
            severity="warning",
        )


def spec_device_names(data: dict[str, Any]) -> list[str]:
    """Names of the device types the spec itself defines or overrides."""
    return [n for d in _list(data.get("devices")) if (n := _str(_dict(d).get("name")))]


def _devices(data: dict[str, Any]) -> Iterator[Finding]:
    seen: dict[str, int] = {}
    for index, entry in enumerate(_list(data.get("devices"))):
        device = _dict(entry)
        name = _str(device.get("name"))
        if name is None:
            continue
        if name.casefold() in seen:
            yield Finding(
                ("devices", index, "name"),
                f"device {name!r} is defined twice (first at devices[{seen[name.casefold()]}]):"
                " merge the two entries",
            )
            continue
        seen[name.casefold()] = index
        if catalog.find_device(name) is None:
            for key in REQUIRED_FOR_NEW_DEVICE:
                if key not in device:
                    yield Finding(
                        ("devices", index, key),
                        f"{name!r} is not in the catalog, so it needs {key!r}"
                        f" (a new device gives {', '.join(REQUIRED_FOR_NEW_DEVICE)})",
                    )


def _zones(data: dict[str, Any]) -> Iterator[Finding]:
    precision = _dict(data.get("training")).get(
        "precision", schema_default("training", "precision")
    )
    if precision not in catalog.TRAINING_PRECISIONS:
        precision = None  # the schema reports it; a device cannot be judged against it
    custom = spec_device_names(data)
    known = list(catalog.devices()) + custom
    zone_seen: dict[str, int] = {}
    kinds: dict[str, Path] = {}
    for z, entry in enumerate(_list(data.get("zones"))):
        zone = _dict(entry)
        name = _str(zone.get("name"))
        if name is not None:
            if name in zone_seen:
                yield Finding(
                    ("zones", z, "name"),
                    f"zone {name!r} is listed twice (first as zones[{zone_seen[name]}]):"
                    " give each zone one entry with all its pools",
                )
            else:
                zone_seen[name] = z
        pool_seen: dict[str, int] = {}
        for p, pool_entry in enumerate(_list(zone.get("pools"))):
            pool = _dict(pool_entry)
            path: Path = ("zones", z, "pools", p)
            device_name = _str(pool.get("device"))
            device = effective_device(data, device_name) if device_name else None
            named = device_name is not None and (
                catalog.find_device(device_name) is not None
                or device_name.casefold() in (c.casefold() for c in custom)
            )
            if device_name is not None and not named:
                yield Finding(
                    (*path, "device"),
                    f"unknown device {device_name!r}{did_you_mean(device_name, known)}"
                    " (define it under `devices:` or pick one from the catalog)",
                )
            pool_name = _str(pool.get("name")) or (device.name.lower() if device else None)
            if pool_name is not None:
                if pool_name in pool_seen:
                    yield Finding(
                        (*path, "name" if "name" in pool else "device"),
                        f"two pools named {pool_name!r} in zone {name!r}: merge them"
                        " or give each a distinct `name`",
                    )
                pool_seen[pool_name] = p
            yield from _pool_arithmetic(pool, path, device)
            if device is not None:
                kinds.setdefault(device.kind, (*path, "device"))
                yield from _device_fit(pool, path, device, precision)
    if "cpu" in kinds and "gpu" in kinds:
        yield Finding(
            kinds["cpu"],
            "cpu devices (gloo) and gpu devices (NCCL) cannot train in one job: use only one kind",
        )


def _device_fit(
    pool: dict[str, Any], path: Path, device: catalog.DeviceType, precision: str | None
) -> Iterator[Finding]:
    """Can the pool's device train at this precision, and is it priced?"""
    if precision is not None and not device.supports(precision):
        supported = [q for q in catalog.TRAINING_PRECISIONS if device.supports(q)]
        yield Finding(
            (*path, "device"),
            f"{device.name} has no {precision}: use"
            f" {' or '.join(supported) or 'another precision'} or drop the pool",
        )
    if device.price is None and "price" not in pool:
        yield Finding(
            (*path, "device"),
            f"no list price is known for {device.name}: give the pool a `price`"
            " (until then its cost counts as 0 USD/h)",
            severity="warning",
        )


def default_gpus_per_node(device: catalog.DeviceType, quota: int) -> int:
    """The catalog's node size for the device, but never more than the pool's quota."""
    return max(1, min(device.gpus_per_node, quota))


def _pool_arithmetic(
    pool: dict[str, Any], path: Path, device: catalog.DeviceType | None
) -> Iterator[Finding]:
    quota = _int(pool.get("quota"))
    per_node = _int(pool.get("gpus_per_node"))
    if per_node is None and device is not None and quota is not None:
        per_node = default_gpus_per_node(device, quota)
    if quota is None or per_node is None or per_node < 1 or quota < 1:
        return
    if per_node > quota:
        yield Finding(
            (*path, "gpus_per_node"),
            f"a node of {per_node} devices does not fit in a quota of {quota}"
            f" (raise the quota or use gpus_per_node <= {quota})",
        )
    elif quota % per_node:
        usable = quota - quota % per_node
        implied = "" if "gpus_per_node" in pool else " (the catalog's node size)"
        yield Finding(
            (*path, "quota"),
            f"quota {quota} is not a multiple of gpus_per_node {per_node}{implied}: only {usable}"
            f" can be rented as whole nodes (use {usable} or {usable + per_node})",
            severity="warning",
        )


def effective_device(data: dict[str, Any], name: str) -> catalog.DeviceType | None:
    """The device type a pool names: the catalog's, with the spec's overrides merged in."""
    entry: dict[str, Any] | None = None
    for candidate in _list(data.get("devices")):
        if _str(_dict(candidate).get("name")) and str(candidate["name"]).casefold() == (
            name.casefold()
        ):
            if not conforms(candidate, "properties", "devices", "items"):
                return None  # malformed: the schema reports it, no device checks on guesses
            entry = dict(candidate)
            break
    base = next(
        (dict(e) for n, e in catalog.device_entries().items() if n.casefold() == name.casefold()),
        None,
    )
    if base is None and entry is None:
        return None
    merged = {**(base or {}), **(entry or {})}
    if base is not None:
        merged["name"] = base["name"]
    try:
        return catalog.device_from_mapping(merged)
    except (KeyError, ValueError):
        return None  # a new device missing a required number: reported by `_devices`


def _place_names(data: dict[str, Any]) -> tuple[set[str], set[str]]:
    zones, regions = set(), set()
    for entry in _list(data.get("zones")):
        zone = _dict(entry)
        if (name := _str(zone.get("name"))) is not None:
            zones.add(name)
            regions.add(_str(zone.get("region")) or name)
    return zones, regions


def _network(data: dict[str, Any]) -> Iterator[Finding]:
    zones, regions = _place_names(data)
    places = sorted(zones | regions)
    pairs: dict[frozenset[str], int] = {}
    for index, entry in enumerate(_list(_dict(data.get("network")).get("links"))):
        between = [_str(n) for n in _list(_dict(entry).get("between"))]
        for side, name in enumerate(between):
            if name is not None and name not in zones | regions:
                yield Finding(
                    ("network", "links", index, "between", side),
                    f"{name!r} is neither a zone nor a region of this spec"
                    f"{did_you_mean(name, places)}",
                )
        if len(between) == 2 and None not in between:
            pair = frozenset(n for n in between if n)
            if len(pair) == 1:
                yield Finding(
                    ("network", "links", index, "between"),
                    "a link joins two different zones or regions",
                )
            elif pair in pairs:
                yield Finding(
                    ("network", "links", index, "between"),
                    f"this pair is already given at network.links[{pairs[pair]}]: keep one",
                )
            pairs.setdefault(pair, index)


def _sites(data: dict[str, Any]) -> Iterator[Finding]:
    zones, _ = _place_names(data)
    owner: dict[str, str] = {}
    names: set[str] = set()
    for index, entry in enumerate(_list(data.get("sites"))):
        site = _dict(entry)
        site_name = _str(site.get("name")) or f"sites[{index}]"
        if site_name in names:
            yield Finding(("sites", index, "name"), f"site {site_name!r} is defined twice")
        names.add(site_name)
        for z, zone in enumerate(_list(site.get("zones"))):
            if not isinstance(zone, str):
                continue
            if zone not in zones:
                yield Finding(
                    ("sites", index, "zones", z),
                    f"unknown zone {zone!r}{did_you_mean(zone, sorted(zones))}",
                )
            elif zone in owner:
                yield Finding(
                    ("sites", index, "zones", z),
                    f"zone {zone!r} is already scheduled by site {owner[zone]!r}:"
                    " a zone belongs to one site",
                )
            else:
                owner[zone] = site_name


def _run(data: dict[str, Any]) -> Iterator[Finding]:
    run = _dict(data.get("run"))
    steps = _int(run.get("steps", schema_default("run", "steps")))
    every = _int(run.get("checkpoint_every"))
    if steps is not None and every is not None and every > steps:
        yield Finding(
            ("run", "checkpoint_every"),
            f"a checkpoint every {every} steps never happens in a run of {steps}"
            " (the final checkpoint is written anyway)",
            severity="warning",
        )


def _data_file(data: dict[str, Any], spec_dir: str) -> Iterator[Finding]:
    path = _str(_dict(data.get("data")).get("path"))
    if path is None or path == "synthetic" or "\0" in path:
        return
    if not os.path.isfile(os.path.join(spec_dir, path)):
        yield Finding(
            ("data", "path"),
            f"token file {path!r} not found (paths are relative to the spec's folder; use"
            " `synthetic` for generated tokens)",
            severity="warning",
        )


def _profiles(data: dict[str, Any], spec_dir: str) -> Iterator[Finding]:
    for index, entry in enumerate(_list(data.get("profiles"))):
        readable = isinstance(entry, str) and entry and "\0" not in entry
        if readable and not os.path.isfile(os.path.join(spec_dir, entry)):
            yield Finding(
                ("profiles", index),
                f"profile file {entry!r} not found (paths are relative to the spec's folder)",
            )
