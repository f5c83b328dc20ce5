"""A plan handed in by the user (`hetc compile SPEC --plan FILE`), checked as the planner's own.

A plan may be pinned, reviewed, edited or re-used across versions of a spec, so a file is
accepted in every form hetc writes, read as `hetc simulate --plan` reads it
(`costmodel.plan_file`): a bare Plan (`plan.json`), one entry of `hetc plan --json`'s `plans`,
or that whole output with a rank chosen. It must hold
what the planner guarantees of its own plans, each problem reported at the position of the
offending value in the file (`FILE:LINE:COL: path: message`):

1. the plan schema and the plan's own consistency (stages cover the blocks, every device is
   used once, the pipelines' microbatches add up to its global batch);
2. the spec: every node from a zone, pool and region of the spec with that pool's device and
   node size, no pool past its quota, no more devices than `constraints.max_gpus`, the spec's
   model, global batch, sequence length and precision, TP degrees that divide the model's
   heads and FFN width;
3. the capability matrix (what the runtime executes);
4. memory: every rank fits its device, by the simulator (measured profiles included).

Its predictions, spec hash and hetc version are recomputed, and the training it was made for
(model, sequence length, precision) recorded where an older plan lacks it: a plan made for
another version of the spec is accepted when it passes, and the caller says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from hetc import __version__
from hetc.costmodel.plan_file import PlanFileError, read_plan
from hetc.costmodel.profile import LayerProfile
from hetc.costmodel.simulate import Simulation, simulate
from hetc.plan import Plan, PlanIssue, capability_issues
from hetc.schema import Spec, spec_hash
from hetc.solver.planner import predictions_of

__all__ = ["GivenPlan", "GivenPlanError", "check_given_plan"]


@dataclass(frozen=True, kw_only=True, slots=True)
class GivenPlan:
    """A plan that passed every check, with what the simulator predicts of it."""

    plan: Plan
    """As given, with the spec's hash, this hetc's version and the simulator's predictions."""
    simulation: Simulation
    form: str
    """Which of the two forms the file holds, in words."""
    notes: tuple[str, ...]
    """What was recomputed and why, for stderr."""


GivenPlanError = PlanFileError
"""The file is not a plan this spec can run: one positioned diagnostic per problem."""


def check_given_plan(
    text: str,
    spec: Spec,
    *,
    file: str,
    profiles: Sequence[LayerProfile] = (),
    rank: int | None = None,
) -> GivenPlan:
    """Check the plan in `text` (read from `file`; `rank` chooses an entry of a whole `hetc
    plan --json` output) against `spec`, simulating it with `profiles`; raises GivenPlanError
    with every problem of the first stage that has one (schema, then the plan against itself,
    the spec and the capability matrix, then memory), RankChoiceError for a rank the file does
    not hold."""
    read = read_plan(text, spec, file=file, rank=rank)
    plan = read.plan
    training = spec.training
    issues = [
        *read.issues,
        *_spec_issues(plan, spec),
        *capability_issues(plan, zero_stage=training.zero_stage, precision=training.precision),
    ]
    if issues:
        raise read.at.error(issues)
    simulation = simulate(plan, spec, profiles=profiles)
    memory = _memory_issues(simulation)
    if memory:
        raise read.at.error(memory)
    checked = replace(
        plan,
        spec_hash=spec_hash(spec),
        hetc_version=__version__,
        model=spec.model_name,
        seq_len=training.seq_len,
        precision=training.precision,
        predictions=predictions_of(simulation),
    )
    return GivenPlan(
        plan=checked, simulation=simulation, form=read.form, notes=_notes(plan, checked, file)
    )


def _spec_issues(plan: Plan, spec: Spec) -> list[PlanIssue]:
    """What the planner holds every plan to that `read_plan` does not check:
    `constraints.max_gpus`, TP degrees the model divides by."""
    issues = []
    limit = spec.constraints.max_gpus
    rented = sum(n.devices for n in plan.nodes)
    if limit is not None and rented > limit:
        issues.append(
            PlanIssue(
                ("nodes",),
                f"the plan rents {rented} devices; the spec's constraints.max_gpus is {limit}",
            )
        )
    arch = spec.model
    sizes = (arch.heads, arch.resolved_kv_heads, arch.resolved_ffn)
    for i, stage in enumerate(plan.stages):
        for j, replica in enumerate(stage.replicas):
            node = plan.node(replica.node)
            if node is None or replica.tp < 1 or all(n % replica.tp == 0 for n in sizes):
                continue  # plan_issues reports an unknown node or a TP below 1
            usable = [t for t in range(1, node.devices + 1) if all(n % t == 0 for n in sizes)]
            issues.append(
                PlanIssue(
                    ("stages", i, "replicas", j, "tp"),
                    f"TP {replica.tp} does not divide the model's {arch.heads} heads,"
                    f" {arch.resolved_kv_heads} KV heads and FFN width {arch.resolved_ffn}"
                    f" (TP degrees that do, up to the node's {node.devices} devices:"
                    f" {', '.join(map(str, usable))})",
                )
            )
    return issues


def _memory_issues(simulation: Simulation) -> list[PlanIssue]:
    """One issue per replica whose ranks do not fit their device (its first rank's numbers)."""
    issues: dict[tuple[int, int], PlanIssue] = {}
    for rank in simulation.ranks:
        if rank.problem is not None and (rank.stage, rank.replica) not in issues:
            issues[rank.stage, rank.replica] = PlanIssue(
                ("stages", rank.stage, "replicas", rank.replica),
                f"does not fit: {rank.problem} (fewer blocks on stage {rank.stage}, a smaller"
                " microbatch_size or a higher TP degree would need less)",
            )
    return list(issues.values())


def _notes(given: Plan, checked: Plan, file: str) -> tuple[str, ...]:
    notes = []
    if given.spec_hash != checked.spec_hash:
        notes.append(
            f"{file} was made for another version of the spec (spec hash"
            f" {given.spec_hash[:12]}..., the spec's {checked.spec_hash[:12]}...); it passes"
            " every check against this one, so its spec hash and predictions are recomputed"
        )
    elif given.predictions != checked.predictions:
        notes.append(
            f"{file}'s predictions are not the simulator's for this spec: recomputed"
            + (
                f" (iteration {given.predictions.iteration_time:.4g} s in the file,"
                f" {checked.predictions.iteration_time:.4g} s simulated)"
                if given.predictions is not None and checked.predictions is not None
                else ""
            )
        )
    if given.hetc_version != checked.hetc_version:
        notes.append(f"{file} was written by hetc {given.hetc_version}; this is {__version__}")
    return tuple(notes)
