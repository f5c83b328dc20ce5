"""Training one stage replica of a compiled plan: 1F1B over its pipeline's microbatches,
activations split across TP degrees at stage boundaries, data-parallel synchronisation by
parameter shard, the tied embedding, a global-norm clip, and the optimizer step.

The update must be the one a single process would make on the whole global batch, whatever the
plan. So the loss is never averaged per pipeline: every microbatch backpropagates its summed
token loss divided by the global batch's token count, and the data-parallel reduction is a
SUM over replicas. Uneven batch shares then weigh each pipeline by its samples by construction
(the rank files' `loss_weight` is the same factor for DeepSpeed engines, which average).

Shard groups (see `hetc.plan.topology`): a TP-t replica's rank r holds chunks
[r*C/t, (r+1)*C/t) of every TP-sharded parameter of its stage, cut along the parameter's TP
dimension; each chunk is summed in its own group. A parameter replicated inside a TP group
(norms, row-parallel biases, learned positions) is summed among the TP-rank-0s of the replicas
and then broadcast inside each TP group, so every replica counts once. With tied embeddings
over several stages, the token table's gradient is summed once over every holder in the
first and last stage (the tied groups), which also covers the data-parallel sum.

Precision: parameters, gradients and optimizer state stay fp32 (the master copy); bf16 and
fp16 run the forward under autocast, as DeepSpeed's mixed precision computes in the low type
and keeps fp32 master weights. fp16 scales the loss dynamically with DeepSpeed's rules
(`LossScaler`), and every rank agrees on overflow before anyone steps, so no stage skips a
step another takes.

What travels in which type (`hetc.costmodel.traffic` prices exactly this):
- Stage-boundary activations and their gradients go in the compute type (`WIRE`: bf16, fp16,
  or fp32), as Megatron's pipeline sends them in its params dtype (p2p_communication.py,
  `config.pipeline_dtype`); the receiver widens them back to fp32 on this path.
- Data-parallel, tied-embedding and TP-broadcast gradients go in `REDUCE`: fp16 under fp16,
  fp32 otherwise. fp16 gradients are loss-scaled, so the fp16 sum's range is the one the
  scale was chosen for, and an overflow in the sum shows as inf in every rank's reduced
  gradient, which the overflow agreement after the reduction catches (DeepSpeed's fp16
  engine reduces in fp16: `communication_data_type` defaults to fp16 when fp16 is enabled,
  engine.py). bf16 has an 8-bit mantissa: summing D replicas' gradients in it loses what
  fp32 keeps, and Megatron accumulates and all-reduces bf16 gradients in fp32
  (`accumulate_allreduce_grads_in_fp32`, on with --bf16 by default), so bf16 reduces in
  fp32. A data-parallel group of one makes no call, but its gradients are rounded to
  `REDUCE` all the same (`_synchronise`).

A stage whose replicas share one TP degree under ZeRO 1 or 2 runs the same loop but hands its
forward, backward and step to a DeepSpeed engine (`hetc.runtime.engine`), which reduces,
partitions, scales and steps in DeepSpeed's own precision; every other stage (ZeRO 0, mixed TP
degrees) uses the synchronisation here.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import Tensor

from hetc.plan import Plan, capability_problems, plan_from_json
from hetc.plan.rankfiles import parse_cluster_file
from hetc.plan.topology import boundary_chunk_elements, schedule_steps
from hetc.runtime.data import SYNTHETIC, TrainingData, pipeline_samples
from hetc.runtime.metrics import IterationClock, LiveTensorBytes, resident_bytes
from hetc.runtime.model import DropoutKey, ModelConfig, ParamSpec, StageModule
from hetc.runtime.startup import Startup

if TYPE_CHECKING:
    from hetc.runtime.engine import StageEngine

TOKEN_TABLE = "embedding.tokens.weight"


class TrainingError(RuntimeError):
    """Training cannot go on: what is wrong and what would be right."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Agreed:
    """What every rank learns from an iteration's control all-reduce (`StageTrainer.agree`)."""

    loss: float
    """The global batch's mean token loss."""
    overflow: bool
    """fp16: some rank's gradient overflowed, so every rank skips the step."""
    norm: float
    """The global gradient norm (0 when not clipping)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Member:
    """Another process of the plan, as cluster.json lists it."""

    rank: int
    stage: int
    replica: int
    tp_rank: int
    pipeline: int


AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}
WIRE = {"fp32": torch.float32, **AUTOCAST}
"""Stage-boundary activations and gradients travel in the compute type (module docstring)."""
REDUCE = {"fp32": torch.float32, "bf16": torch.float32, "fp16": torch.float16}
"""Gradient reductions: fp16 in fp16 (loss-scaled, overflow agreed after), bf16 in fp32."""


@dataclass(kw_only=True)
class LossScaler:
    """DeepSpeed's dynamic loss scaling (runtime/fp16/loss_scaler.py DynamicLossScaler): halve
    the scale on an overflow once `hysteresis` overflows are used up, double it after
    `window` steps without one, never below `minimum`."""

    scale: float
    window: int
    minimum: float
    hysteresis: int
    iteration: int = 0
    last_overflow: int = -1
    hysteresis_left: int = field(init=False)

    def __post_init__(self) -> None:
        self.hysteresis_left = self.hysteresis

    @classmethod
    def from_config(cls, fp16: Mapping[str, Any]) -> LossScaler:
        return cls(
            scale=2.0 ** fp16["initial_scale_power"],
            window=fp16["loss_scale_window"],
            minimum=float(fp16["min_loss_scale"]),
            hysteresis=fp16["hysteresis"],
        )

    def update(self, overflow: bool) -> None:
        if overflow:
            if self.hysteresis == 1 or self.hysteresis_left == 1:
                self.scale = max(self.scale / 2, self.minimum)
            else:
                self.hysteresis_left -= 1
            self.last_overflow = self.iteration
        elif (self.iteration - self.last_overflow) % self.window == 0:
            self.hysteresis_left = self.hysteresis
            self.scale *= 2
        self.iteration += 1


def learning_rate(scheduler: Mapping[str, Any] | None, base: float, step: int) -> float:
    """The rate for (0-based) step `step`: DeepSpeed's WarmupCosineLR / WarmupLR formula at
    iteration `step`. (DeepSpeed's engine itself runs the first step at rate 0, its scheduler
    not having started; hetc does not.)"""
    if scheduler is None:
        return base
    params = scheduler["params"]
    if scheduler["type"] == "WarmupLR":
        warmup = max(2, params["warmup_num_steps"])
        low, high = params["warmup_min_lr"], params["warmup_max_lr"]
        if step < warmup:
            return float(low + (high - low) * step / warmup)
        return float(high)
    if scheduler["type"] == "WarmupCosineLR":
        warmup = max(2, params["warmup_num_steps"])
        if step < warmup:
            low = params["warmup_min_ratio"]
            return float(base * (low + (1.0 - low) * step / warmup))
        total = max(1, params["total_num_steps"] - warmup)
        progress = min(1.0, (step - warmup + 1) / total)
        floor = float(params["cos_min_ratio"])
        return base * max(0.0, floor + (1.0 - floor) * (1 + math.cos(math.pi * progress)) / 2)
    raise TrainingError(f"scheduler {scheduler['type']!r} is not one hetc writes")


def make_optimizer(
    parameters: Sequence[Tensor], deepspeed: Mapping[str, Any], training: Mapping[str, Any]
) -> torch.optim.Optimizer:
    """The optimizer the DeepSpeed config names (or, for SGD, training.json's), on this rank's
    shards: every optimizer here is elementwise, so shards update exactly as whole tensors."""
    config = deepspeed.get("optimizer")
    if config is None:
        sgd = training["optimizer"]
        if sgd["type"] != "sgd":
            raise TrainingError(f"no optimizer in the DeepSpeed config for {sgd['type']!r}")
        return torch.optim.SGD(
            parameters, lr=sgd["lr"], momentum=sgd["momentum"], weight_decay=sgd["weight_decay"]
        )
    params = config["params"]
    kind = torch.optim.AdamW if params.get("adam_w_mode", True) else torch.optim.Adam
    return kind(
        parameters,
        lr=params["lr"],
        betas=tuple(params["betas"]),
        eps=params["eps"],
        weight_decay=params["weight_decay"],
    )


def wants_engine(plan: Plan, rank_file: Mapping[str, Any], deepspeed: Mapping[str, Any]) -> bool:
    """Whether this stage trains through a DeepSpeed engine (`hetc.runtime.engine`): ZeRO 1 or
    2 with every replica of the stage at one TP degree, as a ZeRO partition is of identical
    tensors on every replica."""
    zero = deepspeed.get("zero_optimization", {}).get("stage", 0)
    replicas = plan.stages[rank_file["stage"]].replicas
    return zero in (1, 2) and len({r.tp for r in replicas}) == 1


class StageTrainer:
    """One process: its stage's module, its pipeline's microbatches, its groups."""

    def __init__(self, started: Startup, out_dir: Path, *, data_dir: Path | None = None) -> None:
        self.started = started
        self.rank_file = rf = started.rank_file
        # The files as start-up read and checked them against the manifest (inputs.py).
        self.training = json.loads(_checked(started, "training.json"))
        self.deepspeed = json.loads(_checked(started, rf["deepspeed_config"]))
        self.plan: Plan = plan_from_json(_checked(started, "plan.json"))
        refused = capability_problems(
            self.plan,
            zero_stage=self.training["zero_stage"],
            precision=self.training["precision"],
        )
        if refused:
            raise TrainingError(
                "this plan needs what the runtime cannot run (hetc/plan/capability.py): "
                + "; ".join(refused)
            )
        cluster = parse_cluster_file(
            _checked(started, "topology/cluster.json"), out_dir / "topology" / "cluster.json"
        )
        self.members = {
            p["rank"]: Member(
                rank=p["rank"],
                stage=p["stage"],
                replica=p["replica"],
                tp_rank=p["tp_rank"],
                pipeline=p["pipeline"],
            )
            for n in cluster["nodes"]
            for p in n["processes"]
        }
        self.device = (
            torch.device("cuda", rf["device_index"])
            if dist.get_backend() == "nccl"
            else torch.device("cpu")
        )
        self.precision = self.training["precision"]
        self.wire, self.reduce = WIRE[self.precision], REDUCE[self.precision]
        fp16 = self.deepspeed.get("fp16")
        self.scaler = LossScaler.from_config(fp16) if fp16 and fp16.get("enabled") else None
        tp = rf["tp"]
        self.tp_size, self.tp_rank = tp["size"], tp["rank"]
        self.tp_group = started.groups[tp["group"]] if self.tp_size > 1 else None
        config = ModelConfig.from_dict(self.training["model"])
        self.model = StageModule(
            config,
            rf["blocks"][0],
            rf["blocks"][1],
            rf["holds"],
            self.tp_group,
            self.tp_size,
            self.tp_rank,
            self.training["seed"],
            dropout=self.training.get("dropout", 0.0),
            checkpoint_activations=self.training["activation_checkpointing"],
        ).to(self.device)
        self.hidden = config.hidden
        self.first, self.last = rf["stage"] == 0, rf["stage"] == rf["stages"] - 1
        shares = [p.microbatches for p in self.plan.pipelines]
        self.data = TrainingData.from_training(
            _with_data_path(self.training, data_dir),
            base_dir=Path("."),
            shares=shares,
            micro=self.plan.microbatch_size,
            device=self.device,
        )
        self.micro, self.seq = self.plan.microbatch_size, self.training["seq_len"]
        self.tokens_per_batch = self.training["global_batch_size"] * self.seq
        self.parameters = dict(self.model.named_parameters())
        self.specs = {s.name: s for s in self.model.specs}
        self.engine: StageEngine | None = None
        if wants_engine(self.plan, rf, self.deepspeed):
            # deepspeed is imported (2 s) only where a stage trains through its engine.
            from hetc.runtime.engine import StageEngine

            self.engine = StageEngine(self)
            self.optimizer = self.engine.optimizer
            self.scaler = None  # the engine scales the loss
        else:
            self.optimizer = make_optimizer(
                list(self.parameters.values()), self.deepspeed, self.training
            )
        self.clip = float(self.deepspeed.get("gradient_clipping", 0.0))
        self._dp_groups = chunk_groups(rf["data_parallel"], started.groups)
        self._sums_data_parallel = self.reduce != torch.float32 or any(
            dist.get_world_size(group) > 1 for _, group in self._dp_groups.values()
        )
        """Whether `_synchronise` has data-parallel work: a group of several replicas, or
        gradients to round to fp16 (a stage of one replica in fp32 or bf16 has none)."""
        self.clock = IterationClock()
        self.observe: Callable[[], Callable[[], Sequence[float]] | None] | None = None
        """A weak reference to what gives the flags every rank must agree on each iteration,
        read just before its control all-reduce (`agree`): the checkpointer's
        `Checkpointer.observe`, which stays alive for the whole of training."""
        self.agreed_values: tuple[float, ...] = ()
        """Those values after the last iteration's agreement, summed over every rank."""
        self._sends: list[tuple[dist.Work, Tensor]] = []
        """Sends in flight, with their tensors (kept alive until the sends complete)."""

    # -- point to point ------------------------------------------------------------------

    def _torch(self, plan_rank: int) -> int:
        return self.started.torch_ranks[plan_rank]

    def _forward(self, x: Tensor, targets: Tensor | None, noise: DropoutKey | None) -> Tensor:
        if self.engine is not None:
            return self.engine.forward(x, targets, noise)
        with self._autocast():
            out: Tensor = self.model(x, targets=targets, noise=noise)
        return out

    def _noise(self, step: int, pipeline: int, index: int) -> DropoutKey | None:
        """The microbatch's dropout key: its samples' places in the step's global batch."""
        if self.model.dropout == 0:
            return None
        run = pipeline_samples(step, self.data.shares, self.micro, pipeline)
        first = run.start + index * self.micro
        return DropoutKey(self.training["seed"], step, tuple(range(first, first + self.micro)))

    def _stream_dtype(self) -> torch.dtype:
        """The hidden states' type inside the stage: the engine's module type, else fp32
        (autocast computes in the low type, the residual stream stays fp32)."""
        return torch.float32 if self.engine is None else self.engine.dtype

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        dtype = AUTOCAST.get(self.precision)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=dtype)

    def _send_chunks(self, full: Tensor, transfers: Sequence[Mapping[str, int]]) -> None:
        # Completed sends release their tensors now, not at the end of the iteration: a stage
        # would otherwise hold every microbatch's boundary tensor at once.
        self._sends = [(work, piece) for work, piece in self._sends if not work.is_completed()]
        flat = full.detach().to(self.wire).reshape(-1)
        size = boundary_chunk_elements(flat.numel(), transfers[0]["chunks"]) if transfers else 0
        for t in transfers:
            piece = flat[t["chunk"] * size : (t["chunk"] + 1) * size]
            if piece.numel() < size:  # the last chunk carries the padding
                piece = torch.cat([piece, piece.new_zeros(size - piece.numel())])
            piece = piece.contiguous()
            work = dist.isend(piece, dst=self._torch(t["peer"]))
            assert work is not None
            self._sends.append((work, piece))

    def _receive_full(self, transfers: Sequence[Mapping[str, int]]) -> Tensor:
        """The whole boundary tensor, in the wire type: this rank's chunks from its peers,
        the rest gathered from the other TP ranks of its replica (each holds a contiguous run
        of chunks)."""
        shape = (self.micro, self.seq, self.hidden)
        elements = self.micro * self.seq * self.hidden
        size = boundary_chunk_elements(elements, transfers[0]["chunks"])
        mine = []
        with self.clock.section("idle"):
            for t in sorted(transfers, key=lambda t: t["chunk"]):
                buffer = torch.empty(size, dtype=self.wire, device=self.device)
                dist.recv(buffer, src=self._torch(t["peer"]))
                mine.append(buffer)
        local = torch.cat(mine)
        if self.tp_size == 1:
            return local[:elements].reshape(shape)
        gathered = [torch.empty_like(local) for _ in range(self.tp_size)]
        with self.clock.section("communication"):
            dist.all_gather(gathered, local, group=self.tp_group)
        order = self.started.group_ranks[self.rank_file["tp"]["group"]]
        by_tp = {self.members[r].tp_rank: g for r, g in zip(order, gathered, strict=True)}
        return torch.cat([by_tp[k] for k in range(self.tp_size)])[:elements].reshape(shape)

    # -- one iteration -------------------------------------------------------------------

    def train_step(self, step: int) -> float:
        """Run one iteration; returns the global batch's mean token loss (same on all ranks).
        `self.clock` holds where this rank's time went."""
        clock = self.clock
        if self.engine is None:
            for parameter in self.parameters.values():
                parameter.grad = None
        pipeline = self.rank_file["pipeline"]
        saved: dict[int, tuple[Tensor, Tensor]] = {}
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        for kind, index in schedule_steps(self.rank_file["schedule"]):
            if kind == "F":
                inputs, targets = self.data.microbatch(step, pipeline, index)
                if self.first:
                    x = inputs
                else:
                    received = self._receive_full(self.rank_file["previous_stage"])
                    x = received.to(self._stream_dtype()).requires_grad_()
                scale = self.scaler.scale if self.scaler else 1.0
                with clock.section("compute"):
                    noise = self._noise(step, pipeline, index)
                    out = self._forward(x, targets if self.last else None, noise)
                if self.last:
                    loss_sum += out.detach().double()
                    saved[index] = (x, out.float() * (scale / self.tokens_per_batch))
                else:
                    self._send_chunks(out, self.rank_file["next_stage"])
                    saved[index] = (x, out)
            else:
                x, out = saved.pop(index)
                grad = None
                if not self.last:
                    grad = self._receive_full(self.rank_file["next_stage"])
                with clock.section("compute"):
                    if self.engine is not None:
                        self.engine.backward(out, grad)
                    else:
                        torch.autograd.backward(
                            [out], None if grad is None else [grad.to(out.dtype)]
                        )
                if not self.first:
                    assert x.grad is not None
                    self._send_chunks(x.grad, self.rank_file["previous_stage"])
        with clock.section("idle"):
            for work, _ in self._sends:
                work.wait()
        self._sends.clear()
        rate = learning_rate(self.deepspeed.get("scheduler"), self._base_rate(), step)
        if self.engine is not None:
            with clock.section("communication"):  # mostly ZeRO's reductions and gathers
                return self.engine.step(rate, loss_sum).loss
        with clock.section("communication"):
            self._synchronise()
            agreed = self._unscale_and_agree(loss_sum)
            if not agreed.overflow and self.clip > 0:
                self._clip(agreed.norm)
        if not agreed.overflow:
            for group in self.optimizer.param_groups:
                group["lr"] = rate
            with clock.section("compute"):
                self.optimizer.step()
        return agreed.loss

    def _unscale_and_agree(self, loss_sum: Tensor) -> Agreed:
        """fp16: look for an overflow in this rank's reduced gradients and divide the loss
        scale out; then agree on the iteration's control values (`agree`), so that every
        rank learns whether any gradient overflowed anywhere and all skip or all step."""
        overflow = False
        if self.scaler is not None:
            grads = [_grad(p) for p in self.parameters.values()]
            overflow = any(not torch.isfinite(g).all() for g in grads)
            for grad in grads:  # wasted on an overflow, which skips the step anyway
                grad.div_(self.scaler.scale)
        square = None
        if self.clip > 0:
            counted = self.rank_file["replica"] == 0  # shards count once, in replica 0
            names = [n for n in self.parameters if counted and self.counts_in_norm(n)]
            square = self.square([_grad(self.parameters[n]) for n in names])
        agreed = self.agree(loss_sum, overflow=overflow, square=square)
        if self.scaler is not None:
            self.scaler.update(agreed.overflow)
        return agreed

    def _base_rate(self) -> float:
        optimizer = self.deepspeed.get("optimizer")
        source = optimizer["params"] if optimizer else self.training["optimizer"]
        return float(source["lr"])

    def agree(
        self, loss_sum: Tensor, *, overflow: bool = False, square: Tensor | None = None
    ) -> Agreed:
        """The iteration's control values, summed over every rank in ONE fp64 all-reduce
        (none where the plan has one rank): the loss (counted by the TP-rank-0 of each
        last-stage replica), then the clip's squared norm (when clipping), the fp16 overflow
        flag (under fp16; a count of ranks, so > 0 means any) and the flags `observe` gives
        (the checkpointer's, summed: `agreed_values`). Every rank sends the same fields, as
        `hetc.costmodel.traffic` lists them. One call rather than one per value: in gloo each
        collective hands its buffer to a worker thread, ~0.1 ms whatever its size."""
        counted = loss_sum if self.last and self.tp_rank == 0 else torch.zeros_like(loss_sum)
        fields = [counted.reshape(1)]
        if self.clip > 0:
            assert square is not None
            fields.append(square.reshape(1))
        observe = self.observe() if self.observe is not None else None
        flags = tuple(observe()) if observe is not None else ()
        host = [float(overflow)] if self.precision == "fp16" else []
        host += [float(value) for value in flags]
        fields.append(torch.tensor(host, dtype=torch.float64).to(self.device))
        values = torch.cat(fields)
        if self.started.world_size > 1:
            dist.all_reduce(values)
        summed = values.tolist()
        at, norm, overflow = 1, 0.0, False
        if self.clip > 0:
            norm, at = math.sqrt(summed[at]), at + 1
        if self.precision == "fp16":
            overflow, at = summed[at] > 0, at + 1
        self.agreed_values = tuple(summed[at:])
        return Agreed(loss=summed[0] / self.tokens_per_batch, overflow=overflow, norm=norm)

    # -- synchronisation -----------------------------------------------------------------

    def _tied(self) -> bool:
        return bool(self.rank_file["tied_embedding"])

    def _synchronise(self) -> None:
        """Data-parallel sums by shard group, one all-reduce per group: this rank's chunk of
        every sharded gradient (and, on TP rank 0, which holds chunk 0, the replicated ones)
        flattened into one buffer, in parameter order, groups in ascending chunk order on
        every rank. One collective per group rather than per tensor is what the cost model's
        ring over the stage's gradient bytes assumes: per-tensor calls pay the latency of
        every small norm and bias. Then replicated gradients are broadcast over TP, and the
        tied token table is summed. Every sum and the broadcast run in `REDUCE` (module
        docstring). A stage with one replica makes no data-parallel call but rounds its
        gradients to `REDUCE` all the same, so that an fp16 gradient overflows where a sum
        would, whatever the replica count (in fp32 and bf16, where that rounding changes
        nothing, such a stage skips the data-parallel part altogether)."""
        grads = {name: _grad(parameter) for name, parameter in self.parameters.items()}
        tied = self._tied()
        if self._sums_data_parallel:
            self._sum_data_parallel(
                {n: g for n, g in grads.items() if not (tied and n == TOKEN_TABLE)}
            )
        replicated = [g for n, g in grads.items() if self.specs[n].tp_dim is None]
        if self.tp_size > 1 and replicated:
            order = self.started.group_ranks[self.rank_file["tp"]["group"]]
            source = self._torch(next(r for r in order if self.members[r].tp_rank == 0))
            broadcast = partial(dist.broadcast, src=source, group=self.tp_group)
            _flat_collective(replicated, broadcast, self.reduce)
        if tied:
            groups = chunk_groups(self.rank_file["tied_embedding"], self.started.groups)
            self._sum_sharded(grads[TOKEN_TABLE], self.specs[TOKEN_TABLE], groups)

    def _sum_data_parallel(self, grads: Mapping[str, Tensor]) -> None:
        """The data-parallel part of `_synchronise`: one flat all-reduce per shard group."""
        per_rank = next(iter(self._dp_groups.values()))[0] // self.tp_size
        pieces: dict[int, list[Tensor]] = defaultdict(list)
        for name, grad in grads.items():
            spec = self.specs[name]
            if spec.tp_dim is None:
                if self.tp_rank == 0:
                    pieces[0].append(grad)
                continue
            for offset, piece in enumerate(grad.chunk(per_rank, dim=spec.tp_dim)):
                pieces[self.tp_rank * per_rank + offset].append(piece)
        for chunk in sorted(pieces):
            group = self._dp_groups[chunk][1]
            if dist.get_world_size(group) > 1:
                _flat_collective(pieces[chunk], partial(dist.all_reduce, group=group), self.reduce)
            else:
                _round(pieces[chunk], self.reduce)

    def _sum_sharded(
        self, grad: Tensor, spec: ParamSpec, groups: Mapping[int, tuple[int, Any]]
    ) -> None:
        """Sum this rank's chunks of a TP-sharded gradient, each in its own group (the tied
        table's: every holder in the first and last stage), in `REDUCE`."""
        chunks = next(iter(groups.values()))[0]
        per_rank = chunks // self.tp_size
        assert spec.tp_dim is not None
        pieces = grad.chunk(per_rank, dim=spec.tp_dim)
        for offset, piece in enumerate(pieces):
            chunk = self.tp_rank * per_rank + offset
            buffer = piece.to(self.reduce, memory_format=torch.contiguous_format)
            dist.all_reduce(buffer, group=groups[chunk][1])
            piece.copy_(buffer)

    def _clip(self, norm: float) -> None:
        """Scale every gradient by clip / `norm` (the global norm `agree` found) if that is
        below 1."""
        scale = self.clip / (norm + 1e-6)
        if scale < 1.0:
            for parameter in self.parameters.values():
                _grad(parameter).mul_(scale)

    def counts_in_norm(self, name: str) -> bool:
        """Whether this rank counts parameter `name` in the global gradient norm, so that each
        element of the model counts once (given that only one replica's shards count):
        replicated tensors on TP rank 0, the tied table on the first stage."""
        if name == TOKEN_TABLE and self._tied() and not self.first:
            return False
        return not (self.specs[name].tp_dim is None and self.tp_rank != 0)

    def square(self, tensors: Sequence[Tensor]) -> Tensor:
        """The sum of `tensors`' squared norms in float64 (a zero for none)."""
        square = torch.zeros((), dtype=torch.float64, device=self.device)
        for tensor in tensors:
            square += square_norm(tensor)
        return square


