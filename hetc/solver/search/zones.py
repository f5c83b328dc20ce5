"""Zones under `kind-profiles` (see `profiles`): the swaps of identical zones (of a pair of
options and its mirror image only the earlier is searched: the two score the same), and the
rings a stage pays across zones, per block, per stage and per shape where its devices cannot
stay inside two zones.
"""

from __future__ import annotations

import math
from itertools import pairwise

from hetc.costmodel.planning import PlanningModel
from hetc.solver.search.incumbent import SearchOptions
from hetc.solver.search.options import Options
from hetc.solver.search.windows import Option


class Zones(Options):
    """Zone swaps and cross-zone rings of `kind-profiles`."""

    def __init__(self, model: PlanningModel, options: SearchOptions) -> None:
        super().__init__(model, options)
        self._block_egresses: dict[tuple[Option, int], float] = {}
        self._stage_rings: dict[tuple[Option, int, tuple[int, int, bool, bool]], float] = {}
        self._crossing_rings: dict[int, list[tuple[float, int]]] = {}
        self._zone_options: tuple[int, int, list[Option], list[Option]] | None = None
        self._ring_reps: dict[Option, list[tuple[int, int]]] = {}
        self._swaps: list[dict[int, int]] | None = None
        self._moving: dict[Option, list[int]] = {}
        self._swap_index: dict[int, list[int]] | None = None

    def ring_excess(self, stages: int, dp: int) -> float:
        """How far `zone_rings` raises a shape's bound above its sync term: the shape
        bound holds for the whole space, where stages may keep to a zone each, while every
        profile of the shape pays at least that ring."""
        ring = self.zone_rings(stages, dp)
        if ring == 0.0:
            return 0.0
        return max(0.0, ring - self.sync_bound(stages, dp))

    def zone_swaps(self) -> list[dict[int, int]]:
        """Kind maps that swap two zones identical in all the model reads (region, and pool
        by pool the device, node size, price, NIC and quota) where no link override names
        either and neither holds a pool the search must use. Swapping such zones maps every
        candidate to one with the same time, money and signature, so of a pair of options
        and its mirror image only the one that comes first is searched; a chain of such
        steps always ends at a pair that is kept, as each step goes to an earlier one."""
        if self._swaps is None:
            model = self.model
            named = {name for link in model.spec.network.links for name in link.between}
            named |= {model.pools[p].zone.name for p in self.options.must_use}
            slots: dict[str, list[int]] = {}
            for slot in model.pools:
                slots.setdefault(slot.zone.name, []).append(slot.index)
            kind_at = {(k.pool, k.tp): k.index for k in model.kinds}
            of_pool: dict[int, list[int]] = {}
            for k in model.kinds:
                of_pool.setdefault(k.pool, []).append(k.index)
            classes: dict[tuple[object, ...], list[str]] = {}
            for zone in model.spec.zones:
                if zone.name not in named:
                    pools = tuple(
                        (p.device, p.gpus_per_node, p.price, p.nic_bandwidth, p.quota)
                        for p in zone.pools
                    )
                    classes.setdefault((zone.region, pools), []).append(zone.name)
            self._swaps = []
            for names in classes.values():
                for first, second in pairwise(names):
                    swap: dict[int, int] = {}
                    for a, b in zip(slots[first], slots[second], strict=True):
                        for kind in of_pool.get(a, ()):
                            twin = kind_at[b, model.kinds[kind].tp]
                            swap[kind] = twin
                            swap[twin] = kind
                    self._swaps.append(swap)
        return self._swaps

    def _moving_swaps(self, option: Option) -> list[int]:
        """Indices of the `zone_swaps` that map the option to another one: the others leave
        a pair of options as it is, so its mirror images come from these alone (a region-wide
        option holds both zones of every swap of its region and stays put; a one-pool
        option moves under the two swaps of its zone)."""
        moving = self._moving.get(option)
        if moving is None:
            swaps = self.zone_swaps()
            if self._swap_index is None:
                index: dict[int, list[int]] = {}
                for i, swap in enumerate(swaps):
                    for k in swap:
                        index.setdefault(k, []).append(i)
                self._swap_index = index
            touched = sorted({i for k in option for i in self._swap_index.get(k, ())})
            members = set(option)
            moving = [i for i in touched if any(swaps[i].get(k, k) not in members for k in option)]
            self._moving[option] = moving
        return moving

    def block_egress(self, option: Option, dp: int) -> float:
        """Egress of one block's ring on the option: each stage of it holds at least that."""
        key = (option, dp)
        egress = self._block_egresses.get(key)
        if egress is None:
            egress = self.model.ring_egress(option, (0, 1, False, False), dp)
            self._block_egresses[key] = egress
        return egress

    def block_ring(self, option: Option, dp: int, blocks: int = 1) -> float:
        """The ring all-reduce of `blocks` blocks' gradients over D ranks of the option, at
        its slowest pair of kinds: a stage of the option holding at least that many blocks
        syncs no faster, as a ring takes longer for more bytes (every stage holds one
        block; the largest of P holds ceil(L / P))."""
        return self.stage_ring(option, dp, (0, blocks, False, False))

    def end_ring(self, option: Option, dp: int, stages: int, first: bool) -> float:
        """The ring of the first (or the last) stage's gradients, on the option, at least:
        that stage holds the first block and the token table (or the last block and the
        head; with one stage, the whole model), and a ring takes longer for more bytes."""
        blocks = self.model.blocks
        if stages == 1:
            return self.stage_ring(option, dp, (0, blocks, True, True))
        if first:
            return self.stage_ring(option, dp, (0, 1, True, False))
        return self.stage_ring(option, dp, (blocks - 1, blocks, False, True))

    def stage_ring(self, option: Option, dp: int, stage: tuple[int, int, bool, bool]) -> float:
        """The ring of a stage (`PlanningModel.stage_key`) over D ranks of the option at its
        slowest pair of kinds, cached."""
        if dp < 2:
            return 0.0
        key = (option, dp, stage)
        ring = self._stage_rings.get(key)
        if ring is None:
            ring = self._stage_rings[key] = max(
                self.model.ring(a, b, stage, dp) for a, b in self.ring_representatives(option)
            )
        return ring

    def ring_representatives(self, option: Option) -> list[tuple[int, int]]:
        """One pair of the option's kinds (a kind with itself included) per distinct ring:
        a ring depends on two kinds only through their link, its flows and the bytes per
        rank (`distinct_rings`), so a region-wide option over four zones has two (within a
        zone, across zones), not ten."""
        reps = self._ring_reps.get(option)
        if reps is None:
            model = self.model
            seen: dict[tuple[object, ...], tuple[int, int]] = {}
            (kept,) = model.classes.keep(option)
            for x, a in enumerate(kept):
                for b in kept[x:]:
                    ka, kb = model.kinds[a], model.kinds[b]
                    flows = max(ka.tp, kb.tp)
                    link = model.measured_link(ka.pool, kb.pool, flows)
                    seen.setdefault((link, flows, min(ka.tp, kb.tp)), (a, b))
            reps = self._ring_reps[option] = list(seen.values())
        return reps

    def zone_rings(self, stages: int, dp: int) -> float:
        """A ring every profile of P stages of D pipelines pays where the zones cannot keep
        it whole: a profile needs P x D x TP devices, and two options each inside one zone
        hold at most the two largest such options' devices (`_zone_split`); beyond that
        one of its options spans zones, and each of that option's stages rings across them
        on at least one block (`block_ring`), however the split falls. Of the options
        spanning zones, only those that can be in a profile of P stages count
        (`_crossing_rows`). 0 where the zones may keep the profile; infinite where no
        profile of P stages fits."""
        room, tp, _, _ = self._zone_split()
        if stages * dp * tp <= room:
            return 0.0
        rows = self._crossing_rings.get(dp)
        if rows is None:
            rows = self._crossing_rings[dp] = self._crossing_rows(dp)
        for ring, most in rows:
            if most >= stages:
                return ring
        return math.inf

    def _crossing_rows(self, dp: int) -> list[tuple[float, int]]:
        """For `zone_rings` at D: per option spanning zones that hosts a stage, in order of
        its one-block ring, the ring and the most stages a profile using it and no option of
        higher ring holds: the stages its pools hold at D, plus those of the other option,
        which is inside one zone or spans zones at no higher ring (pools two options share
        are counted twice: an upper bound)."""
        _, _, spanning, inside = self._zone_split()
        local = max((self._option_stages(o, dp) for o in inside), default=0)
        held = sorted(
            (self.block_ring(o, dp), self._option_stages(o, dp))
            for o in spanning
            if self._option_stages(o, dp) >= 1
        )
        rows, best = [], local
        for ring, own in held:
            rows.append((ring, own + best))
            best = max(best, own)
        return rows

    def _zone_split(self) -> tuple[int, int, list[Option], list[Option]]:
        """For `zone_rings`: at least the devices two options inside one zone each can
        hold together (the two largest such options' pools summed, within max_gpus; two
        options on one pool are counted twice), the least TP of such an option, the options
        that span zones and those that do not."""
        if self._zone_options is None:
            pools = self.model.pools
            spanning: list[Option] = []
            inside: list[Option] = []
            for option in self.stage_options():
                zones = {pools[p].zone.name for p in self._option_pools(option)}
                (spanning if len(zones) > 1 else inside).append(option)
            rooms = sorted(sum(self.capacity[p] for p in self._option_pools(o)) for o in inside)
            room = min(sum(rooms[-2:]), self.total_devices)
            tp = min((self.model.kinds[o[0]].tp for o in inside), default=1)
            self._zone_options = (room, tp, spanning, inside)
        return self._zone_options


def _mirrored(
    pair: tuple[Option, Option], position: dict[Option, int], swaps: list[dict[int, int]]
) -> bool:
    """Whether a zone swap maps the pair to a listed pair that comes before it: a pair
    (slow, fast) is listed where both are options and slow comes no later than fast in
    their order (`position`), which a dict of positions answers without holding the square
    of the options as a set of pairs (38 million at 8,700 zones)."""
    for swap in swaps:
        slow, fast = (tuple(sorted(swap.get(k, k) for k in option)) for option in pair)
        at_slow, at_fast = position.get(slow), position.get(fast)
        if at_slow is None or at_fast is None or at_slow > at_fast:
            continue
        if (slow, fast) < pair:
            return True
    return False
