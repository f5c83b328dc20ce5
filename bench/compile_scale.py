"""`hetc compile` time at 1,000, 3,200 and 10,000 ranks.

Each case is Llama-7B in 4 pipeline stages of TP 2 on 8-GPU nodes, one pipeline per node, over
two pools of two zones (H100-80GB pipelines take 10 microbatches, A100-80GB pipelines 6:
uneven shares, so rank files differ). The plan is built directly (planning at this size is
`hetc plan`'s benchmark, not this one) and checked as `hetc compile --plan` checks a given plan;
then the timed part runs: `compile_given` (every file's bytes) and `write_output` (temporary
sibling directory, one sync, atomic rename). Nothing is asserted: the numbers are printed.

Usage: python bench/compile_scale.py [--ranks N ...] [--repeat K]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hetc.emit.compile import compile_given  # noqa: E402
from hetc.emit.output import write_output  # noqa: E402
from hetc.plan import Node, Pipeline, Plan, Replica, Stage, plan_to_json  # noqa: E402
from hetc.schema import Spec, check_text  # noqa: E402
from hetc.solver.given import check_given_plan  # noqa: E402

STAGES, TP, PER_NODE, BLOCKS = 4, 2, 8, 32
POOLS = (  # pool, device, zone, region, microbatches per pipeline, USD per GPU-hour
    ("h100-80gb", "H100-80GB", "us-central1-a", "us-central1", 10, 11.06),
    ("a100-80gb", "A100-80GB", "us-central1-b", "us-central1", 6, 5.07),
)


def pipelines_of(ranks: int) -> tuple[int, int]:
    """Pipelines on the first and the second pool: one per node, split in half."""
    if ranks % PER_NODE:
        raise ValueError(f"{ranks} ranks is not a whole number of {PER_NODE}-GPU nodes")
    nodes = ranks // PER_NODE
    return (nodes + 1) // 2, nodes // 2


def scale_spec(ranks: int) -> Spec:
    """The spec the plan of `ranks` ranks is compiled against (quotas exactly its nodes)."""
    counts = pipelines_of(ranks)
    batch = sum(n * pool[4] for n, pool in zip(counts, POOLS, strict=True))
    lines = [
        "version: 1",
        f"name: compile-scale-{ranks}",
        "model: {preset: Llama-7B}",
        f"training: {{global_batch_size: {batch}, seq_len: 2048, precision: bf16, zero_stage: 1}}",
        "objective: max_throughput",
        "zones:",
    ]
    for n, (_, device, zone, region, _, price) in zip(counts, POOLS, strict=True):
        lines += [
            f"  - name: {zone}",
            f"    region: {region}",
            f"    pools: [{{device: {device}, quota: {max(n, 1) * PER_NODE},"
            f" gpus_per_node: {PER_NODE}, price: {price} USD/h}}]",
        ]
    lines += [
        "network:",
        "  intra_zone: {bandwidth: 100Gbps, latency: 10us}",
        "  inter_zone: {bandwidth: 50Gbps, latency: 1ms}",
    ]
    checked = check_text("\n".join(lines) + "\n", f"compile-scale-{ranks}.yaml")
    assert checked.spec is not None, [d.format() for d in checked.errors]
    return checked.spec


def scale_plan(ranks: int) -> Plan:
    """`ranks` ranks: node k runs pipeline k, stage i on its devices 2i and 2i + 1."""
    nodes: list[Node] = []
    pipelines: list[Pipeline] = []
    for count, (pool, device, zone, region, microbatches, _) in zip(
        pipelines_of(ranks), POOLS, strict=True
    ):
        for k in range(count):
            nodes.append(
                Node(
                    id=f"{pool}@{zone}/n{k}",
                    zone=zone,
                    region=region,
                    pool=pool,
                    device=device,
                    devices=PER_NODE,
                )
            )
            replicas = (len(pipelines),) * STAGES
            pipelines.append(Pipeline(replicas=replicas, microbatches=microbatches))
    per_stage = BLOCKS // STAGES
    stages = tuple(
        Stage(
            first_block=i * per_stage,
            end_block=(i + 1) * per_stage,
            replicas=tuple(
                Replica(
                    device=node.device,
                    tp=TP,
                    node=node.id,
                    local_ranks=(TP * i, TP * i + 1),
                )
                for node in nodes
            ),
        )
        for i in range(STAGES)
    )
    return Plan(
        spec_hash="0" * 64,
        hetc_version="0",
        model_blocks=BLOCKS,
        global_batch_size=sum(p.microbatches for p in pipelines),
        microbatch_size=1,
        nodes=tuple(nodes),
        stages=stages,
        pipelines=tuple(pipelines),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="*", default=[1000, 3200, 10000])
    parser.add_argument("--repeat", type=int, default=1, help="timed compiles per size")
    args = parser.parse_args()
    for ranks in args.ranks:
        spec = scale_spec(ranks)
        given = check_given_plan(plan_to_json(scale_plan(ranks)), spec, file="plan.json")
        for attempt in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="hetc-compile-scale-") as scratch:
                start = time.perf_counter()
                compiled = compile_given(
                    spec,
                    given,
                    (),
                    spec_file_name="spec.yaml",
                    plan_file_name="plan.json",
                )
                built = time.perf_counter()
                write_output(
                    Path(scratch) / "out",
                    compiled.files,
                    executable=compiled.executable,
                    force=False,
                )
                done = time.perf_counter()
            size = sum(len(data) for data in compiled.files.values())
            print(
                f"ranks {ranks:6d}  attempt {attempt}  files {len(compiled.files):6d}"
                f"  bytes {size / 1e6:7.1f} MB  build {built - start:6.2f} s"
                f"  write {done - built:6.2f} s  total {done - start:6.2f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
