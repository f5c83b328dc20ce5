"""The Plan IR: consistency checks, canonical JSON, schema, capability matrix."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft7Validator

from hetc.draft07 import SUPPORTED
from hetc.plan import (
    WAVE_1,
    Node,
    Pipeline,
    Plan,
    PlanFormatError,
    Predictions,
    Replica,
    Stage,
    capability_issues,
    capability_problems,
    cells_used,
    plan_from_json,
    plan_issues,
    plan_problems,
    plan_schema,
    plan_to_json,
)

HASH = "0" * 64


def _worked_example() -> Plan:
    """The plan of hetc/plan/ir.py's docstring."""
    return Plan(
        spec_hash=HASH,
        hetc_version="0.1.0",
        model_blocks=24,
        global_batch_size=64,
        microbatch_size=2,
        nodes=(
            Node(id="v100@z/n0", zone="z", region="r", pool="v100", device="V100-16GB", devices=4),
            Node(id="a100@z/n0", zone="z", region="r", pool="a100", device="A100-40GB", devices=4),
            Node(id="a100@z/n1", zone="z", region="r", pool="a100", device="A100-40GB", devices=4),
        ),
        stages=(
            Stage(
                first_block=0,
                end_block=10,
                replicas=(
                    Replica(device="V100-16GB", tp=2, node="v100@z/n0", local_ranks=(0, 1)),
                    Replica(device="V100-16GB", tp=2, node="v100@z/n0", local_ranks=(2, 3)),
                ),
            ),
            Stage(
                first_block=10,
                end_block=24,
                replicas=(
                    Replica(device="A100-40GB", tp=4, node="a100@z/n0", local_ranks=(0, 1, 2, 3)),
                    Replica(device="A100-40GB", tp=2, node="a100@z/n1", local_ranks=(0, 1)),
                ),
            ),
        ),
        pipelines=(
            Pipeline(replicas=(0, 0), microbatches=18),
            Pipeline(replicas=(1, 1), microbatches=14),
        ),
    )


def test_worked_example_is_consistent() -> None:
    """The docstring's example has no problems and starts 10 processes."""
    plan = _worked_example()
    assert plan_problems(plan) == []
    assert plan.world_size == 10
    assert plan.node("a100@z/n1") is not None and plan.node("nope") is None


def _stage(plan: Plan, i: int, **changes: object) -> Plan:
    stages = list(plan.stages)
    stages[i] = dataclasses.replace(stages[i], **changes)  # type: ignore[arg-type]
    return dataclasses.replace(plan, stages=tuple(stages))


def _replica(plan: Plan, i: int, j: int, **changes: object) -> Plan:
    replicas = list(plan.stages[i].replicas)
    replicas[j] = dataclasses.replace(replicas[j], **changes)  # type: ignore[arg-type]
    return _stage(plan, i, replicas=tuple(replicas))


BROKEN = [
    ("gap", lambda p: _stage(p, 1, first_block=11), "stage 1: starts at block 11, not 10"),
    ("short", lambda p: _stage(p, 1, end_block=20), "stages end at block 20; the model has 24"),
    ("unknown node", lambda p: _replica(p, 0, 0, node="x"), "stage 0 replica 0: runs on unknown"),
    ("device", lambda p: _replica(p, 0, 0, device="T4"), "stage 0 replica 0: is T4 but node"),
    ("tp ranks", lambda p: _replica(p, 0, 0, tp=4), "TP 4 needs exactly 4 local ranks, got 2"),
    (
        "reuse",
        lambda p: _replica(p, 0, 1, local_ranks=(1, 2)),
        "stage 0 replica 1: device v100@z/n0#1 is already used by stage 0 replica 0",
    ),
    ("outside", lambda p: _replica(p, 0, 1, local_ranks=(3, 4)), "local rank 4 outside node"),
    (
        "batch",
        lambda p: dataclasses.replace(p, global_batch_size=66),
        "pipelines process 64 samples per iteration; the global batch is 66",
    ),
    (
        "path",
        lambda p: dataclasses.replace(p, pipelines=(Pipeline(replicas=(0,), microbatches=32),)),
        "pipeline 0: visits 1 stages, the plan has 2",
    ),
    (
        "index",
        lambda p: dataclasses.replace(
            p,
            pipelines=(
                Pipeline(replicas=(0, 2), microbatches=18),
                Pipeline(replicas=(1, 1), microbatches=14),
            ),
        ),
        "pipeline 0: stage 1 has no replica 2",
    ),
    (
        "unvisited",
        lambda p: dataclasses.replace(p, pipelines=(Pipeline(replicas=(0, 0), microbatches=32),)),
        "stage 0 replica 1: no pipeline runs",
    ),
]


