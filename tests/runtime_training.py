"""Compiled outputs for hand-made plans, multi-process training runs, and the single-process
reference they must match. Run as a script, this module is one rank of the runtime with one
deliberate bug (the mutation checks):

    python tests/runtime_training.py MUTATION [runtime arguments...]

MUTATION: `tp-grad` (TP-group gradient all-reduce skipped), `unweighted` (each pipeline's loss
averaged over its own samples, then pipelines averaged: unweighted shares), `untied` (the tied
embedding all-reduce skipped), `fail-publish-2` (the checkpoint of step 2 fails just before
its directory is renamed into place).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from runtime_harness import seal

from hetc.emit.compile import training_record
from hetc.emit.deepspeed import ConfigKey, deepspeed_config
from hetc.plan import Plan, plan_to_json
from hetc.plan.topology import (
    Topology,
    batch_triple,
    cluster_record,
    rank_file_name,
    rank_record,
    topology_of,
)
from hetc.schema import check_text
from hetc.schema.spec import Spec

SPEC = """\
version: 1
name: runtime-oracle
model:
  architecture: {{layers: 4, hidden: {hidden}, heads: 4, head_dim: {head_dim}, ffn: 64, vocab: 200,
                 max_positions: {positions}, tied_embeddings: {tied}}}
training:
  global_batch_size: {batch}
  seq_len: {seq}
  precision: {precision}
  zero_stage: {zero}
  gradient_clipping: {clip}
  dropout: {dropout}
  activation_checkpointing: {recompute}
  optimizer: {optimizer}
  seed: 7
devices:
  - {{name: CPU, kind: cpu, memory: 2GiB, peak_tflops: {{fp32: 0.05, bf16: 0.05, fp16: 0.05}},
     memory_bandwidth: 10GB/s, intra_node: {{kind: shared-memory, bandwidth: 5GB/s}},
     source: "nominal"}}
zones:
  - name: z
    pools: [{{device: CPU, quota: 8, gpus_per_node: 4}}]
run: {{steps: 5}}
"""
SGD = "{type: sgd, lr: 0.5, momentum: 0.0, weight_decay: 0.0}"
ADAMW = "{type: adamw, lr: 1.0e-2, betas: [0.9, 0.95], weight_decay: 0.1}"


def oracle_spec(
    *,
    batch: int,
    optimizer: str = SGD,
    clip: float = 0.0,
    tied: bool = True,
    precision: str = "fp32",
    dropout: float = 0.0,
    recompute: bool = False,
    zero: int = 0,
    hidden: int = 32,
    seq: int = 16,
) -> Spec:
    """The oracle's spec; `hidden` and `seq` may be odd (heads stay 4 of width 8, so the
    hidden width need not divide by them), which makes a boundary tensor's element count odd."""
    text = SPEC.format(
        hidden=hidden,
        head_dim=8,
        positions=max(32, seq),
        seq=seq,
        batch=batch,
        optimizer=optimizer,
        clip=clip,
        tied="true" if tied else "false",
        precision=precision,
        dropout=dropout,
        recompute="true" if recompute else "false",
        zero=zero,
    )
    checked = check_text(text)
    assert checked.spec is not None, [d.format() for d in checked.diagnostics]
    return checked.spec


def _dump(data: object) -> str:
    return json.dumps(data, sort_keys=True, indent=2) + "\n"


def write_compiled(plan: Plan, spec: Spec, out: Path) -> Topology:
    """What `hetc compile` writes for `plan` (a hand-made plan, not the planner's), with its
    manifest (`runtime_harness.seal`: call it again after changing a file on purpose)."""
    topology = topology_of(plan, tied_embeddings=spec.model.tied_embeddings)
    (out / "topology" / "ranks").mkdir(parents=True, exist_ok=True)
    (out / "deepspeed").mkdir(exist_ok=True)
    (out / "plan.json").write_text(plan_to_json(plan))
    (out / "training.json").write_text(_dump(training_record(spec)))
    (out / "topology" / "cluster.json").write_text(_dump(cluster_record(plan, topology)))
    index = {n.id: i for i, n in enumerate(plan.nodes)}
    for process in topology.processes:
        key = ConfigKey(triple=batch_triple(plan, process), on_cpu=True)
        (out / key.file_name).write_text(_dump(deepspeed_config(spec, key)))
        record = rank_record(plan, topology, process, deepspeed_config=key.file_name)
        (out / "topology" / rank_file_name(process, index[process.node])).write_text(_dump(record))
    seal(out)
    return topology


