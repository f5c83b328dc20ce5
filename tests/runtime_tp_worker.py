"""One rank of the TP-2 model check: TP stages against the single-process reference model.

    python tests/runtime_tp_worker.py RANK INIT_FILE OUT_JSON

Both ranks build the reference model and the TP-2 stages of each case, run one forward and
backward, and compare loss and gradients; rank 0 writes the largest errors to OUT_JSON. The
last case runs with the forward all-reduce of `reduce_from_region` disabled (the mutation the
comparison must catch).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from typing import Any

import torch
import torch.distributed as dist

from hetc.catalog import ModelArchitecture
from hetc.runtime import tensor_parallel
from hetc.runtime.model import (
    ModelConfig,
    ParamSpec,
    StageModule,
    reference_model,
    shard,
    unshard,
)
from hetc.runtime.tensor_parallel import column_parallel_linear, gather_from_region

TP = 2
SEED = 7
ZERO_GRADIENT = 1e-6
"""Key biases shift every score of a query alike, so their true gradient is 0 (rounding
gives ~1e-10): no relative error is taken below this."""
BASE = {"layers": 2, "hidden": 32, "heads": 4, "ffn": 64, "max_positions": 16}
CONFIGS: dict[str, dict[str, Any]] = {
    "gelu-mha-tied": {"vocab": 200, "position_offset": 2},
    "swiglu-gqa-rope": {
        "vocab": 300,
        "kv_heads": 2,
        "mlp": "swiglu",
        "norm": "rmsnorm",
        "position": "rope",
        "tied_embeddings": False,
        "linear_bias": False,
        "qkv_bias": True,
    },
}
TIED_SPLIT = [(0, 1, ("embedding",)), (1, 2, ("final-norm", "head", "token-table-copy"))]
WHOLE = [(0, 2, ("embedding", "final-norm", "head"))]


def config(name: str) -> ModelConfig:
    return ModelConfig.from_dict(asdict(ModelArchitecture(**BASE, **CONFIGS[name])))


def perturb(model: StageModule) -> None:
    """Move every parameter off its start value (zero biases, unit norms would hide a bias
    added on every rank or a norm weight misplaced) and make the padded vocabulary rows large,
    so that a padded logit that leaked into the loss would show."""
    generator = torch.Generator().manual_seed(1)
    parameters = dict(model.named_parameters())
    with torch.no_grad():
        for spec in model.specs:
            p = parameters[spec.name]
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
            if spec.drawn_rows is not None:
                p[spec.drawn_rows :].normal_(0.0, 3.0, generator=generator)


def run_case(
    name: str, split: list[tuple[int, int, tuple[str, ...]]], group: dist.ProcessGroup
) -> dict[str, Any]:
    cfg, rank = config(name), dist.get_rank()
    reference = reference_model(cfg, SEED)
    stages = [StageModule(cfg, a, b, holds, group, TP, rank, SEED) for a, b, holds in split]
    wanted = dict(reference.named_parameters())
    init_equal = all(
        torch.equal(p, shard(wanted[spec.name].detach(), spec, TP, rank))
        for stage in stages
        for spec, p in zip(stage.specs, stage.parameters(), strict=True)
    )
    perturb(reference)
    with torch.no_grad():
        for stage in stages:
            for spec, p in zip(stage.specs, stage.parameters(), strict=True):
                p.copy_(shard(wanted[spec.name], spec, TP, rank))
    ids = torch.randint(cfg.vocab, (2, 8), generator=torch.Generator().manual_seed(2))
    targets = torch.randint(cfg.vocab, (2, 8), generator=torch.Generator().manual_seed(3))
    reference_loss = reference(ids, targets=targets)
    reference_loss.backward()
    loss = chained_backward(stages, ids, targets)
    return {
        "init_equal": init_equal,
        "loss_rel": abs(loss - reference_loss.item()) / abs(reference_loss.item()),
        **gradient_errors(stages, wanted, group),
    }


def chained_backward(stages: list[StageModule], ids: torch.Tensor, targets: torch.Tensor) -> float:
    """Forward through the stages as the pipeline would (hidden states cut from the graph at
    each boundary), then backward from the loss, handing each boundary's gradient back."""
    boundaries: list[tuple[torch.Tensor, torch.Tensor]] = []
    x = ids
    for stage in stages[:-1]:
        sent = stage(x)
        x = sent.detach().requires_grad_()
        boundaries.append((sent, x))
    loss = stages[-1](x, targets=targets)
    loss.backward()
    for sent, received in reversed(boundaries):
        sent.backward(received.grad)
    return float(loss.item())


def gradient_errors(
    stages: list[StageModule], wanted: dict[str, torch.nn.Parameter], group: dist.ProcessGroup
) -> dict[str, float]:
    """Largest |TP gradient - reference gradient| over every parameter (a parameter held by two
    stages, the tied token table, has the sum of their gradients), absolute and relative to
    the reference gradient's largest entry (skipped below ZERO_GRADIENT); replicated gradients
    are compared on every rank."""
    summed: dict[str, tuple[ParamSpec, torch.Tensor]] = {}
    for stage in stages:
        for spec, p in zip(stage.specs, stage.parameters(), strict=True):
            assert p.grad is not None, spec.name
            before = summed.get(spec.name, (spec, torch.zeros_like(p.grad)))[1]
            summed[spec.name] = (spec, before + p.grad)
    worst_abs = worst_rel = 0.0
    for name, (spec, grad) in summed.items():
        copies = [torch.empty_like(grad) for _ in range(TP)]
        dist.all_gather(copies, grad, group=group)
        expected = wanted[name].grad
        assert expected is not None
        candidates = copies if spec.tp_dim is None else [unshard(copies, spec)]
        for got in candidates:
            error = (got - expected).abs().max().item()
            worst_abs = max(worst_abs, error)
            scale = expected.abs().max().item()
            if scale > ZERO_GRADIENT:
                worst_rel = max(worst_rel, error / scale)
    return {"grad_abs": worst_abs, "grad_rel": worst_rel, "params": len(summed)}


def gather_check(group: dist.ProcessGroup) -> float:
    """A column-parallel map gathered from its slices, and its input gradient, against the
    unsplit map: the largest error of the two."""
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(3, 6, generator=generator, requires_grad=True)
    weight, upstream = (
        torch.randn(8, 6, generator=generator),
        torch.randn(3, 8, generator=generator),
    )
    rank = dist.get_rank()
    out = gather_from_region(
        column_parallel_linear(x, weight.chunk(TP)[rank], None, group), group, TP, rank
    )
    (out * upstream).sum().backward()
    assert x.grad is not None
    forward = (out - x.detach() @ weight.T).abs().max().item()
    return max(forward, (x.grad - upstream @ weight).abs().max().item())


def disable_forward_reduce() -> None:
    tensor_parallel._ReduceFromRegion.forward = staticmethod(  # type: ignore[method-assign]
        lambda ctx, x, group: x.clone()
    )


def main(rank: int, init_file: str, out: str) -> None:
    torch.manual_seed(0)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=TP)
    group = dist.new_group(list(range(TP)))
    results: dict[str, Any] = {"gather": gather_check(group)}
    for name in CONFIGS:
        results[name] = run_case(name, WHOLE, group)
    results["two-stages-tied"] = run_case("gelu-mha-tied", TIED_SPLIT, group)
    disable_forward_reduce()
    results["mutated"] = run_case("gelu-mha-tied", WHOLE, group)
    if rank == 0:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
