"""Choosing the next generation's plan when the quotas change.

A reconfiguration costs a restart whatever plan follows, but a plan that keeps the devices
already running costs less beyond it: no node to rent and wait for, no node returned while
it is paid for. So the choice is not simply the new best plan. The planner's best few
(`CANDIDATES`) are scored under the new quotas, and so is the current plan where it still
fits them (the warm start: a known-good incumbent that costs one simulation); among those
within `tolerance` of the best objective (seconds or USD per iteration, lower is better),
the one keeping the most running devices per pool wins; among those, the running plan itself
(no restart at all), then the better objective. With a tolerance of 0 this is the planner's
best plan (or the running plan where it is as good).

When nothing fits the new quotas, `Replanned.diagnosis` says why (the planner's diagnosis:
the binding constraint and the smallest change that fixes it) and there is no plan. A
re-plan and its diagnosis spend `hetc plan`'s default budget of work
(`budget.command_budget`): the same answer `hetc plan` gives for the new quotas, in bounded
time on any spec.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hetc.costmodel.profile import LayerProfile
from hetc.plan import Plan, plan_to_json
from hetc.schema.spec import Spec
from hetc.solver.budget import command_budget
from hetc.solver.diagnosis import diagnose
from hetc.solver.given import GivenPlan, GivenPlanError, check_given_plan
from hetc.solver.planner import (
    PlanningResult,
    Proposal,
    plan_spec,
    simulated_objective,
)

CANDIDATES = 4
"""Plans the search returns for the choice (its best and the best of other shapes)."""
DEFAULT_TOLERANCE = 0.05
"""A plan up to 5% slower (or dearer) than the best is kept if it keeps more running
devices: about what one restart costs over a few hundred iterations."""


def devices_by_pool(plan: Plan) -> Counter[str]:
    """Devices a plan uses, by pool label (`<pool>@<zone>`)."""
    nodes = {n.id: n for n in plan.nodes}
    used: Counter[str] = Counter()
    for stage in plan.stages:
        for replica in stage.replicas:
            node = nodes[replica.node]
            used[f"{node.pool}@{node.zone}"] += replica.tp
    return used


def same_layout(a: Plan, b: Plan) -> bool:
    """Whether two plans place the same work on the same devices (their spec hashes and
    predictions may differ: the same plan under new quotas is the same job)."""
    neutral = {"spec_hash": "", "hetc_version": "", "predictions": None}
    return replace(a, **neutral) == replace(b, **neutral)  # type: ignore[arg-type]


def kept_devices(plan: Plan, current: Plan | None) -> int:
    """How many of `current`'s devices `plan` keeps, pool by pool."""
    if current is None:
        return 0
    now, then = devices_by_pool(plan), devices_by_pool(current)
    return sum(min(now[pool], then[pool]) for pool in then)


@dataclass(frozen=True, kw_only=True, slots=True)
class Choice:
    plan: Plan
    objective: float
    kept: int
    source: str
    """`current` (the running plan still fits) or `planner #k`."""
    proposal: Proposal | None = None
    """The planner's proposal; None for the current plan."""
    given: GivenPlan | None = None
    """The current plan as checked under the new quotas; None for a proposal."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Replanned:
    choice: Choice | None
    result: PlanningResult | None
    """The planner's answer (for the report); None when nothing was feasible."""
    diagnosis: str | None
    seconds: float


def _current_under(spec: Spec, current: Plan, profiles: Sequence[LayerProfile]) -> Choice | None:
    """The running plan scored under `spec` (the new quotas), or None where it no longer
    fits them."""
    try:
        given = check_given_plan(plan_to_json(current), spec, file="plan.json", profiles=profiles)
    except GivenPlanError:
        return None
    return Choice(
        plan=given.plan,
        objective=simulated_objective(spec, given.simulation),
        kept=kept_devices(given.plan, current),
        source="current",
        given=given,
    )


def replan(
    spec: Spec,
    current: Plan | None,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    profiles: Sequence[LayerProfile] = (),
) -> Replanned:
    """The next plan under `spec`'s quotas (see the module docstring)."""
    started = time.perf_counter()
    budget = command_budget()
    result = plan_spec(spec, profiles=profiles, top=CANDIDATES, budget=budget)
    if not result.proposals:
        if all(pool.max_nodes == 0 for zone in spec.zones for pool in zone.pools):
            return Replanned(
                choice=None,
                result=None,
                diagnosis="no pool has a whole node's devices now",
                seconds=time.perf_counter() - started,
            )
        try:
            diagnosis = diagnose(spec, profiles=profiles, budget=budget)
            message = f"{diagnosis.message} (would fit with: {diagnosis.change})"
        except ValueError as exc:
            message = str(exc)
        return Replanned(
            choice=None,
            result=None,
            diagnosis=message,
            seconds=time.perf_counter() - started,
        )
    choices = [
        Choice(
            plan=p.plan,
            objective=simulated_objective(spec, p.simulation),
            kept=kept_devices(p.plan, current),
            source=f"planner #{k + 1}",
            proposal=p,
        )
        for k, p in enumerate(result.proposals)
    ]
    incumbent = None if current is None else _current_under(spec, current, profiles)
    if incumbent is not None:
        choices.insert(0, incumbent)
    best = min(c.objective for c in choices)
    within = [c for c in choices if c.objective <= best * (1 + tolerance)]
    chosen = max(within, key=lambda c: (c.kept, c.source == "current", -c.objective))
    return Replanned(
        choice=chosen, result=result, diagnosis=None, seconds=time.perf_counter() - started
    )
