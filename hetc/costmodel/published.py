"""Sailor's published measurements as hetc profiles (`hetc profile import`).

Sailor's artifact ships real per-layer times, per-layer memory and network fits taken on the
GPUs hetc plans for; they are the best numbers hetc can get without a profiler run of its own.
But a Sailor `profile.json` does not say which model, device, precision or sequence length it
measured, and its memory and bandwidths sit in other files keyed by other names. Converting
once, into one self-describing hetc profile per model and GPU, lets the cost model refuse a
profile for the wrong setting instead of silently planning with it.

What a converted profile holds, and why (docs/profile.md says the same for users):

- `times`: copied exactly; the folder names say the model and the GPU, mapped to the catalog's
  names (`MODEL_NAMES`, `DEVICE_NAMES`) so that a spec naming the catalog preset matches.
- `architecture`: the network that was timed, in the spec's spelling: the catalog model's when
  Sailor's holds the catalog model's parameters in every layer; else the Megatron build that
  `SAILOR_BUILDS` describes, under Sailor's name, when that one does (Sailor's OPT-350 and
  GPT-Neo-2.7 are such builds: a spec uses their profiles by training that architecture);
  else none, under Sailor's name (OPT-30, LLAMA-3-8). The cost model serves a profile to a
  spec only when the architectures are equal, so a plan for the real GPT-Neo-2.7B (local
  attention in every other block) is never priced with times of global-attention blocks.
- `memory`: from layer-memory.json, assuming fp16 (2 bytes a float, what Sailor trained in):
  weights = params_floats x 2, activations = act_mem_floats x 2 x microbatch (Sailor's
  activation counts are per sample). Only TP degrees present in both files.
- `network.intra_node.all_reduce`: the GPU's intra-node fits, as given.
- `network.inter_node`, `inter_zone`, `inter_region` and `network.links`: the GPU's links
  between VMs, within a zone, across zones and regions (`hetc.costmodel.sailor_network` says
  which entries and why the slowest of each class).

A profile file whose layers are not its model's (Sailor's GPT-Neo-2.7/GH-96 is a copy of
OPT-350/GH-96) raises `NotThisModel`: importing it would plan GPT-Neo with OPT's times.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from hetc.catalog import ModelArchitecture, find_device, find_model
from hetc.costmodel.compute import default_layout
from hetc.costmodel.profile import (
    BandwidthFit,
    LayerMemory,
    LayerProfile,
    MeasuredLink,
    Network,
    ProfileError,
    parse_profile,
    write_profile,
)
from hetc.costmodel.sailor_network import network_of, read_fit

__all__ = [
    "DEVICE_NAMES",
    "MODEL_NAMES",
    "Imported",
    "NotThisModel",
    "architecture_spelling",
    "device_name",
    "import_sailor_profile",
    "import_sailor_tree",
    "profile_file_name",
    "run_import_command",
]

Echo = Callable[..., None]

MODEL_NAMES = {
    "OPT-350": "OPT-350M",
    "GPT-Neo-2.7": "GPT-Neo-2.7B",
    "LLAMA-3-8": "Llama-3-8B",
    "OPT-30": "OPT-30B",
}
"""Sailor's model folders -> the catalog name they would have; used only when the catalog has
that model and Sailor's layers are its layers (see the module docstring)."""

DEVICE_NAMES = {
    "A100-40": "A100-40GB",
    "A100-80": "A100-80GB",
    "GH-96": "GH200",
    "V100-16": "V100-16GB",
}
"""Sailor's GPU folders whose catalog name differs; the others (Titan-RTX, RTX-2080, RTX-3090)
are looked up as they are."""

PRECISION = "fp16"
SEQ_LEN = 2048
BYTES_PER_FLOAT = 2
"""Sailor trained in fp16 mixed precision at 2048 tokens: its memory counts floats, and a
float of its weights and activations is two bytes."""

