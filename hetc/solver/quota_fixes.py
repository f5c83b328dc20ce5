"""The least quota that makes a spec feasible: per pool, that pool's least quota in whole
nodes with every other pool as it is (one alternative per pool that suffices alone); where
no pool alone does, the least number of whole nodes added to every pool.

Feasibility is monotone in a pool's quota (more nodes only add plans) and in the nodes added
to every pool, so each is a `least.least_feasible` search: a plan found at some quota is a
plan of every quota down to the nodes it rents (its `needs`), which brackets the answer
from above at once; the necessary conditions (the devices the model's state needs, the
throughput the devices can reach) bracket it from below without a search.
"""

from __future__ import annotations

from hetc.schema.spec import Spec
from hetc.solver.fix import Fix, ceiling_nodes, quotas, removed, with_nodes
from hetc.solver.least import least_feasible
from hetc.solver.oracle import Oracle
from hetc.solver.search import Candidate
from hetc.units import plural

__all__ = ["quota_fixes"]


def quota_fixes(oracle: Oracle, spec: Spec) -> list[tuple[Fix, ...]]:
    """Per pool, the least quota of that pool alone that makes `spec` feasible (one
    alternative each); if no pool alone does, the least k nodes added to every pool (one
    alternative of several fixes). Empty when even the lifted quotas have no plan found, or
    when no quota can be lifted (every pool holds its ceiling already)."""
    lifted = removed(spec, ["quota"])
    if lifted == spec or not oracle.feasible(lifted):
        return []
    out = [fix for fix in _one_pool_fixes(oracle, spec)]
    if out:
        return [(fix,) for fix in out]
    added = _nodes_added(oracle, spec)
    return [added] if added else []


def _slots(spec: Spec) -> list[tuple[int, int]]:
    """(zone, pool) of every pool, in the order of the planning model's pools."""
    return [(z, p) for z, zone in enumerate(spec.zones) for p in range(len(zone.pools))]


def _one_pool_fixes(oracle: Oracle, spec: Spec) -> list[Fix]:
    out = []
    proven = oracle.proven_infeasible(spec)
    for slot, (z, p) in enumerate(_slots(spec)):
        zone, pool = spec.zones[z], spec.zones[z].pools[p]
        gpn = pool.gpus_per_node

        def at(n: int, z: int = z, p: int = p) -> Spec:
            return with_nodes(spec, z, p, n)

        def needs(c: Candidate, slot: int = slot) -> int:
            return c.estimate.nodes[slot]

        least = least_feasible(
            oracle,
            at,
            low=pool.max_nodes,
            low_proven=proven,
            cap=ceiling_nodes(spec, z, p),
            needs=needs,
        )
        if least is None:
            continue
        nodes = least.value
        out.append(
            Fix(
                family="quota",
                path=f"zones[{z}].pools[{p}].quota",
                value=nodes * gpn,
                what=f"the quota of {pool.name}@{zone.name} ({plural(nodes, 'node')} of {gpn})",
                infeasible_at=None if least.infeasible_at is None else least.infeasible_at * gpn,
            )
        )
    return out


def _nodes_added(oracle: Oracle, spec: Spec) -> tuple[Fix, ...]:
    """The least k whole nodes added to every pool (each capped at its ceiling) that make
    `spec` feasible, as one fix per pool that grows; empty when none was found."""
    have = [spec.zones[z].pools[p].max_nodes for z, p in _slots(spec)]
    reach = max(ceiling_nodes(spec, z, p) - n for (z, p), n in zip(_slots(spec), have, strict=True))
    if reach <= 0:
        return ()

    def added(k: int) -> Spec:
        return quotas(spec, lambda z, p, n: min(n + k, max(n, ceiling_nodes(spec, z, p))))

    def needs(c: Candidate) -> int:
        return max(0, *(used - n for used, n in zip(c.estimate.nodes, have, strict=True)))

    least = least_feasible(
        oracle,
        added,
        low=0,
        low_proven=oracle.proven_infeasible(spec),
        cap=reach,
        needs=needs,
    )
    if least is None:
        return ()
    grown = added(least.value)
    less = None if least.infeasible_at is None else added(least.infeasible_at)
    return tuple(
        Fix(
            family="quota",
            path=f"zones[{z}].pools[{p}].quota",
            value=pool.quota,
            what=f"the quota of {pool.name}@{zone.name} ({plural(least.value, 'node')} more)",
            infeasible_at=None if less is None else less.zones[z].pools[p].quota,
        )
        for z, zone in enumerate(grown.zones)
        for p, pool in enumerate(zone.pools)
        if pool.quota != spec.zones[z].pools[p].quota
    )
