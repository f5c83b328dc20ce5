"""The `kind-profiles` approximation: its enumerator of profiles per shape.

How `kind-profiles` searches its own space without losing anything of it (tested against
the same space enumerated with no pruning, tests/test_solver_profiles.py): a profile is a
slow option on the first n stages and a fast one on the rest. With several device types,
the D of each (m, P) stop where no pair of options could hold its stages in memory within
the quotas, each stage whole on one option (`reach.profile_last`). Per shape, a Lagrangian
dual of the linear relaxation bounds sum_i 1 / speed_i over every quota-feasible profile
(`splits.most_capacity`), and with the least time of ceil(L / P) consecutive blocks (one
stage holds that many) bounds the straggler; for min_cost and budgets a cost floor follows
from the same terms. Per pair of options, the feasible n form an interval by Hall's
condition on the pools they draw from (`splits.run_lengths`), cut further in closed form
by the incumbent (`splits.within`); feasibility only shrinks as P grows, so a shape reads
the pairs listed by the most stages they may fit and stops at the first that cannot fit it
(for min_cost, listed by their least cost per pass, it stops at the first whose cost floor
exceeds the incumbent; the tables: `pairs`). Where P x D devices cannot stay inside two
zones, every profile has an option spanning zones, and its stages ring across them: the
shape's bound adds the least such ring an option that fits the shape pays
(`zones.zone_rings`). Per profile, the bound adds its own sends both ways, the ring of its
widest stage and of its first and last stage (`zones.end_ring`), its egress and its least
rental rate; profiles are then split and scored in order of that bound. The split first
tries the largest straggler that could still win (`splits._straggler_ceiling`): one greedy
fill rejects most profiles. Of a pair of options and its mirror image under a swap of two
identical zones, only the earlier is searched (`zones.zone_swaps`): the two score the same;
with `must_use`, only pairs drawing on every forced pool (`pairs.may_use_forced`). Before
the profiles, plans outside their space seed the incumbent: where a region holds one device
in three zones or more, each stage in its own zone (`stripes`), which two options per
pipeline cannot express.
"""

from __future__ import annotations

import math

from hetc.costmodel.planning import Shape
from hetc.solver.search.exact import _Partial
from hetc.solver.search.reach import Reach
from hetc.solver.search.replica_slots import ROUNDING, least_paced
from hetc.solver.search.windows import Option

CUT_SLACK = 1 + 1e-9
"""Relative slack on a bound that ends a sorted scan: the sort key and the bound are rounded
differently, so an exact tie must not end the scan one row early."""