def _checked(started: Startup, relative: str) -> str:
    text = started.inputs.text(relative)
    if text is None:  # start-up stops every rank on an unreadable input first
        raise TrainingError(f"{started.inputs.out_dir / relative} could not be read")
    return text


def _with_data_path(training: Mapping[str, Any], data_dir: Path | None) -> dict[str, Any]:
    """training.json with the token file's path to read: under `data_dir` (or HETC_DATA_DIR)
    when given, else the path the compiler resolved from the spec's directory."""
    record = dict(training)
    data = training.get("data")
    if data is None or data["path"] == SYNTHETIC:
        return record
    directory = data_dir or os.environ.get("HETC_DATA_DIR")
    if directory is not None:
        path = str(Path(directory) / data["path"])
    else:
        path = data.get("resolved", data["path"])
    record["data"] = {**data, "path": path}
    return record


def _flat_collective(
    tensors: Sequence[Tensor], collective: Callable[[Tensor], Any], dtype: torch.dtype
) -> None:
    """Run `collective` in place on one flat `dtype` copy of `tensors`, then copy the result
    back (every rank, the broadcast's source too, so all hold the same rounding)."""
    flat = torch.empty(sum(t.numel() for t in tensors), dtype=dtype, device=tensors[0].device)
    offset = 0
    for tensor in tensors:
        flat[offset : offset + tensor.numel()].copy_(tensor.reshape(-1))
        offset += tensor.numel()
    collective(flat)
    offset = 0
    for tensor in tensors:
        tensor.copy_(flat[offset : offset + tensor.numel()].view(tensor.shape))
        offset += tensor.numel()


