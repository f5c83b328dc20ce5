"""Megatron-style tensor parallelism over one TP group, as autograd functions and two layers.

A TP group's ranks hold the same activations between layers ("replicated") and split the work
inside a layer. The four region functions are the only places that communicate; each is the
identity when the group is None (TP 1), so one code path serves every TP degree:

- `copy_to_region` enters a split region: the forward is the identity, the backward all-reduces,
  because every rank's input gradient is only its share of the replicated input's gradient.
- `reduce_from_region` leaves it: the forward all-reduces the partial sums, the backward is the
  identity, because the output is replicated and so is its gradient.
- `gather_from_region` reassembles a split last dimension (tests and debugging).

A group's own rank order need not be the plan's TP-rank order (`hetc.runtime.startup` creates
groups in torch-rank order), so nothing here uses the group's rank: callers pass the plan's TP
rank, and the gather places each slice by it instead of relying on all_gather's order.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

Group = dist.ProcessGroup | None
"""A TP group; None means TP 1, where every function is the identity."""


def _all_reduce(tensor: Tensor, group: Group, op: Any = dist.ReduceOp.SUM) -> Tensor:
    """In place; a no-op without a group."""
    if group is not None:
        dist.all_reduce(tensor, op=op, group=group)
    return tensor


class _CopyToRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, group: Group) -> Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return _all_reduce(grad.clone(), ctx.group), None


class _ReduceFromRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, group: Group) -> Tensor:
        return _all_reduce(x.clone(), group)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


class _GatherFromRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, group: Group, tp_size: int, tp_rank: int) -> Tensor:
        # Each rank writes its slice into zeros and the sum assembles the whole: the result
        # follows TP-rank order whatever order the group's ranks are in.
        width = x.shape[-1]
        ctx.slice = (tp_rank * width, width)
        full = x.new_zeros(*x.shape[:-1], width * tp_size)
        full.narrow(-1, tp_rank * width, width).copy_(x)
        return _all_reduce(full, group)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        start, width = ctx.slice
        return grad.narrow(-1, start, width).contiguous(), None, None, None


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Cross-entropy per token over logits split by vocabulary rows: only the row maximum, the
    sum of exponentials and the target's logit cross the group, never the logits. Columns at or
    past `vocab` are padding and count as -inf, so they add nothing to the sum (nor gradient)."""

    @staticmethod
    def forward(
        ctx: Any, logits: Tensor, targets: Tensor, group: Group, start: int, vocab: int
    ) -> Tensor:
        width = logits.shape[-1]
        padding = torch.arange(start, start + width, device=logits.device) >= vocab
        shifted = logits.masked_fill(padding, float("-inf"))
        maximum = _all_reduce(shifted.amax(dim=-1, keepdim=True), group, dist.ReduceOp.MAX)
        shifted -= maximum
        mine = (targets >= start) & (targets < start + width)
        local_targets = torch.where(mine, targets - start, 0).unsqueeze(-1)
        picked = shifted.gather(-1, local_targets).squeeze(-1)
        # where, not a product: a padded target column would give -inf * 0 = nan.
        target_logit = _all_reduce(torch.where(mine, picked, 0.0), group)
        softmax = shifted.exp_()
        sum_exp = _all_reduce(softmax.sum(dim=-1), group)
        softmax /= sum_exp.unsqueeze(-1)
        ctx.save_for_backward(softmax, mine, local_targets)
        return sum_exp.log() - target_logit

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None, None]:
        softmax, mine, local_targets = ctx.saved_tensors
        one_hot = mine.to(softmax.dtype).unsqueeze(-1)
        grad_logits = softmax.scatter_add(-1, local_targets, -one_hot)
        return grad_logits * grad.unsqueeze(-1), None, None, None, None


def _apply(function: type[torch.autograd.Function], *args: Any) -> Tensor:
    """`Function.apply`, typed (torch leaves it untyped)."""
    out: Tensor = function.apply(*args)  # type: ignore[no-untyped-call]
    return out


def copy_to_region(x: Tensor, group: Group) -> Tensor:
    """Identity forward, all-reduce backward (see the module docstring)."""
    return _apply(_CopyToRegion, x, group)


