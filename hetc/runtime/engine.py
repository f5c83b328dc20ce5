"""Training a uniform-TP stage through a DeepSpeed engine (ZeRO 1 and 2): DeepSpeed reduces the
gradient over the stage's replicas, partitions it and the optimizer state, keeps the fp32
masters of its bf16/fp16 weights and steps; hetc does what one engine cannot see, the other
stages. `StageTrainer` runs the same 1F1B loop as on its own path and hands the forward, the
backward and the step to `StageEngine`.

Each TP rank of a stage replica is one engine whose data-parallel group is the stage's
`dp/stage<i>/shard<r>of<T>` group (TP rank r of every replica) and whose model-parallel group
is its TP group. The update must still be the global batch's (the oracle is the single-process
reference), so five things happen around the engine:

- Weighting. DeepSpeed divides each microbatch's loss by its accumulation count and averages
  over the replicas; handing it the microbatch's mean token loss times the rank file's
  `loss_weight` (D x accumulation / total microbatches) weighs every token by the global
  batch, whatever the shares.
- Stage boundaries. A non-last stage backpropagates the gradient the next stage sent through
  the surrogate (out x grad).sum(). That gradient already carries the next engine's
  1/accumulation and loss scale, so the surrogate goes in without the 1/accumulation
  (`scale_wrt_gas=False`) and divided by the loss scale that the engine multiplies in again.
- ZeRO-2 reduces after every microbatch's backward (ZeRO-1 once, at the last), in buckets
  filled in the order autograd produces the gradients. Where the replicas of a stage
  accumulate different counts (uneven shares), those reductions would not pair up, so the
  shorter pipelines' ranks run pad backwards up to the longest count: the stage's graph on one
  token, times zero, which produces the gradients in a real microbatch's order. DeepSpeed's
  accumulation count is then the common one and the weight grows by common / own.
- Between DeepSpeed's reduction and its step (after the last `backward`, before `step`), the
  reduced gradient lies in this rank's partition, reachable per parameter through the
  fragments ZeRO links to it (`_hp_mapping`, which DeepSpeed's `safe_get_full_grad` reads).
  There hetc sums the tied token table over the first and last stage, agrees fp16 overflow
  over all ranks and clips by the global norm, since DeepSpeed's own overflow check and
  clipping see one stage only (its clipping and its gradient norm are turned off); the
  loss, the norm, the overflow flag and the checkpoint flags travel in one all-reduce
  (`StageTrainer.agree`).
- The learning rate is hetc's (`learning_rate`), set on the optimizer before each step, so both
  paths follow one schedule (DeepSpeed's scheduler would run step 0 at rate 0).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator, Mapping
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import deepspeed
import torch
import torch.distributed as dist
from deepspeed.accelerator import get_accelerator
from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer
from deepspeed.utils import (
    lazy_init_hp_params_optimizer_state,
    safe_get_full_fp32_param,
    safe_get_full_optimizer_state,
    safe_set_full_fp32_param,
    safe_set_full_optimizer_state,
)
from torch import Tensor

from hetc.runtime.model import DropoutKey
from hetc.runtime.train import (
    TOKEN_TABLE,
    Agreed,
    TrainingError,
    chunk_groups,
    make_optimizer,
)

if TYPE_CHECKING:
    from hetc.runtime.train import StageTrainer


class _ModelParallelUnit:
    """The groups `deepspeed.initialize(mpu=...)` asks for: data-parallel is this TP rank's
    shard group over the stage's replicas, model-parallel the replica's TP group."""

    def __init__(self, data: dist.ProcessGroup, model: dist.ProcessGroup) -> None:
        self.data, self.model = data, model

    def get_data_parallel_group(self) -> dist.ProcessGroup:
        return self.data

    def get_data_parallel_rank(self) -> int:
        return dist.get_rank(self.data)

    def get_data_parallel_world_size(self) -> int:
        return dist.get_world_size(self.data)

    def get_model_parallel_group(self) -> dist.ProcessGroup:
        return self.model

    def get_model_parallel_rank(self) -> int:
        return dist.get_rank(self.model)

    def get_model_parallel_world_size(self) -> int:
        return dist.get_world_size(self.model)


class SkipsGroupsOfOne:
    """DeepSpeed's communication backend (`deepspeed.comm`'s `cdb`), except that a blocking
    all-reduce over a group of one returns at once: the sum or maximum over one rank is the
    tensor itself. DeepSpeed makes such calls whenever a stage has one replica (its gradient
    bucket, the tied table's assembly, the overflow check), and gloo hands each one to a
    worker thread, ~0.1-0.2 ms on a loaded CPU host whatever the size; hetc's own path
    makes none (`hetc.costmodel.traffic` lists no collective over a group of one)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)

    def all_reduce(
        self,
        tensor: Tensor,
        op: Any = dist.ReduceOp.SUM,
        group: dist.ProcessGroup | None = None,
        async_op: bool = False,
    ) -> Any:
        if not async_op and dist.get_world_size(group) == 1:
            return None
        return self.backend.all_reduce(tensor, op, group, async_op)


