"""Calibration: fit the cost model's speed factors to a short real run, as a corrected profile.

A prediction is only as good as its layer times and link bandwidths, and a profile measured
layer by layer misses what a whole run does (other processes on the machine, a VM's speed on
the day, collectives that are slower inside training than in a sweep). `calibrate` compares a
run's per-rank measurements (`hetc.costmodel.measured`) with the simulator's prediction of the
same plan rank by rank, fits a few factors, and writes them into the profiles the cost model
already reads, so that `hetc compile --profile` plans with them. The correction is a model,
not the run's answer: the same factors apply to every plan of the spec, and `compare` checks
them on a run of another plan (held out).

What a rank's numbers mean on each side (`predict`):

- compute: the runtime times every forward and backward, and the optimizer step where it
  steps its own optimizer; the model's forward and backward of every microbatch plus its
  `update` term there. A stage trained through a DeepSpeed engine (ZeRO 1 or 2, one TP degree)
  times its step as communication (`engine.step` reduces, clips and steps), so there the
  model's `update` is counted as communication.
- communication: the model's data-parallel ring and tied-embedding all-reduce of the stage.
- idle: the rest of the iteration: the model's pipeline bubbles and transfers, the runtime's
  waits on a neighbour and whatever no section claimed.
- peak memory: the model's total less its `overhead` term (a CUDA context and allocator slack
  that no tensor holds; zero on CPU), against the runtime's tracked peak.

The factors, fitted in this order:

1. per device, a compute scale: the sum of measured compute over the sum of predicted compute
   of the device's ranks, applied to every layer's forward, backward and update (a least-
   squares fit through the origin, weighted by the prediction);
2. per link class, a bandwidth scale, applied to the profile's bandwidth fits (peak and curve
   together). The knobs are the fits the simulator prices a device's communication with:
   inside a node the all-reduce and point-to-point fits, between nodes of one zone the
   inter-node point-to-point fit. Where the profile lacks one, a flat fit equal to what the
   simulator uses without it is added, and kept only if it predicts exactly the same. A knob's
   ranks are those whose predicted communication moves when it moves; knobs that move the same
   ranks cannot be told apart and share one factor (a link class). Each class's factor makes
   its ranks' predicted communication sum to what they measured (bisection; the prediction
   falls as bandwidth grows), the classes in turn until none moves. Only the class's ranks in
   a stage that ends the iteration count, where it has any: a collective between stages (the
   tied embedding's sum) is reached first by the stage that finishes first, which measures its
   wait for the other as communication, where the simulator has it idle;
3. per device, an activation-memory scale, only upward: the least factor >= 1 on the
   profile's measured `activation_bytes` that predicts every rank of the device at or above
   its measured peak. Memory is never corrected downward: an over-prediction costs a plan
   some headroom, an under-prediction an out-of-memory crash.

What it cannot correct, and says so (`Calibration.notes`): idle time, which is the schedule's
bubbles and waits, not a speed (it follows from the fitted compute and links, and what the
runtime spends outside its sections stays unmodelled); pipeline sends, whose time the runtime
books as the receiver's idle, so no communication time measures them; links that no profile
expresses (between zones or regions, or between nodes of different devices: the spec's
`network:` section holds those); communication the model does not price (the loss and
clipping reductions, TP boundary gathers); a device whose profile has no activation
measurements at the run's (microbatch, TP) (the memory formulas then stand); and every factor
the run did not exercise (a knob no rank's communication depends on stays 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

from hetc.costmodel.compute import ComputeModel
from hetc.costmodel.measured import RunMeasurement
from hetc.costmodel.network import intra_node_link, link_between
from hetc.costmodel.planning import PlanningModel
from hetc.costmodel.profile import BandwidthFit, LayerMemory, LayerProfile, Network
from hetc.costmodel.simulate import simulate
from hetc.plan import Plan
from hetc.plan.topology import topology_of
from hetc.schema.spec import LinkClass, Spec
from hetc.units import fixed

Knob = tuple[str, str, str]
"""(device, scope, collective): the bandwidth fits one link factor scales."""

KNOBS = (("intra_node", "all_reduce"), ("intra_node", "p2p"), ("inter_node", "p2p"))
"""The fits the simulator prices communication with (scope, collective)."""

SAME = 1e-9
"""Relative difference below which two predictions are the same."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RankPrediction:
    """One rank's predicted seconds per section and peak memory (see the module docstring)."""

    rank: int
    key: str
    device: str
    stage: int
    compute: float
    communication: float
    idle: float
    peak_bytes: float
    last: bool
    """Whether the rank's stage is one that ends the iteration: in a collective it waits for
    no other stage, so what it measures there is the transfer alone."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Prediction:
    iteration_time: float
    ranks: tuple[RankPrediction, ...]
    """By plan rank."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkFactor:
    """One link class: the knobs it scales, the ranks that measured it, its factor."""

    knobs: tuple[Knob, ...]
    ranks: tuple[int, ...]
    factor: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Calibration:
    """The fitted factors, the corrected profiles and the predictions before and after."""

    compute: dict[str, float]
    """Device -> scale on layer times."""
    links: tuple[LinkFactor, ...]
    activations: dict[str, float]
    """Device -> scale (>= 1) on activation bytes; 1 where nothing was under."""
    profiles: dict[str, LayerProfile]
    """Device -> its corrected profile, for every device of the plan."""
    before: Prediction
    after: Prediction
    notes: tuple[str, ...] = field(default=())
    """What could not be corrected, one line each."""