SAILOR_BUILDS: dict[str, tuple[dict[str, object], str]] = {
    "OPT-350": (
        {
            "vocab": 50304,
            "embedding_projection": None,
            "position_offset": 0,
            "tied_embeddings": False,
            "final_norm": True,
        },
        "a vocabulary padded to 50,304, no 512-wide projection, no position offset, and an"
        " untied output head after a final norm",
    ),
    "GPT-Neo-2.7": (
        {
            "vocab": 50304,
            "heads": 32,
            "head_dim": 80,
            "qkv_bias": True,
            "local_attention_window": None,
            "attention_pattern": ("global",),
        },
        "a vocabulary padded to 50,304, 32 heads of 80, Q/K/V biases, and global attention in"
        " every block",
    ),
}
"""The networks Sailor timed, where they are not the catalog's: Sailor trains Megatron-DeepSpeed's
GPT (Sailor §4.4) with the published models' sizes. Each variant of the catalog model (the
changed fields) reproduces layer-memory.json's parameter count of every layer exactly at TP 1,
which the import checks. What parameter counts cannot show is taken from Sailor's artifact
(shared/data/sailor-measurements/README.md: GPT-Neo-2.7 has 32 heads of 80) and from
Megatron-DeepSpeed's GPT, which implements no local attention."""

MEMORY_FILE = "layer-memory.json"
INTRA_FILE = "network/intra_node_bandwidths.json"
MULTIZONE_FILE = "network/multizone_bandwidths_het.json"
EXPECTED_PATH = "layer-profiles/MODEL/GPU/profile.json"


class NotThisModel(ProfileError):
    """The file's layers are not those of the model its folder names: not importable."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Imported:
    """A converted profile and what the user should know about its source."""

    profile: LayerProfile
    sailor_model: str
    sailor_device: str
    warnings: tuple[str, ...] = ()


def device_name(gpu: str) -> str:
    """The catalog's name of Sailor's GPU folder `gpu`, or Sailor's name where the catalog
    has no such device."""
    known = find_device(DEVICE_NAMES.get(gpu, gpu))
    return gpu if known is None else known.name


def profile_file_name(profile: LayerProfile) -> str:
    """`opt-350m--a100-40gb.json`: model and device, lower case, so a tree import's files sort
    by model and cannot collide."""
    return f"{profile.model.lower()}--{profile.device.lower()}.json"


def architecture_spelling(arch: ModelArchitecture) -> dict[str, object]:
    """The catalog's (and spec's) spelling of `arch`: what `architecture_from_mapping` reads
    back to an equal architecture; defaults left None are omitted, as the schema has no null."""
    out: dict[str, object] = {}
    for f in fields(arch):
        value = getattr(arch, f.name)
        if value is not None and f.name not in ("local_attention_window", "attention_pattern"):
            out[f.name] = value
    if arch.local_attention_window is not None:
        out["local_attention"] = {
            "window": arch.local_attention_window,
            "pattern": list(arch.attention_pattern),
        }
    return out


# -- reading Sailor's files --------------------------------------------------------------------


def _load(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}: not valid JSON ({exc})") from exc
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: not UTF-8 text ({exc.reason})") from exc


def _object(raw: object, where: str, what: str) -> dict[str, object]:
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: expected an object {what}, got {type(raw).__name__}")
    return raw


def _count(raw: object, where: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise ProfileError(f"{where}: expected a non-negative number of floats, got {raw!r}")
    if raw < 0:
        raise ProfileError(f"{where}: expected a non-negative number of floats, got {raw!r}")
    return float(raw)


def _sizes(table: dict[str, object], where: str) -> Iterator[tuple[int, object]]:
    """(group size, entry) of an object keyed by GPU counts, in increasing size."""
    for key in table:
        if not (key.isdigit() and int(key) > 0):
            raise ProfileError(f"{where}: key {key!r} is not a GPU count (1, 2, 4, ...)")
    for key in sorted(table, key=int):
        yield int(key), table[key]


@dataclass
class _Sources:
    """The measurements folder's shared files, read once for a whole tree."""

    root: Path
    memory: dict[str, object] | None = None
    intra: dict[str, object] | None = None
    multizone: dict[str, object] | None = None
    missing: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, root: Path) -> _Sources:
        found = cls(root)
        for attribute, name in (
            ("memory", MEMORY_FILE),
            ("intra", INTRA_FILE),
            ("multizone", MULTIZONE_FILE),
        ):
            path = root / name
            if path.is_file():
                setattr(found, attribute, _object(_load(path), str(path), "at the top"))
            else:
                found.missing.append(name)
        return found


# -- converting one profile --------------------------------------------------------------------


