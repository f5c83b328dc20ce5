"""Zone stripes, which seed `kind-profiles` with plans outside its space: where a region holds
one device in three zones or more, each stage in its own zone, which two options per
pipeline cannot express.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise

from hetc.solver.search.exact import _Partial
from hetc.solver.search.profiles import Profiles
from hetc.solver.search.windows import Option
from hetc.solver.search.work import SHAPE_BOUND


class Stripes(Profiles):
    """Zone stripes: one zone per stage, seeding `kind-profiles`."""

    def zone_stripes(self) -> None:
        """Seed the incumbent with plans that keep every stage inside one zone of a region
        holding the same device in three zones or more. A profile has at most two options,
        and a region-wide (H6) option rings across zones, so `kind-profiles` alone cannot
        give each of P stages its own zone there (docs/planner.md, Zone stripes, has a
        case where such a plan beats every profile). Per region, device and TP,
        and per (m, P): the largest D whose zones hold P stages of D x TP devices, the
        stages laid out zone by zone (largest quota first, each as many as it holds), split
        by `min_max_split` (which finds none where memory cannot hold the D), in order of
        their group bound (`range_bound`), skipping those whose shape bound at their D
        cannot beat the incumbent, or whose exact fill leaves no straggler as slow as the
        stages' mean time under it (`stripe_terms`), and regions lacking a pool the
        search must use (a leaf renting none of it is thrown away). They are real
        candidates, so they only tighten the bound the profiles are then searched with."""
        for group, mbs, stages, dp, sequence in self.stripe_seeds():
            if group > self.bound():
                break
            if self.shape_bounds(mbs, stages, dp, dp)[0] > self.bound():
                continue
            self.check_limits()
            m1 = -(-(self.model.batch // mbs) // dp) - 1
            least, fill = self.stripe_terms(sequence, mbs)
            ceiling = self._straggler_ceiling(fill + self.sync_bound(stages, dp), m1, 0.0)
            if ceiling < least:
                continue
            boundaries = self.min_max_split(sequence, mbs, dp, ceiling=ceiling)
            if boundaries is not None:
                self.leaf(
                    _Partial(stages=stages, mbs=mbs, dp=dp, boundaries=boundaries, sets=sequence)
                )

    def stripe_seeds(self) -> list[tuple[float, int, int, int, tuple[Option, ...]]]:
        """(group bound, m, P, D, options of the stages) of every zone stripe
        (`zone_stripes`), least group bound first."""
        model = self.model
        groups: dict[tuple[str, str, int], list[tuple[int, int]]] = {}
        for kind in model.kinds:
            region = model.pools[kind.pool].zone.region
            groups.setdefault((region, kind.device, kind.tp), []).append(
                (-self.capacity[kind.pool], kind.index)
            )
        bounds = {(mbs, stages): bound for bound, mbs, stages in self.shape_groups()}
        seeds: list[tuple[float, int, int, int, tuple[Option, ...]]] = []
        for (_, _, tp), members in sorted(groups.items()):
            pools = {model.kinds[index].pool for _, index in members}
            if len(members) < 3 or not self.options.must_use <= pools:
                continue
            members.sort()
            for mbs in model.microbatch_sizes():
                # one stripe width per stage count, over the group's members
                self.tally[SHAPE_BOUND] += model.blocks * len(members)
                self.check_limits()
                for stages in range(1, model.blocks + 1):
                    dp = self.stripe_width(mbs, stages, tp, [-room for room, _ in members])
                    last = self.dp_cap(mbs, stages)
                    if not 1 <= dp <= last:
                        continue
                    layout: list[Option] = []
                    for room, index in members:
                        layout += [(index,)] * min(-room // (dp * tp), stages - len(layout))
                    group = bounds.get((mbs, stages), math.inf)
                    seeds.append((group, mbs, stages, dp, tuple(layout)))
        seeds.sort()
        return seeds

    def stripe_terms(self, sequence: Sequence[Option], mbs: int) -> tuple[float, float]:
        """(a floor on the straggler, F) of a zone stripe, whatever its split: every stage
        runs the same device and TP, so the stages' times add up to the model's on it, F
        adds each boundary's send both ways, and the slowest stage takes at least the mean.
        With F exact, the straggler ceiling `min_max_split` tests first turns away most
        stripes that cannot win."""
        compute = self.option_time(sequence[0], mbs, 0, self.model.blocks + 2)
        sends = sum((self.send(a, b, mbs) for a, b in pairwise(sequence)), 0.0)
        return compute / len(sequence), compute + 2 * sends

    def stripe_width(self, mbs: int, stages: int, tp: int, rooms: list[int]) -> int:
        """The largest D (at most B / m, and P x D x TP within max_gpus) for which zones
        of these device counts hold P stages of D x TP devices each; 0 if none."""
        top = min(self.model.batch // mbs, self.total_devices // (stages * tp))
        lo, hi = 0, top
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if sum(room // (mid * tp) for room in rooms) >= stages:
                lo = mid
            else:
                hi = mid - 1
        return lo
