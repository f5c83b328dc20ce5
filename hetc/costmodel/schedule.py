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

from dataclasses import dataclass, replace

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
    """`F3` / `B3` (microbatch 3), `sync`, `update`, or `steady` (see `work`)."""
    work: float | None = None
    """Busy seconds inside [start, end] where that is not all of it: set on a `steady` span,
    the microbatches the simulator did not step through one by one (`simulate_1f1b`)."""

    @property
    def busy(self) -> float:
        """Seconds of work in the interval."""
        return self.end - self.start if self.work is None else self.work


@dataclass(frozen=True, kw_only=True, slots=True)
class Timeline:
    """What the event simulator saw: per (pipeline, stage) busy intervals and the total."""

    iteration_time: float
    busy: dict[tuple[int, int], tuple[Interval, ...]]

    def bubble_fraction(self, pipeline: int, stage: int) -> float:
        """Share of the iteration this rank spent idle."""
        work = sum(i.busy for i in self.busy[pipeline, stage])
        return 1.0 - work / self.iteration_time if self.iteration_time else 0.0


def simulate_1f1b(
    pipelines: list[PipelineTimes], sync: list[float], update: list[float]
) -> Timeline:
    """Event-level 1F1B: ranks run their fixed order; an op starts when its rank is free and
    its input has arrived; a transfer starts when produced and its link direction is free.
    Pipelines run independently until the synchronisation, so pipelines of equal times
    (most of a plan of thousands of replicas) are simulated once."""
    busy: dict[tuple[int, int], tuple[Interval, ...]] = {}
    stage_done = [0.0] * len(sync)
    simulated: dict[PipelineTimes, dict[int, tuple[Interval, ...]]] = {}
    for p, times in enumerate(pipelines):
        found = simulated.get(times)
        if found is None:
            found = simulated[times] = _simulate_pipeline(times)
        for stage, intervals in found.items():
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


HORIZON_PER_STAGE = 4
"""A pipeline of P stages is stepped through at most 4P + HORIZON_EXTRA microbatches at a time
while its steady state is looked for (`_simulate_pipeline`)."""
HORIZON_EXTRA = 16
MAX_CYCLE = 8
"""Longest cycle looked for: a communication-bound pipeline often alternates two slice
lengths (a cycle of 2 slices) rather than repeating one."""
PERIOD_TOLERANCE = 1e-9
"""Relative slack of the periodicity test: two slices count as one period apart when every
time differs from the period by at most this share of it (floating-point rounding)."""


def _simulate_pipeline(times: PipelineTimes) -> dict[int, tuple[Interval, ...]]:
    """Every stage's intervals, in O(stages^2) work whatever the microbatch count, where the
    schedule becomes periodic; by stepping through every microbatch where it does not.

    Why that is exact. Call slice s of stage i (w_i = P - 1 - i warm-up forwards) its pair
    (F of microbatch s + w_i, B of microbatch s), and x(s) the end times of every stage's
    slice-s operations with the arrival times of the transfers they start. For 1 <= s <= m - P
    each of them waits only for operations of slices s and s - 1 (F_i(s) for stage i - 1's
    forward of slice s - 1 and its own backward of slice s - 1; B_i(s) for its forward and
    stage i + 1's backward of slice s; each transfer for the one before on its link), by the
    same max-plus formula for every s: x(s) = f(x(s - 1)), f shifting with its input
    (f(x + c) = f(x) + c). So once x(s0 + 1) = x(s0) + lambda for some s0, every later slice is
    lambda after the one before; likewise x(s0 + c) = x(s0) + lambda with a cycle of c slices
    (f applied c times shifts too). The slices up to m - P do not depend on m, and what
    follows slice m - P (the last forwards and the drain) is one fixed shifting function of
    x(m - P). Hence a run of h < m microbatches, m - h a multiple of c, that finds
    s0 + c <= h - P gives the m-microbatch run exactly: its operations up to slice s0, then
    m - h slices of lambda / c each (one `steady` interval per stage, with their work), then
    the h-run's operations from slice s0 + 1 on, delayed by (m - h) lambda / c and renumbered
    by m - h. With the test's tolerance tol (a PERIOD_TOLERANCE share of lambda), f being
    non-expansive in the max norm bounds the error by (m - h) tol / c, a 1e-9 share of the
    steady span. Where no cycle shows within the horizon, the horizon doubles, up to stepping
    through all m. tests/test_bounded_work.py compares it with stepping through every
    microbatch on random pipelines."""
    stages, m = times.stages, times.microbatches
    horizon = HORIZON_PER_STAGE * stages + HORIZON_EXTRA
    while 2 * horizon < m:
        found = _periodic_from(*_step_through(replace(times, microbatches=horizon))[:2], times)
        if found is not None:
            s0, cycle, period = found
            short = replace(times, microbatches=horizon + (m - horizon) % cycle)
            intervals = _step_through(short)[2]
            return _extended(short, intervals, s0, period / cycle, m - short.microbatches)
        horizon *= 2
    return {i: tuple(v) for i, v in _step_through(times)[2].items()}


