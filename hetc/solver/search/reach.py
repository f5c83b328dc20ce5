"""How many pipelines the stages' memory lets the devices hold (`last_dp`): under
`kind-profiles` with several device types, where each stage sits whole on one option, from
how far each option's stages can reach in blocks (`profile_last`); otherwise the stage
cover's relaxation (`cover.most_pipelines`).
"""

from __future__ import annotations

from hetc.costmodel.planning import PlanningModel
from hetc.solver.search.incumbent import SearchOptions
from hetc.solver.search.splits import Splits
from hetc.solver.search.windows import Option
from hetc.solver.search.work import REACH_PAIR, ROOM_PAIR

NO_ROOM = 1 << 30
"""What `Reach.reach_sums` counts for a stage that holds no block: more than any model
has, so a profile with such a stage never holds the model."""


PAIRS_PER_CHECK = 1024
"""Pairs of options `Reach.profile_last` weighs between two checks of the limits: with
hundreds of options there are tens of thousands, a second's work."""


_RoomEntry = tuple[int, int, int]
"""An entry of `Reach._pairs_by_room`: the pair's room bound and the positions of its two
options among `stage_options`, three small ints a pair: there are the square of the options,
tens of millions at thousands of zones."""


class Reach(Splits):
    """The most pipelines the stages' memory lets the devices hold."""

    def __init__(self, model: PlanningModel, options: SearchOptions) -> None:
        super().__init__(model, options)
        self._lasts: dict[tuple[int, int], int] = {}
        self._room_order: list[_RoomEntry] | None = None
        self._ranks: dict[int, dict[Option, int]] = {}
        self._shares_held: dict[tuple[object, ...], bool] = {}
        self._reach_tables: dict[tuple[object, ...], tuple[list[int], list[int], int]] = {}

    def last_dp(self, mbs: int, stages: int) -> int:
        """`dp_cap`, and no more than the stages' memory lets the devices hold: under
        `kind-profiles` with several device types, where each stage sits whole on one
        option (`profile_last`), else as the stage cover relaxes it, letting a stage mix
        kinds (`cover.most_pipelines`). Both only drop D at which no candidate of their
        space holds the model in memory. With one device type the cover's cap is used
        either way: the profile cap cuts no shape the bounds keep there and costs more
        lookups; with several it removes the shapes whose slow stages cannot hold their
        blocks (docs/planner.md, Speed)."""
        key = (mbs, stages)
        last = self._lasts.get(key)
        if last is None:
            if "kind-profiles" in self.approx and not self.cover.one_device:
                last = self.profile_last(mbs, stages, self.dp_cap(mbs, stages))
            else:
                last = self.cover.most_pipelines(mbs, stages, self.dp_cap(mbs, stages))
            self._lasts[key] = last
        return last

    def profile_last(self, mbs: int, stages: int, last: int) -> int:
        """The largest D <= `last` at which some pair of options may hold P stages in memory
        within the quotas (`kind-profiles`), 0 if none. A profile puts each stage whole on
        one option: n stages of the slow option, then P - n of the fast one, each holding
        at least one block and at most what `reach_sums` allows, which must add up to the
        model's blocks. Those reaches are taken where memory is most lenient for every D <=
        `last`, so an n they rule out is ruled out at every such D; the quotas give each n
        its largest D in closed form (the conditions of `run_lengths`, which only tighten
        as D grows). On 32 A100 + 96 V100 with GPT-Neo-2.7B, two stages of V100s at TP 1
        hold 10 + 15 of its 32 blocks, so no profile of them exists whatever the quota
        allows."""
        if last < 1:
            return last
        blocks = self.model.blocks
        flights = -(-(self.model.batch // mbs) // last)
        rank = self._option_ranks(mbs)
        best = 0
        tally = self.tally
        options = self.stage_options()
        for at, (room_bound, x, y) in enumerate(self._pairs_by_room()):
            if room_bound // stages <= best:
                break
            tally[REACH_PAIR] += 1
            if at % PAIRS_PER_CHECK == 0:
                self.check_limits()
            one, other = options[x], options[y]
            sizes = self.pair_sizes(one, other)
            swapped = self.pair_sizes(other, one)
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
                first_s, middle_s, _ = self.reach_sums(slow[0], mbs, flights)
                _, middle_f, last_f = self.reach_sums(fast[0], mbs, flights)
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
        """Each option's place in `option_speeds`' slowest-first order: the slower of two
        options takes a profile's first stages."""
        ranks = self._ranks.get(mbs)
        if ranks is None:
            ranks = self._ranks[mbs] = {o: i for i, o in enumerate(self.option_speeds(mbs)[1])}
        return ranks

    def _pairs_by_room(self) -> list[_RoomEntry]:
        """(the most D any P stages of the pair may have, times P: both options' devices
        within max_gpus (`pair_sizes`' last) over the smaller TP; the positions of the two
        options) for every pair of options, one with itself included, most first, so
        `profile_last` stops at the first that cannot raise its answer (and reads the
        pair's sizes only then). Sizes do not depend on the microbatch size; which option is
        the slower does (`_option_ranks`). Built row by row under the search's limits: the
        square of thousands of options is seconds of work."""
        if self._room_order is None:
            options = self.stage_options()
            capacity, kinds, total = self.capacity, self.model.kinds, self.total_devices
            pools = [self._option_pools(option) for option in options]
            rooms = [sum(capacity[p] for p in held) for held in pools]
            tps = [kinds[option[0]].tp for option in options]
            entries: list[_RoomEntry] = []
            count = len(options)
            for x in range(count):
                self.tally[ROOM_PAIR] += count - x
                self.check_limits()
                held, room, tp = pools[x], rooms[x], tps[x]
                for y in range(x, count):
                    if y == x:
                        both = room
                    elif held.isdisjoint(pools[y]):
                        both = room + rooms[y]
                    else:
                        both = sum(capacity[p] for p in held | pools[y])
                    entries.append((min(both, total) // min(tp, tps[y]), x, y))
            entries.sort(key=lambda entry: -entry[0])
            self._room_order = entries
        return self._room_order

    def _holds_stages(self, kind: int, mbs: int, stages: int, flights: int) -> bool:
        """Whether P stages of `kind` alone may hold the model (`reach_sums`), settled
        first by `_holds_share` where it can."""
        if self._holds_share(kind, mbs, stages, flights):
            return True
        if stages == 1:
            return False
        first, middle, last = self.reach_sums(kind, mbs, flights)
        return first[stages] + middle[stages - 2] + last >= self.model.blocks

    def _holds_share(self, kind: int, mbs: int, stages: int, flights: int) -> bool:
        """Whether `kind` holds ceil(L / P) blocks as every stage of P, where memory is most
        lenient (`reach_sums`): then any split of n stages on it holds its blocks. One
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
                held = self.cover.holds_whole(mbs, kind, lenient)
            else:
                share = -(-model.blocks // stages)
                most = (min(stages, flights), min(stages - 1, flights), 1)
                held = all(
                    self.cover.holds_share(
                        mbs, kind, at, 1 << (most[at].bit_length() - 1), lenient, share
                    )
                    for at in ((0, 2) if stages == 2 else (0, 1, 2))
                )
            self._shares_held[key] = held
        return held

    def reach_sums(self, kind: int, mbs: int, flights: int) -> tuple[list[int], list[int], int]:
        """What `profile_last` adds up of the most blocks `kind` holds per stage of P >= 2:
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
            reach = self.cover.memory_reach
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
