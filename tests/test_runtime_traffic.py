"""What the runtime sends is what the cost model prices: every torch.distributed call of one
iteration, recorded on every rank of a real multi-process run (tests/runtime_traffic_worker.py
wraps the functions in the test's processes; production code has no hook), equals
`hetc.costmodel.traffic.iteration_ledger`'s calls for the same plan and spec: the same
multiset of (kind, group, elements, bytes per element, root, reduction) per rank, and so the
same bytes sent and received per rank.

The plans cover P > 1, D > 1, mixed TP degrees in a stage, a TP-1 stage sending to a TP-2
one (also with a boundary tensor of an odd element count, whose chunks are padded), tied
embeddings, activation recomputation, ZeRO 0, 1 and 2, and fp32, bf16 and fp16.
fp16 runs on ZeRO 0 only: DeepSpeed refuses fp16 on this CPU (no oneDNN fp16 kernels), so
the ZeRO 1/2 fp16 path is priced from DeepSpeed's source (fp16 reduces in fp16 there too).

Mutation check, done and kept as a test: pricing fp32 boundary activations at 2 bytes per
element (`boundary_element_bytes` returning 2, the bug issue 25 describes in reverse) makes
the recorded calls differ from the ledger on every rank that sends or receives a boundary
tensor (`test_an_fp32_boundary_priced_at_two_bytes_is_caught`, on the same recording).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from runtime_harness import launch, ranks_in_plan_order
from runtime_training import ADAMW, oracle_spec, write_compiled
from test_runtime_train import MIXED_TP, NEIGHBOURS, PIPELINES

from hetc.costmodel import traffic
from hetc.costmodel.traffic import Call, Entry, Ledger, iteration_ledger, rank_bytes
from hetc.plan import Plan

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent
STEPS = 3
"""Steps 0, 1 and 2 are each compared: the first iteration sends what the others do."""

Key = tuple[Any, ...]


def _record(plan: Plan, spec_kwargs: dict[str, Any], tmp: Path) -> dict[int, list[dict[str, Any]]]:
    """Run `plan` for STEPS steps with every call recorded: each rank's calls, step-tagged."""
    spec = oracle_spec(batch=plan.global_batch_size, **spec_kwargs)
    out, records = tmp / "out", tmp / "records"
    out.mkdir()
    topology = write_compiled(plan, spec, out)
    worker = [sys.executable, str(HERE / "runtime_traffic_worker.py"), str(records)]
    ranks = ranks_in_plan_order(topology, command=[*worker, "--steps", str(STEPS)])
    for outcome in launch(ranks, out, tmp / "run", timeout=120):
        assert outcome.returncode == 0, outcome.stderr[-3000:]
    return {
        rank: json.loads((records / f"rank-{rank:05d}.json").read_text())
        for rank in range(plan.world_size)
    }


def _observed_call(record: dict[str, Any], rank: int) -> Call:
    """A recorded call as the ledger writes it (point to point: (sender, receiver))."""
    kind = record["kind"]
    assert kind in ("send", "recv", "all_reduce", "all_gather", "broadcast"), record
    group = tuple(record["group"])
    if kind == "send":
        group = (rank, record["peer"])
    elif kind == "recv":
        group = (record["peer"], rank)
    op = record.get("op", "SUM").lower() if kind == "all_reduce" else None
    return Call(
        kind, group, record["elements"], record["element_bytes"], root=record.get("root"), op=op
    )


def _key(call: Call) -> Key:
    """What must match: a collective's group as a set (torch lists a group's ranks in its own
    order), a point-to-point's (sender, receiver) as it is."""
    group = call.group if call.kind in ("send", "recv") else tuple(sorted(call.group))
    op = (call.op or "sum") if call.kind == "all_reduce" else None
    return (call.kind, group, call.elements, call.element_bytes, call.root, op)


def _observed(records: dict[int, list[dict[str, Any]]], step: int) -> Ledger:
    return {
        rank: tuple(
            Entry(_observed_call(r, rank), 1, "observed") for r in calls if r["step"] == step
        )
        for rank, calls in records.items()
    }


def _keys(ledger: Ledger) -> dict[int, Counter[Key]]:
    return {
        rank: Counter({_key(c): n for c, n in traffic.calls(entries).items()})
        for rank, entries in ledger.items()
    }