class StageEngine:
    """The DeepSpeed engine of one stage replica's TP rank, driven by `StageTrainer`."""

    def __init__(self, trainer: StageTrainer) -> None:
        self.trainer = t = trainer
        rf = t.rank_file
        accelerator = get_accelerator().device_name()
        if accelerator != t.device.type:
            raise TrainingError(
                f"rank {rf['rank']} trains on {t.device.type}, DeepSpeed's accelerator is"
                f" {accelerator}: set DS_ACCELERATOR={t.device.type}"
            )
        shard = f"/shard{t.tp_rank}of{t.tp_size}"
        groups = [g for g in rf["data_parallel"] if g.endswith(shard)]
        if len(groups) != 1:
            raise TrainingError(
                f"rank {rf['rank']}: a uniform-TP stage has one data-parallel group"
                f" dp/stage{rf['stage']}{shard} per rank, the rank file lists"
                f" {rf['data_parallel']}"
            )
        config = copy.deepcopy(t.deepspeed)
        batch = rf["batch"]
        own = common = batch["accumulation"]
        if config["zero_optimization"]["stage"] == 2:
            common = max(p.microbatches for p in t.plan.pipelines)
            config["gradient_accumulation_steps"] = common
            config["train_batch_size"] = common * batch["micro"] * batch["data_parallel"]
        self.pads = common - own
        # The last stage's loss arrives as summed token loss / the global batch's tokens.
        self.loss_factor = batch["loss_weight"] * common / own * t.tokens_per_batch
        self.loss_factor /= t.micro * t.seq
        config["gradient_clipping"] = 0.0
        # hetc clips by the global norm itself: DeepSpeed's own norm (a pass over the partition
        # and an all-reduce over the replicas and the TP group, every step) would go unused.
        config["zero_optimization"] = {**config["zero_optimization"], "compute_grad_norm": False}
        config.pop("scheduler", None)
        self.fp16 = bool(config.get("fp16", {}).get("enabled"))
        if self.fp16 and not get_accelerator().is_fp16_supported():
            raise TrainingError(
                f"DeepSpeed runs no fp16 on this {accelerator} (on CPU it needs oneDNN's fp16"
                " kernels); ZeRO 1/2 trains through DeepSpeed: choose bf16 or fp32 here, or"
                " ZeRO 0 (hetc's own fp16 under autocast)"
            )
        client = None
        if "optimizer" not in config:  # SGD: DeepSpeed builds none from a config
            client = make_optimizer(list(t.parameters.values()), config, t.training)
        # Initialising DeepSpeed's communication would JIT-compile a shared-memory op (30-60 s
        # on CPU) that training over torch.distributed's groups does not use.
        torch_comm: Any = sys.modules["deepspeed.comm.torch"]
        torch_comm.build_shm_op = lambda: None
        engine, optimizer, _, _ = deepspeed.initialize(
            args=SimpleNamespace(device_rank=rf["device_index"]),
            model=t.model,
            model_parameters=list(t.parameters.values()),
            optimizer=client,
            config=config,
            mpu=_ModelParallelUnit(
                t.started.groups[groups[0]], t.started.groups[rf["tp"]["group"]]
            ),
        )
        comm: Any = sys.modules["deepspeed.comm.comm"]
        if not isinstance(comm.cdb, SkipsGroupsOfOne):
            comm.cdb = SkipsGroupsOfOne(comm.cdb)
        if not isinstance(optimizer, DeepSpeedZeroOptimizer):
            raise TrainingError(
                f"DeepSpeed chose {type(optimizer).__name__} for this config, not its ZeRO 1/2"
                " optimizer, whose reduced-gradient partition hetc completes before the step"
            )
        self.engine: Any = engine
        self.optimizer: Any = optimizer
        self.dtype = next(t.model.parameters()).dtype
        """bf16/fp16 where DeepSpeed cast the module: the hidden states' type, which is also
        the one they travel in between stages."""

    def forward(self, x: Tensor, targets: Tensor | None, noise: DropoutKey | None = None) -> Tensor:
        """Through the engine, whose forward hooks its backward prologue onto the output."""
        if x.is_floating_point():
            x = x.to(self.dtype)
        kwargs: dict[str, Any] = {}
        if targets is not None:
            kwargs["targets"] = targets
        if noise is not None:
            kwargs["noise"] = noise
        out: Tensor = self.engine(x, **kwargs)
        return out

    def backward(self, out: Tensor, grad: Tensor | None) -> None:
        """One microbatch's backward: the last stage's loss (summed token loss over the global
        batch's tokens), or another stage's output with the gradient the next stage sent."""
        if grad is None:
            self._backward(out * self.loss_factor, scale_wrt_gas=True)
        else:
            surrogate = (out.float() * grad).sum() / self.optimizer.loss_scale
            self._backward(surrogate, scale_wrt_gas=False)

    def _backward(self, loss: Tensor, *, scale_wrt_gas: bool) -> None:
        boundary = self.engine.is_gradient_accumulation_boundary()
        self.engine.backward(loss, scale_wrt_gas=scale_wrt_gas)
        if not boundary:
            self.engine.step()  # advances DeepSpeed's microbatch count; no update

    def step(self, rate: float, loss_sum: Tensor) -> Agreed:
        """Pad, fix up the reduced gradient, agree on the iteration's control values
        (`StageTrainer.agree`: the loss, the clip's norm, an fp16 overflow anywhere) and step;
        after this rank's last real backward."""
        t = self.trainer
        for _ in range(self.pads):
            self._pad()
        if t._tied():
            self._sum_tied()
        fragments = list(self._fragments())
        local = self.fp16 and self._overflowed([f for _, f in fragments])
        square = None
        if t.clip > 0:
            square = t.square([f for name, f in fragments if t.counts_in_norm(name)])
        agreed = t.agree(loss_sum, overflow=local, square=square)
        if agreed.overflow and not local:
            # DeepSpeed's own check looks at this stage's replicas and TP group only: an inf
            # in this rank's partition makes it skip the step and lower the loss scale too.
            fragments[0][1].view(-1)[0] = float("inf")
        if not agreed.overflow and t.clip > 0:
            self._clip([f for _, f in fragments], agreed.norm / self.optimizer.loss_scale)
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        self.engine.step()
        return agreed

    def _pad(self) -> None:
        """A backward that adds zero, in step with the replicas that still have a real
        microbatch (see the module docstring): one token through the stage's graph."""
        t = self.trainer
        token = torch.zeros((1, 1), dtype=torch.long, device=t.device)
        x = token if t.first else torch.zeros((1, 1, t.hidden), device=t.device)
        noise = DropoutKey(0, 0, (0,)) if t.model.dropout > 0 else None
        out = self.forward(x, token if t.last else None, noise)
        self._backward(out.float().sum() * 0.0, scale_wrt_gas=False)

    def masters(self) -> dict[str, Tensor]:
        """The fp32 master of every parameter, whole over the replicas (each holds a part);
        every replica must call it. The module's own copy is their bf16/fp16 rounding."""
        return {
            name: safe_get_full_fp32_param(parameter)
            for name, parameter in self.trainer.parameters.items()
        }

    # -- checkpoints: masters and optimizer state by parameter --------------------------

    def update_rule(self) -> str:
        """The optimizer by torch's class name (Adam, AdamW, SGD), whichever class DeepSpeed
        steps with (its FusedAdam runs either Adam rule on a GPU): a checkpoint names the rule,
        so that either path resumes what the other wrote."""
        base = self.optimizer.optimizer
        adam_w = getattr(base, "adam_w_mode", None)
        if adam_w is None:
            return type(base).__name__
        return "AdamW" if adam_w else "Adam"

    def _partition(self) -> tuple[Tensor, dict[str, Any]]:
        """The flat fp32 partition that the base optimizer steps, and its state (empty before
        the first step). hetc hands DeepSpeed one parameter group, so there is one."""
        (group,) = self.optimizer.param_groups
        flat: Tensor = group["params"][0]
        return flat, self.optimizer.optimizer.state[flat]

    def _per_element(self) -> list[str]:
        """The state keys that ZeRO links to each parameter's fragment (DeepSpeed's rule: the
        tensors shaped like the partition)."""
        flat, state = self._partition()
        return sorted(
            k for k, v in state.items() if isinstance(v, Tensor) and v.shape == flat.shape
        )

    def unsaved_state(self) -> list[str]:
        """State keys that are neither per-element nor the step count: no parameter owns them,
        so a checkpoint by parameter name cannot hold them."""
        _, state = self._partition()
        return sorted(set(state) - set(self._per_element()) - {"step"})

    def full_state(self, parameter: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """`parameter`'s fp32 master and optimizer state as hetc's own path keeps them, so that
        both paths write the same files: whole over the replicas (each holds a fragment), the
        per-element state under torch's keys, the step count as torch's Adam keeps it (a float
        tensor; FusedAdam keeps an int). Each tensor is an all-reduce over the replicas: every
        replica calls this for the same parameters in the same order."""
        _, state = self._partition()
        master = safe_get_full_fp32_param(parameter)
        whole = {key: safe_get_full_optimizer_state(parameter, key) for key in self._per_element()}
        if "step" in state:
            whole["step"] = torch.tensor(float(state["step"]))
        return master, whole

    def load_full(self, parameter: Tensor, master: Tensor, state: Mapping[str, Tensor]) -> None:
        """Set `parameter` from whole (TP-local) tensors in the form `full_state` returns: this
        rank's fragment of the fp32 master and of each state tensor, and the module's
        low-precision copy, which every replica holds whole (so no communication)."""
        if state and not self._partition()[1]:
            self._create_state()
        safe_set_full_fp32_param(parameter, master)
        parameter.detach().copy_(master)
        if not state:
            return
        _, kept = self._partition()
        keys = self._per_element()
        expected = {*keys, *({"step"} & set(kept))}
        if set(state) != expected:
            raise TrainingError(
                f"the optimizer state has {sorted(state)}; this run's {self.update_rule()} keeps"
                f" {sorted(expected)}"
            )
        for key in keys:
            safe_set_full_optimizer_state(parameter, state[key], key)
        if "step" in kept:
            old, step = kept["step"], float(state["step"])
            kept["step"] = old.new_tensor(step) if isinstance(old, Tensor) else type(old)(step)

    def loss_scaler(self) -> dict[str, Any] | None:
        """fp16: DeepSpeed's dynamic loss scaler in the fields of hetc's `LossScaler`, which
        follows the same rules, so that a checkpoint carries the scale either path had reached;
        None in other precisions."""
        if not self.fp16:
            return None
        scaler = self.optimizer.loss_scaler
        return {
            "scale": scaler.cur_scale,
            "window": scaler.scale_window,
            "minimum": scaler.min_scale,
            "hysteresis": scaler.delayed_shift,
            "iteration": scaler.cur_iter,
            "last_overflow": scaler.last_overflow_iter,
            "hysteresis_left": scaler.cur_hysteresis,
        }

    def set_loss_scaler(self, record: Mapping[str, Any]) -> None:
        """fp16: go on from a checkpoint's loss-scaler state (see `loss_scaler`); the settings
        stay this run's. Other precisions keep no scale."""
        if not self.fp16:
            return
        scaler = self.optimizer.loss_scaler
        scaler.cur_scale = record["scale"]
        scaler.cur_iter = record["iteration"]
        scaler.last_overflow_iter = record["last_overflow"]
        scaler.cur_hysteresis = record["hysteresis_left"]

    def _create_state(self) -> None:
        """The base optimizer creates its state at its first step, in its own form (torch's
        Adam keeps a tensor step count, FusedAdam an int), and ZeRO links each parameter's
        fragments to it after that step. So: a step at rate 0 on zero gradients, which moves
        no master, then the state zeroed (as fresh wherever the checkpoint writes nothing, such
        as alignment padding) and linked."""
        flat, state = self._partition()
        (group,) = self.optimizer.param_groups
        rate, group["lr"] = group["lr"], 0.0
        flat.grad = torch.zeros_like(flat)
        self.optimizer.optimizer.step()
        flat.grad = None
        group["lr"] = rate
        for key in self._per_element():
            state[key].zero_()
        lazy_init_hp_params_optimizer_state(
            list(self.trainer.parameters.values()), flat, self.optimizer.optimizer.state
        )

    # -- between the reduction and the step ---------------------------------------------

    def _fragments(self) -> Iterator[tuple[str, Tensor]]:
        """This rank's part of each reduced gradient (views into DeepSpeed's partition)."""
        parameter: Any
        for name, parameter in self.trainer.parameters.items():
            mapping = getattr(parameter, "_hp_mapping", None)
            if mapping is not None:
                yield name, mapping.get_lp_grad_fragment(parameter._index_in_param_group)

    def _sum_tied(self) -> None:
        """The token table's gradient summed over the first and last stage: each stage's
        whole reduced gradient is gathered over its replicas, replica 0 of each stage adds it
        up in the tied groups (the other replicas add zeros), and every rank keeps its part."""
        t = self.trainer
        table: Any = t.parameters[TOKEN_TABLE]
        whole = table.get_full_hp_grad()
        if t.rank_file["replica"] != 0:
            whole.zero_()
        tied = chunk_groups(t.rank_file["tied_embedding"], t.started.groups)
        t._sum_sharded(whole, t.specs[TOKEN_TABLE], tied)
        table.set_full_hp_grad(whole)

    def _overflowed(self, fragments: list[Tensor]) -> bool:
        """fp16: whether this rank's part of the reduced gradient holds an inf or a nan."""
        return any(not bool(torch.isfinite(f).all()) for f in fragments)

    def _clip(self, fragments: list[Tensor], norm: float) -> None:
        """Scale the partitions by clip / `norm`, the global norm of the unscaled gradient,
        when that is below 1 (DeepSpeed divides by the loss scale afterwards)."""
        scale = self.trainer.clip / (norm + 1e-6)
        if scale < 1.0:
            for fragment in fragments:
                fragment.mul_(scale)
