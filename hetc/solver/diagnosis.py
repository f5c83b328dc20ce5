"""Why no plan satisfies a spec, and the least change of each constraint that makes one.

The diagnosis is built on one oracle, `Oracle.status`: does the planner's search (with the
same profiles and approximations `hetc plan` uses) find a plan inside the runtime's
capability matrix, and if not, is that proven? Every number it suggests is the end of a
search over that oracle, and every suggestion is re-solved before it is printed. Searches
are time-limited: each fix says how far it is proven least (`Fix.infeasible_at`, the nearest
less permissive value proven infeasible), and the message gives that range where it is wider
than the family's resolution, rather than guessing.

Constraint families and what "least change" means for each (the resolution in brackets):

- `quota` of one pool [whole nodes: gpus_per_node devices]: the least quota of that pool,
  every other pool as it is. Feasibility is monotone in a pool's quota (more nodes only add
  plans), so bisection between the current quota and the least quota known to work finds it.
  Quotas are searched up to `ceiling_nodes` per pool (the "lifted" quota). When no single
  pool suffices: the least number k of whole nodes added to every pool (each pool capped at
  its ceiling), again monotone in k.
- `max_gpus` [whole devices]: the least max_gpus; monotone (a larger limit only adds plans).
- budget, `constraints.max_cost_per_iteration` [3 significant digits, rounded up]: the least
  cost of any plan under the other constraints, read off the min-cost search (feasibility
  is monotone in the budget: a plan under a budget is under every larger one); budgets under
  that search's lower bound are proven infeasible.
- throughput floor, `constraints.min_throughput` [3 significant digits, rounded down]: the
  most iterations/s of any plan under the other constraints, from the max-throughput search
  (feasibility is decreasing in the floor); floors over the inverse of its lower bound on
  the time are proven infeasible.
- memory: no plan exists even with every quota lifted and max_gpus, the budget and the floor
  removed; the fix is activation checkpointing where that alone makes the spec feasible,
  else a device with more memory.

Binding: a family whose removal alone (quotas: lifted) makes the spec feasible; every such
family is named, each with its own least change, any one of which suffices. When none alone
does, the smallest sets of families whose joint removal does are named (a combination); for
each, its members get their least change in the order max_gpus, quota, budget, floor, each
with the earlier members at their suggested value and the later ones removed, so that the
changes together make the spec feasible and one step less on any member does not (by the
monotonicity above: a later member's constraint only removes plans); then each member but
the quotas is minimised again with the others at their change (`_combination`).

The monotonicity holds for the exact search; the default `kind-profiles` approximation of
large clusters (`planner.default_approximations`) narrows the space above a device count, so
every suggestion is verified by the same planner, and tests/test_solver_diagnosis.py checks
feasibility at the suggestion and proven infeasibility one step below it on 300 generated
specs (bench/diagnosis.py's `small_family`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import combinations
from typing import Any

from hetc.schema.spec import Spec
from hetc.solver.budget import Budget
from hetc.solver.feasibility import necessary_conditions
from hetc.solver.oracle import DIAGNOSIS_WORK, TOLERANCE, Oracle, constrained
from hetc.solver.planner import Proposal
from hetc.units import format_duration, format_usd, plural

__all__ = [
    "CEILING_DEVICES",
    "FAMILIES",
    "Diagnosis",
    "Fix",
    "Oracle",
    "apply_fixes",
    "ceiling_nodes",
    "diagnose",
    "one_step_less",
    "proven_least",
    "removed",
    "unit_step",
    "unknown",
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
    what: str
    """What the value is, in words (names the pool of a quota)."""
    infeasible_at: float | None = None
    """The nearest less permissive value proven infeasible: one resolution step from
    `value` (`unit_step`) when `value` is proven least; further where a probe or an
    optimisation stopped at its time limit, so that the least value lies in between (the
    resolution the diagnosis actually has). None where nothing less is proven infeasible."""

    def line(self) -> str:
        return f"{self.path}: {_number(self.value)}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Diagnosis:
    """Why no plan satisfies the spec, and the least changes that make one, verified."""

    binding: str
    """`budget`, `throughput floor`, `max_gpus`, `quota`, `memory`, several joined by ` or `
    (each alone binds), or by ` and ` (only together); `undetermined` when no plan was found
    but the searches stopped before proving that none exists."""
    message: str
    change: str
    """The change in the spec's own terms (e.g. `constraints.max_cost_per_iteration: 1.45`);
    alternatives are joined by `; or `."""
    plan: Proposal | None
    """The plan the spec changed by the first alternative gets (None when none was found)."""
    alternatives: tuple[tuple[Fix, ...], ...] = ()
    """Each entry a set of fixes that together make the spec feasible; any one entry does."""
    proven: bool = True
    """Whether every fix is proven least at its family's resolution (`proven_least`); where
    not, each fix is verified and `Fix.infeasible_at` says how far it is proven."""


def _number(value: float) -> str:
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.{DIGITS}g}"


# -- editing a spec ----------------------------------------------------------------------


def _quotas(spec: Spec, nodes: Callable[[int, int, int], int]) -> Spec:
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


def _with_nodes(spec: Spec, zone: int, pool: int, nodes: int) -> Spec:
    """`spec` with one pool's quota set to `nodes` whole nodes."""
    return _quotas(spec, lambda z, p, n: nodes if (z, p) == (zone, pool) else n)


