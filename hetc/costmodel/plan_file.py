"""A plan file as `hetc simulate --plan` and `hetc compile --plan` read it, in every form hetc
writes, checked against the spec it is meant for.

One reader for both commands, so that what one accepts the other accepts: a bare Plan
(`plan.json`, as `hetc compile` writes it), one entry of `hetc plan --json`'s `plans`
(`{"rank": ..., "plan": {...}}`), or the whole output of `hetc plan --json`, from which `rank`
chooses an entry (plan 1 unless told). Every problem is a diagnostic at the position of the
offending value (`FILE:LINE:COL: path: message`).

A plan is refused when it was made for other training than the spec's: another model, global
batch, sequence length or precision. Simulating it anyway would price another job (a plan
made for half the batch predicts twice the samples per second), so the differing field is
named with both values instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hetc.costmodel.simulate import plan_spec_issues
from hetc.draft07 import Validator
from hetc.plan import Plan, PlanIssue, plan_issues, plan_of, plan_schema
from hetc.schema import Diagnostic, Spec
from hetc.schema.diagnostics import Path, dotted
from hetc.schema.json_source import parse_json
from hetc.schema.source import SourceMap, SyntaxProblem
from hetc.schema.structure import describe_value, finding_of

__all__ = [
    "PlanFileError",
    "PlanPositions",
    "RankChoiceError",
    "ReadPlan",
    "plan_training_issues",
    "read_plan",
]


class PlanFileError(Exception):
    """The file is not a plan this spec can run: one positioned diagnostic per problem."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        super().__init__("; ".join(d.format() for d in diagnostics))
        self.diagnostics = tuple(diagnostics)


class RankChoiceError(ValueError):
    """`--rank` names no entry of the file, or is given for a file that holds one plan: a
    usage error (exit 2), not a bad plan."""


@dataclass(frozen=True, slots=True)
class PlanPositions:
    """Where the plan stands in its file, to report each issue at its offending value."""

    file: str
    source: SourceMap
    prefix: Path
    """The plan's path in the file: () for a bare plan, ("plan",) for an entry."""

    def error(self, issues: Sequence[PlanIssue]) -> PlanFileError:
        """The issues as diagnostics in the file's order, each once."""
        unique: dict[tuple[str, str], Diagnostic] = {}
        for issue in issues:
            full = (*self.prefix, *issue.path)
            line, column = self.source.locate(full)
            diagnostic = Diagnostic(self.file, line, column, dotted(full), issue.message)
            unique.setdefault((diagnostic.path, diagnostic.message), diagnostic)
        ordered = sorted(unique.values(), key=lambda d: (d.line, d.column, d.path))
        return PlanFileError(ordered)


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """A plan that passed the schema, with what is wrong with it against itself and the spec
    (`issues`, not yet raised: a caller may add its own checks and raise them together)."""

    plan: Plan
    issues: tuple[PlanIssue, ...]
    form: str
    """Which form the file holds, in words."""
    at: PlanPositions


def read_plan(text: str, spec: Spec, *, file: str, rank: int | None = None) -> ReadPlan:
    """Read the plan in `text` (from `file`; `rank` chooses an entry of a whole `hetc plan
    --json` output, 1 when None) and check it against itself and `spec`. Raises PlanFileError
    for text that is not JSON or a plan that breaks the plan schema, RankChoiceError for a
    `rank` the file does not hold."""
    try:
        document, positions = parse_json(text)
    except SyntaxProblem as exc:
        diagnostic = Diagnostic(file, exc.line, exc.column, "(root)", exc.message)
        raise PlanFileError([diagnostic]) from None
    data, prefix, form = _unwrap(document, file, positions, rank)
    at = PlanPositions(file, positions, prefix)
    structural = [finding_of(e) for e in Validator(plan_schema()).iter_errors(data)]
    if structural:
        raise at.error([PlanIssue(f.path, f.message) for f in structural])
    plan = plan_of(data)
    issues = (*plan_issues(plan), *plan_spec_issues(plan, spec), *plan_training_issues(plan, spec))
    return ReadPlan(plan=plan, issues=issues, form=form, at=at)


