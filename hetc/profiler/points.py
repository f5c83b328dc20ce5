"""Which (microbatch, TP) points `hetc profile measure` measures, and what an existing profile
in the output file saves it from measuring again.

By default the profiler measures every point the planner may choose for the spec on the
device: the microbatch sizes `PlanningModel.microbatch_sizes` considers, at each TP degree
the planner's replica kinds of that device's pools use (`valid_tp_degrees`). A point it did
not measure is one the planner would price by formula, which is how a profile of microbatch
1 and 2 once let the planner choose microbatch 8 at a tenth of the time its measurements
gave.

The output file is read first. Measured for another model, device, precision or sequence
length, it is another profile, and the command refuses to replace it. Measured with other
training settings (activation checkpointing, dropout, optimizer, clipping) or in another
environment (`hetc.plan.environment`), its numbers do not describe this run: the command
warns and measures everything again. Otherwise its points are kept and only the missing
ones measured, so a run stopped by `--budget` is finished by the same command.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace

from hetc.costmodel.planning import PlanningModel
from hetc.costmodel.profile import LayerMemory, LayerProfile, MeasuredLink, Network
from hetc.plan.environment import environment_differences
from hetc.schema.spec import Spec

SETTINGS = ("activation_checkpointing", "dropout", "optimizer", "gradient_clipping", "attention")
"""The `meta` entries that change what a layer does, hence what it measures."""


def planner_points(spec: Spec, device: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(microbatch sizes, TP degrees) the planner may give `device`'s replicas for `spec`."""
    model = PlanningModel(spec)
    degrees = sorted({k.tp for k in model.kinds if k.device == device})
    return model.microbatch_sizes(), tuple(degrees)


def identity_problem(existing: LayerProfile, spec: Spec, device: str) -> str | None:
    """Why `existing` is another profile than the one to measure (another model, device,
    precision or sequence length), or None."""
    wanted = {
        "model": spec.model_name,
        "device": device,
        "precision": spec.training.precision,
        "seq_len": spec.training.seq_len,
    }
    found = {
        "model": existing.model,
        "device": existing.device,
        "precision": existing.precision,
        "seq_len": existing.seq_len,
    }
    for key, value in wanted.items():
        if str(found[key]).casefold() != str(value).casefold():
            return f"it profiles {key} {found[key]}, not {value}"
    architecture = _plain(asdict(spec.model))
    for key, value in (existing.architecture or {}).items():
        if key in architecture and architecture[key] != value:
            return f"it profiles a model with {key} {value!r}, not {architecture[key]!r}"
    return None


def _plain(record: Mapping[str, object]) -> dict[str, object]:
    """As JSON would give it back (tuples as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in record.items()}


def reuse_differences(
    existing: LayerProfile, settings: Mapping[str, object], environment: Mapping[str, object]
) -> list[str]:
    """How `existing` was measured differently from this run (training settings, then the
    environment); empty when its points can be kept."""
    found = [
        f"{key} {settings[key]!r} (profiled with {existing.meta.get(key, 'not recorded')!r})"
        for key in SETTINGS
        if existing.meta.get(key) != settings[key]
    ]
    return found + environment_differences(existing.environment, environment)


def missing_points(
    existing: LayerProfile | None, microbatches: Sequence[int], degrees: Sequence[int]
) -> list[tuple[int, int]]:
    """(tp, microbatch) pairs of the request `existing` neither timed nor found out of
    memory, TP ascending, then microbatch ascending (so a group measures a TP degree's
    points in a row, smallest first)."""
    return [
        (tp, micro)
        for tp in sorted(degrees)
        for micro in sorted(microbatches)
        if existing is None
        or not (existing.lookup(micro, tp, 0) is not None or existing.ran_out_of_memory(micro, tp))
    ]


def merged(existing: LayerProfile | None, new: LayerProfile) -> LayerProfile:
    """`new` with every point, memory entry, network fit and link of `existing` it does not
    have (`new` wins where both have one: a link is one per zone pair, peer device and
    devices per node); `new`'s environment, and `existing`'s meta entries under `new`'s (the
    notes on how a kept fit was measured stay)."""
    if existing is None:
        return new
    times = {m: dict(by_tp) for m, by_tp in existing.times.items()}
    for m, by_tp in new.times.items():
        times.setdefault(m, {}).update(by_tp)
    peaks = {m: dict(by_tp) for m, by_tp in existing.peak_bytes.items()}
    for m, by_tp_peak in new.peak_bytes.items():
        peaks.setdefault(m, {}).update(by_tp_peak)
    memory: dict[int, dict[int, LayerMemory]] = {t: dict(r) for t, r in existing.memory.items()}
    for tp, layers in new.memory.items():
        row = memory.setdefault(tp, {})
        for index, entry in layers.items():
            old = row.get(index)
            activations = {**(old.activation_bytes if old else {}), **entry.activation_bytes}
            row[index] = replace(entry, activation_bytes=activations)
    oom = {m: set(tps) for m, tps in existing.out_of_memory.items()}
    for m, tps in new.out_of_memory.items():
        oom.setdefault(m, set()).update(tps)
    out_of_memory = {
        m: frozenset(t for t in tps if t not in times.get(m, {})) for m, tps in oom.items()
    }
    network: Network = {
        s: {c: dict(f) for c, f in by.items()} for s, by in existing.network.items()
    }
    for scope, by_collective in new.network.items():
        for collective, fits in by_collective.items():
            network.setdefault(scope, {}).setdefault(collective, {}).update(fits)
    fresh = {_link_key(link) for link in new.links}
    links = tuple(link for link in existing.links if _link_key(link) not in fresh) + new.links
    return replace(
        new,
        times=times,
        memory=memory,
        peak_bytes=peaks,
        network=network,
        links=links,
        out_of_memory={m: tps for m, tps in out_of_memory.items() if tps},
        meta={**existing.meta, **new.meta},
    )


def _link_key(link: MeasuredLink) -> tuple[str, str, str, str, int]:
    return (link.source, link.target, link.peer.casefold(), link.collective, link.devices)
