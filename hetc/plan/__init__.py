"""The Plan IR: what the solver returns and every emitter and the runtime read.

The plan's typed form and consistency checks (`ir`), its canonical JSON and JSON Schema
(`codec`), and the capability matrix (`capability`). Standard library only; the runtime imports
hetc only through this package.
"""

from hetc.plan.capability import (
    WAVE_1,
    Cell,
    capability_issues,
    capability_problems,
    cells_used,
    model_problems,
)
from hetc.plan.codec import PlanFormatError, plan_from_json, plan_of, plan_schema, plan_to_json
from hetc.plan.ir import (
    PLAN_FORMAT_VERSION,
    Node,
    Pipeline,
    Plan,
    PlanIssue,
    PlanPath,
    Predictions,
    Replica,
    Stage,
    plan_issues,
    plan_problems,
)
from hetc.plan.rankfiles import RankFileError, read_cluster_file, read_rank_file

__all__ = [
    "PLAN_FORMAT_VERSION",
    "WAVE_1",
    "Cell",
    "Node",
    "Pipeline",
    "Plan",
    "PlanFormatError",
    "PlanIssue",
    "PlanPath",
    "Predictions",
    "RankFileError",
    "Replica",
    "Stage",
    "capability_issues",
    "capability_problems",
    "cells_used",
    "model_problems",
    "plan_from_json",
    "plan_issues",
    "plan_of",
    "plan_problems",
    "plan_schema",
    "plan_to_json",
    "read_cluster_file",
    "read_rank_file",
]
