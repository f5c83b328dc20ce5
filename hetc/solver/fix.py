"""A fix: one constraint's suggested value, at the spec's own path, and what the diagnosis
proved about it; the resolution of each constraint family (whole nodes, whole devices, a
grid of 3 significant digits) and the edits of a spec that apply or remove a family.

Kept apart from the searches (`least`, `quota_fixes`) and the diagnosis that names the
binding constraint (`diagnosis`): all three speak this vocabulary, and the bench and the
tests check a fix with it without re-running a diagnosis.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from hetc.schema.spec import Spec
from hetc.solver.oracle import TOLERANCE, constrained

__all__ = [
    "CEILING_DEVICES",
    "DIGITS",
    "FAMILIES",
    "GRID",
    "Fix",
    "apply_fixes",
    "ceiling_nodes",
    "grid_above",
    "grid_below",
    "grid_index",
    "grid_value",
    "number",
    "one_step_less",
    "pool_at",
    "proven_least",
    "quotas",
    "removed",
    "round_down",
    "round_up",
    "unit_step",
    "with_nodes",
]

FAMILIES = ("max_gpus", "quota", "budget", "throughput floor")
"""The numeric constraint families, in the order a combination's members are fixed."""

CEILING_DEVICES = 1024
"""A pool's quota is searched up to this many devices (or its own quota, if larger): the
"lifted" quota. A fix needing more of one pool is reported as not found."""

DIGITS = 3
"""Significant digits of a suggested budget or floor."""


