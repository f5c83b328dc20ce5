"""Whether a shape could run under a straggler time at all: the stage-cover check.

The search's shape bound (`search._Search.shape_bounds`) prices the straggler by conserving
device time: D x W / G_eff, as if work split into any fraction of a block and any TP. Real
stages hold whole blocks on TP 1, 2, 4 or 8, each of a stage's D replicas must finish the
stage within the straggler time S, and every stage holds at least one block. On 128 A100
with GPT-Neo-2.7B that conservation bound sits 20-50% under the best plan of most shapes,
so the search visited 579 shapes to prove an optimum it met at the second.

The check, for a shape (m, P, D) and a ceiling S. A replica of kind k (pool, TP) running b
blocks within S needs b <= b_k(S), the most blocks of the stage's position (first stage
with the token table, last with the head, or between) that k runs in S. Stage i holding
b_i blocks thus costs at least D x min {w_k : b_k(S) >= b_i} in any weighting w of devices
with non-negative weights per pool, and the P stages together at most the weighted
devices there are. The least cost over splits of the L blocks is a multiple-choice
covering problem; its linear relaxation (each stage on the lower convex hull of its
(blocks, weight) points, the hull segments taken greedily by blocks per weight) is still a
lower bound, and costs a few operations per kind. The weightings: raw devices (against
max_gpus and the quotas), each device type alone (its quotas; other devices free), and the
pools' speed factors sigma (`_Search.device_work`), so that scarce fast devices and slow
plentiful ones both count. If any weighting's least cost exceeds what there is, no plan of
the shape has a straggler within S.

Memory is left out: a kind that does not fit only makes the true cover dearer, so the
check stays a relaxation; it is cheap because it ignores where each stage sits.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from itertools import pairwise

from hetc.costmodel.planning import PlanningModel

SLACK = 1e-9
"""Relative slack on every comparison, so that float rounding never prunes a shape that
ties."""


class StageCover:
    """The stage-cover check for one planning model (module docstring)."""

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
        self._hulls: dict[
            tuple[int, ...], tuple[float, int, list[tuple[float, float, int]]] | None
        ] = {}

    def weightings(self, mbs: int) -> list[tuple[float, list[float], list[int]]]:
        """(what there is, weight per kind, kinds by weight) for every weighting the check
        applies."""
        cached = self._weightings.get(mbs)
        if cached is not None:
            return cached
        model = self.model
        kinds = model.kinds
        found = []
        devices = sorted({slot.pool.device for slot in model.pools})
        if len(devices) > 1:
            for device in devices:
                pools = {slot.index for slot in model.pools if slot.pool.device == device}
                there = float(sum(self.capacity[p] for p in pools))
                found.append((there, [float(k.tp) if k.pool in pools else 0.0 for k in kinds]))
            if self._sigma_of is not None:
                sigma = self._sigma_of(mbs)
                there = sum(s * c for s, c in zip(sigma, self.capacity, strict=True))
                found.append((there, [sigma[k.pool] * k.tp for k in kinds]))
        found.append((float(self.total_devices), [float(k.tp) for k in kinds]))
        cached = [
            (there, weight, sorted(range(len(weight)), key=weight.__getitem__))
            for there, weight in found
        ]
        self._weightings[mbs] = cached
        return cached

    def class_times(self, mbs: int, kind: int) -> tuple[list[float], ...]:
        """Forward + backward time of b = 1..L blocks on `kind`, as the first stage (with the
        token table), a middle one, and the last (with the head)."""
        key = (mbs, kind)
        cached = self._times.get(key)
        if cached is None:
            blocks = self.model.blocks
            cached = self._times[key] = tuple(
                [
                    self.model.stage_time(kind, mbs, *_layers(at, b, blocks))[0]
                    for b in range(1, blocks + 1)
                ]
                for at in range(3)
            )
        return cached

    def _steps(self, mbs: int) -> list[float]:
        """Every time at which some kind's reach changes: the check's answer for a given
        shape is the same between two of them, so it is cached per interval."""
        steps = self._step_lists.get(mbs)
        if steps is None:
            model = self.model
            whole = model.blocks + 2
            steps = sorted(
                {t for k in range(len(model.kinds)) for ts in self.class_times(mbs, k) for t in ts}
                | {model.stage_time(k, mbs, 0, whole)[0] for k in range(len(model.kinds))}
            )
            self._step_lists[mbs] = steps
        return steps

    def _positions(self, mbs: int, stages: int, limit: float) -> list[tuple[int, list[int]]]:
        """(how many stages, the most blocks each kind runs there within `limit`) for the
        first stage, the middle ones and the last."""
        most = self.model.blocks - stages + 1
        reach: list[list[int]] = [[], [], []]
        for k in range(len(self.model.kinds)):
            for at, times in enumerate(self.class_times(mbs, k)):
                b = bisect_right(times, limit)
                reach[at].append(b if b < most else most)
        return [(1, reach[0]), (stages - 2, reach[1]), (1, reach[2])]

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
                    for k in range(len(model.kinds))
                ]
                cached = self._covers[key] = ([(1, whole)], [])
            else:
                cached = self._covers[key] = (self._positions(mbs, stages, limit), [])
        positions, covers = cached
        for at, (there, weight, order) in enumerate(self.weightings(mbs)):
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


def _layers(at: int, blocks: int, total: int) -> tuple[int, int]:
    """[first, end) layers of `blocks` blocks as the first stage (at 0), a middle one (1) or
    the last (2) of a model of `total` blocks."""
    if at == 0:
        return 0, blocks + 1
    if at == 1:
        return 1, blocks + 1
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
