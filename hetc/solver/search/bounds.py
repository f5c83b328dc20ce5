"""Lower bounds on the objective of a shape (m, P, D) and of a range of D of (m, P): the
search visits shapes in order of them and stops at the first that exceeds the incumbent.

The bound: iteration time >= F_lb + (m - 1) S_lb + Y_lb, where F_lb sums each layer's
fastest time on any affordable kind; S_lb = max(F_lb / P, the slowest such layer, the least
time of ceil(L / P) consecutive blocks (one stage holds that many), D x W / G_eff) with W
the least device-seconds of the model and G_eff the devices weighted by how fast each pool
can be relative to the best (`device_work`: device-time conservation); Y_lb the cheapest
ring over D ranks of 1/P of the gradients, at least 2 (D - 1) link latencies, over links
that cross zones or regions where D replicas cannot stay inside one, plus the least
optimizer step of the largest stage (`sync_bound`, `step_floor`). With
P > 1 every boundary sends at least the least send s between any two pools, both ways in
the fill, and each stage's period adds its sends to its compute: F_lb gains 2 (P - 1) s,
each floor of S_lb gains s, and from P = 3 the device-time one 2 s less what the two end
stages' devices can absorb (`period_terms`). Each (m, P) enters the order under a bound on
all its D (`range_bound`). Cost >= that time x (D x P x least TP devices at the cheapest
price), and >= each layer's least TP x time x price over the kinds, for ceil(B / (m D)) x D
microbatches (`work_cost`), plus the device-seconds every device must idle, waiting on the
other stages, their sends and the sync, at the cheapest price (`idle_cost`); and >= the
least over the sets of device types of the time on them alone x their rate in whole nodes
(`mix_cost`, module `mix_cost`).

F + (m - 1) S is also at least the replica-speed floor (`replica_slots`: a stage runs at
its slowest replica's pace and needs D of them), and within the `kind-profiles` space its
two-option form; the sync bound counts the shares of the gradients the largest and the end
stages hold and the tied all-reduce (`stage_shares`); the straggler floor counts the end
stages' token table and head (`windows`).

Two relaxations on whole blocks and whole TP degrees (`cover.StageCover`) cut further: no
(m, P) has more pipelines than its stages' memory lets the devices hold (`reach.last_dp`);
and on one device type, for max_throughput, a shape is searched only if P stages of at
least one block each could all run within the largest straggler with which it could still
win, on the devices there are (`may_win`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from operator import sub

from hetc.costmodel.network import FLAT
from hetc.costmodel.planning import PlanningModel, ReplicaKind
from hetc.solver.cover import StageCover
from hetc.solver.search.incumbent import SearchOptions
from hetc.solver.search.mix_cost import MixCost
from hetc.solver.search.replica_slots import ReplicaSlots
from hetc.solver.search.ring_frontier import beaten, flat_terms
from hetc.solver.search.stage_shares import StageShares
from hetc.solver.search.windows import Windows
from hetc.solver.search.work import SHAPE_BOUND

SHAPES_FLOOR_POPS = 4096
"""Entries `Bounds.shapes_floor` pops at most: its work stays bounded on the largest specs."""

RANGE_SPAN = 8
"""A range of D of (m, P) of at most this many D is listed shape by shape when reached, a
wider one split in two under their own range bounds: by the driver's best-first order
(`Search._pop_shape`) and by `Bounds.shapes_floor`, the same trade of one `range_bound` per
half against one `shape_bounds` per D; it changes the work, never the result."""


class Bounds(Windows):
    """Lower bounds on the objective of shapes and ranges of shapes."""

    def __init__(self, model: PlanningModel, options: SearchOptions) -> None:
        super().__init__(model, options)
        self._layer_best: dict[tuple[int, int], list[float]] = {}
        self._sigma_order: dict[int, list[int]] = {}
        self._sync_rings: dict[
            int, tuple[float, float, tuple[int, int], tuple[tuple[float, float], ...]]
        ] = {}
        self._ring_pairs: list[tuple[int, int, int, float]] | None = None
        self._frontier: list[tuple[int, int, int, float]] | None = None
        self._group_list: list[tuple[float, int, int]] | None = None
        zones: dict[str, int] = {}
        regions: dict[str, int] = {}
        for slot, devices in zip(model.pools, self.capacity, strict=True):
            zones[slot.zone.name] = zones.get(slot.zone.name, 0) + devices
            regions[slot.zone.region] = regions.get(slot.zone.region, 0) + devices
        self._locality_capacity = (list(zones.values()), list(regions.values()))
        """Devices per zone and per region, for `sync_terms`."""
        self._work: dict[int, tuple[list[float], list[float]]] = {}
        self._cheapest = min((slot.pool.price for slot in model.pools), default=0.0)
        """USD per device-second of the cheapest pool: rate >= devices x this."""
        self._min_tp = min((k.tp for k in model.kinds), default=1)
        self._shape_terms: dict[tuple[int, int], tuple[float, float, float, float]] = {}
        self._periods: dict[
            tuple[int, int, int], tuple[float, float, tuple[tuple[float, float], ...], float]
        ] = {}
        self._least_sends: dict[int, float] = {}
        self._work_costs: dict[int, float] = {}
        self._price_order: list[tuple[float, int, int]] | None = None
        self._flat_links: bool | None = None
        self._update: float | None = None
        self.mixes = MixCost(model, self.capacity, self._min_tp)
        self.slots = ReplicaSlots(model, self.capacity, self.total_devices)
        self.shares = StageShares(model)
        self.cover = StageCover(
            model, self.capacity, self.total_devices, lambda mbs: self.device_work(mbs)[1]
        )

    def layer_best(self, mbs: int, max_tp: int) -> list[float]:
        """Prefix sums over the layer sequence of each layer's fastest time on any kind of TP
        at most `max_tp` (the largest a shape can afford in even one stage)."""
        key = (mbs, self.tp_cap(max_tp))
        if key not in self._layer_best:
            model = self.model
            kinds = [k for k in model.kinds if k.tp <= key[1]] or list(model.kinds)
            rows = {model.layer_compute(k.device, k.tp, mbs) for k in kinds}
            prefix = [0.0]
            for least in map(min, *rows) if len(rows) > 1 else next(iter(rows)):
                prefix.append(prefix[-1] + least)
            self._layer_best[key] = prefix
        return self._layer_best[key]

    def device_work(self, mbs: int) -> tuple[list[float], list[float]]:
        """Prefix sums of each layer's least device-seconds (TP x time) on any kind, and each
        pool's speed factor sigma_p = max over layers of (least device-seconds) / (the pool's
        device-seconds), so that the pool's device-seconds >= least / sigma_p on every layer.

        Device-time conservation: a replica of TP tau on pool p running layers R for at most
        the straggler period S does tau x S >= its device-seconds >= W(R) / sigma_p, so summing
        over all D replicas of every stage, S x sum_p sigma_p x devices_p >= D x W(model):
        S >= D x W / G_eff with G_eff the sigma-weighted devices, best pools first. Slow
        devices count for what they can do."""
        if mbs not in self._work:
            model = self.model
            n = model.blocks + 2
            per_pool = []
            of_pool: dict[int, list[ReplicaKind]] = {}
            for k in model.kinds:
                of_pool.setdefault(k.pool, []).append(k)
            for slot in model.pools:
                rows = [
                    [k.tp * t for t in model.layer_compute(k.device, k.tp, mbs)]
                    for k in of_pool.get(slot.index, ())
                ]
                per_pool.append(
                    [min(col) for col in zip(*rows, strict=True)] if rows else [math.inf] * n
                )
            least = [min(pool[i] for pool in per_pool) for i in range(n)]
            prefix = [0.0]
            for value in least:
                prefix.append(prefix[-1] + value)
            sigma = [
                max((least[i] / pool[i] if pool[i] > 0 else 1.0) for i in range(n))
                for pool in per_pool
            ]
            self._work[mbs] = (prefix, sigma)
        return self._work[mbs]

    def effective_devices(self, mbs: int, used: Sequence[int], extra: int = 0) -> float:
        """G_eff still free: sigma-weighted devices beyond `used` per pool (and `extra`
        devices placed somewhere, taken from the fastest pools to stay a bound), fastest pools
        first, at most max_gpus devices in all."""
        _, sigma = self.device_work(mbs)
        order = self._sigma_order.get(mbs)
        if order is None:
            order = sorted(range(len(sigma)), key=lambda i: -sigma[i])
            self._sigma_order[mbs] = order
        left = self.total_devices - sum(used) - extra
        skip = extra
        total = 0.0
        for i in order:
            free = self.capacity[i] - used[i]
            if skip:
                taken = min(free, skip)
                skip -= taken
                free -= taken
            take = free if free < left else left
            if take > 0:
                total += sigma[i] * take
                left -= take
            if left <= 0:
                break
        return total

    def affordable_tp(self, stages: int, dp: int) -> int:
        """The largest TP one stage can use when every other stage takes the fewest devices."""
        return (self.total_devices - (stages - 1) * dp * self._min_tp) // dp

    def sync_bound(
        self, stages: int, dp: int, whole_ring: bool = True, steps: bool = True
    ) -> float:
        """max_i (y_i + u_i) >= the cheapest whole-model ring over D ranks, divided by P (the
        ring time is affine in bytes with a non-negative intercept, and the mean stage holds
        1/P of the gradients), and >= 2 (D - 1) link latencies, which a ring pays whatever
        its bytes, plus the mean optimizer step (`step_floor`). Where the rings must cross
        zones (or regions), only links that cross count: a stage of D replicas needs at
        least D x (least TP) devices, so when no zone has that many every stage's ring
        crosses zones, and when the zones cannot hold P such stages whole at least one does
        (`sync_terms`), the latencies and that stage's share of the ring across them
        (`StageShares.least`). The largest stage's ring is at least its share of that ring,
        and the first stage's at least the end share plus the tied embedding's all-reduce,
        which it also waits for (`StageShares`; the tied all-reduce alone with one
        pipeline).
        Without `whole_ring`, no term that grows with the bytes (the latency, zone and tied
        terms), and without `steps` no step (`range_sync`)."""
        step = self.step_floor(stages, dp) if steps else 0.0
        tied = self.shares.tied() if stages > 1 else 0.0
        if dp < 2:
            return max(step, tied)
        terms = self._sync_rings.get(dp)
        if terms is None:
            terms = self._sync_rings[dp] = self.sync_terms(dp)
        whole, latency, (whole_zones, whole_regions), (zone, region) = terms
        crossing = region if whole_regions < stages else zone if whole_zones < stages else None
        if not whole_ring:
            return max(max(latency + step, crossing[1] if crossing else 0.0), tied)
        largest, end = self.shares.shares(stages)
        some = 0.0
        if crossing is not None:
            some = max(crossing[1], crossing[0] * self.shares.least(stages))
        # two arguments at a time, which a compiled build inlines (setup.py)
        return max(
            max(max(whole / stages, latency) + step, some),
            max(whole * largest, whole * end + tied),
        )

    def step_floor(self, stages: int, dp: int) -> float:
        """max_i u_i >= this, the optimizer step a stage's sync ends with: stage i steps
        at least its layers' least update time over the kinds (a mixed stage waits for its
        slowest), so the P stages' steps sum to at least U, each layer's least update over
        every kind and microbatch size summed, and the largest is at least U / P; under
        ZeRO 1 to 3 each replica steps 1/D of it (`PlanningModel.update_time`). It adds to
        the ring terms of `sync_bound`: every stage pays 2 (D - 1) latencies, and the mean
        of the rings' whole-model term plus the mean step bounds the largest y_i + u_i."""
        if self._update is None:
            model = self.model
            rows = {
                tuple(map(sub, t.update[1:], t.update[:-1]))
                for mbs in model.microbatch_sizes()
                for k in model.kinds
                for t in (model.tables(k.device, k.tp, mbs),)
            }
            self._update = sum((min(column) for column in zip(*rows, strict=True)), 0.0)
        shards = dp if self.model.spec.training.zero_stage >= 1 else 1
        return self._update / (stages * shards)

    def range_sync(self, stages: int, dp: int) -> float:
        """A lower bound on `sync_bound(stages, D)` at every D >= `dp`. Its terms never fall
        as D grows: 2 (D - 1) link latencies, and the zones and regions hold fewer stages
        of D replicas; on flat-curve links a ring of D ranks takes 2 (D - 1) (latency +
        bytes / (D x rate)), which grows with D, so there the whole-model ring counts too,
        but not on a measured message-size curve, where smaller messages may go faster.
        The optimizer step (`step_floor`) counts only without ZeRO: with it, it falls as
        1 / D."""
        zero = self.model.spec.training.zero_stage >= 1
        if dp < 2:
            return self.sync_bound(stages, dp, steps=not zero)
        return self.sync_bound(stages, dp, whole_ring=self.flat_links(), steps=not zero)

    def flat_links(self) -> bool:
        """Whether every link a ring may run on has a flat message-size curve, so that a
        ring of the same bytes over more ranks never takes less time (`range_sync`)."""
        if self._flat_links is None:
            model = self.model
            self._flat_links = all(
                model.measured_link(
                    model.kinds[a].pool,
                    model.kinds[b].pool,
                    max(model.kinds[a].tp, model.kinds[b].tp),
                )[1]
                is FLAT
                for a, b, _, _ in self.distinct_rings()
            )
        return self._flat_links

    def sync_terms(
        self, dp: int
    ) -> tuple[float, float, tuple[int, int], tuple[tuple[float, float], ...]]:
        """For `sync_bound` at D: the least whole-model ring and ring latency over the links
        every stage's ring must cross; how many stages of D x (least TP) devices the zones,
        and the regions, hold whole; the least whole-model ring and ring latency across
        zones, and across regions."""
        whole = (0, self.model.blocks, True, True)
        least = [(math.inf, math.inf)] * 3
        for a, b, level, latency in self.ring_frontier():
            ring = self.model.ring(a, b, whole, dp)
            for at in range(level + 1):
                w, lat = least[at]
                least[at] = (min(w, ring), min(lat, 2 * (dp - 1) * latency))
        need = dp * self._min_tp
        zones, regions = self._locality_capacity
        every = 2 if need > max(regions) else 1 if need > max(zones) else 0
        held = (sum(u // need for u in zones), sum(u // need for u in regions))
        return (*least[every], held, (least[1], least[2]))

    def distinct_rings(self) -> list[tuple[int, int, int, float]]:
        """One kind pair per distinct ring, with the locality level its link crosses (0 in
        a zone, 1 between zones of a region, 2 between regions) and the link's latency: a
        ring depends on the two kinds only through their link (with its curve and NIC), the
        flows on it (the larger TP) and the bytes per rank (the smaller TP); a ring between
        two kinds is the same either way round. Only the kinds of zones that differ are
        paired (`PoolClasses.keep`): the others add no ring of their own."""
        if self._ring_pairs is None:
            model = self.model
            seen: dict[tuple[object, ...], tuple[int, int, int, float]] = {}
            (kept,) = model.classes.keep(tuple(k.index for k in model.kinds))
            for x, a in enumerate(kept):
                ka = model.kinds[a]
                za = model.pools[ka.pool].zone
                for b in kept[x:]:
                    kb = model.kinds[b]
                    zb = model.pools[kb.pool].zone
                    level = 0 if za.name == zb.name else 1 if za.region == zb.region else 2
                    flows = max(ka.tp, kb.tp)
                    link = model.measured_link(ka.pool, kb.pool, flows)
                    seen.setdefault(
                        (link, flows, min(ka.tp, kb.tp), level), (a, b, level, link[0].latency)
                    )
            self._ring_pairs = list(seen.values())
        return self._ring_pairs

    def ring_frontier(self) -> list[tuple[int, int, int, float]]:
        """`distinct_rings` less those another one at the same or a farther locality level
        beats at every D: on flat-curve links a ring over D ranks takes 2 (D - 1) (latency
        + bytes / (D x rate)), so a link with no more latency and no more bytes per rate is
        never slower, and `sync_terms` takes it for every level it takes the other one
        (each least is over the links crossing at least that level)."""
        if self._frontier is None:
            model = self.model
            rings = self.distinct_rings()
            terms = [flat_terms(model, a, b) for a, b, _, _ in rings]
            kept = []
            for i, (_, _, level, _) in enumerate(rings):
                farther = [j for j, other in enumerate(rings) if other[2] >= level]
                if not beaten(terms, i, farther):
                    kept.append(rings[i])
            self._frontier = kept
        return self._frontier

    def shape_bounds(
        self, mbs: int, stages: int, last: int, first: int = 1, within: bool = False
    ) -> list[float]:
        """Lower bounds on the objective of every candidate of shape (m, P, D) for
        D = first..last (the module docstring), sharing what does not depend on D.
        For cost, the larger of that time on the fewest devices and `work_cost` (for
        ceil(T / D) x D microbatch slots: iteration >= F + m1 S + Y >= m t_i + (F - t_i) + Y
        on every replica) + `idle_cost` (its F - t_i + Y). A shape whose bounds already
        break the budget or the throughput floor gets an infinite one. F + m1 S is at least
        the replica-speed floor (`ReplicaSlots.floor`), and `within` the `kind-profiles`
        space, where that approximation is on, at least its two-option floor
        (`ReplicaSlots.profile_floor`): a bound on that space only, for the search's own
        order and its gap within the approximations, never for the bound over all plans."""
        model = self.model
        total = model.batch // mbs
        throughput = self.objective == "max_throughput"
        unit = stages * self._min_tp * self._cheapest
        costly = not throughput or self.budget is not None
        floor = self.work_cost(mbs) if costly else 0.0
        bounds = []
        incumbent = self.bound()
        devices, reserved = self.total_devices, (stages - 1) * self._min_tp
        profiled = within and "kind-profiles" in self.approx
        # the terms depend on D only through the largest affordable TP degree (`affordable_tp`),
        # which never grows with D: recomputed only when it falls below the current one
        cap = -1
        fill = static = send = 0.0
        lines: tuple[tuple[float, float], ...] = ()
        self.tally[SHAPE_BOUND] += max(0, last - first + 1)
        for dp in range(first, last + 1):
            max_tp = (devices - reserved * dp) // dp
            if max_tp < cap or cap < 0:
                cap = self.tp_cap(max_tp)
                fill, static, lines, send = self.period_terms(mbs, stages, max_tp)
            straggler = static
            for slope, at_zero in lines:
                if slope * dp + at_zero > straggler:
                    straggler = slope * dp + at_zero
            slots = -(-total // dp)
            t = fill + (slots - 1) * straggler
            if t <= incumbent or not throughput:
                low = straggler - send
                paced = self.slots.floor(mbs, stages, dp, slots - 1, send, low)
                if paced > t:
                    t = paced
                if profiled and t <= incumbent:
                    paced = self.slots.profile_floor(mbs, stages, dp, slots - 1, send, low)
                    if paced > t:
                        t = paced
            # every pipeline's devices are paid for ceil(T / D) microbatches' work; they
            # wait at least the least send in each of the other slots, and on the others'
            # sends in the fill: sum_i (F - t_i) = (P - 1) F + 2 sum_i s_i
            paid = floor * (slots * dp / total) if floor else 0.0
            waits = (slots - 1 + 2 * (stages - 1) / stages) * send
            # already beaten without the sync: a weaker bound will do, and saves the rings
            early = (
                t
                if throughput
                else max(t * dp * unit, paid + self.idle_cost(stages, dp, fill, waits))
            )
            if early > incumbent:
                bounds.append(early)
                continue
            sync = self.sync_bound(stages, dp)
            t += sync
            idle = self.idle_cost(stages, dp, fill, sync + waits) if floor else 0.0
            mix = self.mix_cost(mbs, stages, dp, sync) if costly else 0.0
            cost = max(t * dp * unit, paid + idle, mix)
            if self.violates(t, cost / t if t > 0 else 0.0):
                bounds.append(math.inf)
            else:
                bounds.append(t if throughput else cost)
        return bounds

    def time_terms(self, mbs: int, stages: int, dp: int) -> tuple[float, float, float]:
        """(F_lb, S_lb, Y_lb) of shape (m, P, D): the terms whose F_lb + (ceil(T / D) - 1)
        S_lb + Y_lb is `shape_bounds`' iteration time, each a lower bound on the same term
        of every candidate of the shape (bench/bound_tightness.py compares them one by
        one)."""
        max_tp = self.affordable_tp(stages, dp)
        fill, static, lines, _ = self.period_terms(mbs, stages, max_tp)
        straggler = max(static, *(slope * dp + at_zero for slope, at_zero in lines))
        return fill, straggler, self.sync_bound(stages, dp)

    def idle_cost(self, stages: int, dp: int, fill: float, sync: float) -> float:
        """USD the rented devices cost while computing nothing, which `work_cost` leaves out:
        a device of stage i computes at most (m1 + 1) t_i of the iteration's F + m1 S + Y
        (S >= t_i), so it idles for at least the other stages' times and the sync. Over at
        least D x (least TP) devices per stage, that is D x (least TP) x ((P - 1) F + P Y)
        device-seconds, with F and Y at their lower bounds, at the cheapest price."""
        return self._cheapest * dp * self._min_tp * ((stages - 1) * fill + stages * sync)

    def mix_cost(self, mbs: int, stages: int, dp: int, sync: float) -> float:
        """Cost >= `MixCost.cost` of (m, P, D) (the least over the sets of device types of
        the time on them alone x their rental rate in whole nodes), with the least send and
        this shape's affordable TP; only the sets that can meet the throughput floor."""
        send = self.least_send(mbs) if stages > 1 else 0.0
        tp = self.tp_cap(self.affordable_tp(stages, dp)) or self._tp_degrees[-1]
        cap = math.inf if self.time_cap is None else self.time_cap
        return self.mixes.cost(mbs, stages, dp, sync, send, tp, cap)

    def period_terms(
        self, mbs: int, stages: int, max_tp: int
    ) -> tuple[float, float, tuple[tuple[float, float], ...], float]:
        """(F_lb, the straggler floor that does not depend on D, lines (a, b) with S >= a D +
        b, the least send s) of P stages with TP at most `max_tp`, for `shape_bounds` and
        `range_bound`. With P > 1 every stage sends to a neighbour and each of the P - 1
        boundaries is crossed both ways in the fill, so F >= F_lb + 2 (P - 1) s and S >= t_i
        + s on every stage: S >= F / P, the worst layer + s, the ceil(L / P)-block window +
        s, and each end stage's least time + s (`least_ends`). Device-time conservation
        over t_i <= S - sends_i: with g_i the sigma-weighted devices of stage i
        (`device_work`), S x sum g_i >= D x W + sum g_i x sends_i, and
        sum g_i <= G_eff, so S >= D x W / G_eff + s. From P = 3 on, the inner stages send
        both ways and each end stage holds at most D x TP_max sigma-weighted devices (sigma
        <= 1, TP_max the largest TP of any kind: one replica may take more than the
        affordable TP where a stage mixes TP degrees), so sum g_i x sends_i >= s (2 sum g_i
        - 2 D TP_max), and where W > 2 s TP_max also S >= D (W - 2 s TP_max) / G_eff + 2 s
        (falling in sum g_i, so least at G_eff)."""
        tp = self.tp_cap(max_tp)
        terms = self._periods.get((mbs, stages, tp))
        if terms is None:
            fill, worst_layer, work, free = self.terms(mbs, max_tp)
            send = self.least_send(mbs) if stages > 1 else 0.0
            fill += 2 * (stages - 1) * send
            blocks = -(-self.model.blocks // stages)
            window = self.least_window(mbs, max_tp, blocks)
            if stages > 1:
                window = max(window, self.least_ends(mbs, max_tp))
            static = max(fill / stages, worst_layer + send, window + send)
            lines: tuple[tuple[float, float], ...] = ()
            if free > 0:
                lines = ((work / free, send),)
                inner = work - 2 * send * self._tp_degrees[-1]
                if stages > 2 and inner > 0:
                    lines += ((inner / free, 2 * send),)
            terms = (fill, static, lines, send)
            self._periods[mbs, stages, tp] = terms
        return terms

    def least_send(self, mbs: int) -> float:
        """The least time a microbatch's activations take between any two pools (one pool
        with itself included): every boundary's s_i is at least this."""
        send = self._least_sends.get(mbs)
        if send is None:
            (kept,) = self.model.classes.keep(tuple(k.index for k in self.model.kinds))
            pools = sorted({self.model.kinds[k].pool for k in kept})
            send = min((self.model.send(a, b, mbs) for a in pools for b in pools), default=0.0)
            self._least_sends[mbs] = send
        return send

    def terms(self, mbs: int, max_tp: int) -> tuple[float, float, float, float]:
        """(fill, slowest layer, least device-seconds of the model, G_eff with nothing used)
        for `shape_bounds`, cached: the first two depend on the TP cap only through the
        largest TP degree under it."""
        tp = self.tp_cap(max_tp)
        terms = self._shape_terms.get((mbs, tp))
        if terms is None:
            prefix = self.layer_best(mbs, max_tp)
            terms = (
                prefix[-1],
                max(map(sub, prefix[1:], prefix[:-1])),
                self.device_work(mbs)[0][-1],
                self.effective_devices(mbs, [0] * len(self.capacity)),
            )
            self._shape_terms[mbs, tp] = terms
        return terms

    def work_cost(self, mbs: int) -> float:
        """Cost >= what the computing itself costs, whatever the layout: a device runs one
        thing at a time and is paid for at least while it does, so each layer of each of
        the B / m microbatches costs at least the least TP x time x price over the kinds that
        could run it. Layer by layer, not the model at one rate: a slow device that is
        cheap on the token table (V100 beside A100) must not price the blocks."""
        cost = self._work_costs.get(mbs)
        if cost is None:
            model = self.model
            rows = [
                [
                    k.tp * t * model.pools[k.pool].pool.price
                    for t in model.layer_compute(k.device, k.tp, mbs)
                ]
                for k in model.kinds
            ]
            per_layer = [min(col) for col in zip(*rows, strict=True)]
            cost = self._work_costs[mbs] = (model.batch // mbs) * sum(per_layer, 0.0)
        return cost

    def rate_floor(self, forced: Sequence[int], others: int) -> float:
        """USD per second a candidate pays at least when `forced[p]` of its devices are on
        pool p and `others` more on pools not yet known: the forced devices' whole nodes
        (`PlanningModel.estimate` rents whole nodes), and each other device either in the
        slack of those nodes (free) or at least its pool's price, cheapest pools first
        within what each still holds (whole nodes relaxed to devices there). Never below
        the devices at the cheapest price."""
        order = self._price_order
        if order is None:
            pools = self.model.pools
            order = self._price_order = sorted(
                (slot.pool.price, slot.pool.gpus_per_node, i) for i, slot in enumerate(pools)
            )
        rate = 0.0
        slack = 0
        rooms = []
        for price, gpn, i in order:
            used = forced[i]
            rented = -(-used // gpn) * gpn
            rate += rented * price
            slack += rented - used
            rooms.append((price, self.capacity[i] - rented))
        left = others - slack
        for price, room in rooms:
            if left <= 0:
                break
            take = room if room < left else left
            if take > 0:
                rate += take * price
                left -= take
        return rate

    def objective_bound(self, t: float, rate: float) -> float:
        """The objective of a candidate whose iteration time is at least `t` and rental rate at
        least `rate` (USD per second) is at least this: the time, or for min_cost time x rate
        (both factors are lower bounds of non-negative numbers)."""
        if self.objective == "max_throughput":
            return t
        return t * rate

    def violates(self, t: float, rate: float, egress: float = 0.0) -> bool:
        """A lower bound already breaks the budget or the throughput floor."""
        if self.time_cap is not None and t > self.time_cap:
            return True
        return self.budget is not None and t * rate + egress > self.budget

    def may_win(self, mbs: int, stages: int, dp: int) -> bool:
        """The stage-cover check (`cover.StageCover`) at the largest straggler with which
        the shape could still beat the incumbent (or meet the throughput floor): F_lb +
        (m - 1) S + Y_lb within it, with the shape bound's F_lb and Y_lb. A relaxation (each
        stage's kinds on the convex hull of blocks over devices), so a shape it turns away
        has no candidate under that straggler. For max_throughput on one device type only:
        under min_cost the floor's straggler rarely binds, and with several device types no
        single weighting sees their quotas at once (what it saves: docs/planner.md, The
        search)."""
        m1 = -(-(self.model.batch // mbs) // dp) - 1
        if m1 < 1 or self.objective != "max_throughput" or not self.cover.one_device:
            return True
        limit = self.bound()
        if self.time_cap is not None and self.time_cap < limit:
            limit = self.time_cap
        if limit == math.inf:
            return True
        fill, _, _, send = self.period_terms(mbs, stages, self.affordable_tp(stages, dp))
        ceiling = (limit - fill - self.sync_bound(stages, dp)) / m1 - send
        return self.cover.may_run_under(mbs, stages, dp, ceiling)

    def shape_groups(self) -> list[tuple[float, int, int]]:
        """(bound, m, P) for every (microbatch, pipeline degree) that may hold a shape: a
        lower bound on `shape_bounds` over every D from 1 to `dp_cap` (`range_bound`), so
        on every shape of the group, since no D above the cap is feasible; groups that
        break the time cap or the budget at every D are left out (their bound is
        infinite). The driver's best-first order starts from these. Cached: the zone
        stripes order their seeds by the same bounds."""
        if self._group_list is None:
            model = self.model
            groups = []
            for mbs in model.microbatch_sizes():
                for stages in range(1, model.blocks + 1):
                    bound = self.range_bound(mbs, stages, 1, self.dp_cap(mbs, stages))
                    if bound < math.inf:
                        groups.append((bound, mbs, stages))
            self._group_list = groups
        return self._group_list

    def dp_cap(self, mbs: int, stages: int) -> int:
        """The most pipelines (m, P) may have by counting alone: each of D pipelines runs at
        least one microbatch of m samples, so D <= B / m, and each of its P stages holds at
        least one replica of at least the least TP degree, so P x D x (least TP) <= the
        devices the search may use. No shape above it can be feasible, so bounding ranges
        of D up to it loses nothing. The range bounds use it: `last_dp` costs memory
        lookups, and only the ranges the search lists need them."""
        return min(self.model.batch // mbs, self.total_devices // (stages * self._min_tp))

    def range_bound(
        self, mbs: int, stages: int, first: int, last: int, within: bool = False
    ) -> float:
        """A lower bound on `shape_bounds(mbs, stages, last, first)` at every D, in O(1):
        the terms at D = first (the largest affordable TP, so the least fill and straggler
        floor), the sync of every D from first on (`range_sync`), and (ceil(T / D) - 1)
        max(s, c D) at least both (T / D - 1) max(s, c D), which falls as D grows
        (s (T / D - 1) below the knee, c (T - D) above it), taken at D = last, and
        (ceil(T / last) - 1) max(s, c first). For cost, t D >= F D + (T - D) s is linear in
        D, so its least is at D = first or D = last; the work and idle costs are least at
        D = first. The replica-speed floors (`shape_bounds`, `within` as there) at the
        speeds of D = first, which only fall as D grows, and m1 at D = last. Infinite when
        every D breaks the time cap or the budget (or there is no D)."""
        if last < first:
            return math.inf
        self.tally[SHAPE_BOUND] += 1
        total = self.model.batch // mbs
        fill, static, lines, send = self.period_terms(
            mbs, stages, self.affordable_tp(stages, first)
        )
        m1 = -(-total // last) - 1
        t = fill + max(
            max(0.0, total / last - 1)
            * max(static, *(slope * last + at_zero for slope, at_zero in lines)),
            m1 * max(static, *(slope * first + at_zero for slope, at_zero in lines)),
        )
        t = max(t, self.slots.floor(mbs, stages, first, m1, send, static - send))
        if within and "kind-profiles" in self.approx:
            t = max(t, self.slots.profile_floor(mbs, stages, first, m1, send, static - send))
        if t == math.inf:
            return math.inf
        t += self.range_sync(stages, first)
        if self.time_cap is not None and t > self.time_cap:
            return math.inf
        if self.objective == "max_throughput" and self.budget is None:
            return t
        unit = stages * self._min_tp * self._cheapest
        device_time = min(
            first * fill + (total - first) * static, last * fill + (total - last) * static
        )
        # D x (ceil(T / D) - 1) >= T - D slots of waiting at least the least send
        waits = self._cheapest * self._min_tp * stages * send * max(0, total - last)
        paid = self.work_cost(mbs) + self.idle_cost(stages, first, fill, 0.0) + waits
        cost = max(device_time * unit, paid)
        if self.budget is not None and cost > self.budget:
            return math.inf
        return t if self.objective == "max_throughput" else cost

    def shapes_floor(self, pops: int = SHAPES_FLOOR_POPS) -> float:
        """A lower bound on every candidate of the planning model, for the bound over all
        plans when an approximation searched the shapes (`certificate`): the least shape
        bound over every (m, P, D), D up to what the stage cover lets memory hold
        (`cover.most_pipelines`, a relaxation of every layout, not the approximation's own
        cap). Found best first: each (m, P) enters under `range_bound` over its D, a lower
        bound on each of its shapes' bounds; the least entry popped is split in two halves
        under their own range bounds, or listed shape by shape once at most `RANGE_SPAN`
        wide. The first single shape popped has the least shape bound of all, since every
        entry left is below its shapes' bounds; after `pops` pops the least entry left is
        returned, still below every shape's bound. Infinite with no shape of finite bound
        (no candidate at all)."""
        heap: list[tuple[float, int, int, int, int]] = []
        for mbs in self.model.microbatch_sizes():
            for stages in range(1, self.model.blocks + 1):
                last = self.cover.most_pipelines(mbs, stages, self.dp_cap(mbs, stages))
                bound = self.range_bound(mbs, stages, 1, last)
                if bound < math.inf:
                    heap.append((bound, mbs, stages, 1, last))
        heapq.heapify(heap)
        for _ in range(pops):
            if not heap:
                return math.inf
            bound, mbs, stages, first, last = heapq.heappop(heap)
            if last < 0:
                return bound
            if last - first + 1 > RANGE_SPAN:
                middle = (first + last) // 2
                for low, high in ((first, middle), (middle + 1, last)):
                    half = max(bound, self.range_bound(mbs, stages, low, high))
                    if half < math.inf:
                        heapq.heappush(heap, (half, mbs, stages, low, high))
                continue
            shapes = self.shape_bounds(mbs, stages, last, first)
            for dp, shape in enumerate(shapes, start=first):
                if shape < math.inf:
                    heapq.heappush(heap, (max(bound, shape), mbs, stages, dp, -dp))
        return heap[0][0] if heap else math.inf
