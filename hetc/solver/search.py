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
   kind; S_lb = max(F_lb / P, the slowest such layer, the least time of ceil(L / P)
   consecutive blocks (one stage holds that many), D x W / G_eff) with W the least
   device-seconds of the model and G_eff the devices weighted by how fast each pool can be
   relative to the best (`device_work`: device-time conservation); Y_lb the cheapest ring
   over D ranks of 1/P of the gradients, at least 2 (D - 1) link latencies, over links that
   cross zones or regions where D replicas cannot stay inside one (`sync_bound`). With
   P > 1 every boundary sends at least the least send s between any two pools, both ways in
   the fill, and each stage's period adds its sends to its compute: F_lb gains 2 (P - 1) s,
   each floor of S_lb gains s, and from P = 3 the device-time one 2 s less what the two end
   stages' devices can absorb (`_period_terms`). Each (m, P) enters the order under a
   bound on all its D (`range_bound`), is split into ranges of D under their own bounds
   when reached, and its shapes are listed only when their range is reached, so the order
   is unchanged. Cost >= that time x (D x P x least TP devices at the cheapest price), and
   >= each layer's least TP x time x price over the kinds, for ceil(B / (m D)) x D
   microbatches (`work_cost`), plus the device-seconds every device must idle, waiting on
   the other stages, their sends and the sync, at the cheapest price (`idle_cost`).
   Two relaxations on whole blocks and whole TP degrees (`cover.StageCover`) cut further:
   no (m, P) has more pipelines than its stages' memory lets the devices hold (`_last_dp`);
   and on one device type, for max_throughput, a shape is searched only if P stages of at
   least one block each could all run within the largest straggler with which it could
   still win, on the devices there are (`_may_win`).
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

How `kind-profiles` searches its own space without losing anything of it (tested against
the same space enumerated with no pruning, tests/test_solver_profiles.py): a profile is a
slow option on the first n stages and a fast one on the rest. With several device types,
the D of each (m, P) stop where no pair of options could hold its stages in memory within
the quotas, each stage whole on one option (`_profile_last`). Per shape, a Lagrangian dual
of the linear relaxation bounds sum_i 1 / speed_i over every quota-feasible profile
(`_most_capacity`), and with the least time of ceil(L / P) consecutive blocks (one stage
holds that many) bounds the straggler; for min_cost and budgets a cost floor follows from
the same terms. Per pair of options, the feasible n form an interval by Hall's condition on
the pools they draw from (`_run_lengths`), cut further in closed form by the incumbent
(`_within`); feasibility only shrinks as P grows, so a shape reads the pairs listed by the
most stages they may fit and stops at the first that cannot fit it (for min_cost, listed by
their least cost per pass, it stops at the first whose cost floor exceeds the incumbent).
Where P x D devices cannot stay inside two zones, every profile has an option spanning
zones, and its stages ring across them: the shape's bound adds the least such ring an
option that fits the shape pays (`_zone_rings`). Per profile, the bound adds its own sends
both ways, the ring of its widest stage and of its first and last stage (`_end_ring`), its
egress and its least rental rate; profiles are then split and scored in order of that
bound. The split first tries the largest straggler that could still win
(`_straggler_ceiling`): one greedy fill rejects most profiles. Of a pair of
options and its mirror image under a swap of two identical zones, only the earlier is
searched (`_zone_swaps`): the two score the same; with `must_use`, only pairs drawing on
every forced pool (`_may_use_forced`). Before the profiles, plans outside their space seed
the incumbent: where a region holds one device in three zones or more, each stage in its
own zone (`_zone_stripes`), which two options per pipeline cannot express.

Declared approximations (`APPROXIMATIONS`, each a flag; `planner.default_approximations`
turns `kind-profiles` on for large clusters): `kind-profiles` (the fast enumerator below:
one kind or one H6 region-wide set per stage, at most two per pipeline, min-max splits),
`dp-order` (Sailor's H3/H4: D from large to small for throughput, small to large for cost,
stopping when the objective stops improving), `one-region-stage` (H5: a stage's replicas in
one region). bench/approximations.py measures what each costs in plan quality.

Only the best candidate is proven best. `top` K > 1 adds, per other signature (P, m and the
devices of each stage), the best candidate the search scored; the bounds then prune against
the K-th best signature rather than the best, so every candidate that could be among the K
is still scored (the dominance rule of step 3 may still drop one: alternatives are good, not
proven second best). Ties are broken by the documented order in `Candidate.key`: objective,
then the other metric, rented devices, P, D, microbatch size, boundaries, assignment (under
`kind-profiles`, up to mirror images of identical zones, which are searched once).
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache
from itertools import combinations, pairwise
from operator import sub
from threading import Event
from typing import NamedTuple

from hetc.costmodel.network import FLAT, effective_bandwidth
from hetc.costmodel.planning import Assignment, Estimate, PlanningModel, Shape
from hetc.solver.certificate import Snapshot, relative_gap, some_pool_is_free
from hetc.solver.cover import StageCover, last_true

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
        " split that minimises its straggler; plus zone stripes (one zone per stage) where a"
        " region holds one device in three zones or more"
    ),
}

SPLIT_TOLERANCE = 1e-6
"""Relative width at which the straggler bisection of `min_max_split` stops: splits whose
stragglers differ by less are the same plan to within the model's accuracy."""

CUT_SLACK = 1 + 1e-9
"""Relative slack on a bound that ends a sorted scan: the sort key and the bound are rounded
differently, so an exact tie must not end the scan one row early."""

NO_ROOM = 1 << 30
"""What `_Search._reach_sums` counts for a stage that holds no block: more than any model
has, so a profile with such a stage never holds the model."""

SHALLOW_SHAPES = 24
"""Shapes of one or two stages searched before the others (see `_Search._best_first`)."""

RANGE_SPAN = 8
"""A range of D of (m, P) of at most this many D is listed shape by shape when reached, a
wider one split in two under their own bounds (`_Search._pop_shape`)."""

EXACT_COUNT_SPLITS = 20_000
"""Most count splits the exact leaf programme enumerates; only large mixed stages exceed it."""

Progress = Callable[[Snapshot], None]

Option = tuple[int, ...]
"""A stage option of `kind-profiles`: replica kind indices sharing one device and TP."""

_RoomEntry = tuple[
    int, Option, Option, tuple[int, int, int, int, int], tuple[int, int, int, int, int]
]
"""An entry of `_Search._pairs_by_room`."""


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
    stop: Event | None = None
    """Once set (from a signal handler or another thread), the search stops at its next
    check and returns the best found so far, `interrupted`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchResult:
    candidates: tuple[Candidate, ...]
    """Best first; empty when nothing is feasible."""
    evaluations: int
    complete: bool
    """False when a time or evaluation limit, or `SearchOptions.stop`, ended it early."""
    seconds: float
    lower_bound: float
    """No candidate scores below this (`certificate` module docstring); the best's value when
    complete, infinite when complete with no candidate."""
    gap: float | None
    """`certificate.relative_gap` of the best and `lower_bound`: 0 when proven best, None
    when there is no candidate."""
    interrupted: bool = False
    """Ended by `SearchOptions.stop`."""
    stop_reason: str = ""
    greedy_count_leaves: int = 0
    """Leaves whose replica counts came from the greedy, not the exact programme."""


class _Stop(Exception):
    def __init__(self, reason: str, *, interrupted: bool = False) -> None:
        super().__init__(reason)
        self.interrupted = interrupted


class _Pair(NamedTuple):
    """What the bounds of every profile over two options need, apart from P and D."""

    slow: Option
    fast: Option
    share: float
    """`_Search._work_share` of the two."""
    speed_slow: float
    speed_fast: float
    send_ss: float
    send_sf: float
    send_ff: float
    egress_ss: float
    egress_sf: float
    egress_ff: float
    per_stage: float
    """Least tp x price of the two (`_cost_floor`)."""
    per_pass: float
    """Least tp x price x speed of the two."""
    fill: float
    """Every layer on the faster of the two (`_Search._pair_fill`)."""


class _PairAt(NamedTuple):
    """A row of `_Search._pairs`: a pair, and what its profiles' bounds need at D apart
    from P. A row holds its pair rather than a copy of its fields: a table is built for
    every (m, D) a shape reaches."""

    pair: _Pair
    ring_slow: float
    ring_fast: float
    """One block's ring at D on each (`_Search._block_ring`)."""
    ring_egress_slow: float
    ring_egress_fast: float
    most_stages: int
    """At least the most stages of D replicas a profile over the two fits in the quotas
    (`_most_stages`)."""


class _BuiltAsRead:
    """A table read from the top that builds its rows only as far as it is read: a reader
    goes over the rows built so far, then draws new ones from the source."""

    __slots__ = ("_built", "_source")

    def __init__(self, source: Iterator[_PairAt]) -> None:
        self._built: list[_PairAt] = []
        self._source = source

    def __iter__(self) -> Iterator[_PairAt]:
        built = self._built
        yield from built
        for row in self._source:
            built.append(row)
            yield row


def _first(entry: tuple[int, _Pair]) -> int:
    """The sort key of a pair table's (most stages, row) entries."""
    return entry[0]


def _most_stages(dp: int, same: bool, sizes: tuple[int, int, int, int, int]) -> int:
    """At least the largest P for which `_Search._run_lengths` has some n, from the pair's
    `_Search._pair_sizes`: its conditions at the n that favours each (n stages of the slow
    option and P - n of the fast one fit their pools, so P <= S_slow + S_fast;
    n (w_slow - w_fast) + P w_fast <= both, least at n = 1 or n = P - 1), with w = D x TP.
    Feasibility only shrinks as P grows, so a shape of more stages than this has no
    profile over the pair. A function of plain numbers: the pair tables call it for every
    row at every (m, D)."""
    tp_slow, tp_fast, room_slow, room_fast, both = sizes
    width_slow, width_fast = dp * tp_slow, dp * tp_fast
    if same:
        return room_slow // width_slow
    if room_slow < width_slow:
        return 0
    slope = width_slow - width_fast
    return min(
        room_slow // width_slow + room_fast // width_fast,
        (both - slope) // width_fast if slope >= 0 else (both + slope) // width_slow,
    )