def _pool_at(spec: Spec, path: str) -> tuple[int, int]:
    z, p = path.removeprefix("zones[").removesuffix("].quota").split("].pools[")
    return int(z), int(p)


def apply_fixes(spec: Spec, fixes: Sequence[Fix]) -> Spec:
    """`spec` with each fix's value at its path."""
    for fix in fixes:
        if fix.family == "quota":
            z, p = _pool_at(spec, fix.path)
            nodes = int(fix.value) // spec.zones[z].pools[p].gpus_per_node
            spec = _with_nodes(spec, z, p, nodes)
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
        spec = _quotas(spec, lambda z, p, n: max(n, ceiling_nodes(spec, z, p)))
    if "max_gpus" in families:
        spec = constrained(spec, max_gpus=None)
    if "budget" in families:
        spec = constrained(spec, max_cost_per_iteration=None)
    if "throughput floor" in families:
        spec = constrained(spec, min_throughput=None)
    return spec


def one_step_less(spec: Spec, fix: Fix) -> Fix | None:
    """The fix one resolution step less permissive: `Fix.infeasible_at`, the nearest value
    the diagnosis proved infeasible (None where it proved none)."""
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
        z, p = _pool_at(spec, fix.path)
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


# -- the least change of one family ------------------------------------------------------


def _least_true(
    oracle: Oracle, at: Callable[[int], Spec], low: int, cap: int
) -> tuple[int, int | None] | None:
    """(the least n in (low, cap] at which `at(n)` is feasible, the largest n below it proven
    infeasible) for a monotone feasibility, false at `low`; None when false at `cap`.
    Galloping (low + 1, low + 2, low + 4, ...), then bisection: the searches near the answer
    are the cheap ones, and the cap is solved only when nothing below it is feasible. A
    probe stopped at the time limit counts as infeasible but proves nothing, so the second
    number says how far the answer is proven (None where not even `low` is)."""
    step, below = 1, low
    proven = low if oracle.proven_infeasible(at(low)) else None

    def probe(n: int) -> bool:
        nonlocal proven
        found, sure = oracle.status(at(n))
        if found is None and sure:
            proven = n if proven is None else max(proven, n)
        return found is not None

    while True:
        high = min(low + step, cap)
        if probe(high):
            break
        if high >= cap:
            return None
        below, step = high, step * 2
    while high - below > 1:
        mid = (below + high) // 2
        if probe(mid):
            high = mid
        else:
            below = mid
    return high, proven