def _round(tensors: Sequence[Tensor], dtype: torch.dtype) -> None:
    """Round each tensor in place to `dtype`'s values (as a reduction in `dtype` would)."""
    for tensor in tensors:
        if tensor.dtype != dtype:
            tensor.copy_(tensor.to(dtype))


def square_norm(tensor: Tensor) -> Tensor:
    """The squared L2 norm as a float64 scalar, for summing over tensors and ranks in float64.
    The tensor's own norm is taken in fp32 (fp16 and bf16 widened inside the reduction), as
    torch's `clip_grad_norm_` and Megatron take it: a float64 reduction costs twice as much
    (a whole-model pass every step) for digits no clip uses. No copy of the tensor is made:
    `.double().pow(2)` made two (16 bytes per element of the largest gradient, the peak of a
    first stage's iteration, found by bench/fidelity.py)."""
    dtype = torch.promote_types(tensor.dtype, torch.float32)
    norm: Tensor = torch.linalg.vector_norm(tensor, dtype=dtype)
    return norm.double().square()


def _grad(parameter: Tensor) -> Tensor:
    if parameter.grad is None:
        parameter.grad = torch.zeros_like(parameter)
    return parameter.grad


def chunk_groups(names: Sequence[str], groups: Mapping[str, Any]) -> dict[int, tuple[int, Any]]:
    """chunk index -> (chunk count, group) from names like `dp/stage1/shard2of4`."""
    found = {}
    for name in names:
        chunk, count = name.rsplit("/shard", 1)[1].split("of")
        found[int(chunk)] = (int(count), groups[name])
    return found


