"""The stage options of `kind-profiles` (see `profiles`): one pool, or all pools of one device
in one region (H6), at one TP; their speeds, pools, node facts and how many stages of D
replicas their quotas hold.
"""

from __future__ import annotations

from hetc.costmodel.planning import PlanningModel
from hetc.solver.search.exact import Exact
from hetc.solver.search.incumbent import SearchOptions
from hetc.solver.search.windows import Option


class Options(Exact):
    """The stage options of `kind-profiles` and their facts."""

    def __init__(self, model: PlanningModel, options: SearchOptions) -> None:
        super().__init__(model, options)
        self._options: list[tuple[int, ...]] | None = None
        self._speeds: dict[int, tuple[dict[Option, float], list[Option]]] = {}
        self._host_lists: dict[tuple[int, int], list[Option]] = {}
        self._option_facts: dict[Option, tuple[int, int, float, int]] = {}
        self._pair_rooms: dict[tuple[Option, Option], tuple[int, int, int]] = {}
        self._stage_room: dict[Option, tuple[int, int]] = {}
        self._pools_of: dict[Option, tuple[frozenset[int], int]] = {}
        """Each option's pools and the devices they hold (`_option_pools`, `_option_room`):
        asked for every pair of options, and a region-wide option holds hundreds of pools
        at thousands of zones."""

    def stage_options(self) -> list[tuple[int, ...]]:
        """One-pool kinds, and per (device, TP, region) with several pools the set of all of
        them (H6: the zones of a region as one pool; counts per zone are chosen at the leaf)."""
        if self._options is None:
            model = self.model
            twins = self._interchangeable_pools()
            options: list[tuple[int, ...]] = [(k.index,) for k in model.kinds if k.pool in twins]
            merged: dict[tuple[str, int, str], list[int]] = {}
            for k in model.kinds:
                region = model.pools[k.pool].zone.region
                merged.setdefault((k.device, k.tp, region), []).append(k.index)
            options += [tuple(group) for group in merged.values() if len(group) > 1]
            if "one-region-stage" in self.approx:
                options = [o for o in options if self._one_region(o)]
            self._options = options
        return self._options

    def _interchangeable_pools(self) -> set[int]:
        """Pools to offer as one-pool options: of pools that differ only by zone name (same
        region, device, node size, price, NIC and quota, no link override naming either
        zone), the first two; a profile uses at most two options, so any profile on other
        twins scores the same as one on these."""
        model = self.model
        named = {name for link in model.spec.network.links for name in link.between}
        keep: set[int] = set()
        seen: dict[tuple[object, ...], int] = {}
        for slot in model.pools:
            p = slot.pool
            if slot.zone.name in named:
                keep.add(slot.index)
                continue
            key = (slot.zone.region, p.device, p.gpus_per_node, p.price, p.nic_bandwidth, p.quota)
            if seen.get(key, 0) < 2:
                keep.add(slot.index)
            seen[key] = seen.get(key, 0) + 1
        return keep

    def option_time(self, option: tuple[int, ...], mbs: int, first: int, end: int) -> float:
        """The planning model's compute time of blocks first..end on a stage whose replicas run
        the kinds `option` (the slowest of them: `PlanningModel.stage_compute`)."""
        return self.model.stage_compute(option, mbs, first, end)

    def option_speeds(self, mbs: int) -> tuple[dict[tuple[int, ...], float], list[tuple[int, ...]]]:
        """Each option's whole-model time at `mbs`, and the options slowest first."""
        cached = self._speeds.get(mbs)
        if cached is None:
            whole = self.model.blocks + 2
            speed = {o: self.option_time(o, mbs, 0, whole) for o in self.stage_options()}
            cached = (speed, sorted(speed, key=lambda o: (-speed[o], o)))
            self._speeds[mbs] = cached
        return cached

    def hosts(self, mbs: int, dp: int) -> list[Option]:
        """The options with room for one stage of D replicas, slowest first."""
        key = (mbs, dp)
        hosts = self._host_lists.get(key)
        if hosts is None:
            hosts = [o for o in self.option_speeds(mbs)[1] if self._option_stages(o, dp) >= 1]
            self._host_lists[key] = hosts
        return hosts

    def _option_pools(self, option: tuple[int, ...]) -> frozenset[int]:
        """The pools the option's kinds draw on."""
        return self._pools_and_room(option)[0]

    def _option_room(self, option: tuple[int, ...]) -> int:
        """The devices the option's pools hold together."""
        return self._pools_and_room(option)[1]

    def _pools_and_room(self, option: tuple[int, ...]) -> tuple[frozenset[int], int]:
        held = self._pools_of.get(option)
        if held is None:
            pools = frozenset(self.model.kinds[k].pool for k in option)
            held = self._pools_of[option] = (pools, sum(self.capacity[p] for p in pools))
        return held

    def _option_stages(self, option: tuple[int, ...], dp: int) -> int:
        """How many stages of D replicas the option's pools can hold alone."""
        room = self._stage_room.get(option)
        if room is None:
            room = (
                min(self._option_room(option), self.total_devices),
                self.model.kinds[option[0]].tp,
            )
            self._stage_room[option] = room
        return room[0] // (dp * room[1])

    def _rooms(self, slow: Option, fast: Option) -> tuple[int, int, int]:
        """Devices the slow option's pools hold, the fast one's, and both together within
        max_gpus."""
        rooms = self._pair_rooms.get((slow, fast))
        if rooms is None:
            pools_slow, room_slow = self._pools_and_room(slow)
            pools_fast, room_fast = self._pools_and_room(fast)
            if pools_slow.isdisjoint(pools_fast):
                both = room_slow + room_fast
            else:
                both = sum(self.capacity[p] for p in pools_slow | pools_fast)
            rooms = (room_slow, room_fast, min(self.total_devices, both))
            self._pair_rooms[slow, fast] = rooms
        return rooms

    def _facts(self, option: Option) -> tuple[int, int, float, int]:
        """(TP, its pool or -1 for a region-wide option, the cheapest price per device-second
        among its pools, the pool's devices per node)."""
        facts = self._option_facts.get(option)
        if facts is None:
            model = self.model
            pools = [model.pools[p].pool for p in sorted(self._option_pools(option))]
            facts = (
                model.kinds[option[0]].tp,
                model.kinds[option[0]].pool if len(option) == 1 else -1,
                min(p.price for p in pools),
                pools[0].gpus_per_node,
            )
            self._option_facts[option] = facts
        return facts
