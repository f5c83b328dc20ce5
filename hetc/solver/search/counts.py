"""The replica-count programme at a leaf of the exact search. Time depends on the kind sets
alone (the module docstring of `planning`), money on node counts: at a leaf, an exact
dynamic programme over the stages that mix kinds finds the counts with the least rental
rate inside every quota and max_gpus (a greedy beyond `EXACT_COUNT_SPLITS` splits).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from hetc.costmodel.planning import Assignment
from hetc.solver.search.bounds import Bounds

EXACT_COUNT_SPLITS = 20_000
"""Most count splits the exact leaf programme enumerates; only large mixed stages exceed it."""


class Counts(Bounds):
    """The least-rate replica counts of a leaf's kind sets."""

    def cheapest_counts(self, sets: Sequence[tuple[int, ...]], dp: int) -> Assignment | None:
        """Replica counts for the kind sets with the least rental rate inside every quota and
        max_gpus, or None if none fit. Exact (`_counts_by_dp`) while the splits of the mixed
        stages number at most EXACT_COUNT_SPLITS; beyond, `counts_greedy`, which first sets
        aside one replica per kind of every stage, then fills already-rented devices first,
        then the cheapest pool per device."""
        splits = 1
        for combo in sets:
            splits *= math.comb(dp - 1, len(combo) - 1)
            if splits > EXACT_COUNT_SPLITS:
                self.greedy_counts += 1
                return self.counts_greedy(sets, dp)
        return self._counts_by_dp(sets, dp)

    def counts_greedy(self, sets: Sequence[tuple[int, ...]], dp: int) -> Assignment | None:
        """Replica counts for the kind sets inside every quota, or None where this greedy finds
        none: one replica per kind of each stage first, then each further replica on the kind
        that rents no new node (a rented node's spare devices), else the cheapest node. Not
        least-rate in general (`cheapest_counts` uses it only where the exact programme would
        enumerate too many splits); every count it returns fits the quotas."""
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


def _splits(total: int, parts: int) -> Iterable[tuple[int, ...]]:
    """Every way to write `total` as `parts` positive integers, in lexicographic order."""
    if parts == 1:
        yield (total,)
        return
    for first in range(1, total - parts + 2):
        for rest in _splits(total - first, parts - 1):
            yield (first, *rest)