def plan_training_issues(plan: Plan, spec: Spec) -> list[PlanIssue]:
    """Where the plan was made for other training than the spec's: the model (its name, when
    the plan records it, and its blocks), the global batch, the sequence length, the
    precision. Each names the field and both values."""
    issues = []
    training = spec.training
    if plan.model is not None and plan.model != spec.model_name:
        issues.append(
            PlanIssue(
                ("model",),
                f"the plan was made for model {plan.model}; the spec's model is {spec.model_name}",
            )
        )
    if plan.model_blocks != spec.model.layers:
        issues.append(
            PlanIssue(
                ("model_blocks",),
                f"the plan cuts {plan.model_blocks} blocks; the spec's model has"
                f" {spec.model.layers}",
            )
        )
    if plan.global_batch_size != training.global_batch_size:
        issues.append(
            PlanIssue(
                ("global_batch_size",),
                f"the plan was made for global_batch_size {plan.global_batch_size}; the spec's"
                f" training.global_batch_size is {training.global_batch_size}",
            )
        )
    if plan.seq_len is not None and plan.seq_len != training.seq_len:
        issues.append(
            PlanIssue(
                ("seq_len",),
                f"the plan was made for seq_len {plan.seq_len}; the spec's training.seq_len"
                f" is {training.seq_len}",
            )
        )
    if plan.precision is not None and plan.precision != training.precision:
        issues.append(
            PlanIssue(
                ("precision",),
                f"the plan was made for precision {plan.precision}; the spec's"
                f" training.precision is {training.precision}",
            )
        )
    return issues


def _unwrap(
    document: Any, file: str, positions: SourceMap, rank: int | None
) -> tuple[Any, Path, str]:
    """The plan's data, its path in the file and the file's form, in words."""
    if isinstance(document, dict) and "plans" in document:
        return _entry_of_output(document, file, positions, 1 if rank is None else rank)
    if rank is not None:
        raise RankChoiceError(
            f"--rank {rank}: {file} holds one plan, not the output of `hetc plan --json`;"
            " leave --rank out"
        )
    if isinstance(document, dict) and "plan" in document and "version" not in document:
        number = document.get("rank")
        which = f" (rank {number})" if isinstance(number, int) else ""
        return document["plan"], ("plan",), f"an entry of `hetc plan --json`'s plans{which}"
    if not isinstance(document, dict):
        raise PlanFileError(
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


def _entry_of_output(
    document: dict[str, Any], file: str, positions: SourceMap, rank: int
) -> tuple[Any, Path, str]:
    """Entry `rank` of a whole `hetc plan --json` output."""
    plans = document["plans"]
    if not isinstance(plans, list) or not all(isinstance(e, dict) and "plan" in e for e in plans):
        line, column = positions.locate(("plans",))
        raise PlanFileError(
            [
                Diagnostic(
                    file,
                    line,
                    column,
                    "plans",
                    "expected the list of `hetc plan --json`, each entry an object with a `plan`",
                )
            ]
        )
    ranks = [e["rank"] if isinstance(e.get("rank"), int) else i + 1 for i, e in enumerate(plans)]
    if not plans:
        line, column = positions.locate(("plans",))
        raise PlanFileError(
            [
                Diagnostic(
                    file,
                    line,
                    column,
                    "plans",
                    "this output of `hetc plan --json` holds no plan (the spec was infeasible"
                    " when it was planned)",
                )
            ]
        )
    if rank not in ranks:
        raise RankChoiceError(
            f"--rank {rank}: {file} holds the plans ranked {', '.join(map(str, ranks))}"
        )
    index = ranks.index(rank)
    return (
        plans[index]["plan"],
        ("plans", index, "plan"),
        f"plan {rank} of the output of `hetc plan --json`",
    )
