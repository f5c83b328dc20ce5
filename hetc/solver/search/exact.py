"""The exact branch and bound within one shape (m, P, D), and why it loses nothing:

- Stages are chosen first to last (end block and kind set together), with the same bounds
  on what remains as the shape's (`bounds`); a partial candidate whose bound exceeds the
  incumbent, or breaks the budget or the throughput floor, is dropped. Every term of the
  model is a sum or a maximum of non-negative parts, so completing a prefix never lowers
  its bound.
- Dominance: two prefixes that end at the same block with the same last (and first) kind
  set and the same mixed stages, one no worse in every term that the rest depends on
  (fill, straggler so far, the last stage's pending period, synchronisation, egress,
  devices per pool), need only the better one expanded (`_dominated`).
- At a leaf, the replica counts come from `counts`.
- While a shape is searched, what it has left is bounded by its open prefixes: at each level
  of the recursion, the prefixes after the one being expanded, and the one being expanded at
  the deepest level (`_shape_floor`), so the search's lower bound rises within a shape.
- A kind that runs out of memory in a stage (H2) is never used there; TP stays within a
  node (H1). Both are facts of the model, not approximations.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

from hetc.costmodel.planning import PlanningModel, Shape
from hetc.solver.search.counts import Counts
from hetc.solver.search.incumbent import Candidate, SearchOptions
from hetc.solver.search.work import DOMINANCE, KIND_SET, LEAF, POOL_SCAN, PREFIX, PREFIX_PRICED

CHECK_EVERY = 4096
"""Kind sets `kind_sets` lists between two checks of the limits: with many kinds that mix,
a stage has up to 2^kinds sets, more than a time limit allows."""

ROW_CAP = 400_000
"""Most kind sets one stage of one shape may have (about 80 MiB): a shape with more is
given up (`search_stages`), and the search reports it unfinished, since listing the sets
alone would take more memory and time than any limit allows."""

SETS_CAP = 1_000_000
"""Most kind sets `kind_sets` keeps cached (about 200 MiB): past it the cache starts over,
so memory stays bounded however many stages and shapes the search lists."""

MEMO_CAP = 200_000
"""Most prefixes the dominance memo of one shape holds (about 150 MiB): past it the memo
starts over. Forgetting a prefix only lets a later one it dominates be expanded, never
drops a candidate, so the search stays exact, at the cost of some repeated work."""

SEND_CACHE = 1 << 16
"""Most pairs of kind sets whose send `Exact.stage` keeps cached (least recently used go)."""


class Exact(Counts):
    """The exact branch and bound over the stages of one shape."""

    def __init__(self, model: PlanningModel, options: SearchOptions) -> None:
        super().__init__(model, options)
        self._memo: dict[tuple[object, ...], list[tuple[float, ...]]] = {}
        """The prefixes expanded so far in the shape being searched, for `_dominated`
        (emptied per shape by `search_stages`, and whenever it holds `MEMO_CAP`)."""
        self._memo_size = 0
        """The prefixes `_memo` holds."""
        self._combo_info: dict[
            tuple[tuple[int, ...], int], tuple[tuple[tuple[int, int], ...], int]
        ] = {}
        """`combo_info`'s answers for the shape being searched (emptied per shape: its key
        holds the shape's D)."""
        self._sets: dict[tuple[int, int, int, int, int], list[tuple[float, tuple[int, ...]]]] = {}
        self._sets_size = 0
        """The kind sets `_sets` holds (emptied whenever they would pass `SETS_CAP`)."""
        self._stage_send = lru_cache(maxsize=SEND_CACHE)(model.send_between)
        """The planning model's send between two stages' kind sets, cached: `stage` asks for
        the same few pairs for every prefix of every shape."""
        self._open: list[_PrefixFloor] = []
        """Per level of the recursion in progress, its prefixes and which is being expanded
        (`_shape_floor`)."""

    def kind_sets(
        self, mbs: int, dp: int, flight: int, first: int, end: int
    ) -> list[tuple[float, tuple[int, ...]]]:
        """(time, kinds) for every set of kinds layers [first, end) may use, fastest first:
        kinds that fit in memory, one TP degree unless the capability matrix allows mixing."""
        key = (mbs, dp, flight, first, end)
        cached = self._sets.get(key)
        if cached is not None:
            return cached
        model = self.model
        fitting = [k.index for k in model.kinds if model.fits(k.index, mbs, first, end, dp, flight)]
        limit = min(dp, len(fitting))
        groups: list[list[int]] = []
        if model.mixed_tp_allowed:
            groups = [fitting]
        else:
            by_tp: dict[int, list[int]] = {}
            for k in fitting:
                by_tp.setdefault(model.kinds[k].tp, []).append(k)
            groups = list(by_tp.values())
        sets: list[tuple[float, tuple[int, ...]]] = []
        times = {k: model.stage_time(k, mbs, first, end)[0] for k in fitting}
        for group in groups:
            for size in range(1, min(limit, len(group)) + 1):
                for combo in combinations(group, size):
                    if "one-region-stage" in self.approx and not self._one_region(combo):
                        continue
                    sets.append((max(times[k] for k in combo), combo))
                    if len(sets) % CHECK_EVERY == 0:
                        self.tally[KIND_SET] += CHECK_EVERY
                        self.check_limits()
                        if len(sets) > ROW_CAP:
                            raise _TooManySets
        sets.sort()
        self.tally[KIND_SET] += len(sets) % CHECK_EVERY + len(model.kinds)
        if self._sets_size + len(sets) > SETS_CAP:
            self._sets.clear()
            self._sets_size = 0
        self._sets[key] = sets
        self._sets_size += len(sets)
        return sets

    def _one_region(self, combo: Iterable[int]) -> bool:
        model = self.model
        return len({model.pools[model.kinds[k].pool].zone.region for k in combo}) == 1

    def combo_info(
        self, combo: tuple[int, ...], dp: int
    ) -> tuple[tuple[tuple[int, int], ...], int]:
        """(devices the stage adds per pool at least, devices beyond those it needs somewhere):
        a one-kind stage takes D x TP on its pool; a mixed stage one replica per kind, and its
        other D - |set| replicas at least the smallest TP each, on a pool chosen at the leaf."""
        key = (combo, dp)
        info = self._combo_info.get(key)
        if info is None:
            kinds = self.model.kinds
            if len(combo) == 1:
                kind = kinds[combo[0]]
                info = (((kind.pool, dp * kind.tp),), 0)
            else:
                adds: dict[int, int] = {}
                for k in combo:
                    adds[kinds[k].pool] = adds.get(kinds[k].pool, 0) + kinds[k].tp
                info = (tuple(adds.items()), (dp - len(combo)) * min(kinds[k].tp for k in combo))
            self._combo_info[key] = info
        return info

    def search_stages(self, mbs: int, stages: int, dp: int) -> bool:
        """Search the shape (m, P, D) = (`mbs`, `stages`, `dp`) to the end: every split and
        kind set of its stages, from an empty prefix (`stage`), with the dominance memo of
        this shape alone (a prefix of another shape has another future). False where the
        shape was given up: a stage had more than `ROW_CAP` kind sets."""
        self._memo = {}
        self._memo_size = 0
        self._combo_info = {}
        state = _Partial(
            stages=stages, mbs=mbs, dp=dp, boundaries=(0,), forced=(0,) * len(self.model.pools)
        )
        try:
            self.stage(state, 0, 0)
        except _TooManySets:
            self._open = []
            return False
        return True

    def stage(self, state: _Partial, index: int, start: int) -> None:
        """Choose stage `index` (its end block and kind set) after `state`, then recurse."""
        model = self.model
        self.check_limits()
        stages, mbs, dp = state.stages, state.mbs, state.dp
        remaining = stages - index - 1
        prefix = self.layer_best(mbs, self.affordable_tp(stages, dp))
        sync_lb = self.sync_bound(stages, dp)
        m1 = -(-(model.batch // mbs) // dp) - 1
        last = index == stages - 1
        flight = max(1, min(stages - index, m1 + 1))
        first_layer = 0 if index == 0 else start + 1
        ends = [model.blocks] if last else range(start + 1, model.blocks - remaining + 1)
        rest_devices = remaining * dp * self._min_tp
        work = self.device_work(mbs)[0]
        throughput = self.objective == "max_throughput"
        capacity = self.capacity
        previous = state.sets[-1] if index else ()
        if index == 0:
            self._open = []
        rows = [
            self.kind_sets(mbs, dp, flight, first_layer, end + 2 if last else end + 1)
            for end in ends
        ]
        floor = _PrefixFloor(
            self,
            state,
            max(state.sync, sync_lb),
            m1,
            (prefix, work, ends, 2 if last else 1),
            rows,
            remaining,
            rest_devices,
        )
        self._open.append(floor)
        tally = self.tally
        for at, end in enumerate(ends):
            end_layer = end + 2 if last else end + 1
            rest_fill = prefix[-1] - prefix[end_layer]
            rest_straggler = rest_fill / remaining if remaining else 0.0
            rest_work = (work[-1] - work[end_layer]) * dp
            key = (start, end, index == 0, last)
            floor.at = at
            for j, (t, combo) in enumerate(rows[at]):
                floor.j = j
                tally[PREFIX] += 1
                send = self._stage_send(previous, combo, mbs) if index else 0.0
                fill = state.fill + t + 2 * send
                straggler = max(state.straggler, state.pending + send)
                pending = t + send
                lb_t = (
                    fill
                    + rest_fill
                    + m1 * max(straggler, pending, rest_straggler)
                    + max(state.sync, sync_lb)
                )
                bound = self.bound()
                if (throughput and lb_t > bound) or (
                    self.time_cap is not None and lb_t > self.time_cap
                ):
                    continue
                tally[PREFIX_PRICED] += 1
                adds, spread = self.combo_info(combo, dp)
                forced = list(state.forced)
                over = False
                for pool, amount in adds:
                    forced[pool] += amount
                    if forced[pool] > capacity[pool]:
                        over = True
                if over:
                    continue
                extra = state.extra + spread
                devices = sum(forced) + extra
                if devices + rest_devices > self.total_devices:
                    continue
                if remaining:
                    free = self.effective_devices(mbs, forced, extra)
                    if free <= 0:
                        continue
                    slow = rest_work / free
                    if slow > rest_straggler:
                        lb_t += m1 * max(0.0, slow - max(straggler, pending, rest_straggler))
                        if throughput and lb_t > bound:
                            continue
                stage_sync = model.stage_sync(combo, key, dp, mbs, first_layer, end_layer)
                sync = max(state.sync, stage_sync)
                egress = state.egress + model.ring_egress(combo, key, dp)
                if index:
                    egress += model.boundary_egress(previous, combo, mbs)
                if last and stages > 1:
                    tied = model.tied_time(state.sets[0], combo)
                    sync = max(sync, state.first_sync + tied, stage_sync + tied)
                    egress += model.tied_egress(state.sets[0], combo, dp)
                lb_t += max(sync, sync_lb) - max(state.sync, sync_lb)
                rate = (devices + rest_devices) * self._cheapest
                if throughput:
                    if lb_t > bound:
                        continue
                elif lb_t * rate + egress > bound:
                    continue
                if not throughput or self.budget is not None:
                    rate = max(rate, self.rate_floor(forced, extra + rest_devices))
                    if not throughput and lb_t * rate + egress > bound:
                        continue
                if self.violates(lb_t, rate, egress):
                    continue
                first_sync = stage_sync if index == 0 else state.first_sync
                mixed = state.mixed if len(combo) == 1 else tuple(sorted((*state.mixed, combo)))
                memo_key = (index, end, combo, state.sets[0] if index else combo, mixed)
                values = (fill, straggler, pending, sync, egress, first_sync, extra, *forced)
                if self._dominated(memo_key, values):
                    continue
                child = _Partial(
                    stages=stages,
                    mbs=mbs,
                    dp=dp,
                    boundaries=(*state.boundaries, end),
                    sets=(*state.sets, combo),
                    fill=fill,
                    straggler=straggler,
                    pending=pending,
                    sync=sync,
                    first_sync=first_sync,
                    egress=egress,
                    forced=tuple(forced),
                    extra=extra,
                    mixed=mixed,
                )
                if last:
                    self.leaf(child)
                else:
                    self.stage(child, index + 1, end)
        self._open.pop()

    def _shape_floor(self) -> float:
        """No candidate the shape in progress has left scores below this: the least bound of
        its open prefixes (each level's prefixes after the one being expanded, and the one
        being expanded at the deepest level, whose subtree is not entered yet; a deeper
        level covers its parent's), at least the shape's bound. A prefix's bound never falls
        as it is completed (module docstring), so it bounds its whole subtree; prefixes
        already expanded or pruned hold nothing below the incumbent."""
        base = self._searching
        if not self._open:
            return base
        least = self._open[-1].current()
        for level in self._open:
            least = min(least, level.after())
        return max(base, least)

    def _dominated(self, key: tuple[object, ...], values: tuple[float, ...]) -> bool:
        """Whether a partial with the same future (stage, end, neighbouring sets, resources)
        and no worse in every term was already expanded; records `values` if not."""
        held = self._memo.setdefault(key, [])
        self.tally[DOMINANCE] += len(held) + 1
        for other in held:
            if all(o <= v for o, v in zip(other, values, strict=True)):
                return True
        before = len(held)
        held[:] = [o for o in held if not all(v <= x for v, x in zip(values, o, strict=True))]
        held.append(values)
        self._memo_size += len(held) - before
        if self._memo_size > MEMO_CAP:
            self._memo = {}
            self._memo_size = 0
        return False

    def leaf(self, state: _Partial) -> None:
        """Score a complete candidate: its least-rate counts (`cheapest_counts`), the planning
        model's estimate, and `offer` if it is feasible and rents every `must_use` pool."""
        model = self.model
        self.evaluations += 1
        self.tally[LEAF] += 1
        self.tally[POOL_SCAN] += len(model.pools)
        self.check_limits()
        shape = Shape(microbatch=state.mbs, boundaries=state.boundaries, pipelines=state.dp)
        counts = self.cheapest_counts(state.sets, state.dp)
        if counts is None:
            return
        estimate = model.estimate(shape, counts)
        if not estimate.feasible or any(not estimate.nodes[p] for p in self.options.must_use):
            return
        self.record(
            Candidate(shape=shape, assignment=counts, estimate=estimate, objective=self.objective)
        )


class _TooManySets(Exception):
    """A stage has more than `ROW_CAP` kind sets: the shape is given up."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Partial:
    """A prefix of stages: what the rest of the search needs to know of it."""

    stages: int
    mbs: int
    dp: int
    boundaries: tuple[int, ...] = ()
    sets: tuple[tuple[int, ...], ...] = ()
    fill: float = 0.0
    straggler: float = 0.0
    """Largest period among stages whose both sends are known."""
    pending: float = 0.0
    """The last stage's t + its incoming send (its outgoing send is not chosen yet)."""
    sync: float = 0.0
    first_sync: float = 0.0
    """Stage 0's y + u before the tied embedding (added once the last stage is known)."""
    egress: float = 0.0
    forced: tuple[int, ...] = ()
    """Devices per pool the prefix needs at least: all of a one-kind stage, one replica per
    kind of a mixed stage."""
    extra: int = 0
    """Devices the mixed stages need beyond `forced`, on pools chosen at the leaf."""
    mixed: tuple[tuple[int, ...], ...] = ()
    """The mixed stages' kind sets, sorted: with `forced`, they fix which counts are possible."""


class _PrefixFloor:
    """The children of one prefix and which one `Exact.stage` is expanding (`at`-th end,
    `j`-th kind set), with lower bounds on them for `Exact._shape_floor`, computed only when
    asked. The child that ends its stage at the `at`-th end on a kind set of time t is
    bounded by fill + t + rest_fill + (m - 1) max(straggler, pending, t, rest straggler,
    rest work / G) + sync, the bound `Exact.stage` prunes with less the sends (which are
    non-negative), with G the sigma-weighted devices left when the new stage takes its fewest
    devices (D x the least TP) from the fastest pools, at least those any child leaves free
    (`Bounds.effective_devices`). It grows with t, so the fastest set of each end bounds all
    of that end's; for min_cost, times the least rental rate any child has (`rate_floor` of
    the devices so far and at least D x the least TP devices for the new stage and the
    stages after) plus the egress so far."""

    def __init__(
        self,
        search: Exact,
        state: _Partial,
        sync: float,
        m1: int,
        rest: tuple[list[float], list[float], Sequence[int], int],
        rows: list[list[tuple[float, tuple[int, ...]]]],
        remaining: int,
        rest_devices: int,
    ) -> None:
        self.search = search
        self.state = state
        self.sync = sync
        self.m1 = m1
        self.rest = rest
        """(layer_best prefix sums, device_work prefix sums, the stage's ends, what to add
        to an end for the first layer after the stage), for the rest of the model."""
        self.rows = rows
        self.remaining = remaining
        self.rest_devices = rest_devices
        self.at = 0
        self.j = 0

    def bound(self, at: int, t: float) -> float:
        """The bound (class docstring) of a child at the `at`-th end on a set of time t."""
        state, search = self.state, self.search
        prefix, work, ends, past = self.rest
        layer = ends[at] + past
        rest = prefix[-1] - prefix[layer]
        straggler = max(state.straggler, state.pending, t)
        if self.remaining:
            least = search._min_tp * state.dp
            free = search.effective_devices(state.mbs, state.forced, state.extra + least)
            rest_work = (work[-1] - work[layer]) * state.dp
            slow = rest_work / free if free > 0 else math.inf
            straggler = max(straggler, rest / self.remaining, slow)
        lb = state.fill + t + rest + self.m1 * straggler + self.sync
        if search.objective == "max_throughput":
            return lb
        others = state.extra + state.dp * search._min_tp + self.rest_devices
        rate = (sum(state.forced) + others) * search._cheapest
        return lb * max(rate, search.rate_floor(state.forced, others)) + state.egress

    def current(self) -> float:
        """The bound of the child being expanded."""
        row = self.rows[self.at]
        return self.bound(self.at, row[self.j][0]) if row else math.inf

    def after(self) -> float:
        """The least bound of the children after the one being expanded: the next set at its
        end, and each later end's fastest."""
        row = self.rows[self.at]
        least = self.bound(self.at, row[self.j + 1][0]) if self.j + 1 < len(row) else math.inf
        for at in range(self.at + 1, len(self.rows)):
            if self.rows[at]:
                least = min(least, self.bound(at, self.rows[at][0][0]))
        return least