class Profiles(Reach):
    """The `kind-profiles` enumerator."""

    def profiles(self, mbs: int, stages: int, dp: int) -> None:
        """`kind-profiles`: a profile is a slower option on the first n stages and a faster
        one on the rest (n = P: one option). The shape is dropped at once when its fill with
        the least sends and its least straggler (`least_straggler`), or its cost floor,
        cannot beat the incumbent. Each profile then gets a lower bound: the fill of every
        layer on the faster of its options plus its own sends both ways; (m - 1) times its
        straggler floor, the larger of (W + sends / speed) / sum_i(1 / speed_i) and the
        least ceil(L / P)-block window; the rings of its widest, first and last stage; for
        min_cost its least rental rate and egress. The feasible n of a pair come from the
        quotas and the incumbent in closed form. The profiles are then split
        (`min_max_split`), timed, and scored in order of that bound, stopping at the first
        that cannot beat the incumbent (module docstring)."""
        model = self.model
        m1 = -(-(model.batch // mbs) // dp) - 1
        fill_lb = self.layer_best(mbs, self.affordable_tp(stages, dp))[-1]
        throughput = self.objective == "max_throughput"
        bound = self.bound()
        hosts = self.hosts(mbs, dp)
        if not hosts:
            return
        sync_lb = self.sync_bound(stages, dp)
        if self._zone_split()[2]:
            sync_lb = max(sync_lb, self.zone_rings(stages, dp))
        largest = -(-model.blocks // stages)
        if throughput:
            sends = 2 * (stages - 1) * self.least_send(mbs)
            straggler = self.least_straggler(mbs, stages, dp)
            if fill_lb + sends + m1 * straggler + sync_lb > bound:
                return
        if not self.may_win(mbs, stages, dp):
            return
        costly = not throughput or self.budget is not None
        if costly:
            share = self._model_share(mbs)
            least_stage, least_pass = self._least_prices(mbs, dp)
            cheapest = _cost_floor(
                fill_lb + sync_lb, m1 * share, stages, dp, least_stage, least_pass
            )
            if (not throughput and cheapest > bound) or (
                self.budget is not None and cheapest > self.budget
            ):
                return
            # every pair's cost floor is at least this plus m1 D x its pass price
            least_fixed = (fill_lb + sync_lb) * stages * dp * least_stage
        queue: list[tuple[float, Option, Option, int, float, float]] = []
        limit = bound if throughput else math.inf
        if self.time_cap is not None:
            limit = min(limit, self.time_cap)
        for row in self.pairs(mbs, dp, stages == 1):
            pair, ring_s, ring_f, r_s, r_f, most = row
            if most < stages:
                if throughput:
                    break
                continue
            (
                slow,
                fast,
                share,
                sp_s,
                sp_f,
                s_ss,
                s_sf,
                s_ff,
                e_ss,
                e_sf,
                e_ff,
                per_stage,
                per_pass,
                pair_fill,
            ) = pair
            if not throughput and least_fixed + m1 * dp * share * per_pass > bound * CUT_SLACK:
                break
            fill = max(fill_lb, pair_fill)
            if costly:
                pair_cost = _cost_floor(fill + sync_lb, m1 * share, stages, dp, per_stage, per_pass)
                if (not throughput and pair_cost > bound) or (
                    self.budget is not None and pair_cost > self.budget
                ):
                    continue
            if limit < math.inf:
                # a profile runs a stage on each of its options (n is 1..P - 1 for two), and
                # such a stage rings at least one block on its option
                ring = ring_s if ring_s > ring_f else ring_f
                room = limit - fill - (ring if ring > sync_lb else sync_lb)
                passes = m1 * share
                # `within` at the most capacity any n has (n = 1, or P for one option),
                # with room for rounding: most pairs end here, before their run lengths
                if passes > 0 and passes * (1 - 2e-9) > room * (
                    stages / sp_f - 1 / sp_f + 1 / sp_s
                ):
                    continue
                lengths = self.within(
                    self.run_lengths(slow, fast, stages, dp), stages, room, passes, sp_s, sp_f
                )
            else:
                lengths = self.run_lengths(slow, fast, stages, dp)
            if not lengths:
                continue
            widest = self.block_ring(slow, dp, largest)
            window = self.window(slow, mbs, largest)
            if slow != fast:
                widest = min(widest, self.block_ring(fast, dp, largest))
                window = min(window, self.window(fast, mbs, largest))
            head = self.end_ring(slow, dp, stages, True)
            ring_slow = max(max(sync_lb, ring_s), max(widest, head))
            ring_fast = max(max(sync_lb, ring_f), widest)
            tail_slow = self.end_ring(slow, dp, stages, False)
            tail_fast = self.end_ring(fast, dp, stages, False)
            ring_alone = max(ring_slow, tail_slow)
            ring_both = max(max(ring_slow, ring_fast), tail_fast)
            for n in lengths:
                sends, pads = _sends_and_pads(n, stages, s_ss, s_sf, s_ff, sp_s, sp_f)
                if n == stages:
                    egress = (n - 1) * e_ss + n * r_s
                    ring = ring_alone
                else:
                    egress = (n - 1) * e_ss + e_sf + (stages - n - 1) * e_ff
                    egress += n * r_s + (stages - n) * r_f
                    ring = ring_both
                fixed = fill + 2 * sends + ring
                paced, floor = _paced(
                    fill + 2 * sends, share + pads, n, stages, sp_s, sp_f, m1, window
                )
                lb_t = ring + paced
                # the rate matters only to a cost or a budget
                rate = self.profile_rate(slow, n, fast, stages - n, dp) if costly else 0.0
                if self.violates(lb_t, rate, egress):
                    continue
                value = self.objective_bound(lb_t, rate) + (0.0 if throughput else egress)
                if value <= bound:
                    queue.append((value, slow, fast, n, fixed, floor))
        queue.sort()
        for value, slow, fast, n, fixed, floor in queue:
            if value > self.bound():
                break
            self.check_limits()
            sequence = (slow,) * n + (fast,) * (stages - n)
            rate = self.profile_rate(slow, n, fast, stages - n, dp) if costly else 0.0
            ceiling = self._straggler_ceiling(fixed, m1, rate)
            boundaries = self.min_max_split(sequence, mbs, dp, floor, ceiling)
            if boundaries is None:
                continue
            shape = Shape(microbatch=mbs, boundaries=boundaries, pipelines=dp)
            t = model.time_of_sets(shape, sequence)[3]
            egress = model.egress(shape, sequence) if costly else 0.0
            value = self.objective_bound(t, rate) + (0.0 if throughput else egress)
            if self.violates(t, rate, egress) or value > self.bound():
                continue
            self.leaf(_Partial(stages=stages, mbs=mbs, dp=dp, boundaries=boundaries, sets=sequence))

    def range_floor(self, mbs: int, stages: int, first: int, last: int) -> float:
        """A lower bound on the iteration time of every profile of (m, P, D) for each D in
        first..last that could beat the incumbent, infinite where none could: for
        max_throughput without a budget (`range_floors` says when the driver asks). Each
        term of `profiles`' per-profile bound taken where the range makes it least: m1 at
        D = last, the quotas, hosts, fill and sync at D = first (`range_sync`; no option's
        own ring, which need not grow with D on a measured link), the split's memory at
        D = last with its fewest microbatches in flight (a stage's peak memory never grows
        with D: `tables.peak_memory`). So the pairs and run lengths at `first` hold every
        profile of the range, and a greedy fill that fails under the largest straggler a
        profile could win with (`_straggler_ceiling`) fails at every D of the range. One
        pass over the pair table and about one fill per profile under the incumbent,
        where listing the range would solve each D's shape."""
        model = self.model
        m1 = -(-(model.batch // mbs) // last) - 1
        fill_lb = self.layer_best(mbs, self.affordable_tp(stages, first))[-1]
        sync_lb = self.range_sync(stages, first)
        bound = self.bound()
        limit = bound if self.time_cap is None else min(bound, self.time_cap)
        largest = -(-model.blocks // stages)
        queue: list[tuple[float, Option, Option, int, float, float]] = []
        for row in self.pairs(mbs, first, stages == 1):
            pair, most = row[0], row[5]
            if most < stages:
                break
            slow, fast, share, sp_s, sp_f, s_ss, s_sf, s_ff = pair[:8]
            fill = max(fill_lb, pair.fill)
            room = limit - fill - sync_lb
            passes = m1 * share
            if passes > 0 and passes * (1 - 2e-9) > room * (stages / sp_f - 1 / sp_f + 1 / sp_s):
                continue
            lengths = self.within(
                self.run_lengths(slow, fast, stages, first), stages, room, passes, sp_s, sp_f
            )
            if not lengths:
                continue
            window = self.window(slow, mbs, largest)
            if slow != fast:
                window = min(window, self.window(fast, mbs, largest))
            for n in lengths:
                sends, pads = _sends_and_pads(n, stages, s_ss, s_sf, s_ff, sp_s, sp_f)
                paced, floor = _paced(
                    fill + 2 * sends, share + pads, n, stages, sp_s, sp_f, m1, window
                )
                if sync_lb + paced <= limit:
                    queue.append((sync_lb + paced, slow, fast, n, fill + 2 * sends, floor))
        queue.sort()
        for value, slow, fast, n, fixed, floor in queue:
            self.check_limits()
            sequence = (slow,) * n + (fast,) * (stages - n)
            ceiling = self._straggler_ceiling(fixed + sync_lb, m1, 0.0)
            if self.min_max_split(sequence, mbs, last, floor, ceiling, probe=True) is not None:
                return value
        return math.inf


def _cost_floor(
    fixed: float, passes: float, stages: int, dp: int, per_stage: float, per_pass: float
) -> float:
    """Least USD per iteration of any profile over options whose least tp x price is
    `per_stage` and least tp x price x speed is `per_pass`: cost >= T x rate with
    T >= fixed + passes / capacity (passes = (m - 1) x W, `Pairs.work_share`) and
    rate >= D x sum_i tp_i x price_i (each stage's D replicas at their cheapest price), so
    cost >= fixed x P x D x per_stage + passes x D x per_pass (rate / capacity is a mediant
    of the stages' tp x price x speed)."""
    return fixed * stages * dp * per_stage + passes * dp * per_pass


def _sends_and_pads(
    n: int, stages: int, s_ss: float, s_sf: float, s_ff: float, sp_s: float, sp_f: float
) -> tuple[float, float]:
    """(the sends one way along a profile of n stages on the slow option and P - n on the
    fast one, those sends as work: each boundary's send over the whole-model time of each
    stage it touches), from the pair's sends per boundary (`Pair`)."""
    if n == stages:
        return (n - 1) * s_ss, 2 * (n - 1) * s_ss / sp_s
    sends = (n - 1) * s_ss + s_sf + (stages - n - 1) * s_ff
    pads = (
        2 * (n - 1) * s_ss / sp_s
        + s_sf * (1 / sp_s + 1 / sp_f)
        + 2 * (stages - n - 1) * s_ff / sp_f
    )
    return sends, pads


def _paced(
    fill: float,
    work: float,
    n: int,
    stages: int,
    sp_s: float,
    sp_f: float,
    m1: int,
    window: float,
) -> tuple[float, float]:
    """(F + m1 S at least, S at least) for a profile of n stages on the slow option and
    P - n on the fast one, whose whole-model times are sp_s and sp_f: `fill` bounds F (its
    layers on the faster option, its sends both ways), and a stage's time with its sends
    u_i over its option's whole-model time adds up to at least `work` (`Pairs.work_share`
    and the sends as work), so S >= work / capacity and S >= `window`; jointly, F = sum
    u_i with u_i <= S, so F + m1 S >= `least_paced` of the n and P - n stages at speeds
    1 / sp_s and 1 / sp_f."""
    capacity = n / sp_s + (stages - n) / sp_f
    floor = max(work / capacity, window)
    if n == stages:
        groups = [(n, 1 / sp_s)]
    elif sp_f <= sp_s:
        groups = [(stages - n, 1 / sp_f), (n, 1 / sp_s)]
    else:
        groups = [(n, 1 / sp_s), (stages - n, 1 / sp_f)]
    joint = least_paced(work, m1, window, groups) * ROUNDING
    return max(fill + m1 * floor, joint), floor
