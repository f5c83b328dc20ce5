"""A plan handed in by the user (`hetc compile SPEC --plan FILE`), checked as the planner's own.

A plan may be pinned, reviewed, edited or re-used across versions of a spec, so a file is
accepted in the two forms hetc writes: a bare Plan (`plan.json`, as `hetc compile` writes it)
or one entry of `hetc plan --json`'s `plans` (`{"rank": ..., "plan": {...}}`). It must hold
what the planner guarantees of its own plans, each problem reported at the position of the
offending value in the file (`FILE:LINE:COL: path: message`):

1. the plan schema and the plan's own consistency (stages cover the blocks, every device is
   used once, the pipelines' microbatches add up to its global batch);
2. the spec: every node from a zone, pool and region of the spec with that pool's device and
   node size, no pool past its quota, no more devices than `constraints.max_gpus`, the spec's
   model blocks and global batch, TP degrees that divide the model's heads and FFN width;
3. the capability matrix (what the runtime executes);
4. memory: every rank fits its device, by the simulator (measured profiles included).

Its predictions, spec hash and hetc version are recomputed: a plan made for another version of
the spec is accepted when it passes, and the caller says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from hetc import __version__
from hetc.costmodel.profile import LayerProfile
from hetc.costmodel.simulate import Simulation, plan_spec_issues, simulate
from hetc.draft07 import Validator
from hetc.plan import Plan, PlanIssue, capability_issues, plan_issues, plan_of, plan_schema
from hetc.schema import Diagnostic, Spec, spec_hash
from hetc.schema.diagnostics import Path, dotted
from hetc.schema.json_source import parse_json
from hetc.schema.source import SourceMap, SyntaxProblem
from hetc.schema.structure import describe_value, finding_of
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


class GivenPlanError(Exception):
    """The file is not a plan this spec can run: one positioned diagnostic per problem."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        super().__init__("; ".join(d.format() for d in diagnostics))
        self.diagnostics = tuple(diagnostics)


def check_given_plan(
    text: str, spec: Spec, *, file: str, profiles: Sequence[LayerProfile] = ()
) -> GivenPlan:
    """Check the plan in `text` (read from `file`) against `spec`, simulating it with
    `profiles`; raises GivenPlanError with every problem of the first stage that has one
    (schema, then the plan against itself, the spec and the capability matrix, then memory)."""
    try:
        document, positions = parse_json(text)
    except SyntaxProblem as exc:
        diagnostic = Diagnostic(file, exc.line, exc.column, "(root)", exc.message)
        raise GivenPlanError([diagnostic]) from None
    data, prefix, form = _unwrap(document, file, positions)
    at = _Positions(file, positions, prefix)
    structural = [finding_of(e) for e in Validator(plan_schema()).iter_errors(data)]
    if structural:
        raise at.error([PlanIssue(f.path, f.message) for f in structural])
    plan = plan_of(data)
    training = spec.training
    issues = [
        *plan_issues(plan),
        *plan_spec_issues(plan, spec),
        *_spec_issues(plan, spec),
        *capability_issues(plan, zero_stage=training.zero_stage, precision=training.precision),
    ]
    if issues:
        raise at.error(issues)
    simulation = simulate(plan, spec, profiles=profiles)
    memory = _memory_issues(simulation)
    if memory:
        raise at.error(memory)
    checked = replace(
        plan,
        spec_hash=spec_hash(spec),
        hetc_version=__version__,
        predictions=predictions_of(simulation),
    )
    return GivenPlan(
        plan=checked, simulation=simulation, form=form, notes=_notes(plan, checked, file)
    )


@dataclass(frozen=True, slots=True)
class _Positions:
    file: str
    source: SourceMap
    prefix: Path

    def error(self, issues: Sequence[PlanIssue]) -> GivenPlanError:
        """The issues as diagnostics in the file's order, each once."""
        unique: dict[tuple[str, str], Diagnostic] = {}
        for issue in issues:
            full = (*self.prefix, *issue.path)
            line, column = self.source.locate(full)
            diagnostic = Diagnostic(self.file, line, column, dotted(full), issue.message)
            unique.setdefault((diagnostic.path, diagnostic.message), diagnostic)
        ordered = sorted(unique.values(), key=lambda d: (d.line, d.column, d.path))
        return GivenPlanError(ordered)


def _unwrap(document: Any, file: str, positions: SourceMap) -> tuple[Any, Path, str]:
    """The plan's data, its path in the file and the file's form, in words."""
    if isinstance(document, dict) and "plans" in document:
        line, column = positions.locate(("plans",), at_key=True)
        raise GivenPlanError(
            [
                Diagnostic(
                    file,
                    line,
                    column,
                    "plans",
                    "this is the whole output of `hetc plan --json`: pass one entry of its"
                    " `plans` (for example `jq '.plans[0]' FILE > plan.json`) or a plan.json",
                )
            ]
        )
    if isinstance(document, dict) and "plan" in document and "version" not in document:
        rank = document.get("rank")
        which = f" (rank {rank})" if isinstance(rank, int) else ""
        return document["plan"], ("plan",), f"an entry of `hetc plan --json`'s plans{which}"
    if not isinstance(document, dict):
        raise GivenPlanError(
            [
                Diagnostic(
                    file,
                    1,
                    1,
                    "(root)",
                    f"expected a plan (a JSON object, as `hetc compile` writes plan.json),"
                    f" got {describe_value(document)}",
                )
            ]
        )
    return document, (), "a plan as `hetc compile` writes plan.json"


def _spec_issues(plan: Plan, spec: Spec) -> list[PlanIssue]:
    """What the planner holds every plan to that `plan_spec_issues` does not check: the
    model's blocks, the global batch, `constraints.max_gpus`, TP degrees the model divides by."""
    issues = []
    layers = spec.model.layers
    if plan.model_blocks != layers:
        issues.append(
            PlanIssue(
                ("model_blocks",),
                f"the plan cuts {plan.model_blocks} blocks; the spec's model has {layers}",
            )
        )
    batch = spec.training.global_batch_size
    if plan.global_batch_size != batch:
        issues.append(
            PlanIssue(
                ("global_batch_size",),
                f"{plan.global_batch_size} samples per iteration; the spec's"
                f" training.global_batch_size is {batch} (the shares must add up to it)",
            )
        )
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
