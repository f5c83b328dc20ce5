"""The typed spec: what the rest of hetc reads once a spec file has validated.

Every default is filled in and every quantity is in SI units (bytes, seconds, bytes/s, USD,
USD/s, USD/byte), so no later stage sees a unit string or a missing key. The JSON Schema
repeats these defaults for editors; a test keeps the two equal.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from hetc import catalog
from hetc.schema.semantic import default_gpus_per_node, effective_device, resolved_architecture
from hetc.units import parse_quantity


@dataclass(frozen=True, kw_only=True, slots=True)
class Optimizer:
    type: Literal["adam", "adamw", "sgd"] = "adamw"
    lr: float = 3e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.9
    """Used by sgd only."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LrSchedule:
    type: Literal["constant", "cosine"] = "constant"
    warmup_steps: int = 0
    min_lr: float = 0.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Training:
    global_batch_size: int
    """Sequences per iteration; hetc never changes it."""
    seq_len: int = 2048
    precision: Literal["fp32", "fp16", "bf16"] = "fp16"
    optimizer: Optimizer = field(default_factory=Optimizer)
    lr_schedule: LrSchedule = field(default_factory=LrSchedule)
    gradient_clipping: float = 1.0
    """Global gradient-norm clip; 0 means off."""
    zero_stage: int = 1
    activation_checkpointing: bool = False
    dropout: float = 0.0
    """Residual dropout probability; masks are plan-independent (hetc.runtime.model)."""
    seed: int = 1234
    tokens: float | None = None
    """Training budget in tokens; None means not given."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Constraints:
    max_cost_per_iteration: float | None = None
    """USD; None means no budget."""
    min_throughput: float | None = None
    """Iterations per second; None means no floor."""
    max_gpus: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Pool:
    """Devices of one type that one zone may give, as whole nodes."""

    name: str
    device: str
    """Canonical device type name (a key of Spec.devices)."""
    quota: int
    gpus_per_node: int
    price: float
    """USD per device-second (0 when neither the pool nor the catalog gives one)."""
    nic_bandwidth: float
    """Bytes per second of one node's network interface."""
    slurm: dict[str, str] = field(default_factory=dict)

    @property
    def max_nodes(self) -> int:
        return self.quota // self.gpus_per_node


