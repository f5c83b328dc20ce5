"""The pair tables of `kind-profiles` (see `profiles`): per (m, D), the pairs of options a
profile may use, with what their bounds need apart from P, listed by the most stages they
may fit (or by their least cost per pass), built only as far as a shape reads them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from functools import cache
from typing import NamedTuple

from hetc.costmodel.planning import PlanningModel
from hetc.solver.search.incumbent import SearchOptions
from hetc.solver.search.windows import Option
from hetc.solver.search.work import HOSTED_ROW, PAIR_BUILT
from hetc.solver.search.zones import Zones, _mirrored


class Pair(NamedTuple):
    """What the bounds of every profile over two options need, apart from P and D."""

    slow: Option
    fast: Option
    share: float
    """`Pairs.work_share` of the two."""
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
    """Every layer on the faster of the two (`Pairs._pair_fill`)."""
    tied_alone: float
    tied_both: float
    """The tied embedding's all-reduce between the first and the last stage, both on the
    slow option, and with the last on the fast one (0 without tied embeddings)."""
    extra_slow: float
    extra_fast: float
    """What one block on the slow option (on the fast one) takes at least beyond the
    faster of the two (`Pairs._extra`): every stage runs a block, so a profile's fill is
    at least `fill` plus n of the first and P - n of the second."""


class PairAt(NamedTuple):
    """A row of `Pairs.pairs`: a pair, and what its profiles' bounds need at D apart
    from P. A row holds its pair rather than a copy of its fields: a table is built for
    every (m, D) a shape reaches."""

    pair: Pair
    ring_slow: float
    ring_fast: float
    """One block's ring at D on each (`Zones.block_ring`)."""
    ring_egress_slow: float
    ring_egress_fast: float
    most_stages: int
    """At least the most stages of D replicas a profile over the two fits in the quotas
    (`most_stages`)."""


class BuiltAsRead:
    """A table read from the top that builds its rows only as far as it is read: a reader
    goes over the rows built so far, then draws new ones from the source."""

    __slots__ = ("_built", "_source")

    def __init__(self, source: Iterator[PairAt]) -> None:
        self._built: list[PairAt] = []
        self._source = source

    def __iter__(self) -> Iterator[PairAt]:
        built = self._built
        yield from built
        for row in self._source:
            built.append(row)
            yield row


def _first(entry: tuple[int, Pair]) -> int:
    """The sort key of a pair table's (most stages, row) entries."""
    return entry[0]


