"""Iteration time of a 1F1B pipeline schedule: a closed form, and an event-level simulator.

The two are written independently on purpose: the closed form is what the solver can afford to
evaluate millions of times; the simulator orders every forward, backward and transfer by the
rules alone (each rank's 1F1B order, data dependencies, one transfer at a time per link
direction) and yields a timeline with each rank's busy intervals and bubbles. Tests run both
on grids of plans: they agree where the closed form's assumptions hold (uniform stages, or
communication that never becomes the bottleneck) and differ, by pinned amounts, where not.

Inputs are plain numbers per pipeline and stage (seconds per microbatch), so this module knows
nothing of devices or links: the compute and network models produce the numbers.

Closed form (for pipeline p with P stages and m microbatches, stage i's forward f_i, backward
b_i, activation send a_i to stage i+1 and gradient send g_i back to stage i from i+1):

    E(p, 0) = sum_i (f_i + b_i) + sum_i (a_i + g_i) + (m - 1) * max_i (f_i + b_i + a_i + g_{i-1})
    E(p, i) = E(p, 0) - sum_{k < i} (b_k + g_k)          (stage i finishes its last backward
                                                          before the gradient chain reaches 0)
    T_iter  = max_i [ max_p E(p, i) + sync_i + update_i ]

Sailor's formulation counts the straggler period N_b times with N_b the number of microbatches;
here the first microbatch's full fill-and-drain is counted once and only the remaining m - 1
pay the slowest stage, which is exact for uniform stages (the classic (m + P - 1)(f + b)).
"""

from __future__ import annotations

from dataclasses import dataclass

from hetc.plan.topology import one_f_one_b_order


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineTimes:
    """Per-microbatch seconds of one pipeline; sends are indexed by the lower stage."""

    forward: tuple[float, ...]
    backward: tuple[float, ...]
    send_activation: tuple[float, ...]
    """a_i: stage i -> i+1, length P - 1."""
    send_gradient: tuple[float, ...]
    """g_i: stage i+1 -> i, length P - 1."""
    microbatches: int

    @property
    def stages(self) -> int:
        return len(self.forward)


def last_backward_end(times: PipelineTimes) -> list[float]:
    """Closed-form E(p, i) for every stage i of one pipeline (seconds from the start)."""
    stages = times.stages
    a = [*times.send_activation, 0.0]
    g = [*times.send_gradient, 0.0]
    period = max(
        times.forward[i] + times.backward[i] + a[i] + (g[i - 1] if i > 0 else 0.0)
        for i in range(stages)
    )
    first = sum(times.forward) + sum(times.backward) + sum(a) + sum(g)
    end_at_0 = first + (times.microbatches - 1) * period
    ends, chain = [], 0.0
    for i in range(stages):
        ends.append(end_at_0 - chain)
        chain += times.backward[i] + g[i]
    return ends


def closed_form_iteration(
    pipelines: list[PipelineTimes], sync: list[float], update: list[float]
) -> float:
    """T_iter: every stage waits for its slowest pipeline, then synchronises and updates."""
    ends = [last_backward_end(p) for p in pipelines]
    return max(max(e[i] for e in ends) + sync[i] + update[i] for i in range(len(sync)))


@dataclass(frozen=True, slots=True)
class Interval:
    start: float
    end: float
    what: str
    """`F3` / `B3` (microbatch 3), `sync`, `update`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Timeline:
    """What the event simulator saw: per (pipeline, stage) busy intervals and the total."""

    iteration_time: float
    busy: dict[tuple[int, int], tuple[Interval, ...]]

    def bubble_fraction(self, pipeline: int, stage: int) -> float:
        """Share of the iteration this rank spent idle."""
        work = sum(i.end - i.start for i in self.busy[pipeline, stage])
        return 1.0 - work / self.iteration_time if self.iteration_time else 0.0


def simulate_1f1b(
    pipelines: list[PipelineTimes], sync: list[float], update: list[float]
) -> Timeline:
    """Event-level 1F1B: ranks run their fixed order; an op starts when its rank is free and
    its input has arrived; a transfer starts when produced and its link direction is free."""
    busy: dict[tuple[int, int], tuple[Interval, ...]] = {}
    stage_done = [0.0] * len(sync)
    for p, times in enumerate(pipelines):
        for stage, intervals in _simulate_pipeline(times).items():
            busy[p, stage] = intervals
            stage_done[stage] = max(stage_done[stage], intervals[-1].end)
    total = 0.0
    for stage, done in enumerate(stage_done):
        end_sync = done + sync[stage]
        end = end_sync + update[stage]
        total = max(total, end)
        for p in range(len(pipelines)):
            busy[p, stage] = (
                *busy[p, stage],
                Interval(done, end_sync, "sync"),
                Interval(end_sync, end, "update"),
            )
    return Timeline(iteration_time=total, busy=busy)


def _simulate_pipeline(times: PipelineTimes) -> dict[int, tuple[Interval, ...]]:
    stages, m = times.stages, times.microbatches
    orders = [one_f_one_b_order(i, stages, m) for i in range(stages)]
    position = [0] * stages
    rank_free = [0.0] * stages
    # Arrival times of inputs: activations at stage i for microbatch j, gradients likewise.
    activation_at: dict[tuple[int, int], float] = {(0, j): 0.0 for j in range(m)}
    gradient_at: dict[tuple[int, int], float] = {}
    link_free: dict[tuple[int, str], float] = {}
    done: dict[tuple[str, int, int], float] = {}
    intervals: dict[int, list[Interval]] = {i: [] for i in range(stages)}
    remaining = stages * 2 * m
    while remaining:
        progressed = False
        for i in range(stages):
            if position[i] == len(orders[i]):
                continue
            kind, j = orders[i][position[i]]
            if kind == "F":
                ready = activation_at.get((i, j))
                length = times.forward[i]
            else:
                ready = done.get(("F", i, j)) if i == stages - 1 else gradient_at.get((i, j))
                length = times.backward[i]
            if ready is None:
                continue
            start = max(rank_free[i], ready)
            end = start + length
            rank_free[i] = end
            done[kind, i, j] = end
            intervals[i].append(Interval(start, end, f"{kind}{j}"))
            position[i] += 1
            remaining -= 1
            progressed = True
            if kind == "F" and i + 1 < stages:
                activation_at[i + 1, j] = _transfer(
                    link_free, (i, "down"), end, times.send_activation[i]
                )
            elif kind == "B" and i > 0:
                gradient_at[i - 1, j] = _transfer(
                    link_free, (i - 1, "up"), end, times.send_gradient[i - 1]
                )
        assert progressed, "1F1B dependencies cannot deadlock"
    return {i: tuple(v) for i, v in intervals.items()}


def _transfer(
    link_free: dict[tuple[int, str], float], link: tuple[int, str], produced: float, duration: float
) -> float:
    """One transfer at a time per link direction, in the order they are produced."""
    start = max(produced, link_free.get(link, 0.0))
    link_free[link] = start + duration
    return start + duration
