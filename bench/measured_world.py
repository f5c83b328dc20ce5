"""A bench scenario as Sailor measured it: the model its profiles timed, the network its VMs
reached, stated the way a spec states them.

The scenarios (bench/scenarios/*.yaml) name catalog models and a nominal network (100 Gbps
in a zone, 50 between zones). Sailor's measurements are of Megatron builds of those models
(hetc.costmodel.published.SAILOR_BUILDS: other vocabulary padding, heads, biases, global
attention) on GCP VMs whose links reach far less (2 GB/s for one flow between two A100 VMs).
A plan made for one of those worlds and scored in the other measures the mismatch, not the
cost model; so the quality bench (bench/plan_quality.py) and the planner bench's measured
mode (bench/planner.py --cost-model profiles) plan each scenario in the measured world:

- the model: the architecture the scenario's profiles recorded (`measured_model`);
- the network (`stated_network`): a pool's `nic_bandwidth` is the Hockney bandwidth (time =
  latency + bytes / bandwidth, relative least squares over 1 MB to 1 GB) of its device's
  four-flow fit within a zone, all of a node's flows together; each link class's bandwidth
  and latency are the spec's link model (a flow takes latency + bytes / min(bandwidth,
  nic / n) with n flows on the NIC) fitted to what one of n flows measured, for every n the
  profiles hold for that class (`inter_node`, `inter_zone`, `inter_region`), the median over
  the scenario's devices (`link_fit`). Classes or devices not measured keep the spec's
  numbers.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

from hetc.costmodel.profile import BandwidthFit, LayerProfile
from hetc.costmodel.published import MODEL_NAMES
from hetc.schema.spec import LinkClass, Spec

SIZES = [10 ** (6 + k / 10) for k in range(31)]
"""Message bytes the Hockney fit is taken over: 1 MB to 1 GB, where Sailor's fits hold."""
CLASSES = {"intra_zone": "inter_node", "inter_zone": "inter_zone", "inter_region": "inter_region"}
"""A spec's link class -> the profile scope that measured it."""


def hockney(fit: BandwidthFit) -> tuple[float, float]:
    """(latency s, bandwidth B/s) of time = latency + bytes / bandwidth fitted to the fit's
    transfer times over `SIZES`, each weighted by 1 / its time (a relative fit)."""
    rows = [(size, size / fit.rate(size)) for size in SIZES]
    s11 = sum(1 / t**2 for _, t in rows)
    s12 = sum(size / t**2 for size, t in rows)
    s22 = sum(size**2 / t**2 for size, t in rows)
    r1 = sum(1 / t for _, t in rows)
    r2 = sum(size / t for size, t in rows)
    det = s11 * s22 - s12 * s12
    latency = (r1 * s22 - r2 * s12) / det
    inverse = (s11 * r2 - s12 * r1) / det
    return max(latency, 0.0), 1 / inverse if inverse > 0 else math.inf


def family(name: str) -> str:
    """A model name as the catalog spells it (Sailor's OPT-350 is a build of OPT-350M)."""
    return MODEL_NAMES.get(name, name).casefold()


def scenario_profiles(spec: Spec, every: list[LayerProfile]) -> list[LayerProfile]:
    """The profiles of the spec's model family on its devices, at its precision and sequence
    length, renamed to the spec's spelling of each device."""
    devices = {d.casefold(): d for d in spec.devices}
    found = []
    for profile in every:
        device = devices.get(profile.device.casefold())
        if (
            device is not None
            and family(profile.model) == family(spec.model_name)
            and profile.seq_len == spec.training.seq_len
            and profile.precision == spec.training.precision
        ):
            found.append(replace(profile, device=device))
    return found


def measured_model(spec: Spec, profiles: list[LayerProfile]) -> Spec:
    """The spec training the architecture its profiles timed (unchanged when they record
    none, or disagree)."""
    recorded = {
        repr(sorted(p.architecture.items())): p for p in profiles if p.architecture is not None
    }
    if len(recorded) != 1:
        return spec
    from hetc.catalog import architecture_from_mapping

    (profile,) = recorded.values()
    assert profile.architecture is not None
    arch = architecture_from_mapping(dict(profile.architecture))
    return replace(spec, model=arch, model_name=profile.model)


def link_fit(fits: dict[int, BandwidthFit], nic: float) -> tuple[float, float]:
    """(latency s, bandwidth B/s) of the spec's link model for one class of link, fitted to
    what one of n flows measured for every n (relative least squares over `SIZES`): a flow
    takes latency + bytes / min(bandwidth, nic / n), as the cost model prices a link class
    whose node pairs each carry one flow and whose NICs carry n. Fitted to one flow alone,
    the latency would be a single TCP stream's start-up (0.5 ms between Sailor's A100 VMs),
    which four concurrent flows do not pay (0.05 ms)."""
    rows = [(n, size, size / (fit.rate(size) / n)) for n, fit in fits.items() for size in SIZES]

    def latency_at(bandwidth: float) -> tuple[float, float]:
        residual = [(t - size / min(bandwidth, nic / n), t) for n, size, t in rows]
        latency = max(0.0, sum(r / t**2 for r, t in residual) / sum(1 / t**2 for _, t in residual))
        return latency, sum(((latency - r) / t) ** 2 for r, t in residual)

    low, high = math.log(1e8), math.log(1e11)
    for _ in range(80):  # golden-section search over log bandwidth
        a, b = high - 0.618 * (high - low), low + 0.618 * (high - low)
        if latency_at(math.exp(a))[1] < latency_at(math.exp(b))[1]:
            high = b
        else:
            low = a
    bandwidth = math.exp((low + high) / 2)
    return latency_at(bandwidth)[0], bandwidth


def stated_network(spec: Spec, profiles: list[LayerProfile]) -> Spec:
    """The spec stating the network its profiles measured (module docstring)."""
    nics = {
        p.device: hockney(fit)[1]
        for p in profiles
        if (fit := p.bandwidth("inter_node", "p2p", 4)) is not None
    }
    links = {}
    for link, scope in CLASSES.items():
        pairs = [
            link_fit(fits, nics[p.device])
            for p in profiles
            if p.device in nics and (fits := p.network.get(scope, {}).get("p2p"))
        ]
        if pairs:
            latency = statistics.median(p[0] for p in pairs)
            bandwidth = statistics.median(p[1] for p in pairs)
            links[link] = LinkClass(bandwidth=bandwidth, latency=latency)
    zones = tuple(
        replace(
            z,
            pools=tuple(
                replace(pool, nic_bandwidth=nics.get(pool.device, pool.nic_bandwidth))
                for pool in z.pools
            ),
        )
        for z in spec.zones
    )
    return replace(spec, network=replace(spec.network, **links), zones=zones)


def as_measured(spec: Spec, every: list[LayerProfile]) -> tuple[Spec, list[LayerProfile]]:
    """The scenario in the measured world, and the profiles that serve it."""
    profiles = scenario_profiles(spec, every)
    return stated_network(measured_model(spec, profiles), profiles), profiles