def _locate(path: Path) -> tuple[Path, str, str]:
    """(measurements root, Sailor model, Sailor GPU) from `.../layer-profiles/MODEL/GPU/...`."""
    parts = path.absolute().parts
    if len(parts) < 5 or parts[-4] != "layer-profiles" or path.suffix != ".json":
        raise ProfileError(
            f"{path}: expected Sailor's {EXPECTED_PATH} (the folder names say which model and "
            "GPU it measured, and the measurements folder above holds its memory and network)"
        )
    return Path(*parts[:-4]), parts[-3], parts[-2]


def import_sailor_profile(path: Path) -> Imported:
    """Convert one `layer-profiles/MODEL/GPU/profile.json`, with the memory and network files
    of its measurements folder where present; raises `ProfileError` (`NotThisModel` for a file
    that is not its model's) and `FileNotFoundError` when `path` is missing."""
    root, model, gpu = _locate(path)
    if not path.is_file():
        raise FileNotFoundError(path)
    return _convert(path, model, gpu, _Sources.read(root))


def import_sailor_tree(root: Path) -> tuple[list[Imported], list[str]]:
    """Convert every profile under `root/layer-profiles`: the profiles, and one line for each
    file skipped because its layers are not its model's. Raises `ProfileError` on any other
    problem (nothing is half-imported) and `FileNotFoundError` when there are no profiles."""
    paths = sorted((root / "layer-profiles").glob("*/*/profile.json"))
    if not paths:
        raise FileNotFoundError(root / EXPECTED_PATH)
    sources = _Sources.read(root)
    imported, skipped = [], []
    for path in paths:
        try:
            imported.append(_convert(path, path.parent.parent.name, path.parent.name, sources))
        except NotThisModel as exc:
            skipped.append(f"skipped {exc}")
    return imported, skipped


def _convert(path: Path, model: str, gpu: str, sources: _Sources) -> Imported:
    raw = _load(path)
    timed = parse_profile(raw, model=model, device=gpu, source=str(path))
    indices = timed.layer_indices()
    warnings: list[str] = []
    used = [f"layer-profiles/{model}/{gpu}/{path.name}"]
    meta: dict[str, object] = {
        "sailor_names": {"model": model, "device": gpu},
        "assumed": f"{PRECISION} mixed precision, seq_len {SEQ_LEN} (Sailor's artifact settings)",
    }
    warnings += [f"{sources.root / name} not found: no {name} data" for name in sources.missing]

    rows = _memory_rows(sources, model, path, raw, indices, warnings)
    memory_path = str(sources.root / MEMORY_FILE)
    name, arch = _catalog_model(model, rows, indices, memory_path, warnings, meta)
    memory: dict[int, dict[int, LayerMemory]] = {}
    if rows is not None:
        used.append(MEMORY_FILE)
        memory = _memory(rows, timed.times, indices, f"{memory_path}[{model}]", warnings)
        meta["memory"] = (
            f"weight_bytes = params_floats x {BYTES_PER_FLOAT} ({PRECISION} weights); "
            f"activation_bytes = act_mem_floats x {BYTES_PER_FLOAT} x microbatch "
            "(layer-memory.json counts activations per sample)"
        )

    times = timed.times
    if rows is not None:
        times = _apportioned_updates(times, rows, indices, f"{memory_path}[{model}]")
        meta["update"] = (
            "Sailor's update column holds, in every row, one optimizer step of the model its"
            " profiler built (embedding, one block, output layers); each layer gets that step"
            " times its share of that model's parameters (params_floats)"
        )

    network: Network = {}
    intra = _intra_node(sources, gpu, warnings)
    if intra:
        used.append(INTRA_FILE)
        network["intra_node"] = {"all_reduce": intra}
    links: tuple[MeasuredLink, ...] = ()
    if sources.multizone is not None:
        between, links, notes = network_of(
            sources.multizone, gpu, device_name, str(sources.root / MULTIZONE_FILE)
        )
        if links:
            used.append(MULTIZONE_FILE)
            network.update(between)
            meta.update(notes)
            meta["fit_sizes"] = (
                "Sailor's fits record no message sizes: taken to hold from 1 MB to 1 GB"
            )

    device = device_name(gpu)
    if find_device(device) is None:
        warnings.append(f"GPU {gpu!r} has no catalog entry: the profile keeps Sailor's name")
    meta["origin"] = "Sailor's published measurements: " + ", ".join(used)
    profile = LayerProfile(
        model=name,
        device=device,
        precision=PRECISION,
        seq_len=SEQ_LEN,
        times=times,
        source=str(path),
        architecture=None if arch is None else architecture_spelling(arch),
        memory=memory,
        network=network,
        links=links,
        meta=meta,
    )
    return Imported(
        profile=profile, sailor_model=model, sailor_device=gpu, warnings=tuple(warnings)
    )