@dataclass(frozen=True, kw_only=True, slots=True)
class StepRecord:
    step: int
    loss: float
    seconds: float
    learning_rate: float
    compute: float
    communication: float
    idle: float
    peak_bytes: int | None
    """Peak memory of this iteration: the CUDA allocator's, or on CPU every live tensor
    storage, weights and optimizer state included (None on CPU iterations not tracked: see
    CPU_MEMORY_EVERY)."""
    resident_bytes: int
    """The process's peak resident set size so far (CPU and GPU alike)."""

    def as_json(self) -> dict[str, float | int | None]:
        return {
            "step": self.step,
            "loss": self.loss,
            "seconds": self.seconds,
            "learning_rate": self.learning_rate,
            "compute_seconds": self.compute,
            "communication_seconds": self.communication,
            "idle_seconds": self.idle,
            "peak_bytes": self.peak_bytes,
            "resident_bytes": self.resident_bytes,
        }


CPU_MEMORY_EVERY = 50
"""On CPU, live tensor bytes are tracked on the first two iterations and every this many after
(`HETC_CPU_MEMORY_EVERY`; 0: never): the tracking dispatch mode costs ~14x on a tiny model's
many small ops, and the peak of a steady iteration does not change."""


def train(trainer: StageTrainer, steps: int, *, start_step: int = 0) -> Iterator[StepRecord]:
    """Run `steps` iterations from `start_step`, yielding one record per iteration."""
    cuda = trainer.device.type == "cuda"
    every = int(os.environ.get("HETC_CPU_MEMORY_EVERY", CPU_MEMORY_EVERY))
    trainer.clock = IterationClock()
    for step in range(start_step, start_step + steps):
        measured = step - start_step < 2 or (every > 0 and step % every == 0)
        tracking = not cuda and measured and every > 0
        tracker = LiveTensorBytes(adopt_live=True) if tracking else None
        if cuda:
            torch.cuda.reset_peak_memory_stats(trainer.device)
        with contextlib.nullcontext() if tracker is None else tracker:
            loss = trainer.train_step(step)
        spent = trainer.clock.finish()
        peak: int | None = None
        if cuda:
            peak = torch.cuda.max_memory_allocated(trainer.device)
        elif tracker is not None:
            peak = tracker.peak
        yield StepRecord(
            step=step,
            loss=loss,
            seconds=spent["seconds"],
            learning_rate=trainer.optimizer.param_groups[0]["lr"],
            compute=spent["compute"],
            communication=spent["communication"],
            idle=spent["idle"],
            peak_bytes=peak,
            resident_bytes=resident_bytes(),
        )


def full_weights(trainer: StageTrainer) -> dict[str, Tensor] | None:
    """The stage's parameters as whole tensors by name (plan-independent), on TP rank 0 of
    replica 0 of each stage; None elsewhere. Every TP rank of every replica 0 must call it, and
    every rank where a DeepSpeed engine partitions the fp32 masters over the replicas."""
    masters = None if trainer.engine is None else trainer.engine.masters()
    if trainer.rank_file["replica"] != 0:
        return None
    whole: dict[str, Tensor] = {}
    order = trainer.started.group_ranks[trainer.rank_file["tp"]["group"]]
    for name, parameter in trainer.parameters.items():
        spec = trainer.specs[name]
        value = parameter.detach() if masters is None else masters[name]
        if spec.tp_dim is not None and trainer.tp_size > 1:
            gathered = [torch.empty_like(value) for _ in range(trainer.tp_size)]
            dist.all_gather(gathered, value.contiguous(), group=trainer.tp_group)
            by_tp = {trainer.members[r].tp_rank: g for r, g in zip(order, gathered, strict=True)}
            value = torch.cat([by_tp[k] for k in range(trainer.tp_size)], dim=spec.tp_dim)
        whole[name] = value.clone()
    return whole if trainer.tp_rank == 0 else None
