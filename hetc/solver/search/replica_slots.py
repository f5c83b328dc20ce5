"""A joint floor on the fill and the straggler from how many replicas each speed can supply
(`ReplicaSlots.floor`).

The per-layer fill bound takes every layer on the fastest kind, and device-time
conservation spreads the work over every device the pools hold at the best TP's efficiency.
Neither sees that a stage runs at the pace of its slowest replica and needs D of them: with
31 H100 beside 3,000 A100, no stage of 256 pipelines runs at H100 speed, and 2,304 replicas
cannot use 11,000 devices without the TP degrees that spend them at a worse efficiency.
Counting replicas by speed sees both.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence

from hetc.costmodel.planning import PlanningModel

SMALL_LAYER = 1 / 2
"""Layers whose least time is under this share of the median layer's are left out of the
kinds' speeds (`ReplicaSlots.speeds`) and counted at their least time."""

ROUNDING = 1 - 1e-12
"""The floor is scaled by this: it divides and sums layer times in another order than the
planning model, and a bound must not exceed a candidate's time by a rounding error."""


Steps = tuple[list[float], list[int]]
"""Speeds v descending and counts n ascending: at most n replicas have a speed of at least v
(`ReplicaSlots.speeds`)."""

OptionSteps = tuple[list[float], list[int], list[int]]
"""Speeds v descending, and the most replicas one `kind-profiles` option of speed at least v
holds and the most that a second one holds (`ReplicaSlots.speeds`)."""

Table = tuple[float, float, Steps, OptionSteps]
"""(W_E, W_B, steps over every pool, steps of the `kind-profiles` options)."""


