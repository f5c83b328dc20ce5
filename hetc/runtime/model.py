"""The GPT decoder the runtime trains: any block range of it, at any TP degree, same weights.

Plans differ in how they cut the model (stages) and split it (TP degree per replica), and a
heterogeneous plan mixes several cuts of one model in one job. So parameters are defined once,
independently of any plan, by the *parameter contract*: a stable name, a full shape and the
dimension TP splits (`ParamSpec`, `param_specs`). A stage holds the contract's parameters for
its blocks and ends, each as this TP rank's equal slice (`shard`); its start values are slices
of full tensors drawn from a generator seeded by (seed, name) (`init_full`), so every plan,
every rank and the single-process `reference_model` start from the same weights, and a
checkpoint written under one plan is read under another by name.

Names (i a block index, counted over the whole model):

    embedding.tokens.weight          [padded vocab, hidden]   tp_dim 0  (vocab-parallel)
    embedding.positions.weight       [max_positions + position_offset, hidden]  replicated
                                                              (learned positions only)
    blocks.{i}.attention.norm.weight / .bias                  replicated (bias: layernorm)
    blocks.{i}.attention.{query,key,value}.weight / .bias     tp_dim 0  (bias: qkv_bias)
    blocks.{i}.attention.output.weight                        tp_dim 1
    blocks.{i}.attention.output.bias                          replicated (linear_bias)
    blocks.{i}.mlp.norm.weight / .bias                        replicated (bias: layernorm)
    blocks.{i}.mlp.fc1.weight / .bias  (swiglu: mlp.gate, mlp.up)  tp_dim 0 (bias: linear_bias)
    blocks.{i}.mlp.fc2.weight                                 tp_dim 1
    blocks.{i}.mlp.fc2.bias                                   replicated (linear_bias)
    final_norm.weight / .bias                                 replicated (final_norm)
    head.weight                      [padded vocab, hidden]   tp_dim 0  (untied only)

Query/key/value rows are head-major, so an equal split of them is a split by (key/value)
heads. An equal split into t pieces also follows the topology's chunk convention: TP rank r
holds chunks [r * C / t, (r + 1) * C / t) of C. With tied embeddings the last stage of a
multi-stage plan holds "token-table-copy": `embedding.tokens.weight` again, used as the head,
with the same start values as the first stage's (the topology's tied-embedding groups keep
the two in step).

The vocabulary is padded to a multiple of `hetc.plan.settings.VOCAB_PAD` (one value the cost
model's parameter count reads too) so that every TP degree of the plan splits it equally,
whatever the plan; the padded rows start at zero, are never a valid id or target, and their
logits count as -inf. Dropout (`training.dropout`) is residual dropout whose masks derive from
the seed, the step and each sample's index in the batch (`DropoutKey`), never the plan, so
every plan drops the same elements.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from hetc.plan import model_problems
from hetc.plan.settings import padded_vocab
from hetc.runtime.tensor_parallel import (
    ColumnParallelLinear,
    Group,
    RowParallelLinear,
    VocabParallelEmbedding,
    column_parallel_linear,
    copy_to_region,
    vocab_parallel_cross_entropy,
)

INIT_STD = 0.02
NORM_EPS = 1e-5
ROPE_BASE = 10000.0
HOLDS = ("embedding", "final-norm", "head", "token-table-copy")
"""What a stage may hold besides its blocks (the rank file's `holds`)."""

Init = Literal["normal", "zeros", "ones"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelConfig:
    """The architecture with every default resolved (see `hetc.catalog.ModelArchitecture`)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    mlp: Literal["gelu", "relu", "swiglu"]
    norm: Literal["layernorm", "rmsnorm"]
    position: Literal["learned", "rope"]
    max_positions: int
    position_offset: int
    """Rows of the learned position table before position 0 (OPT keeps 2)."""
    tied_embeddings: bool
    final_norm: bool
    linear_bias: bool
    qkv_bias: bool

    @property
    def padded_vocab(self) -> int:
        return padded_vocab(self.vocab)

    @classmethod
    def from_dict(cls, model: Mapping[str, Any]) -> ModelConfig:
        """From `training.json["model"]` (`dataclasses.asdict` of the catalog's architecture).
        Every field must be present and known: a field this runtime does not know may change
        the model, and training a different model than planned must not pass silently."""
        _refuse_unsupported(model)
        config = cls(
            layers=model["layers"],
            hidden=model["hidden"],
            heads=model["heads"],
            kv_heads=_default(model["kv_heads"], model["heads"]),
            head_dim=_default(model["head_dim"], model["hidden"] // model["heads"]),
            ffn=_default(model["ffn"], 4 * model["hidden"]),
            vocab=model["vocab"],
            mlp=model["mlp"],
            norm=model["norm"],
            position=model["position"],
            max_positions=model["max_positions"],
            position_offset=model["position_offset"],
            tied_embeddings=model["tied_embeddings"],
            final_norm=model["final_norm"],
            linear_bias=model["linear_bias"],
            qkv_bias=_default(model["qkv_bias"], model["linear_bias"]),
        )
        config._check(model)
        return config

    def _check(self, model: Mapping[str, Any]) -> None:
        choices = {"mlp": ("gelu", "relu", "swiglu"), "norm": ("layernorm", "rmsnorm")}
        choices["position"] = ("learned", "rope")
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"model field {name!r}: {getattr(self, name)!r} not in {allowed}")
        if model["head_dim"] is None and self.hidden % self.heads:
            raise ValueError(f"model field 'heads': {self.heads} heads do not divide hidden")
        if self.heads % self.kv_heads:
            raise ValueError(f"model field 'kv_heads': {self.kv_heads} do not divide heads")
        if self.position == "rope" and self.head_dim % 2:
            raise ValueError(
                f"model field 'head_dim': rope needs an even width, not {self.head_dim}"
            )


_FIELDS = frozenset(
    {
        *ModelConfig.__dataclass_fields__,
        "embedding_projection",
        "local_attention_window",
        "attention_pattern",
    }
)


def _default(value: Any, default: Any) -> Any:
    return default if value is None else value


def _refuse_unsupported(model: Mapping[str, Any]) -> None:
    unknown = sorted(set(model) - _FIELDS)
    missing = sorted(_FIELDS - set(model))
    if unknown:
        raise ValueError(f"model field {unknown[0]!r} is unknown to this runtime")
    if missing:
        raise ValueError(f"model field {missing[0]!r} is missing")
    refused = model_problems(model)
    if refused:
        name, why = refused[0]
        raise ValueError(f"model field {name!r}: {why}")


@dataclass(frozen=True, kw_only=True, slots=True)
class ParamSpec:
    """One parameter of the contract (see the module docstring) and how it starts."""

    name: str
    full_shape: tuple[int, ...]
    tp_dim: int | None
    """The dimension TP splits equally; None means every TP rank holds the whole tensor."""
    init: Init
    std: float = 0.0
    """For `init` normal."""
    drawn_rows: int | None = None
    """For the vocabulary tables: rows drawn; the padding rows after them start at zero."""


def param_specs(
    config: ModelConfig, first_block: int, end_block: int, holds: Sequence[str]
) -> list[ParamSpec]:
    """The contract's parameters of a stage with blocks [first_block, end_block) and `holds`,
    in the order `StageModule.named_parameters()` gives them."""
    _check_stage(config, first_block, end_block, holds)
    specs: list[ParamSpec] = []
    if "embedding" in holds or "token-table-copy" in holds:
        specs.append(_vocab_table("embedding.tokens.weight", config))
    if "embedding" in holds and config.position == "learned":
        rows = config.max_positions + config.position_offset
        specs.append(
            ParamSpec(
                name="embedding.positions.weight",
                full_shape=(rows, config.hidden),
                tp_dim=None,
                init="normal",
                std=INIT_STD,
            )
        )
    for i in range(first_block, end_block):
        specs += _block_specs(config, f"blocks.{i}")
    if "final-norm" in holds and config.final_norm:
        specs += _norm_specs(config, "final_norm")
    if "head" in holds and not config.tied_embeddings:
        specs.append(_vocab_table("head.weight", config))
    return specs


def _check_stage(config: ModelConfig, first: int, end: int, holds: Sequence[str]) -> None:
    if not 0 <= first <= end <= config.layers:
        raise ValueError(f"blocks [{first}, {end}) are not within the {config.layers} layers")
    unknown = sorted(set(holds) - set(HOLDS))
    if unknown:
        raise ValueError(f"holds {unknown[0]!r} is unknown (known: {', '.join(HOLDS)})")
    if "token-table-copy" in holds and (
        not config.tied_embeddings or "embedding" in holds or "head" not in holds
    ):
        raise ValueError(
            "holds 'token-table-copy' belongs only to the head stage of a tied model that does"
            " not hold the embedding"
        )
    if (
        config.tied_embeddings
        and "head" in holds
        and not {"embedding", "token-table-copy"} & set(holds)
    ):
        raise ValueError("holds 'head' of a tied model needs 'embedding' or 'token-table-copy'")


def _vocab_table(name: str, config: ModelConfig) -> ParamSpec:
    return ParamSpec(
        name=name,
        full_shape=(config.padded_vocab, config.hidden),
        tp_dim=0,
        init="normal",
        std=INIT_STD,
        drawn_rows=config.vocab,
    )


def _norm_specs(config: ModelConfig, prefix: str) -> list[ParamSpec]:
    shape = (config.hidden,)
    specs = [ParamSpec(name=f"{prefix}.weight", full_shape=shape, tp_dim=None, init="ones")]
    if config.norm == "layernorm":
        specs.append(ParamSpec(name=f"{prefix}.bias", full_shape=shape, tp_dim=None, init="zeros"))
    return specs


def _linear_specs(
    prefix: str, outputs: int, inputs: int, *, bias: bool, column: bool, std: float
) -> list[ParamSpec]:
    """A column-parallel (split by output) or row-parallel (split by input, bias whole) map."""
    specs = [
        ParamSpec(
            name=f"{prefix}.weight",
            full_shape=(outputs, inputs),
            tp_dim=0 if column else 1,
            init="normal",
            std=std,
        )
    ]
    if bias:
        bias_dim = 0 if column else None
        specs.append(
            ParamSpec(name=f"{prefix}.bias", full_shape=(outputs,), tp_dim=bias_dim, init="zeros")
        )
    return specs


def _block_specs(config: ModelConfig, prefix: str) -> list[ParamSpec]:
    h, f, d = config.hidden, config.ffn, config.head_dim
    q, kv = config.heads * d, config.kv_heads * d
    # GPT-2: residual-branch outputs scaled so the residual stream's variance does not grow
    # with depth (two branches per block).
    out_std = INIT_STD / math.sqrt(2 * config.layers)
    bias, qkv_bias = config.linear_bias, config.qkv_bias
    a, m = f"{prefix}.attention", f"{prefix}.mlp"
    specs = _norm_specs(config, f"{a}.norm")
    specs += _linear_specs(f"{a}.query", q, h, bias=qkv_bias, column=True, std=INIT_STD)
    specs += _linear_specs(f"{a}.key", kv, h, bias=qkv_bias, column=True, std=INIT_STD)
    specs += _linear_specs(f"{a}.value", kv, h, bias=qkv_bias, column=True, std=INIT_STD)
    specs += _linear_specs(f"{a}.output", h, q, bias=bias, column=False, std=out_std)
    specs += _norm_specs(config, f"{m}.norm")
    ups = ("gate", "up") if config.mlp == "swiglu" else ("fc1",)
    for up in ups:
        specs += _linear_specs(f"{m}.{up}", f, h, bias=bias, column=True, std=INIT_STD)
    specs += _linear_specs(f"{m}.fc2", h, f, bias=bias, column=False, std=out_std)
    return specs


def _seed_of(name: str) -> int:
    """A 64-bit generator seed from a name (sha256): stable across processes and releases."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")


def init_full(spec: ParamSpec, seed: int) -> Tensor:
    """The whole tensor's start value in float32, a function of (seed, name) alone: the same
    under every plan, stage cut and TP degree (each rank then takes its `shard`)."""
    if spec.init != "normal":
        return (torch.ones if spec.init == "ones" else torch.zeros)(spec.full_shape)
    generator = torch.Generator().manual_seed(_seed_of(f"{seed}/{spec.name}"))
    rows = spec.full_shape[0] if spec.drawn_rows is None else spec.drawn_rows
    full = torch.zeros(spec.full_shape)
    full[:rows].normal_(0.0, spec.std, generator=generator)
    return full


def shard(full: Tensor, spec: ParamSpec, tp_size: int, tp_rank: int) -> Tensor:
    """TP rank `tp_rank`'s equal slice along `spec.tp_dim` (a copy; the whole for replicated)."""
    if spec.tp_dim is None:
        return full.clone()
    size = full.shape[spec.tp_dim]
    if size % tp_size:
        raise ValueError(f"{spec.name}: TP degree {tp_size} does not divide {size}")
    width = size // tp_size
    return full.narrow(spec.tp_dim, tp_rank * width, width).clone()


def unshard(shards: Sequence[Tensor], spec: ParamSpec) -> Tensor:
    """The whole tensor from every TP rank's slice, in TP-rank order; for a replicated
    parameter, TP rank 0's copy (the others are not compared)."""
    if spec.tp_dim is None:
        return shards[0]
    return torch.cat(list(shards), dim=spec.tp_dim)


class Norm(nn.Module):
    def __init__(self, config: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.kind = config.norm
        self.weight = nn.Parameter(torch.empty(config.hidden, dtype=dtype))
        layernorm = config.norm == "layernorm"
        self.bias = nn.Parameter(torch.empty(config.hidden, dtype=dtype)) if layernorm else None

    def forward(self, x: Tensor) -> Tensor:
        shape = self.weight.shape
        if self.kind == "layernorm":
            return F.layer_norm(x, shape, self.weight, self.bias, NORM_EPS)
        return F.rms_norm(x, shape, self.weight, NORM_EPS)


@dataclass(frozen=True, slots=True)
class _Parallel:
    """Where a module sits in its TP group; modules size their slices by it."""

    group: Group
    size: int
    rank: int
    dtype: torch.dtype

    def column(self, inputs: int, outputs: int, bias: bool) -> ColumnParallelLinear:
        return ColumnParallelLinear(
            inputs, outputs, bias=bias, group=self.group, tp_size=self.size, dtype=self.dtype
        )

    def row(self, inputs: int, outputs: int, bias: bool) -> RowParallelLinear:
        return RowParallelLinear(
            inputs, outputs, bias=bias, group=self.group, tp_size=self.size, dtype=self.dtype
        )


def _rotate(x: Tensor, rope: tuple[Tensor, Tensor]) -> Tensor:
    """Rotary embedding in the GPT-NeoX/LLaMA layout (a head's two halves pair up)."""
    cos, sin = rope
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


class Attention(nn.Module):
    """Pre-norm causal self-attention with its residual; this rank's heads only."""

    def __init__(self, config: ModelConfig, tp: _Parallel) -> None:
        super().__init__()
        h, d = config.hidden, config.head_dim
        q, kv = config.heads * d, config.kv_heads * d
        self.group, self.head_dim = tp.group, d
        self.norm = Norm(config, tp.dtype)
        self.query = tp.column(h, q, config.qkv_bias)
        self.key = tp.column(h, kv, config.qkv_bias)
        self.value = tp.column(h, kv, config.qkv_bias)
        self.output = tp.row(q, h, config.linear_bias)

    def forward(
        self, x: Tensor, rope: tuple[Tensor, Tensor] | None, drop: Dropout | None = None
    ) -> Tensor:
        micro, seq, _ = x.shape
        h = copy_to_region(self.norm(x), self.group)
        q, k, v = (
            layer.local(h).view(micro, seq, -1, self.head_dim).transpose(1, 2)
            for layer in (self.query, self.key, self.value)
        )
        if rope is not None:
            q, k = _rotate(q, rope), _rotate(k, rope)
        grouped = q.shape[1] != k.shape[1]
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=grouped)
        out: Tensor = self.output(o.transpose(1, 2).reshape(micro, seq, -1))
        return x + (out if drop is None else drop(out))


class MLP(nn.Module):
    """Pre-norm MLP with its residual; this rank's columns of the inner width only."""

    def __init__(self, config: ModelConfig, tp: _Parallel) -> None:
        super().__init__()
        h, f = config.hidden, config.ffn
        self.group, self.kind = tp.group, config.mlp
        self.norm = Norm(config, tp.dtype)
        if config.mlp == "swiglu":
            self.gate = tp.column(h, f, config.linear_bias)
            self.up = tp.column(h, f, config.linear_bias)
        else:
            self.fc1 = tp.column(h, f, config.linear_bias)
        self.fc2 = tp.row(f, h, config.linear_bias)

    def forward(self, x: Tensor, drop: Dropout | None = None) -> Tensor:
        h = copy_to_region(self.norm(x), self.group)
        if self.kind == "swiglu":
            inner = F.silu(self.gate.local(h)) * self.up.local(h)
        elif self.kind == "relu":
            inner = F.relu(self.fc1.local(h))
        else:
            inner = F.gelu(self.fc1.local(h), approximate="tanh")  # GPT-2's gelu
        out: Tensor = self.fc2(inner)
        return x + (out if drop is None else drop(out))


@dataclass(frozen=True, slots=True)
class DropoutKey:
    """What a microbatch's dropout masks derive from: the seed, the step and the global index
    of each sample in the step's batch - never the plan - so every plan drops the same
    elements, and recomputation (activation checkpointing) draws the same masks again."""

    seed: int
    step: int
    samples: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Dropout:
    """Residual dropout at one site of one block: a mask per sample of the whole
    [seq, hidden] output (replicated over the TP group, so every TP rank draws the same)."""

    key: DropoutKey
    layer: int
    site: str
    p: float

    def __call__(self, out: Tensor) -> Tensor:
        masks = []
        for sample in self.key.samples:
            generator = torch.Generator(device="cpu")
            name = f"dropout/{self.key.seed}/{self.key.step}/{sample}/{self.layer}/{self.site}"
            generator.manual_seed(_seed_of(name))
            masks.append(torch.rand(out.shape[1:], generator=generator) >= self.p)
        keep = torch.stack(masks).to(device=out.device, dtype=out.dtype)
        return out * keep / (1.0 - self.p)


class Block(nn.Module):
    def __init__(self, config: ModelConfig, tp: _Parallel) -> None:
        super().__init__()
        self.attention = Attention(config, tp)
        self.mlp = MLP(config, tp)

    def forward(
        self,
        x: Tensor,
        rope: tuple[Tensor, Tensor] | None,
        drops: tuple[Dropout, Dropout] | None = None,
    ) -> Tensor:
        attention, mlp = (None, None) if drops is None else drops
        out: Tensor = self.mlp(self.attention(x, rope, attention), mlp)
        return out


class _Table(nn.Module):
    """A replicated lookup table (learned positions)."""

    def __init__(self, rows: int, width: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(rows, width, dtype=dtype))

    def forward(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.weight)


class Embedding(nn.Module):
    """The token table (vocab-parallel) and, for learned positions, the position table. The
    head stage of a tied multi-stage model holds the token table alone, as its head."""

    def __init__(self, config: ModelConfig, tp: _Parallel, *, positions: bool) -> None:
        super().__init__()
        self.tokens = VocabParallelEmbedding(
            config.padded_vocab,
            config.hidden,
            group=tp.group,
            tp_size=tp.size,
            tp_rank=tp.rank,
            dtype=tp.dtype,
        )
        rows = config.max_positions + config.position_offset
        self.positions = _Table(rows, config.hidden, tp.dtype) if positions else None
        self.position_offset = config.position_offset

    def forward(self, ids: Tensor, positions: Tensor) -> Tensor:
        tokens: Tensor = self.tokens(ids)
        if self.positions is None:
            return tokens
        placed: Tensor = self.positions(positions + self.position_offset)
        return tokens + placed


class StageModule(nn.Module):
    """Blocks [first_block, end_block) and what `holds` names, as TP rank `tp_rank` of
    `tp_size`; `named_parameters()` gives exactly `param_specs(...)`, in that order.

    `forward(x, positions=None, targets=None)`: a stage holding "embedding" takes token ids
    [micro, seq] (int64), any other stage hidden states [micro, seq, hidden]. A stage holding
    "head" needs `targets` [micro, seq] (ids below the vocabulary size) and returns the SUM of
    the token losses of the microbatch, a float32 scalar replicated over the TP group: the
    caller divides (by tokens, accumulation steps, ...), so no stage bakes in a batch size.
    Any other stage returns hidden states [micro, seq, hidden], replicated over the TP group.
    `positions` ([seq] or [micro, seq], default 0, 1, ...) is given to every stage alike: rope
    rotates in every block, and learned positions look up row `position + position_offset`.
    """

    def __init__(
        self,
        config: ModelConfig,
        first_block: int,
        end_block: int,
        holds: Sequence[str],
        tp_group: Group,
        tp_size: int,
        tp_rank: int,
        seed: int,
        dtype: torch.dtype = torch.float32,
        *,
        dropout: float = 0.0,
        checkpoint_activations: bool = False,
    ) -> None:
        super().__init__()
        self.dropout, self.checkpoint_activations = dropout, checkpoint_activations
        specs = param_specs(config, first_block, end_block, holds)
        _check_tp(config, tp_group, tp_size, tp_rank)
        tp = _Parallel(tp_group if tp_size > 1 else None, tp_size, tp_rank, dtype)
        self.config, self.tp = config, tp
        self.specs = tuple(specs)
        self.takes_tokens = "embedding" in holds
        self.computes_loss = "head" in holds
        self.embedding = (
            Embedding(config, tp, positions="embedding" in holds and config.position == "learned")
            if "embedding" in holds or "token-table-copy" in holds
            else None
        )
        self.blocks = nn.ModuleDict(
            {str(i): Block(config, tp) for i in range(first_block, end_block)}
        )
        self.final_norm = (
            Norm(config, dtype) if "final-norm" in holds and config.final_norm else None
        )
        untied_head = self.computes_loss and not config.tied_embeddings
        self.head = tp.column(config.hidden, config.padded_vocab, False) if untied_head else None
        self._initialise(seed)

    def _initialise(self, seed: int) -> None:
        parameters = dict(self.named_parameters())
        assert list(parameters) == [s.name for s in self.specs], "modules and contract differ"
        with torch.no_grad():
            for spec in self.specs:
                value = shard(init_full(spec, seed), spec, self.tp.size, self.tp.rank)
                assert value.shape == parameters[spec.name].shape, spec.name
                parameters[spec.name].copy_(value)

    def forward(
        self,
        x: Tensor,
        positions: Tensor | None = None,
        targets: Tensor | None = None,
        noise: DropoutKey | None = None,
    ) -> Tensor:
        """`noise` names the microbatch's samples for dropout (needed when `dropout` > 0)."""
        seq = x.shape[1]
        if positions is None:
            positions = torch.arange(seq, device=x.device)
        hidden = self._embed(x, positions) if self.takes_tokens else x
        rope = self._rope(positions, hidden.dtype) if self.config.position == "rope" else None
        if self.dropout > 0 and noise is None:
            raise ValueError("dropout needs the microbatch's DropoutKey")
        for index, block in self.blocks.items():
            drops = None
            if self.dropout > 0:
                assert noise is not None
                drops = (
                    Dropout(noise, int(index), "attention", self.dropout),
                    Dropout(noise, int(index), "mlp", self.dropout),
                )
            if self.checkpoint_activations and torch.is_grad_enabled():
                hidden = checkpoint(block, hidden, rope, drops, use_reentrant=False)
            else:
                hidden = block(hidden, rope, drops)
        if self.final_norm is not None:
            hidden = self.final_norm(hidden)
        if not self.computes_loss:
            if targets is not None:
                raise ValueError("targets go to the stage that holds the head")
            return hidden
        if targets is None:
            raise ValueError("the stage that holds the head needs targets")
        return self._loss(hidden, targets)

    def _embed(self, ids: Tensor, positions: Tensor) -> Tensor:
        assert self.embedding is not None
        embedded: Tensor = self.embedding(ids, positions)
        return embedded

    def _rope(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos and sin broadcastable to [micro, heads, seq, head_dim]."""
        d = self.config.head_dim
        exponents = torch.arange(0, d, 2, device=positions.device, dtype=torch.float32) / d
        angles = positions.to(torch.float32).unsqueeze(-1) / ROPE_BASE**exponents
        angles = torch.cat((angles, angles), dim=-1)
        if angles.dim() == 3:
            angles = angles.unsqueeze(1)
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def _loss(self, hidden: Tensor, targets: Tensor) -> Tensor:
        if self.head is not None:
            logits = self.head(hidden)
            local = self.head.weight.shape[0]
        else:
            assert self.embedding is not None
            table = self.embedding.tokens.weight
            logits = column_parallel_linear(hidden, table, None, self.tp.group)
            local = table.shape[0]
        losses = vocab_parallel_cross_entropy(
            logits, targets, self.tp.group, self.tp.rank * local, self.config.vocab
        )
        return losses.sum()


def _check_tp(config: ModelConfig, group: Group, tp_size: int, tp_rank: int) -> None:
    if not 0 <= tp_rank < tp_size:
        raise ValueError(f"TP rank {tp_rank} is not below the TP degree {tp_size}")
    for what, size in (
        ("heads", config.heads),
        ("kv_heads", config.kv_heads),
        ("ffn", config.ffn),
        ("padded vocabulary", config.padded_vocab),
    ):
        if size % tp_size:
            raise ValueError(f"TP degree {tp_size} does not divide {what} ({size})")
    if tp_size > 1 and group is None:
        raise ValueError(f"TP degree {tp_size} needs a TP process group")


def reference_model(
    config: ModelConfig, seed: int, dtype: torch.dtype = torch.float32
) -> StageModule:
    """The whole model in one process at TP 1: the oracle every plan's stages must match."""
    holds = ("embedding", "final-norm", "head")
    return StageModule(config, 0, config.layers, holds, None, 1, 0, seed, dtype)