def _memory_rows(
    sources: _Sources,
    model: str,
    path: Path,
    raw: object,
    indices: list[int],
    warnings: list[str],
) -> dict[int, dict[int, dict[str, object]]] | None:
    """layer-memory.json's TP -> layer -> fields for `model`, checked against the timed layers:
    a file timing another layer count than every TP of the memory file is not this model's."""
    if sources.memory is None:
        return None
    where = str(sources.root / MEMORY_FILE)
    if model not in sources.memory:
        warnings.append(f"{MEMORY_FILE} has no entry for {model}: no memory imported")
        return None
    by_tp = _object(sources.memory[model], f"{where}[{model}]", "tp -> layer -> counts")
    rows: dict[int, dict[int, dict[str, object]]] = {}
    for tp, layers in _sizes(by_tp, f"{where}[{model}]"):
        at = f"{where}[{model}][{tp}]"
        table = _object(layers, at, "layer -> counts")
        rows[tp] = {}
        for key, entry in table.items():
            if not key.isdigit():
                raise ProfileError(f"{at}: layer key {key!r} is not an index (0, 1, ...)")
            rows[tp][int(key)] = _object(entry, f"{at}[{key}]", "of float counts")
    counts = {len(r) for r in rows.values()}
    if len(counts) == 1 and len(indices) not in counts:
        (count,) = counts
        twin = _same_content(sources.root, path, raw)
        raise NotThisModel(
            f"{path}: times {len(indices)} layers, but {MEMORY_FILE} gives {model} {count}: "
            f"not a {model} profile" + (f" (its content equals {twin})" if twin else "")
        )
    for tp, row in rows.items():
        lacking = sorted(set(indices) - set(row))
        if lacking:
            raise ProfileError(
                f"{where}[{model}][{tp}]: no entry for"
                f" {'layer' if len(lacking) == 1 else 'layers'} {lacking} that {path} times "
                f"(each TP degree needs layers {indices[0]}..{indices[-1]})"
            )
    return rows


def _same_content(root: Path, path: Path, raw: object) -> str | None:
    """Another model's profile of the same GPU with exactly this content, if any."""
    for other in sorted((root / "layer-profiles").glob(f"*/{path.parent.name}/profile.json")):
        if other.resolve() != path.resolve():
            try:
                if json.loads(other.read_text(encoding="utf-8")) == raw:
                    return other.relative_to(root).as_posix()
            except (OSError, ValueError):
                continue
    return None


def _catalog_model(
    model: str,
    rows: dict[int, dict[int, dict[str, object]]] | None,
    indices: list[int],
    memory_path: str,
    warnings: list[str],
    meta: dict[str, object],
) -> tuple[str, ModelArchitecture | None]:
    """The name and architecture Sailor's `model` is recorded under: the catalog's when its
    every layer holds the catalog model's parameters (layer-memory.json, TP 1), Sailor's own
    name with the build `SAILOR_BUILDS` describes when that one matches instead, else Sailor's
    name and no architecture (the profile then serves only a spec naming that model)."""
    preset = find_model(MODEL_NAMES.get(model, model))
    if preset is None:
        warnings.append(f"model {model!r} has no catalog entry: the profile keeps Sailor's name")
        return model, None
    arch = preset.architecture
    if len(indices) != len(default_layout(arch)):
        warnings.append(
            f"Sailor's {model} is not the catalog's {preset.name}: it has {len(indices)} layers"
            f" (catalog: {len(default_layout(arch))}); the profile keeps Sailor's name and"
            " records no architecture"
        )
        return model, None
    if rows is None or 1 not in rows:
        meta["catalog_differences"] = "unchecked (no TP 1 parameter counts in layer-memory.json)"
        return preset.name, arch
    sailor = [
        _count(rows[1][i].get("params_floats"), f"{memory_path}[{model}][1][{i}]") for i in indices
    ]
    if _layer_parameters(arch) == sailor:
        return preset.name, arch
    build = SAILOR_BUILDS.get(model)
    if build is not None:
        changes, words = build
        variant = replace(arch, **changes)  # type: ignore[arg-type]
        if _layer_parameters(variant) == sailor:
            note = (
                f"Sailor's {model} is the catalog's {preset.name} with {words}: recorded under"
                f" Sailor's name with that architecture, which a spec must train to use it"
            )
            meta["catalog_differences"] = note
            warnings.append(note)
            return model, variant
    differ = [
        f"{_layer_label(i, len(sailor))} {s:,.0f} (catalog {c:,})"
        for i, (s, c) in enumerate(zip(sailor, _layer_parameters(arch), strict=True))
        if s != c and (i in (0, 1) or i == len(sailor) - 1)
    ]
    warnings.append(
        f"Sailor's {model} is not the catalog's {preset.name}: {'; '.join(differ)};"
        " the profile keeps Sailor's name and records no architecture"
    )
    return model, None