def _quota_fixes(oracle: Oracle, spec: Spec) -> list[tuple[Fix, ...]]:
    """Per pool, the least quota of that pool alone that makes `spec` feasible (one
    alternative each); if no pool alone does, the least k nodes added to every pool."""
    out: list[tuple[Fix, ...]] = []
    if not oracle.feasible(removed(spec, ["quota"])):
        return out
    slots = [(z, p) for z, zone in enumerate(spec.zones) for p in range(len(zone.pools))]
    for z, p in slots:
        zone, pool = spec.zones[z], spec.zones[z].pools[p]
        have, gpn = pool.max_nodes, pool.gpus_per_node
        found = _least_true(
            oracle,
            lambda n, z=z, p=p: _with_nodes(spec, z, p, n),  # type: ignore[misc]
            have,
            ceiling_nodes(spec, z, p),
        )
        if found is None:
            continue
        nodes, proven = found
        what = f"the quota of {pool.name}@{zone.name} ({plural(nodes, 'node')} of {gpn})"
        out.append(
            (
                Fix(
                    family="quota",
                    path=f"zones[{z}].pools[{p}].quota",
                    value=nodes * gpn,
                    what=what,
                    infeasible_at=None if proven is None else proven * gpn,
                ),
            )
        )
    if out:
        return out
    reach = max(
        ceiling_nodes(spec, z, p) - pool.max_nodes
        for z, zone in enumerate(spec.zones)
        for p, pool in enumerate(zone.pools)
    )

    def added(k: int) -> Spec:
        return _quotas(spec, lambda z, p, n: min(n + k, max(n, ceiling_nodes(spec, z, p))))

    found = _least_true(oracle, added, 0, reach) if reach > 0 else None
    if found is None:
        return []
    k, proven = found
    grown, less = added(k), None if proven is None else added(proven)
    fixes = tuple(
        Fix(
            family="quota",
            path=f"zones[{z}].pools[{p}].quota",
            value=pool.quota,
            what=f"the quota of {pool.name}@{zone.name} ({plural(k, 'node')} more)",
            infeasible_at=None if less is None else less.zones[z].pools[p].quota,
        )
        for z, zone in enumerate(grown.zones)
        for p, pool in enumerate(zone.pools)
        if pool.quota != spec.zones[z].pools[p].quota
    )
    return [fixes]


def _max_gpus_fix(oracle: Oracle, spec: Spec) -> Fix | None:
    lifted = constrained(spec, max_gpus=None)
    found = oracle.witness(lifted)
    if found is None:
        return None
    limit = spec.constraints.max_gpus or 0
    cap = max(limit + 1, found.estimate.devices)
    least = _least_true(oracle, lambda n: constrained(spec, max_gpus=n), limit, cap)
    if least is None:
        return None
    return Fix(
        family="max_gpus",
        path="constraints.max_gpus",
        value=least[0],
        what="max_gpus",
        infeasible_at=least[1],
    )


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


def _grid_below(bound: float) -> float | None:
    """The largest grid value under `bound` (with TOLERANCE), None when `bound` is not
    positive and finite."""
    if not 0 < bound < math.inf:
        return None
    bound *= 1 - TOLERANCE
    index = grid_index(bound)
    return grid_value(index if grid_value(index) < bound else index - 1)


def _grid_above(bound: float) -> float | None:
    """The least grid value over `bound` (with TOLERANCE), None when `bound` is not
    positive and finite."""
    if not 0 < bound < math.inf:
        return None
    bound *= 1 + TOLERANCE
    index = grid_index(bound)
    return grid_value(index if grid_value(index) > bound else index + 1)


def _proven_at(oracle: Oracle, spec: Spec, family: str) -> float | None:
    """`spec`'s own budget or floor where `spec` is proven infeasible, else None."""
    c = spec.constraints
    value = c.max_cost_per_iteration if family == "budget" else c.min_throughput
    return value if value is not None and oracle.proven_infeasible(spec) else None


