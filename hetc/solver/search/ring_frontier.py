"""Which kind pairs can hold the least whole-model ring at some D (`frontier`).

A ring between two kinds depends on them only through their link (with its curve and NIC),
the flows on it (the larger TP) and the bytes per rank (the smaller TP). On a flat-curve
link a ring over D ranks takes 2 (D - 1) (latency + bytes / (D x rate)), so of two such
pairs, one with no more latency and no more bytes per rate is never slower, at any D: the
least ring over a set of pairs is the least over those no other beats. A pair on a measured
message-size curve is always kept.
"""

from __future__ import annotations

from collections.abc import Sequence

from hetc.costmodel.network import FLAT, effective_bandwidth
from hetc.costmodel.planning import PlanningModel


def flat_terms(model: PlanningModel, a: int, b: int) -> tuple[float, float] | None:
    """(latency, whole-model bytes per rank / rate) of the ring between kinds a and b, or
    None where their link has a measured message-size curve."""
    ka, kb = model.kinds[a], model.kinds[b]
    flows = max(ka.tp, kb.tp)
    link, curve, nic = model.measured_link(ka.pool, kb.pool, flows)
    if curve is not FLAT:
        return None
    rate = effective_bandwidth(link, 1.0, flows_on_nic=flows, nic_bandwidth=nic)
    whole = (0, model.blocks, True, True)
    return link.latency, model.gradient_bytes(whole, min(ka.tp, kb.tp)) / rate


def beaten(terms: Sequence[tuple[float, float] | None], i: int, allowed: Sequence[int]) -> bool:
    """Whether pair i's ring is never below that of some pair j in `allowed` (j != i) at any
    D: both flat, j's latency and bytes per rate no higher; of equal pairs, the first."""
    mine = terms[i]
    if mine is None:
        return False
    for j in allowed:
        other = terms[j]
        if j == i or other is None or other[0] > mine[0] or other[1] > mine[1]:
            continue
        if other != mine or j < i:
            return True
    return False


def frontier(model: PlanningModel, pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The pairs of kinds (a, b) no other of `pairs` beats at every D (`beaten`)."""
    terms = [flat_terms(model, a, b) for a, b in pairs]
    every = range(len(pairs))
    return [pair for i, pair in enumerate(pairs) if not beaten(terms, i, every)]
