"""Built-in catalogs of device types and model architectures, each entry with its source.

Bottom layer of hetc: standard library only (plus `hetc.units`), so `hetc validate` stays fast
and torch-free. The JSON files beside this module are the data; this module types them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from functools import cache
from importlib import resources
from typing import Literal

from hetc.units import parse_quantity

Precision = Literal["fp32", "tf32", "fp16", "bf16", "fp8"]
TRAINING_PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16")


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelArchitecture:
    """A decoder-only transformer, described exactly enough to count every parameter."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    kv_heads: int | None = None
    """Key/value heads; None means `heads` (no grouped-query attention)."""
    head_dim: int | None = None
    """Width of one head; None means hidden / heads."""
    ffn: int | None = None
    """MLP inner width; None means 4 x hidden."""
    mlp: Literal["gelu", "relu", "swiglu"] = "gelu"
    position: Literal["learned", "rope"] = "learned"
    max_positions: int = 2048
    position_offset: int = 0
    """Extra rows of the learned position table (OPT keeps 2)."""
    tied_embeddings: bool = True
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    final_norm: bool = True
    linear_bias: bool = True
    qkv_bias: bool | None = None
    """None means the same as `linear_bias`."""
    embedding_projection: int | None = None
    """Token-embedding width when it differs from hidden (OPT-350M: 512); None means hidden."""
    local_attention_window: int | None = None
    attention_pattern: tuple[Literal["global", "local"], ...] = ("global",)
    """Attention kind of layer i is attention_pattern[i % len]."""

    @property
    def resolved_kv_heads(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def resolved_head_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden // self.heads

    @property
    def resolved_ffn(self) -> int:
        return self.ffn if self.ffn is not None else 4 * self.hidden

    @property
    def embedding_width(self) -> int:
        return self.embedding_projection if self.embedding_projection is not None else self.hidden

    def problems(self) -> list[tuple[str, str]]:
        """Inconsistencies as (field, message); an empty list means the shape is buildable."""
        found: list[tuple[str, str]] = []
        if self.head_dim is None and self.hidden % self.heads:
            found.append(
                (
                    "heads",
                    f"{self.heads} heads do not divide hidden {self.hidden}"
                    " (pick a divisor, or give head_dim explicitly)",
                )
            )
        if self.heads % self.resolved_kv_heads:
            found.append(
                (
                    "kv_heads",
                    f"{self.resolved_kv_heads} kv_heads do not divide {self.heads} heads"
                    " (each key/value head serves a whole group of query heads)",
                )
            )
        if "local" in self.attention_pattern and self.local_attention_window is None:
            found.append(("local_attention", "local layers need a window"))
        return found

    def layer_parameters(self, tp: int = 1) -> int:
        """Parameters of one transformer block (all blocks have the same shape) held by one of
        `tp` tensor-parallel ranks, in Megatron's layout without sequence parallelism.

        Column-parallel (split by output, bias split too): the Q/K/V projection, split by heads
        (query and key/value heads each ceil-divided, so GQA with fewer KV heads than ranks
        replicates them as Megatron does), and the MLP's up (and SwiGLU gate) matrix.
        Row-parallel (split by input, bias replicated: it is added after the all-reduce): the
        attention output projection and the MLP's down matrix. Replicated: both norms.
        """
        h, d = self.hidden, self.resolved_head_dim
        q = -(-self.heads // tp) * d
        kv = -(-self.resolved_kv_heads // tp) * d
        f = -(-self.resolved_ffn // tp)
        qkv_bias = self.linear_bias if self.qkv_bias is None else self.qkv_bias
        norm = 2 * h if self.norm == "layernorm" else h
        attention = h * (q + 2 * kv) + q * h
        if qkv_bias:
            attention += q + 2 * kv
        if self.linear_bias:
            attention += h
        up = 2 if self.mlp == "swiglu" else 1
        mlp = up * h * f + f * h + ((up * f + h) if self.linear_bias else 0)
        return 2 * norm + attention + mlp

    def parameter_breakdown(self) -> dict[str, int]:
        """Parameters of the embedding end, all blocks, and the output end."""
        e = self.embedding_width
        embedding = self.vocab * e
        if self.position == "learned":
            embedding += (self.max_positions + self.position_offset) * self.hidden
        if e != self.hidden:
            embedding += e * self.hidden  # projection in; the matching projection out is in head
        head = 0
        if self.final_norm:
            head += 2 * self.hidden if self.norm == "layernorm" else self.hidden
        if e != self.hidden:
            head += self.hidden * e
        if not self.tied_embeddings:
            head += self.vocab * e
        return {
            "embedding": embedding,
            "blocks": self.layers * self.layer_parameters(),
            "head": head,
        }

    def parameter_count(self) -> int:
        """Total distinct parameters (tied embeddings counted once)."""
        return sum(self.parameter_breakdown().values())


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelPreset:
    """A named architecture from the catalog, with its published parameter count."""

    name: str
    aliases: tuple[str, ...]
    architecture: ModelArchitecture
    parameters: int
    source: str


@dataclass(frozen=True, kw_only=True, slots=True)
class DeviceType:
    """One accelerator (or CPU) type: the numbers the cost model needs, in SI units."""

    name: str
    kind: Literal["gpu", "cpu"] = "gpu"
    memory: float
    """Bytes."""
    peak_flops: dict[str, float] = field(default_factory=dict)
    """Dense peak FLOP/s per precision; the keys are the precisions it can run."""
    memory_bandwidth: float
    """Bytes per second."""
    intra_node_kind: str = "pcie"
    intra_node_bandwidth: float
    """Bytes per second, the datasheet's bidirectional figure per device."""
    price: float | None = None
    """USD per device-second; None when no list price is known."""
    gpus_per_node: int = 1
    """Devices in the node shape it is usually rented in."""
    source: str = ""

    def supports(self, precision: str) -> bool:
        return precision in self.peak_flops


def architecture_from_mapping(data: dict[str, object]) -> ModelArchitecture:
    """Build a `ModelArchitecture` from the spec/catalog spelling (nested local_attention), or
    from its own field names (`dataclasses.asdict`, as a measured profile records it)."""
    values = dict(data)
    local = values.pop("local_attention", None)
    if isinstance(local, dict):
        values["local_attention_window"] = local["window"]
        values["attention_pattern"] = tuple(local.get("pattern", ("global", "local")))
    pattern = values.get("attention_pattern")
    if isinstance(pattern, list):
        values["attention_pattern"] = tuple(pattern)
    return ModelArchitecture(**values)  # type: ignore[arg-type]


def architecture_differences(a: ModelArchitecture, b: ModelArchitecture) -> list[str]:
    """`field: a-value vs b-value` for every field where two architectures differ, in field
    order. A None field compares as the value it resolves to (kv_heads, head_dim, ffn,
    qkv_bias, embedding_projection), so spelling out a default is no difference; the
    attention pattern counts only where some attention is local."""
    out = []
    for f in fields(ModelArchitecture):
        if f.name == "attention_pattern" and not (
            a.local_attention_window or b.local_attention_window
        ):
            continue
        if f.name in _DERIVED and getattr(a, f.name) is None and getattr(b, f.name) is None:
            continue
        mine, theirs = _resolved(a, f.name), _resolved(b, f.name)
        if mine != theirs:
            out.append(f"{f.name}: {mine!r} vs {theirs!r}")
    return out


_DERIVED = ("kv_heads", "head_dim", "ffn", "qkv_bias", "embedding_projection")
"""Fields whose None stands for a value derived from others: left unset on both sides, they
differ only where those others do, which the comparison names."""


def _resolved(arch: ModelArchitecture, name: str) -> object:
    if name == "kv_heads":
        return arch.resolved_kv_heads
    if name == "head_dim":
        return arch.resolved_head_dim
    if name == "ffn":
        return arch.resolved_ffn
    if name == "qkv_bias":
        return arch.linear_bias if arch.qkv_bias is None else arch.qkv_bias
    if name == "embedding_projection":
        return arch.embedding_width
    return getattr(arch, name)


def device_from_mapping(data: dict[str, object]) -> DeviceType:
    """Build a `DeviceType` from the catalog/spec spelling, converting unit strings."""
    intra = data.get("intra_node") or {"kind": "pcie", "bandwidth": data["memory_bandwidth"]}
    assert isinstance(intra, dict)
    price = data.get("price")
    peak = data["peak_tflops"]
    assert isinstance(peak, dict)
    return DeviceType(
        name=str(data["name"]),
        kind=data.get("kind", "gpu"),  # type: ignore[arg-type]
        memory=parse_quantity(data["memory"], "size"),
        peak_flops={p: parse_quantity(v, "tflops") for p, v in peak.items()},
        memory_bandwidth=parse_quantity(data["memory_bandwidth"], "bandwidth"),
        intra_node_kind=str(intra["kind"]),
        intra_node_bandwidth=parse_quantity(intra["bandwidth"], "bandwidth"),
        price=None if price is None else parse_quantity(price, "price_rate"),
        gpus_per_node=int(data.get("gpus_per_node", 1)),  # type: ignore[call-overload]
        source=str(data.get("source", "")),
    )


def _read(name: str) -> dict[str, object]:
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    loaded = json.loads(text)
    assert isinstance(loaded, dict)
    return loaded


@cache
def device_entries() -> dict[str, dict[str, object]]:
    """The built-in device entries as written in the catalog file (a spec may override fields)."""
    entries = _read("devices.json")["devices"]
    assert isinstance(entries, list)
    return {e["name"]: e for e in entries}


@cache
def devices() -> dict[str, DeviceType]:
    """The built-in device types, by canonical name."""
    return {name: device_from_mapping(e) for name, e in device_entries().items()}


@cache
def models() -> dict[str, ModelPreset]:
    """The built-in model presets, by canonical name."""
    entries = _read("models.json")["models"]
    assert isinstance(entries, list)
    return {
        e["name"]: ModelPreset(
            name=e["name"],
            aliases=tuple(e.get("aliases", ())),
            architecture=architecture_from_mapping(e["architecture"]),
            parameters=int(e["parameters"]),
            source=e["source"],
        )
        for e in entries
    }


def find_model(name: str) -> ModelPreset | None:
    """Look a preset up by name or alias, ignoring case."""
    wanted = name.casefold()
    for preset in models().values():
        if wanted == preset.name.casefold() or wanted in (a.casefold() for a in preset.aliases):
            return preset
    return None


def find_device(name: str, extra: dict[str, DeviceType] | None = None) -> DeviceType | None:
    """Look a device type up by name, ignoring case; `extra` (spec-defined types) wins."""
    wanted = name.casefold()
    for table in (extra or {}, devices()):
        for canonical, device in table.items():
            if canonical.casefold() == wanted:
                return device
    return None
