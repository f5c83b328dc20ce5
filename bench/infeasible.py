"""Time to the verdict on infeasible specs: the ones the tests use and generated ones.

The verdict is `planner.plan_spec` with its default options returning no plan (what `hetc
plan` does before its diagnosis). The specs: the infeasible specs of
tests/test_solver_feasibility.py and tests/test_solver_diagnosis.py (`cases`), the
diagnosis family's infeasible specs (`diagnosis.family`), and specs of the planner family
(`spec_family.family_spec`) that a necessary condition refuses. Prints one row per spec, the
worst, and whether every verdict took at most 2 s. Wall times on a loaded 2-core VM are
noisy; nothing is asserted about them.

Usage: python bench/infeasible.py [--generated N] [--seed S]
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from diagnosis import family
from spec_family import family_spec

from hetc.costmodel.planning import PlanningModel
from hetc.schema import check_text
from hetc.schema.spec import Spec
from hetc.solver.feasibility import necessary_conditions
from hetc.solver.planner import plan_spec

TARGET_SECONDS = 2.0

SPEC = """\
version: 1
name: {name}
model: {model}
training: {{global_batch_size: {batch}, seq_len: 512, precision: fp16, zero_stage: 1}}
objective: max_throughput
constraints: {{{constraints}}}
zones:
  - name: z1
    region: r1
    pools:
      - {{device: {device}, quota: {quota}, gpus_per_node: {gpn}}}
"""

HUGE = (
    "{architecture: {layers: 2, hidden: 65536, heads: 512, ffn: 262144, vocab: 1024,"
    " max_positions: 512}}"
)

CASES = {
    "max_gpus below the node": ("{preset: OPT-350M}", 16, "max_gpus: 2", "A100-40GB", 8, 4),
    "a layer fits nowhere": (HUGE, 16, "", "A100-40GB", 8, 4),
    "GPT-3-1.3B on one T4": ("{preset: GPT-3-1.3B}", 16, "", "T4", 1, 1),
    "budget 1e-9": ("{preset: OPT-350M}", 16, "max_cost_per_iteration: 1e-9", "A100-40GB", 8, 4),
    "floor 1000": ("{preset: OPT-350M}", 16, "min_throughput: 1000", "A100-40GB", 8, 4),
    "max_gpus 1 with floor 100": (
        "{preset: OPT-350M}",
        16,
        "max_gpus: 1, min_throughput: 100",
        "A100-40GB",
        8,
        4,
    ),
    "Llama-13B, max_gpus 1": ("{preset: Llama-13B}", 64, "max_gpus: 1", "A100-80GB", 8, 1),
    "Llama-65B on 8 A100-80GB": ("{preset: Llama-65B}", 64, "", "A100-80GB", 8, 8),
    "Llama-65B on 16 A100-80GB": ("{preset: Llama-65B}", 64, "", "A100-80GB", 16, 8),
}


def cases() -> dict[str, Spec]:
    """The infeasible specs of the tests, by name."""
    out = {}
    for name, (model, batch, constraints, device, quota, gpn) in CASES.items():
        text = SPEC.format(
            name="case",
            model=model,
            batch=batch,
            constraints=constraints,
            device=device,
            quota=quota,
            gpn=gpn,
        )
        spec = check_text(text, "case.yaml").spec
        if spec is None:
            raise ValueError(f"{name}: not a valid spec")
        out[name] = spec
    return out


def refused_family(count: int, rng: random.Random) -> list[Spec]:
    """`count` planner-family specs a necessary condition refuses."""
    out: list[Spec] = []
    while len(out) < count:
        spec = family_spec(rng)
        if necessary_conditions(PlanningModel(spec)) is not None:
            out.append(spec)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generated", type=int, default=20)
    parser.add_argument("--seed", type=int, default=29)
    args = parser.parse_args(argv)
    specs = list(cases().items())
    specs += [(f"diagnosis family {k}", s) for k, s in enumerate(family(args.generated, args.seed))]
    rng = random.Random(args.seed)
    refused = refused_family(args.generated, rng)
    specs += [(f"planner family {k}", s) for k, s in enumerate(refused)]
    worst = (0.0, "")
    for name, spec in specs:
        started = time.perf_counter()
        result = plan_spec(spec)
        seconds = time.perf_counter() - started
        if result.proposals:
            print(f"{name}: has a plan (not an infeasible spec)")
            continue
        how = (
            f"before search ({result.infeasible.binding})"
            if result.infeasible is not None
            else f"by search ({result.search.evaluations} evaluations)"
        )
        print(f"{seconds:7.3f} s  {name}: infeasible {how}", flush=True)
        worst = max(worst, (seconds, name))
    met = "met" if worst[0] <= TARGET_SECONDS else "not met"
    print(f"worst: {worst[0]:.3f} s ({worst[1]}); target <= {TARGET_SECONDS:g} s each: {met}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
