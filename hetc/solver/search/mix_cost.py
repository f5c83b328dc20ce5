"""A cost floor that couples time and price per set of device types (`MixCost.cost`).

Time x (the cheapest price) and the work priced layer by layer each take time and price at
their separate minima: the fast kinds are the dear ones, and a plan that rents one node of
the cheap kind still pays for the whole node. For each set of device types a plan may rent,
its time on those types alone times their least rate in whole nodes bounds its cost; the
least over the sets bounds every plan of the shape. Listed only up to `MIX_TYPES` types.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from operator import sub

from hetc.costmodel.planning import PlanningModel
from hetc.solver.search.ring_frontier import frontier

MIX_TYPES = 6
"""`MixCost` lists the sets of at most this many device types (63 sets); beyond, no floor."""


class MixCost:
    """The floor of `cost` and its per-set terms, cached."""

    def __init__(self, model: PlanningModel, capacity: Sequence[int], min_tp: int) -> None:
        self.model = model
        self.capacity = capacity
        """Devices each pool may rent (`Incumbent.capacity`)."""
        self.min_tp = min_tp
        """The least TP of any kind: each replica takes at least this many devices."""
        self._types: list[tuple[str, float, list[tuple[float, int]]]] | None = None
        self._rates: list[tuple[float, list[tuple[float, int]]]] | None = None
        self._times: dict[tuple[int, int], list[tuple[float, float, float]]] = {}
        self._rings: dict[int, list[float]] = {}
        self._pairs: dict[tuple[int, int], list[tuple[int, int]]] | None = None

    def cost(
        self, mbs: int, stages: int, dp: int, sync: float, send: float, tp: int, cap: float
    ) -> float:
        """Cost >= the least, over the sets X of device types a candidate of (m, P, D) may
        rent, of (its time on X alone) x (X's least rental rate in whole nodes).

        Time: in each stage some replica has TP at most `tp` (`Bounds.affordable_tp`: the
        stage's D replicas share what the other stages leave) and the stage takes at least
        that replica's time, so the fill is at least F_X = the sum over layers of the
        fastest kind of X of TP at most `tp`, plus 2 (P - 1) least sends `send`; the
        straggler at least F_X / P and X's slowest such layer plus a send. The sync and
        optimizer step max_i (y_i + u_i) is at least `sync` (`Bounds.sync_bound`), at least
        max_i y_i >= X's cheapest whole-model ring over D ranks / P (the largest stage holds
        1/P of the gradients, as there), and at least the mean over stages, (ring / P +
        U_X) / P, with U_X the least optimizer step of the whole model on such kinds (1/D
        of it under ZeRO 1 and 2): T >= F_X + (ceil(B / (m D)) - 1) S_X + Y_X.

        Rate: whole nodes (`PlanningModel.estimate`), so at least one node of each type of
        X at the type's cheapest node price, and at least D x P x (least TP) devices, each
        at its pool's price, the cheapest pools of X first within what each holds.

        Both factors are lower bounds of non-negative numbers, so their product bounds the
        cost on X, and the least over every X bounds every candidate. A set whose time
        bound exceeds `cap` (the throughput floor's, infinite without one) holds no
        feasible candidate and is left out. Where the fastest
        type is the dear one, this prices the fast fill at the fast type and the cheap rate
        at the slow one, which time x (the cheapest price) cannot. Infinite where no X
        holds the devices; 0 beyond `MIX_TYPES` types (too many sets to list)."""
        rates = self._rates_of()
        if not rates:
            return 0.0
        times = self._times_of(mbs, tp)
        rings = self._rings_of(dp)
        slots = -(-(self.model.batch // mbs) // dp)
        need = dp * stages * self.min_tp
        least = math.inf
        zero = self.model.spec.training.zero_stage >= 1
        for (nodes, prices), (compute, worst, update), ring in zip(
            rates, times, rings, strict=True
        ):
            if compute == math.inf:
                continue
            rate, left = 0.0, need
            for price, devices in prices:
                take = devices if devices < left else left
                rate += take * price
                left -= take
                if left <= 0:
                    break
            if left > 0:
                continue
            fill = compute + 2 * (stages - 1) * send
            straggler = max(fill / stages, worst + send)
            steps = ring / stages + (update / dp if zero else update)
            t = fill + (slots - 1) * straggler + max(sync, ring / stages, steps / stages)
            if t > cap:
                continue
            value = t * max(rate, nodes)
            if value < least:
                least = value
        return least

    def _types_of(self) -> list[tuple[str, float, list[tuple[float, int]]]]:
        """The device types of the pools that hold devices: (name, cheapest node price,
        (price per device, devices) of each of its pools); empty beyond `MIX_TYPES`."""
        if self._types is None:
            types: dict[str, tuple[float, list[tuple[float, int]]]] = {}
            for slot, devices in zip(self.model.pools, self.capacity, strict=True):
                if devices > 0:
                    node = slot.pool.gpus_per_node * slot.pool.price
                    old, held = types.get(slot.pool.device, (math.inf, []))
                    types[slot.pool.device] = (min(old, node), [*held, (slot.pool.price, devices)])
            self._types = (
                [(name, node, held) for name, (node, held) in types.items()]
                if len(types) <= MIX_TYPES
                else []
            )
        return self._types

    def _rates_of(self) -> list[tuple[float, list[tuple[float, int]]]]:
        """For each non-empty set X of `_types_of` (bit i of the set's index + 1 for type
        i): (the sum of its cheapest node prices, its pools' (price, devices), cheapest
        first)."""
        if self._rates is None:
            types = self._types_of()
            self._rates = []
            for mask in range(1, 1 << len(types)):
                chosen = [types[i] for i in range(len(types)) if mask >> i & 1]
                prices = sorted(held for c in chosen for held in c[2])
                self._rates.append((sum(c[1] for c in chosen), prices))
        return self._rates

    def _times_of(self, mbs: int, tp: int) -> list[tuple[float, float, float]]:
        """For each set X of `_rates_of`: (F_X, X's slowest layer), each layer on the
        fastest kind of X of TP at most `tp`, infinite where X has no such kind; and
        the sum over layers of the least optimizer step on such a kind."""
        times = self._times.get((mbs, tp))
        if times is None:
            model = self.model
            n = model.blocks + 2
            rows, steps = [], []
            for name, _, _ in self._types_of():
                tables = [
                    model.tables(k.device, k.tp, mbs).update
                    for k in model.kinds
                    if k.device == name and k.tp <= tp
                ]
                per_layer = [list(map(sub, t[1:], t[:-1])) for t in tables] or [[0.0] * n]
                steps.append([min(col) for col in zip(*per_layer, strict=True)])
                kinds = [
                    model.layer_compute(k.device, k.tp, mbs)
                    for k in model.kinds
                    if k.device == name and k.tp <= tp
                ]
                rows.append(
                    [min(col) for col in zip(*kinds, strict=True)] if kinds else [math.inf] * n
                )
            times = []
            for mask in range(1, 1 << len(rows)):
                chosen = [i for i in range(len(rows)) if mask >> i & 1]
                layers = [min(col) for col in zip(*(rows[i] for i in chosen), strict=True)]
                step = [min(col) for col in zip(*(steps[i] for i in chosen), strict=True)]
                times.append((sum(layers), max(layers), sum(step)))
            self._times[mbs, tp] = times
        return times

    def _rings_of(self, dp: int) -> list[float]:
        """For each set X of `_rates_of`: the least whole-model ring over `dp` ranks
        between two kinds of X (one kind with itself included), 0 below two ranks."""
        rings = self._rings.get(dp)
        if rings is None:
            model = self.model
            whole = (0, model.blocks, True, True)
            pair: dict[tuple[int, int], float] = {}
            if dp > 1:
                for key, links in self._ring_pairs().items():
                    pair[key] = min(model.ring(a, b, whole, dp) for a, b in links)
            rings = []
            for mask in range(1, 1 << len(self._types_of())):
                rings.append(
                    min(
                        (r for (i, j), r in pair.items() if mask >> i & 1 and mask >> j & 1),
                        default=0.0,
                    )
                )
            self._rings[dp] = rings
        return rings

    def _ring_pairs(self) -> dict[tuple[int, int], list[tuple[int, int]]]:
        """Per pair of device types of `_types_of` (i <= j), the pairs of kinds between them
        that may hold the least ring at some D: one per distinct ring (its link, flows and
        bytes per rank), less those another beats at every D (`ring_frontier`)."""
        if self._pairs is None:
            model = self.model
            names = {name: i for i, (name, _, _) in enumerate(self._types_of())}
            seen: dict[tuple[int, int], dict[tuple[object, ...], tuple[int, int]]] = {}
            (kept,) = model.classes.keep(tuple(k.index for k in model.kinds))
            for x, a in enumerate(kept):
                for b in kept[x:]:
                    ka, kb = model.kinds[a], model.kinds[b]
                    ta, tb = names.get(ka.device), names.get(kb.device)
                    if ta is None or tb is None:
                        continue
                    flows = max(ka.tp, kb.tp)
                    link = (model.measured_link(ka.pool, kb.pool, flows), flows, min(ka.tp, kb.tp))
                    seen.setdefault((min(ta, tb), max(ta, tb)), {}).setdefault(link, (a, b))
            self._pairs = {
                key: frontier(model, list(links.values())) for key, links in seen.items()
            }
        return self._pairs