def predict(plan: Plan, spec: Spec, profiles: Sequence[LayerProfile]) -> Prediction:
    """The simulator's prediction of `plan`, per plan rank, in the runtime's sections."""
    simulation = simulate(plan, spec, profiles=profiles)
    timeline = simulation.timeline
    total = simulation.iteration_time
    reports = {r.key: r for r in simulation.ranks}
    topology = topology_of(plan, tied_embeddings=spec.model.tied_embeddings)
    ranks = []
    for process in topology.processes:
        stage = plan.stages[process.stage]
        replica = stage.replicas[process.replica]
        paths = [
            p
            for p, path in enumerate(plan.pipelines)
            if path.replicas[process.stage] == process.replica
        ]
        passes = sync = update = end = 0.0
        for p in paths:
            end = max(end, timeline.busy[p, process.stage][-1].end)
            for interval in timeline.busy[p, process.stage]:
                length = interval.end - interval.start
                if interval.what == "sync":
                    sync = length
                elif interval.what == "update":
                    update = length
                else:
                    passes += interval.busy
        engine = spec.training.zero_stage in (1, 2) and len({r.tp for r in stage.replicas}) == 1
        report = reports[f"{process.node}#{process.device_index}"]
        ranks.append(
            RankPrediction(
                rank=process.rank,
                key=report.key,
                device=replica.device,
                stage=process.stage,
                compute=passes + (0.0 if engine else update),
                communication=sync + (update if engine else 0.0),
                idle=max(0.0, total - passes - sync - update),
                peak_bytes=report.memory.total - report.memory.overhead,
                last=end >= total * (1 - SAME),
            )
        )
    return Prediction(iteration_time=total, ranks=tuple(ranks))


def analytical_profile(spec: Spec, device: str, plan: Plan | None = None) -> LayerProfile:
    """The analytical model's layer times of `device` as a profile, at every (microbatch, TP)
    the planner considers for it and `plan` uses: a device without a measured profile gets
    its calibrated times this way. Under activation checkpointing the backward is stored
    without the recomputed forward, which the cost model adds back to a profile's backward."""
    training = spec.training
    model = ComputeModel(
        arch=spec.model,
        device=spec.devices[device],
        seq_len=training.seq_len,
        precision=training.precision,
        activation_checkpointing=training.activation_checkpointing,
    )
    planning = PlanningModel(spec)
    degrees = {k.tp for k in planning.kinds if k.device == device}
    sizes = set(planning.microbatch_sizes())
    if plan is not None:
        degrees |= {r.tp for s in plan.stages for r in s.replicas if r.device == device}
        sizes.add(plan.microbatch_size)
    times: dict[int, dict[int, dict[int, tuple[float, float, float]]]] = {}
    for mbs in sorted(sizes):
        for tp in sorted(degrees):
            row = {}
            for index, t in enumerate(model.all_layer_times(mbs, tp)):
                backward = (
                    t.backward - t.forward if training.activation_checkpointing else t.backward
                )
                row[index] = (t.forward, backward, t.update)
            times.setdefault(mbs, {})[tp] = row
    return LayerProfile(
        model=spec.model_name,
        device=device,
        precision=training.precision,
        seq_len=training.seq_len,
        times=times,
        source=f"<analytical model of {device}>",
        architecture={
            k: list(v) if isinstance(v, tuple) else v for k, v in asdict(spec.model).items()
        },
        meta={"origin": f"hetc's analytical model of {device} (the spec's numbers), calibrated"},
    )