@dataclass(frozen=True, kw_only=True, slots=True)
class Zone:
    name: str
    region: str
    pools: tuple[Pool, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkClass:
    bandwidth: float
    """Bytes per second."""
    latency: float
    """Seconds, one-way."""
    tcp_streams: int = 1
    tcp_window: float | None = None
    """Bytes per TCP stream; None where the window does not limit the link."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkOverride:
    between: tuple[str, str]
    """Two zone or region names."""
    bandwidth: float | None = None
    latency: float | None = None
    tcp_streams: int | None = None
    tcp_window: float | None = None


INTRA_ZONE_DEFAULT = LinkClass(bandwidth=100e9 / 8, latency=10e-6)
INTER_ZONE_DEFAULT = LinkClass(bandwidth=50e9 / 8, latency=1e-3)
INTER_REGION_DEFAULT = LinkClass(
    bandwidth=5e9 / 8, latency=30e-3, tcp_streams=1, tcp_window=4 * 2.0**20
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Network:
    intra_zone: LinkClass = INTRA_ZONE_DEFAULT
    inter_zone: LinkClass = INTER_ZONE_DEFAULT
    inter_region: LinkClass = INTER_REGION_DEFAULT
    links: tuple[LinkOverride, ...] = ()
    egress_inter_zone: float = 0.01 / 1e9
    """USD per byte leaving a zone for another zone of its region."""
    egress_inter_region: float = 0.02 / 1e9
    """USD per byte leaving a region."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Site:
    name: str
    scheduler: Literal["slurm", "torchrun", "skypilot", "kubernetes"] = "slurm"
    zones: tuple[str, ...]
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit: str | None = None
    prologue: str | None = None
    cloud: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class DataSource:
    path: str
    format: Literal["uint16-tokens", "uint32-tokens"] = "uint16-tokens"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSettings:
    steps: int = 1000
    checkpoint_dir: str = "checkpoints/"
    checkpoint_every: int | None = None
    """Iterations between checkpoints; None means only at the end."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Spec:
    """One validated training job, defaults filled in, quantities in SI units."""

    version: int
    name: str
    model_name: str
    """The catalog preset's canonical name, or `custom` for an `architecture:`."""
    model: catalog.ModelArchitecture
    training: Training
    objective: Literal["max_throughput", "min_cost"] = "max_throughput"
    constraints: Constraints = field(default_factory=Constraints)
    devices: dict[str, catalog.DeviceType]
    """Every device type a pool uses, by canonical name, with the spec's overrides applied."""
    zones: tuple[Zone, ...]
    network: Network = field(default_factory=Network)
    sites: tuple[Site, ...] = ()
    data: DataSource | None = None
    run: RunSettings = field(default_factory=RunSettings)
    profiles: tuple[str, ...] = ()


def _q(value: Any, dimension: str) -> float:
    return parse_quantity(value, dimension)


def _opt_q(value: Any, dimension: str) -> float | None:
    return None if value is None else parse_quantity(value, dimension)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _link(data: dict[str, Any] | None, default: LinkClass) -> LinkClass:
    data = data or {}
    window = data.get("tcp_window")
    return LinkClass(
        bandwidth=_q(data["bandwidth"], "bandwidth") if "bandwidth" in data else default.bandwidth,
        latency=_q(data["latency"], "duration") if "latency" in data else default.latency,
        tcp_streams=data.get("tcp_streams", default.tcp_streams),
        tcp_window=_q(window, "size") if window is not None else default.tcp_window,
    )


def build_spec(data: dict[str, Any]) -> Spec:
    """Type a document that has passed every check (structural and semantic)."""
    training = dict(data["training"])
    optimizer: dict[str, Any] = {
        k: tuple(map(float, v)) if k == "betas" else v if k == "type" else float(v)
        for k, v in training.pop("optimizer", {}).items()
    }
    schedule: dict[str, Any] = {
        k: float(v) if k == "min_lr" else v for k, v in training.pop("lr_schedule", {}).items()
    }
    tokens = training.pop("tokens", None)
    for name in ("gradient_clipping", "dropout"):
        if name in training:
            training[name] = float(training[name])
    typed_training = Training(
        **training,
        optimizer=Optimizer(**optimizer),
        lr_schedule=LrSchedule(**schedule),
        tokens=_opt_q(tokens, "count"),
    )
    network_data = data.get("network", {})
    intra_zone = _link(network_data.get("intra_zone"), INTRA_ZONE_DEFAULT)
    egress = network_data.get("egress_price", {})
    network = Network(
        intra_zone=intra_zone,
        inter_zone=_link(network_data.get("inter_zone"), INTER_ZONE_DEFAULT),
        inter_region=_link(network_data.get("inter_region"), INTER_REGION_DEFAULT),
        links=tuple(
            LinkOverride(
                between=(link["between"][0], link["between"][1]),
                bandwidth=_opt_q(link.get("bandwidth"), "bandwidth"),
                latency=_opt_q(link.get("latency"), "duration"),
                tcp_streams=link.get("tcp_streams"),
                tcp_window=_opt_q(link.get("tcp_window"), "size"),
            )
            for link in network_data.get("links", [])
        ),
        egress_inter_zone=_q(egress.get("inter_zone", "0.01 USD/GB"), "price_per_byte"),
        egress_inter_region=_q(egress.get("inter_region", "0.02 USD/GB"), "price_per_byte"),
    )
    devices: dict[str, catalog.DeviceType] = {}
    zones = []
    for zone in data["zones"]:
        pools = []
        for pool in zone["pools"]:
            device = effective_device(data, pool["device"])
            assert device is not None, "semantic checks reject unknown devices"
            devices[device.name] = device
            quota = pool["quota"]
            price = pool.get("price")
            pools.append(
                Pool(
                    name=pool.get("name", device.name.lower()),
                    device=device.name,
                    quota=quota,
                    gpus_per_node=pool.get("gpus_per_node", default_gpus_per_node(device, quota)),
                    price=_q(price, "price_rate") if price is not None else (device.price or 0.0),
                    nic_bandwidth=_opt_q(pool.get("nic_bandwidth"), "bandwidth")
                    or intra_zone.bandwidth,
                    slurm=dict(pool.get("slurm", {})),
                )
            )
        zones.append(
            Zone(name=zone["name"], region=zone.get("region", zone["name"]), pools=tuple(pools))
        )
    constraints = data.get("constraints", {})
    architecture = resolved_architecture(data)
    assert architecture is not None, "semantic checks reject unknown models"
    preset = data["model"].get("preset")
    found = catalog.find_model(preset) if preset is not None else None
    return Spec(
        version=data["version"],
        name=data["name"],
        model_name=found.name if found is not None else "custom",
        model=architecture,
        training=typed_training,
        objective=data.get("objective", "max_throughput"),
        constraints=Constraints(
            max_cost_per_iteration=_opt_q(constraints.get("max_cost_per_iteration"), "money"),
            min_throughput=_opt_float(constraints.get("min_throughput")),
            max_gpus=constraints.get("max_gpus"),
        ),
        devices=devices,
        zones=tuple(zones),
        network=network,
        sites=tuple(
            Site(**{**site, "zones": tuple(site["zones"])}) for site in data.get("sites", [])
        ),
        data=DataSource(**data["data"]) if "data" in data else None,
        run=RunSettings(**data.get("run", {})),
        profiles=tuple(data.get("profiles", [])),
    )


def spec_hash(spec: Spec) -> str:
    """sha256 of the normalised spec: defaults filled, units converted, keys sorted; so editing
    a comment, reordering keys or writing `40GB` as `40e9` keeps the hash, any real change not."""
    canonical = json.dumps(asdict(spec), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
