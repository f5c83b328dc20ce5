"""Why no plan satisfies a spec, and the least change of each constraint that makes one.

The diagnosis is built on one oracle, `Oracle.status`: does the planner's search (with the
same profiles and approximations `hetc plan` uses) find a plan inside the runtime's
capability matrix, and if not, is that proven? Every number it suggests is a value at which
a plan was found (verified), the least such value its searches found, and each fix says how
far it is proven least (`Fix.infeasible_at`, the nearest less permissive value proven
infeasible): the message states that range where it is wider than the family's resolution,
rather than guessing. The searches count work, never seconds (`oracle`), so the same spec
gets the same diagnosis on any machine and at any load, within its budget.

Constraint families and what "least change" means for each (the resolution in brackets);
each is a search over a monotone feasibility (`least.least_feasible`):

- `quota` of one pool [whole nodes: gpus_per_node devices]: the least quota of that pool,
  every other pool as it is; more nodes only add plans. Quotas are searched up to
  `ceiling_nodes` per pool (the "lifted" quota). When no single pool suffices: the least
  number k of whole nodes added to every pool (each capped at its ceiling). `quota_fixes`.
- `max_gpus` [whole devices]: the least max_gpus; a larger limit only adds plans.
- budget, `constraints.max_cost_per_iteration` [3 significant digits, rounded up]: the least
  cost of any plan under the other constraints, bracketed by the min-cost search without
  the budget (its best plan and its lower bound), then closed by probes.
- throughput floor, `constraints.min_throughput` [3 significant digits, rounded down]: the
  most iterations/s of any plan under the other constraints, from the max-throughput search
  the same way. Every plan the diagnosis's searches found that meets the other constraints
  is a witness (`Oracle.witnesses`), so a floor's fix is never below a plan already found.
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

The budget: a family that a necessary condition (`feasibility`) already proves binding
comes first; each family (or combination) searches with an equal share of what is left,
one share kept back, which then goes to the fixes not yet proven least (`_Binding`). A
search stopped short says which limit stopped it (`Oracle.limited_by`): the work budget
(`--work-limit`), a wall clock (`--time-limit`), or an interruption; without any limit
(`--exact`) the diagnosis is exact.

The monotonicity holds for the exact search; the default `kind-profiles` approximation of
large clusters (`planner.default_approximations`) narrows the space above a device count, so
every suggestion is verified by the same planner, and tests/test_diagnosis_fixes.py checks
every fix against independent searches over a generated family (bench/diagnosis.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import combinations
from typing import Any

from hetc.costmodel.planning import PlanningModel
from hetc.schema.spec import Spec
from hetc.solver.budget import Budget
from hetc.solver.feasibility import Infeasible, necessary_conditions
from hetc.solver.fix import (
    CEILING_DEVICES,
    FAMILIES,
    Fix,
    apply_fixes,
    ceiling_nodes,
    grid_index,
    grid_value,
    number,
    one_step_less,
    pool_at,
    proven_least,
    removed,
    round_down,
    round_up,
    unit_step,
)
from hetc.solver.least import budget_fix, floor_fix, max_gpus_fix
from hetc.solver.oracle import DIAGNOSIS_WORK, Oracle
from hetc.solver.planner import Proposal
from hetc.solver.quota_fixes import quota_fixes
from hetc.solver.search import Candidate
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
    "family_fixes",
    "grid_index",
    "grid_value",
    "one_step_less",
    "present",
    "proven_least",
    "removed",
    "round_down",
    "round_up",
    "unit_step",
    "unknown",
]


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
    work: int = 0
    """Units of work the diagnosis spent (`Oracle.spent`)."""


def family_fixes(oracle: Oracle, spec: Spec, family: str) -> list[tuple[Fix, ...]]:
    """The least change of one family, the others as in `spec`: alternatives (several only
    for quotas, one per pool that suffices alone), empty when no value suffices."""
    if family == "quota":
        return quota_fixes(oracle, spec)
    one = {"max_gpus": max_gpus_fix, "budget": budget_fix, "throughput floor": floor_fix}
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


def _combination(oracle: Oracle, spec: Spec, members: Sequence[str]) -> list[tuple[Fix, ...]]:
    """Members' least changes in FAMILIES order, each with the earlier members fixed and the
    later ones removed; then each member but the quotas again, with every other member at
    its change (one alternative, or none where a member's change was not found). That pass
    matters where the first one solved with the quotas lifted: above a device count the
    search approximates (`planner.default_approximations`), so the least max_gpus with
    lifted quotas can exceed the least with the quota the combination names. It only lowers
    a member, and lowering one only removes plans, so every other member stays least (one
    step less on it was infeasible with this member higher). Each member's search has an
    equal share of what is left of the budget, the second pass included."""
    fixes: list[Fix] = []
    current = spec
    steps = len(members) + sum(f != "quota" for f in members)
    for i, family in enumerate(members):
        with oracle.share(1 / (steps - i)):
            options = family_fixes(oracle, removed(current, members[i + 1 :]), family)
        if not options:
            return []
        fixes.extend(options[0])
        current = apply_fixes(current, options[0])
    again = [f for f in members if f != "quota"]
    for i, family in enumerate(again):
        others = [f for f in fixes if f.family != family]
        with oracle.share(1 / (len(again) - i)):
            options = family_fixes(oracle, apply_fixes(spec, others), family)
        if options:
            fixes = [*others, *options[0]]
    order = {f: i for i, f in enumerate(FAMILIES)}
    return [tuple(sorted(fixes, key=lambda f: order[f.family]))]


@dataclass(slots=True)
class _Binding:
    """A family, or a set of families together, and the least changes found for it: its
    search is run again (`compute`) while budget is left and a change is not proven least,
    and the oracle's memo replays what it found before, so the rerun only adds to it."""

    label: str
    compute: Callable[[], list[tuple[Fix, ...]]]
    found: list[tuple[Fix, ...]] = field(default_factory=list)


def diagnose(spec: Spec, *, known_infeasible: bool = False, **kwargs: Any) -> Diagnosis:
    """Name the binding constraint(s) of an infeasible spec and the least change of each
    that makes it feasible (see the module docstring); raises ValueError on a feasible one.
    `kwargs` are `plan_spec`'s profiles, overhead, approximations and measured_points, and
    `Oracle`'s work_limit (per search) and budget (of the whole diagnosis: DIAGNOSIS_WORK
    units by default; None with work_limit None makes the diagnosis exact, however long it
    takes). When a necessary condition (`feasibility`) already fails, the family it names
    is diagnosed first, with the whole budget before it, and the message ends with the
    condition: why no plan exists, proven before any search, and the bound it gives.
    `known_infeasible` says that a search with the same approximations ended without a
    plan (`hetc plan`'s own, complete): the diagnosis takes that as proven rather than
    spend its budget on the same proof again."""
    oracle = Oracle(**{"budget": Budget(work=DIAGNOSIS_WORK), **kwargs})
    proof = necessary_conditions(oracle.model(spec))
    if known_infeasible:
        oracle.known_infeasible(spec)
    if proof is None and oracle.feasible(spec):
        raise ValueError("the spec is feasible: there is nothing to diagnose")
    diagnosis = _diagnose(oracle, spec, proof)
    if proof is not None:
        message = f"{diagnosis.message}. Before any search: {proof.reason} ({proof.change})"
        diagnosis = replace(diagnosis, message=message)
    return replace(diagnosis, work=oracle.spent)


def _order(families: list[str], proof: Infeasible | None) -> list[str]:
    """The families, those a failed necessary condition names first: their fixes are
    searched while the whole budget is left."""
    named = [] if proof is None else proof.binding.replace(" or ", " and ").split(" and ")
    return [f for f in families if f in named] + [f for f in families if f not in named]


def _diagnose(oracle: Oracle, spec: Spec, proof: Infeasible | None) -> Diagnosis:
    """The families that bind alone (of those the spec constrains and a change can lift:
    quotas already at their ceiling cannot), each with an equal share of the budget, a
    reserve kept; where none does, the smallest sets of families that bind together, each set
    whose removal has a plan with an equal share; then what is left of the budget goes, in
    equal shares, to the bindings whose changes are not yet proven least (`_Binding`)."""
    changeable = [f for f in present(spec) if removed(spec, [f]) != spec]
    families = _order(changeable, proof)
    bindings = [_Binding(f, partial(family_fixes, oracle, spec, f)) for f in families]
    _search_all(oracle, bindings, reserve=True)
    alone = any(b.found for b in bindings)
    for size in range(2, len(families) + 1):
        if alone:
            break
        sets = list(combinations(changeable, size))
        lifted = []
        for i, members in enumerate(sets):
            with oracle.share(1 / (len(sets) - i + 1)):
                if oracle.feasible(removed(spec, members)):
                    lifted.append(members)
        bindings = [
            _Binding(" and ".join(m), partial(_combination, oracle, spec, m)) for m in lifted
        ]
        _search_all(oracle, bindings, reserve=True)
        if any(b.found for b in bindings):
            break
    unproven = [b for b in bindings if b.found and not _least_proven(spec, b.found)]
    _search_all(oracle, unproven, reserve=False)
    alternatives = [fixes for b in bindings for fixes in b.found]
    binding = [b.label for b in bindings if b.found]
    if not alternatives:
        if not oracle.proven_infeasible(removed(spec, families)):
            return _undetermined(oracle)
        return _memory(oracle, spec)
    fixed = apply_fixes(spec, alternatives[0])
    plan = oracle.proposal(fixed)
    message = _message(spec, alone, alternatives, _shown(oracle, fixed))
    unsure = [
        f
        for f in families
        if f not in binding and removed(spec, [f]) != spec and unknown(oracle, removed(spec, [f]))
    ]
    if unsure:
        message += (
            f"; whether {' or '.join(unsure)} binds alone too is not known: its search stopped"
            f" at its limit before finding a plan or proving there is none ({_raise(oracle)})"
        )
    proven = not unsure and _least_proven(spec, alternatives)
    if not proven and not unsure:
        stopped = (
            f"{plural(oracle.stopped, 'search', 'searches')} stopped at their limit, and"
            f" {_raise(oracle)} narrows the ranges; "
            if oracle.stopped
            else ""
        )
        message += (
            f" ({stopped}each change is verified, and where a range is given the least value"
            " lies in it)"
        )
    return Diagnosis(
        binding=" or ".join(binding),
        message=message,
        proven=proven,
        change="; or ".join(", ".join(f.line() for f in fixes) for fixes in alternatives),
        plan=plan,
        alternatives=tuple(alternatives),
    )


def _search_all(oracle: Oracle, bindings: Sequence[_Binding], *, reserve: bool) -> None:
    """Search each binding's changes in turn, each with an equal share of what is left of
    the budget (with `reserve`, and more than one binding, one share more is kept back for
    the bindings left unproven)."""
    spare = reserve and len(bindings) > 1
    for i, b in enumerate(bindings):
        with oracle.share(1 / (len(bindings) - i + spare)):
            b.found = b.compute()


def _least_proven(spec: Spec, alternatives: Sequence[tuple[Fix, ...]]) -> bool:
    return all(proven_least(spec, f) for fixes in alternatives for f in fixes)


def _raise(oracle: Oracle) -> str:
    """What would let the stopped searches go on, as the message words it: the limit that
    stopped them (`Oracle.limited_by`), never a flag the user already gave."""
    flag = oracle.limited_by()
    if flag == "--work-limit":
        return "a larger --work-limit, or --exact (no limit)"
    if flag == "--time-limit":
        return "a larger --time-limit, or none (the work budget then decides)"
    if flag == "an interruption":
        return "it was interrupted: run it again to the end"
    return flag


def unknown(oracle: Oracle, spec: Spec) -> bool:
    """Whether the oracle neither found a plan of `spec` nor proved that it has none (its
    searches stopped at their limit): then nothing may be said either way."""
    return not oracle.feasible(spec) and not oracle.proven_infeasible(spec)


def _undetermined(oracle: Oracle) -> Diagnosis:
    """No family's removal gave a plan, and even with all of them removed the searches
    stopped before proving that no plan exists: naming memory (or anything) would be a
    guess. The change named is what stopped them (`Oracle.limited_by`): the work budget,
    a wall clock, or an interruption; an exact diagnosis (`--exact`) has no limit, so it
    ends here only when interrupted."""
    flag = oracle.limited_by()
    change = {
        "--work-limit": "raise --work-limit, or plan with --exact to search to the end",
        "--time-limit": "raise --time-limit, or drop it (the work budget then decides)",
        "an interruption": "run it again without interrupting it",
    }.get(flag, f"lift {flag}")
    return Diagnosis(
        binding="undetermined",
        message=(
            "no plan was found, and with every constraint removed and every quota lifted the"
            f" {plural(oracle.stopped, 'search', 'searches')} stopped at their limit"
            f" ({flag}) before finding one or proving that none exists, so which constraint"
            " binds is not known"
        ),
        change=change,
        plan=None,
        proven=False,
        work=oracle.spent,
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
                " constraints; with activation checkpointing one does:"
                f" {_shown(oracle, checkpointed)}",
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


def describe(candidate: Candidate, model: PlanningModel) -> str:
    """A plan in one phrase: stages, pipelines, microbatch, devices, and the planning
    model's time and cost (read off the candidate, so that a plan too large to simulate
    within the budget is described too)."""
    shape, e = candidate.shape, candidate.estimate
    devices: dict[str, int] = {}
    for stage in candidate.assignment:
        for kind, count in stage:
            k = model.kinds[kind]
            devices[k.device] = devices.get(k.device, 0) + count * k.tp
    used = ", ".join(f"{n} x {d}" for d, n in sorted(devices.items()))
    return (
        f"{plural(shape.stages, 'stage')}, {plural(shape.pipelines, 'pipeline')},"
        f" microbatch {shape.microbatch}, {used}: {format_duration(e.iteration_time)} and"
        f" {format_usd(e.cost)} per iteration"
    )


def _shown(oracle: Oracle, spec: Spec) -> str | None:
    """`describe` of the plan the oracle found for `spec`, None without one."""
    found = oracle.witness(spec)
    return None if found is None else describe(found, oracle.model(spec))


def _now(spec: Spec, fix: Fix) -> str:
    c = spec.constraints
    if fix.family == "quota":
        z, p = pool_at(spec, fix.path)
        return str(spec.zones[z].pools[p].quota)
    value = {
        "max_gpus": c.max_gpus,
        "budget": c.max_cost_per_iteration,
        "throughput floor": c.min_throughput,
    }[fix.family]
    return "none" if value is None else number(value)


def _message(
    spec: Spec, alone: bool, alternatives: Sequence[tuple[Fix, ...]], shown: str | None
) -> str:
    def change(fix: Fix) -> str:
        text = f"{fix.what} {_now(spec, fix)} -> {number(fix.value)}"
        if proven_least(spec, fix):
            return text
        if fix.infeasible_at is None:
            return f"{text} (not proven least)"
        return (
            f"{text} (proven infeasible at {number(fix.infeasible_at)}; the least value lies"
            " between)"
        )

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
    tail = f"; with the first, a plan that fits: {shown}" if shown else ""
    return f"{head}: {body}{tail}"