def scaled(
    profile: LayerProfile,
    *,
    compute: float = 1.0,
    links: Mapping[tuple[str, str], float] | None = None,
    activations: float = 1.0,
) -> LayerProfile:
    """`profile` with every layer time times `compute`, the fits of each (scope, collective)
    in `links` times its factor (peak and curve together: the curve's shape is kept), and
    every activation byte count times `activations`. Measured points are kept as measured."""
    times = {
        m: {
            t: {i: (f * compute, b * compute, u * compute) for i, (f, b, u) in row.items()}
            for t, row in by_tp.items()
        }
        for m, by_tp in profile.times.items()
    }
    network: Network = {
        scope: {
            collective: {
                n: _scaled_fit(fit, (links or {}).get((scope, collective), 1.0))
                for n, fit in fits.items()
            }
            for collective, fits in by_collective.items()
        }
        for scope, by_collective in profile.network.items()
    }
    memory = {
        t: {
            i: LayerMemory(
                weight_bytes=m.weight_bytes,
                activation_bytes={b: v * activations for b, v in m.activation_bytes.items()},
            )
            for i, m in row.items()
        }
        for t, row in profile.memory.items()
    }
    return replace(profile, times=times, network=network, memory=memory)


def _scaled_fit(fit: BandwidthFit, factor: float) -> BandwidthFit:
    if factor == 1.0:
        return fit
    a, b, c = fit.coefficients
    return replace(fit, coefficients=(a * factor, b * factor, c * factor), peak=fit.peak * factor)


def _flat(link: LinkClass) -> BandwidthFit:
    """A fit that prices every message as the simulator's flat `link` does: its latency plus
    the bytes at its bandwidth, at every size."""
    return BandwidthFit(
        coefficients=(0.0, 0.0, link.bandwidth / 1e9),
        peak=link.bandwidth,
        sizes=(1.0, 1e15),
        latency=link.latency,
    )


def _same(a: Prediction, b: Prediction) -> bool:
    def close(x: float, y: float) -> bool:
        return abs(x - y) <= SAME * max(abs(x), abs(y), 1e-12)

    return close(a.iteration_time, b.iteration_time) and all(
        close(p.compute, q.compute) and close(p.communication, q.communication)
        for p, q in zip(a.ranks, b.ranks, strict=True)
    )


class _Fit:
    """The state of one calibration: the plan, the base profiles and the factors so far."""

    def __init__(self, plan: Plan, spec: Spec, base: dict[str, LayerProfile]) -> None:
        self.plan, self.spec, self.base = plan, spec, base
        self.compute = dict.fromkeys(base, 1.0)
        self.activations = dict.fromkeys(base, 1.0)
        self.links: dict[Knob, float] = {}

    def profiles(self, links: Mapping[Knob, float] | None = None) -> dict[str, LayerProfile]:
        chosen = {**self.links, **(links or {})}
        return {
            device: scaled(
                profile,
                compute=self.compute[device],
                links={(s, c): f for (d, s, c), f in chosen.items() if d == device},
                activations=self.activations[device],
            )
            for device, profile in self.base.items()
        }

    def predict(self, links: Mapping[Knob, float] | None = None) -> Prediction:
        return predict(self.plan, self.spec, list(self.profiles(links).values()))


