"""DeepSpeed configs: one per distinct (batch triple, device kind), each rank file names its own.

DeepSpeed checks `train_batch_size = micro x accumulation x data-parallel size` on every engine.
With uneven batch shares the pipelines accumulate different microbatch counts, so no single
config can be right for every rank; each rank's triple comes from `hetc.plan.topology`
(`batch_triple`), and the runtime weights the loss so that the update is the global batch's.

What DeepSpeed accepts silently - unknown top-level keys, an unknown optimizer type, a negative
clipping value, a batch rule checked against a world size of 1 when no process group exists -
`config_problems` checks here, before any file is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hetc.costmodel.traffic import GRADIENT_TYPE
from hetc.plan.settings import reduce_bucket_elements
from hetc.plan.topology import BatchTriple
from hetc.schema.spec import Spec

DEEPSPEED_OPTIMIZERS = {"adam": "Adam", "adamw": "AdamW"}
"""Spec optimizer -> DeepSpeed's name. DeepSpeed builds no SGD from a config: for `sgd` the
runtime passes `torch.optim.SGD` itself (see `training.json`) and ZeRO must be told to accept
an optimizer it has not tested."""

TOP_LEVEL_KEYS = frozenset(
    {
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "optimizer",
        "scheduler",
        "fp16",
        "bf16",
        "gradient_clipping",
        "zero_optimization",
        "zero_allow_untested_optimizer",
        "communication_data_type",
        "steps_per_print",
        "wall_clock_breakdown",
    }
)
"""Every top-level key hetc writes; DeepSpeed would accept a misspelt one without a word."""

FP16_LOSS_SCALING = {
    "enabled": True,
    "loss_scale": 0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1,
}
"""Dynamic loss scaling (`loss_scale: 0`) with DeepSpeed's documented defaults, written out so
the file says what runs."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfigKey:
    """What makes two ranks' configs differ."""

    triple: BatchTriple
    on_cpu: bool

    @property
    def file_name(self) -> str:
        t = self.triple
        device = "-cpu" if self.on_cpu else ""
        return f"deepspeed/ds_config.m{t.micro}-a{t.accumulation}-d{t.data_parallel}{device}.json"


def _optimizer(spec: Spec, on_cpu: bool) -> dict[str, Any] | None:
    optimizer = spec.training.optimizer
    name = DEEPSPEED_OPTIMIZERS.get(optimizer.type)
    if name is None:
        return None
    params: dict[str, Any] = {
        "lr": optimizer.lr,
        "betas": list(optimizer.betas),
        "eps": optimizer.eps,
        "weight_decay": optimizer.weight_decay,
        # DeepSpeed runs "Adam" as AdamW unless told otherwise.
        "adam_w_mode": optimizer.type == "adamw",
    }
    if on_cpu:
        # FusedAdam needs CUDA (and compiles for ~100 s): torch's Adam/AdamW on CPU.
        params["torch_adam"] = True
    return {"type": name, "params": params}


def _scheduler(spec: Spec) -> dict[str, Any] | None:
    schedule, lr = spec.training.lr_schedule, spec.training.optimizer.lr
    if schedule.type == "cosine":
        # DeepSpeed's WarmupCosineLR needs warmup_num_steps >= 1 (and runs at least 2): a spec
        # without warm-up gets flat warm-up steps at the peak rate (warmup_min_ratio 1).
        return {
            "type": "WarmupCosineLR",
            "params": {
                "total_num_steps": spec.run.steps,
                "warmup_num_steps": max(1, schedule.warmup_steps),
                "warmup_min_ratio": 0.0 if schedule.warmup_steps else 1.0,
                "warmup_type": "linear",
                "cos_min_ratio": schedule.min_lr / lr if lr else 0.0,
            },
        }
    if schedule.warmup_steps:
        return {
            "type": "WarmupLR",
            "params": {
                "warmup_min_lr": 0.0,
                "warmup_max_lr": lr,
                "warmup_num_steps": schedule.warmup_steps,
                "warmup_type": "linear",
            },
        }
    return None


def deepspeed_config(spec: Spec, key: ConfigKey) -> dict[str, Any]:
    """The DeepSpeed config of every rank with this key."""
    training = spec.training
    triple = key.triple
    config: dict[str, Any] = {
        "train_batch_size": triple.train_batch_size,
        "train_micro_batch_size_per_gpu": triple.micro,
        "gradient_accumulation_steps": triple.accumulation,
        "gradient_clipping": training.gradient_clipping,
        "steps_per_print": max(1, spec.run.steps),
        "wall_clock_breakdown": False,
    }
    optimizer = _optimizer(spec, key.on_cpu)
    if optimizer is not None:
        config["optimizer"] = optimizer
    elif training.zero_stage > 0:
        config["zero_allow_untested_optimizer"] = True
    scheduler = _scheduler(spec)
    if scheduler is not None:
        config["scheduler"] = scheduler
    # The type ZeRO 1/2 reduces gradients in: the runtime's rule, priced by `traffic`. Unset,
    # DeepSpeed would reduce bf16 gradients in bf16 (engine.py `communication_data_type`: the
    # model's type); with "fp32" it widens its bf16 reduce bucket to fp32 for the all-reduce
    # (stage_1_and_2.py `allreduce_bucket`), as Megatron reduces bf16 gradients in fp32.
    config["communication_data_type"] = GRADIENT_TYPE[training.precision]
    if training.precision == "fp16":
        config["fp16"] = dict(FP16_LOSS_SCALING)
    elif training.precision == "bf16":
        config["bf16"] = {"enabled": True}
    bucket = reduce_bucket_elements(spec.model.parameter_count())
    config["zero_optimization"] = {
        "stage": training.zero_stage,
        "reduce_bucket_size": bucket,
        "allgather_bucket_size": bucket,
        "overlap_comm": False,
        "contiguous_gradients": True,
        "reduce_scatter": True,
    }
    return config


def config_problems(config: dict[str, Any], triple: BatchTriple) -> list[str]:
    """What DeepSpeed would accept silently but hetc must not write; [] if none."""
    problems = [f"unknown top-level key {k!r}" for k in sorted(set(config) - TOP_LEVEL_KEYS)]
    optimizer = config.get("optimizer")
    if optimizer is not None and optimizer.get("type") not in DEEPSPEED_OPTIMIZERS.values():
        problems.append(f"optimizer type {optimizer.get('type')!r} is not one DeepSpeed builds")
    if not config.get("gradient_clipping", 0.0) >= 0.0:
        problems.append(f"gradient_clipping {config['gradient_clipping']} must be >= 0")
    micro = config["train_micro_batch_size_per_gpu"]
    accumulation = config["gradient_accumulation_steps"]
    if config["train_batch_size"] != micro * accumulation * triple.data_parallel:
        problems.append(
            f"train_batch_size {config['train_batch_size']} != micro {micro} x accumulation"
            f" {accumulation} x data-parallel {triple.data_parallel}"
        )
    return problems
