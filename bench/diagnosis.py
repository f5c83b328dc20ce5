"""The diagnosis of infeasible specs, timed and checked over a seeded family of generated specs.

The family (`kinds_family`) draws four kinds of spec in turn, each kept only where it is
infeasible:
- small: OPT-350M from the catalog on one or two zones of one or two pools of catalog
  devices (A100-40GB, V100-16GB, T4, A10G, L4) with 1-3 nodes of 1, 2 or 4 devices each,
  global batch 8, and each of max_gpus (1-6), a budget (1e-5 to 1e-3 USD per iteration) and a
  throughput floor (0.2 to 10 iterations/s) drawn with probability 0.4 (`generated`);
- 10,000-GPU floor: 10,000 devices of one to three types in one to three zones, and a
  floor 1% to 50% over the spec's own optimum, so that the floor's least fix is the optimum
  of a 10,000-GPU search under `kind-profiles` (`large_floor`);
- quota (memory): a 13B to 65B model on a few nodes of one pool, whose least quota is tens to
  hundreds of devices (`quota_memory`);
- quota (floor): a floor that one pool reaches only with 128 to 768 devices, from 2 to 4
  nodes (`quota_floor`).

Each diagnosis runs within `budget.DEFAULT_WORK` units, as `hetc plan` gives a whole command,
and is checked (`check`) by a fresh oracle whose searches stop at CHECK_WORK (none of the
diagnosis's numbers or plans): every suggested change makes the spec feasible, every value
it states as proven infeasible is (so the least value lies in the stated range), one unit
less on any member is proven infeasible (least at the unit: `least_at_unit`), each
constraint named alone really binds, each named combination needs all its members, no
unnamed constraint binds alone, and `memory` is named only when removing every constraint
leaves the spec infeasible.

Prints one line per diagnosis, per kind the share least at the unit and verified, then the
shares over the family, the p50, p95 and worst wall time of one diagnosis, the work, the
most any diagnosis spent past its budget, and a summary line. Wall times on a loaded 2-core
VM are noisy; nothing is asserted about them.

Usage: python bench/diagnosis.py [--count N] [--seed S] [--work UNITS]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from hetc.schema import check_text
from hetc.schema.spec import Spec
from hetc.solver.budget import DEFAULT_WORK, Budget
from hetc.solver.diagnosis import (
    Diagnosis,
    Fix,
    Oracle,
    apply_fixes,
    diagnose,
    one_step_less,
    present,
    proven_least,
    removed,
    unit_step,
)
from hetc.solver.oracle import constrained
from hetc.units import plural

CHECK_WORK = 8 * DEFAULT_WORK
"""Work limit of one search of the checker (eight times a whole diagnosis's default
budget); a check stopped there counts as a failure."""

DEVICES = ("A100-40GB", "V100-16GB", "T4", "A10G", "L4")


OPT = "{preset: OPT-350M}"

SMALL = (
    "{architecture: {layers: 4, hidden: 1024, heads: 16, ffn: 4096, vocab: 32000,"
    " max_positions: 512}}"
)
"""The model of `small_family`: four blocks, so that the exact search ends in milliseconds."""


def generated(rng: random.Random, *, model: str = OPT, constraints: bool = True) -> Spec:
    """One spec of the family (feasible or not); without `constraints`, none drawn."""
    zones = []
    for z in range(rng.choice([1, 1, 1, 2])):
        pools = []
        for device in rng.sample(DEVICES, rng.choice([1, 2])):
            gpn = rng.choice([1, 2, 4])
            pools.append(
                f"      - {{device: {device}, quota: {gpn * rng.randint(1, 3)},"
                f" gpus_per_node: {gpn}}}"
            )
        zones.append(f"  - name: z{z}\n    region: r{z}\n    pools:\n" + "\n".join(pools))
    drawn = []
    if constraints and rng.random() < 0.4:
        drawn.append(f"max_gpus: {rng.randint(1, 6)}")
    if constraints and rng.random() < 0.4:
        drawn.append(f"max_cost_per_iteration: {10 ** rng.uniform(-5, -3):.3g}")
    if constraints and rng.random() < 0.4:
        drawn.append(f"min_throughput: {10 ** rng.uniform(-0.7, 1):.3g}")
    text = (
        f"version: 1\nname: generated\nmodel: {model}\n"
        f"training: {{global_batch_size: 8, seq_len: 512,"
        f" precision: fp16, zero_stage: {rng.choice([0, 1])}}}\n"
        f"objective: {rng.choice(['max_throughput', 'min_cost'])}\n"
        + (f"constraints: {{{', '.join(drawn)}}}\n" if drawn else "")
        + "zones:\n"
        + "\n".join(zones)
        + "\nnetwork:\n  inter_region: {bandwidth: 10Gbps, latency: 10ms}\n"
    )
    result = check_text(text, "generated.yaml")
    if result.spec is None:
        raise ValueError("\n".join(d.format() for d in result.diagnostics))
    return result.spec


LARGE_DEVICES = ("H100-80GB", "A100-80GB", "A100-40GB", "L4", "V100-32GB")
"""Devices of the 10,000-GPU specs (`large_floor`)."""

LARGE_MODELS = ("OPT-350M", "GPT-3-1.3B", "GPT-Neo-2.7B", "Llama-7B")

BIG_MODELS = ("Llama-13B", "Llama-33B", "Llama-65B", "GPT-3-13B")
"""Models of the quota specs that need hundreds of devices for memory (`quota_memory`)."""

QUOTA_DEVICES = ("T4", "V100-16GB", "V100-32GB", "A10G", "L4", "A100-40GB")

LONG_WORK = 100_000_000
"""Work limit of each search that draws the family (about 100 s): floors around a spec's
optimum, and which specs are infeasible."""

LONG = Oracle(work_limit=LONG_WORK, budget=None)
"""The oracle that draws the family."""


def _checked(text: str) -> Spec:
    result = check_text(text, "generated.yaml")
    if result.spec is None:
        raise ValueError("\n".join(d.format() for d in result.diagnostics))
    return result.spec


def _pools_text(zones: list[list[tuple[str, int, int]]]) -> str:
    out = []
    for z, pools in enumerate(zones):
        out.append(f"  - name: z{z}\n    region: r{z % 2}\n    pools:")
        out += [f"      - {{device: {d}, quota: {q}, gpus_per_node: {g}}}" for d, q, g in pools]
    return "\n".join(out)


def _spec(model: str, batch: int, zones: list[list[tuple[str, int, int]]], extra: str = "") -> Spec:
    return _checked(
        f"version: 1\nname: generated\nmodel: {{preset: {model}}}\n"
        f"training: {{global_batch_size: {batch}, seq_len: 2048, precision: fp16,"
        f" zero_stage: 1{extra}}}\nobjective: max_throughput\nzones:\n"
        + _pools_text(zones)
        + "\nnetwork:\n  inter_region: {bandwidth: 10Gbps, latency: 10ms}\n"
    )


def _fastest(spec: Spec) -> float | None:
    """The most iterations/s of any plan of `spec` (its optimum, searched to the end);
    None where the search did not end with a plan."""
    best = LONG.optimum(replace(spec, objective="max_throughput"))
    if best.candidate is None or not best.complete:
        return None
    return 1.0 / best.candidate.estimate.iteration_time


def large_floor(rng: random.Random) -> Spec | None:
    """A 10,000-GPU spec (1-3 zones, 1-3 device types of LARGE_DEVICES, nodes of 8, the
    10,000 devices split evenly over its pools; a model of LARGE_MODELS, batch 1,024 to
    4,096, either objective) with a throughput floor 1% to 50% over its optimum: the floor
    binds, and its least fix is the optimum of a 10,000-GPU search (under `kind-profiles`)."""
    count = rng.randint(1, 3)
    devices = rng.sample(LARGE_DEVICES, rng.randint(1, 3))
    slots = [(z, d) for z in range(count) for d in devices if rng.random() < 0.7]
    slots = slots or [(0, devices[0])]
    quota = 10_000 // len(slots) // 8 * 8
    zones = [[(d, quota, 8) for zz, d in slots if zz == z] for z in range(count)]
    spec = _spec(rng.choice(LARGE_MODELS), rng.choice([1024, 2048, 4096]), [z for z in zones if z])
    fastest = _fastest(spec)
    if fastest is None:
        return None
    floor = float(f"{fastest * rng.uniform(1.01, 1.5):.3g}")
    objective = rng.choice(["max_throughput", "min_cost"])
    return replace(constrained(spec, min_throughput=floor), objective=objective)


def quota_memory(rng: random.Random) -> Spec | None:
    """One pool of QUOTA_DEVICES, 1-4 nodes, and a model of BIG_MODELS (batch 64 or 128,
    activation checkpointing or not) whose state needs tens to hundreds of them: the quota
    binds where its lifted ceiling holds a plan."""
    gpn = rng.choice([1, 2, 4, 8])
    pools = [[(rng.choice(QUOTA_DEVICES), gpn * rng.randint(1, 4), gpn)]]
    checkpointing = str(rng.random() < 0.5).lower()
    spec = _spec(
        rng.choice(BIG_MODELS),
        rng.choice([64, 128]),
        pools,
        f", activation_checkpointing: {checkpointing}",
    )
    return spec if _quota_binds(spec) else None


def quota_floor(rng: random.Random) -> Spec | None:
    """One pool of QUOTA_DEVICES with 2-4 nodes and a floor that its optimum at a quota of
    128 to 768 devices reaches (0.9 to 1 times it): the least quota is in the hundreds."""
    gpn = rng.choice([1, 2, 4, 8])
    device = rng.choice(QUOTA_DEVICES)
    model, batch = rng.choice(LARGE_MODELS[:3]), rng.choice([512, 1024])
    target = rng.randint(128, 768) // gpn * gpn
    reach = _fastest(_spec(model, batch, [[(device, target, gpn)]]))
    if reach is None:
        return None
    spec = _spec(model, batch, [[(device, gpn * rng.randint(2, 4), gpn)]])
    spec = constrained(spec, min_throughput=float(f"{reach * rng.uniform(0.9, 1.0):.3g}"))
    return spec if _quota_binds(spec) else None


def _quota_binds(spec: Spec) -> bool:
    """Whether `spec` is proven infeasible and its lifted quota has a plan."""
    return LONG.proven_infeasible(spec) and LONG.feasible(removed(spec, ["quota"]))


def _small(rng: random.Random) -> Spec | None:
    spec = generated(rng)
    return spec if LONG.proven_infeasible(spec) else None


KINDS: dict[str, Callable[[random.Random], Spec | None]] = {
    "small": _small,
    "10,000-GPU floor": large_floor,
    "quota (memory)": quota_memory,
    "quota (floor)": quota_floor,
}
"""The family's kinds of spec, drawn in turn: small OPT-350M specs (`generated`), floors of
10,000-GPU specs, and quotas whose least fix is in the hundreds of devices."""


def family(count: int, seed: int = 29) -> list[Spec]:
    """`count` infeasible specs of the small kind (`generated`), as bench/infeasible.py
    times them; the same for the same seed."""
    return [spec for _, spec in kinds_family(count, seed, ("small",))]


def kinds_family(
    count: int, seed: int = 29, kinds: Sequence[str] = tuple(KINDS)
) -> list[tuple[str, Spec]]:
    """`count` infeasible specs of the family, (kind, spec), the kinds in turn; the same
    for the same seed. Each kind keeps only specs proven infeasible by LONG (a small spec),
    by construction (a floor over the optimum), and for the quota kinds, whose lifted quota
    has a plan (so that the quota binds)."""
    rng = random.Random(seed)
    out: list[tuple[str, Spec]] = []
    while len(out) < count:
        kind = kinds[len(out) % len(kinds)]
        spec = KINDS[kind](rng)
        if spec is not None:
            out.append((kind, spec))
    return out


def small_family(count: int, seed: int = 29) -> list[Spec]:
    """`count` infeasible specs like `family`'s, of the four-block model SMALL, whose budget
    and floor are drawn around the spec's own least cost and most throughput (0.3 to 2 times
    the cost, 0.5 to 3 times the throughput, each with probability 0.4), so that every
    family binds in some; the same for the same seed."""
    rng = random.Random(seed)
    oracle = Oracle(work_limit=None)
    out: list[Spec] = []
    while len(out) < count:
        spec = generated(rng, model=SMALL, constraints=False)
        cheapest = oracle.best(replace(spec, objective="min_cost"))
        fastest = oracle.best(replace(spec, objective="max_throughput"))
        limits: dict[str, float | int | None] = {}
        if rng.random() < 0.4:
            limits["max_gpus"] = rng.randint(1, 6)
        if cheapest is not None and rng.random() < 0.4:
            limits["max_cost_per_iteration"] = float(
                f"{cheapest.estimate.cost * 10 ** rng.uniform(-0.5, 0.3):.3g}"
            )
        if fastest is not None and rng.random() < 0.4:
            most = 1 / fastest.estimate.iteration_time
            limits["min_throughput"] = float(f"{most * 10 ** rng.uniform(-0.3, 0.5):.3g}")
        spec = replace(spec, constraints=replace(spec.constraints, **limits))
        if oracle.proven_infeasible(spec):
            out.append(spec)
    return out


def _less(spec: Spec, fixes: tuple[Fix, ...]) -> list[tuple[Fix, ...]]:
    """The alternative with one member one step less permissive, each way there is."""
    quotas = [f for f in fixes if f.family == "quota"]
    others = [f for f in fixes if f.family != "quota"]
    out: list[tuple[Fix, ...]] = []
    units = [[f] for f in others] + ([quotas] if len(quotas) > 1 else [[f] for f in quotas])
    for unit in units:
        lowered = [one_step_less(spec, f) for f in unit]
        if any(f is None for f in lowered):
            continue
        swap = {id(f): g for f, g in zip(unit, lowered, strict=True)}
        out.append(tuple(swap.get(id(f)) or f for f in fixes))
    return out


def least_at_unit(spec: Spec, diagnosis: Diagnosis, oracle: Oracle) -> bool:
    """Whether every fix is the least at its family's unit resolution, as `oracle` (the
    checker, with its longer searches) proves: one unit step less permissive on any member is
    proven infeasible. True where the diagnosis proved it itself (`Diagnosis.proven`)."""
    if diagnosis.proven:
        return True
    for fixes in diagnosis.alternatives:
        for fix in fixes:
            if proven_least(spec, fix):
                continue
            step = unit_step(spec, fix)
            if step is None:
                return False
            lowered = tuple(step if f is fix else f for f in fixes)
            if not oracle.proven_infeasible(apply_fixes(spec, lowered)):
                return False
    return True


def problems(spec: Spec, diagnosis: Diagnosis, oracle: Oracle) -> list[str]:
    """What is wrong with `diagnosis` of `spec`, by re-solving with `oracle`."""
    out = []
    families = present(spec)
    if diagnosis.binding == "memory":
        if oracle.feasible(removed(spec, families)):
            out.append("memory named, but removing every constraint restores feasibility")
        return out
    for fixes in diagnosis.alternatives:
        if not oracle.feasible(apply_fixes(spec, fixes)):
            out.append(f"not feasible with {[f.line() for f in fixes]}")
        if any(f.infeasible_at is None for f in fixes):
            out.append(f"no less value proven infeasible: {[f.line() for f in fixes]}")
        for less in _less(spec, fixes):
            if oracle.feasible(apply_fixes(spec, less)):
                out.append(f"not minimal: feasible with {[f.line() for f in less]}")
            elif not oracle.proven_infeasible(apply_fixes(spec, less)):
                out.append(f"not proven infeasible with {[f.line() for f in less]}")
    named = diagnosis.binding.split(" or ")
    for name in named:
        members = name.split(" and ")
        if not oracle.feasible(removed(spec, members)):
            out.append(f"{name}: removing it does not restore feasibility")
        if len(members) > 1:
            for member in members:
                if oracle.feasible(removed(spec, [member])):
                    out.append(f"{name}: removing {member} alone restores feasibility")
    for f in families:
        if f not in named and oracle.feasible(removed(spec, [f])):
            out.append(f"{f} binds alone but is not named")
    return out


@dataclass
class Row:
    """One diagnosis of the family and its checks."""

    kind: str
    seconds: float
    work: int
    diagnosis: Diagnosis
    failures: list[str]
    least: bool
    """Every fix least at its unit resolution, as the checker proves it."""


def check(spec: Spec, diagnosis: Diagnosis) -> tuple[list[str], bool]:
    """(what is wrong with `diagnosis`, whether every fix is least at its unit resolution),
    by a fresh checker whose searches stop at CHECK_WORK: `problems`, `least_at_unit`, and
    a failure for each check search that stopped unproven."""
    checker = Oracle(work_limit=CHECK_WORK, budget=None)
    found = problems(spec, diagnosis, checker)
    least = least_at_unit(spec, diagnosis, checker)
    if checker.unknown:
        found.append(
            f"{plural(checker.unknown, 'check search', 'check searches')} stopped at"
            f" {CHECK_WORK:,} units"
        )
    return found, least and not found


def run(count: int, seed: int, work: int) -> list[Row]:
    """Diagnose and check `count` specs of the family, each diagnosis within `work` units."""
    rows = []
    for k, (kind, spec) in enumerate(kinds_family(count, seed)):
        started = time.perf_counter()
        diagnosis = diagnose(spec, budget=Budget(work=work))
        seconds = time.perf_counter() - started
        failures, least = check(spec, diagnosis)
        rows.append(Row(kind, seconds, diagnosis.work, diagnosis, failures, least))
        print(
            f"spec {k} ({kind}): {seconds:.2f} s, {diagnosis.work:,} units,"
            f" {diagnosis.binding}: {diagnosis.change}"
            + ("" if diagnosis.proven else " (a range)")
            + ("" if least else " NOT LEAST-AND-VERIFIED")
            + "".join(f"\n  {line}" for line in failures),
            flush=True,
        )
    return rows


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--work", type=int, default=DEFAULT_WORK)
    args = parser.parse_args(argv)
    rows = run(args.count, args.seed, args.work)
    count = len(rows)
    for kind in KINDS:
        some = [r for r in rows if r.kind == kind]
        if some:
            print(
                f"{kind}: {sum(r.least for r in some)} of {len(some)} least and verified,"
                f" {sum(r.diagnosis.proven for r in some)} proven least by the diagnosis"
                f" itself, worst {max(r.seconds for r in some):.2f} s"
            )
    times = [r.seconds for r in rows]
    good = 100.0 * sum(r.least for r in rows) / count
    verified = 100.0 * sum(not r.failures for r in rows) / count
    proven = 100.0 * sum(r.diagnosis.proven for r in rows) / count
    over = max(r.work - args.work for r in rows)
    print(
        f"{count} infeasible specs (seed {args.seed}), each diagnosis within {args.work:,}"
        f" units: {good:.1f}% least at the unit resolution and verified by the checker"
        f" ({CHECK_WORK:,}-unit searches), {verified:.1f}% verified at their stated"
        f" resolution, {proven:.1f}% proven least by the diagnosis itself"
    )
    print(
        f"time per diagnosis p50 {percentile(times, 0.5):.2f} s, p95"
        f" {percentile(times, 0.95):.2f} s, worst {max(times):.2f} s; work p50"
        f" {percentile([r.work for r in rows], 0.5):,.0f} units, most overrun {over:,} units"
    )
    print(
        f"summary: {good:.1f}% least-and-verified (target 100%), p95"
        f" {percentile(times, 0.95):.2f} s over {count} specs"
    )
    return 0 if good == 100.0 else 1


if __name__ == "__main__":
    sys.exit(main())