def calibrate(
    plan: Plan,
    spec: Spec,
    profiles: Sequence[LayerProfile],
    run: RunMeasurement,
) -> Calibration:
    """Fit the factors of the module docstring to `run` (a run of `plan`) and return them with
    the corrected profiles; `profiles` are the measured ones the prediction used (a device
    without one starts from `analytical_profile`)."""
    given = {p.device: p for p in profiles}
    used = sorted({r.device for s in plan.stages for r in s.replicas})
    before = predict(plan, spec, profiles)
    fit = _Fit(plan, spec, {d: given.get(d) or analytical_profile(spec, d, plan) for d in used})
    if not _same(fit.predict(), before):
        raise AssertionError("the analytical profile does not predict what the model does")
    notes: list[str] = []
    _fit_compute(fit, run, used)
    classes = _link_classes(fit, used, notes)
    _fit_links(fit, run, classes, notes)
    _fit_memory(fit, run, used, notes)
    after = fit.predict()
    notes += _unpriced(after, run)
    kept = fit.profiles()
    return Calibration(
        compute={d: fit.compute[d] for d in used},
        links=tuple(
            LinkFactor(knobs=knobs, ranks=ranks, factor=fit.links[knobs[0]])
            for knobs, ranks in classes
        ),
        activations={d: fit.activations[d] for d in used},
        profiles={d: kept[d] for d in used},
        before=before,
        after=after,
        notes=tuple(notes),
    )


def _fit_compute(fit: _Fit, run: RunMeasurement, used: list[str]) -> None:
    predicted = fit.predict()
    for device in used:
        ranks = [p for p in predicted.ranks if p.device == device]
        want = sum(run.ranks[p.rank].compute for p in ranks)
        have = sum(p.compute for p in ranks)
        fit.compute[device] = want / have if have > 0 and want > 0 else 1.0


def _link_classes(
    fit: _Fit, used: list[str], notes: list[str]
) -> list[tuple[tuple[Knob, ...], tuple[int, ...]]]:
    """The knobs the run exercised, grouped by the ranks they move (module docstring, 2)."""
    reference = fit.predict()
    moved: dict[tuple[int, ...], list[Knob]] = {}
    for device in used:
        for scope, collective in KNOBS:
            knob = (device, scope, collective)
            before = fit.base[device]
            if not before.network.get(scope, {}).get(collective):
                synthetic = _synthetic_fits(fit, device, scope)
                if synthetic is None:
                    continue
                fit.base[device] = replace(
                    before, network=_with(before.network, scope, collective, synthetic)
                )
                if not _same(fit.predict(), reference):
                    fit.base[device] = before
                    continue
            ranks = _moved_ranks(reference, fit.predict({knob: 0.5}))
            if ranks:
                moved.setdefault(ranks, []).append(knob)
            else:
                fit.base[device] = before
    classes = []
    for ranks, knobs in moved.items():
        for knob in knobs:
            fit.links[knob] = 1.0
        classes.append((tuple(knobs), ranks))
    if not classes:
        notes.append("no rank's predicted communication depends on a link a profile can hold")
    return classes


def _synthetic_fits(fit: _Fit, device: str, scope: str) -> dict[int, BandwidthFit] | None:
    """The flat fits equal to the link the simulator uses for `device` without one."""
    if scope == "intra_node":
        return {2: _flat(intra_node_link(fit.spec.devices[device]))}
    zones = {z.name: z for z in fit.spec.zones}
    nodes = [n for n in fit.plan.nodes if n.device == device]
    if len({n.id for n in nodes}) < 2:
        return None
    zone = zones[nodes[0].zone]
    return {1: _flat(link_between(fit.spec.network, zone, zone))}


def _with(network: Network, scope: str, collective: str, fits: dict[int, BandwidthFit]) -> Network:
    out = {s: dict(by) for s, by in network.items()}
    out.setdefault(scope, {})[collective] = fits
    return out


def _moved_ranks(a: Prediction, b: Prediction) -> tuple[int, ...]:
    return tuple(
        p.rank
        for p, q in zip(a.ranks, b.ranks, strict=True)
        if abs(p.communication - q.communication) > SAME * max(p.communication, 1e-12)
    )


