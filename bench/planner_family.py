"""The planner over a seeded family of specs unlike the benchmark scenarios (`spec_family`).

Each spec is planned as `hetc plan` plans it (`planner.plan_spec` with its default
approximations and its default budget, `budget.command_budget`; `--work-limit` to change the
work, `--time-limit` for a wall-clock budget instead) in a child process
killed after 30 s of wall time (then the spec is "unanswered"). Prints one row per spec (its
size, model, objective, constraints, seconds, verdict, the proven gaps of the plan) and the
percentiles of time and of both gaps (`hetc.solver.certificate`): `gap`, how far plan 1 may
be from the best plan within the approximations it was searched under, and `gap_all_plans`,
from the best plan of the planning model. A line `p95 gap over all plans: V, worst: W`
comes before the last, `p95 seconds: X, worst gap: Y, unanswered: Z` (Y the worst `gap`).
Wall times on a loaded 2-core VM are noisy; nothing is asserted about them.

Usage: python bench/planner_family.py [--count N] [--seed S] [--cap SECONDS] [--work-limit N]
                                     [--time-limit S]
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import sys
import time
from multiprocessing.connection import Connection

from spec_family import family_spec

from hetc.schema.spec import Spec
from hetc.solver.budget import DEFAULT_WORK, command_budget
from hetc.solver.certificate import gap_text
from hetc.solver.planner import plan_spec
from hetc.units import plural

CAP_SECONDS = 30.0


def describe(spec: Spec) -> str:
    """One spec's size in a few words."""
    devices = {p.device for z in spec.zones for p in z.pools}
    pools = sum(len(z.pools) for z in spec.zones)
    quota = sum(p.quota for z in spec.zones for p in z.pools)
    c = spec.constraints
    limits = [
        name
        for name, value in (
            ("max_gpus", c.max_gpus),
            ("budget", c.max_cost_per_iteration),
            ("floor", c.min_throughput),
        )
        if value is not None
    ]
    regions = len({z.region for z in spec.zones})
    return (
        f"{plural(len(devices), 'type')}, {plural(len(spec.zones), 'zone')},"
        f" {plural(regions, 'region')}, {plural(pools, 'pool')}, {plural(quota, 'device')},"
        f" {spec.model.parameter_count() / 1e9:.2g}B parameters, {spec.objective},"
        f" {'+'.join(limits) or '-'}"
    )


Answer = tuple[float, str, float | None, float | None]
"""Seconds, verdict, and the proven gaps of plan 1 within its approximations and over all
plans (None without a plan)."""


def _child(spec: Spec, limits: tuple[int, float | None], out: Connection) -> None:
    started = time.perf_counter()
    work, seconds = limits
    budget = command_budget(work_limit=work, time_limit=seconds, started=started)
    result = plan_spec(spec, budget=budget)
    seconds = time.perf_counter() - started
    gap = result.search.gap if result.proposals else None
    every = result.search.gap_all_plans if result.proposals else None
    if result.proposals:
        verdict = "plan" if result.search.complete else "plan, search stopped"
    elif result.infeasible is not None:
        verdict = f"infeasible before search ({result.infeasible.binding})"
    else:
        verdict = "infeasible" if result.search.complete else "stopped, no plan"
    out.send((seconds, verdict, gap, every))


def timed(spec: Spec, cap: float, limits: tuple[int, float | None]) -> Answer | None:
    """(seconds, verdict, gap, gap over all plans) of planning `spec` under `limits` (work
    units, and wall seconds instead where given), or None when it took more than `cap` s."""
    receiver, sender = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(target=_child, args=(spec, limits, sender))
    child.start()
    answered = receiver.poll(cap)
    answer: Answer | None = receiver.recv() if answered else None
    if child.is_alive():
        child.kill()
    child.join()
    return answer


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank q-th percentile (0 < q <= 100)."""
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * q // 100) - 1)] if ordered else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--cap", type=float, default=CAP_SECONDS)
    parser.add_argument("--work-limit", type=int, default=DEFAULT_WORK)
    parser.add_argument("--time-limit", type=float, default=None)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    times: list[float] = []
    gaps: list[float] = []
    everys: list[float] = []
    unanswered = 0
    for k in range(args.count):
        spec = family_spec(rng)
        answer = timed(spec, args.cap, (args.work_limit, args.time_limit))
        if answer is None:
            unanswered += 1
            times.append(args.cap)
            print(f"{k:3d}  >{args.cap:5.0f} s  unanswered  {describe(spec)}", flush=True)
            continue
        seconds, verdict, gap, every = answer
        times.append(seconds)
        if gap is not None and every is not None:
            gaps.append(gap)
            everys.append(every)
            verdict += f", gap {gap_text(gap)}, over all plans {gap_text(every)}"
        print(f"{k:3d}  {seconds:6.2f} s  {verdict}  {describe(spec)}", flush=True)
    for q in (50, 90, 95, 100):
        print(
            f"p{q} seconds: {percentile(times, q):.2f}, gap: {gap_text(percentile(gaps, q))},"
            f" gap over all plans: {gap_text(percentile(everys, q))}"
            if gaps
            else f"p{q} seconds: {percentile(times, q):.2f}"
        )
    worst = gap_text(max(gaps)) if gaps else "n/a (no plan)"
    if everys:
        print(
            f"p95 gap over all plans: {gap_text(percentile(everys, 95))},"
            f" worst: {gap_text(max(everys))}"
        )
    print(f"p95 seconds: {percentile(times, 95):.2f}, worst gap: {worst}, unanswered: {unanswered}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
