"""The planner's search: the best candidate (shape + replica counts) under the spec's
objective and constraints, by branch and bound over the planning model.

What is searched, for every microbatch size m (divisors of the global batch up to 16),
pipeline degree P, data-parallel degree D and split of the blocks into P contiguous stages:
for each stage, the set of replica kinds (pool x TP) it uses and how many of its D replicas
each kind runs. `planning.PlanningModel.estimate` defines the score.

Why it is exact (with every approximation off), step by step:

1. Shapes (m, P, D) are visited in order of a lower bound on the objective, and the search
   stops at the first shape whose bound exceeds the incumbent. The bound: iteration time >=
   F_lb + (m - 1) S_lb + Y_lb, where F_lb sums each layer's fastest time on any affordable
   kind; S_lb = max(F_lb / P, the slowest such layer, D x W / G_eff) with W the least
   device-seconds of the model and G_eff the devices weighted by how fast each pool can be
   relative to the best (`device_work`: device-time conservation); Y_lb the cheapest ring
   over D ranks of 1/P of the gradients. Cost >= that time x (D x P x least TP devices at
   the cheapest price).
2. Within a shape, stages are chosen first to last (end block and kind set together), with
   the same bounds on what remains; a partial candidate whose bound exceeds the incumbent, or
   breaks the budget or the throughput floor, is dropped. Every term of the model is a sum or
   a maximum of non-negative parts, so completing a prefix never lowers its bound.
3. Dominance: two prefixes that end at the same block with the same last (and first) kind
   set and the same mixed stages, one no worse in every term that the rest depends on (fill,
   straggler so far, the last stage's pending period, synchronisation, egress, devices per
   pool), need only the better one expanded (`_dominated`).
4. Time depends on the kind sets alone (the module docstring of `planning`), money on node
   counts: at a leaf, an exact dynamic programme over the stages that mix kinds finds the
   counts with the least rental rate inside every quota and max_gpus.
5. A kind that runs out of memory in a stage (H2) is never used there; TP stays within a node
   (H1). Both are facts of the model, not approximations.
6. Before all this, a `kind-profiles` pass seeds the incumbent (a real candidate, so the
   bound only tightens).

Declared approximations (`APPROXIMATIONS`, each a flag; `planner.default_approximations`
turns `kind-profiles` on for large clusters): `kind-profiles` (the fast enumerator below:
one kind or one H6 region-wide set per stage, at most two per pipeline, min-max splits),
`dp-order` (Sailor's H3/H4: D from large to small for throughput, small to large for cost,
stopping when the objective stops improving), `one-region-stage` (H5: a stage's replicas in
one region). bench/approximations.py measures what each costs in plan quality.

Only the best candidate is proven best. `top` > 1 adds, per other signature (P, m and the
devices of each stage), the best candidate the search scored: good alternatives, not
proven second best. Ties are broken by the documented order in `Candidate.key`: objective,
then the other metric, rented devices, P, D, microbatch size, boundaries, assignment.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations, pairwise

from hetc.costmodel.planning import Assignment, Estimate, PlanningModel, Shape

__all__ = [
    "APPROXIMATIONS",
    "Candidate",
    "SearchOptions",
    "SearchResult",
    "search",
]

APPROXIMATIONS = {
    "dp-order": "H3/H4: D in one direction, stopping once the objective stops improving",
    "one-region-stage": "H5: each stage's replicas within one region",
    "kind-profiles": (
        "every stage runs one pool, or all pools of one device in one region (H6), at one TP;"
        " at most two such options per pipeline, slower first; each such profile gets the"
        " split that minimises its straggler"
    ),
}

SPLIT_TOLERANCE = 1e-6
"""Relative width at which the straggler bisection of `min_max_split` stops: splits whose
stragglers differ by less are the same plan to within the model's accuracy."""

SHALLOW_SHAPES = 24
"""Shapes of one or two stages searched before the others (see `_shallow_first`)."""

EXACT_COUNT_SPLITS = 20_000
"""Most count splits the exact leaf programme enumerates; only large mixed stages exceed it."""

