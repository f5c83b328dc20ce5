"""A rank file's microbatch schedule: a rule of constant size that the runtime expands into the
same 1F1B order the rank files used to list step by step (`one_f_one_b_order`).

Mutation check (done by hand): making `schedule_steps` run the steady phase one microbatch
ahead (`k + warmup + 1`) fails `test_runtime_order_equals_the_explicit_list` and
`test_steps_are_a_1f1b_order`.
"""

from __future__ import annotations

import json
import random

import pytest
from runtime_harness import node, replica, small_plan
from test_plan_topology import docstring_plan

from hetc.plan import Pipeline, Plan, Stage
from hetc.plan.topology import (
    one_f_one_b_order,
    rank_record,
    schedule_record,
    schedule_steps,
    topology_of,
)


def pipelines_plan(stages: int, microbatches: list[int]) -> Plan:
    """One A100 node per pipeline, stage i on its device i (TP 1), blocks one per stage."""
    nodes = tuple(node(f"a100@z/n{p}", stages) for p in range(len(microbatches)))
    return Plan(
        spec_hash="0" * 64,
        hetc_version="0.1.0",
        model_blocks=stages,
        global_batch_size=sum(microbatches),
        microbatch_size=1,
        nodes=nodes,
        stages=tuple(
            Stage(
                first_block=i,
                end_block=i + 1,
                replicas=tuple(replica(n.id, i) for n in nodes),
            )
            for i in range(stages)
        ),
        pipelines=tuple(
            Pipeline(replicas=(p,) * stages, microbatches=m) for p, m in enumerate(microbatches)
        ),
    )


PLANS = {
    "docstring: mixed TP, 18 and 14 microbatches": docstring_plan(),
    "small: 2 and 1 microbatches": small_plan(),
    "8 stages, 1000 and 997 microbatches": pipelines_plan(8, [1000, 997]),
    "6 stages, fewer microbatches than stages": pipelines_plan(6, [3, 1, 2]),
    "one stage, 4096 microbatches": pipelines_plan(1, [4096]),
}


def _records(plan: Plan) -> list[dict[str, object]]:
    topology = topology_of(plan, tied_embeddings=True)
    return [
        rank_record(plan, topology, p, deepspeed_config="deepspeed/x.json")
        for p in topology.processes
    ]


@pytest.mark.parametrize("case", sorted(PLANS))
def test_runtime_order_equals_the_explicit_list(case: str) -> None:
    """For every rank, the steps the runtime expands from the rank file are the explicit 1F1B
    list of its stage and its pipeline's microbatches, read back through JSON."""
    plan = PLANS[case]
    for record in _records(plan):
        stage, pipeline = record["stage"], record["pipeline"]
        assert isinstance(stage, int) and isinstance(pipeline, int)
        explicit = one_f_one_b_order(stage, len(plan.stages), plan.pipelines[pipeline].microbatches)
        schedule = json.loads(json.dumps(record["schedule"]))
        assert list(schedule_steps(schedule)) == explicit, (case, record["rank"])


def test_steps_are_a_1f1b_order() -> None:
    """Against the definition: every microbatch forwards once then backwards once, both in
    order; `warmup` forwards lead; at most warmup + 1 microbatches are in flight; and while
    forwards remain, the backward of k is followed by the forward of k + warmup + 1."""
    generator = random.Random(7)
    for _ in range(300):
        stages = generator.randint(1, 12)
        stage = generator.randrange(stages)
        microbatches = generator.randint(1, 40)
        schedule = schedule_record(stage, stages, microbatches)
        warmup = min(stages - stage - 1, microbatches)
        assert schedule == {"rule": "1f1b", "warmup": warmup, "microbatches": microbatches}
        steps = list(schedule_steps(schedule))
        forwards = [k for op, k in steps if op == "F"]
        backwards = [k for op, k in steps if op == "B"]
        assert forwards == backwards == list(range(microbatches))
        assert steps[:warmup] == [("F", k) for k in range(warmup)]
        in_flight = 0
        for op, _ in steps:
            in_flight += 1 if op == "F" else -1
            assert 0 <= in_flight <= warmup + 1
        for i, (op, k) in enumerate(steps[:-1]):
            if op == "B" and k + warmup + 1 < microbatches:
                assert steps[i + 1] == ("F", k + warmup + 1)


def test_rank_file_size_does_not_grow_with_microbatches() -> None:
    """A rank file with 40,000 microbatches per pipeline is as long as one with 4, up to the
    digits of the numbers that say so (it listed 80,000 steps before)."""
    few = _records(pipelines_plan(4, [4, 4]))
    many = _records(pipelines_plan(4, [40_000, 40_000]))
    for small, large in zip(few, many, strict=True):
        grown = len(json.dumps(large, sort_keys=True)) - len(json.dumps(small, sort_keys=True))
        assert 0 < grown <= 30


def test_an_unknown_rule_is_refused() -> None:
    """A schedule of a rule this runtime does not know stops before the first step."""
    with pytest.raises(ValueError, match="unknown schedule rule 'gpipe' \\(known: 1f1b\\)"):
        next(schedule_steps({"rule": "gpipe", "warmup": 0, "microbatches": 2}))