def _layer_parameters(arch: ModelArchitecture) -> list[float]:
    """Parameters of each profile layer (embedding, each block, output end) at TP 1."""
    parts = arch.parameter_breakdown()
    blocks = [float(arch.layer_parameters())] * arch.layers
    return [float(parts["embedding"]), *blocks, float(parts["head"])]


def _layer_label(index: int, count: int) -> str:
    if index == 0:
        return "layer 0 (embedding)"
    return f"layer {index} (output end)" if index == count - 1 else "each block"


def _apportioned_updates(
    times: dict[int, dict[int, dict[int, tuple[float, float, float]]]],
    rows: dict[int, dict[int, dict[str, object]]],
    indices: list[int],
    where: str,
) -> dict[int, dict[int, dict[int, tuple[float, float, float]]]]:
    """The times with each layer's update its share of the step Sailor measured: that step
    is of the embedding, ONE block and the output layers (Sailor §4.1 profiles one instance
    of repeated layers), and every row repeats it (docs/costmodel-compute.md, *Update
    column*), so summed over a stage's layers as given it would count that whole step once
    per layer. The parameters of a TP degree the memory file lacks are the nearest degree's
    scaled by the ratio of degrees (the blocks, embedding and head are split by TP)."""
    first, block, last = indices[0], indices[1], indices[-1]
    out: dict[int, dict[int, dict[int, tuple[float, float, float]]]] = {}
    for mbs, by_tp in times.items():
        out[mbs] = {}
        for tp, layers in by_tp.items():
            near = min(rows, key=lambda t: (abs(t - tp), t))
            params = {
                i: _count(rows[near][i].get("params_floats"), f"{where}[{near}][{i}]") * near / tp
                for i in (first, block, last, *layers)
            }
            mini = params[first] + params[block] + params[last]
            out[mbs][tp] = {
                i: (f, b, u * params[i] / mini if mini > 0 else u)
                for i, (f, b, u) in layers.items()
            }
    return out


def _memory(
    rows: dict[int, dict[int, dict[str, object]]],
    times: dict[int, dict[int, dict[int, tuple[float, float, float]]]],
    indices: list[int],
    where: str,
    warnings: list[str],
) -> dict[int, dict[int, LayerMemory]]:
    """Bytes per layer for the TP degrees both files have (see the module docstring)."""
    timed_tps = {tp for by_tp in times.values() for tp in by_tp}
    unmatched = sorted(timed_tps - set(rows))
    if unmatched:
        warnings.append(f"{where} has no entry for TP {unmatched}: no memory for them")
    out: dict[int, dict[int, LayerMemory]] = {}
    for tp in sorted(timed_tps & set(rows)):
        out[tp] = {}
        for index in indices:
            entry = rows[tp][index]
            at = f"{where}[{tp}][{index}]"
            params = _count(entry.get("params_floats"), f"{at}.params_floats")
            per_sample = _count(entry.get("act_mem_floats"), f"{at}.act_mem_floats")
            out[tp][index] = LayerMemory(
                weight_bytes=params * BYTES_PER_FLOAT,
                activation_bytes={m: per_sample * BYTES_PER_FLOAT * m for m in sorted(times)},
            )
    return out


