"""Canonical JSON for plans, and reading it back with every problem reported.

Canonical means: keys sorted, two-space indent, shortest round-tripping floats, a final newline
- so the same plan always serialises to the same bytes (DESIGN: same spec in, byte-identical
plan out) and a plan file diffs cleanly.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from functools import cache
from importlib import resources
from typing import Any

from hetc.draft07 import Validator
from hetc.plan.canonical import canonical_json_text
from hetc.plan.ir import Node, Pipeline, Plan, Predictions, Replica, Stage, plan_problems


class PlanFormatError(ValueError):
    """A plan file that is not a valid plan; `problems` lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@cache
def plan_schema() -> dict[str, Any]:
    """The plan's JSON Schema (draft-07), shipped beside this module."""
    text = resources.files(__package__).joinpath("plan.schema.json").read_text(encoding="utf-8")
    loaded = json.loads(text)
    assert isinstance(loaded, dict)
    return loaded


def plan_to_json(plan: Plan) -> str:
    """The plan's canonical JSON text."""
    return canonical_json_text(asdict(plan)) + "\n"


def plan_from_json(text: str) -> Plan:
    """Read a plan, checking the schema and then the plan's own consistency."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanFormatError([f"not JSON: {exc}"]) from None
    structural = [
        f"{'/'.join(map(str, e.path)) or '(root)'}: violates `{e.keyword}`"
        + (f" ({e.detail})" if e.detail else "")
        for e in Validator(plan_schema()).iter_errors(data)
    ]
    if structural:
        raise PlanFormatError(structural)
    plan = plan_of(data)
    problems = plan_problems(plan)
    if problems:
        raise PlanFormatError(problems)
    return plan


def plan_of(data: dict[str, Any]) -> Plan:
    """The typed plan of JSON data that conforms to the plan schema (not yet checked for
    consistency: see `plan_problems`)."""
    prediction = data["predictions"]
    return Plan(
        version=data["version"],
        spec_hash=data["spec_hash"],
        hetc_version=data["hetc_version"],
        model_blocks=data["model_blocks"],
        global_batch_size=data["global_batch_size"],
        microbatch_size=data["microbatch_size"],
        model=data.get("model"),
        seq_len=data.get("seq_len"),
        precision=data.get("precision"),
        nodes=tuple(Node(**n) for n in data["nodes"]),
        stages=tuple(
            Stage(
                first_block=s["first_block"],
                end_block=s["end_block"],
                replicas=tuple(
                    Replica(**{**r, "local_ranks": tuple(r["local_ranks"])}) for r in s["replicas"]
                ),
            )
            for s in data["stages"]
        ),
        pipelines=tuple(
            Pipeline(replicas=tuple(p["replicas"]), microbatches=p["microbatches"])
            for p in data["pipelines"]
        ),
        predictions=None if prediction is None else Predictions(**prediction),
    )