def ceiling_nodes(spec: Spec, zone: int, pool: int) -> int:
    """The lifted quota of one pool, in whole nodes."""
    p = spec.zones[zone].pools[pool]
    return max(p.max_nodes, CEILING_DEVICES // p.gpus_per_node)


@dataclass(frozen=True, kw_only=True, slots=True)
class Fix:
    """One constraint's suggested value, at the spec's own path and in its units."""

    family: str
    """One of FAMILIES."""
    path: str
    """e.g. `constraints.max_gpus` or `zones[0].pools[1].quota`."""
    value: float
    """A value at which a plan was found (verified): the least such value the searches
    found."""
    what: str
    """What the value is, in words (names the pool of a quota)."""
    infeasible_at: float | None = None
    """The nearest less permissive value proven infeasible: one resolution step from
    `value` (`unit_step`) when `value` is proven least; further where a probe stopped at
    its limit of work, so that the least value lies in between (the range the diagnosis
    proved, and what its message states). None where nothing less is proven infeasible."""

    def line(self) -> str:
        return f"{self.path}: {number(self.value)}"


def number(value: float) -> str:
    """A suggested value as the message and the fix line print it."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.{DIGITS}g}"


# -- editing a spec ----------------------------------------------------------------------


def quotas(spec: Spec, nodes: Callable[[int, int, int], int]) -> Spec:
    """`spec` with pool (z, p)'s quota set to `nodes(z, p, current nodes)` whole nodes."""
    zones = tuple(
        replace(
            zone,
            pools=tuple(
                replace(pool, quota=nodes(z, p, pool.max_nodes) * pool.gpus_per_node)
                for p, pool in enumerate(zone.pools)
            ),
        )
        for z, zone in enumerate(spec.zones)
    )
    return replace(spec, zones=zones)


def with_nodes(spec: Spec, zone: int, pool: int, nodes: int) -> Spec:
    """`spec` with one pool's quota set to `nodes` whole nodes."""
    return quotas(spec, lambda z, p, n: nodes if (z, p) == (zone, pool) else n)


def pool_at(spec: Spec, path: str) -> tuple[int, int]:
    """(zone, pool) of a quota fix's path."""
    z, p = path.removeprefix("zones[").removesuffix("].quota").split("].pools[")
    return int(z), int(p)


def apply_fixes(spec: Spec, fixes: Sequence[Fix]) -> Spec:
    """`spec` with each fix's value at its path."""
    for fix in fixes:
        if fix.family == "quota":
            z, p = pool_at(spec, fix.path)
            nodes = int(fix.value) // spec.zones[z].pools[p].gpus_per_node
            spec = with_nodes(spec, z, p, nodes)
        elif fix.family == "max_gpus":
            spec = constrained(spec, max_gpus=int(fix.value))
        elif fix.family == "budget":
            spec = constrained(spec, max_cost_per_iteration=fix.value)
        else:
            spec = constrained(spec, min_throughput=fix.value)
    return spec


def removed(spec: Spec, families: Sequence[str]) -> Spec:
    """`spec` without the given constraint families (quotas: lifted to their ceiling)."""
    if "quota" in families:
        spec = quotas(spec, lambda z, p, n: max(n, ceiling_nodes(spec, z, p)))
    if "max_gpus" in families:
        spec = constrained(spec, max_gpus=None)
    if "budget" in families:
        spec = constrained(spec, max_cost_per_iteration=None)
    if "throughput floor" in families:
        spec = constrained(spec, min_throughput=None)
    return spec


# -- the resolution ----------------------------------------------------------------------


def one_step_less(spec: Spec, fix: Fix) -> Fix | None:
    """The fix at `Fix.infeasible_at`, the nearest less permissive value the diagnosis
    proved infeasible (None where it proved none)."""
    if fix.infeasible_at is None:
        return None
    return replace(fix, value=fix.infeasible_at)


def proven_least(spec: Spec, fix: Fix) -> bool:
    """Whether `fix.value` is proven least at the family's own resolution: a value at most
    one `unit_step` less permissive is proven infeasible."""
    step = unit_step(spec, fix)
    if step is None or fix.infeasible_at is None:
        return False
    if fix.family == "throughput floor":
        return fix.infeasible_at <= step.value
    return fix.infeasible_at >= step.value


def unit_step(spec: Spec, fix: Fix) -> Fix | None:
    """The fix one unit of its family's resolution less permissive (None where there is no
    such value): a node fewer, a device fewer, a budget one step of the grid of DIGITS
    significant digits lower, a floor one step higher."""
    if fix.family == "quota":
        z, p = pool_at(spec, fix.path)
        gpn = spec.zones[z].pools[p].gpus_per_node
        less = int(fix.value) - gpn
        return None if less < 0 else replace(fix, value=less)
    if fix.family == "max_gpus":
        return None if fix.value <= 1 else replace(fix, value=fix.value - 1)
    if fix.value <= 0:
        return None
    return replace(
        fix, value=grid_value(grid_index(fix.value) + (-1 if fix.family == "budget" else 1))
    )


def round_up(value: float) -> float:
    """The least number of DIGITS significant digits at or above `value`."""
    exponent = math.floor(math.log10(value)) - (DIGITS - 1)
    digits = math.ceil(value / 10.0**exponent - 1e-9)
    out = float(f"{digits}e{exponent}")
    return out if out >= value else float(f"{digits + 1}e{exponent}")


def round_down(value: float) -> float:
    """The largest number of DIGITS significant digits at or below `value`."""
    exponent = math.floor(math.log10(value)) - (DIGITS - 1)
    digits = math.floor(value / 10.0**exponent + 1e-9)
    out = float(f"{digits}e{exponent}")
    return out if out <= value else float(f"{digits - 1}e{exponent}")


GRID = int(9 * 10 ** (DIGITS - 1))
"""Numbers of DIGITS significant digits per decade: the grid of budgets and floors."""


def grid_index(value: float) -> int:
    """The index of `value` rounded down to DIGITS significant digits on the grid."""
    exponent: int = math.floor(math.log10(value)) - (DIGITS - 1)
    digits = int(round_down(value) * 10.0 ** (-exponent) + 0.5)
    return exponent * GRID + digits - GRID // 9


def grid_value(index: int) -> float:
    exponent, offset = divmod(index, GRID)
    return float(f"{offset + GRID // 9}e{exponent}")


def grid_below(bound: float) -> float | None:
    """The largest grid value under `bound` (with TOLERANCE), None when `bound` is not
    positive and finite."""
    if not 0 < bound < math.inf:
        return None
    bound *= 1 - TOLERANCE
    index = grid_index(bound)
    return grid_value(index if grid_value(index) < bound else index - 1)


def grid_above(bound: float) -> float | None:
    """The least grid value over `bound` (with TOLERANCE), None when `bound` is not
    positive and finite."""
    if not 0 < bound < math.inf:
        return None
    bound *= 1 + TOLERANCE
    index = grid_index(bound)
    return grid_value(index if grid_value(index) > bound else index + 1)
