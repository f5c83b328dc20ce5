"""One rank of the runtime with every torch.distributed call recorded (the traffic test's
instrument). Run as a script:

    python tests/runtime_traffic_worker.py RECORD_DIR [runtime arguments...]

Before the runtime is imported, every point-to-point and collective function of
`torch.distributed` (and of `torch.distributed.distributed_c10d`, where torch's own helpers
call them) is replaced by a wrapper that notes the call and then makes it: the kind, the
group's ranks, the elements and bytes per element of the tensor this rank contributes, the
peer or root. Nested calls (an object collective calling `all_gather`) count once, as the
outermost call. DeepSpeed goes through `torch.distributed` too (its comm backend looks the
functions up there, and captures `all_gather_into_tensor` at initialisation, after the
wrappers are in place), so its calls are seen the same way. Production code has no hook.

Each call is tagged with the training step it belongs to: `StageTrainer.train_step(step)`
and the checkpoint agreement `Checkpointer.after_step(step + 1)` that follows it; calls at
start-up and at the end are tagged None. At exit the rank writes RECORD_DIR/rank-<r>.json.
Torch ranks are plan ranks here (the harness starts ranks in plan order).
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

KINDS = {
    "isend": "send",
    "send": "send",
    "irecv": "recv",
    "recv": "recv",
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "_all_gather_base": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter",
    "reduce": "reduce",
    "broadcast": "broadcast",
    "barrier": "barrier",
    "monitored_barrier": "barrier",
    "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all",
    "gather": "gather",
    "scatter": "scatter",
    "batch_isend_irecv": "batch_p2p",
    "all_gather_object": "object",
    "broadcast_object_list": "object",
    "gather_object": "object",
    "scatter_object_list": "object",
    "send_object_list": "object",
    "recv_object_list": "object",
}
"""torch.distributed function -> the kind of call `hetc.costmodel.traffic` names it."""

CALLS: list[dict[str, Any]] = []
STEP: list[int | None] = [None]
_DEPTH = threading.local()


def _ranks(group: Any) -> list[int]:
    if group is None or group is c10d.GroupMember.WORLD:
        return list(range(dist.get_world_size()))
    return list(dist.get_process_group_ranks(group))


def _describe(name: str, bound: inspect.BoundArguments) -> dict[str, Any]:
    """What the call moves from this rank's side: the tensor it contributes (the input of a
    gather, the buffer of a reduction, broadcast or point-to-point)."""
    args = bound.arguments
    tensor = None
    for key in ("tensor", "input_tensor", "input"):
        if isinstance(args.get(key), torch.Tensor):
            tensor = args[key]
            break
    record: dict[str, Any] = {
        "function": name,
        "kind": KINDS[name],
        "step": STEP[0],
        "group": _ranks(args.get("group")),
    }
    if tensor is not None:
        record["elements"] = tensor.numel()
        record["element_bytes"] = tensor.element_size()
        record["dtype"] = str(tensor.dtype).removeprefix("torch.")
    for key in ("dst", "src"):
        if args.get(key) is not None:
            record["peer" if name in ("isend", "send", "irecv", "recv") else "root"] = args[key]
    op = args.get("op")
    if op is not None:
        record["op"] = str(op).rsplit(".", 1)[-1]
    return record


def _wrap(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)

    def recorded(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(_DEPTH, "value", 0)
        if depth == 0:
            CALLS.append(_describe(name, signature.bind(*args, **kwargs)))
        _DEPTH.value = depth + 1
        try:
            return original(*args, **kwargs)
        finally:
            _DEPTH.value = depth

    recorded.__wrapped__ = original  # type: ignore[attr-defined]
    return recorded


def install() -> None:
    """Replace every function in `KINDS`, in both namespaces, by one recording wrapper."""
    for name in KINDS:
        original = getattr(c10d, name, None) or getattr(dist, name)
        wrapper = _wrap(name, original)
        for module in (dist, c10d):
            if hasattr(module, name):
                setattr(module, name, wrapper)


def _tag_steps() -> None:
    from hetc.runtime import checkpoint, train

    train_step = train.StageTrainer.train_step
    after_step = checkpoint.Checkpointer.after_step

    def tagged_train_step(self: Any, step: int) -> float:
        STEP[0] = step
        try:
            return float(train_step(self, step))
        finally:
            STEP[0] = None

    def tagged_after_step(self: Any, next_step: int) -> None:
        STEP[0] = next_step - 1
        try:
            after_step(self, next_step)
        finally:
            STEP[0] = None

    train.StageTrainer.train_step = tagged_train_step  # type: ignore[method-assign]
    checkpoint.Checkpointer.after_step = tagged_after_step  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    record_dir, runtime_args = Path(argv[0]), argv[1:]
    install()
    _tag_steps()
    from hetc.runtime.__main__ import main as runtime_main

    status = runtime_main(runtime_args)
    record_dir.mkdir(parents=True, exist_ok=True)
    path = record_dir / f"rank-{int(os.environ['RANK']):05d}.json"
    path.write_text(json.dumps(CALLS), encoding="utf-8")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
