"""The traffic ledger against hand arithmetic: the byte conventions per collective, the
runtime's parameter contract counted without torch, DeepSpeed's bucket cuts, the zone-to-zone
bytes the simulator bills, and the byte sizes the planner reads. (That the ledger is what the
runtime really sends is tests/test_runtime_traffic.py's job.)"""

from __future__ import annotations

from dataclasses import asdict
from fractions import Fraction

import pytest

from hetc.catalog import models
from hetc.costmodel import traffic
from hetc.costmodel.memory import StageShape, stage_parameters_per_rank
from hetc.costmodel.planning import PlanningModel
from hetc.costmodel.simulate import simulate
from hetc.costmodel.traffic import (
    Call,
    activation_bytes,
    boundary_element_bytes,
    gradient_element_bytes,
    iteration_ledger,
    rank_bytes,
    received_bytes,
    sent_bytes,
    stage_parameters,
)
from hetc.plan import Node, Pipeline, Plan, Replica, Stage
from hetc.schema import Spec, check_text

TWO_ZONES = """\
version: 1
name: traffic
model:
  architecture: {{layers: 4, hidden: 32, heads: 4, ffn: 64, vocab: 200, max_positions: 32,
                 tied_embeddings: {tied}}}
training: {{global_batch_size: 4, seq_len: 16, precision: {precision}, zero_stage: {zero}}}
devices:
  - {{name: CPU, kind: cpu, memory: 2GiB, peak_tflops: {{fp32: 0.05, bf16: 0.05, fp16: 0.05}},
     memory_bandwidth: 10GB/s, intra_node: {{kind: shared-memory, bandwidth: 5GB/s}},
     source: "nominal"}}
zones:
  - name: a
    pools: [{{device: CPU, quota: 8, gpus_per_node: 4}}]
  - name: b
    pools: [{{device: CPU, quota: 8, gpus_per_node: 4}}]
"""
BLOCK = 64 + 3 * (32 * 32 + 32) + (32 * 32 + 32) + 64 + (64 * 32 + 64) + (32 * 64 + 32)
"""One block of the spec's model: two layernorms, q/k/v and output with biases, fc1, fc2."""
TABLE = 256 * 32
"""The token table: vocabulary 200 padded to 256 rows."""


def _spec(*, precision: str = "fp32", zero: int = 0, tied: bool = False) -> Spec:
    text = TWO_ZONES.format(precision=precision, zero=zero, tied="true" if tied else "false")
    result = check_text(text, "traffic.yaml")
    assert result.spec is not None, [d.format() for d in result.diagnostics]
    return result.spec


def _node(zone: str) -> Node:
    return Node(id=f"cpu@{zone}/n0", zone=zone, region="r", pool="cpu", device="CPU", devices=4)