@pytest.mark.parametrize(("case", "breaks", "message"), BROKEN, ids=[b[0] for b in BROKEN])
def test_inconsistent_plans_are_named(case: str, breaks: object, message: str) -> None:
    """Each kind of inconsistency is reported with its stage or pipeline."""
    problems = plan_problems(breaks(_worked_example()))  # type: ignore[operator]
    assert any(p.startswith(message) or message in p for p in problems), problems


ISSUE_PATHS = {
    "gap": ("stages", 1, "first_block"),
    "short": ("stages", 1, "end_block"),
    "unknown node": ("stages", 0, "replicas", 0, "node"),
    "device": ("stages", 0, "replicas", 0, "device"),
    "tp ranks": ("stages", 0, "replicas", 0, "local_ranks"),
    "reuse": ("stages", 0, "replicas", 1, "local_ranks", 0),
    "outside": ("stages", 0, "replicas", 1, "local_ranks", 1),
    "batch": ("pipelines",),
    "path": ("pipelines", 0, "replicas"),
    "index": ("pipelines", 0, "replicas", 1),
    "unvisited": ("stages", 0, "replicas", 1),
}


@pytest.mark.parametrize(("case", "breaks", "message"), BROKEN, ids=[b[0] for b in BROKEN])
def test_each_inconsistency_has_the_path_of_its_value(
    case: str, breaks: object, message: str
) -> None:
    """plan_issues puts each problem at the JSON path of the value a user would change
    (hand-picked per case), with plan_problems' message."""
    issues = plan_issues(breaks(_worked_example()))  # type: ignore[operator]
    assert [i.message for i in issues] == plan_problems(breaks(_worked_example()))  # type: ignore[operator]
    (issue,) = [i for i in issues if i.message.startswith(message) or message in i.message]
    assert issue.path == ISSUE_PATHS[case]


def test_canonical_json_round_trips_byte_for_byte() -> None:
    """to_json is deterministic, sorted and read back to an equal plan."""
    plan = dataclasses.replace(
        _worked_example(),
        predictions=Predictions(
            iteration_time=1.5,
            samples_per_second=42.7,
            tokens_per_second=87_449.6,
            achieved_flops=1.2e15,
            mfu=0.41,
            cost_per_iteration=0.02,
            egress_cost_per_iteration=0.0,
            peak_memory={"a100@z/n0#0": 3.2e10},
        ),
    )
    text = plan_to_json(plan)
    assert text == plan_to_json(plan) and text.endswith("\n")
    assert list(json.loads(text)) == sorted(json.loads(text))
    assert plan_from_json(text) == plan
    assert plan_to_json(plan_from_json(text)) == text


def test_reading_reports_schema_and_consistency_problems() -> None:
    """A malformed file lists schema violations; a well-formed inconsistent one, its problems."""
    data = json.loads(plan_to_json(_worked_example()))
    del data["nodes"][0]["zone"]
    data["microbatch_size"] = "2"
    with pytest.raises(PlanFormatError) as caught:
        plan_from_json(json.dumps(data))
    assert "nodes/0: violates `required` (zone)" in caught.value.problems
    assert "microbatch_size: violates `type`" in caught.value.problems
    inconsistent = json.loads(plan_to_json(_worked_example()))
    inconsistent["global_batch_size"] = 66
    with pytest.raises(PlanFormatError, match="the global batch is 66"):
        plan_from_json(json.dumps(inconsistent))
    with pytest.raises(PlanFormatError, match="not JSON"):
        plan_from_json("{")


