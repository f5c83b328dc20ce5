"""Classes of pools that price alike: why the planner's work and memory are bounded in the
number of zones rather than in its square.

Every term the planning model prices between two replicas (a send, a ring hop, the tied
embedding's reduction, an egress price) depends on their two pools only through each pool's
*signature* and the pair's *relation*. The signature is what the link facts can tell of a
pool: its zone where a `network.links` override or a measured profile link names that zone,
else its region; and its device, node size and NIC. The relation is one of: the same pool,
two pools of one zone, two zones. So a cache keyed by (signature, signature, relation) holds
one entry per class of pool pair, however many zones share a class.

A question over sets of kinds (the worst ring hop of a stage's kinds, the worst send
between two stages' kinds) can likewise drop zones: call a zone's *content* the pools it
holds in each set (their position in the zone, signature and TP degrees). Of zones with one
content, two stand for all (`PoolClasses.keep`): every pair of kinds of the sets maps to a
pair in the kept zones with the same two signatures, TP degrees and relation (a pair within
one zone to that zone's kept twin; a pair across two zones of different content to their
kept twins; a pair across two zones of one content to the two kept ones). Pair terms are
symmetric between zones no measured link names, and a named zone has a signature of its own,
so is always kept; hence every maximum or minimum over the pairs is unchanged, and each
single-kind term (compute, memory, optimizer) too, as every signature and TP degree stays.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from hetc.schema.spec import Pool, Zone

__all__ = ["SAME_POOL", "SAME_ZONE", "TWO_ZONES", "PoolClasses"]

SAME_POOL, SAME_ZONE, TWO_ZONES = 0, 1, 2
"""The relation of two pools."""

KEEP_CACHE = 1 << 14
"""Reductions remembered (`PoolClasses.keep`): the search asks the same few sets again and
again; a bounded cache keeps memory bounded when it asks many."""


class PoolClasses:
    """Signatures and zones of the spec's pools (in `PlanningModel.pools` order), and the
    reduction of sets of kinds to the zones that differ (module docstring)."""

    def __init__(
        self,
        pools: Sequence[tuple[Zone, Pool]],
        named: frozenset[str],
        kind_pool: Sequence[int],
        kind_tp: Sequence[int],
    ) -> None:
        signatures: dict[tuple[object, ...], int] = {}
        zones: dict[str, int] = {}
        held: dict[int, int] = {}
        self.signature: list[int] = []
        self.zone: list[int] = []
        self._position: list[int] = []
        for zone, pool in pools:
            where = ("zone", zone.name) if zone.name in named else ("region", zone.region)
            key = (where, pool.device, pool.gpus_per_node, pool.nic_bandwidth)
            self.signature.append(signatures.setdefault(key, len(signatures)))
            index = zones.setdefault(zone.name, len(zones))
            self._position.append(held.get(index, 0))
            held[index] = held.get(index, 0) + 1
            self.zone.append(index)
        self.classes = len(signatures)
        self._kind_pool = tuple(kind_pool)
        self._kind_tp = tuple(kind_tp)
        self.keep = lru_cache(maxsize=KEEP_CACHE)(self._keep)

    def relation(self, pool_a: int, pool_b: int) -> int:
        if pool_a == pool_b:
            return SAME_POOL
        return SAME_ZONE if self.zone[pool_a] == self.zone[pool_b] else TWO_ZONES

    def pair(self, pool_a: int, pool_b: int) -> tuple[int, int, int]:
        """(signature a, signature b, relation): what every pair term depends on."""
        return self.signature[pool_a], self.signature[pool_b], self.relation(pool_a, pool_b)

    def _keep(self, *sets: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """The sets with only the kinds of two zones per content kept (module docstring)."""
        content: dict[int, list[list[tuple[int, int, int]]]] = {}
        for j, kinds in enumerate(sets):
            for k in kinds:
                pool = self._kind_pool[k]
                zone = self.zone[pool]
                parts = content.setdefault(zone, [[] for _ in sets])
                parts[j].append((self._position[pool], self.signature[pool], self._kind_tp[k]))
        seen: dict[tuple[tuple[tuple[int, int, int], ...], ...], int] = {}
        kept: set[int] = set()
        for zone, parts in content.items():
            key = tuple(tuple(sorted(part)) for part in parts)
            if seen.get(key, 0) < 2:
                kept.add(zone)
            seen[key] = seen.get(key, 0) + 1
        if len(kept) == len(content):
            return sets
        return tuple(
            tuple(k for k in kinds if self.zone[self._kind_pool[k]] in kept) for kinds in sets
        )