def reduce_from_region(x: Tensor, group: Group) -> Tensor:
    """All-reduce forward, identity backward (see the module docstring)."""
    return _apply(_ReduceFromRegion, x, group)


def gather_from_region(x: Tensor, group: Group, tp_size: int, tp_rank: int) -> Tensor:
    """The whole last dimension from every rank's slice, in TP-rank order."""
    return _apply(_GatherFromRegion, x, group, tp_size, tp_rank)


def vocab_parallel_embedding(ids: Tensor, weight: Tensor, start: int, group: Group) -> Tensor:
    """Rows of a token table split by vocabulary: this rank holds rows [start, start + len) and
    contributes zeros for ids held elsewhere; the sum over the group is the whole lookup."""
    elsewhere = (ids < start) | (ids >= start + weight.shape[0])
    local = F.embedding(torch.where(elsewhere, 0, ids - start), weight)
    return reduce_from_region(local.masked_fill(elsewhere.unsqueeze(-1), 0.0), group)


def vocab_parallel_cross_entropy(
    logits: Tensor, targets: Tensor, group: Group, start: int, vocab: int
) -> Tensor:
    """Per-token loss, replicated on every rank, from this rank's logit columns [start, start +
    width) in float32; columns at or past `vocab` (padding) never contribute."""
    return _apply(_VocabParallelCrossEntropy, logits.float(), targets, group, start, vocab)


def column_parallel_linear(x: Tensor, weight: Tensor, bias: Tensor | None, group: Group) -> Tensor:
    """This rank's output columns of a linear map whose weight is split by output rows."""
    return F.linear(copy_to_region(x, group), weight, bias)


def _split(size: int, tp_size: int, what: str) -> int:
    if size % tp_size:
        raise ValueError(f"TP degree {tp_size} does not divide {what} {size}")
    return size // tp_size


class ColumnParallelLinear(nn.Module):
    """Weight [out / tp, in] (and bias [out / tp]): takes a replicated input, gives this rank's
    slice of the output; attention heads and MLP columns then stay local until the row-parallel
    layer that follows."""

    def __init__(
        self, inputs: int, outputs: int, *, bias: bool, group: Group, tp_size: int, dtype: Any
    ) -> None:
        super().__init__()
        local = _split(outputs, tp_size, "output width")
        self.group = group
        self.weight = nn.Parameter(torch.empty(local, inputs, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(local, dtype=dtype)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return column_parallel_linear(x, self.weight, self.bias, self.group)

    def local(self, x: Tensor) -> Tensor:
        """For an input already passed through `copy_to_region`: layers that share one input
        (query, key and value; SwiGLU's gate and up) enter the region once, so the backward
        all-reduces their summed input gradient once instead of once per layer."""
        return F.linear(x, self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """Weight [out, in / tp]: takes this rank's input slice, gives the replicated output. The
    bias is whole on every rank and added once, after the reduce, not once per rank."""

    def __init__(
        self, inputs: int, outputs: int, *, bias: bool, group: Group, tp_size: int, dtype: Any
    ) -> None:
        super().__init__()
        local = _split(inputs, tp_size, "input width")
        self.group = group
        self.weight = nn.Parameter(torch.empty(outputs, local, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(outputs, dtype=dtype)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        out = reduce_from_region(F.linear(x, self.weight), self.group)
        return out if self.bias is None else out + self.bias


class VocabParallelEmbedding(nn.Module):
    """A token table [vocab / tp, hidden]: this rank's rows of the (padded) vocabulary."""

    def __init__(
        self, vocab: int, width: int, *, group: Group, tp_size: int, tp_rank: int, dtype: Any
    ) -> None:
        super().__init__()
        local = _split(vocab, tp_size, "padded vocabulary")
        self.group = group
        self.start = tp_rank * local
        self.weight = nn.Parameter(torch.empty(local, width, dtype=dtype))

    def forward(self, ids: Tensor) -> Tensor:
        return vocab_parallel_embedding(ids, self.weight, self.start, self.group)
