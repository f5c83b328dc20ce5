"""The capability matrix: which plan shapes the runtime can execute, shared by planner,
emitter and runtime so that none of them produces or starts what another cannot run.

Each cell has a stable name; a refusal names the cell, so a user can find it in the docs and
the runtime issue's tests (one oracle test per supported cell).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hetc.plan.ir import Plan, PlanIssue, PlanPath


@dataclass(frozen=True, slots=True)
class Cell:
    """One combination of plan features and whether this release runs it."""

    name: str
    supported: bool
    why: str


WAVE_1: dict[str, Cell] = {
    c.name: c
    for c in (
        Cell("uniform-tp-stage/zero-0", True, "hetc's own data-parallel synchronisation"),
        *(Cell(f"uniform-tp-stage/zero-{z}", True, "DeepSpeed engine per stage") for z in (1, 2)),
        Cell("mixed-tp-stage/zero-0", True, "hetc's chunked data-parallel synchronisation"),
        *(
            Cell(
                f"mixed-tp-stage/zero-{z}",
                False,
                "replicas with different TP degrees cannot share a ZeRO partition",
            )
            for z in (1, 2)
        ),
        *(Cell(f"precision/{p}", True, "all three train") for p in ("fp32", "fp16", "bf16")),
        Cell("uneven-batch-shares", True, "each pipeline's own microbatch count"),
        Cell(
            "asymmetric-replica-counts",
            False,
            "a replica shared by several pipelines is not in the first runtime",
        ),
    )
}


def cells_used(plan: Plan, *, zero_stage: int, precision: str) -> list[str]:
    """Names of the matrix cells `plan` needs, in a stable order."""
    return list(dict.fromkeys(name for name, _ in _cells_at(plan, zero_stage, precision)))


def _cells_at(plan: Plan, zero_stage: int, precision: str) -> list[tuple[str, PlanPath]]:
    """Each cell `plan` needs with the part of the plan that needs it."""
    used: list[tuple[str, PlanPath]] = [(f"precision/{precision}", ())]
    for i, stage in enumerate(plan.stages):
        mixed = len({r.tp for r in stage.replicas}) > 1
        used.append(
            (f"{'mixed' if mixed else 'uniform'}-tp-stage/zero-{zero_stage}", ("stages", i))
        )
    if len({p.microbatches for p in plan.pipelines}) > 1:
        used.append(("uneven-batch-shares", ("pipelines",)))
    visits = [(i, index) for p in plan.pipelines for i, index in enumerate(p.replicas)]
    if len(visits) != len(set(visits)):
        used.append(("asymmetric-replica-counts", ("pipelines",)))
    return used


def capability_problems(plan: Plan, *, zero_stage: int, precision: str) -> list[str]:
    """Why this release cannot run `plan`, one line per unsupported cell; [] if it can."""
    problems = []
    for name in cells_used(plan, zero_stage=zero_stage, precision=precision):
        why = _refusal(name)
        if why is not None:
            problems.append(f"{name}: {why}")
    return problems


def capability_issues(plan: Plan, *, zero_stage: int, precision: str) -> list[PlanIssue]:
    """`capability_problems` at each part of the plan that needs an unsupported cell (every
    stage that mixes TP degrees under ZeRO 1, say), for a reader of a plan file."""
    issues = []
    for name, path in _cells_at(plan, zero_stage, precision):
        why = _refusal(name)
        if why is not None:
            issues.append(PlanIssue(path, f"{name}: {why}"))
    return issues


def _refusal(name: str) -> str | None:
    cell = WAVE_1.get(name)
    if cell is None:
        return "not in the capability matrix"
    if not cell.supported:
        return f"not supported ({cell.why})"
    return None


def model_problems(model: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, why) for each field of a model the runtime cannot train, in field order.
    `model` is `training.json`'s `model`: the catalog's architecture as a mapping, as
    `hetc compile` writes it. The runtime refuses these at start-up; `hetc compile` refuses
    them first, at the spec's position, so that no launch files are written for a model that
    cannot start. What each field would need: token embeddings as wide as the model
    (`embedding_projection`, OPT-350M's 512 into 1024), and global attention in every layer
    (`local_attention_window`, `attention_pattern`, GPT-Neo's local layers)."""
    problems = []
    if model.get("embedding_projection") is not None:
        problems.append(
            (
                "embedding_projection",
                "not supported by the runtime (token embeddings must be as wide as hidden)",
            )
        )
    if model.get("local_attention_window") is not None:
        problems.append(
            ("local_attention_window", "local attention is not supported by the runtime")
        )
    if any(kind != "global" for kind in model.get("attention_pattern") or ()):
        problems.append(("attention_pattern", "the runtime supports global attention only"))
    return problems
