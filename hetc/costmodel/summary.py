"""How a simulation is shown: a text report for people and a JSON document for tools."""

from __future__ import annotations

from typing import Any

from hetc.costmodel.simulate import Simulation

GIB = 2.0**30


def simulation_json(sim: Simulation) -> dict[str, Any]:
    """Every number of the simulation in SI units, for `--json`."""
    return {
        "iteration_time": sim.iteration_time,
        "closed_form_iteration_time": sim.closed_form_time,
        "samples_per_second": sim.samples_per_second,
        "tokens_per_second": sim.tokens_per_second,
        "achieved_flops": sim.achieved_flops,
        "mfu": sim.mfu,
        "cost_per_iteration": {
            "compute": sim.cost.compute,
            "egress": sim.cost.egress,
            "total": sim.cost.total,
        },
        "cost_per_million_tokens": sim.cost_per_million_tokens,
        "budget": None if sim.budget is None else {"seconds": sim.budget[0], "usd": sim.budget[1]},
        "fits": sim.fits,
        "traffic": [{"from": a, "to": b, "bytes": n} for (a, b), n in sorted(sim.traffic.items())],
        "ranks": [
            {
                "rank": r.key,
                "device": r.device,
                "stage": r.stage,
                "replica": r.replica,
                "tp_rank": r.tp_rank,
                "blocks": list(r.blocks),
                "capacity": r.capacity,
                "memory": {**r.memory.terms(), "total": r.memory.total, "phase": r.memory.phase},
                "busy_fraction": r.busy_fraction,
                "problem": r.problem,
            }
            for r in sim.ranks
        ],
    }


def simulation_text(sim: Simulation) -> str:
    """A report: headline numbers, then one line per rank (memory breakdown, busy share)."""
    lines = [
        f"iteration time     {sim.iteration_time:.3f} s"
        f"   (closed form {sim.closed_form_time:.3f} s)",
        f"throughput         {sim.samples_per_second:.2f} samples/s,"
        f" {sim.tokens_per_second:,.0f} tokens/s",
        f"compute            {sim.achieved_flops / 1e12:.1f} TFLOP/s achieved,"
        f" MFU {100 * sim.mfu:.1f}%",
        f"cost per iteration {sim.cost.total:.4f} USD (compute {sim.cost.compute:.4f},"
        f" egress {sim.cost.egress:.4f}); {sim.cost_per_million_tokens:.4f} USD per 1M tokens",
    ]
    if sim.budget is not None:
        seconds, usd = sim.budget
        lines.append(f"token budget       {seconds / 86400:.1f} days, {usd:,.0f} USD")
    lines += [
        "",
        f"{'rank':<28} {'device':<10} {'stage':>5} {'blocks':>9} {'weights':>8}"
        f" {'grads':>7} {'optim':>7} {'activ':>7} {'bucket':>7} {'other':>7}"
        f" {'total':>7} {'of':>6} {'busy':>5}  (GiB)",
    ]
    for r in sim.ranks:
        m = r.memory
        lines.append(
            f"{r.key:<28} {r.device:<10} {r.stage:>5} {f'{r.blocks[0]}-{r.blocks[1]}':>9}"
            f" {m.weights / GIB:>8.2f} {m.gradients / GIB:>7.2f} {m.optimizer / GIB:>7.2f}"
            f" {m.activations / GIB:>7.2f} {m.buckets / GIB:>7.2f} {m.overhead / GIB:>7.2f}"
            f" {m.total / GIB:>7.2f} {r.capacity / GIB:>6.1f} {100 * r.busy_fraction:>4.0f}%"
            f" {100 * (1 - r.busy_fraction):>5.0f}%"
        )
    problems = [r.problem for r in sim.ranks if r.problem]
    if problems:
        lines += ["", "does not fit:", *(f"  {p}" for p in problems)]
    return "\n".join(lines)
