"""Shared by the calibration tests: a small CPU spec, a measured-looking profile of it, plans of
fixed shape, and runs made from a known "true" model (the oracle: calibrating against a run
that a scaled model produced must recover the scale)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from hetc.costmodel.calibrate import Prediction, analytical_profile, predict
from hetc.costmodel.measured import RankMeasurement, RunMeasurement
from hetc.costmodel.planning import PlanningModel, Shape
from hetc.costmodel.profile import LayerMemory, LayerProfile, fit_bandwidth
from hetc.plan import Plan
from hetc.plan.topology import plan_hash
from hetc.schema import Spec, check_text, spec_hash
from hetc.solver.build import build_plan

DEVICE = "LOCAL-CPU"


def spec_text(
    *,
    zero_stage: int = 0,
    tied: bool = True,
    checkpointing: bool = False,
    profile: str | None = None,
) -> str:
    profiles = f"profiles: [{profile}]\n" if profile else ""
    return f"""version: 1
name: calibration-test
model:
  architecture: {{layers: 4, hidden: 64, heads: 4, ffn: 256, vocab: 512, max_positions: 128,
                 tied_embeddings: {str(tied).lower()}}}
training:
  global_batch_size: 8
  seq_len: 64
  precision: fp32
  optimizer: {{type: adamw, lr: 1.0e-3}}
  zero_stage: {zero_stage}
  activation_checkpointing: {str(checkpointing).lower()}
devices:
  - name: {DEVICE}
    kind: cpu
    memory: 2GiB
    peak_tflops: {{fp32: 0.05}}
    memory_bandwidth: 10GB/s
    intra_node: {{kind: shared-memory, bandwidth: 5GB/s}}
    price: 0 USD/h
    source: "a test device"
zones:
  - name: localhost
    pools:
      - {{device: {DEVICE}, quota: 4, gpus_per_node: 4}}
{profiles}"""


def make_spec(**options: object) -> Spec:
    checked = check_text(spec_text(**options))  # type: ignore[arg-type]
    assert checked.spec is not None, checked.diagnostics
    return checked.spec


def measured_profile(spec: Spec) -> LayerProfile:
    """What `hetc profile measure` could have written: times, activation bytes per layer and
    curved bandwidth fits (gloo-like: bandwidth grows with message size)."""
    base = analytical_profile(spec, DEVICE)
    layers = base.layer_indices()
    memory = {
        tp: {
            i: LayerMemory(
                weight_bytes=1e5 / tp,
                activation_bytes={m: (3e5 + 1e4 * i) * m / tp for m in (1, 2, 4, 8)},
            )
            for i in layers
        }
        for tp in (1, 2, 4)
    }
    sizes = (4096.0, 65536.0, 1048576.0, 16777216.0)
    network = {
        "intra_node": {
            "all_reduce": {
                2: fit_bandwidth([(s, 2e8 * (s / 4096) ** 0.4) for s in sizes]),
                4: fit_bandwidth([(s, 1.5e8 * (s / 4096) ** 0.4) for s in sizes]),
            },
            "p2p": {2: fit_bandwidth([(s, 4e8 * (s / 4096) ** 0.35) for s in sizes])},
        }
    }
    return replace(base, memory=memory, network=network, source="<measured test profile>")


def fixed_plan(
    spec: Spec, profiles: list[LayerProfile], boundaries: tuple[int, ...], replicas: int, mbs: int
) -> Plan:
    """One plan of the given shape, every replica TP 1 (as bench/fidelity.py builds them)."""
    model = PlanningModel(spec, profiles=profiles)
    kind = next(k.index for k in model.kinds if k.tp == 1)
    assignment = tuple(((kind, replicas),) for _ in range(len(boundaries) - 1))
    return build_plan(
        model, Shape(mbs, boundaries, replicas), assignment, spec_hash=spec_hash(spec)
    )


def run_of(prediction: Prediction, plan: Plan) -> RunMeasurement:
    """The run a model that predicts `prediction` exactly would measure."""
    total = prediction.iteration_time
    return RunMeasurement(
        run_dir="<synthetic>",
        plan_hash=plan_hash(plan),
        iteration_time=total,
        steps=tuple(range(3, 10)),
        ranks=tuple(
            RankMeasurement(
                rank=r.rank,
                seconds=total,
                compute=r.compute,
                communication=r.communication,
                idle=total - r.compute - r.communication,
                peak_bytes=r.peak_bytes,
            )
            for r in prediction.ranks
        ),
    )


def true_run(plan: Plan, spec: Spec, truth: list[LayerProfile]) -> RunMeasurement:
    return run_of(predict(plan, spec, truth), plan)


def write_run(
    run_dir: Path,
    out_dir: Path,
    run: RunMeasurement,
    *,
    steps: int = 10,
    tracked_slower: float = 5.0,
) -> None:
    """`run` as the runtime would leave it in `run_dir`: start-up records naming `out_dir`,
    and per rank `steps` lines of the same numbers, the first two memory-tracked (peak bytes
    set) and `tracked_slower` times slower, as on CPU."""
    (run_dir / "startup").mkdir(parents=True)
    (run_dir / "metrics").mkdir()
    for rank in run.ranks:
        record = {"rank": rank.rank, "out_dir": str(out_dir), "plan_hash": run.plan_hash}
        (run_dir / "startup" / f"rank-{rank.rank:05d}.json").write_text(json.dumps(record))
        lines = []
        for step in range(steps):
            slow = tracked_slower if step < 2 else 1.0
            lines.append(
                {
                    "step": step,
                    "rank": rank.rank,
                    "plan_hash": run.plan_hash,
                    "seconds": rank.seconds * slow,
                    "compute_seconds": rank.compute * slow,
                    "communication_seconds": rank.communication * slow,
                    "idle_seconds": rank.idle * slow,
                    "peak_bytes": rank.peak_bytes if step < 2 else None,
                    "loss": 1.0,
                }
            )
        text = "".join(json.dumps(line) + "\n" for line in lines)
        (run_dir / "metrics" / f"rank-{rank.rank:05d}.jsonl").write_text(text)