def _nearest(
    values: Sequence[float | None], pick: Callable[[Sequence[float]], float]
) -> float | None:
    """`pick` (max for budgets, min for floors) of the values that are not None."""
    known = [v for v in values if v is not None]
    return pick(known) if known else None


def _budget_fix(oracle: Oracle, spec: Spec) -> Fix | None:
    """The least cost of a plan under the other constraints (the min-cost search), rounded up
    to the grid; if the verification fails there (the planning model's cost and the search's
    budget test differ by a rounding hair), the next grid values up. Budgets under the
    search's lower bound are proven infeasible: that is the resolution (`infeasible_at`),
    one grid step where the search completed."""
    cheapest = oracle.optimum(
        replace(constrained(spec, max_cost_per_iteration=None), objective="min_cost")
    )
    if cheapest.candidate is None or cheapest.candidate.estimate.cost <= 0:
        return None
    index = grid_index(round_up(cheapest.candidate.estimate.cost))
    for step in range(DIGITS):
        value = grid_value(index + step)
        if oracle.feasible(constrained(spec, max_cost_per_iteration=value)):
            return Fix(
                family="budget",
                path="constraints.max_cost_per_iteration",
                value=value,
                what="the budget (USD per iteration)",
                infeasible_at=_nearest(
                    [_grid_below(cheapest.lower_bound), _proven_at(oracle, spec, "budget")], max
                ),
            )
    return None


def _floor_fix(oracle: Oracle, spec: Spec) -> Fix | None:
    """The most iterations/s of a plan under the other constraints (the max-throughput
    search), rounded down to the grid; verified as the budget is. Floors over the inverse
    of the search's lower bound on the time are proven infeasible (`infeasible_at`)."""
    fastest = oracle.optimum(
        replace(constrained(spec, min_throughput=None), objective="max_throughput")
    )
    if fastest.candidate is None:
        return None
    index = grid_index(1.0 / fastest.candidate.estimate.iteration_time)
    bound = fastest.lower_bound
    for step in range(DIGITS):
        value = grid_value(index - step)
        if oracle.feasible(constrained(spec, min_throughput=value)):
            return Fix(
                family="throughput floor",
                path="constraints.min_throughput",
                value=value,
                what="the throughput floor (iterations/s)",
                infeasible_at=_nearest(
                    [
                        _grid_above(1.0 / bound) if bound > 0 else None,
                        _proven_at(oracle, spec, "throughput floor"),
                    ],
                    min,
                ),
            )
    return None


def family_fixes(oracle: Oracle, spec: Spec, family: str) -> list[tuple[Fix, ...]]:
    """The least change of one family, the others as in `spec`: alternatives (several only
    for quotas, one per pool that suffices alone), empty when no value suffices."""
    if family == "quota":
        return _quota_fixes(oracle, spec)
    one = {"max_gpus": _max_gpus_fix, "budget": _budget_fix, "throughput floor": _floor_fix}
    fix = one[family](oracle, spec)
    return [] if fix is None else [(fix,)]


# -- the diagnosis -----------------------------------------------------------------------


def present(spec: Spec) -> list[str]:
    """The families `spec` constrains (quotas always)."""
    c = spec.constraints
    given = {
        "max_gpus": c.max_gpus is not None,
        "quota": True,
        "budget": c.max_cost_per_iteration is not None,
        "throughput floor": c.min_throughput is not None,
    }
    return [f for f in FAMILIES if given[f]]


