"""How a simulation is shown: a text report for people and a JSON document for tools."""

from __future__ import annotations

from typing import Any

from hetc.console import Column, render_table
from hetc.costmodel.simulate import Simulation
from hetc.units import fixed, format_duration, format_usd, index_ranges

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


def simulation_text(sim: Simulation, *, styled: bool = False) -> str:
    """A report: headline numbers with units, then the memory and busy share of each rank,
    identical ranks on one row ("ranks 0-127 (128 identical)", by their position in the
    plan's rank order, as `--json` lists them). `styled`: rich table (`hetc.console`)."""
    lines = [
        f"iteration time      {format_duration(sim.iteration_time)}"
        f" (closed form {format_duration(sim.closed_form_time)})",
        f"throughput          {fixed(sim.samples_per_second)} samples/s,"
        f" {sim.tokens_per_second:,.0f} tokens/s",
        f"compute             {fixed(sim.achieved_flops / 1e12)} TFLOP/s achieved,"
        f" MFU {100 * sim.mfu:.1f}%",
        f"cost per iteration  {format_usd(sim.cost.total)} (compute {format_usd(sim.cost.compute)},"
        f" egress {format_usd(sim.cost.egress)}); {format_usd(sim.cost_per_million_tokens)}"
        " per 1M tokens",
    ]
    if sim.budget is not None:
        seconds, usd = sim.budget
        lines.append(f"token budget        {format_duration(seconds)}, {format_usd(usd)}")
    lines += ["", "memory per rank in GiB; busy and idle: shares of the iteration"]
    groups: dict[tuple[str, ...], list[int]] = {}
    for index, r in enumerate(sim.ranks):
        m = r.memory
        cells = (
            r.device,
            str(r.stage),
            f"[{r.blocks[0]}, {r.blocks[1]})",
            *(
                f"{value / GIB:.2f}"
                for value in (
                    m.weights,
                    m.gradients,
                    m.optimizer,
                    m.activations,
                    m.buckets,
                    m.overhead,
                    m.total,
                )
            ),
            f"{r.capacity / GIB:.1f}",
            f"{100 * r.busy_fraction:.0f}%",
            f"{100 * (1 - r.busy_fraction):.0f}%",
        )
        groups.setdefault(cells, []).append(index)
    rows = [
        [_ranks_label(sim, members), *cells]
        for cells, members in sorted(groups.items(), key=lambda item: item[1][0])
    ]
    columns = [
        Column("rank"),
        Column("device"),
        Column("stage", "right"),
        Column("blocks"),
        *(
            Column(name, "right")
            for name in ("weights", "grads", "optim", "activ", "bucket", "other", "total")
        ),
        Column("capacity", "right"),
        Column("busy", "right"),
        Column("idle", "right"),
    ]
    lines.append(render_table(columns, rows, styled=styled))
    problems = [r.problem for r in sim.ranks if r.problem]
    if problems:
        lines += ["", "does not fit:", *(f"  {p}" for p in problems)]
    return "\n".join(lines)


def _ranks_label(sim: Simulation, members: list[int]) -> str:
    """A rank's key, or for several identical ranks their positions and count."""
    if len(members) == 1:
        return sim.ranks[members[0]].key
    return f"ranks {index_ranges(members)} ({len(members)} identical)"