def _fit_links(
    fit: _Fit,
    run: RunMeasurement,
    classes: list[tuple[tuple[Knob, ...], tuple[int, ...]]],
    notes: list[str],
) -> None:
    """Each class in turn, until no factor moves by more than `SAME` (a few rounds). A class
    is fitted to those of its ranks whose stage ends the iteration, where there are any: a
    stage that finishes earlier waits inside the collective for the last one, and the
    simulator books that wait as its idle time, not as the link's."""
    bounds = (1e-4, 1e4)
    for _round in range(50):
        moved = 0.0
        last = {p.rank for p in fit.predict().ranks if p.last}
        for knobs, members in classes:
            ranks = tuple(r for r in members if r in last) or members
            want = sum(run.ranks[r].communication for r in ranks)

            def excess(
                factor: float,
                knobs: tuple[Knob, ...] = knobs,
                ranks: tuple[int, ...] = ranks,
                want: float = want,
            ) -> float:
                predicted = fit.predict(dict.fromkeys(knobs, factor))
                return sum(predicted.ranks[r].communication for r in ranks) - want

            factor = _solve(excess, *bounds)
            moved = max(moved, abs(math.log(factor / fit.links[knobs[0]])))
            for knob in knobs:
                fit.links[knob] = factor
        if moved <= SAME:
            break
    for knobs, ranks in classes:
        if fit.links[knobs[0]] in bounds:
            notes.append(
                f"{_knob_names(knobs)}: no bandwidth reproduces ranks {_ranks(ranks)}'"
                f" communication (the factor stopped at {fit.links[knobs[0]]:g}): it is not"
                " bandwidth-bound"
            )


def _solve(excess: Callable[[float], float], low: float, high: float) -> float:
    """The least factor in [low, high] where the decreasing `excess` is at most 0 (log
    bisection, to 1e-13 relative); a bound where it does not cross."""
    if excess(low) <= 0:
        return low
    if excess(high) >= 0:
        return high
    a, b = math.log(low), math.log(high)
    for _ in range(100):
        middle = (a + b) / 2
        if excess(math.exp(middle)) > 0:
            a = middle
        else:
            b = middle
        if b - a < 1e-13:
            break
    return math.exp(b)


def _fit_memory(fit: _Fit, run: RunMeasurement, used: list[str], notes: list[str]) -> None:
    for device in used:
        measured = {
            p.rank: peak
            for p in fit.predict().ranks
            if p.device == device and (peak := run.ranks[p.rank].peak_bytes) is not None
        }

        def short(
            factor: float, device: str = device, measured: dict[int, float] = measured
        ) -> float:
            """The largest shortfall of a prediction, relative to the measured peak."""
            fit.activations[device] = factor
            predicted = fit.predict().ranks
            return max((m - predicted[r].peak_bytes) / m for r, m in measured.items())

        if not measured or short(1.0) <= 0:
            continue
        if short(_solve(short, 1.0, 1e3)) <= 0:
            continue
        under = short(1.0)
        notes.append(
            f"{device}: peak memory under-predicted by up to {100 * under:.1f}%, and raising"
            " its profile's activation bytes does not reach it (no activation measurements at"
            " the run's microbatch and TP, or the peak is not the activations' moment):"
            " measure the device with `hetc profile measure`"
        )


def _unpriced(after: Prediction, run: RunMeasurement) -> list[str]:
    """Communication measured on ranks whose communication the model does not price."""
    free = [
        p.rank for p in after.ranks if p.communication == 0 and run.ranks[p.rank].communication > 0
    ]
    if not free:
        return []
    seconds = max(run.ranks[r].communication for r in free)
    return [
        f"{'rank' if len(free) == 1 else 'ranks'} {_ranks(tuple(free))} measured up to"
        f" {fixed(seconds * 1e3)} ms of communication"
        " per iteration that the model does not price (loss and clipping reductions, TP"
        " boundary gathers, a flat gradient copy)"
    ]


def _knob_names(knobs: tuple[Knob, ...]) -> str:
    return " + ".join(f"{d} {s} {c}" for d, s, c in knobs)


def _ranks(ranks: tuple[int, ...]) -> str:
    return ", ".join(map(str, ranks))