def test_plan_schema_is_draft_07_in_the_supported_subset() -> None:
    """The plan schema is valid draft-07 and uses only keywords hetc's validator implements."""
    Draft7Validator.check_schema(plan_schema())

    def keywords(node: object) -> set[str]:
        if isinstance(node, dict):
            found = set(node)
            for key, child in node.items():
                if key == "properties":
                    for sub in child.values():
                        found |= keywords(sub)
                elif key not in ("const", "enum"):
                    found |= keywords(child)
            return found
        if isinstance(node, list):
            return set().union(*map(keywords, node)) if node else set()
        return set()

    assert keywords(plan_schema()) <= SUPPORTED


def test_capability_cells_of_the_worked_example() -> None:
    """Mixed TP in a stage runs with ZeRO 0 only; uneven shares are supported."""
    plan = _worked_example()
    assert cells_used(plan, zero_stage=0, precision="bf16") == [
        "precision/bf16",
        "uniform-tp-stage/zero-0",
        "mixed-tp-stage/zero-0",
        "uneven-batch-shares",
    ]
    assert capability_problems(plan, zero_stage=0, precision="bf16") == []
    assert capability_problems(plan, zero_stage=1, precision="bf16") == [
        "mixed-tp-stage/zero-1: not supported (replicas with different TP degrees cannot share a"
        " ZeRO partition)"
    ]
    (issue,) = capability_issues(plan, zero_stage=1, precision="bf16")
    assert issue.path == ("stages", 1), "stage 1 mixes TP 4 and TP 2; stage 0 does not"
    assert [issue.message] == capability_problems(plan, zero_stage=1, precision="bf16")
    assert capability_issues(plan, zero_stage=0, precision="bf16") == []


def test_asymmetric_replica_counts_are_refused_in_wave_1() -> None:
    """A replica shared by two pipelines is representable but not runnable yet."""
    plan = _worked_example()
    shared = dataclasses.replace(
        plan,
        pipelines=(
            Pipeline(replicas=(0, 0), microbatches=16),
            Pipeline(replicas=(1, 0), microbatches=8),
            Pipeline(replicas=(1, 1), microbatches=8),
        ),
    )
    assert plan_problems(shared) == []
    assert (
        "asymmetric-replica-counts: not supported"
        in capability_problems(shared, zero_stage=0, precision="fp16")[0]
    )
    assert not WAVE_1["asymmetric-replica-counts"].supported


@settings(max_examples=60, deadline=None)
@given(
    stages=st.integers(1, 4),
    replicas=st.integers(1, 3),
    tp=st.sampled_from([1, 2, 4]),
    shares=st.lists(st.integers(1, 9), min_size=3, max_size=3),
    mbs=st.integers(1, 4),
)
def test_generated_symmetric_plans_round_trip(
    stages: int, replicas: int, tp: int, shares: list[int], mbs: int
) -> None:
    """Any consistent symmetric plan survives JSON and stays consistent."""
    blocks = 4 * stages
    nodes = tuple(
        Node(id=f"p@z/n{k}", zone="z", region="r", pool="p", device="A100-40GB", devices=4)
        for k in range(stages * replicas)
    )
    plan = Plan(
        spec_hash=HASH,
        hetc_version="0.1.0",
        model_blocks=blocks,
        global_batch_size=sum(shares[:replicas]) * mbs,
        microbatch_size=mbs,
        nodes=nodes,
        stages=tuple(
            Stage(
                first_block=4 * i,
                end_block=4 * i + 4,
                replicas=tuple(
                    Replica(
                        device="A100-40GB",
                        tp=tp,
                        node=f"p@z/n{i * replicas + j}",
                        local_ranks=tuple(range(tp)),
                    )
                    for j in range(replicas)
                ),
            )
            for i in range(stages)
        ),
        pipelines=tuple(
            Pipeline(replicas=(j,) * stages, microbatches=shares[j]) for j in range(replicas)
        ),
    )
    assert plan_problems(plan) == []
    assert plan_from_json(plan_to_json(plan)) == plan


def test_reduce_bucket_never_exceeds_the_model() -> None:
    """DeepSpeed allocates the whole bucket, so a small model gets a bucket its own size."""
    from hetc.plan.settings import REDUCE_BUCKET_ELEMENTS, reduce_bucket_elements

    assert reduce_bucket_elements(331_000_000_000) == REDUCE_BUCKET_ELEMENTS
    assert reduce_bucket_elements(1_234) == 1_234
    assert reduce_bucket_elements(0) == 1