def _intra_node(sources: _Sources, gpu: str, warnings: list[str]) -> dict[int, BandwidthFit]:
    if sources.intra is None or gpu not in sources.intra:
        return {}
    where = f"{sources.root / INTRA_FILE}[{gpu}]"
    table = _object(sources.intra[gpu], where, "gpus_in_group -> [[a, b, c], peak]")
    copies = sorted(g for g, other in sources.intra.items() if g != gpu and other == table)
    if copies:
        warnings.append(
            f"{INTRA_FILE}: {gpu}'s fits equal {', '.join(copies)}'s exactly (one was likely "
            "copied from the other, not measured); imported as they are"
        )
    return {n: read_fit(raw, f"{where}[{n}]") for n, raw in _sizes(table, where)}


# -- the command -------------------------------------------------------------------------------


def run_import_command(source: Path, output: Path, *, echo: Echo) -> int:
    """The whole `hetc profile import`: 0 written, 1 bad input, 2 a file given where a folder
    is needed, 4 a file missing or not writable (with a "To fix:" line)."""
    if not source.exists():
        echo(
            f"hetc: {source}: no such file or folder\nTo fix: give Sailor's {EXPECTED_PATH} or "
            "the measurements folder that holds layer-profiles/",
            err=True,
        )
        return 4
    try:
        if source.is_dir():
            if output.exists() and not output.is_dir():
                echo(
                    f"hetc: {output} is a file; a whole measurements folder is written as one "
                    "profile per model and GPU into a folder (give --output a folder)",
                    err=True,
                )
                return 2
            imported, skipped = import_sailor_tree(source)
            targets = [(output / profile_file_name(i.profile), i) for i in imported]
        else:
            one = import_sailor_profile(source)
            skipped = []
            named = output / profile_file_name(one.profile) if output.is_dir() else output
            targets = [(named, one)]
    except FileNotFoundError as exc:
        echo(
            f"hetc: {exc.filename or exc}: not found\nTo fix: give Sailor's measurements folder "
            f"(with {EXPECTED_PATH}) or one such profile.json",
            err=True,
        )
        return 4
    except ProfileError as exc:
        echo(f"hetc: {exc}", err=True)
        return 1
    for line in skipped:
        echo(f"hetc: warning: {line}", err=True)
    for line in grouped_warnings([one for _, one in targets]):
        echo(f"hetc: warning: {line}", err=True)
    try:
        if source.is_dir():
            output.mkdir(parents=True, exist_ok=True)
        for target, one in targets:
            write_profile(one.profile, target)
            echo(f"wrote {target} ({_summary(one.profile)})")
    except OSError as exc:
        echo(
            f"hetc: cannot write {exc.filename or output}: {exc.strerror or exc}\nTo fix: "
            "choose an --output in a folder that exists and that you can write to",
            err=True,
        )
        return 4
    return 0


def grouped_warnings(imported: list[Imported]) -> list[str]:
    """One line per distinct warning, naming the models and devices it concerns
    (`OPT-350 (A100-40, V100-16): ...`; models with the same devices share the parentheses),
    in the order the warnings first appear: a tree's warnings are mostly about a model or a
    device and would otherwise repeat once per profile."""
    concerned: dict[str, dict[str, list[str]]] = {}
    for one in imported:
        for warning in one.warnings:
            models = concerned.setdefault(warning, {})
            models.setdefault(one.sailor_model, []).append(one.sailor_device)
    lines = []
    for warning, models in concerned.items():
        by_devices: dict[tuple[str, ...], list[str]] = {}
        for model, devices in models.items():
            by_devices.setdefault(tuple(dict.fromkeys(devices)), []).append(model)
        who = "; ".join(
            f"{', '.join(names)} ({', '.join(devices)})" for devices, names in by_devices.items()
        )
        lines.append(f"{who}: {warning}")
    return lines


def _summary(profile: LayerProfile) -> str:
    parts = [f"{profile.model} on {profile.device}", f"{len(profile.points())} (mbs, TP) points"]
    if profile.memory:
        parts.append(f"memory at TP {sorted(profile.memory)}")
    for scope, by_collective in sorted(profile.network.items()):
        for collective, fits in sorted(by_collective.items()):
            parts.append(f"{scope} {collective} for {sorted(fits)} GPUs")
    return ", ".join(parts)
