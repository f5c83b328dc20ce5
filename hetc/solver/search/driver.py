"""The planner's search: the best candidate (shape + replica counts) under the spec's
objective and constraints, by branch and bound over the planning model. This module is its
driver, the order in which shapes are searched; `Search` assembles the concepts, one
module each, into one class (each module's class extends the one below it, so each reads
only what lies under it):

- `incumbent`: the candidates found so far, the best K of distinct signature, the limits;
- `windows`: the least time of runs of layers on each kind;
- `bounds`: lower bounds on the objective of a shape and of a range of shapes (with
  `mix_cost`, `replica_slots` and `stage_shares`, which it holds);
- `counts`: the replica-count programme at a leaf;
- `exact`: the exact branch and bound over stages, with its dominance rule;
- `options`, `zones`, `pairs`, `splits`, `reach`, `profiles`: the `kind-profiles`
  approximation (its stage options, zone swaps and rings, pair tables, per-profile bounds
  and splits, memory reach, and the enumerator);
- `stripes`: the zone stripes that seed `kind-profiles`;
- `shape_solver`: what searches one shape once the driver reaches it (`exact`,
  `kind-profiles`, or the CP-SAT cross-check), picked from the approximations or by name;
- `driver` (here): the best-first order over shapes.

What is searched, for every microbatch size m (divisors of the global batch up to 16),
pipeline degree P, data-parallel degree D and split of the blocks into P contiguous stages:
for each stage, the set of replica kinds (pool x TP) it uses and how many of its D replicas
each kind runs. `planning.PlanningModel.estimate` defines the score.

Why it is exact (with every approximation off), step by step:

1. Shapes (m, P, D) are visited in order of a lower bound on the objective, and the search
   stops at the first shape whose bound exceeds the incumbent (the bound: `bounds`). Each
   (m, P) enters the order under a bound on all its D (`range_bound`), is split into ranges
   of D under their own bounds when reached, and its shapes are listed only when their
   range is reached, so the order is unchanged.
2. Within a shape, stages are chosen first to last, and prefixes are pruned and dominated
   (`exact`: bounds on prefixes,
   dominance, and the model's own limits, none of them an approximation).
3. At a leaf, an exact dynamic programme finds the counts (`counts`).
4. Before all this, a `kind-profiles` pass seeds the incumbent (a real candidate, so the
   bound only tightens).

Declared approximations (`APPROXIMATIONS`, each a flag; `planner.default_approximations`
turns `kind-profiles` on for large clusters): `kind-profiles` (the fast enumerator of
`profiles`: one kind or one H6 region-wide set per stage, at most two per pipeline, min-max
splits), `dp-order` (Sailor's H3/H4: D from large to small for throughput, small to large
for cost, stopping when the objective stops improving), `one-region-stage` (H5: a stage's
replicas in one region). bench/approximations.py measures what each costs in plan quality.
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from hetc.costmodel.planning import PlanningModel, ReplicaKind, Shape
from hetc.solver.certificate import Snapshot, relative_gap, some_pool_is_free
from hetc.solver.search.bounds import RANGE_SPAN
from hetc.solver.search.incumbent import Candidate, SearchOptions, SearchResult, _Stop
from hetc.solver.search.shape_solver import shape_solver
from hetc.solver.search.stripes import Stripes
from hetc.solver.search.work import LEAF, POOL_SCAN, SHAPE
from hetc.units import plural

APPROXIMATIONS = {
    "dp-order": "H3/H4: D in one direction, stopping once the objective stops improving",
    "one-region-stage": "H5: each stage's replicas within one region",
    "kind-profiles": (
        "every stage runs one pool, or all pools of one device in one region (H6), at one TP;"
        " at most two such options per pipeline, slower first; each such profile gets the"
        " split that minimises its straggler; plus zone stripes (one zone per stage) where a"
        " region holds one device in three zones or more"
    ),
}


GREEDY_STAGES = 8
"""Most stage counts `Search.greedy_seed` tries before leaving the first candidate to the
search proper."""


SHALLOW_SHAPES = 24
"""Shapes of one or two stages searched before the others (see `Search._best_first`)."""

EAGER_PAIRS = 20_000
"""Up to this many pairs of stage options, a range's floor (`Profiles.range_floor`) builds
its microbatch size's pair table if no shape has yet; beyond, it waits for one: the table
grows as the square of the options, and on ten thousand GPUs in thirty zones building it
for every microbatch size before any shape is searched delays the first plan by seconds."""


class Search(Stripes):
    """The whole search: the best-first order over shapes, over every concept below."""

    def __init__(self, model: PlanningModel, options: SearchOptions) -> None:
        super().__init__(model, options)
        self._solver = shape_solver(options.shape_solver, self.approx)
        self.unfinished_shapes = 0
        """Shapes their solver gave up on (`ShapeSolver.solve` answered False)."""
        self._unfinished_bound = math.inf
        """The least bound of those shapes: their candidates not found may score that low."""
        self._range_floors = self._solver.name == "kind-profiles"
        """Whether a range of D popped under an incumbent is first bounded over its
        profiles (`Profiles.range_floor`): a bound of the `kind-profiles` space."""
        self._eager_tables = (
            self._range_floors and len(self.stage_options()) ** 2 // 2 <= EAGER_PAIRS
        )
        """Whether a range's floor may build its pair table before any shape has
        (`EAGER_PAIRS`)."""
        self._rented = self.objective == "min_cost" or self.budget is not None
        """Whether the rental rate counts: a range's floor then splits it in halves."""

    def run(self) -> SearchResult:
        stop = ""
        interrupted = False
        by = ""
        try:
            for candidate in self.options.seeds:
                self.offer(candidate)
            if "kind-profiles" in self.approx:
                # an exact search's warm start seeds itself so (`_warm_start`): once, not twice
                self.greedy_seed()
        except _Stop as why:
            return self._result(str(why), why.interrupted, why.by)
        self._root = min((group[0] for group in self.shape_groups()), default=math.inf)
        if self.approx:
            self._root = max(self._root, self.shapes_floor())
        try:
            if "kind-profiles" in self.approx:
                self.zone_stripes()
            else:
                self._warm_start()
            if "dp-order" in self.approx:
                self._dp_ordered(
                    sorted(s for g in self.shape_groups() for s in self._listed(*g[1:]))
                )
            else:
                self._best_first()
        except _Stop as why:
            stop = str(why)
            interrupted = why.interrupted
            by = why.by
        return self._result(stop, interrupted, by)

    def _result(self, stop: str, interrupted: bool, by: str) -> SearchResult:
        """The search's answer, once it ended (`stop`: why it ended early, or ""; `by`: the
        limit that did, `SearchResult.stopped_by`)."""
        if self.unfinished_shapes and not stop:
            stop = f"the shape solver left {plural(self.unfinished_shapes, 'shape')} unfinished"
        candidates = self.alternatives()
        best = candidates[0].value if candidates else None
        within = self.searched_bound() if stop or "dp-order" in self.approx else self.incumbent()
        every = self.lower_bound() if stop or self.approx else self.incumbent()
        within = min(within, self._unfinished_bound)
        every = min(every, self._unfinished_bound)
        return SearchResult(
            candidates=candidates,
            evaluations=self.evaluations,
            complete=not stop,
            seconds=time.perf_counter() - self.started,
            lower_bound=within,
            gap=relative_gap(best, within),
            lower_bound_all_plans=every,
            gap_all_plans=relative_gap(best, every),
            interrupted=interrupted,
            stop_reason=stop,
            greedy_count_leaves=self.greedy_counts,
            work=self.work(),
            stopped_by=by,
        )

    def greedy_seed(self) -> None:
        """A first candidate in a fraction of a second, before any bound is computed, so that
        a time-limited search on a huge spec has a plan early: the fewest stages P at which
        some kind alone, on every stage of an even split of the blocks, at some microbatch
        size, holds the model with D = its pool's devices over P x TP (or fewer, halving,
        where that breaks a constraint). Each such candidate is a real one, offered like any
        other, so it only tightens the bound; nothing is pruned by its being found first.
        At most `GREEDY_STAGES` stage counts are tried, and of kinds alike in TP, device,
        quota, node size, price and NIC (`seed_kinds`: the same one-kind plan in another
        zone), one: with a thousand like zones the seed stays a fraction of a second."""
        self.check_limits()
        model = self.model
        blocks = model.blocks
        kinds = self.seed_kinds()
        for stages in range(1, min(blocks, GREEDY_STAGES) + 1):
            cut = [blocks * i // stages for i in range(stages + 1)]
            if len(set(cut)) <= stages:
                continue
            for mbs in model.microbatch_sizes():
                for kind in kinds:
                    dp = min(
                        self.capacity[kind.pool] // (stages * kind.tp),
                        self.dp_cap(mbs, stages),
                    )
                    while dp >= 1:
                        if self._greedy_offer(mbs, tuple(cut), kind.index, dp):
                            break
                        dp //= 2
                self.check_limits()
            if self.ranked:
                return

    def seed_kinds(self) -> list[ReplicaKind]:
        """One kind per class of kinds alike for a one-kind plan (TP, and the pool's device,
        quota, node size, price and NIC), the first of each; kinds `must_use` names are all
        kept, since the seed must rent them."""
        pools = self.model.pools
        wanted = set(self.options.must_use)
        seen: set[tuple[object, ...]] = set()
        out: list[ReplicaKind] = []
        for kind in self.model.kinds:
            pool = pools[kind.pool].pool
            key = (
                kind.tp,
                pool.device,
                pool.quota,
                pool.gpus_per_node,
                pool.price,
                pool.nic_bandwidth,
            )
            if kind.pool in wanted or key not in seen:
                seen.add(key)
                out.append(kind)
        return out

    def _greedy_offer(self, mbs: int, cut: tuple[int, ...], kind: int, dp: int) -> bool:
        """Score one candidate of `greedy_seed`: whether it is feasible (and offered). Not
        counted in `evaluations`, the leaves of the search proper that `eval_limit` caps."""
        self.tally[LEAF] += 1
        self.tally[POOL_SCAN] += len(self.model.pools)
        self.check_limits()
        shape = Shape(microbatch=mbs, boundaries=cut, pipelines=dp)
        counts = tuple(((kind, dp),) for _ in range(len(cut) - 1))
        estimate = self.model.estimate(shape, counts)
        if not estimate.feasible or any(not estimate.nodes[p] for p in self.options.must_use):
            return False
        self.offer(
            Candidate(shape=shape, assignment=counts, estimate=estimate, objective=self.objective)
        )
        return True

    def _best_first(self) -> None:
        """Shapes in order of their bound, (bound, m, P, D) ascending, stopping at the first
        that cannot beat the incumbent. Each (m, P) enters as one entry, the range of every
        D, under its group bound (`shape_groups`), and is split into ranges or listed shape by
        shape only when popped (`_pop_shape`): a range's bound is at most each of its
        shapes' bounds and pops first on a tie, so the order is that of the full sorted
        list, but ranges the incumbent beats are never listed. Under
        `kind-profiles` for max_throughput, a shape popped the first time goes back with
        the ring its profiles must pay across zones added (`ring_excess`), if any.

        Shapes of one and two stages come first, the `SHALLOW_SHAPES` of least bound, in
        the same way from a queue of their own: deep pipelines have the loosest bounds, so
        an incumbent from a shallow one prunes most of them. The other shallow entries then
        join the deep ones. A shape is searched once: searching it again later, against a
        better incumbent, could only prune more."""
        zoned = (
            "kind-profiles" in self.approx
            and self.objective == "max_throughput"
            and bool(self._zone_split()[2])
        )
        shallow: list[tuple[float, int, int, int, int, int]] = []
        deep: list[tuple[float, int, int, int, int, int]] = []
        for bound, mbs, stages in self.shape_groups():
            entry = (bound, 0, mbs, stages, 1, self.dp_cap(mbs, stages))
            (shallow if stages <= 2 else deep).append(entry)
        heapq.heapify(shallow)
        self._queues = [shallow, deep]
        searched = 0
        while searched < SHALLOW_SHAPES and shallow and shallow[0][0] <= self.bound():
            popped = self._pop_shape(shallow, zoned)
            self.check_limits()  # a range split or dropped is work too
            if popped is not None:
                searched += 1
                self.shape(*popped)
                self._searching = math.inf
        queue = shallow + deep
        heapq.heapify(queue)
        self._queues = [queue]
        while queue and queue[0][0] <= self.bound():
            popped = self._pop_shape(queue, zoned)
            self.check_limits()
            if popped is not None:
                self.shape(*popped)
                self._searching = math.inf

    def _pop_shape(
        self, queue: list[tuple[float, int, int, int, int, int]], zoned: bool
    ) -> tuple[int, int, int] | None:
        """Pop `queue`'s least entry: a shape (m, P, D) to search, or None where it was a
        range of D of (m, P), now split or listed in its place, or a shape put back under
        its ring across zones (`_best_first`). A range of more than `RANGE_SPAN` D is split in
        two under their own bounds (`range_bound`) while that leaves a half out or nothing
        is known yet: where both halves stay under the incumbent, splitting further would
        mostly cost bounds, so its shapes are listed then, up to their memory cap
        (`last_dp`, taken only there). Under `kind-profiles` with an incumbent, a range is
        instead cut where m = ceil(T / D) changes (`_same_passes`), and a range of one m is
        dropped when its floor over its profiles exceeds the incumbent
        (`Profiles.range_floor`), else listed (halved first where the rent counts). Entries
        the incumbent already beats are not pushed: it only improves, so they would never
        be popped."""
        lb, entry, mbs, stages, dp, last = heapq.heappop(queue)
        self.tally[SHAPE] += 1
        incumbent = self.bound()
        if (
            entry == 0
            and incumbent < math.inf
            and self._range_floors
            and (self._eager_tables or self.has_pair_rows(mbs))
        ):
            end = self._same_passes(mbs, dp)[1]
            if end < last:
                start, end = self._same_passes(mbs, (dp + last) // 2)
                cut = end if end < last else start - 1
                for first, stop in ((dp, cut), (cut + 1, last)):
                    bound = max(lb, self.range_bound(mbs, stages, first, stop, within=True))
                    if bound <= incumbent:
                        heapq.heappush(queue, (bound, 0, mbs, stages, first, stop))
                return None
            if last > dp:
                floor = self.range_floor(mbs, stages, dp, last)
                if floor > incumbent:
                    return None
                if self._rented and last - dp + 1 > RANGE_SPAN:
                    # the halves' floors read their own ends: tighter where the rental rate,
                    # which grows with D, prices the plans
                    middle = (dp + last) // 2
                    for first, stop in ((dp, middle), (middle + 1, last)):
                        bound = max(lb, floor, self.range_bound(mbs, stages, first, stop, True))
                        if bound <= incumbent:
                            heapq.heappush(queue, (bound, 0, mbs, stages, first, stop))
                    return None
            self._push_listed(queue, mbs, stages, dp, last, incumbent)
            return None
        if entry == 0:
            if last - dp + 1 > RANGE_SPAN:
                middle = (dp + last) // 2
                halves = [
                    (max(lb, self.range_bound(mbs, stages, first, end, within=True)), first, end)
                    for first, end in ((dp, middle), (middle + 1, last))
                ]
                if incumbent == math.inf or halves[0][0] > incumbent or halves[1][0] > incumbent:
                    for bound, first, end in halves:
                        if bound <= incumbent:
                            heapq.heappush(queue, (bound, 0, mbs, stages, first, end))
                    return None
            self._push_listed(queue, mbs, stages, dp, last, incumbent)
            return None
        if zoned and entry == 1:
            excess = self.ring_excess(stages, dp)
            if excess > 0:
                if lb + excess <= incumbent:
                    heapq.heappush(queue, (lb + excess, 2, mbs, stages, dp, dp))
                return None
        self._searching = lb
        return mbs, stages, dp

    def _push_listed(
        self,
        queue: list[tuple[float, int, int, int, int, int]],
        mbs: int,
        stages: int,
        first: int,
        last: int,
        incumbent: float,
    ) -> None:
        """Push the shapes of (m, P) for D = first..last, up to their memory cap, whose
        bounds do not exceed the incumbent."""
        for bound, _, _, shape_dp in self._listed(
            mbs, stages, first, min(last, self.last_dp(mbs, stages))
        ):
            if bound <= incumbent:
                heapq.heappush(queue, (bound, 1, mbs, stages, shape_dp, shape_dp))

    def _same_passes(self, mbs: int, dp: int) -> tuple[int, int]:
        """The first and last D whose pipelines run as many microbatches as D = `dp`'s,
        m = ceil(T / D): D from ceil(T / m) to floor((T - 1) / (m - 1)) (to `dp_cap` for
        m = 1)."""
        total = self.model.batch // mbs
        passes = -(-total // dp)
        start = -(-total // passes)
        if passes == 1:
            return start, max(dp, self.dp_cap(mbs, 1))
        return start, (total - 1) // (passes - 1)

    def _listed(
        self, mbs: int, stages: int, first: int = 1, last: int | None = None
    ) -> list[tuple[float, int, int, int]]:
        """(bound, m, P, D) for the shapes of (m, P) with a finite bound, D = first..last
        (every D its memory allows, by default)."""
        if last is None:
            last = self.last_dp(mbs, stages)
        bounds = self.shape_bounds(mbs, stages, last, first, within=True)
        return [(lb, mbs, stages, dp) for dp, lb in enumerate(bounds, start=first) if lb < math.inf]

    def _warm_start(self) -> None:
        """Seed the incumbent with the `kind-profiles` answer: every candidate it finds is a
        real one, so the exact search only gets a tighter bound from the start. It runs the
        greedy seed (the exact search runs none of its own) on this search's tally, so it is
        the search `--approximations kind-profiles` runs under the same budget, and the
        exact answer is never worse than that one's. Its progress is reported as this
        search's (`_as_mine`)."""
        seed = Search(
            self.model,
            SearchOptions(
                top=self.options.top,
                runners_up=self.options.runners_up,
                approximations=self.approx | {"kind-profiles"},
                eval_limit=self.options.eval_limit,
                work_limit=self.options.work_limit,
                work_grace=self.options.work_grace,
                time_limit=self.options.time_limit,
                safety_cap=self.options.safety_cap,
                grace=self.options.grace,
                progress=None if self.options.progress is None else self._as_mine,
                progress_every=self.options.progress_every,
                must_use=self.options.must_use,
                stop=self.options.stop,
                free_only=self.free,
                seeds=self.options.seeds,
            ),
        )
        seed.started = self.started
        seed.last_report = self.last_report
        seed.tally = self.tally
        result = seed.run()
        self.evaluations += result.evaluations
        self.greedy_counts += result.greedy_count_leaves
        for candidate in result.candidates:
            self.offer(candidate)
        if not result.complete:
            raise _Stop(result.stop_reason, interrupted=result.interrupted, by=result.stopped_by)

    def _as_mine(self, now: Snapshot) -> None:
        """Report a snapshot of the warm start as this search's: its bound over all plans
        holds here, and bounds this search's narrower space too, while its bound within
        `kind-profiles` does not."""
        progress = self.options.progress
        if progress is not None:
            within = now.lower_bound if self.approx else None
            progress(replace(now, approximations=self.approx, searched_bound=within))

    def _dp_ordered(self, shapes: list[tuple[float, int, int, int]]) -> None:
        """H3/H4: per (m, P), D descending (throughput) or ascending (cost) until no gain."""
        groups: dict[tuple[int, int], list[tuple[float, int]]] = {}
        for lb, mbs, stages, dp in shapes:
            groups.setdefault((mbs, stages), []).append((lb, dp))
        order = sorted(groups, key=lambda g: min(lb for lb, _ in groups[g]))
        descending = self.objective == "max_throughput"
        for mbs, stages in order:
            entries = sorted(groups[mbs, stages], key=lambda e: e[1], reverse=descending)
            previous = float("inf")
            for lb, dp in entries:
                if lb > self.bound():
                    continue
                found = self.shape(mbs, stages, dp)
                if found is None:
                    continue
                if found >= previous:
                    break
                previous = found

    def shape(self, mbs: int, stages: int, dp: int) -> float | None:
        """Search one (m, P, D) with the shape solver (`shape_solver`); returns the best
        objective found in it, or None. A shape its solver did not finish makes the whole
        search incomplete."""
        self._shape_best = None
        if not self._solver.solve(self, mbs, stages, dp):
            self.unfinished_shapes += 1
            self._unfinished_bound = min(self._unfinished_bound, self._searching)
        return self._found()


def search(model: PlanningModel, options: SearchOptions | None = None) -> SearchResult:
    """The best `options.top` candidates of distinct signature (see the module docstring).

    For min_cost where some pool is free, first the free plans, fastest first
    (`SearchOptions.free_only`): any of them is a least-cost plan, and of those the
    tie-break (`Candidate.key`) wants the fastest, which the time bounds find where cost
    bounds of 0 prune nothing; only where there is none (and the search was not
    interrupted), the priced plans, with what is left of the time limit
    (`certificate.some_pool_is_free`).

    The cyclic garbage collector is paused while it runs (`_collector_paused`)."""
    options = options or SearchOptions()
    if options.free_only or not some_pool_is_free(model):
        with _collector_paused():
            return Search(model, options).run()
    with _collector_paused():
        free = Search(model, replace(options, free_only=True)).run()
    if free.candidates:
        candidates = tuple(replace(c, objective="min_cost") for c in free.candidates)
        return replace(
            free,
            candidates=candidates,
            lower_bound=0.0,
            gap=0.0,
            lower_bound_all_plans=0.0,
            gap_all_plans=0.0,
        )
    if free.interrupted:
        return free
    rest = options.time_limit
    if rest is not None:
        rest = max(0.0, rest - free.seconds)
    work = options.work_limit
    if work is not None:
        work = max(0, work - free.work)
    with _collector_paused():
        priced = Search(model, replace(options, time_limit=rest, work_limit=work)).run()
    return replace(
        priced,
        evaluations=free.evaluations + priced.evaluations,
        seconds=free.seconds + priced.seconds,
        greedy_count_leaves=free.greedy_count_leaves + priced.greedy_count_leaves,
        work=free.work + priced.work,
    )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector, restoring its state after. The search
    allocates millions of short-lived tuples, all freed by reference counting; every 700
    allocations the collector would scan the young objects, and every so often every object
    the process holds (its libraries' included), for cycles the search does not make
    (what that costs: docs/planner.md, The search)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