def _assert_priced_exactly(
    plan: Plan, spec_kwargs: dict[str, Any], records: dict[int, list[dict[str, Any]]]
) -> Ledger:
    """Every step's calls on every rank equal the ledger's, and so do the bytes per rank."""
    spec = oracle_spec(batch=plan.global_batch_size, **spec_kwargs)
    ledger = iteration_ledger(plan, spec)
    assert sorted(ledger) == sorted(records)
    expected = _keys(ledger)
    for step in range(STEPS):
        observed = _observed(records, step)
        for rank in ledger:
            seen = _keys(observed)[rank]
            missing, extra = expected[rank] - seen, seen - expected[rank]
            assert not missing and not extra, (step, rank, missing, extra)
        assert rank_bytes(observed) == rank_bytes(ledger), step
    sent = sum((s for s, _ in rank_bytes(ledger).values()), Fraction(0))
    assert sent == sum((r for _, r in rank_bytes(ledger).values()), Fraction(0)) > 0
    return ledger


CASES = {
    # P 2, TP 1 -> TP 2 across the boundary, tied, recomputation, clip: hetc's fp16 path
    "zero0-fp16-neighbours": (NEIGHBOURS, {"precision": "fp16", "clip": 1.0, "recompute": True}),
    # TP 1 -> TP 2 with a boundary of 63 x 65 elements: chunks padded to 2048 each
    "zero0-fp32-odd-neighbours": (NEIGHBOURS, {"hidden": 65, "seq": 63}),
    # one stage, a TP-1 and a TP-2 replica (mixed TP, chunked groups, uneven shares)
    "zero0-bf16-mixed-tp": (MIXED_TP, {"precision": "bf16"}),
    # P 2 x D 2, tied over four holders, AdamW with a clip
    "zero0-fp32-pipelines": (PIPELINES, {"optimizer": ADAMW, "clip": 0.05}),
    # ZeRO-1 engines: one bucket reduction per iteration, no overflow check in fp32
    "zero1-fp32-pipelines": (PIPELINES, {"zero": 1}),
    # ZeRO-2 engines: a reduction per backward, pads for the shorter pipeline
    "zero2-bf16-pipelines": (PIPELINES, {"zero": 2, "precision": "bf16", "clip": 1.0}),
    # ZeRO-2 engines with TP 2 and one replica (groups of one, the TP group's checks), and
    # recomputation with dropout (the MLP's all-reduce recomputed too)
    "zero2-bf16-neighbours": (
        NEIGHBOURS,
        {"zero": 2, "precision": "bf16", "recompute": True, "dropout": 0.1},
    ),
}


_RECORDED: dict[str, dict[int, list[dict[str, Any]]]] = {}


@pytest.fixture
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The recording of a case, made once per session (the mutation check reads one again)."""

    def get(case: str) -> dict[int, list[dict[str, Any]]]:
        if case not in _RECORDED:
            plan, spec_kwargs = CASES[case]
            _RECORDED[case] = _record(plan, spec_kwargs, tmp_path_factory.mktemp(case))
        return _RECORDED[case]

    return get


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_call_of_an_iteration_is_priced_exactly(recorded: Any, case: str) -> None:
    """The recorded calls of each of three iterations equal the ledger's, rank by rank."""
    plan, spec_kwargs = CASES[case]
    ledger = _assert_priced_exactly(plan, spec_kwargs, recorded(case))
    kinds = {e.call.kind for entries in ledger.values() for e in entries}
    assert {"send", "recv", "all_reduce"} <= kinds or plan is MIXED_TP


def test_an_fp32_boundary_priced_at_two_bytes_is_caught(
    recorded: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutation of issue 25 in reverse: fp32 boundary tensors priced at 2 bytes per
    element differ from what the runtime sends, on every rank with a boundary."""
    plan, spec_kwargs = CASES["zero0-fp32-pipelines"]
    records = recorded("zero0-fp32-pipelines")
    _assert_priced_exactly(plan, spec_kwargs, records)
    monkeypatch.setattr(traffic, "boundary_element_bytes", lambda precision: 2)
    with pytest.raises(AssertionError):
        _assert_priced_exactly(plan, spec_kwargs, records)
    spec = oracle_spec(batch=plan.global_batch_size, **spec_kwargs)
    wrong = _keys(iteration_ledger(plan, spec))
    observed = _keys(_observed(records, 1))
    assert all(wrong[rank] != observed[rank] for rank in observed)