def _combination(oracle: Oracle, spec: Spec, members: Sequence[str]) -> tuple[Fix, ...] | None:
    """Members' least changes in FAMILIES order, each with the earlier members fixed and the
    later ones removed; then each member but the quotas again, with every other member at
    its change. That pass matters where the first one solved with the quotas lifted: above a
    device count the search approximates (`planner.default_approximations`), so the least
    max_gpus with lifted quotas can exceed the least with the quota the combination names.
    It only lowers a member, and lowering one only removes plans, so every other member
    stays least (one step less on it was infeasible with this member higher)."""
    fixes: list[Fix] = []
    current = spec
    for i, family in enumerate(members):
        options = family_fixes(oracle, removed(current, members[i + 1 :]), family)
        if not options:
            return None
        fixes.extend(options[0])
        current = apply_fixes(current, options[0])
    for family in members:
        if family == "quota":
            continue
        others = [f for f in fixes if f.family != family]
        options = family_fixes(oracle, apply_fixes(spec, others), family)
        if options:
            fixes = [*others, *options[0]]
    order = {f: i for i, f in enumerate(FAMILIES)}
    return tuple(sorted(fixes, key=lambda f: order[f.family]))


def diagnose(spec: Spec, **kwargs: Any) -> Diagnosis:
    """Name the binding constraint(s) of an infeasible spec and the least change of each
    that makes it feasible (see the module docstring); raises ValueError on a feasible one.
    `kwargs` are `plan_spec`'s profiles, overhead, approximations and measured_points, and
    `Oracle`'s work_limit (per search) and budget (of all the searches: DIAGNOSIS_WORK units
    by default; None with work_limit None makes the diagnosis exact, however long it takes).
    When a necessary condition (`feasibility`) already fails, the message ends with it:
    why no plan exists, proven before any search, and the bound on the change it gives."""
    oracle = Oracle(**{"budget": Budget(work=DIAGNOSIS_WORK), **kwargs})
    if oracle.feasible(spec):
        raise ValueError("the spec is feasible: there is nothing to diagnose")
    diagnosis = _diagnose(oracle, spec)
    proof = necessary_conditions(oracle.model(spec))
    if proof is None:
        return diagnosis
    message = f"{diagnosis.message}. Before any search: {proof.reason} ({proof.change})"
    return replace(diagnosis, message=message)


def _diagnose(oracle: Oracle, spec: Spec) -> Diagnosis:
    families = present(spec)
    alternatives: list[tuple[Fix, ...]] = []
    binding: list[str] = []
    for family in families:
        found = family_fixes(oracle, spec, family)
        if found:
            binding.append(family)
            alternatives.extend(found)
    alone = bool(alternatives)
    for size in range(2, len(families) + 1):
        if alternatives:
            break
        for members in combinations(families, size):
            if not oracle.feasible(removed(spec, members)):
                continue
            fixes = _combination(oracle, spec, members)
            if fixes is not None:
                binding.append(" and ".join(members))
                alternatives.append(fixes)
    if not alternatives:
        if not oracle.proven_infeasible(removed(spec, families)):
            return _undetermined(oracle, spec)
        return _memory(oracle, spec)
    plan = oracle.proposal(apply_fixes(spec, alternatives[0]))
    message = _message(spec, alone, alternatives, plan)
    unsure = [f for f in families if f not in binding and unknown(oracle, removed(spec, [f]))]
    if unsure:
        message += (
            f"; whether {' or '.join(unsure)} binds alone too is not known: its search stopped"
            " at its limit of work before finding a plan or proving there is none"
        )
    proven = not unsure and all(proven_least(spec, f) for fixes in alternatives for f in fixes)
    if not proven:
        message += (
            f" ({plural(oracle.stopped, 'search', 'searches')} stopped at their limit of"
            " work: each change is verified; where a range is given, the least value lies"
            " in it)"
        )
    return Diagnosis(
        binding=" or ".join(binding),
        message=message,
        proven=proven,
        change="; or ".join(", ".join(f.line() for f in fixes) for fixes in alternatives),
        plan=plan,
        alternatives=tuple(alternatives),
    )


def unknown(oracle: Oracle, spec: Spec) -> bool:
    """Whether the oracle neither found a plan of `spec` nor proved that it has none (its
    searches stopped at their limit): then nothing may be said either way."""
    return not oracle.feasible(spec) and not oracle.proven_infeasible(spec)


