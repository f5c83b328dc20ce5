"""Whether a shape could run under a straggler time at all (the stage-cover check), and
how many pipelines its stages' memory allows (the memory cap).

The search's shape bound (`bounds.Bounds.shape_bounds`) prices the straggler by conserving
device time: D x W / G_eff, as if work split into any fraction of a block and any TP. Real
stages hold whole blocks on TP 1, 2, 4 or 8, each of a stage's D replicas must finish the
stage within the straggler time S, and every stage holds at least one block. On 128 A100
with GPT-Neo-2.7B that conservation bound sits 20-50% under the best plan of most shapes,
so the search visited 579 shapes to prove an optimum it met at the second.

The check, for a shape (m, P, D) and a ceiling S. A replica of kind k (pool, TP) running b
blocks within S needs b <= b_k(S), the most blocks of the stage's position (first stage
with the token table, last with the head, or between, where it starts cheapest: blocks
differ where global and local attention alternate, as in GPT-Neo) that k runs in S. The
search visits 60 shapes on that cluster with the check, 361 without. Stage i holding
b_i blocks thus costs at least D x min {w_k : b_k(S) >= b_i} in any weighting w of devices
with non-negative weights per pool, and the P stages together at most the weighted
devices there are. The least cost over splits of the L blocks is a multiple-choice
covering problem; its linear relaxation (each stage on the lower convex hull of its
(blocks, weight) points, the hull segments taken greedily by blocks per weight) is still a
lower bound, and costs a few operations per kind. The search applies it for max_throughput
on one device type, in raw devices: with several types no single weighting sees all their
quotas at once, and it dropped few shapes there that the profile pairs would not have
dropped as cheaply (it cost more time than it saved on the bench's A100 + V100 scenarios).
If the least cost exceeds what there is, no plan of the shape has a straggler within S.
Memory is left out of the check, which keeps it a relaxation and cheap.

The memory cap is the same cover with no ceiling on time but b_k limited by memory: the
most blocks kind k holds at the stage's position with its microbatches in flight. What it
allows is an upper bound on D for all of (m, P) at once (`most_pipelines`); on 32 A100 +
96 V100 with GPT-Neo-2.7B it removes 1,119 of 4,040 shapes before any is bounded. Its
weightings (`weightings`): raw devices with one device type; with several, the fastest
type alone (its quotas, the others free: scarce fast devices) and the pools weighted by
their speed factors sigma (`Bounds.device_work`: slow plentiful devices count for what
they can do), plus raw devices where max_gpus is below the quotas. Each other type alone
never cut a shape the others kept on the bench's scenarios. Where the lightest kind of a
weighting holds ceil(L / P) blocks at every position, the cover is that kind's weight on
every stage, found with one memory lookup per position instead of each kind's binary
search (on GPT-Neo-2.7B over 128 A100 the cap took a fifth of the search before).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from functools import partial
from itertools import pairwise

from hetc.costmodel.planning import PlanningModel

SLACK = 1e-9
"""Relative slack on every comparison, so that float rounding never prunes a shape that
ties."""


class StageCover:
    """The stage-cover check and the memory cap for one planning model (module
    docstring), with what they look up cached across shapes."""

    def __init__(
        self,
        model: PlanningModel,
        capacity: Sequence[int],
        total_devices: int,
        sigma_of: Callable[[int], Sequence[float]] | None = None,
    ) -> None:
        self.model = model
        self.capacity = list(capacity)
        self.total_devices = total_devices
        self._sigma_of = sigma_of
        self._times: dict[tuple[int, int], tuple[list[float], ...]] = {}
        self._weightings: dict[int, list[tuple[float, list[float], list[int]]]] = {}
        self._step_lists: dict[int, list[float]] = {}
        self._covers: dict[
            tuple[int, int, int], tuple[list[tuple[int, list[int]]], list[float]]
        ] = {}
        self._memory: dict[tuple[int, str, int, int, int, int], int] = {}
        self._reach_rows: dict[tuple[int, int, int, int], list[int]] = {}
        self._shares: dict[tuple[tuple[int, str, int, int, int, int], int], bool] = {}
        self._wholes: dict[tuple[int, str, int, int], bool] = {}
        self.one_device = len({slot.pool.device for slot in model.pools}) == 1
        """Whether every pool holds the same device type (one weighting, raw devices)."""
        self._distinct_kinds = self._distinct()
        self._restricted: dict[int, list[tuple[float, list[float], list[int]]]] = {}
        self._hulls: dict[
            tuple[int, ...], tuple[float, int, list[tuple[float, float, int]]] | None
        ] = {}

    def weightings(self, mbs: int) -> list[tuple[float, list[float], list[int]]]:
        """(what there is, weight per kind, kinds by weight) for every weighting the cover
        is priced in (module docstring)."""
        cached = self._weightings.get(mbs)
        if cached is not None:
            return cached
        model = self.model
        kinds = model.kinds
        found = []
        devices = sorted({slot.pool.device for slot in model.pools})
        if len(devices) > 1 and self._sigma_of is not None:
            sigma = self._sigma_of(mbs)
            fastest = max(sigma)
            for device in devices:
                pools = {slot.index for slot in model.pools if slot.pool.device == device}
                if max(sigma[p] for p in pools) < fastest:
                    continue
                there = float(sum(self.capacity[p] for p in pools))
                found.append((there, [float(k.tp) if k.pool in pools else 0.0 for k in kinds]))
            there = sum((s * c for s, c in zip(sigma, self.capacity, strict=True)), 0.0)
            found.append((there, [sigma[k.pool] * k.tp for k in kinds]))
        if not found or self.total_devices < sum(self.capacity):
            found.append((float(self.total_devices), [float(k.tp) for k in kinds]))
        cached = [
            (there, weight, sorted(range(len(weight)), key=weight.__getitem__))
            for there, weight in found
        ]
        self._weightings[mbs] = cached
        return cached

    def _distinct(self) -> list[int]:
        """The kinds the check and the memory cap read: with one device type, one per TP
        degree (pools of one device run the same times, hold the same blocks and, in raw
        devices, weigh the same, so their points of the cover coincide: five zones of A100
        have 20 kinds and 4 TP degrees); otherwise every kind."""
        kinds = self.model.kinds
        if not self.one_device:
            return list(range(len(kinds)))
        first: dict[int, int] = {}
        for k in kinds:
            first.setdefault(k.tp, k.index)
        return sorted(first.values())

    def _distinct_weightings(self, mbs: int) -> list[tuple[float, list[float], list[int]]]:
        """`weightings` restricted to `_distinct`'s kinds, cached."""
        kinds = self._distinct_kinds
        if len(kinds) == len(self.model.kinds):
            return self.weightings(mbs)
        restricted = self._restricted.get(mbs)
        if restricted is None:
            restricted = []
            for there, weight, _ in self.weightings(mbs):
                mine = [weight[k] for k in kinds]
                restricted.append((there, mine, sorted(range(len(mine)), key=mine.__getitem__)))
            self._restricted[mbs] = restricted
        return restricted

    def class_times(self, mbs: int, kind: int) -> tuple[list[float], ...]:
        """Forward + backward time of b = 1..L blocks on `kind`, as the first stage (with the
        token table), a middle one (the least over where it starts: blocks differ where
        the attention pattern mixes global and local layers), and the last (with the
        head)."""
        key = (mbs, kind)
        cached = self._times.get(key)
        if cached is None:
            blocks = self.model.blocks
            spans = partial(self.model.span_times, kind, mbs)
            counts = range(1, blocks + 1)
            # from each start a middle stage may take: its runs of 1.. blocks within the model
            runs = {x: spans((x, x + b) for b in range(1, blocks + 2 - x)) for x in self._starts(1)}
            cached = self._times[key] = (
                spans((0, b + 1) for b in counts),
                [min(runs[x][b - 1] for x in self._starts(b)) for b in counts],
                spans((blocks + 1 - b, blocks + 2) for b in counts),
            )
        return cached

    def _starts(self, count: int) -> range:
        """First layers a middle stage of `count` blocks may start at, one per phase of the
        attention pattern (blocks repeat with its period), within the model."""
        period = len(self.model.arch.attention_pattern)
        return range(1, max(2, min(period, self.model.blocks + 1 - count) + 1))

    def _steps(self, mbs: int) -> list[float]:
        """Every time at which some kind's reach changes: the check's answer for a given
        shape is the same between two of them, so it is cached per interval."""
        steps = self._step_lists.get(mbs)
        if steps is None:
            model = self.model
            whole = model.blocks + 2
            kinds = self._distinct_kinds
            steps = sorted(
                {t for k in kinds for ts in self.class_times(mbs, k) for t in ts}
                | {model.stage_time(k, mbs, 0, whole)[0] for k in kinds}
            )
            self._step_lists[mbs] = steps
        return steps

    def _positions(self, mbs: int, stages: int, limit: float) -> list[tuple[int, list[int]]]:
        """(how many stages, the most blocks each kind runs there within `limit`) for the
        first stage, the middle ones and the last."""
        most = self.model.blocks - stages + 1
        reach: list[list[int]] = [[], [], []]
        for k in self._distinct_kinds:
            for at, times in enumerate(self.class_times(mbs, k)):
                b = bisect_right(times, limit)
                reach[at].append(b if b < most else most)
        return [(1, reach[0]), (stages - 2, reach[1]), (1, reach[2])]

    def memory_reach(self, mbs: int, kind: int, at: int, flight: int, dp: int) -> int:
        """The most blocks `kind` holds in memory at position `at` (0 first, 1 middle, 2
        last) with `flight` microbatches in flight over `dp` replicas (0 if none), a middle
        stage at the start where it holds most (blocks differ with the attention pattern).
        Cached per device and TP: pools of one device hold the same."""
        replica = self.model.kinds[kind]
        key = (mbs, replica.device, replica.tp, at, flight, dp)
        reach = self._memory.get(key)
        if reach is None:
            blocks = self.model.blocks
            # more in flight holds no more blocks: twice as many bound it from below, half
            # as many from above, where already known (the cap's flights are powers of two)
            reach = self._memory.get((*key[:4], 2 * flight, dp), 0)
            most = self._memory.get((*key[:4], flight // 2, dp), blocks) if flight > 1 else blocks
            for x in self._starts(1) if at == 1 else (None,):
                # the most blocks from layer x (a middle stage ends before the head)
                top = min(most, blocks if x is None else blocks + 1 - x)
                reach = last_true(reach, top, partial(self._holds, kind, mbs, at, x, dp, flight))
            self._memory[key] = reach
        return reach

    def _holds(
        self, kind: int, mbs: int, at: int, start: int | None, dp: int, flight: int, count: int
    ) -> bool:
        """Whether `kind` holds `count` blocks in memory at position `at` (`memory_reach`):
        from layer `start` for a middle stage, else as the first or last stage."""
        first, end = (
            _layers(at, count, self.model.blocks) if start is None else (start, start + count)
        )
        return self.model.fits(kind, mbs, first, end, dp, flight)

    def holds_share(self, mbs: int, kind: int, at: int, flight: int, dp: int, count: int) -> bool:
        """Whether `memory_reach(mbs, kind, at, flight, dp)` is at least `count`, without
        its binary search where it is not cached: whether `count` blocks fit from some start,
        within what the cached reaches of twice and half the flight already settle."""
        replica = self.model.kinds[kind]
        key = (mbs, replica.device, replica.tp, at, flight, dp)
        reach = self._memory.get(key)
        if reach is not None:
            return reach >= count
        held = self._shares.get((key, count))
        if held is None:
            blocks = self.model.blocks
            held = self._memory.get((*key[:4], 2 * flight, dp), 0) >= count or (
                (flight < 2 or self._memory.get((*key[:4], flight // 2, dp), count) >= count)
                and any(
                    count <= (blocks if x is None else blocks + 1 - x)
                    and self._holds(kind, mbs, at, x, dp, flight, count)
                    for x in (self._starts(1) if at == 1 else (None,))
                )
            )
            self._shares[key, count] = held
        return held

    def holds_whole(self, mbs: int, kind: int, dp: int) -> bool:
        """Whether `kind` holds the whole model in memory over `dp` replicas (one stage, one
        microbatch in flight), cached per device and TP like `memory_reach`."""
        replica = self.model.kinds[kind]
        key = (mbs, replica.device, replica.tp, dp)
        held = self._wholes.get(key)
        if held is None:
            blocks = self.model.blocks
            held = self._wholes[key] = self.model.fits(kind, mbs, 0, blocks + 2, dp, 1)
        return held

    def _reach_row(self, mbs: int, at: int, flight: int, dp: int) -> list[int]:
        """`memory_reach` of every kind, cached as a row: the memory cap asks for the same
        rows for every P of one microbatch size."""
        key = (mbs, at, flight, dp)
        row = self._reach_rows.get(key)
        if row is None:
            row = [self.memory_reach(mbs, k, at, flight, dp) for k in self._distinct_kinds]
            self._reach_rows[key] = row
        return row

    def most_pipelines(self, mbs: int, stages: int, last: int) -> int:
        """The largest D <= `last` for which P stages, each holding its blocks in memory,
        may fit the devices in every weighting (0 if none): shapes of more pipelines have no
        plan whatever their straggler. Lenient for every D <= `last`, so it holds for all of
        them: memory only falls as D (ZeRO's shards) grows and as fewer microbatches are in
        flight, so it is taken at D = B / m (no shape has more pipelines; rounded up to a
        power of two, so that every P of one m shares the memory it looks up) and at
        in-flight counts min(P - i, ceil(B / (m x last))) rounded down to one."""
        if last < 1:
            return last
        model = self.model
        blocks = model.blocks
        lenient = 1 << (model.batch // mbs - 1).bit_length()
        groups: dict[tuple[int, int], int] = {}
        most = blocks - stages + 1
        if stages == 1:
            whole = [
                blocks if self.holds_whole(mbs, k, lenient) else 0 for k in self._distinct_kinds
            ]
            positions = [(1, whole)]
        else:
            flights = -(-(model.batch // mbs) // last)
            for i in range(stages):
                at = 0 if i == 0 else 2 if i == stages - 1 else 1
                flight = max(1, min(stages - i, flights))
                key = (at, 1 << (flight.bit_length() - 1))
                groups[key] = groups.get(key, 0) + 1
            positions = []
        share = -(-blocks // stages)
        for index, (there, weight, order) in enumerate(self._distinct_weightings(mbs)):
            least = order[0]
            if stages > 1 and all(
                self.holds_share(mbs, self._distinct_kinds[least], at, flight, lenient, share)
                for at, flight in groups
            ):
                # the lightest kind holds ceil(L / P) blocks everywhere: the cover is its
                # weight on every stage, summed as `least_cover` sums it
                need = 0.0
                for count in groups.values():
                    need += count * weight[least]
            else:
                if not positions:
                    positions = [
                        (count, [min(most, r) for r in self._reach_row(mbs, at, flight, lenient)])
                        for (at, flight), count in groups.items()
                    ]
                need = least_cover(
                    [(n, self._hull(mbs, index, r, weight, order)) for n, r in positions],
                    blocks,
                )
            if need == math.inf:
                return 0
            if need > 0:
                last = min(last, int(there * (1 + SLACK) / need + SLACK))
        return last

    def may_run_under(self, mbs: int, stages: int, dp: int, ceiling: float) -> bool:
        """False only if no plan of shape (m, P, D) has every stage within `ceiling`."""
        if ceiling == math.inf:
            return True
        if ceiling < 0:
            return False
        model = self.model
        blocks = model.blocks
        limit = ceiling * (1 + SLACK)
        key = (mbs, stages, bisect_right(self._steps(mbs), limit))
        cached = self._covers.get(key)
        if cached is None:
            if stages == 1:
                whole = [
                    blocks if model.stage_time(k, mbs, 0, blocks + 2)[0] <= limit else 0
                    for k in self._distinct_kinds
                ]
                cached = self._covers[key] = ([(1, whole)], [])
            else:
                cached = self._covers[key] = (self._positions(mbs, stages, limit), [])
        positions, covers = cached
        for at, (there, weight, order) in enumerate(self._distinct_weightings(mbs)):
            if at == len(covers):
                covers.append(
                    least_cover(
                        [(n, self._hull(mbs, at, reach, weight, order)) for n, reach in positions],
                        blocks,
                    )
                )
            if dp * covers[at] > there * (1 + SLACK) + SLACK:
                return False
        return True

    def _hull(
        self, mbs: int, weighting: int, reach: list[int], weight: list[float], order: list[int]
    ) -> tuple[float, int, list[tuple[float, float, int]]] | None:
        """`class_hull`, cached: the same reach recurs across shapes and pipeline depths."""
        key = (mbs, weighting, *reach)
        if key not in self._hulls:
            self._hulls[key] = class_hull(reach, weight, order)
        return self._hulls[key]


def last_true(lo: int, hi: int, holds: Callable[[int], bool]) -> int:
    """The largest v in (lo, hi] for which `holds(v)`, else `lo`, where `holds` is true up
    to some point and false after it (memory grows with the blocks a stage holds): a
    binary search, as the memory cap and the search's stage ends both need."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if holds(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _layers(at: int, blocks: int, total: int) -> tuple[int, int]:
    """[first, end) layers of `blocks` blocks as the first stage (at 0, with the token
    table) or the last (at 2, with the head) of a model of `total` blocks."""
    if at == 0:
        return 0, blocks + 1
    return total + 1 - blocks, total + 2


def class_hull(
    reach: Sequence[int], weight: Sequence[float], order: Sequence[int]
) -> tuple[float, int, list[tuple[float, float, int]]] | None:
    """One stage's (least weight, the most blocks at it, then the segments of the upper
    hull of blocks over weight as (blocks per weight, weight, blocks)), for the kinds'
    `reach` (most blocks each runs) and `weight`, `order` listing the kinds by weight;
    None if no kind holds a block."""
    hull: list[tuple[float, int]] = []
    for k in order:
        r = reach[k]
        if r < 1:
            continue
        w = weight[k]
        if hull:
            if r <= hull[-1][1]:
                continue
            if w == hull[-1][0]:
                hull.pop()
            # drop the last point while it lies on or under the chord to (w, r)
            while len(hull) >= 2:
                (w1, k1), (w2, k2) = hull[-2], hull[-1]
                if (k2 - k1) * (w - w1) <= (r - k1) * (w2 - w1):
                    hull.pop()
                else:
                    break
        hull.append((w, r))
    if not hull:
        return None
    segments = [
        ((k2 - k1) / (w2 - w1) if w2 > w1 else math.inf, w2 - w1, k2 - k1)
        for (w1, k1), (w2, k2) in pairwise(hull)
    ]
    return hull[0][0], hull[0][1], segments


def least_cover(
    positions: Sequence[tuple[int, tuple[float, int, list[tuple[float, float, int]]] | None]],
    blocks: int,
) -> float:
    """The linear relaxation of: the least total weight of one replica per stage, each
    stage holding at least one block and all of them `blocks`, where positions are (how
    many stages, their `class_hull`). Infinite if some stage can hold no block or all of
    them hold too few."""
    base_weight = 0.0
    base_blocks = 0
    segments: list[tuple[float, float, int]] = []
    for count, hull in positions:
        if count <= 0:
            continue
        if hull is None:
            return math.inf
        w0, k0, steps = hull
        base_weight += count * w0
        base_blocks += count * k0
        segments += [(rate, count * w, count * k) for rate, w, k in steps]
    need = blocks - base_blocks
    if need <= 0:
        return base_weight
    segments.sort(key=lambda s: -s[0])
    total = base_weight
    for _, cost, gained in segments:
        if gained >= need:
            return total + cost * need / gained
        total += cost
        need -= gained
    return math.inf
