"""The diagnosis of infeasible specs, timed and checked over a seeded family of generated specs.

The family (`family`): OPT-350M from the catalog on one or two zones of one or two pools of
catalog devices (A100-40GB, V100-16GB, T4, A10G, L4) with 1-3 nodes of 1, 2 or 4 devices
each, global batch 8, and each of max_gpus (1-6), a budget (1e-5 to 1e-3 USD per
iteration) and a throughput floor (0.2 to 10 iterations/s) drawn with probability 0.4; only
specs the planner finds infeasible are kept.

Each diagnosis is checked (`problems`) by re-solving with a fresh oracle (its own searches,
none of the diagnosis's numbers): every suggested change makes the spec feasible, one step
less on any member does not (quota fixes of one alternative that add nodes to every pool
move together), each constraint named alone really binds (removing it alone restores
feasibility), each named combination needs all its members (removing all of them restores
feasibility, removing any one does not), no unnamed constraint binds alone, and `memory` is
named only when removing every constraint leaves the spec infeasible.

Prints one line per failure, the share of diagnoses that are minimal and verified, the
p95 and worst time of one diagnosis, and a summary line. Wall times on a loaded 2-core VM
are noisy; nothing is asserted about them.

Usage: python bench/diagnosis.py [--count N] [--seed S]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import replace

from hetc.schema import check_text
from hetc.schema.spec import Spec
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
from hetc.units import plural

CHECK_SECONDS = 20.0
"""Time limit of one search of the checker; a check stopped there counts as a failure."""

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


def family(count: int, seed: int = 29) -> list[Spec]:
    """`count` infeasible specs of the family, the same for the same seed."""
    rng = random.Random(seed)
    oracle = Oracle()
    out: list[Spec] = []
    while len(out) < count:
        spec = generated(rng)
        if not oracle.feasible(spec):
            out.append(spec)
    return out


def small_family(count: int, seed: int = 29) -> list[Spec]:
    """`count` infeasible specs like `family`'s, of the four-block model SMALL, whose budget
    and floor are drawn around the spec's own least cost and most throughput (0.3 to 2 times
    the cost, 0.5 to 3 times the throughput, each with probability 0.4), so that every
    family binds in some; the same for the same seed."""
    rng = random.Random(seed)
    oracle = Oracle(time_limit=None)
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


def run(count: int, seed: int) -> tuple[int, list[float], list[str], int, int]:
    """(diagnoses checked, seconds per diagnosis, failures, diagnoses proven least at their
    families' unit resolution by the diagnosis itself, and by the checker)."""
    specs = family(count, seed)
    times, failures = [], []
    unit = checked = 0
    for k, spec in enumerate(specs):
        started = time.perf_counter()
        diagnosis = diagnose(spec)
        times.append(time.perf_counter() - started)
        checker = Oracle(time_limit=CHECK_SECONDS)
        found = problems(spec, diagnosis, checker)
        if checker.unknown:
            found.append(
                f"{plural(checker.unknown, 'check search', 'check searches')} stopped at"
                f" {CHECK_SECONDS} s"
            )
        unit += diagnosis.proven
        checked += least_at_unit(spec, diagnosis, checker)
        failures.extend(f"spec {k} ({diagnosis.binding}): {p}" for p in found)
        print(
            f"spec {k}: {times[-1]:.3f} s, {diagnosis.binding}: {diagnosis.change}"
            + ("" if diagnosis.proven else " (coarser resolution)")
            + (" FAILED" if found else ""),
            flush=True,
        )
    return len(specs), times, failures, unit, checked


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seed", type=int, default=29)
    args = parser.parse_args(argv)
    count, times, failures, unit, checked = run(args.count, args.seed)
    for line in failures:
        print(line)
    bad = len({line.split(" (")[0] for line in failures})
    good = 100.0 * (count - bad) / count
    p95 = percentile(times, 0.95)
    print(
        f"{count} infeasible specs (seed {args.seed}): {good:.1f}% of diagnoses minimal (at"
        " their stated resolution) and verified;"
    )
    print(
        f"{100.0 * unit / count:.1f}% proven least at the unit resolution (a node, a device,"
        f" 3 significant digits) by the diagnosis, {100.0 * checked / count:.1f}% by the"
        f" checker ({CHECK_SECONDS:g} s searches)"
    )
    print(
        f"time per diagnosis p50 {percentile(times, 0.5):.3f} s, p95 {p95:.3f} s,"
        f" worst {max(times):.3f} s"
    )
    print(
        f"summary: {good:.1f}% minimal and verified (target 100%),"
        f" {100.0 * unit / count:.1f}% proven least at unit resolution"
        f" ({100.0 * checked / count:.1f}% as checked), p95 {p95:.2f} s"
        f" (target <= 2 s) over {count} specs"
    )
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