def _two_stages(microbatches: int = 4, replicas: int = 1) -> Plan:
    """Stage 0 (blocks 0, 1) in zone a, stage 1 (blocks 2, 3) in zone b, TP 1, D `replicas`
    (each pipeline with an equal share of the microbatches)."""
    a, b = _node("a"), _node("b")

    def on(node: Node, local: int) -> Replica:
        return Replica(device="CPU", tp=1, node=node.id, local_ranks=(local,))

    return Plan(
        spec_hash="0" * 64,
        hetc_version="0",
        model_blocks=4,
        global_batch_size=microbatches,
        microbatch_size=1,
        nodes=(a, b),
        stages=(
            Stage(first_block=0, end_block=2, replicas=tuple(on(a, r) for r in range(replicas))),
            Stage(first_block=2, end_block=4, replicas=tuple(on(b, r) for r in range(replicas))),
        ),
        pipelines=tuple(
            Pipeline(replicas=(r, r), microbatches=microbatches // replicas)
            for r in range(replicas)
        ),
    )


def test_collectives_move_the_ring_algorithms_bytes() -> None:
    """All-reduce 2(n-1)/n S each way, all-gather (n-1) S_in, a broadcast chain from the
    root, send and receive S, a group of one nothing."""
    ring = (3, 1, 7, 5)
    reduce = Call("all_reduce", ring, 25, 4)  # S = 100 bytes
    assert [sent_bytes(reduce, r) for r in ring] == [150] * 4
    assert [received_bytes(reduce, r) for r in ring] == [150] * 4
    gather = Call("all_gather", (0, 1, 2), 5, 2)  # 10 bytes in, 30 gathered
    assert [sent_bytes(gather, r) for r in (0, 1, 2)] == [20, 20, 20]
    assert [received_bytes(gather, r) for r in (0, 1, 2)] == [20, 20, 20]
    chain = Call("broadcast", (4, 6, 8), 3, 4, root=6)  # 6 -> 8 -> 4
    assert [sent_bytes(chain, r) for r in (4, 6, 8)] == [0, 12, 12]
    assert [received_bytes(chain, r) for r in (4, 6, 8)] == [12, 0, 12]
    message = Call("send", (2, 9), 10, 2)
    assert (sent_bytes(message, 2), received_bytes(message, 2)) == (20, 0)
    receipt = Call("recv", (2, 9), 10, 2)
    assert (sent_bytes(receipt, 9), received_bytes(receipt, 9)) == (0, 20)
    assert traffic.flows(reduce, 7) == [(5, 150)] and traffic.flows(chain, 8) == [(4, 12)]
    alone = Call("all_reduce", (4,), 1000, 4)
    assert sent_bytes(alone, 4) == received_bytes(alone, 4) == 0
    assert sent_bytes(Call("all_reduce", (0, 1, 2), 1, 8), 0) == Fraction(32, 3)


def test_element_sizes_follow_the_precision_rule() -> None:
    """Boundaries in the compute type; gradients in fp16 under fp16, else fp32."""
    assert [boundary_element_bytes(p) for p in ("fp32", "bf16", "fp16")] == [4, 2, 2]
    assert [gradient_element_bytes(p) for p in ("fp32", "bf16", "fp16")] == [4, 4, 2]
    assert activation_bytes(microbatch=2, seq_len=16, hidden=32, precision="bf16") == 2048


def test_stage_parameters_count_the_runtime_contract_by_hand() -> None:
    """Blocks of 8544, the padded table, 32 learned positions, a final layernorm."""
    arch = _spec(tied=True).model
    first = stage_parameters(arch, 0, 2, ["embedding"])
    assert sum(p.elements for p in first) == TABLE + 32 * 32 + 2 * BLOCK == 26304
    last = stage_parameters(arch, 2, 4, ["final-norm", "head", "token-table-copy"])
    assert sum(p.elements for p in last) == TABLE + 2 * BLOCK + 64 == 25344
    assert [p.local(2) for p in last][:2] == [TABLE // 2, 32]  # table split, norm whole


BUILT = sorted(
    name
    for name, preset in models().items()
    if preset.architecture.embedding_projection is None
    and preset.architecture.local_attention_window is None
    and set(preset.architecture.attention_pattern) == {"global"}
)
"""Catalog models the runtime builds (it refuses embedding projections and local attention)."""


@pytest.mark.parametrize("name", BUILT)
def test_stage_parameters_equal_the_runtimes_param_specs(name: str) -> None:
    """Names, whole sizes and TP splits equal `hetc.runtime.model.param_specs` for every
    catalog model the runtime builds (torch only reads the contract here)."""
    from hetc.runtime.model import ModelConfig, param_specs

    arch = models()[name].architecture
    config = ModelConfig.from_dict(asdict(arch))
    last = arch.layers
    for first_block, end_block, holds in [
        (0, 1, ["embedding"]),
        (1, last, ["final-norm", "head"]),
        (0, last, ["embedding", "final-norm", "head"]),
    ]:
        if arch.tied_embeddings and holds == ["final-norm", "head"]:
            holds = [*holds, "token-table-copy"]
        specs = param_specs(config, first_block, end_block, holds)
        counted = stage_parameters(arch, first_block, end_block, holds)
        expected = [(s.name, _product(s.full_shape), s.tp_dim is not None) for s in specs]
        assert [(p.name, p.elements, p.sharded) for p in counted] == expected


def _product(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def test_deepspeed_buckets_are_cut_as_its_flush_rule_cuts_them() -> None:
    """Gradients of 5, 3, 10 and 2 elements, a bucket of 8, two partitions of 10: ZeRO-1
    (parameter order) reduces 8, then the 10 alone (its slices 2 + 8 exceed the bucket
    together), then 2; ZeRO-2 (reversed) reduces 2, the 10, then 3 + 5."""
    local = [5, 3, 10, 2]
    assert traffic._bucket_sizes(local, reverse=False, bucket=8, dp=2) == [8, 10, 2]
    assert traffic._bucket_sizes(local, reverse=True, bucket=8, dp=2) == [2, 10, 8]
    # a parameter of 30 over partitions of 10, a bucket of 15: the first two slices go out
    # together (20 > 15), the last alone
    assert traffic._bucket_sizes([30], reverse=False, bucket=15, dp=3) == [20, 10]


def test_two_stages_in_two_zones_bill_boundaries_and_control_values() -> None:
    """Zone a sends 4 microbatches of fp32 activations (16 x 32 x 4 bytes) and zone b their
    gradients back; the clip norm and the global loss (8 bytes each) and the checkpoint flags
    (32 bytes) ring once each way between the two ranks."""
    plan, spec = _two_stages(), _spec()
    crossing = 4 * 16 * 32 * 4 + 8 + 8 + 32
    assert simulate(plan, spec).traffic == {("a", "b"): crossing, ("b", "a"): crossing}
    bf16 = simulate(plan, _spec(precision="bf16")).traffic
    assert bf16 == {("a", "b"): crossing - 4 * 16 * 32 * 2, ("b", "a"): crossing - 4 * 16 * 32 * 2}


def test_a_tied_table_and_zero_2_reductions_are_billed_as_the_ledger_lists_them() -> None:
    """Tied: both ends all-reduce the table's gradient (fp32 under bf16), 2 x 1/2 x 8192 x 4
    bytes each way. ZeRO-2 with two replicas per stage reduces its bucket (the first stage's
    gradients, fp32) after each of a pipeline's two backwards; with one replica per stage
    DeepSpeed's reductions, its tied-table assembly and its overflow check are over groups
    of one, which the runtime does not make: only boundaries and the control values move."""
    plan = _two_stages()
    untied = simulate(plan, _spec(precision="bf16")).traffic
    tied = simulate(plan, _spec(precision="bf16", tied=True)).traffic
    assert tied[("a", "b")] - untied[("a", "b")] == TABLE * 4
    ledger = iteration_ledger(_two_stages(replicas=2), _spec(precision="bf16", zero=2))
    buckets = [e for e in ledger[0] if e.what == "ZeRO reduce bucket"]
    assert [(e.call.elements, e.call.element_bytes, e.count) for e in buckets] == [
        (TABLE + 32 * 32 + 2 * BLOCK, 4, 2)
    ]
    ledger = iteration_ledger(plan, _spec(precision="bf16", zero=2))
    made = traffic.calls(ledger[0])
    assert made[Call("send", (0, 1), 16 * 32, 2)] == made[Call("recv", (1, 0), 16 * 32, 2)] == 4
    assert not [c for c in made if c.kind not in ("send", "recv") and len(c.group) == 1]
    assert made[Call("all_reduce", (0, 1), 6, 8)] == 1  # loss, clip norm, 4 checkpoint flags
    sent, received = rank_bytes(ledger)[0]
    assert sent == received == 4 * 16 * 32 * 2 + 6 * 8


def test_the_planner_reads_its_byte_sizes_from_the_ledger_rules() -> None:
    """bf16: a microbatch's boundary tensor at 2 bytes per element, a stage's gradient at 4."""
    spec = _spec(precision="bf16")
    model = PlanningModel(spec)
    assert model.activation_bytes(2) == 2 * 16 * 32 * 2
    shape = StageShape(
        first_block=0,
        end_block=2,
        has_embedding=True,
        has_head=False,
        tp=1,
        microbatch=1,
        in_flight=1,
    )
    assert model.gradient_bytes((0, 2, True, False), 1) == 4 * stage_parameters_per_rank(
        spec.model, shape
    )