Progress = Callable[[int, float, "Candidate | None"], None]


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """One scored candidate: shape, counts and the planning model's estimate."""

    shape: Shape
    assignment: Assignment
    estimate: Estimate
    objective: str

    @property
    def value(self) -> float:
        """The objective: seconds per iteration, or USD per iteration."""
        e = self.estimate
        return e.iteration_time if self.objective == "max_throughput" else e.cost

    def key(self) -> tuple[object, ...]:
        e, s = self.estimate, self.shape
        other = e.cost if self.objective == "max_throughput" else e.iteration_time
        return (
            self.value,
            other,
            e.devices,
            s.stages,
            s.pipelines,
            s.microbatch,
            s.boundaries,
            self.assignment,
        )

    def signature(self, model: PlanningModel) -> tuple[object, ...]:
        """What makes two candidates different in shape (top-k lists distinct signatures):
        P, the microbatch size and each stage's devices; D alone is not (a plan with one
        pipeline fewer is no alternative worth showing)."""
        devices = tuple(
            tuple(sorted({model.kinds[k].device for k, _ in stage})) for stage in self.assignment
        )
        return (self.shape.stages, self.shape.microbatch, devices)


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchOptions:
    top: int = 1
    """How many candidates of distinct signature to return (the best is proven best; the
    others are the best of their signature among those scored)."""
    approximations: frozenset[str] = frozenset()
    eval_limit: int | None = None
    """Stop after this many scored leaves (deterministic)."""
    time_limit: float | None = None
    """Stop after this many seconds (the result is then the best found so far)."""
    progress: Progress | None = None
    progress_every: float = 0.2
    must_use: frozenset[int] = frozenset()
    """Pool indices every returned candidate must rent (for "why was this pool not used?")."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchResult:
    candidates: tuple[Candidate, ...]
    """Best first; empty when nothing is feasible."""
    evaluations: int
    complete: bool
    """False when a time or evaluation limit stopped the search early."""
    seconds: float
    stop_reason: str = ""
    greedy_count_leaves: int = 0
    """Leaves whose replica counts came from the greedy, not the exact programme."""


class _Stop(Exception):
    pass


class _Search:
    def __init__(self, model: PlanningModel, options: SearchOptions) -> None:
        self.model = model
        self.options = options
        self.objective = model.spec.objective
        constraints = model.spec.constraints
        self.budget = constraints.max_cost_per_iteration
        self.time_cap = 1.0 / constraints.min_throughput if constraints.min_throughput else None
        self.capacity = [slot.pool.max_nodes * slot.pool.gpus_per_node for slot in model.pools]
        total = sum(self.capacity)
        if constraints.max_gpus is not None:
            total = min(total, constraints.max_gpus)
        self.total_devices = total
        self.best: dict[tuple[object, ...], Candidate] = {}
        self.ranked: list[Candidate] = []
        self.evaluations = 0
        self.greedy_counts = 0
        """Leaves whose counts came from the greedy (see `cheapest_counts`)."""
        self.started = time.perf_counter()
        self.last_report = self.started
        self.approx = options.approximations
        self._layer_best: dict[tuple[int, int], list[float]] = {}
        self._sigma_order: dict[int, list[int]] = {}
        self._sync_bound: dict[int, float] = {}
        self._work: dict[int, tuple[list[float], list[float]]] = {}
        self._options: list[tuple[int, ...]] | None = None
        self._quota_fits: dict[tuple[object, ...], bool] = {}
        self._combo_info: dict[
            tuple[tuple[int, ...], int], tuple[tuple[tuple[int, int], ...], int]
        ] = {}
        self._cheapest = min((slot.pool.price for slot in model.pools), default=0.0)
        """USD per device-second of the cheapest pool: rate >= devices x this."""
        self._min_tp = min((k.tp for k in model.kinds), default=1)
        self._sets: dict[tuple[int, int, int, int, int], list[tuple[float, tuple[int, ...]]]] = {}

    # -- bounds ---------------------------------------------------------------------------

    def layer_best(self, mbs: int, max_tp: int) -> list[float]:
        """Prefix sums over the layer sequence of each layer's fastest time on any kind of TP
        at most `max_tp` (the largest a shape can afford in even one stage)."""
        key = (mbs, max_tp)
        if key not in self._layer_best:
            model = self.model
            kinds = [k for k in model.kinds if k.tp <= max_tp] or list(model.kinds)
            prefix = [0.0]
            for i in range(model.blocks + 2):
                prefix.append(
                    prefix[-1] + min(model.stage_time(k.index, mbs, i, i + 1)[0] for k in kinds)
                )
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
            per_pool = [
                [
                    min(
                        (
                            k.tp * model.stage_time(k.index, mbs, i, i + 1)[0]
                            for k in model.kinds
                            if k.pool == slot.index
                        ),
                        default=float("inf"),
                    )
                    for i in range(n)
                ]
                for slot in model.pools
            ]
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

    def sync_bound(self, stages: int, dp: int) -> float:
        """max_i y_i >= the cheapest whole-model ring over D ranks, divided by P: the ring
        time is affine in bytes with a non-negative intercept, and the largest stage holds at
        least 1/P of the gradients."""
        if dp < 2:
            return 0.0
        if dp not in self._sync_bound:
            model = self.model
            whole = (0, model.blocks, True, True)
            kinds = range(len(model.kinds))
            self._sync_bound[dp] = min(model.ring(a, b, whole, dp) for a in kinds for b in kinds)
        return self._sync_bound[dp] / stages

    def bound(self) -> float:
        """The objective value a candidate must beat (or tie) to become the best."""
        return self.ranked[0].value if self.ranked else float("inf")

    def shape_bound(self, mbs: int, stages: int, dp: int) -> float:
        prefix = self.layer_best(mbs, self.affordable_tp(stages, dp))
        fill = prefix[-1]
        worst_layer = max(prefix[i + 1] - prefix[i] for i in range(len(prefix) - 1))
        work = self.device_work(mbs)[0][-1]
        free = self.effective_devices(mbs, [0] * len(self.capacity))
        straggler = max(fill / stages, worst_layer, work * dp / free if free > 0 else 0.0)
        m = -(-(self.model.batch // mbs) // dp)
        t = fill + (m - 1) * straggler + self.sync_bound(stages, dp)
        bound = self.objective_bound(t, dp * stages * self._min_tp * self._cheapest)
        if self.objective == "min_cost":
            bound = max(bound, self.work_cost(mbs))
        return bound

    def work_cost(self, mbs: int) -> float:
        """Cost >= the device-seconds every microbatch needs at the cheapest rate per unit of
        work: each of the B / m microbatches costs pool p at least W / sigma_p device-seconds
        (`device_work`), paid at its price, whatever the layout."""
        work, sigma = self.device_work(mbs)
        cheapest = min(
            (slot.pool.price / s for slot, s in zip(self.model.pools, sigma, strict=True) if s > 0),
            default=0.0,
        )
        return (self.model.batch // mbs) * work[-1] * cheapest

    def objective_bound(self, t: float, rate: float) -> float:
        if self.objective == "max_throughput":
            return t
        return t * rate

    def violates(self, t: float, rate: float, egress: float = 0.0) -> bool:
        """A lower bound already breaks the budget or the throughput floor."""
        if self.time_cap is not None and t > self.time_cap:
            return True
        return self.budget is not None and t * rate + egress > self.budget

    # -- the search -----------------------------------------------------------------------

    def run(self) -> SearchResult:
        model = self.model
        shapes = []
        for mbs in model.microbatch_sizes():
            total = model.batch // mbs
            for stages in range(1, model.blocks + 1):
                for dp in range(1, total + 1):
                    if dp * stages * self._min_tp > self.total_devices:
                        break
                    shapes.append((self.shape_bound(mbs, stages, dp), mbs, stages, dp))
        shapes.sort()
        stop = ""
        try:
            if "kind-profiles" not in self.approx:
                self._warm_start()
            if "dp-order" in self.approx:
                self._dp_ordered(shapes)
            else:
                for lb, mbs, stages, dp in self._shallow_first(shapes):
                    if lb > self.bound():
                        continue
                    self._check_limits()
                    self.shape(mbs, stages, dp)
                for lb, mbs, stages, dp in shapes:
                    if lb > self.bound():
                        break
                    self._check_limits()
                    self.shape(mbs, stages, dp)
        except _Stop as why:
            stop = str(why)
        return SearchResult(
            candidates=self.alternatives(),
            evaluations=self.evaluations,
            complete=not stop,
            seconds=time.perf_counter() - self.started,
            stop_reason=stop,
            greedy_count_leaves=self.greedy_counts,
        )

    def _shallow_first(
        self, shapes: list[tuple[float, int, int, int]]
    ) -> list[tuple[float, int, int, int]]:
        """The most promising shapes of one and two stages, searched first: deep pipelines
        have the loosest bounds, so an incumbent from a shallow one prunes most of them. The
        main pass meets these shapes again; their memoised work is redone, not their answer
        changed (the search is the same, only the incumbent is known earlier)."""
        shallow = [s for s in shapes if s[2] <= 2]
        return shallow[:SHALLOW_SHAPES]

    def _warm_start(self) -> None:
        """Seed the incumbent with the `kind-profiles` answer: every candidate it finds is a
        real one, so the exact search only gets a tighter bound from the start."""
        seed = _Search(
            self.model,
            SearchOptions(
                top=self.options.top,
                approximations=self.approx | {"kind-profiles"},
                eval_limit=self.options.eval_limit,
                time_limit=self.options.time_limit,
                must_use=self.options.must_use,
            ),
        )
        seed.started = self.started
        result = seed.run()
        self.evaluations += result.evaluations
        self.greedy_counts += result.greedy_count_leaves
        for candidate in result.candidates:
            self.offer(candidate)
        if not result.complete:
            raise _Stop(result.stop_reason)

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
        """Search one (m, P, D); returns the best objective found in it, or None."""
        self._shape_best: float | None = None
        if "kind-profiles" in self.approx:
            self.profiles(mbs, stages, dp)
            return self._shape_best
        self._memo: dict[tuple[object, ...], list[tuple[float, ...]]] = {}
        state = _Partial(
            stages=stages, mbs=mbs, dp=dp, boundaries=(0,), forced=(0,) * len(self.model.pools)
        )
        self.stage(state, 0, 0)
        return self._shape_best

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
        for group in groups:
            for size in range(1, min(limit, len(group)) + 1):
                for combo in combinations(group, size):
                    if "one-region-stage" in self.approx and not self._one_region(combo):
                        continue
                    t = max(model.stage_time(k, mbs, first, end)[0] for k in combo)
                    sets.append((t, combo))
        sets.sort()
        self._sets[key] = sets
        return sets

    def _one_region(self, combo: Iterable[int]) -> bool:
        model = self.model
        return len({model.pools[model.kinds[k].pool].zone.region for k in combo}) == 1

    # -- kind-profiles: the declared approximation for large clusters -----------------------

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
        return self.model.stage_compute(option, mbs, first, end)

    def profiles(self, mbs: int, stages: int, dp: int) -> None:
        """`kind-profiles`: enumerate profiles (options and their stage counts), bound each by
        its fractional straggler, split the survivors greedily, score them exactly."""
        model = self.model
        options = self.stage_options()
        whole = model.blocks + 2
        speed = {o: self.option_time(o, mbs, 0, whole) for o in options}
        ordered = sorted(options, key=lambda o: (-speed[o], o))
        m1 = -(-(model.batch // mbs) // dp) - 1
        fill_lb = self.layer_best(mbs, self.affordable_tp(stages, dp))[-1]
        sync_lb = self.sync_bound(stages, dp)
        bound = self.bound()
        hosts = [o for o in ordered if self._profile_fits_quota((o,), dp)]
        alone = {o: fill_lb + m1 * speed[o] / stages + sync_lb for o in hosts}
        useful = [o for o in hosts if not (self.objective == "max_throughput" and alone[o] > bound)]
        profiles: list[tuple[tuple[int, ...], ...]] = [(o,) * stages for o in useful]
        for x, slow in enumerate(hosts):
            for fast in hosts[x + 1 :]:
                if self.objective == "max_throughput" and alone[fast] > bound:
                    continue
                for n in range(1, stages):
                    profiles.append((slow,) * n + (fast,) * (stages - n))
        for sequence in profiles:
            self._check_limits()
            if not self._profile_fits_quota(sequence, dp):
                continue
            capacity = sum(1.0 / speed[o] for o in sequence)
            lb_t = fill_lb + m1 * (1.0 / capacity) + sync_lb
            if self.objective == "max_throughput" and lb_t > self.bound():
                continue
            if self.time_cap is not None and lb_t > self.time_cap:
                continue
            boundaries = self.min_max_split(sequence, mbs, dp, 1.0 / capacity)
            if boundaries is None:
                continue
            self.leaf(_Partial(stages=stages, mbs=mbs, dp=dp, boundaries=boundaries, sets=sequence))

    def _profile_fits_quota(self, sequence: Sequence[tuple[int, ...]], dp: int) -> bool:
        """Whether the profile's stages fit every quota and max_gpus (cached per run length:
        a profile is at most two runs of one option each)."""
        runs: dict[tuple[int, ...], int] = {}
        for option in sequence:
            runs[option] = runs.get(option, 0) + 1
        key = (tuple(sorted(runs.items())), dp)
        cached = self._quota_fits.get(key)
        if cached is None:
            cached = self._runs_fit(runs, dp)
            self._quota_fits[key] = cached
        return cached

    def _runs_fit(self, runs: dict[tuple[int, ...], int], dp: int) -> bool:
        kinds, need = self.model.kinds, [0] * len(self.capacity)
        spread: dict[tuple[int, ...], int] = {}
        for option, stages in runs.items():
            devices = stages * dp * kinds[option[0]].tp
            if len(option) == 1:
                need[kinds[option[0]].pool] += devices
            else:
                spread[option] = spread.get(option, 0) + devices
        if any(n > c for n, c in zip(need, self.capacity, strict=True)):
            return False
        for option, devices in spread.items():
            pools = {kinds[k].pool for k in option}
            if devices > sum(self.capacity[p] - need[p] for p in pools):
                return False
        return sum(need) + sum(spread.values()) <= self.total_devices

    def _stage_ok(
        self,
        option: tuple[int, ...],
        mbs: int,
        first: int,
        end: int,
        dp: int,
        flight: int,
        budget: float,
    ) -> bool:
        """Layers [first, end) on `option` stay within `budget` seconds and in memory."""
        model = self.model
        for k in option:
            if model.stage_time(k, mbs, first, end)[0] > budget:
                return False
        return all(model.fits(k, mbs, first, end, dp, flight) for k in option)

    def min_max_split(
        self, sequence: Sequence[tuple[int, ...]], mbs: int, dp: int, floor: float = 0.0
    ) -> tuple[int, ...] | None:
        """The boundaries minimising max_i (t_i + sends) for this sequence of options:
        bisection on the straggler, each test filling stages greedily (as many blocks as fit
        under it and in memory), which is exact for stage times monotone in their blocks."""
        model = self.model
        stages = len(sequence)
        m = -(-(model.batch // mbs) // dp)
        sends = [model.send_between(a, b, mbs) for a, b in pairwise(sequence)]
        padded = [0.0, *sends, 0.0]

        def fill(limit: float) -> tuple[int, ...] | None:
            bounds, start = [0], 0
            for j, option in enumerate(sequence):
                first = 0 if j == 0 else start + 1
                flight = max(1, min(stages - j, m))
                budget = limit - padded[j] - padded[j + 1]

                ok = self._stage_ok
                if j == stages - 1:
                    if not ok(option, mbs, first, model.blocks + 2, dp, flight, budget):
                        return None
                    bounds.append(model.blocks)
                    return tuple(bounds)
                lo, hi = start + 1, model.blocks - (stages - 1 - j)
                if lo > hi or not ok(option, mbs, first, lo + 1, dp, flight, budget):
                    return None
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if ok(option, mbs, first, mid + 1, dp, flight, budget):
                        lo = mid
                    else:
                        hi = mid - 1
                bounds.append(lo)
                start = lo
            return None

        top = (
            sum(self.option_time(o, mbs, 0, model.blocks + 2) for o in set(sequence))
            + sum(sends) * 2
        )
        best = fill(top)
        if best is None:
            return None
        low = floor
        while top - low > SPLIT_TOLERANCE * top:
            mid = (low + top) / 2
            found = fill(mid)
            if found is None:
                low = mid
            else:
                top, best = mid, found
        return best

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

    def stage(self, state: _Partial, index: int, start: int) -> None:
        """Choose stage `index` (its end block and kind set) after `state`, then recurse."""
        model = self.model
        self._check_limits()
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
        for end in ends:
            end_layer = end + 2 if last else end + 1
            rest_fill = prefix[-1] - prefix[end_layer]
            rest_straggler = rest_fill / remaining if remaining else 0.0
            rest_work = (work[-1] - work[end_layer]) * dp
            key = (start, end, index == 0, last)
            for t, combo in self.kind_sets(mbs, dp, flight, first_layer, end_layer):
                send = model.send_between(previous, combo, mbs) if index else 0.0
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

    def _dominated(self, key: tuple[object, ...], values: tuple[float, ...]) -> bool:
        """Whether a partial with the same future (stage, end, neighbouring sets, resources)
        and no worse in every term was already expanded; records `values` if not."""
        held = self._memo.setdefault(key, [])
        for other in held:
            if all(o <= v for o, v in zip(other, values, strict=True)):
                return True
        held[:] = [o for o in held if not all(v <= x for v, x in zip(values, o, strict=True))]
        held.append(values)
        return False

    def leaf(self, state: _Partial) -> None:
        model = self.model
        self.evaluations += 1
        self._check_limits()
        shape = Shape(microbatch=state.mbs, boundaries=state.boundaries, pipelines=state.dp)
        counts = self.cheapest_counts(state.sets, state.dp)
        if counts is None:
            return
        estimate = model.estimate(shape, counts)
        if not estimate.feasible or any(not estimate.nodes[p] for p in self.options.must_use):
            return
        candidate = Candidate(
            shape=shape, assignment=counts, estimate=estimate, objective=self.objective
        )
        value = candidate.value
        if self._shape_best is None or value < self._shape_best:
            self._shape_best = value
        self.offer(candidate)

    def offer(self, candidate: Candidate) -> None:
        """Keep the best candidate of each signature; `ranked[0]` is the incumbent."""
        signature = candidate.signature(self.model)
        held = self.best.get(signature)
        if held is not None and held.key() <= candidate.key():
            return
        self.best[signature] = candidate
        if not self.ranked or candidate.key() < self.ranked[0].key():
            self.ranked = [candidate]

    def alternatives(self) -> tuple[Candidate, ...]:
        """The best, then the best-scored candidate of each other signature the search met,
        up to `top` in all: pruning uses the best alone, so the alternatives are the best
        ones found, not proven second best."""
        return tuple(sorted(self.best.values(), key=Candidate.key)[: self.options.top])

    def cheapest_counts(self, sets: Sequence[tuple[int, ...]], dp: int) -> Assignment | None:
        """Replica counts for the kind sets with the least rental rate inside every quota and
        max_gpus, or None if none fit. Exact (`_counts_by_dp`) while the splits of the mixed
        stages number at most EXACT_COUNT_SPLITS; beyond, `_counts_greedy`, which fills
        already-rented devices first, then the cheapest pool per device."""
        splits = 1
        for combo in sets:
            splits *= math.comb(dp - 1, len(combo) - 1)
            if splits > EXACT_COUNT_SPLITS:
                self.greedy_counts += 1
                return self._counts_greedy(sets, dp)
        return self._counts_by_dp(sets, dp)

    def _counts_greedy(self, sets: Sequence[tuple[int, ...]], dp: int) -> Assignment | None:
        model = self.model
        used = [0] * len(model.pools)
        chosen = []
        for combo in sets:
            counts = dict.fromkeys(combo, 1)
            for k in combo:
                used[model.kinds[k].pool] += model.kinds[k].tp
            for _ in range(dp - len(combo)):
                best_kind, best_cost = -1, math.inf
                for k in combo:
                    kind = model.kinds[k]
                    slot = model.pools[kind.pool]
                    if used[kind.pool] + kind.tp > self.capacity[kind.pool]:
                        continue
                    gpn = slot.pool.gpus_per_node
                    spare = -used[kind.pool] % gpn
                    cost = 0.0 if spare >= kind.tp else slot.pool.price * gpn
                    if cost < best_cost:
                        best_kind, best_cost = k, cost
                if best_kind < 0:
                    return None
                counts[best_kind] += 1
                used[model.kinds[best_kind].pool] += model.kinds[best_kind].tp
            chosen.append(tuple(sorted(counts.items())))
        if any(u > c for u, c in zip(used, self.capacity, strict=True)):
            return None
        return tuple(chosen)

    def _counts_by_dp(self, sets: Sequence[tuple[int, ...]], dp: int) -> Assignment | None:
        """The exact least-rate counts: a dynamic programme over device counts per pool, one
        stage at a time, keeping the first way to reach each count vector."""
        model = self.model
        pools = len(model.pools)
        states: dict[tuple[int, ...], tuple[tuple[tuple[int, int], ...], ...]] = {(0,) * pools: ()}
        for combo in sets:
            options = list(_splits(dp, len(combo)))
            nxt: dict[tuple[int, ...], tuple[tuple[tuple[int, int], ...], ...]] = {}
            for used, chosen in states.items():
                for split in options:
                    vector = list(used)
                    for k, count in zip(combo, split, strict=True):
                        kind = model.kinds[k]
                        vector[kind.pool] += count * kind.tp
                    if any(v > c for v, c in zip(vector, self.capacity, strict=True)):
                        continue
                    key = tuple(vector)
                    if key not in nxt:
                        nxt[key] = (*chosen, tuple(zip(combo, split, strict=True)))
            states = nxt
            if not states:
                return None
        best: tuple[float, tuple[int, ...]] | None = None
        limit = model.spec.constraints.max_gpus
        for reached in states:
            nodes = tuple(
                -(-v // slot.pool.gpus_per_node)
                for v, slot in zip(reached, model.pools, strict=True)
            )
            if limit is not None and model.rented_devices(nodes) > limit:
                continue
            rate = model.rental_rate(nodes)
            if best is None or (rate, reached) < best:
                best = (rate, reached)
        return None if best is None else states[best[1]]

    def _check_limits(self) -> None:
        options = self.options
        if options.eval_limit is not None and self.evaluations > options.eval_limit:
            raise _Stop(f"evaluation limit {options.eval_limit} reached")
        now = time.perf_counter()
        if options.time_limit is not None and now - self.started > options.time_limit:
            raise _Stop(f"time limit {options.time_limit:g} s reached")
        if options.progress is not None and now - self.last_report >= options.progress_every:
            self.last_report = now
            options.progress(self.evaluations, now - self.started, next(iter(self.ranked), None))


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


def _splits(total: int, parts: int) -> Iterable[tuple[int, ...]]:
    """Every way to write `total` as `parts` positive integers, in lexicographic order."""
    if parts == 1:
        yield (total,)
        return
    for first in range(1, total - parts + 2):
        for rest in _splits(total - first, parts - 1):
            yield (first, *rest)


def search(model: PlanningModel, options: SearchOptions | None = None) -> SearchResult:
    """The best `options.top` candidates of distinct signature (see the module docstring)."""
    return _Search(model, options or SearchOptions()).run()
