"""One profile of `kind-profiles` (see `profiles`): the run lengths n its quotas allow, its
bounds (capacity dual, least straggler, cost floor terms, the largest straggler that could
still win) and its min-max split of the blocks into stages.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from itertools import combinations, pairwise

from hetc.costmodel.planning import PlanningModel
from hetc.solver.cover import last_true
from hetc.solver.search.incumbent import SearchOptions
from hetc.solver.search.pairs import Pairs
from hetc.solver.search.work import SPLIT_FILL

SPLIT_TOLERANCE = 1e-6
"""Relative width at which the straggler bisection of `min_max_split` stops: splits whose
stragglers differ by less are the same plan to within the model's accuracy."""


class Splits(Pairs):
    """Run lengths, bounds and the min-max split of one profile."""

    def __init__(self, model: PlanningModel, options: SearchOptions) -> None:
        super().__init__(model, options)
        self._memory_ends: dict[tuple[int, int, int, int, int], int] = {}
        self._last_blocks: dict[tuple[int, int, int], int] = {}
        self._flight_blocks: dict[tuple[int, int, int], list[int]] = {}
        self._duals: dict[int, list[tuple[float, float]]] = {}
        self._host_windows: dict[tuple[int, int, int], float] = {}
        self._pass_sum_lists: dict[tuple[int, int], tuple[list[float], list[float]]] = {}
        self._host_prices: dict[tuple[int, int], tuple[float, float]] = {}

    def least_straggler(self, mbs: int, stages: int, dp: int) -> float:
        """The least straggler period of any profile of shape (m, P, D): at least the time
        of its largest stage's ceil(L / P) blocks on the host fastest at them
        (`host_window`) and the model's work over the most capacity a profile may have
        (`most_capacity`); with P > 1 each stage also sends at least `least_send`, which
        its period adds to its compute."""
        floor = self.host_window(mbs, dp, -(-self.model.blocks // stages))
        most = self.most_capacity(mbs, stages, dp)
        if most > 0:
            floor = max(floor, self._model_share(mbs) / most)
        return floor + (self.least_send(mbs) if stages > 1 else 0.0)

    @staticmethod
    def within(
        lengths: range, stages: int, room: float, passes: float, sp_s: float, sp_f: float
    ) -> range:
        """The n of `lengths` whose compute-only bound passes / capacity(n) stays within
        `room`: capacity(n) = P / speed_fast - n (1 / speed_fast - 1 / speed_slow) falls as
        n grows, so they are a prefix, found in closed form (widened by a hair so that ties
        stay)."""
        if not lengths or passes <= 0:
            return lengths if room >= 0 else range(0)
        if room <= 0:
            return range(0)
        need = passes / room * (1 - 1e-9)
        full = stages / sp_f
        loss = 1 / sp_f - 1 / sp_s
        if loss <= 0:
            return lengths if full >= need else range(0)
        last = math.floor((full - need) / loss)
        return range(lengths.start, max(lengths.start, min(lengths.stop, last + 1)))

    def host_window(self, mbs: int, dp: int, blocks: int) -> float:
        """The least `window` of `blocks` blocks over the options that host a stage at D
        (`hosts`), cached: every shape of (m, D) with as many blocks in its largest
        stage asks for it."""
        key = (mbs, dp, blocks)
        window = self._host_windows.get(key)
        if window is None:
            window = math.inf
            for option in self.hosts(mbs, dp):
                window = min(window, self.window(option, mbs, blocks))
            self._host_windows[key] = window
        return window

    def _least_prices(self, mbs: int, dp: int) -> tuple[float, float]:
        """(least tp x price, least tp x price x speed) over the hosts, for `_cost_floor`."""
        key = (mbs, dp)
        prices = self._host_prices.get(key)
        if prices is None:
            speed, _ = self.option_speeds(mbs)
            hosts = self.hosts(mbs, dp)
            facts = [self._facts(o) for o in hosts]
            prices = (
                min(f[0] * f[2] for f in facts),
                min(f[0] * f[2] * speed[o] for f, o in zip(facts, hosts, strict=True)),
            )
            self._host_prices[key] = prices
        return prices

    def _straggler_ceiling(self, fixed: float, m1: int, rate: float) -> float:
        """The largest straggler period with which a candidate of iteration time at least
        fixed + m1 x S, renting at least `rate`, can still beat the incumbent and meet the
        time cap and the budget (infinite when m1 is 0). Slightly widened so that ties
        survive rounding."""
        if m1 == 0:
            return math.inf
        cap = self.bound() if self.objective == "max_throughput" else math.inf
        if self.objective == "min_cost" and rate > 0:
            cap = min(cap, self.bound() / rate)
        if self.time_cap is not None:
            cap = min(cap, self.time_cap)
        if self.budget is not None and rate > 0:
            cap = min(cap, self.budget / rate)
        return (cap - fixed) / m1 * (1 + SPLIT_TOLERANCE)

    def most_capacity(self, mbs: int, stages: int, dp: int) -> float:
        """An upper bound on sum_i 1 / speed_i over every profile of the shape: the
        Lagrangian dual of the linear relaxation. For any lambda >= 0 and profile x (stages
        per option o, each of capacity c_o = 1 / speed_o taking D x tp_o devices),
        sum x_o c_o = lambda sum x_o + sum x_o (c_o - lambda) <= lambda P + g(lambda) / D,
        where g(lambda) gives each device the best (c_o - lambda)+ / tp_o of an option on its
        pool, over every device max_gpus allows (`_capacity_duals`). The bound is convex in
        lambda and piecewise linear, so its minimum is at a breakpoint, found by bisection."""
        duals = self._capacity_duals(mbs)
        lo, hi = 0, len(duals) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            a, b = duals[mid], duals[mid + 1]
            if a[0] * stages + a[1] / dp <= b[0] * stages + b[1] / dp:
                hi = mid
            else:
                lo = mid + 1
        lam, g = duals[lo]
        return lam * stages + g / dp

    def _capacity_duals(self, mbs: int) -> list[tuple[float, float]]:
        """(lambda, g(lambda)) at every breakpoint of g, ascending in lambda (see
        `most_capacity`): lambda = 0, each c_o, and where two options' lines cross."""
        duals = self._duals.get(mbs)
        if duals is None:
            model = self.model
            speed, _ = self.option_speeds(mbs)
            lines = [(1.0 / speed[o], model.kinds[o[0]].tp, self._option_pools(o)) for o in speed]
            points = {0.0, *(c for c, _, _ in lines)}
            for (c1, t1, _), (c2, t2, _) in combinations(lines, 2):
                if t1 != t2:
                    lam = (c1 * t2 - c2 * t1) / (t2 - t1)
                    if lam > 0:
                        points.add(lam)
            duals = [(lam, self._device_values(lam, lines)) for lam in sorted(points)]
            self._duals[mbs] = duals
        return duals

    def _device_values(self, lam: float, lines: list[tuple[float, int, frozenset[int]]]) -> float:
        """g(lambda): each pool's devices at the best (c_o - lambda)+ / tp_o of an option
        drawing on it, the most valuable devices first, at most max_gpus of them."""
        value = [0.0] * len(self.capacity)
        for c, tp, pools in lines:
            per_device = (c - lam) / tp
            for p in pools:
                value[p] = max(value[p], per_device)
        left, total = self.total_devices, 0.0
        for v, room in sorted(zip(value, self.capacity, strict=True), reverse=True):
            take = min(room, left)
            total += v * take
            left -= take
            if not left or v <= 0:
                break
        return total

    def run_lengths(
        self, slow: tuple[int, ...], fast: tuple[int, ...], stages: int, dp: int
    ) -> range:
        """The n for which n stages of `slow` then stages - n of `fast` fit every quota and
        max_gpus, ascending (most fast stages, the lowest bound, first); n = stages when
        `slow` is `fast`. Each option draws its devices from its pools, so by Hall's theorem
        they fit when each option's devices fit its pools and both together fit the union;
        the devices are linear in n, so each condition bounds n on one side."""
        if slow == fast:
            return range(stages, stages + 1 if self._option_stages(slow, dp) >= stages else 0)
        kinds = self.model.kinds
        tp_slow, tp_fast = kinds[slow[0]].tp, kinds[fast[0]].tp
        room_slow, room_fast, both = self._rooms(slow, fast)
        linear = (
            (-room_slow, dp * tp_slow),
            (stages * dp * tp_fast - room_fast, -dp * tp_fast),
            (stages * dp * tp_fast - both, dp * (tp_slow - tp_fast)),
        )
        lo, hi = 1, stages - 1
        for c, k in linear:
            if k > 0:
                hi = min(hi, -c // k)
            elif k < 0:
                lo = max(lo, -(-c // -k))
            elif c > 0:
                return range(0)
        return range(lo, hi + 1)

    def profile_rate(
        self, slow: tuple[int, ...], n_slow: int, fast: tuple[int, ...], n_fast: int, dp: int
    ) -> float:
        """USD per second the profile's devices cost at least: one-pool options rent whole
        nodes of their pool; a region-wide option's devices at its cheapest pool, unrounded."""
        tp_s, pool_s, price_s, gpn_s = self._facts(slow)
        tp_f, pool_f, price_f, gpn_f = self._facts(fast)
        devices_s, devices_f = n_slow * dp * tp_s, n_fast * dp * tp_f
        if pool_s >= 0 and pool_s == pool_f:
            return -(-(devices_s + devices_f) // gpn_s) * gpn_s * price_s
        rate_s = -(-devices_s // gpn_s) * gpn_s * price_s if pool_s >= 0 else devices_s * price_s
        rate_f = -(-devices_f // gpn_f) * gpn_f * price_f if pool_f >= 0 else devices_f * price_f
        return rate_s + rate_f

    def _pass_sums(self, kind: int, mbs: int) -> tuple[list[float], list[float]]:
        """The forward and backward prefix sums of `kind`'s tables at `mbs`, by kind."""
        key = (kind, mbs)
        sums = self._pass_sum_lists.get(key)
        if sums is None:
            k = self.model.kinds[kind]
            t = self.model.tables(k.device, k.tp, mbs)
            sums = self._pass_sum_lists[key] = (t.forward, t.backward)
        return sums

    def _memory_end(self, kind: int, mbs: int, first: int, dp: int, flight: int) -> int:
        """The largest end layer e <= blocks (a stage before the last) for which layers
        [first, e) fit `kind`'s memory, or `first` if none does; memory grows with the layers
        of such a stage, so a binary search finds it."""
        key = (kind, mbs, first, dp, flight)
        end = self._memory_ends.get(key)
        if end is None:
            fits = self.model.fits
            end = last_true(
                first, self.model.blocks, lambda e: fits(kind, mbs, first, e, dp, flight)
            )
            self._memory_ends[key] = end
        return end

    def stage_blocks(self, kind: int, mbs: int, dp: int, flight: int) -> int:
        """The most blocks a stage on `kind` before the last holds in memory at D, with
        `flight` microbatches in flight: from the first block on (a stage that also holds
        the token table needs more memory, not less), at most L - 1."""
        return self._memory_end(kind, mbs, 1, dp, flight) - 1

    def flight_blocks(self, kind: int, mbs: int, dp: int, stages: int) -> list[int]:
        """Prefix sums, k = 0..P: entry k is the sum over f = 1..k of `stage_blocks` with
        min(f, m) microbatches in flight (m = ceil(T / D)), so entry k less entry k - j is
        the most blocks j stages before the last hold with k down to k - j + 1 in flight.
        Cached, and extended as deeper shapes ask."""
        key = (kind, mbs, dp)
        sums = self._flight_blocks.get(key)
        if sums is None:
            sums = self._flight_blocks[key] = [0]
        if len(sums) <= stages:
            passes = -(-(self.model.batch // mbs) // dp)
            for k in range(len(sums), stages + 1):
                sums.append(sums[-1] + self.stage_blocks(kind, mbs, dp, min(k, passes)))
        return sums

    def last_blocks(self, kind: int, mbs: int, dp: int) -> int:
        """The most blocks the last stage on `kind` holds in memory at D with the head (one
        microbatch in flight, as the last stage has), cached; memory grows with its blocks,
        so a binary search finds it."""
        key = (kind, mbs, dp)
        held = self._last_blocks.get(key)
        if held is None:
            model = self.model
            whole = model.blocks + 2
            held = last_true(
                0,
                model.blocks,
                lambda b: b == 0 or model.fits(kind, mbs, whole - 1 - b, whole, dp, 1),
            )
            self._last_blocks[key] = held
        return held

    def _stage_end(
        self, kind: int, mbs: int, first: int, budget: float, dp: int, flight: int, last_end: int
    ) -> int:
        """The largest end layer in (first, last_end] whose stage from `first` runs within
        `budget` seconds on `kind` and fits its memory, or `first` if none does. The bisect
        on the prefix sums is checked against `stage_time` itself, so rounding in the
        prefix sums never changes the answer. Time and memory both grow with the end, so
        memory is looked up only when the end the time allows does not fit: one check
        instead of a binary search in most calls."""
        prefix = self._time_prefix(kind, mbs)
        # `stage_time(kind, mbs, first, e)[0]` is (F[e] - F[first]) + (B[e] - B[first]) over
        # the tables' forward and backward sums: the same arithmetic, without its cache
        forward, backward = self._pass_sums(kind, mbs)
        f0, b0 = forward[first], backward[first]
        end = max(first, bisect_right(prefix, prefix[first] + budget, first, last_end + 1) - 1)
        while end > first and (forward[end] - f0) + (backward[end] - b0) > budget:
            end -= 1
        while end < last_end and (forward[end + 1] - f0) + (backward[end + 1] - b0) <= budget:
            end += 1
        if end == first or self.model.fits(kind, mbs, first, end, dp, flight):
            return end
        return self._memory_end(kind, mbs, first, dp, flight)

    def min_max_split(
        self,
        sequence: Sequence[tuple[int, ...]],
        mbs: int,
        dp: int,
        floor: float = 0.0,
        ceiling: float = math.inf,
        probe: bool = False,
    ) -> tuple[int, ...] | None:
        """The boundaries minimising max_i (t_i + sends) for this sequence of options:
        bisection on the straggler, each test filling stages greedily (as many blocks as fit
        under it and in memory), which is exact for stage times monotone in their blocks. A
        fill that succeeds lowers the top to its split's straggler; one that fails raises
        the bottom to the least limit at which some stage would take one more block (no
        fill below it differs), so the bisection skips the limits that change nothing.
        None when no split fits memory, or none has a straggler of at most `ceiling` (tested
        first: one fill decides most sequences that cannot beat the incumbent; with `probe`,
        that fill's split is returned as it is). The kinds of an option share device and TP
        (`stage_options`), so the first stands for all."""
        model = self.model
        stages = len(sequence)
        m = -(-(model.batch // mbs) // dp)
        sends = [self.send(a, b, mbs) for a, b in pairwise(sequence)]
        padded = [0.0, *sends, 0.0]
        whole = model.blocks + 2

        def fill(limit: float) -> tuple[tuple[int, ...] | None, float]:
            # (the greedy split under `limit`, its straggler), or (None, the least limit
            # at which the greedy fill could change: below it every stage ends where it
            # ends now, so the fill fails the same way)
            bounds, start = [0], 0
            worst, change = 0.0, math.inf
            tally = self.tally
            for j, option in enumerate(sequence):
                tally[SPLIT_FILL] += 1
                kind = option[0]
                first = 0 if j == 0 else start + 1
                flight = max(1, min(stages - j, m))
                pads = padded[j] + padded[j + 1]
                budget = limit - pads
                if j == stages - 1:
                    t = model.stage_time(kind, mbs, first, whole)[0]
                    if not model.fits(kind, mbs, first, whole, dp, flight):
                        return None, change
                    if t > budget:
                        return None, min(change, t + pads)
                    bounds.append(model.blocks)
                    return tuple(bounds), max(worst, t + pads)
                last_end = model.blocks - (stages - 1 - j) + 1
                end = self._stage_end(kind, mbs, first, budget, dp, flight, last_end)
                forward, backward = self._pass_sums(kind, mbs)
                f0, b0 = forward[first], backward[first]
                if end < last_end:
                    grown = (forward[end + 1] - f0) + (backward[end + 1] - b0)
                    if grown > budget:
                        change = min(change, grown + pads)
                if end < start + 2:
                    return None, change
                worst = max(worst, (forward[end] - f0) + (backward[end] - b0) + pads)
                start = end - 1
                bounds.append(start)
            return None, change

        top = (
            sum((self.option_time(o, mbs, 0, whole) for o in set(sequence)), 0.0)
            + sum(sends, 0.0) * 2
        )
        if ceiling < top:
            if ceiling < floor:
                return None
            top = ceiling
        best, value = fill(top)
        if best is None or probe:
            return best
        top = min(top, value)
        low = floor
        while top - low > SPLIT_TOLERANCE * top:
            mid = (low + top) / 2
            found, value = fill(mid)
            if found is None:
                low = max(mid, value)
            else:
                top, best = min(mid, value), found
        return best
        low = floor
        while top - low > SPLIT_TOLERANCE * top:
            mid = (low + top) / 2
            found = fill(mid)
            if found is None:
                low = mid
            else:
                top, best = mid, found
        return best