def _undetermined(oracle: Oracle, spec: Spec) -> Diagnosis:
    """No family's removal gave a plan, and even with all of them removed the searches
    stopped before proving that no plan exists: naming memory (or anything) would be a guess."""
    return Diagnosis(
        binding="undetermined",
        message=(
            "no plan was found, and with every constraint removed and every quota lifted the"
            f" {plural(oracle.stopped, 'search', 'searches')} stopped at their limit of work"
            " before finding one or proving that none exists, so which constraint binds is"
            " not known"
        ),
        change="raise --work-limit, or plan with --exact to search to the end",
        plan=None,
        proven=False,
    )


def _memory(oracle: Oracle, spec: Spec) -> Diagnosis:
    training = spec.training
    if not training.activation_checkpointing:
        checkpointed = replace(spec, training=replace(training, activation_checkpointing=True))
        if oracle.feasible(checkpointed):
            plan = oracle.proposal(checkpointed)
            return Diagnosis(
                binding="memory",
                message="no layout fits the devices' memory within the spec's quotas and"
                " constraints; with activation checkpointing one does"
                + (f": {describe(plan)}" if plan else ""),
                change="training.activation_checkpointing: true",
                plan=plan,
            )
    return Diagnosis(
        binding="memory",
        message=(
            "no layout fits any device's memory, even with every pool's quota lifted to"
            f" {CEILING_DEVICES} devices and max_gpus, the budget and the floor removed: the"
            " model (with its optimizer state and activations) needs devices with more"
            " memory, or activation_checkpointing, or a smaller microbatch or model"
        ),
        change="a device with more memory"
        + (
            ""
            if training.activation_checkpointing
            else " (or training.activation_checkpointing: true)"
        ),
        plan=None,
    )


def describe(proposal: Proposal) -> str:
    """A plan in one phrase: stages, pipelines, microbatch, devices, time and cost."""
    plan, e = proposal.plan, proposal.candidate.estimate
    devices: dict[str, int] = {}
    for stage in plan.stages:
        for r in stage.replicas:
            devices[r.device] = devices.get(r.device, 0) + r.tp
    used = ", ".join(f"{n} x {d}" for d, n in sorted(devices.items()))
    return (
        f"{plural(len(plan.stages), 'stage')}, {plural(len(plan.pipelines), 'pipeline')},"
        f" microbatch {plan.microbatch_size}, {used}: {format_duration(e.iteration_time)} and"
        f" {format_usd(e.cost)} per iteration"
    )


def _now(spec: Spec, fix: Fix) -> str:
    c = spec.constraints
    if fix.family == "quota":
        z, p = _pool_at(spec, fix.path)
        return str(spec.zones[z].pools[p].quota)
    value = {
        "max_gpus": c.max_gpus,
        "budget": c.max_cost_per_iteration,
        "throughput floor": c.min_throughput,
    }[fix.family]
    return "none" if value is None else _number(value)


def _message(
    spec: Spec, alone: bool, alternatives: Sequence[tuple[Fix, ...]], plan: Proposal | None
) -> str:
    def change(fix: Fix) -> str:
        text = f"{fix.what} {_now(spec, fix)} -> {_number(fix.value)}"
        if proven_least(spec, fix):
            return text
        if fix.infeasible_at is None:
            return f"{text} (not proven least)"
        return f"{text} (proven infeasible at {_number(fix.infeasible_at)}; the limit lies between)"

    if alone:
        head = (
            "each of these alone makes the spec feasible, at its least value"
            if len(alternatives) > 1
            else "the least change that makes the spec feasible"
        )
        body = "; or ".join(", ".join(change(f) for f in fixes) for fixes in alternatives)
    else:
        head = (
            "no single constraint's change is enough; together, each at its least value given"
            " the ones before it"
        )
        body = "; or ".join(" and ".join(change(f) for f in fixes) for fixes in alternatives)
    tail = f"; with the first, a plan that fits: {describe(plan)}" if plan else ""
    return f"{head}: {body}{tail}"