_Done = dict[tuple[str, int, int], float]
_Arrivals = dict[tuple[str, int, int], float]


def _periodic_from(
    done: _Done, arrivals: _Arrivals, times: PipelineTimes
) -> tuple[int, int, float] | None:
    """The first slice s0 and the shortest cycle c <= MAX_CYCLE with x(s0 + c) = x(s0) +
    lambda, and lambda (`_simulate_pipeline`), within the run that made `done`."""
    stages = times.stages
    last = len(done) // (2 * stages) - stages
    states = [_state(stages, s, done, arrivals) for s in range(1, last + 1)]
    for index, now in enumerate(states):
        for cycle in range(1, min(MAX_CYCLE, len(states) - 1 - index) + 1):
            later = states[index + cycle]
            period = later[0] - now[0]
            tolerance = PERIOD_TOLERANCE * abs(period)
            if all(abs(b - a - period) <= tolerance for a, b in zip(now, later, strict=True)):
                return index + 1, cycle, period
    return None


def _state(stages: int, s: int, done: _Done, arrivals: _Arrivals) -> list[float]:
    """x(s): every stage's slice-s forward and backward ends, and the arrivals they start."""
    state = []
    for i in range(stages):
        forward = s + stages - 1 - i
        state += [done["F", i, forward], done["B", i, s]]
        if i + 1 < stages:
            state.append(arrivals["down", i, forward])
        if i > 0:
            state.append(arrivals["up", i - 1, s])
    return state


def _extended(
    times: PipelineTimes, intervals: dict[int, list[Interval]], s0: int, slope: float, extra: int
) -> dict[int, tuple[Interval, ...]]:
    """The h-run's intervals (h = times.microbatches) grown by `extra` slices of `slope`
    seconds each after slice s0 (see `_simulate_pipeline`)."""
    stages = times.stages
    out: dict[int, tuple[Interval, ...]] = {}
    for i, own in intervals.items():
        cut = (stages - 1 - i) + 2 * (s0 + 1)
        shift = extra * slope
        steady = Interval(
            own[cut].start,
            own[cut].start + shift,
            "steady",
            work=extra * (times.forward[i] + times.backward[i]),
        )
        later = tuple(
            Interval(v.start + shift, v.end + shift, f"{v.what[0]}{int(v.what[1:]) + extra}")
            for v in own[cut:]
        )
        out[i] = (*own[:cut], steady, *later)
    return out


def _step_through(times: PipelineTimes) -> tuple[_Done, _Arrivals, dict[int, list[Interval]]]:
    """The event simulation of every operation of one pipeline, one at a time."""
    stages, m = times.stages, times.microbatches
    orders = [one_f_one_b_order(i, stages, m) for i in range(stages)]
    position = [0] * stages
    rank_free = [0.0] * stages
    # Arrival times of inputs: activations at stage i for microbatch j, gradients likewise.
    activation_at: dict[tuple[int, int], float] = {(0, j): 0.0 for j in range(m)}
    gradient_at: dict[tuple[int, int], float] = {}
    link_free: dict[tuple[int, str], float] = {}
    done: _Done = {}
    arrivals: _Arrivals = {}
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
                activation_at[i + 1, j] = arrivals["down", i, j] = _transfer(
                    link_free, (i, "down"), end, times.send_activation[i]
                )
            elif kind == "B" and i > 0:
                gradient_at[i - 1, j] = arrivals["up", i - 1, j] = _transfer(
                    link_free, (i - 1, "up"), end, times.send_gradient[i - 1]
                )
        assert progressed, "1F1B dependencies cannot deadlock"
    return done, arrivals, intervals


def _transfer(
    link_free: dict[tuple[int, str], float], link: tuple[int, str], produced: float, duration: float
) -> float:
    """One transfer at a time per link direction, in the order they are produced."""
    start = max(produced, link_free.get(link, 0.0))
    link_free[link] = start + duration
    return start + duration
