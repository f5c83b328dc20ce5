"""What each declared approximation of the planner costs: its optimality gap against the exact
search, and its search time, on the random small instances of the exactness tests, and with
`--family N` on the first N specs of the planner family (bench/spec_family.py, seed 27 as
bench/planner_family.py draws them).

    python bench/approximations.py [--instances N]
    python bench/approximations.py --family N [--small M] [--cap SECONDS]

Prints, per approximation, on how many instances it found the exact optimum, the worst and
mean relative gap of its objective, how often it found no plan where one exists, and the total
search time against the exact search's. The bench scenarios (bench/planner.py) are too large
for the exact search to finish, so the gap can only be measured on specs where it does: in
the family mode, the specs whose exact search finishes within `--cap` seconds (default 60),
for which it prints the gap percentiles of `kind-profiles` (the default approximation above
64 devices, `planner.default_approximations`) and how many specs the exact search finished.
Few of the family's specs are that small, so `--small M` adds M specs of the family's small
kind (`spec_family.small_spec`, same seed), searched under `kind-profiles` although the
planner would search them exactly, and the percentiles are over both sets. The numbers
`certificate.MEASURED_GAPS` declares come from this mode.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import random
import resource
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from oracles.instances import binding_instance, random_instance  # noqa: E402
from planner_family import percentile  # noqa: E402
from spec_family import family_spec, small_spec  # noqa: E402

from hetc.costmodel.planning import PlanningModel  # noqa: E402
from hetc.schema import check_text  # noqa: E402
from hetc.schema.spec import Spec  # noqa: E402
from hetc.solver.feasibility import necessary_conditions  # noqa: E402
from hetc.solver.search import APPROXIMATIONS, SearchOptions, search  # noqa: E402

FAMILY_SEED = 27
"""The seed bench/planner_family.py draws its specs with."""


MEMORY_BYTES = 3 * 2**30
"""Address space a family spec's searches may take (the machine is shared): past it, the
spec counts as unfinished."""


Outcome = tuple[str, float | None, float, float, bool]
"""(what happened, the gap of `kind-profiles` from exact, exact seconds, approximation
seconds, whether the approximation finished)."""


def _pair(spec: Spec, cap: float, out: Connection) -> None:
    """In a child: the exact search, then `kind-profiles`, each limited to `cap` seconds."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    try:
        model = PlanningModel(spec)
        if necessary_conditions(model) is not None:
            out.send(("infeasible before search", None, 0.0, 0.0, True))
            return
        exact = search(model, SearchOptions(time_limit=cap))
        if not exact.complete:
            out.send(("exact unfinished", None, exact.seconds, 0.0, False))
            return
        if not exact.candidates:
            out.send(("infeasible", None, exact.seconds, 0.0, True))
            return
        approx = search(
            model, SearchOptions(approximations=frozenset({"kind-profiles"}), time_limit=cap)
        )
        if not approx.candidates:
            out.send(("approximation found no plan", None, exact.seconds, approx.seconds, False))
            return
        found, best = approx.candidates[0].value, exact.candidates[0].value
        # min_cost on free pools: 0 USD is optimal, and any price above it infinitely worse
        gap = found / best - 1 if best > 0 else (0.0 if found == 0 else math.inf)
        out.send(("gap", gap, exact.seconds, approx.seconds, approx.complete))
    except MemoryError:
        out.send(("exact unfinished (memory)", None, 0.0, 0.0, False))


def _outcome(spec: Spec, cap: float) -> Outcome:
    """`_pair` in a forked child, killed after twice the cap and a margin (a search that
    overruns its limit counts as unfinished)."""
    receiver, sender = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(target=_pair, args=(spec, cap, sender))
    child.start()
    answered = receiver.poll(2 * cap + 30)
    outcome: Outcome = (
        receiver.recv() if answered else ("exact unfinished (killed)", None, 0.0, 0.0, False)
    )
    if child.is_alive():
        child.kill()
    child.join()
    return outcome


def family(count: int, small: int, cap: float) -> None:
    """The `kind-profiles` gap against the exact search on the family's specs (docstring)."""
    rng = random.Random(FAMILY_SEED)
    drawn = [family_spec(rng) for _ in range(count)]
    rng = random.Random(FAMILY_SEED)
    drawn += [small_spec(rng) for _ in range(small)]
    gaps: list[float] = []
    finished = missed = 0
    for k, spec in enumerate(drawn):
        what, gap, exact_s, approx_s, approx_done = _outcome(spec, cap)
        if what in ("gap", "infeasible", "approximation found no plan"):
            finished += 1
        if what == "approximation found no plan":
            missed += 1
        if gap is None:
            print(f"{k:3d}  {what} ({exact_s:.1f} s)", flush=True)
            continue
        gaps.append(gap)
        print(
            f"{k:3d}  gap {100 * gap:.2f}% (exact {exact_s:.1f} s,"
            f" kind-profiles {approx_s:.1f} s{'' if approx_done else ', stopped'})",
            flush=True,
        )
    print(
        f"exact search finished on {finished} of {len(drawn)} specs ({len(gaps) + missed} with a"
        f" plan; kind-profiles found none on {missed}) within {cap:g} s"
    )
    if gaps:
        print(
            f"kind-profiles gap from exact: p50 {100 * percentile(gaps, 50):.2f}%,"
            f" p95 {100 * percentile(gaps, 95):.2f}%, worst {100 * max(gaps):.2f}%"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=120)
    parser.add_argument("--family", type=int, default=0)
    parser.add_argument("--small", type=int, default=0)
    parser.add_argument("--cap", type=float, default=60.0)
    args = parser.parse_args()
    if args.family or args.small:
        family(args.family, args.small, args.cap)
        return
    specs = []
    for seed in range(args.instances):
        text = binding_instance(seed) if seed % 2 == 0 else random_instance(seed)
        spec = check_text(text, f"seed-{seed}.yaml").spec
        assert spec is not None
        specs.append(spec)
    exact_values: list[float | None] = []
    started = time.perf_counter()
    for spec in specs:
        found = search(PlanningModel(spec), SearchOptions()).candidates
        exact_values.append(found[0].value if found else None)
    exact_seconds = time.perf_counter() - started
    feasible = sum(v is not None for v in exact_values)
    print(f"{len(specs)} instances ({feasible} feasible); exact search {exact_seconds:.2f} s")
    columns = ("optimal", "worst gap", "mean gap", "missed", "time s")
    print(f"{'approximation':18} " + " ".join(f"{c:>9}" for c in columns))
    for name in sorted(APPROXIMATIONS):
        gaps, missed, optimal = [], 0, 0
        started = time.perf_counter()
        for spec, exact in zip(specs, exact_values, strict=True):
            found = search(
                PlanningModel(spec), SearchOptions(approximations=frozenset({name}))
            ).candidates
            if exact is None:
                continue
            if not found:
                missed += 1
                continue
            gap = found[0].value / exact - 1
            gaps.append(gap)
            optimal += gap <= 1e-9
        seconds = time.perf_counter() - started
        worst = max(gaps, default=0.0)
        mean = sum(gaps) / len(gaps) if gaps else 0.0
        print(
            f"{name:18} {optimal:>4}/{feasible:<4} {100 * worst:>9.2f}% {100 * mean:>8.2f}%"
            f" {missed:>7} {seconds:>7.2f}"
        )


if __name__ == "__main__":
    main()