class ReplicaSlots:
    """The floors `floor` and `profile_floor` and their per-microbatch speed tables,
    cached."""

    def __init__(self, model: PlanningModel, capacity: Sequence[int], total_devices: int) -> None:
        self.model = model
        self.capacity = capacity
        """Devices each pool may rent (`Incumbent.capacity`)."""
        self.total_devices = total_devices
        """Devices the search may use in all (max_gpus, or every pool's)."""
        self._tables: dict[int, list[Table]] = {}

    def speeds(self, mbs: int) -> list[Table]:
        """Per choice of core layers B, (W_E, W_B, pooled, single): the model's time with
        each layer on its fastest kind, split into the layers outside B (E) and those in B;
        steps (v, n), v descending, n ascending: at most n replicas of all the search may
        rent have a speed of at least v (pooled); and per speed v the most replicas one
        `kind-profiles` option of speed at least v holds, and a second one (single:
        `OptionSteps`).

        A kind's speed v_k = max over the layers of B of (the layer's fastest time) / (its
        time on k), so any run of layers R takes at least W_B(R) / v_k + W_E(R) on k. Two
        choices of B, each sound, since the floor takes the larger: the layers of at least
        `SMALL_LAYER` of the median layer's least time (a lookup's ratio would make a slow
        device look fast), and the layers timed like the median one on every kind, to
        rounding (the typical block: a head that TP splits well then does not make a kind
        look fast on the blocks). A replica of speed at least v on pool p is a kind of that
        pool with v_k >= v, so it takes at least tau(p, v) devices, the least TP of such
        kinds there: at most sum_p floor(devices_p / tau(p, v)) replicas, and at most the
        devices the search may use over the least such TP. The options are those of
        `kind-profiles`: each pool's and, where a region has several pools of one device and
        TP, the set of them (`Options.stage_options` offers a subset); each holds its pools'
        devices, within what the search may use, over its TP."""
        tables = self._tables.get(mbs)
        if tables is None:
            model = self.model
            rows = [model.layer_compute(k.device, k.tp, mbs) for k in model.kinds]
            least = [min(column) for column in zip(*rows, strict=True)] if rows else []
            tables = []
            if least:
                median = sorted(range(len(least)), key=least.__getitem__)[len(least) // 2]
                cut = least[median] * SMALL_LAYER
                big = [i for i, t in enumerate(least) if t >= cut and t > 0]
                typical = [
                    i
                    for i in big
                    if all(abs(row[i] - row[median]) <= 1e-9 * row[median] for row in rows)
                ]
                for core in (big, typical) if typical != big else (big,):
                    tables.append(self._table(rows, least, core))
            self._tables[mbs] = tables
        return tables

    def _table(self, rows: list[tuple[float, ...]], least: list[float], core: list[int]) -> Table:
        """`speeds`' entry for the core layers `core`."""
        model = self.model
        # a kind's times, so its speed, depend on its device and TP alone: one per class
        by_class: dict[tuple[str, int], float] = {}
        speed = []
        for k, row in zip(model.kinds, rows, strict=True):
            v = by_class.get((k.device, k.tp))
            if v is None:
                v = by_class[k.device, k.tp] = max((least[i] / row[i] for i in core), default=1.0)
            speed.append(v)
        options: dict[tuple[str, int, str], tuple[float, set[int]]] = {}
        for k, v in zip(model.kinds, speed, strict=True):
            key = (k.device, k.tp, model.pools[k.pool].zone.region)
            options.setdefault(key, (v, set()))[1].add(k.pool)
        held_one = [
            (v, min(sum(self.capacity[p] for p in pools), self.total_devices) // tp)
            for (_, tp, _), (v, pools) in options.items()
        ]
        held_one += [
            (v, min(self.capacity[p], self.total_devices) // tp)
            for (_, tp, _), (v, pools) in options.items()
            if len(pools) > 1
            for p in pools
        ]
        pooled: Steps = ([], [])
        for v in sorted(set(speed), reverse=True):
            tau: dict[int, int] = {}
            for k, s in zip(model.kinds, speed, strict=True):
                if s >= v and (k.pool not in tau or k.tp < tau[k.pool]):
                    tau[k.pool] = k.tp
            held = sum(self.capacity[p] // t for p, t in tau.items())
            pooled[0].append(v)
            pooled[1].append(min(held, self.total_devices // min(tau.values())))
        work = sum((least[i] for i in core), 0.0)
        return (sum(least, 0.0) - work, work, pooled, _option_steps(held_one))

    def floor(
        self, mbs: int, stages: int, dp: int, m1: int, send: float, low: float = 0.0
    ) -> float:
        """F + m1 S >= this for every candidate of (m, P, D), m1 = ceil(T / D) - 1, `send`
        the least send between two pools (0 for one stage), `low` a lower bound on S - s
        (the straggler floor of `Bounds.period_terms` less the send: a stage of ceil(L / P)
        blocks, say); infinite where the pools cannot supply P x D replicas.

        A stage's time t_i is its slowest kind's, so t_i >= W_B(R_i) / v_i + W_E(R_i) with
        v_i the least speed of its replicas. Ranked fastest first, the j fastest stages
        hold j D replicas all at least as fast as the j-th, so v_(j) <= u(j D), the most
        speed n replicas may all have (`speeds`). With P > 1 each stage sends at least
        once, so t_i <= S - s, and the fill sends 2 (P - 1) times. With t'_i = t_i -
        W_E(R_i): sum t_i = W_E + sum t'_i, t'_i <= S' = S - s and sum t'_i u(i D) >= W_B,
        so F + m1 S >= 2 (P - 1) s + m1 s + W_E + min over S' >= low of (sum t'_i + m1 S')
        (`least_paced`)."""
        best = 0.0
        need = stages * dp
        for small, work, (speeds, counts), _ in self.speeds(mbs):
            if counts[-1] < need:
                return math.inf
            groups: list[tuple[int, float]] = []
            placed = 0
            at = bisect_left(counts, dp)
            while placed < stages:
                upto = min(stages, counts[at] // dp)
                groups.append((upto - placed, speeds[at]))
                placed = upto
                at += 1
            least = least_paced(work, m1, low, groups)
            if small + least > best:
                best = small + least
        sends = (2 * (stages - 1) + m1) * send if stages > 1 else 0.0
        return (best + sends) * ROUNDING

    def profile_floor(
        self, mbs: int, stages: int, dp: int, m1: int, send: float, low: float = 0.0
    ) -> float:
        """`floor` for the candidates of `kind-profiles` (module `profiles`): a profile runs
        n stages on one option and P - n on another, each option one device and TP in one
        pool or one region, so its stages run at two speeds at most, each option's D n or
        D (P - n) replicas within what it holds: j stages at most at the speed of the
        fastest option holding j D replicas and P - j at that of the fastest holding
        (P - j) D, two options unless one holds all P (`_two_options`). The least over j >=
        P / 2 (j and P - j give the same two speeds). Infinite where no pair of options
        holds P stages. On the first choice of core layers only (`speeds`): the driver
        computes this for every shape it lists under the incumbent, so it must be cheap
        (what the second choice would add: docs/planner.md, Measurements)."""
        tables = self.speeds(mbs)
        if not tables:
            return 0.0
        small, work, _, single = tables[0]
        least = _two_options(work, m1, low, single, stages, dp)
        if least == math.inf:
            return math.inf
        sends = (2 * (stages - 1) + m1) * send if stages > 1 else 0.0
        return (small + least + sends) * ROUNDING


def _option_steps(options: list[tuple[float, int]]) -> OptionSteps:
    """`OptionSteps` of options given as (speed, replicas held)."""
    steps: OptionSteps = ([], [], [])
    for v in sorted({u for u, _ in options}, reverse=True):
        held = sorted((n for u, n in options if u >= v), reverse=True)
        steps[0].append(v)
        steps[1].append(held[0])
        steps[2].append(held[1] if len(held) > 1 else 0)
    return steps


def _two_options(
    work: float, m1: int, low: float, steps: OptionSteps, stages: int, dp: int
) -> float:
    """min over j = P down to P / 2 of `least_paced` for j stages on one option of
    `steps` and P - j on another (`ReplicaSlots.profile_floor`): with g1(n) the speed of the
    fastest option holding n replicas and g2(n) that of the fastest second one, the j run
    at most at a = g1(j D), the P - j at most at b = g1((P - j) D), and the slower of the
    two options, both holding (P - j) D, at most at c = g2((P - j) D); where a > c, one of
    the two runs at most at c. One option alone holds the P stages at g1(P D). Infinite
    where no pair holds P stages, as where no option holds half of them."""
    speeds, first, second = steps
    last = len(first)
    least = math.inf
    if first[-1] < (stages - stages // 2) * dp:
        return least
    for j in range(stages, (stages - 1) // 2, -1):
        at = bisect_left(first, j * dp)
        if at == last:
            continue
        rest = stages - j
        a = speeds[at]
        if not rest:
            value = least_paced(work, m1, low, [(j, a)])
        else:
            other = bisect_left(first, rest * dp)
            both = bisect_left(second, rest * dp)
            if both == last:
                break
            b, c = speeds[other], speeds[both]
            if a <= c:
                value = least_paced(work, m1, low, [(rest, b), (j, a)])
            else:
                value = min(
                    least_paced(work, m1, low, [(rest, b), (j, c)]),
                    least_paced(work, m1, low, [(j, a), (rest, c)]),
                )
        if value < least:
            least = value
    return least


def least_paced(work: float, m1: int, low: float, groups: list[tuple[int, float]]) -> float:
    """min of sum t_i + m1 S' over S' >= `low` and t_i in [0, S'] with sum t_i v_i >= `work`,
    the stages' speeds v_i given as `groups` (count, speed), fastest first.

    For a given S' the least sum t_i runs the fastest stages for S' each and the next for
    what is left, so the least of sum t_i + m1 S' is convex and piecewise linear in S',
    with its breaks where k stages run S' = W / V_k exactly (V_k the first k speeds summed;
    there it is (k + m1) W / V_k). Over S' >= low the least is at such a break or at low.
    Inside a group of speed v, (k + m1) W / V_k is monotone in k: from k to k + 1 it rises
    where V_k > (k + m1) v, and where it rises inside a group it rose already into the
    group's first break, from the previous group's last. So of the breaks at or above low
    only each group's last counts. At low, the k stages with V_k <=
    W / low run low each and the next runs what is left: k low + (W - low V_k) / v_(k+1)
    + m1 low."""
    best = math.inf
    total = 0.0
    done = 0
    limit = work / low if low > 0 else math.inf
    for count, speed in groups:
        if count <= 0:
            continue
        room = limit - total
        fit = count if room >= count * speed else int(room // speed)
        if fit >= 1:
            best = min(best, (done + fit + m1) * work / (total + fit * speed))
        if fit < count:
            full = total + fit * speed
            at_low = (done + fit) * low + (work - low * full) / speed + m1 * low
            return min(best, at_low)
        total += count * speed
        done += count
    return best