class _Search:
    def __init__(self, model: PlanningModel, options: SearchOptions, *, free: bool = False) -> None:
        self.model = model
        self.options = options
        self.objective = model.spec.objective
        self.free = free
        """The free plans of a min_cost spec, fastest first (`certificate.some_pool_is_free`):
        searched as max_throughput within a budget of 0 USD per iteration."""
        if free:
            self.objective = "max_throughput"
        self._queues: list[list[tuple[float, int, int, int, int, int]]] = []
        """The best-first queues while `_best_first` runs: what is not yet explored."""
        self._searching = math.inf
        """The bound of the shape being searched; infinite between shapes."""
        constraints = model.spec.constraints
        self.budget = 0.0 if free else constraints.max_cost_per_iteration
        self.time_cap = 1.0 / constraints.min_throughput if constraints.min_throughput else None
        self.capacity = [slot.pool.max_nodes * slot.pool.gpus_per_node for slot in model.pools]
        total = sum(self.capacity)
        if constraints.max_gpus is not None:
            total = min(total, constraints.max_gpus)
        self.total_devices = total
        self.best: dict[tuple[object, ...], Candidate] = {}
        self.ranked: list[Candidate] = []
        self._kth = math.inf
        self.evaluations = 0
        self.greedy_counts = 0
        """Leaves whose counts came from the greedy (see `cheapest_counts`)."""
        self.started = time.perf_counter()
        self.last_report = self.started
        self.approx = options.approximations
        self._layer_best: dict[tuple[int, int], list[float]] = {}
        self._sigma_order: dict[int, list[int]] = {}
        self._sync_rings: dict[int, tuple[float, float, tuple[int, int], tuple[float, float]]] = {}
        self._ring_pairs: list[tuple[int, int, int, float]] | None = None
        self._frontier: list[tuple[int, int, int, float]] | None = None
        self._lasts: dict[tuple[int, int], int] = {}
        self._group_list: list[tuple[float, int, int]] | None = None
        self._room_order: list[_RoomEntry] | None = None
        self._ranks: dict[int, dict[Option, int]] = {}
        self._shares_held: dict[tuple[object, ...], bool] = {}
        self._reach_tables: dict[tuple[object, ...], tuple[list[int], list[int], int]] = {}
        zones: dict[str, int] = {}
        regions: dict[str, int] = {}
        for slot, devices in zip(model.pools, self.capacity, strict=True):
            zones[slot.zone.name] = zones.get(slot.zone.name, 0) + devices
            regions[slot.zone.region] = regions.get(slot.zone.region, 0) + devices
        self._locality_capacity = (list(zones.values()), list(regions.values()))
        """Devices per zone and per region, for `_sync_terms`."""
        self._work: dict[int, tuple[list[float], list[float]]] = {}
        self._options: list[tuple[int, ...]] | None = None
        self._combo_info: dict[
            tuple[tuple[int, ...], int], tuple[tuple[tuple[int, int], ...], int]
        ] = {}
        self._cheapest = min((slot.pool.price for slot in model.pools), default=0.0)
        """USD per device-second of the cheapest pool: rate >= devices x this."""
        self._min_tp = min((k.tp for k in model.kinds), default=1)
        self._tp_degrees = sorted({k.tp for k in model.kinds})
        self._shape_terms: dict[tuple[int, int], tuple[float, float, float, float]] = {}
        self._periods: dict[
            tuple[int, int, int], tuple[float, float, tuple[tuple[float, float], ...], float]
        ] = {}
        self._least_sends: dict[int, float] = {}
        self._work_costs: dict[int, float] = {}
        self._shape_best: float | None = None
        """The best objective found in the shape being searched (`shape`)."""
        self._sets: dict[tuple[int, int, int, int, int], list[tuple[float, tuple[int, ...]]]] = {}
        self._speeds: dict[int, tuple[dict[Option, float], list[Option]]] = {}
        self._time_prefixes: dict[tuple[int, int], list[float]] = {}
        self._memory_ends: dict[tuple[int, int, int, int, int], int] = {}
        self._host_lists: dict[tuple[int, int], list[Option]] = {}
        self._duals: dict[int, list[tuple[float, float]]] = {}
        self._block_egresses: dict[tuple[Option, int], float] = {}
        self._stage_rings: dict[tuple[Option, int, tuple[int, int, bool, bool]], float] = {}
        self._option_facts: dict[Option, tuple[int, int, float, int]] = {}
        self._send = cache(model.send_between)
        """The planning model's sends and boundary egress between two options, cached: the
        profile bounds and every split ask for the same few pairs again and again."""
        self._boundary_egress = cache(model.boundary_egress)
        self._shares: dict[tuple[tuple[tuple[str, int], ...], int], float] = {}
        self._classes: dict[tuple[Option, ...], tuple[tuple[str, int], ...]] = {}
        self._fills: dict[tuple[tuple[tuple[str, int], ...], int], float] = {}
        self._windows: dict[tuple[int, int], list[float]] = {}
        self._class_windows: dict[tuple[str, int, int], list[float]] = {}
        self._least_windows: dict[tuple[int, int, int], float] = {}
        self._pair_tables: dict[tuple[int, int, bool], _BuiltAsRead] = {}
        self._pair_constants: dict[int, list[_Pair]] = {}
        self._sized_rows: dict[int, list[tuple[_Pair, tuple[int, int, int, int, int]]]] = {}
        self._cost_ordered: dict[int, list[tuple[_Pair, tuple[int, int, int, int, int]]]] = {}
        self._cost_tables: dict[tuple[int, int, bool], _BuiltAsRead] = {}
        self._all_share: dict[int, float] = {}
        """`_work_share` of every option, by microbatch size."""
        self._host_windows: dict[tuple[int, int, int], float] = {}
        self._crossing_rings: dict[int, list[tuple[float, int]]] = {}
        self._zone_options: tuple[int, int, list[Option], list[Option]] | None = None
        self._flat_links: bool | None = None
        self._pass_sum_lists: dict[tuple[int, int], tuple[list[float], list[float]]] = {}
        self._ring_reps: dict[Option, list[tuple[int, int]]] = {}
        self._host_prices: dict[tuple[int, int], tuple[float, float]] = {}
        self._pair_rooms: dict[tuple[Option, Option], tuple[int, int, int]] = {}
        self._stage_room: dict[Option, tuple[int, int]] = {}
        self._swaps: list[dict[int, int]] | None = None
        self._moving: dict[Option, list[int]] = {}
        self._swap_index: dict[int, list[int]] | None = None
        self._cover = StageCover(
            model, self.capacity, self.total_devices, lambda mbs: self.device_work(mbs)[1]
        )

    # -- bounds ---------------------------------------------------------------------------

    def layer_best(self, mbs: int, max_tp: int) -> list[float]:
        """Prefix sums over the layer sequence of each layer's fastest time on any kind of TP
        at most `max_tp` (the largest a shape can afford in even one stage)."""
        key = (mbs, self._tp_cap(max_tp))
        if key not in self._layer_best:
            model = self.model
            kinds = [k for k in model.kinds if k.tp <= key[1]] or list(model.kinds)
            rows = {model.layer_compute(k.device, k.tp, mbs) for k in kinds}
            prefix = [0.0]
            for least in map(min, *rows) if len(rows) > 1 else next(iter(rows)):
                prefix.append(prefix[-1] + least)
            self._layer_best[key] = prefix
        return self._layer_best[key]

    def _tp_cap(self, max_tp: int) -> int:
        """The largest TP degree of any kind at most `max_tp`, 0 if none: the bounds depend on
        a TP cap only through it."""
        degrees = self._tp_degrees
        at = bisect_right(degrees, max_tp)
        return degrees[at - 1] if at else 0

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
            for slot in model.pools:
                rows = [
                    [k.tp * t for t in model.layer_compute(k.device, k.tp, mbs)]
                    for k in model.kinds
                    if k.pool == slot.index
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

    def sync_bound(self, stages: int, dp: int, whole_ring: bool = True) -> float:
        """max_i y_i >= the cheapest whole-model ring over D ranks, divided by P (the ring
        time is affine in bytes with a non-negative intercept, and the largest stage holds at
        least 1/P of the gradients), and >= 2 (D - 1) link latencies, which a ring pays
        whatever its bytes. Where the rings must cross zones (or regions), only links that
        cross count: a stage of D replicas needs at least D x (least TP) devices, so when no
        zone has that many every stage's ring crosses zones, and when the zones cannot hold
        P such stages whole at least one does (`_sync_terms`). Without `whole_ring`, the
        latency terms alone (`_range_sync`)."""
        if dp < 2:
            return 0.0
        terms = self._sync_rings.get(dp)
        if terms is None:
            terms = self._sync_rings[dp] = self._sync_terms(dp)
        whole, latency, (whole_zones, whole_regions), (zone_latency, region_latency) = terms
        some = (
            region_latency
            if whole_regions < stages
            else zone_latency
            if whole_zones < stages
            else 0.0
        )
        # two arguments at a time, which a compiled build inlines (setup.py)
        return max(max(whole / stages if whole_ring else 0.0, latency), some)

    def _range_sync(self, stages: int, dp: int) -> float:
        """A lower bound on `sync_bound(stages, D)` at every D >= `dp`. Its terms never fall
        as D grows: 2 (D - 1) link latencies, and the zones and regions hold fewer stages
        of D replicas; on flat-curve links a ring of D ranks takes 2 (D - 1) (latency +
        bytes / (D x rate)), which grows with D, so there the whole-model ring counts too,
        but not on a measured message-size curve, where smaller messages may go faster."""
        if dp < 2:
            return 0.0
        if self._flat_links is None:
            model = self.model
            self._flat_links = all(
                model.measured_link(
                    model.kinds[a].pool,
                    model.kinds[b].pool,
                    max(model.kinds[a].tp, model.kinds[b].tp),
                )[1]
                is FLAT
                for a, b, _, _ in self._distinct_rings()
            )
        return self.sync_bound(stages, dp, whole_ring=self._flat_links)

    def _sync_terms(self, dp: int) -> tuple[float, float, tuple[int, int], tuple[float, float]]:
        """For `sync_bound` at D: the least whole-model ring and ring latency over the links
        every stage's ring must cross; how many stages of D x (least TP) devices the zones,
        and the regions, hold whole; the least ring latency across zones and across
        regions."""
        whole = (0, self.model.blocks, True, True)
        least = [(math.inf, math.inf)] * 3
        for a, b, level, latency in self._ring_frontier():
            ring = self.model.ring(a, b, whole, dp)
            for at in range(level + 1):
                w, lat = least[at]
                least[at] = (min(w, ring), min(lat, 2 * (dp - 1) * latency))
        need = dp * self._min_tp
        zones, regions = self._locality_capacity
        every = 2 if need > max(regions) else 1 if need > max(zones) else 0
        held = (sum(u // need for u in zones), sum(u // need for u in regions))
        return (*least[every], held, (least[1][1], least[2][1]))

    def _distinct_rings(self) -> list[tuple[int, int, int, float]]:
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

    def _ring_frontier(self) -> list[tuple[int, int, int, float]]:
        """`_distinct_rings` less those another one at the same or a farther locality level
        beats at every D: on flat-curve links a ring over D ranks takes 2 (D - 1) (latency
        + bytes / (D x rate)), so a link with no more latency and no more bytes per rate is
        never slower, and `_sync_terms` takes it for every level it takes the other one
        (each least is over the links crossing at least that level)."""
        if self._frontier is None:
            model = self.model
            whole = (0, model.blocks, True, True)
            terms: list[tuple[float, float] | None] = []
            rings = self._distinct_rings()
            for a, b, _, _ in rings:
                ka, kb = model.kinds[a], model.kinds[b]
                flows = max(ka.tp, kb.tp)
                link, curve, nic = model.measured_link(ka.pool, kb.pool, flows)
                if curve is not FLAT:
                    terms.append(None)
                    continue
                rate = effective_bandwidth(link, 1.0, flows_on_nic=flows, nic_bandwidth=nic)
                terms.append((link.latency, model.gradient_bytes(whole, min(ka.tp, kb.tp)) / rate))
            kept = []
            for i, (_, _, level, _) in enumerate(rings):
                mine = terms[i]
                beaten = mine is not None and any(
                    other is not None
                    and rings[j][2] >= level
                    and other[0] <= mine[0]
                    and other[1] <= mine[1]
                    and (other != mine or rings[j][2] > level or j < i)
                    for j, other in enumerate(terms)
                    if j != i
                )
                if not beaten:
                    kept.append(rings[i])
            self._frontier = kept
        return self._frontier

    def bound(self) -> float:
        """The objective value a candidate must beat (or tie) to matter: the best's, or with
        `top` K > 1 the K-th best signature's (infinite until K are known), so that nothing
        that could enter the top K is pruned."""
        return self._kth

    def shape_bounds(self, mbs: int, stages: int, last: int, first: int = 1) -> list[float]:
        """Lower bounds on the objective of every candidate of shape (m, P, D) for
        D = first..last (the module docstring, step 1), sharing what does not depend on D.
        For cost, the larger of that time on the fewest devices and `work_cost` (for
        ceil(T / D) x D microbatch slots: iteration >= F + m1 S + Y >= m t_i + (F - t_i) + Y
        on every replica) + `idle_cost` (its F - t_i + Y). A shape whose bounds already
        break the budget or the throughput floor gets an infinite one."""
        model = self.model
        total = model.batch // mbs
        throughput = self.objective == "max_throughput"
        unit = stages * self._min_tp * self._cheapest
        floor = self.work_cost(mbs) if not throughput or self.budget is not None else 0.0
        bounds = []
        incumbent = self.bound()
        devices, reserved = self.total_devices, (stages - 1) * self._min_tp
        # the terms depend on D only through the largest affordable TP degree (`affordable_tp`),
        # which never grows with D: recomputed only when it falls below the current one
        cap = -1
        fill = static = send = 0.0
        lines: tuple[tuple[float, float], ...] = ()
        for dp in range(first, last + 1):
            max_tp = (devices - reserved * dp) // dp
            if max_tp < cap or cap < 0:
                cap = self._tp_cap(max_tp)
                fill, static, lines, send = self._period_terms(mbs, stages, max_tp)
            straggler = static
            for slope, at_zero in lines:
                if slope * dp + at_zero > straggler:
                    straggler = slope * dp + at_zero
            slots = -(-total // dp)
            t = fill + (slots - 1) * straggler
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
            cost = max(t * dp * unit, paid + idle)
            if self.violates(t, cost / t if t > 0 else 0.0):
                bounds.append(math.inf)
            else:
                bounds.append(t if throughput else cost)
        return bounds

    def idle_cost(self, stages: int, dp: int, fill: float, sync: float) -> float:
        """USD the rented devices cost while computing nothing, which `work_cost` leaves out:
        a device of stage i computes at most (m1 + 1) t_i of the iteration's F + m1 S + Y
        (S >= t_i), so it idles for at least the other stages' times and the sync. Over at
        least D x (least TP) devices per stage, that is D x (least TP) x ((P - 1) F + P Y)
        device-seconds, with F and Y at their lower bounds, at the cheapest price."""
        return self._cheapest * dp * self._min_tp * ((stages - 1) * fill + stages * sync)

    def _least_window(self, mbs: int, max_tp: int, blocks: int) -> float:
        """The least time of `blocks` consecutive blocks on any kind of TP at most `max_tp`:
        one of P stages holds ceil(L / P) blocks, and its slowest kind takes at least this."""
        tp = self._tp_cap(max_tp)
        key = (mbs, tp, blocks)
        window = self._least_windows.get(key)
        if window is None:
            kinds = [k for k in self.model.kinds if k.tp <= tp] or list(self.model.kinds)
            window = min(self._window((k.index,), mbs, blocks) for k in kinds)
            self._least_windows[key] = window
        return window

    def _period_terms(
        self, mbs: int, stages: int, max_tp: int
    ) -> tuple[float, float, tuple[tuple[float, float], ...], float]:
        """(F_lb, the straggler floor that does not depend on D, lines (a, b) with S >= a D +
        b, the least send s) of P stages with TP at most `max_tp`, for `shape_bounds` and
        `range_bound`. With P > 1 every stage sends to a neighbour and each of the P - 1
        boundaries is crossed both ways in the fill, so F >= F_lb + 2 (P - 1) s and S >= t_i
        + s on every stage: S >= F / P, the worst layer + s, the ceil(L / P)-block window +
        s. Device-time conservation over t_i <= S - sends_i: with g_i the sigma-weighted
        devices of stage i (`device_work`), S x sum g_i >= D x W + sum g_i x sends_i, and
        sum g_i <= G_eff, so S >= D x W / G_eff + s. From P = 3 on, the inner stages send
        both ways and each end stage holds at most D x TP_max sigma-weighted devices (sigma
        <= 1, TP_max the largest TP of any kind: one replica may take more than the
        affordable TP where a stage mixes TP degrees), so sum g_i x sends_i >= s (2 sum g_i
        - 2 D TP_max), and where W > 2 s TP_max also S >= D (W - 2 s TP_max) / G_eff + 2 s
        (falling in sum g_i, so least at G_eff)."""
        tp = self._tp_cap(max_tp)
        terms = self._periods.get((mbs, stages, tp))
        if terms is None:
            fill, worst_layer, work, free = self._terms(mbs, max_tp)
            send = self._least_send(mbs) if stages > 1 else 0.0
            fill += 2 * (stages - 1) * send
            blocks = -(-self.model.blocks // stages)
            window = self._least_window(mbs, max_tp, blocks)
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

    def _least_send(self, mbs: int) -> float:
        """The least time a microbatch's activations take between any two pools (one pool
        with itself included): every boundary's s_i is at least this."""
        send = self._least_sends.get(mbs)
        if send is None:
            (kept,) = self.model.classes.keep(tuple(k.index for k in self.model.kinds))
            pools = sorted({self.model.kinds[k].pool for k in kept})
            send = min((self.model.send(a, b, mbs) for a in pools for b in pools), default=0.0)
            self._least_sends[mbs] = send
        return send

    def _terms(self, mbs: int, max_tp: int) -> tuple[float, float, float, float]:
        """(fill, slowest layer, least device-seconds of the model, G_eff with nothing used)
        for `shape_bounds`, cached: the first two depend on the TP cap only through the
        largest TP degree under it."""
        tp = self._tp_cap(max_tp)
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
        stop = ""
        interrupted = False
        try:
            if "kind-profiles" in self.approx:
                self._zone_stripes()
            else:
                self._warm_start()
            if "dp-order" in self.approx:
                self._dp_ordered(sorted(s for g in self._groups() for s in self._listed(*g[1:])))
            else:
                self._best_first()
        except _Stop as why:
            stop = str(why)
            interrupted = why.interrupted
        candidates = self.alternatives()
        bound = self.lower_bound() if stop or self.approx else self.incumbent()
        incumbent = candidates[0].value if candidates else None
        return SearchResult(
            candidates=candidates,
            evaluations=self.evaluations,
            complete=not stop,
            seconds=time.perf_counter() - self.started,
            lower_bound=bound,
            gap=relative_gap(incumbent, bound),
            interrupted=interrupted,
            stop_reason=stop,
            greedy_count_leaves=self.greedy_counts,
        )

    def incumbent(self) -> float:
        """The best candidate's objective; infinite before the first."""
        return self.ranked[0].value if self.ranked else math.inf

    def lower_bound(self) -> float:
        """No candidate of the space scores below this (`certificate` module docstring): the
        least of the incumbent, the bound of the shape being searched and of every entry
        still queued; before the queues exist, or under an approximation, the least bound of
        every (m, P) (`_groups`)."""
        least = self.incumbent()
        if self.approx or not self._queues:
            groups = self._groups()
            return min(least, min(g[0] for g in groups)) if groups else least
        least = min(least, self._searching)
        for queue in self._queues:
            for entry in queue:
                least = min(least, entry[0])
        return least

    def shapes_left(self) -> int:
        """The shapes still queued under the incumbent, a range of D counting each of its D
        (0 before the queues exist)."""
        cut = self.bound()
        left = 0
        for queue in self._queues:
            for entry in queue:
                if entry[0] <= cut:
                    left += entry[5] - entry[4] + 1
        return left + (self._searching < math.inf)

    def _best_first(self) -> None:
        """Shapes in order of their bound, (bound, m, P, D) ascending, stopping at the first
        that cannot beat the incumbent. Each (m, P) enters as one entry, the range of every
        D, under its group bound (`_groups`), and is split into ranges or listed shape by
        shape only when popped (`_pop_shape`): a range's bound is at most each of its
        shapes' bounds and pops first on a tie, so the order is that of the full sorted
        list, but ranges the incumbent beats are never listed. Under
        `kind-profiles` for max_throughput, a shape popped the first time goes back with
        the ring its profiles must pay across zones added (`_ring_excess`), if any.

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
        for bound, mbs, stages in self._groups():
            entry = (bound, 0, mbs, stages, 1, self._dp_cap(mbs, stages))
            (shallow if stages <= 2 else deep).append(entry)
        heapq.heapify(shallow)
        self._queues = [shallow, deep]
        searched = 0
        while searched < SHALLOW_SHAPES and shallow and shallow[0][0] <= self.bound():
            popped = self._pop_shape(shallow, zoned)
            if popped is not None:
                searched += 1
                self._check_limits()
                self.shape(*popped)
                self._searching = math.inf
        queue = shallow + deep
        heapq.heapify(queue)
        self._queues = [queue]
        while queue and queue[0][0] <= self.bound():
            popped = self._pop_shape(queue, zoned)
            if popped is not None:
                self._check_limits()
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
        (`_last_dp`, taken only there). Entries the incumbent already beats are not pushed:
        it only improves, so they would never be popped."""
        lb, entry, mbs, stages, dp, last = heapq.heappop(queue)
        incumbent = self.bound()
        if entry == 0:
            if last - dp + 1 > RANGE_SPAN:
                middle = (dp + last) // 2
                halves = [
                    (max(lb, self.range_bound(mbs, stages, first, end)), first, end)
                    for first, end in ((dp, middle), (middle + 1, last))
                ]
                if incumbent == math.inf or halves[0][0] > incumbent or halves[1][0] > incumbent:
                    for bound, first, end in halves:
                        if bound <= incumbent:
                            heapq.heappush(queue, (bound, 0, mbs, stages, first, end))
                    return None
            for bound, _, _, shape_dp in self._listed(
                mbs, stages, dp, min(last, self._last_dp(mbs, stages))
            ):
                if bound <= incumbent:
                    heapq.heappush(queue, (bound, 1, mbs, stages, shape_dp, shape_dp))
            return None
        if zoned and entry == 1:
            excess = self._ring_excess(stages, dp)
            if excess > 0:
                if lb + excess <= incumbent:
                    heapq.heappush(queue, (lb + excess, 2, mbs, stages, dp, dp))
                return None
        self._searching = lb
        return mbs, stages, dp

    def _may_win(self, mbs: int, stages: int, dp: int) -> bool:
        """The stage-cover check (`cover.StageCover`) at the largest straggler with which
        the shape could still beat the incumbent (or meet the throughput floor): F_lb +
        (m - 1) S + Y_lb within it, with the shape bound's F_lb and Y_lb. For max_throughput
        on one device type only, where it pays: under min_cost the floor's straggler rarely
        binds (13 of 252 shapes dropped on the bench's min-cost scenario, for 10% of its
        time), and with several device types no single weighting sees their quotas at once,
        so it drops few shapes that the profile pairs would not drop as cheaply (measured on
        the bench's 32 A100 + 96 V100: 0.129-0.145 s without it, 0.146-0.171 s with it). On
        128 A100 alone it leaves 60 of 361 shapes to search."""
        m1 = -(-(self.model.batch // mbs) // dp) - 1
        if m1 < 1 or self.objective != "max_throughput" or not self._cover.one_device:
            return True
        limit = self.bound()
        if self.time_cap is not None and self.time_cap < limit:
            limit = self.time_cap
        if limit == math.inf:
            return True
        fill, _, _, send = self._period_terms(mbs, stages, self.affordable_tp(stages, dp))
        ceiling = (limit - fill - self.sync_bound(stages, dp)) / m1 - send
        return self._cover.may_run_under(mbs, stages, dp, ceiling)

    def _groups(self) -> list[tuple[float, int, int]]:
        """(bound, m, P) for every (microbatch, pipeline degree) that may hold a shape: a
        lower bound on `shape_bounds` over every D (`range_bound`); groups that break the
        time cap or the budget at every D are left out. Cached: the zone stripes order
        their seeds by the same bounds."""
        if self._group_list is None:
            model = self.model
            groups = []
            for mbs in model.microbatch_sizes():
                for stages in range(1, model.blocks + 1):
                    bound = self.range_bound(mbs, stages, 1, self._dp_cap(mbs, stages))
                    if bound < math.inf:
                        groups.append((bound, mbs, stages))
            self._group_list = groups
        return self._group_list

    def _dp_cap(self, mbs: int, stages: int) -> int:
        """The most pipelines (m, P) may have by counting alone: B / m, and P x D x (least
        TP) devices. The range bounds use it: `_last_dp` costs memory lookups, and only the
        ranges the search lists need them."""
        return min(self.model.batch // mbs, self.total_devices // (stages * self._min_tp))

    def _last_dp(self, mbs: int, stages: int) -> int:
        """`_dp_cap`, and no more than the stages' memory lets the devices hold: under
        `kind-profiles` with several device types, where each stage sits whole on one
        option (`_profile_last`), else as the stage cover relaxes it, letting a stage mix
        kinds (`cover.most_pipelines`). With one device type the profile cap was as tight
        or tighter at every (m, P) compared (OPT-350M and GPT-Neo-2.7B on 128 A100), but
        cut no shape that the bounds keep and cost more lookups than the cover's shortcut
        (OPT-350M there: 0.303 M opcodes with the cover, 0.385 M with the profile cap);
        with A100 and V100 it removes the shapes whose V100 stages cannot hold their
        blocks (32 A100 + 96 V100 with GPT-Neo-2.7B: 648 shapes searched instead of
        1,137)."""
        key = (mbs, stages)
        last = self._lasts.get(key)
        if last is None:
            if "kind-profiles" in self.approx and not self._cover.one_device:
                last = self._profile_last(mbs, stages, self._dp_cap(mbs, stages))
            else:
                last = self._cover.most_pipelines(mbs, stages, self._dp_cap(mbs, stages))
            self._lasts[key] = last
        return last

    def _profile_last(self, mbs: int, stages: int, last: int) -> int:
        """The largest D <= `last` at which some pair of options may hold P stages in memory
        within the quotas (`kind-profiles`), 0 if none. A profile puts each stage whole on
        one option: n stages of the slow option, then P - n of the fast one, each holding
        at least one block and at most what `_reach_sums` allows, which must add up to the
        model's blocks. Those reaches are taken where memory is most lenient for every D <=
        `last`, so an n they rule out is ruled out at every such D; the quotas give each n
        its largest D in closed form (the conditions of `_run_lengths`, which only tighten
        as D grows). On 32 A100 + 96 V100 with GPT-Neo-2.7B, two stages of V100s at TP 1
        hold 10 + 15 of its 32 blocks, so no profile of them exists whatever the quota
        allows."""
        if last < 1:
            return last
        blocks = self.model.blocks
        flights = -(-(self.model.batch // mbs) // last)
        rank = self._option_ranks(mbs)
        best = 0
        for room_bound, one, other, sizes, swapped in self._pairs_by_room():
            if room_bound // stages <= best:
                break
            if one == other:
                fit = sizes[2] // (stages * sizes[0])
                if fit > best and self._holds_stages(one[0], mbs, stages, flights):
                    best = fit
                continue
            slow, fast = one, other
            if rank[other] < rank[one]:
                slow, fast, sizes = other, one, swapped
            tp_s, tp_f, room_s, room_f, both = sizes
            # only the n whose quotas hold D = best + 1 could raise the answer
            wider = best + 1
            lo = max(1, stages - room_f // (wider * tp_f))
            hi = min(stages - 1, room_s // (wider * tp_s))
            spare = both // wider - stages * tp_f
            if tp_s > tp_f:
                hi = min(hi, spare // (tp_s - tp_f))
            elif tp_s < tp_f:
                lo = max(lo, -(spare // (tp_f - tp_s)))
            elif spare < 0:
                continue
            if lo > hi:
                continue
            free = self._holds_share(slow[0], mbs, stages, flights) and self._holds_share(
                fast[0], mbs, stages, flights
            )
            if not free:
                first_s, middle_s, _ = self._reach_sums(slow[0], mbs, flights)
                _, middle_f, last_f = self._reach_sums(fast[0], mbs, flights)
                # n slow stages: the first and the middle ones 1..n - 1 from the start; the
                # fast ones: k = P - 1 - n middle stages, then the last
                fixed = first_s[stages] + middle_s[stages - 2] + last_f
            for n in range(lo, hi + 1):
                k = stages - 1 - n
                if free or fixed + middle_f[k] - middle_s[k] >= blocks:
                    fit = min(
                        room_s // (n * tp_s),
                        room_f // ((stages - n) * tp_f),
                        both // (n * tp_s + (stages - n) * tp_f),
                    )
                    if fit > best:
                        best = fit
            if best >= last:
                return last
        return min(best, last)

    def _option_ranks(self, mbs: int) -> dict[Option, int]:
        """Each option's place in `_option_speeds`' slowest-first order: the slower of two
        options takes a profile's first stages."""
        ranks = self._ranks.get(mbs)
        if ranks is None:
            ranks = self._ranks[mbs] = {o: i for i, o in enumerate(self._option_speeds(mbs)[1])}
        return ranks

    def _pairs_by_room(self) -> list[_RoomEntry]:
        """(the most D any P stages of the pair may have, times P: both options' devices over
        the smaller TP; the two options; their `_pair_sizes` in that order and swapped) for
        every pair of options, one with itself included, most first, so `_profile_last`
        stops at the first that cannot raise its answer. Sizes do not depend on the
        microbatch size; which option is the slower does (`_option_ranks`)."""
        if self._room_order is None:
            options = self.stage_options()
            entries: list[_RoomEntry] = []
            for x, one in enumerate(options):
                for other in options[x:]:
                    sizes = self._pair_sizes(one, other)
                    swapped = self._pair_sizes(other, one)
                    entries.append(
                        (sizes[4] // min(sizes[0], sizes[1]), one, other, sizes, swapped)
                    )
            entries.sort(key=lambda entry: -entry[0])
            self._room_order = entries
        return self._room_order

    def _holds_stages(self, kind: int, mbs: int, stages: int, flights: int) -> bool:
        """Whether P stages of `kind` alone may hold the model (`_reach_sums`), settled
        first by `_holds_share` where it can."""
        if self._holds_share(kind, mbs, stages, flights):
            return True
        if stages == 1:
            return False
        first, middle, last = self._reach_sums(kind, mbs, flights)
        return first[stages] + middle[stages - 2] + last >= self.model.blocks

    def _holds_share(self, kind: int, mbs: int, stages: int, flights: int) -> bool:
        """Whether `kind` holds ceil(L / P) blocks as every stage of P, where memory is most
        lenient (`_reach_sums`): then any split of n stages on it holds its blocks. One
        memory lookup per position (`cover.StageCover.holds_share`), at the most
        microbatches in flight there, where it holds the fewest; with one stage, whether
        it holds the whole model."""
        model = self.model
        replica = model.kinds[kind]
        key = (replica.device, replica.tp, mbs, stages, min(flights, stages))
        held = self._shares_held.get(key)
        if held is None:
            lenient = 1 << (model.batch // mbs - 1).bit_length()
            if stages == 1:
                held = self._cover.holds_whole(mbs, kind, lenient)
            else:
                share = -(-model.blocks // stages)
                most = (min(stages, flights), min(stages - 1, flights), 1)
                held = all(
                    self._cover.holds_share(
                        mbs, kind, at, 1 << (most[at].bit_length() - 1), lenient, share
                    )
                    for at in ((0, 2) if stages == 2 else (0, 1, 2))
                )
            self._shares_held[key] = held
        return held

    def _reach_sums(self, kind: int, mbs: int, flights: int) -> tuple[list[int], list[int], int]:
        """What `_profile_last` adds up of the most blocks `kind` holds per stage of P >= 2:
        (as the first, by P; the middle stages 1.. d from the end, summed, by d; as the
        last), where memory is most lenient for every D with at least `flights`
        microbatches per pipeline: at D = B / m rounded up to a power of two (ZeRO's shards
        only shrink as D grows) and min(P - i, flights) in flight at stage i, rounded down
        to a power of two, as the memory cap takes them (`cover.StageCover.memory_reach`,
        so its lookups are shared). A stage that holds no block counts as -`NO_ROOM`, so
        no sum with it reaches the model's blocks."""
        model = self.model
        replica = model.kinds[kind]
        cap = 1 << (flights.bit_length() - 1)
        key = (replica.device, replica.tp, mbs, cap)
        sums = self._reach_tables.get(key)
        if sums is None:
            lenient = 1 << (model.batch // mbs - 1).bit_length()
            blocks = model.blocks
            reach = self._cover.memory_reach
            first, middle = [0, 0], [0]
            # stage counts (and middle stages' distances from the end, plus one) from
            # `flight` up to twice it have `flight` in flight, rounded down, up to `cap`
            flight = 1
            while len(first) <= blocks:
                most = reach(mbs, kind, 0, min(flight, cap), lenient)
                first += [most if most >= 1 else -NO_ROOM] * (
                    min(2 * flight, blocks + 1) - max(flight, 2)
                )
                most = reach(mbs, kind, 1, min(flight, cap), lenient)
                most = most if most >= 1 else -NO_ROOM
                for _ in range(max(flight, 2), min(2 * flight, blocks)):
                    middle.append(middle[-1] + most)
                flight *= 2
            last = reach(mbs, kind, 2, 1, lenient)
            sums = (first, middle, last if last >= 1 else -NO_ROOM)
            self._reach_tables[key] = sums
        return sums

    def _listed(
        self, mbs: int, stages: int, first: int = 1, last: int | None = None
    ) -> list[tuple[float, int, int, int]]:
        """(bound, m, P, D) for the shapes of (m, P) with a finite bound, D = first..last
        (every D its memory allows, by default)."""
        if last is None:
            last = self._last_dp(mbs, stages)
        bounds = self.shape_bounds(mbs, stages, last, first)
        return [(lb, mbs, stages, dp) for dp, lb in enumerate(bounds, start=first) if lb < math.inf]

    def _ring_excess(self, stages: int, dp: int) -> float:
        """How far `_zone_rings` raises a shape's bound above its sync term: the shape
        bound holds for the whole space, where stages may keep to a zone each, while every
        profile of the shape pays at least that ring."""
        ring = self._zone_rings(stages, dp)
        if ring == 0.0:
            return 0.0
        return max(0.0, ring - self.sync_bound(stages, dp))

    def range_bound(self, mbs: int, stages: int, first: int, last: int) -> float:
        """A lower bound on `shape_bounds(mbs, stages, last, first)` at every D, in O(1):
        the terms at D = first (the largest affordable TP, so the least fill and straggler
        floor), the sync of every D from first on (`_range_sync`), and (ceil(T / D) - 1)
        max(s, c D) at least both (T / D - 1) max(s, c D), which falls as D grows
        (s (T / D - 1) below the knee, c (T - D) above it), taken at D = last, and
        (ceil(T / last) - 1) max(s, c first). For cost, t D >= F D + (T - D) s is linear in
        D, so its least is at D = first or D = last; the work and idle costs are least at
        D = first. Infinite when every D breaks the time cap or the budget (or there is no
        D)."""
        if last < first:
            return math.inf
        total = self.model.batch // mbs
        fill, static, lines, send = self._period_terms(
            mbs, stages, self.affordable_tp(stages, first)
        )
        t = (
            fill
            + max(
                max(0.0, total / last - 1)
                * max(static, *(slope * last + at_zero for slope, at_zero in lines)),
                (-(-total // last) - 1)
                * max(static, *(slope * first + at_zero for slope, at_zero in lines)),
            )
            + self._range_sync(stages, first)
        )
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
                progress=self.options.progress,
                progress_every=self.options.progress_every,
                must_use=self.options.must_use,
                stop=self.options.stop,
            ),
            free=self.free,
        )
        seed.started = self.started
        seed.last_report = self.last_report
        result = seed.run()
        self.evaluations += result.evaluations
        self.greedy_counts += result.greedy_count_leaves
        for candidate in result.candidates:
            self.offer(candidate)
        if not result.complete:
            raise _Stop(result.stop_reason, interrupted=result.interrupted)

    def _zone_stripes(self) -> None:
        """Seed the incumbent with plans that keep every stage inside one zone of a region
        holding the same device in three zones or more. A profile has at most two options,
        and a region-wide (H6) option rings across zones, so `kind-profiles` alone cannot
        give each of P stages its own zone there: on five zones of A100 (bench/planner.py)
        the best such plan is 22% faster than the best profile. Per region, device and TP,
        and per (m, P): the largest D whose zones hold P stages of D x TP devices, the
        stages laid out zone by zone (largest quota first, each as many as it holds), split
        by `min_max_split` (which finds none where memory cannot hold the D), in order of
        their group bound (`range_bound`), skipping those whose shape bound at their D
        cannot beat the incumbent, or whose exact fill leaves no straggler as slow as the
        stages' mean time under it (`_stripe_terms`), and regions lacking a pool the
        search must use (a leaf renting none of it is thrown away). They are real
        candidates, so they only tighten the bound the profiles are then searched with."""
        for group, mbs, stages, dp, sequence in self._stripe_seeds():
            if group > self.bound():
                break
            if self.shape_bounds(mbs, stages, dp, dp)[0] > self.bound():
                continue
            self._check_limits()
            m1 = -(-(self.model.batch // mbs) // dp) - 1
            least, fill = self._stripe_terms(sequence, mbs)
            ceiling = self._straggler_ceiling(fill + self.sync_bound(stages, dp), m1, 0.0)
            if ceiling < least:
                continue
            boundaries = self.min_max_split(sequence, mbs, dp, ceiling=ceiling)
            if boundaries is not None:
                self.leaf(
                    _Partial(stages=stages, mbs=mbs, dp=dp, boundaries=boundaries, sets=sequence)
                )

    def _stripe_seeds(self) -> list[tuple[float, int, int, int, tuple[Option, ...]]]:
        """(group bound, m, P, D, options of the stages) of every zone stripe
        (`_zone_stripes`), least group bound first."""
        model = self.model
        groups: dict[tuple[str, str, int], list[tuple[int, int]]] = {}
        for kind in model.kinds:
            region = model.pools[kind.pool].zone.region
            groups.setdefault((region, kind.device, kind.tp), []).append(
                (-self.capacity[kind.pool], kind.index)
            )
        bounds = {(mbs, stages): bound for bound, mbs, stages in self._groups()}
        seeds: list[tuple[float, int, int, int, tuple[Option, ...]]] = []
        for (_, _, tp), members in sorted(groups.items()):
            pools = {model.kinds[index].pool for _, index in members}
            if len(members) < 3 or not self.options.must_use <= pools:
                continue
            members.sort()
            for mbs in model.microbatch_sizes():
                for stages in range(1, model.blocks + 1):
                    dp = self._stripe_width(mbs, stages, tp, [-room for room, _ in members])
                    last = self._dp_cap(mbs, stages)
                    if not 1 <= dp <= last:
                        continue
                    layout: list[Option] = []
                    for room, index in members:
                        layout += [(index,)] * min(-room // (dp * tp), stages - len(layout))
                    group = bounds.get((mbs, stages), math.inf)
                    seeds.append((group, mbs, stages, dp, tuple(layout)))
        seeds.sort()
        return seeds

    def _stripe_terms(self, sequence: Sequence[Option], mbs: int) -> tuple[float, float]:
        """(a floor on the straggler, F) of a zone stripe, whatever its split: every stage
        runs the same device and TP, so the stages' times add up to the model's on it, F
        adds each boundary's send both ways, and the slowest stage takes at least the mean.
        With F exact, the straggler ceiling `min_max_split` tests first turns away most
        stripes that cannot win (on five zones of A100, 8% of the search's opcodes)."""
        compute = self.option_time(sequence[0], mbs, 0, self.model.blocks + 2)
        sends = sum((self._send(a, b, mbs) for a, b in pairwise(sequence)), 0.0)
        return compute / len(sequence), compute + 2 * sends

    def _stripe_width(self, mbs: int, stages: int, tp: int, rooms: list[int]) -> int:
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
        self._shape_best = None
        if "kind-profiles" in self.approx:
            self.profiles(mbs, stages, dp)
            return self._found()
        if not self._may_win(mbs, stages, dp):
            return None
        self._memo: dict[tuple[object, ...], list[tuple[float, ...]]] = {}
        state = _Partial(
            stages=stages, mbs=mbs, dp=dp, boundaries=(0,), forced=(0,) * len(self.model.pools)
        )
        self.stage(state, 0, 0)
        return self._found()

    def _found(self) -> float | None:
        """What `leaf` recorded for the shape: read through a call, since after `shape` sets
        the attribute to None, mypy takes it for None until the function returns, and a
        mypyc build checks that (module docstring of setup.py)."""
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

    def _option_speeds(
        self, mbs: int
    ) -> tuple[dict[tuple[int, ...], float], list[tuple[int, ...]]]:
        """Each option's whole-model time at `mbs`, and the options slowest first."""
        cached = self._speeds.get(mbs)
        if cached is None:
            whole = self.model.blocks + 2
            speed = {o: self.option_time(o, mbs, 0, whole) for o in self.stage_options()}
            cached = (speed, sorted(speed, key=lambda o: (-speed[o], o)))
            self._speeds[mbs] = cached
        return cached

    def profiles(self, mbs: int, stages: int, dp: int) -> None:
        """`kind-profiles`: a profile is a slower option on the first n stages and a faster
        one on the rest (n = P: one option). The shape is dropped at once when its fill with
        the least sends and its least straggler (`_least_straggler`), or its cost floor,
        cannot beat the incumbent. Each profile then gets a lower bound: the fill of every
        layer on the faster of its options plus its own sends both ways; (m - 1) times its
        straggler floor, the larger of (W + sends / speed) / sum_i(1 / speed_i) and the
        least ceil(L / P)-block window; the rings of its widest, first and last stage; for
        min_cost its least rental rate and egress. The feasible n of a pair come from the
        quotas and the incumbent in closed form. The profiles are then split
        (`min_max_split`), timed, and scored in order of that bound, stopping at the first
        that cannot beat the incumbent (module docstring)."""
        model = self.model
        m1 = -(-(model.batch // mbs) // dp) - 1
        fill_lb = self.layer_best(mbs, self.affordable_tp(stages, dp))[-1]
        throughput = self.objective == "max_throughput"
        bound = self.bound()
        hosts = self._hosts(mbs, dp)
        if not hosts:
            return
        sync_lb = self.sync_bound(stages, dp)
        if self._zone_split()[2]:
            sync_lb = max(sync_lb, self._zone_rings(stages, dp))
        largest = -(-model.blocks // stages)
        if throughput:
            sends = 2 * (stages - 1) * self._least_send(mbs)
            straggler = self._least_straggler(mbs, stages, dp)
            if fill_lb + sends + m1 * straggler + sync_lb > bound:
                return
        if not self._may_win(mbs, stages, dp):
            return
        costly = not throughput or self.budget is not None
        if costly:
            share = self._model_share(mbs)
            least_stage, least_pass = self._least_prices(mbs, dp)
            cheapest = _cost_floor(
                fill_lb + sync_lb, m1 * share, stages, dp, least_stage, least_pass
            )
            if (not throughput and cheapest > bound) or (
                self.budget is not None and cheapest > self.budget
            ):
                return
            # every pair's cost floor is at least this plus m1 D x its pass price
            least_fixed = (fill_lb + sync_lb) * stages * dp * least_stage
        queue: list[tuple[float, Option, Option, int, float, float]] = []
        limit = bound if throughput else math.inf
        if self.time_cap is not None:
            limit = min(limit, self.time_cap)
        for row in self._pairs(mbs, dp, stages == 1):
            pair, ring_s, ring_f, r_s, r_f, most = row
            if most < stages:
                if throughput:
                    break
                continue
            (
                slow,
                fast,
                share,
                sp_s,
                sp_f,
                s_ss,
                s_sf,
                s_ff,
                e_ss,
                e_sf,
                e_ff,
                per_stage,
                per_pass,
                pair_fill,
            ) = pair
            if not throughput and least_fixed + m1 * dp * share * per_pass > bound * CUT_SLACK:
                break
            fill = max(fill_lb, pair_fill)
            if costly:
                pair_cost = _cost_floor(fill + sync_lb, m1 * share, stages, dp, per_stage, per_pass)
                if (not throughput and pair_cost > bound) or (
                    self.budget is not None and pair_cost > self.budget
                ):
                    continue
            if limit < math.inf:
                # a profile runs a stage on each of its options (n is 1..P - 1 for two), and
                # such a stage rings at least one block on its option
                ring = ring_s if ring_s > ring_f else ring_f
                room = limit - fill - (ring if ring > sync_lb else sync_lb)
                passes = m1 * share
                # `_within` at the most capacity any n has (n = 1, or P for one option),
                # with room for rounding: most pairs end here, before their run lengths
                if passes > 0 and passes * (1 - 2e-9) > room * (
                    stages / sp_f - 1 / sp_f + 1 / sp_s
                ):
                    continue
                lengths = self._within(
                    self._run_lengths(slow, fast, stages, dp), stages, room, passes, sp_s, sp_f
                )
            else:
                lengths = self._run_lengths(slow, fast, stages, dp)
            if not lengths:
                continue
            widest = self._block_ring(slow, dp, largest)
            window = self._window(slow, mbs, largest)
            if slow != fast:
                widest = min(widest, self._block_ring(fast, dp, largest))
                window = min(window, self._window(fast, mbs, largest))
            head = self._end_ring(slow, dp, stages, True)
            ring_slow = max(max(sync_lb, ring_s), max(widest, head))
            ring_fast = max(max(sync_lb, ring_f), widest)
            tail_slow = self._end_ring(slow, dp, stages, False)
            tail_fast = self._end_ring(fast, dp, stages, False)
            ring_alone = max(ring_slow, tail_slow)
            ring_both = max(max(ring_slow, ring_fast), tail_fast)
            for n in lengths:
                capacity = n / sp_s + (stages - n) / sp_f
                if n == stages:
                    fixed = fill + 2 * (n - 1) * s_ss + ring_alone
                    egress = (n - 1) * e_ss + n * r_s
                    pads = 2 * (n - 1) * s_ss / sp_s
                else:
                    sends = (n - 1) * s_ss + s_sf + (stages - n - 1) * s_ff
                    fixed = fill + 2 * sends + ring_both
                    egress = (n - 1) * e_ss + e_sf + (stages - n - 1) * e_ff
                    egress += n * r_s + (stages - n) * r_f
                    pads = (
                        2 * (n - 1) * s_ss / sp_s
                        + s_sf * (1 / sp_s + 1 / sp_f)
                        + 2 * (stages - n - 1) * s_ff / sp_f
                    )
                floor = max((share + pads) / capacity, window)
                lb_t = fixed + m1 * floor
                # the rate matters only to a cost or a budget
                rate = self._profile_rate(slow, n, fast, stages - n, dp) if costly else 0.0
                if self.violates(lb_t, rate, egress):
                    continue
                value = self.objective_bound(lb_t, rate) + (0.0 if throughput else egress)
                if value <= bound:
                    queue.append((value, slow, fast, n, fixed, floor))
        queue.sort()
        for value, slow, fast, n, fixed, floor in queue:
            if value > self.bound():
                break
            self._check_limits()
            sequence = (slow,) * n + (fast,) * (stages - n)
            rate = self._profile_rate(slow, n, fast, stages - n, dp) if costly else 0.0
            ceiling = self._straggler_ceiling(fixed, m1, rate)
            boundaries = self.min_max_split(sequence, mbs, dp, floor, ceiling)
            if boundaries is None:
                continue
            shape = Shape(microbatch=mbs, boundaries=boundaries, pipelines=dp)
            t = model.time_of_sets(shape, sequence)[3]
            egress = model.egress(shape, sequence) if costly else 0.0
            value = self.objective_bound(t, rate) + (0.0 if throughput else egress)
            if self.violates(t, rate, egress) or value > self.bound():
                continue
            self.leaf(_Partial(stages=stages, mbs=mbs, dp=dp, boundaries=boundaries, sets=sequence))

    def _least_straggler(self, mbs: int, stages: int, dp: int) -> float:
        """The least straggler period of any profile of shape (m, P, D): at least the time
        of its largest stage's ceil(L / P) blocks on the host fastest at them
        (`_host_window`) and the model's work over the most capacity a profile may have
        (`_most_capacity`); with P > 1 each stage also sends at least `_least_send`, which
        its period adds to its compute."""
        floor = self._host_window(mbs, dp, -(-self.model.blocks // stages))
        most = self._most_capacity(mbs, stages, dp)
        if most > 0:
            floor = max(floor, self._model_share(mbs) / most)
        return floor + (self._least_send(mbs) if stages > 1 else 0.0)

    def _model_share(self, mbs: int) -> float:
        """`_work_share` over every option, cached."""
        share = self._all_share.get(mbs)
        if share is None:
            share = self._all_share[mbs] = self._work_share(tuple(self._option_speeds(mbs)[0]), mbs)
        return share

    def _pairs(self, mbs: int, dp: int, alone: bool = False) -> Iterable[_PairAt]:
        """Per (slow, fast) pair of hosts (slow first, fast = slow for one-option profiles)
        what its profiles' bounds need and does not depend on P (`_PairAt`); with `alone`,
        the one-option rows only (a single stage has no room for two), built on their own:
        shapes of one stage come at many D that no deeper shape reads. For time, the
        pairs that fit the most stages come first, so a shape of P stages reads only the
        rows that may fit P; for cost, the least W x pass price first, so a shape stops at
        the first row whose cost floor is sure to exceed the incumbent's (`profiles`).
        Either way a table is built only as far as a shape reads it (`_BuiltAsRead`), with
        each option's rings at D computed when a row first needs them: on the bench's five
        zones the shapes read 1,883 of 4,442 rows, and its min-cost scans a third of
        theirs. Every row fits a stage (`_most_stages` >= 1): each option hosts one, and
        two together fit whichever is wider."""
        key = (mbs, dp, alone)
        if self.objective == "min_cost":
            table = self._cost_tables.get(key)
            if table is None:
                table = self._cost_tables[key] = _BuiltAsRead(self._cost_rows(mbs, dp, alone))
            return table
        pairs = self._pair_tables.get(key)
        if pairs is None:
            ordered = list(self._hosted_rows(self._pair_rows_sized(mbs), mbs, dp, alone))
            # most stages first; reverse keeps a stable sort's order among ties
            ordered.sort(key=_first, reverse=True)
            pairs = self._pair_tables[key] = _BuiltAsRead(self._with_rings(ordered, dp))
        return pairs

    def _cost_rows(self, mbs: int, dp: int, alone: bool) -> Iterator[_PairAt]:
        """The rows of `_pairs` at (m, D) for cost, in its order, each built when read:
        the rows of every pair at m sorted once by W x pass price (stably, so ties keep the
        order a sort of each table gave them), those whose options host a stage at D and
        fit a stage, with their rings at D."""
        ordered = self._cost_ordered.get(mbs)
        if ordered is None:
            ordered = sorted(self._pair_rows_sized(mbs), key=lambda r: r[0].share * r[0].per_pass)
            self._cost_ordered[mbs] = ordered
        return self._with_rings(self._hosted_rows(ordered, mbs, dp, alone), dp)

    def _hosted_rows(
        self,
        rows: Iterable[tuple[_Pair, tuple[int, int, int, int, int]]],
        mbs: int,
        dp: int,
        alone: bool,
    ) -> Iterator[tuple[int, _Pair]]:
        """The rows of `_pair_rows_sized` whose options both host a stage at D (with
        `alone`, the one-option rows only), each with its `_most_stages` at D: the rows of
        the tables of `_pairs`, in the order given."""
        hosts = set(self._hosts(mbs, dp))
        for row, sizes in rows:
            slow, fast = row[0], row[1]
            if (not alone or slow == fast) and slow in hosts and fast in hosts:
                yield _most_stages(dp, slow == fast, sizes), row

    def _with_rings(self, rows: Iterable[tuple[int, _Pair]], dp: int) -> Iterator[_PairAt]:
        """Each row of `_pair_rows` with its most stages at D, and its options' one-block
        rings and their egress at D (`_block_ring`, `_block_egress`), worked out per option
        the first time a row needs them."""
        at_dp: dict[Option, tuple[float, float]] = {}
        make = tuple.__new__
        for most, row in rows:
            slow, fast = row[0], row[1]
            for option in (slow, fast):
                if option not in at_dp:
                    at_dp[option] = (self._block_ring(option, dp), self._block_egress(option, dp))
            ring_s, egress_s = at_dp[slow]
            ring_f, egress_f = at_dp[fast]
            yield make(_PairAt, (row, ring_s, ring_f, egress_s, egress_f, most))

    def _pair_rows_sized(self, mbs: int) -> list[tuple[_Pair, tuple[int, int, int, int, int]]]:
        """`_pair_rows`, each with its `_pair_sizes`: the tables of `_pairs` are rebuilt
        for every (m, D) from these."""
        sized = self._sized_rows.get(mbs)
        if sized is None:
            sized = [(row, self._pair_sizes(row.slow, row.fast)) for row in self._pair_rows(mbs)]
            self._sized_rows[mbs] = sized
        return sized

    def _pair_sizes(self, slow: Option, fast: Option) -> tuple[int, int, int, int, int]:
        """What `_most_stages` reads of a pair of options: (TP slow, TP fast, the devices
        the slow option's pools hold, the fast one's, both together), each within
        max_gpus where one option is both (`_option_stages`, `_rooms`)."""
        kinds = self.model.kinds
        room_s, room_f, both = self._rooms(slow, fast)
        if slow == fast:
            room_s = min(room_s, self.total_devices)
        return kinds[slow[0]].tp, kinds[fast[0]].tp, room_s, room_f, both

    def _pair_rows(self, mbs: int) -> list[_Pair]:
        """The part of `_pairs` that depends on the microbatch size alone, for every pair of
        options, slowest first, less the mirror images of pairs that come first
        (`_zone_swaps`) and pairs that cannot rent every pool the search must use
        (`_may_use_forced`)."""
        rows = self._pair_constants.get(mbs)
        if rows is None:
            speed, ordered = self._option_speeds(mbs)
            rows = []
            swaps = self._zone_swaps()
            listed = {(slow, fast) for x, slow in enumerate(ordered) for fast in ordered[x:]}
            for x, slow in enumerate(ordered):
                for fast in ordered[x:]:
                    both = (slow, fast)
                    moving = sorted({*self._moving_swaps(slow), *self._moving_swaps(fast)})
                    if moving and _mirrored(both, listed, [swaps[i] for i in moving]):
                        continue
                    if not self._may_use_forced(slow, fast):
                        continue
                    rows.append(
                        _Pair(
                            slow,
                            fast,
                            self._work_share(both, mbs),
                            speed[slow],
                            speed[fast],
                            self._send(slow, slow, mbs),
                            self._send(slow, fast, mbs),
                            self._send(fast, fast, mbs),
                            self._boundary_egress(slow, slow, mbs),
                            self._boundary_egress(slow, fast, mbs),
                            self._boundary_egress(fast, fast, mbs),
                            min(self._facts(o)[0] * self._facts(o)[2] for o in both),
                            min(self._facts(o)[0] * self._facts(o)[2] * speed[o] for o in both),
                            self._pair_fill(both, mbs),
                        )
                    )
            self._pair_constants[mbs] = rows
        return rows

    def _may_use_forced(self, slow: Option, fast: Option) -> bool:
        """Whether the two options draw on every pool the search must use (`must_use`, as
        `--explain` asks): a profile rents only its options' pools, and a leaf renting none
        of a forced pool is thrown away, so other pairs need no bound at all."""
        return self.options.must_use <= self._option_pools(slow) | self._option_pools(fast)

    def _zone_swaps(self) -> list[dict[int, int]]:
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
        """Indices of the `_zone_swaps` that map the option to another one: the others leave
        a pair of options as it is, so its mirror images come from these alone (a region-wide
        option holds both zones of every swap of its region and stays put; a one-pool
        option moves under the two swaps of its zone)."""
        moving = self._moving.get(option)
        if moving is None:
            swaps = self._zone_swaps()
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

    @staticmethod
    def _within(
        lengths: range, stages: int, room: float, passes: float, sp_s: float, sp_f: float
    ) -> range:
        """The n of `lengths` whose compute-only bound passes / capacity(n) stays within
        `room`: capacity(n) = P / speed_fast - n (1 / speed_fast - 1 / speed_slow) falls as
        n grows, so they are a prefix, found in closed form (widened by a hair so that ties
        stay)."""
        if not lengths or passes <= 0:
            return lengths if room >= 0 else range(0)
        if room <= 0:
            return range(0)
        need = passes / room * (1 - 1e-9)
        full = stages / sp_f
        loss = 1 / sp_f - 1 / sp_s
        if loss <= 0:
            return lengths if full >= need else range(0)
        last = math.floor((full - need) / loss)
        return range(lengths.start, max(lengths.start, min(lengths.stop, last + 1)))

    def _window(self, option: Option, mbs: int, blocks: int) -> float:
        """The least time of `blocks` consecutive blocks on the option: of P stages one holds
        at least ceil(L / P) blocks, so the straggler is at least this on its option."""
        kind = option[0]
        windows = self._windows_of(kind, mbs)
        window = windows[blocks]
        if window < 0.0:
            prefix = self._time_prefix(kind, mbs)
            last = self.model.blocks + 1
            window = min(map(sub, prefix[1 + blocks : last + 1], prefix[1 : last - blocks + 1]))
            windows[blocks] = window
        return window

    def _windows_of(self, kind: int, mbs: int) -> list[float]:
        """The `_window`s of the kind by number of blocks, -1 until asked for, one list per
        device, TP and microbatch size, on which a kind's times alone depend: the bounds
        ask for windows of a few block counts on every host, tens of thousands of times on
        the bench's five zones."""
        key = (kind, mbs)
        windows = self._windows.get(key)
        if windows is None:
            k = self.model.kinds[kind]
            same = (k.device, k.tp, mbs)
            windows = self._class_windows.get(same)
            if windows is None:
                windows = self._class_windows[same] = [-1.0] * (self.model.blocks + 1)
            self._windows[key] = windows
        return windows

    def _host_window(self, mbs: int, dp: int, blocks: int) -> float:
        """The least `_window` of `blocks` blocks over the options that host a stage at D
        (`_hosts`), cached: every shape of (m, D) with as many blocks in its largest
        stage asks for it."""
        key = (mbs, dp, blocks)
        window = self._host_windows.get(key)
        if window is None:
            window = math.inf
            for option in self._hosts(mbs, dp):
                window = min(window, self._window(option, mbs, blocks))
            self._host_windows[key] = window
        return window

    def _pair_fill(self, options: Sequence[Option], mbs: int) -> float:
        """sum over layers of the faster option's time: the stages of a profile over these
        options run every layer once, each on one of them, so their times add up to at
        least this."""
        key = (self._time_classes(options), mbs)
        fill = self._fills.get(key)
        if fill is None:
            prefixes = [self._time_prefix(o[0], mbs) for o in set(options)]
            layers = range(self.model.blocks + 2)
            fill = sum((min(p[i + 1] - p[i] for p in prefixes) for i in layers), 0.0)
            self._fills[key] = fill
        return fill

    def _time_classes(self, options: Sequence[Option]) -> tuple[tuple[str, int], ...]:
        """The distinct (device, TP) of the options, sorted: an option's times depend on
        nothing else, so the fill and work share of options are cached by these (on two
        zones of A100 and V100, 171 pairs of options have 21 pairs of classes)."""
        key = tuple(options)
        classes = self._classes.get(key)
        if classes is None:
            kinds = self.model.kinds
            classes = tuple(sorted({(kinds[o[0]].device, kinds[o[0]].tp) for o in options}))
            self._classes[key] = classes
        return classes

    def _work_share(self, options: Sequence[Option], mbs: int) -> float:
        """W = sum over layers of min over `options` of (the layer's time / the option's
        whole-model time) <= 1. A stage's time over its option's whole-model time is at
        least its layers' share of W, so sum_i t_i / speed_i >= W for any split: with
        t_i <= S - (the stage's sends), S >= (W + sum_i sends_i / speed_i) / capacity."""
        key = (self._time_classes(options), mbs)
        share = self._shares.get(key)
        if share is None:
            if len(key[0]) == 1:
                share = 1.0
            else:
                speed, _ = self._option_speeds(mbs)
                prefixes = [(self._time_prefix(o[0], mbs), speed[o]) for o in set(options)]
                share = sum(
                    (
                        min((p[i + 1] - p[i]) / whole for p, whole in prefixes)
                        for i in range(self.model.blocks + 2)
                    ),
                    0.0,
                )
            self._shares[key] = share
        return share

    def _least_prices(self, mbs: int, dp: int) -> tuple[float, float]:
        """(least tp x price, least tp x price x speed) over the hosts, for `_cost_floor`."""
        key = (mbs, dp)
        prices = self._host_prices.get(key)
        if prices is None:
            speed, _ = self._option_speeds(mbs)
            hosts = self._hosts(mbs, dp)
            facts = [self._facts(o) for o in hosts]
            prices = (
                min(f[0] * f[2] for f in facts),
                min(f[0] * f[2] * speed[o] for f, o in zip(facts, hosts, strict=True)),
            )
            self._host_prices[key] = prices
        return prices

    def _block_egress(self, option: Option, dp: int) -> float:
        """Egress of one block's ring on the option: each stage of it holds at least that."""
        key = (option, dp)
        egress = self._block_egresses.get(key)
        if egress is None:
            egress = self.model.ring_egress(option, (0, 1, False, False), dp)
            self._block_egresses[key] = egress
        return egress

    def _block_ring(self, option: Option, dp: int, blocks: int = 1) -> float:
        """The ring all-reduce of `blocks` blocks' gradients over D ranks of the option, at
        its slowest pair of kinds: a stage of the option holding at least that many blocks
        syncs no faster, as a ring takes longer for more bytes (every stage holds one
        block; the largest of P holds ceil(L / P))."""
        return self._stage_ring(option, dp, (0, blocks, False, False))

    def _end_ring(self, option: Option, dp: int, stages: int, first: bool) -> float:
        """The ring of the first (or the last) stage's gradients, on the option, at least:
        that stage holds the first block and the token table (or the last block and the
        head; with one stage, the whole model), and a ring takes longer for more bytes."""
        blocks = self.model.blocks
        if stages == 1:
            return self._stage_ring(option, dp, (0, blocks, True, True))
        if first:
            return self._stage_ring(option, dp, (0, 1, True, False))
        return self._stage_ring(option, dp, (blocks - 1, blocks, False, True))

    def _stage_ring(self, option: Option, dp: int, stage: tuple[int, int, bool, bool]) -> float:
        """The ring of a stage (`PlanningModel.stage_key`) over D ranks of the option at its
        slowest pair of kinds, cached."""
        if dp < 2:
            return 0.0
        key = (option, dp, stage)
        ring = self._stage_rings.get(key)
        if ring is None:
            ring = self._stage_rings[key] = max(
                self.model.ring(a, b, stage, dp) for a, b in self._ring_representatives(option)
            )
        return ring

    def _ring_representatives(self, option: Option) -> list[tuple[int, int]]:
        """One pair of the option's kinds (a kind with itself included) per distinct ring:
        a ring depends on two kinds only through their link, its flows and the bytes per
        rank (`_distinct_rings`), so a region-wide option over four zones has two (within a
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

    def _straggler_ceiling(self, fixed: float, m1: int, rate: float) -> float:
        """The largest straggler period with which a candidate of iteration time at least
        fixed + m1 x S, renting at least `rate`, can still beat the incumbent and meet the
        time cap and the budget (infinite when m1 is 0). Slightly widened so that ties
        survive rounding."""
        if m1 == 0:
            return math.inf
        cap = self.bound() if self.objective == "max_throughput" else math.inf
        if self.objective == "min_cost" and rate > 0:
            cap = min(cap, self.bound() / rate)
        if self.time_cap is not None:
            cap = min(cap, self.time_cap)
        if self.budget is not None and rate > 0:
            cap = min(cap, self.budget / rate)
        return (cap - fixed) / m1 * (1 + SPLIT_TOLERANCE)

    def _hosts(self, mbs: int, dp: int) -> list[Option]:
        """The options with room for one stage of D replicas, slowest first."""
        key = (mbs, dp)
        hosts = self._host_lists.get(key)
        if hosts is None:
            hosts = [o for o in self._option_speeds(mbs)[1] if self._option_stages(o, dp) >= 1]
            self._host_lists[key] = hosts
        return hosts

    def _zone_rings(self, stages: int, dp: int) -> float:
        """A ring every profile of P stages of D pipelines pays where the zones cannot keep
        it whole: a profile needs P x D x TP devices, and two options each inside one zone
        hold at most the two largest such options' devices (`_zone_split`); beyond that
        one of its options spans zones, and each of that option's stages rings across them
        on at least one block (`_block_ring`), however the split falls. Of the options
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
        """For `_zone_rings` at D: per option spanning zones that hosts a stage, in order of
        its one-block ring, the ring and the most stages a profile using it and no option of
        higher ring holds: the stages its pools hold at D, plus those of the other option,
        which is inside one zone or spans zones at no higher ring (pools two options share
        are counted twice: an upper bound)."""
        _, _, spanning, inside = self._zone_split()
        local = max((self._option_stages(o, dp) for o in inside), default=0)
        held = sorted(
            (self._block_ring(o, dp), self._option_stages(o, dp))
            for o in spanning
            if self._option_stages(o, dp) >= 1
        )
        rows, best = [], local
        for ring, own in held:
            rows.append((ring, own + best))
            best = max(best, own)
        return rows

    def _zone_split(self) -> tuple[int, int, list[Option], list[Option]]:
        """For `_zone_rings`: at least the devices two options inside one zone each can
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

    def _most_capacity(self, mbs: int, stages: int, dp: int) -> float:
        """An upper bound on sum_i 1 / speed_i over every profile of the shape: the
        Lagrangian dual of the linear relaxation. For any lambda >= 0 and profile x (stages
        per option o, each of capacity c_o = 1 / speed_o taking D x tp_o devices),
        sum x_o c_o = lambda sum x_o + sum x_o (c_o - lambda) <= lambda P + g(lambda) / D,
        where g(lambda) gives each device the best (c_o - lambda)+ / tp_o of an option on its
        pool, over every device max_gpus allows (`_capacity_duals`). The bound is convex in
        lambda and piecewise linear, so its minimum is at a breakpoint, found by bisection."""
        duals = self._capacity_duals(mbs)
        lo, hi = 0, len(duals) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            a, b = duals[mid], duals[mid + 1]
            if a[0] * stages + a[1] / dp <= b[0] * stages + b[1] / dp:
                hi = mid
            else:
                lo = mid + 1
        lam, g = duals[lo]
        return lam * stages + g / dp

    def _capacity_duals(self, mbs: int) -> list[tuple[float, float]]:
        """(lambda, g(lambda)) at every breakpoint of g, ascending in lambda (see
        `_most_capacity`): lambda = 0, each c_o, and where two options' lines cross."""
        duals = self._duals.get(mbs)
        if duals is None:
            model = self.model
            speed, _ = self._option_speeds(mbs)
            lines = [(1.0 / speed[o], model.kinds[o[0]].tp, self._option_pools(o)) for o in speed]
            points = {0.0, *(c for c, _, _ in lines)}
            for (c1, t1, _), (c2, t2, _) in combinations(lines, 2):
                if t1 != t2:
                    lam = (c1 * t2 - c2 * t1) / (t2 - t1)
                    if lam > 0:
                        points.add(lam)
            duals = [(lam, self._device_values(lam, lines)) for lam in sorted(points)]
            self._duals[mbs] = duals
        return duals

    def _device_values(self, lam: float, lines: list[tuple[float, int, frozenset[int]]]) -> float:
        """g(lambda): each pool's devices at the best (c_o - lambda)+ / tp_o of an option
        drawing on it, the most valuable devices first, at most max_gpus of them."""
        value = [0.0] * len(self.capacity)
        for c, tp, pools in lines:
            per_device = (c - lam) / tp
            for p in pools:
                value[p] = max(value[p], per_device)
        left, total = self.total_devices, 0.0
        for v, room in sorted(zip(value, self.capacity, strict=True), reverse=True):
            take = min(room, left)
            total += v * take
            left -= take
            if not left or v <= 0:
                break
        return total

    def _option_pools(self, option: tuple[int, ...]) -> frozenset[int]:
        return frozenset(self.model.kinds[k].pool for k in option)

    def _option_stages(self, option: tuple[int, ...], dp: int) -> int:
        """How many stages of D replicas the option's pools can hold alone."""
        room = self._stage_room.get(option)
        if room is None:
            devices = sum(self.capacity[p] for p in self._option_pools(option))
            room = (min(devices, self.total_devices), self.model.kinds[option[0]].tp)
            self._stage_room[option] = room
        return room[0] // (dp * room[1])

    def _rooms(self, slow: Option, fast: Option) -> tuple[int, int, int]:
        """Devices the slow option's pools hold, the fast one's, and both together within
        max_gpus."""
        rooms = self._pair_rooms.get((slow, fast))
        if rooms is None:
            capacity = self.capacity
            pools_slow, pools_fast = self._option_pools(slow), self._option_pools(fast)
            rooms = (
                sum(capacity[p] for p in pools_slow),
                sum(capacity[p] for p in pools_fast),
                min(self.total_devices, sum(capacity[p] for p in pools_slow | pools_fast)),
            )
            self._pair_rooms[slow, fast] = rooms
        return rooms

    def _run_lengths(
        self, slow: tuple[int, ...], fast: tuple[int, ...], stages: int, dp: int
    ) -> range:
        """The n for which n stages of `slow` then stages - n of `fast` fit every quota and
        max_gpus, ascending (most fast stages, the lowest bound, first); n = stages when
        `slow` is `fast`. Each option draws its devices from its pools, so by Hall's theorem
        they fit when each option's devices fit its pools and both together fit the union;
        the devices are linear in n, so each condition bounds n on one side."""
        if slow == fast:
            return range(stages, stages + 1 if self._option_stages(slow, dp) >= stages else 0)
        kinds = self.model.kinds
        tp_slow, tp_fast = kinds[slow[0]].tp, kinds[fast[0]].tp
        room_slow, room_fast, both = self._rooms(slow, fast)
        linear = (
            (-room_slow, dp * tp_slow),
            (stages * dp * tp_fast - room_fast, -dp * tp_fast),
            (stages * dp * tp_fast - both, dp * (tp_slow - tp_fast)),
        )
        lo, hi = 1, stages - 1
        for c, k in linear:
            if k > 0:
                hi = min(hi, -c // k)
            elif k < 0:
                lo = max(lo, -(-c // -k))
            elif c > 0:
                return range(0)
        return range(lo, hi + 1)

    def _profile_rate(
        self, slow: tuple[int, ...], n_slow: int, fast: tuple[int, ...], n_fast: int, dp: int
    ) -> float:
        """USD per second the profile's devices cost at least: one-pool options rent whole
        nodes of their pool; a region-wide option's devices at its cheapest pool, unrounded."""
        tp_s, pool_s, price_s, gpn_s = self._facts(slow)
        tp_f, pool_f, price_f, gpn_f = self._facts(fast)
        devices_s, devices_f = n_slow * dp * tp_s, n_fast * dp * tp_f
        if pool_s >= 0 and pool_s == pool_f:
            return -(-(devices_s + devices_f) // gpn_s) * gpn_s * price_s
        rate_s = -(-devices_s // gpn_s) * gpn_s * price_s if pool_s >= 0 else devices_s * price_s
        rate_f = -(-devices_f // gpn_f) * gpn_f * price_f if pool_f >= 0 else devices_f * price_f
        return rate_s + rate_f

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

    def _time_prefix(self, kind: int, mbs: int) -> list[float]:
        """Forward + backward prefix sums of `kind` at `mbs`, for bisecting stage ends."""
        key = (kind, mbs)
        prefix = self._time_prefixes.get(key)
        if prefix is None:
            k = self.model.kinds[kind]
            t = self.model.tables(k.device, k.tp, mbs)
            prefix = [f + b for f, b in zip(t.forward, t.backward, strict=True)]
            self._time_prefixes[key] = prefix
        return prefix

    def _pass_sums(self, kind: int, mbs: int) -> tuple[list[float], list[float]]:
        """The forward and backward prefix sums of `kind`'s tables at `mbs`, by kind."""
        key = (kind, mbs)
        sums = self._pass_sum_lists.get(key)
        if sums is None:
            k = self.model.kinds[kind]
            t = self.model.tables(k.device, k.tp, mbs)
            sums = self._pass_sum_lists[key] = (t.forward, t.backward)
        return sums

    def _memory_end(self, kind: int, mbs: int, first: int, dp: int, flight: int) -> int:
        """The largest end layer e <= blocks (a stage before the last) for which layers
        [first, e) fit `kind`'s memory, or `first` if none does; memory grows with the layers
        of such a stage, so a binary search finds it."""
        key = (kind, mbs, first, dp, flight)
        end = self._memory_ends.get(key)
        if end is None:
            fits = self.model.fits
            end = last_true(
                first, self.model.blocks, lambda e: fits(kind, mbs, first, e, dp, flight)
            )
            self._memory_ends[key] = end
        return end

    def _stage_end(
        self, kind: int, mbs: int, first: int, budget: float, dp: int, flight: int, last_end: int
    ) -> int:
        """The largest end layer in (first, last_end] whose stage from `first` runs within
        `budget` seconds on `kind` and fits its memory, or `first` if none does. The bisect
        on the prefix sums is checked against `stage_time` itself, so rounding in the
        prefix sums never changes the answer. Time and memory both grow with the end, so
        memory is looked up only when the end the time allows does not fit: one check
        instead of a binary search in most calls."""
        prefix = self._time_prefix(kind, mbs)
        # `stage_time(kind, mbs, first, e)[0]` is (F[e] - F[first]) + (B[e] - B[first]) over
        # the tables' forward and backward sums: the same arithmetic, without its cache
        forward, backward = self._pass_sums(kind, mbs)
        f0, b0 = forward[first], backward[first]
        end = max(first, bisect_right(prefix, prefix[first] + budget, first, last_end + 1) - 1)
        while end > first and (forward[end] - f0) + (backward[end] - b0) > budget:
            end -= 1
        while end < last_end and (forward[end + 1] - f0) + (backward[end + 1] - b0) <= budget:
            end += 1
        if end == first or self.model.fits(kind, mbs, first, end, dp, flight):
            return end
        return self._memory_end(kind, mbs, first, dp, flight)

    def min_max_split(
        self,
        sequence: Sequence[tuple[int, ...]],
        mbs: int,
        dp: int,
        floor: float = 0.0,
        ceiling: float = math.inf,
    ) -> tuple[int, ...] | None:
        """The boundaries minimising max_i (t_i + sends) for this sequence of options:
        bisection on the straggler, each test filling stages greedily (as many blocks as fit
        under it and in memory), which is exact for stage times monotone in their blocks.
        None when no split fits memory, or none has a straggler of at most `ceiling` (tested
        first: one fill decides most sequences that cannot beat the incumbent). The kinds of
        an option share device and TP (`stage_options`), so the first stands for all."""
        model = self.model
        stages = len(sequence)
        m = -(-(model.batch // mbs) // dp)
        sends = [self._send(a, b, mbs) for a, b in pairwise(sequence)]
        padded = [0.0, *sends, 0.0]
        whole = model.blocks + 2

        def fill(limit: float) -> tuple[int, ...] | None:
            bounds, start = [0], 0
            for j, option in enumerate(sequence):
                kind = option[0]
                first = 0 if j == 0 else start + 1
                flight = max(1, min(stages - j, m))
                budget = limit - padded[j] - padded[j + 1]
                if j == stages - 1:
                    if model.stage_time(kind, mbs, first, whole)[0] > budget or not model.fits(
                        kind, mbs, first, whole, dp, flight
                    ):
                        return None
                    bounds.append(model.blocks)
                    return tuple(bounds)
                end = self._stage_end(
                    kind, mbs, first, budget, dp, flight, model.blocks - (stages - 1 - j) + 1
                )
                if end < start + 2:
                    return None
                start = end - 1
                bounds.append(start)
            return None

        top = (
            sum((self.option_time(o, mbs, 0, whole) for o in set(sequence)), 0.0)
            + sum(sends, 0.0) * 2
        )
        if ceiling < top:
            if ceiling < floor:
                return None
            top = ceiling
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
                send = self._send(previous, combo, mbs) if index else 0.0
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
        """Keep the best candidate of each signature; `ranked[0]` is the incumbent. Searching
        the free plans, one that costs anything is no answer."""
        if self.free and candidate.estimate.cost > 0:
            return
        signature = candidate.signature(self.model)
        held = self.best.get(signature)
        if held is not None and held.key() <= candidate.key():
            return
        self.best[signature] = candidate
        if not self.ranked or candidate.key() < self.ranked[0].key():
            self.ranked = [candidate]
        top = self.options.top
        if top == 1:
            self._kth = self.ranked[0].value
        elif len(self.best) >= top:
            self._kth = heapq.nsmallest(top, (c.value for c in self.best.values()))[-1]

    def alternatives(self) -> tuple[Candidate, ...]:
        """The best, then the best-scored candidate of each other signature the search met,
        up to `top` in all. Pruning keeps anything that could beat the `top`-th signature,
        but the exact search's dominance rule compares partials of different signatures, so
        the alternatives are the best ones found, not proven second best."""
        return tuple(sorted(self.best.values(), key=Candidate.key)[: self.options.top])

    def cheapest_counts(self, sets: Sequence[tuple[int, ...]], dp: int) -> Assignment | None:
        """Replica counts for the kind sets with the least rental rate inside every quota and
        max_gpus, or None if none fit. Exact (`_counts_by_dp`) while the splits of the mixed
        stages number at most EXACT_COUNT_SPLITS; beyond, `_counts_greedy`, which first sets
        aside one replica per kind of every stage, then fills already-rented devices first,
        then the cheapest pool per device."""
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
        for combo in sets:
            for k in combo:
                used[model.kinds[k].pool] += model.kinds[k].tp
        if any(u > c for u, c in zip(used, self.capacity, strict=True)):
            return None
        chosen = []
        for combo in sets:
            counts = dict.fromkeys(combo, 1)
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
        if options.stop is not None and options.stop.is_set():
            raise _Stop("interrupted", interrupted=True)
        now = time.perf_counter()
        if options.time_limit is not None and now - self.started > options.time_limit:
            raise _Stop(f"time limit {options.time_limit:g} s reached")
        if options.progress is not None and now - self.last_report >= options.progress_every:
            self.last_report = now
            incumbent: float | None = self.incumbent()
            if incumbent == math.inf:
                incumbent = None
            options.progress(
                Snapshot(
                    evaluations=self.evaluations,
                    seconds=now - self.started,
                    incumbent=0.0 if self.free and incumbent is not None else incumbent,
                    lower_bound=0.0 if self.free else self.lower_bound(),
                    shapes_left=self.shapes_left(),
                )
            )


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


def _cost_floor(
    fixed: float, passes: float, stages: int, dp: int, per_stage: float, per_pass: float
) -> float:
    """Least USD per iteration of any profile over options whose least tp x price is
    `per_stage` and least tp x price x speed is `per_pass`: cost >= T x rate with
    T >= fixed + passes / capacity (passes = (m - 1) x W, `_Search._work_share`) and
    rate >= D x sum_i tp_i x price_i (each stage's D replicas at their cheapest price), so
    cost >= fixed x P x D x per_stage + passes x D x per_pass (rate / capacity is a mediant
    of the stages' tp x price x speed)."""
    return fixed * stages * dp * per_stage + passes * dp * per_pass


def _mirrored(
    pair: tuple[Option, Option], listed: set[tuple[Option, Option]], swaps: list[dict[int, int]]
) -> bool:
    """Whether a zone swap maps the pair to a listed pair that comes before it."""
    for swap in swaps:
        image = tuple(tuple(sorted(swap.get(k, k) for k in option)) for option in pair)
        if image in listed and image < pair:
            return True
    return False


def _splits(total: int, parts: int) -> Iterable[tuple[int, ...]]:
    """Every way to write `total` as `parts` positive integers, in lexicographic order."""
    if parts == 1:
        yield (total,)
        return
    for first in range(1, total - parts + 2):
        for rest in _splits(total - first, parts - 1):
            yield (first, *rest)


def search(model: PlanningModel, options: SearchOptions | None = None) -> SearchResult:
    """The best `options.top` candidates of distinct signature (see the module docstring).

    For min_cost where some pool is free, first the free plans, fastest first: any of them
    is a least-cost plan, and of those the tie-break (`Candidate.key`) wants the fastest,
    which the time bounds find where cost bounds of 0 prune nothing; only where there is none
    (and the search was not interrupted), the priced plans, with what is left of the limits
    (`certificate.some_pool_is_free`).

    The cyclic garbage collector is paused while it runs (`_collector_paused`)."""
    options = options or SearchOptions()
    if not some_pool_is_free(model):
        with _collector_paused():
            return _Search(model, options).run()
    with _collector_paused():
        free = _Search(model, options, free=True).run()
    if free.candidates:
        candidates = tuple(replace(c, objective="min_cost") for c in free.candidates)
        return replace(free, candidates=candidates, lower_bound=0.0, gap=0.0)
    if free.interrupted:
        return free
    rest = options.time_limit
    if rest is not None:
        rest = max(0.0, rest - free.seconds)
    with _collector_paused():
        priced = _Search(model, replace(options, time_limit=rest)).run()
    return replace(
        priced,
        evaluations=free.evaluations + priced.evaluations,
        seconds=free.seconds + priced.seconds,
        greedy_count_leaves=free.greedy_count_leaves + priced.greedy_count_leaves,
    )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector, restoring its state after. The search
    allocates millions of short-lived tuples, all freed by reference counting; every 700
    allocations the collector would scan the young objects, and every so often every object
    the process holds (its libraries' included), for cycles the search does not make. On
    the bench that scanning is 5-20% of the search's time; peak memory is unchanged (40
    MiB on the budget scenario either way)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
