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
from hetc.solver.search.pairs import PairAt
from hetc.solver.search.reach import Reach
from hetc.solver.search.replica_slots import ROUNDING, least_paced
from hetc.solver.search.windows import Option
from hetc.solver.search.work import PROFILE_LENGTH, PROFILE_ROW, PROFILE_TRIED

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
        if not costly:
            least_fixed = 0.0
        queue = self._profile_queue(mbs, stages, dp, m1, fill_lb, sync_lb, True, least_fixed, dp)
        queue.sort()
        speed = self.option_speeds(mbs)[0]
        for value, slow, fast, n, fixed, floor, ring, work in queue:
            if value > self.bound():
                break
            self.tally[PROFILE_TRIED] += 1
            self.check_limits()
            sequence = (slow,) * n + (fast,) * (stages - n)
            rate = self.profile_rate(slow, n, fast, stages - n, dp) if costly else 0.0
            ceiling = self._straggler_ceiling(fixed, m1, rate)
            whole = self.whole_blocks(slow, fast, n, stages, mbs) if stages > 1 else 0.0
            if whole > floor:
                # the joint bound again, with its straggler at least `whole`
                floor = whole
                paced = ring + _joint(work, n, stages, speed[slow], speed[fast], m1, whole)
                paced = max(paced, fixed + m1 * whole)
                if floor > ceiling or self.objective_bound(paced, rate) > (
                    self.bound() * CUT_SLACK
                ):
                    continue
            boundaries = self.min_max_split(sequence, mbs, dp, floor, ceiling)
            if boundaries is None:
                continue
            shape = Shape(microbatch=mbs, boundaries=boundaries, pipelines=dp)
            straggler, fill = model.pace_of_sets(shape, sequence)
            # the split's own fill and straggler, with the profile's least sync
            paced = fill + m1 * straggler + ring
            if self.violates(paced, rate) or self.objective_bound(paced, rate) > (
                self.bound() * CUT_SLACK
            ):
                continue
            t = model.time_of_sets(shape, sequence)[3]
            egress = model.egress(shape, sequence) if costly else 0.0
            value = self.objective_bound(t, rate) + (0.0 if throughput else egress)
            if self.violates(t, rate, egress) or value > self.bound():
                continue
            self.leaf(_Partial(stages=stages, mbs=mbs, dp=dp, boundaries=boundaries, sets=sequence))

    def whole_blocks(self, slow: Option, fast: Option, n: int, stages: int, mbs: int) -> float:
        """The straggler of n stages on `slow` then P - n on `fast` (P > 1) is at least
        this: stages hold whole blocks, so with b the most blocks a fast stage holds, a slow
        one holds at least ceil((L - (P - n) b) / n) (and every stage one), and each
        stage's time is at least the least `window` of its blocks; the least over b of the
        larger of the two windows (one rises with b, the other falls, so a binary search
        finds it), plus the least send a stage makes."""
        blocks = self.model.blocks
        send = self.send(slow, slow, mbs)
        if n == stages:
            return self.window(slow, mbs, -(-blocks // stages)) + send
        send = min(send, self.send(slow, fast, mbs), self.send(fast, fast, mbs))
        rest = stages - n

        def slow_blocks(most: int) -> int:
            return max(1, -(-(blocks - rest * most) // n))

        low, high = 1, max(1, -(-blocks // rest))
        while low < high:
            middle = (low + high) // 2
            if self.window(fast, mbs, middle) >= self.window(slow, mbs, slow_blocks(middle)):
                high = middle
            else:
                low = middle + 1
        least = max(self.window(fast, mbs, low), self.window(slow, mbs, slow_blocks(low)))
        if low > 1:
            least = min(least, self.window(slow, mbs, slow_blocks(low - 1)))
        return least + send

    def _profile_queue(
        self,
        mbs: int,
        stages: int,
        dp: int,
        m1: int,
        fill_lb: float,
        sync_lb: float,
        rings: bool,
        least_fixed: float,
        memory_dp: int,
    ) -> list[tuple[float, Option, Option, int, float, float, float, float]]:
        """(bound, slow, fast, n, fixed, straggler floor, least sync, work) of each profile of
        (m, P) over the pairs and run lengths at `dp` whose bound does not exceed the
        incumbent, the time cap or the budget, unsorted: `fixed` is its fill, sends and
        least sync (its rings, `_pair_rings`), the bound `fixed` plus m1 S at least
        (`_joint`), for cost times the rate and plus the egress. The rings are the options'
        own at `dp` where `rings` is set, else `sync_lb` and the tied embedding's alone;
        `least_fixed` is what every pair's cost floor adds to m1 D x its pass price. A
        profile whose stages cannot hold the blocks in memory at `memory_dp` pipelines
        (stage j with min(P - j, m) microbatches in flight, `flight_blocks`; the last,
        `last_blocks`, with the head; one stage, the whole model) has no split and is left
        out."""
        model = self.model
        throughput = self.objective == "max_throughput"
        costly = not throughput or self.budget is not None
        bound = self.bound()
        largest = -(-model.blocks // stages)
        queue: list[tuple[float, Option, Option, int, float, float, float, float]] = []
        limit = bound if throughput else math.inf
        if self.time_cap is not None:
            limit = min(limit, self.time_cap)
        tally = self.tally
        for row in self.pairs(mbs, dp, stages == 1):
            tally[PROFILE_ROW] += 1
            pair, ring_s, ring_f, r_s, r_f, most = row
            if not rings:
                ring_s = ring_f = 0.0
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
                _,
                _,
                extra_slow,
                extra_fast,
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
            cap = limit
            if not throughput and per_stage > 0:
                # it rents P x D x TP devices at per_stage at least, so cost / that caps T
                cap = min(cap, bound * CUT_SLACK / (stages * dp * per_stage))
            if cap < math.inf:
                # a profile runs a stage on each of its options (n is 1..P - 1 for two), and
                # such a stage rings at least one block on its option
                ring = ring_s if ring_s > ring_f else ring_f
                room = cap - fill - (ring if ring > sync_lb else sync_lb)
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
            window = self.window(slow, mbs, largest)
            if slow != fast:
                window = min(window, self.window(fast, mbs, largest))
            if stages == 1 and not model.fits(slow[0], mbs, 0, model.blocks + 2, memory_dp, 1):
                continue
            ring_alone, ring_both = self._pair_rings(row, dp, stages, sync_lb, rings)
            if stages > 1:
                by_slow = self.flight_blocks(slow[0], mbs, memory_dp, stages)
                by_fast = self.flight_blocks(fast[0], mbs, memory_dp, stages)
                last = self.last_blocks(fast[0], mbs, memory_dp)
            for n in lengths:
                tally[PROFILE_LENGTH] += 1
                if stages > 1:
                    # stage j < P - 1 holds at most what it holds with P - j microbatches
                    # in flight; the last stage is the fast option's (slow is fast for n = P)
                    if n < stages:
                        held = by_slow[stages] - by_slow[stages - n]
                        held += by_fast[stages - n] - by_fast[1] + last
                    else:
                        held = by_slow[stages] - by_slow[1] + last
                    if held < model.blocks:
                        continue
                sends, pads = _sends_and_pads(n, stages, s_ss, s_sf, s_ff, sp_s, sp_f)
                if n == stages:
                    egress = (n - 1) * e_ss + n * r_s
                    ring = ring_alone
                else:
                    egress = (n - 1) * e_ss + e_sf + (stages - n - 1) * e_ff
                    egress += n * r_s + (stages - n) * r_f
                    ring = ring_both
                # every stage runs a block on its own option
                run = pair_fill + n * extra_slow + (stages - n) * extra_fast
                paid = (fill if fill > run else run) + 2 * sends
                work = share + pads
                floor = work / (n / sp_s + (stages - n) / sp_f)
                if floor < window:
                    floor = window
                lb_t = paid + ring + m1 * floor
                # the rate matters only to a cost or a budget
                rate = self.profile_rate(slow, n, fast, stages - n, dp) if costly else 0.0
                extra = 0.0 if throughput else egress
                if self.violates(lb_t, rate, egress) or (
                    self.objective_bound(lb_t, rate) + extra > bound
                ):
                    continue
                joint = ring + _joint(work, n, stages, sp_s, sp_f, m1, window)
                if joint > lb_t:
                    lb_t = joint
                    if self.violates(lb_t, rate, egress):
                        continue
                value = self.objective_bound(lb_t, rate) + extra
                if value <= bound:
                    queue.append((value, slow, fast, n, paid + ring, floor, ring, work))
        return queue

    def _pair_rings(
        self, row: PairAt, dp: int, stages: int, sync_lb: float, rings: bool
    ) -> tuple[float, float]:
        """(y + u with one option, with both) that the worst stage of a profile over the
        row's pair pays at least at D, none less than `sync_lb`: with P > 1 its first and
        last stage wait for the tied embedding's all-reduce between their options
        (`Pair.tied_alone`, `tied_both`) on top of their own ring; with `rings`, that ring
        is at least the end of the model each holds (`end_ring`), its widest stage rings
        ceil(L / P) blocks and each stage at least one block on its option
        (`block_ring`)."""
        pair = row.pair
        slow, fast = pair.slow, pair.fast
        tied_alone, tied_both = (pair.tied_alone, pair.tied_both) if stages > 1 else (0.0, 0.0)
        if not rings:
            return max(sync_lb, tied_alone), max(sync_lb, tied_both)
        largest = -(-self.model.blocks // stages)
        widest = self.block_ring(slow, dp, largest)
        if slow != fast:
            widest = min(widest, self.block_ring(fast, dp, largest))
        head = self.end_ring(slow, dp, stages, True)
        tail_slow = self.end_ring(slow, dp, stages, False)
        tail_fast = self.end_ring(fast, dp, stages, False)
        ring_slow = max(max(sync_lb, row.ring_slow), widest)
        alone = max(ring_slow, max(head, tail_slow) + tied_alone)
        both = max(max(ring_slow, row.ring_fast), max(head, tail_fast) + tied_both)
        return alone, both

    def range_floor(self, mbs: int, stages: int, first: int, last: int) -> float:
        """A lower bound on the objective of every profile of (m, P, D) for each D in
        first..last that could beat the incumbent (and meet the budget and the time cap),
        infinite where none could (the driver asks for ranges of equal m,
        `Search._same_passes`). Each term of `profiles`' per-profile bound taken where the
        range makes it least: m1 at D = last; the quotas, hosts, fill, sync, rental rate and
        ring egress at D = first (`range_sync`; the rate and the egress of a ring grow with
        D), with the options' own rings and the ring across zones there only
        on links whose ring time grows with D (`flat_links`: not so on a measured
        message-size curve); the split's memory at D = last with its fewest microbatches
        in flight (a stage's peak memory never grows with D: `tables.peak_memory`). So the
        pairs and run lengths at `first` hold every profile of the range, and a greedy
        fill that fails under the largest straggler a profile could win with
        (`_straggler_ceiling`) fails at every D of the range. One pass over the pair table
        and about one fill per profile under the incumbent, where listing the range would
        solve each D's shape. Where the rings grow with D, the ring across zones is
        monotone too: at a larger D every option spans at least as many zones' worth of
        devices, holds fewer stages and rings no faster (`zone_rings`)."""
        if not self.hosts(mbs, first):
            return math.inf
        m1 = -(-(self.model.batch // mbs) // last) - 1
        fill_lb = self.layer_best(mbs, self.affordable_tp(stages, first))[-1]
        sync_lb = self.range_sync(stages, first)
        rings = self.flat_links()
        if rings and self._zone_split()[2]:
            sync_lb = max(sync_lb, self.zone_rings(stages, first))
        costly = self.objective != "max_throughput" or self.budget is not None
        least_fixed = 0.0
        if costly:
            least_stage = self._least_prices(mbs, first)[0]
            least_fixed = (fill_lb + sync_lb) * stages * first * least_stage
        queue = self._profile_queue(
            mbs, stages, first, m1, fill_lb, sync_lb, rings, least_fixed, last
        )
        queue.sort()
        for value, slow, fast, n, fixed, floor, _, _ in queue:
            self.tally[PROFILE_TRIED] += 1
            self.check_limits()
            sequence = (slow,) * n + (fast,) * (stages - n)
            rate = self.profile_rate(slow, n, fast, stages - n, first) if costly else 0.0
            ceiling = self._straggler_ceiling(fixed, m1, rate)
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


def _joint(
    work: float, n: int, stages: int, sp_s: float, sp_f: float, m1: int, low: float
) -> float:
    """F + m1 S at least for a profile of n stages on the slow option and P - n on the fast
    one, whose whole-model times are sp_s and sp_f, S at least `low`: a stage's time with
    its sends u_i over its option's whole-model time adds up to at least `work`
    (`Pairs.work_share` and the sends as work) and F = sum u_i with u_i <= S, so F + m1 S
    >= `least_paced` of the n and P - n stages at speeds 1 / sp_s and 1 / sp_f. (Apart,
    F is at least the fill of its layers on the faster option and S at least work /
    capacity: the queue takes the larger of both bounds.)"""
    if n == stages:
        groups = [(n, 1 / sp_s)]
    elif sp_f <= sp_s:
        groups = [(stages - n, 1 / sp_f), (n, 1 / sp_s)]
    else:
        groups = [(n, 1 / sp_s), (stages - n, 1 / sp_f)]
    return least_paced(work, m1, low, groups) * ROUNDING