def most_stages(dp: int, same: bool, sizes: tuple[int, int, int, int, int]) -> int:
    """At least the largest P for which `Splits.run_lengths` has some n, from the pair's
    `Pairs.pair_sizes`: its conditions at the n that favours each (n stages of the slow
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


class Pairs(Zones):
    """The pair tables of `kind-profiles`."""

    def __init__(self, model: PlanningModel, options: SearchOptions) -> None:
        super().__init__(model, options)
        self.send = cache(model.send_between)
        """The planning model's sends and boundary egress between two options, cached: the
        profile bounds and every split ask for the same few pairs again and again."""
        self._boundary_egress = cache(model.boundary_egress)
        self._tied = cache(model.tied_time)
        self._extras: dict[tuple[str, int, str, int, int], tuple[float, float]] = {}
        self._shares: dict[tuple[tuple[tuple[str, int], ...], int], float] = {}
        self._classes: dict[tuple[Option, ...], tuple[tuple[str, int], ...]] = {}
        self._fills: dict[tuple[tuple[tuple[str, int], ...], int], float] = {}
        self._pair_tables: dict[tuple[int, int, bool], BuiltAsRead] = {}
        self._pair_constants: dict[int, list[Pair]] = {}
        self._sized_rows: dict[int, list[tuple[Pair, tuple[int, int, int, int, int]]]] = {}
        self._cost_ordered: dict[int, list[tuple[Pair, tuple[int, int, int, int, int]]]] = {}
        self._cost_tables: dict[tuple[int, int, bool], BuiltAsRead] = {}
        self._all_share: dict[int, float] = {}
        """`work_share` of every option, by microbatch size."""

    def _model_share(self, mbs: int) -> float:
        """`work_share` over every option, cached."""
        share = self._all_share.get(mbs)
        if share is None:
            share = self._all_share[mbs] = self.work_share(tuple(self.option_speeds(mbs)[0]), mbs)
        return share

    def pairs(self, mbs: int, dp: int, alone: bool = False) -> Iterable[PairAt]:
        """Per (slow, fast) pair of hosts (slow first, fast = slow for one-option profiles)
        what its profiles' bounds need and does not depend on P (`PairAt`); with `alone`,
        the one-option rows only (a single stage has no room for two), built on their own:
        shapes of one stage come at many D that no deeper shape reads. For time, the
        pairs that fit the most stages come first, so a shape of P stages reads only the
        rows that may fit P; for cost, the least W x pass price first, so a shape stops at
        the first row whose cost floor is sure to exceed the incumbent's (`profiles`).
        Either way a table is built only as far as a shape reads it (`BuiltAsRead`), with
        each option's rings at D computed when a row first needs them (docs/planner.md,
        Speed, says how few rows the shapes read). Every row fits a stage (`most_stages`
        >= 1): each option hosts one, and two together fit whichever is wider."""
        key = (mbs, dp, alone)
        if self.objective == "min_cost":
            table = self._cost_tables.get(key)
            if table is None:
                table = self._cost_tables[key] = BuiltAsRead(self._cost_rows(mbs, dp, alone))
            return table
        pairs = self._pair_tables.get(key)
        if pairs is None:
            ordered = list(self._hosted_rows(self.pair_rows_sized(mbs), mbs, dp, alone))
            # most stages first; reverse keeps a stable sort's order among ties
            ordered.sort(key=_first, reverse=True)
            pairs = self._pair_tables[key] = BuiltAsRead(self._with_rings(ordered, dp))
        return pairs

    def _cost_rows(self, mbs: int, dp: int, alone: bool) -> Iterator[PairAt]:
        """The rows of `pairs` at (m, D) for cost, in its order, each built when read:
        the rows of every pair at m sorted once by W x pass price (stably, so ties keep the
        order a sort of each table gave them), those whose options host a stage at D and
        fit a stage, with their rings at D."""
        ordered = self._cost_ordered.get(mbs)
        if ordered is None:
            ordered = sorted(self.pair_rows_sized(mbs), key=lambda r: r[0].share * r[0].per_pass)
            self._cost_ordered[mbs] = ordered
        return self._with_rings(self._hosted_rows(ordered, mbs, dp, alone), dp)

    def _hosted_rows(
        self,
        rows: Iterable[tuple[Pair, tuple[int, int, int, int, int]]],
        mbs: int,
        dp: int,
        alone: bool,
    ) -> Iterator[tuple[int, Pair]]:
        """The rows of `pair_rows_sized` whose options both host a stage at D (with
        `alone`, the one-option rows only), each with its `most_stages` at D: the rows of
        the tables of `pairs`, in the order given."""
        hosts = set(self.hosts(mbs, dp))
        tally = self.tally
        for row, sizes in rows:
            tally[HOSTED_ROW] += 1
            slow, fast = row[0], row[1]
            if (not alone or slow == fast) and slow in hosts and fast in hosts:
                yield most_stages(dp, slow == fast, sizes), row

    def _with_rings(self, rows: Iterable[tuple[int, Pair]], dp: int) -> Iterator[PairAt]:
        """Each row of `pair_rows` with its most stages at D, and its options' one-block
        rings and their egress at D (`block_ring`, `block_egress`), worked out per option
        the first time a row needs them."""
        at_dp: dict[Option, tuple[float, float]] = {}
        make = tuple.__new__
        for most, row in rows:
            slow, fast = row[0], row[1]
            for option in (slow, fast):
                if option not in at_dp:
                    at_dp[option] = (self.block_ring(option, dp), self.block_egress(option, dp))
            ring_s, egress_s = at_dp[slow]
            ring_f, egress_f = at_dp[fast]
            yield make(PairAt, (row, ring_s, ring_f, egress_s, egress_f, most))

    def has_pair_rows(self, mbs: int) -> bool:
        """Whether `pair_rows` at this microbatch size is built (seconds at thousands of
        options, so the driver's range floors wait for a shape to build it)."""
        return mbs in self._pair_constants

    def pair_rows_sized(self, mbs: int) -> list[tuple[Pair, tuple[int, int, int, int, int]]]:
        """`pair_rows`, each with its `pair_sizes`: the tables of `pairs` are rebuilt
        for every (m, D) from these."""
        sized = self._sized_rows.get(mbs)
        if sized is None:
            sized = [(row, self.pair_sizes(row.slow, row.fast)) for row in self.pair_rows(mbs)]
            self._sized_rows[mbs] = sized
        return sized

    def pair_sizes(self, slow: Option, fast: Option) -> tuple[int, int, int, int, int]:
        """What `most_stages` reads of a pair of options: (TP slow, TP fast, the devices
        the slow option's pools hold, the fast one's, both together), each within
        max_gpus where one option is both (`_option_stages`, `_rooms`)."""
        kinds = self.model.kinds
        room_s, room_f, both = self._rooms(slow, fast)
        if slow == fast:
            room_s = min(room_s, self.total_devices)
        return kinds[slow[0]].tp, kinds[fast[0]].tp, room_s, room_f, both

    def pair_rows(self, mbs: int) -> list[Pair]:
        """The part of `pairs` that depends on the microbatch size alone, for every pair of
        options, slowest first, less the mirror images of pairs that come first
        (`zone_swaps`) and pairs that cannot rent every pool the search must use
        (`may_use_forced`)."""
        rows = self._pair_constants.get(mbs)
        if rows is None:
            speed, ordered = self.option_speeds(mbs)
            rows = []
            swaps = self.zone_swaps()
            position = {option: x for x, option in enumerate(ordered)}
            for x, slow in enumerate(ordered):
                self.tally[PAIR_BUILT] += len(ordered) - x
                self.check_limits()  # O(options^2) rows: seconds at thousands of options
                for fast in ordered[x:]:
                    both = (slow, fast)
                    moving = sorted({*self._moving_swaps(slow), *self._moving_swaps(fast)})
                    if moving and _mirrored(both, position, [swaps[i] for i in moving]):
                        continue
                    if not self.may_use_forced(slow, fast):
                        continue
                    rows.append(
                        Pair(
                            slow,
                            fast,
                            self.work_share(both, mbs),
                            speed[slow],
                            speed[fast],
                            self.send(slow, slow, mbs),
                            self.send(slow, fast, mbs),
                            self.send(fast, fast, mbs),
                            self._boundary_egress(slow, slow, mbs),
                            self._boundary_egress(slow, fast, mbs),
                            self._boundary_egress(fast, fast, mbs),
                            min(self._facts(o)[0] * self._facts(o)[2] for o in both),
                            min(self._facts(o)[0] * self._facts(o)[2] * speed[o] for o in both),
                            self._pair_fill(both, mbs),
                            self._tied(slow, slow),
                            self._tied(slow, fast),
                            *self._extra(slow, fast, mbs),
                        )
                    )
            self._pair_constants[mbs] = rows
        return rows

    def may_use_forced(self, slow: Option, fast: Option) -> bool:
        """Whether the two options draw on every pool the search must use (`must_use`, as
        `--explain` asks): a profile rents only its options' pools, and a leaf renting none
        of a forced pool is thrown away, so other pairs need no bound at all."""
        return self.options.must_use <= self._option_pools(slow) | self._option_pools(fast)

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

    def _extra(self, slow: Option, fast: Option, mbs: int) -> tuple[float, float]:
        """(least over blocks of what the block takes on `slow` beyond the faster of the two
        options, the same on `fast`): 0 where the option is the faster on some block.
        Cached by the options' device and TP, on which their times alone depend."""
        kinds = self.model.kinds
        ks, kf = kinds[slow[0]], kinds[fast[0]]
        key = (ks.device, ks.tp, kf.device, kf.tp, mbs)
        extra = self._extras.get(key)
        if extra is None:
            slow_prefix = self._time_prefix(slow[0], mbs)
            fast_prefix = self._time_prefix(fast[0], mbs)
            extra_slow = extra_fast = math.inf
            for i in range(1, self.model.blocks + 1):
                on_slow = slow_prefix[i + 1] - slow_prefix[i]
                on_fast = fast_prefix[i + 1] - fast_prefix[i]
                extra_slow = min(extra_slow, max(0.0, on_slow - on_fast))
                extra_fast = min(extra_fast, max(0.0, on_fast - on_slow))
            extra = self._extras[key] = (extra_slow, extra_fast)
        return extra

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

    def work_share(self, options: Sequence[Option], mbs: int) -> float:
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
                speed, _ = self.option_speeds(mbs)
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