def reference_run(
    spec: Spec, steps: int, micro: int, *, initial_scale_power: int = 16
) -> tuple[list[float], dict[str, torch.Tensor], list[float]]:
    """One process, the whole model, the whole global batch: losses, final weights, and each
    step's gradient norm before clipping. bf16/fp16 compute under autocast with fp32 weights;
    fp16 scales the loss as DeepSpeed does (hysteresis 2: the first overflow keeps the scale,
    each later one halves it; a skipped step does not update) and rounds the scaled gradients
    to fp16 before looking for an overflow, as the runtime's fp16 reduction does (a scaled
    gradient past fp16's range overflows there, though fp32 holds it)."""
    from hetc.runtime.data import TrainingData
    from hetc.runtime.model import DropoutKey, ModelConfig, StageModule

    training = training_record(spec)
    torch.manual_seed(0)
    config = ModelConfig.from_dict(training["model"])
    model = StageModule(
        config,
        0,
        config.layers,
        ("embedding", "final-norm", "head"),
        None,
        1,
        0,
        training["seed"],
        dropout=spec.training.dropout,
    )
    batch = spec.training.global_batch_size
    data = TrainingData.from_training(
        training, base_dir=Path("."), shares=[batch // micro], micro=micro
    )
    o = spec.training.optimizer
    optimizer: torch.optim.Optimizer
    if o.type == "sgd":
        optimizer = torch.optim.SGD(
            model.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay
        )
    else:
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay
        )
    tokens = batch * spec.training.seq_len
    precision = spec.training.precision
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scale, hysteresis = (2.0**initial_scale_power, 2) if precision == "fp16" else (1.0, 0)
    losses, norms = [], []
    for step in range(steps):
        optimizer.zero_grad()
        total = 0.0
        for j in range(batch // micro):
            inputs, targets = data.microbatch(step, 0, j)
            first = step * batch + j * micro  # the samples' places in the data stream
            noise = DropoutKey(training["seed"], step, tuple(range(first, first + micro)))
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                summed = model(inputs, targets=targets, noise=noise)
            (summed.float() * (scale / tokens)).backward()
            total += float(summed.detach()) / tokens
        losses.append(total)
        if precision == "fp16":
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            for g in grads:  # the runtime reduces fp16 gradients in fp16
                g.copy_(g.half())
            if not all(bool(torch.isfinite(g).all()) for g in grads):
                if hysteresis == 1:
                    scale /= 2
                else:
                    hysteresis -= 1
                norms.append(float("inf"))
                continue
            for g in grads:
                g.div_(scale)
        clip = spec.training.gradient_clipping
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip if clip > 0 else 1e30)
        norms.append(float(norm))
        optimizer.step()
    return losses, {k: v.detach().clone() for k, v in model.named_parameters()}, norms


def run_losses(run_dir: Path) -> list[float]:
    lines = (run_dir / "metrics" / "rank-00000.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines]


def saved_weights(directory: Path) -> dict[str, list[torch.Tensor]]:
    """Every stage's saved tensors by name (the tied table appears once per holding stage)."""
    found: dict[str, list[torch.Tensor]] = {}
    for path in sorted(directory.glob("stage*.pt")):
        for name, value in torch.load(path).items():
            found.setdefault(name, []).append(value)
    return found


def _mutate(name: str) -> None:
    from hetc.runtime import tensor_parallel, train

    if name == "tp-grad":
        tensor_parallel._CopyToRegion.backward = staticmethod(  # type: ignore[method-assign]
            lambda ctx, grad: (grad, None)
        )
    elif name == "unweighted":
        original = train.StageTrainer.__init__

        def init(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            shares = [p.microbatches for p in self.plan.pipelines]
            own = shares[self.rank_file["pipeline"]] * self.micro * self.seq
            self.tokens_per_batch = own * len(shares)

        train.StageTrainer.__init__ = init  # type: ignore[method-assign]
    elif name == "untied":
        train.StageTrainer._tied = lambda self: False  # type: ignore[method-assign]
    elif name == "fail-publish-2":
        from hetc.runtime import checkpoint

        publish = checkpoint._publish

        def failing(tmp: Path, final: Path) -> bool:
            if final.name == "step-2":
                raise OSError("simulated crash before the rename")
            return publish(tmp, final)

        checkpoint._publish = failing
    else:
        raise SystemExit(f"unknown mutation {name}")


if __name__ == "__main__":
    _mutate(sys.argv[1])
    from hetc.runtime.__main__ import main

    sys.exit(main(sys.argv[2:]))
