"""The runtime's GPT model: its parameter contract, its start values, and its stages and TP
ranks against the single-process reference model (and that against a plain-torch oracle)."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from hetc.catalog import ModelArchitecture, models
from hetc.plan.settings import VOCAB_PAD
from hetc.runtime.model import (
    ModelConfig,
    StageModule,
    init_full,
    param_specs,
    reference_model,
    shard,
    unshard,
)

SEED = 11
BASE = {"layers": 3, "hidden": 32, "heads": 4, "vocab": 200, "max_positions": 16}
CONFIGS: dict[str, dict[str, Any]] = {
    "gpt2-like": {"position_offset": 2},
    "llama-like": {
        "vocab": 300,
        "kv_heads": 2,
        "ffn": 48,
        "mlp": "swiglu",
        "norm": "rmsnorm",
        "position": "rope",
        "tied_embeddings": False,
        "linear_bias": False,
    },
    "opt-like": {
        "head_dim": 16,
        "mlp": "relu",
        "final_norm": False,
        "tied_embeddings": False,
        "linear_bias": False,
        "qkv_bias": True,
    },
}
WHOLE = ("embedding", "final-norm", "head")


def architecture(**changes: Any) -> dict[str, Any]:
    """`training.json["model"]` as `hetc compile` writes it."""
    return asdict(ModelArchitecture(**{**BASE, **changes}))


def config(name: str) -> ModelConfig:
    return ModelConfig.from_dict(architecture(**CONFIGS[name]))


def stage_holds(stage: int, stages: int, tied: bool) -> tuple[str, ...]:
    """What the topology gives stage `stage` of `stages` to hold."""
    holds = ["embedding"] if stage == 0 else []
    if stage == stages - 1:
        holds += ["final-norm", "head"]
        holds += ["token-table-copy"] if tied and stages > 1 else []
    return tuple(holds)


def split(cfg: ModelConfig, cuts: list[int]) -> list[StageModule]:
    """Stages cut at block indices `cuts`, at TP 1."""
    bounds = [0, *cuts, cfg.layers]
    n = len(bounds) - 1
    return [
        StageModule(cfg, a, b, stage_holds(i, n, cfg.tied_embeddings), None, 1, 0, SEED)
        for i, (a, b) in enumerate(itertools.pairwise(bounds))
    ]


def batch(cfg: ModelConfig) -> tuple[Any, Any]:
    generator = torch.Generator().manual_seed(5)
    ids = torch.randint(cfg.vocab, (2, 8), generator=generator)
    return ids, torch.randint(cfg.vocab, (2, 8), generator=generator)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("embedding_projection", 16),
        ("local_attention_window", 4),
        ("attention_pattern", ("global", "local")),
    ],
)
def test_unsupported_fields_are_refused_by_name(field: str, value: object) -> None:
    """A model the runtime cannot build is refused, naming the field, never approximated."""
    with pytest.raises(ValueError, match=f"model field '{field}'"):
        ModelConfig.from_dict(architecture(**{field: value}))


def test_unknown_and_missing_fields_are_refused() -> None:
    """training.json from another hetc version must not train a different model silently."""
    with pytest.raises(ValueError, match="model field 'sliding' is unknown"):
        ModelConfig.from_dict({**architecture(), "sliding": 1})
    model = architecture()
    del model["norm"]
    with pytest.raises(ValueError, match="model field 'norm' is missing"):
        ModelConfig.from_dict(model)


def test_catalog_models_have_the_catalogs_parameter_count() -> None:
    """The contract counts what the cost model counts: per TP rank and per model, padding
    rows aside (every supported catalog preset)."""
    checked = 0
    for preset in models().values():
        arch = preset.architecture
        try:
            cfg = ModelConfig.from_dict(asdict(arch))
        except ValueError:
            continue  # embedding_projection or local attention: refused above
        specs = param_specs(cfg, 0, cfg.layers, WHOLE)
        tables = 1 if cfg.tied_embeddings else 2
        padding = tables * (cfg.padded_vocab - cfg.vocab) * cfg.hidden
        assert sum(math.prod(s.full_shape) for s in specs) - padding == arch.parameter_count()
        block = [s for s in specs if s.name.startswith("blocks.0.")]
        for tp in (1, 2, 4):
            held = sum(math.prod(s.full_shape) // (1 if s.tp_dim is None else tp) for s in block)
            assert held == arch.layer_parameters(tp), (preset.name, tp)
        checked += 1
    assert checked >= 6


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("cuts", [[1], [1, 2], [0, 3]])
def test_stage_specs_cover_the_reference_model_exactly(name: str, cuts: list[int]) -> None:
    """Any cut into stages holds every reference parameter once, with the reference's full
    shape; the tied token table is held by the first and the last stage under one name."""
    cfg = config(name)
    reference = {n: tuple(p.shape) for n, p in reference_model(cfg, SEED).named_parameters()}
    bounds = [0, *cuts, cfg.layers]
    held: list[tuple[str, tuple[int, ...]]] = []
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        holds = stage_holds(i, len(cuts) + 1, cfg.tied_embeddings)
        held += [(s.name, s.full_shape) for s in param_specs(cfg, a, b, holds)]
    twice = {"embedding.tokens.weight"} if cfg.tied_embeddings else set()
    assert sorted(set(held)) == sorted(reference.items())
    assert sorted(n for n, _ in held) == sorted([*reference, *twice])


def test_holds_are_checked() -> None:
    """A head without a token table, or a copy where there is no tie, is a wrong rank file."""
    tied, untied = config("gpt2-like"), config("llama-like")
    with pytest.raises(ValueError, match="needs 'embedding' or 'token-table-copy'"):
        param_specs(tied, 1, 3, ("final-norm", "head"))
    with pytest.raises(ValueError, match="'token-table-copy' belongs only"):
        param_specs(untied, 1, 3, ("final-norm", "head", "token-table-copy"))
    with pytest.raises(ValueError, match="'tail' is unknown"):
        param_specs(tied, 0, 3, ("embedding", "tail"))
    with pytest.raises(ValueError, match=r"blocks \[2, 4\)"):
        param_specs(tied, 2, 4, ())


def test_tp_degree_must_divide_the_split_dimensions() -> None:
    """GQA with fewer key/value heads than TP ranks has no equal split: refused, not guessed."""
    cfg = config("llama-like")
    with pytest.raises(ValueError, match=r"does not divide kv_heads \(2\)"):
        StageModule(cfg, 0, 1, ("embedding",), None, 4, 0, SEED)


@pytest.mark.parametrize("name", CONFIGS)
def test_shard_unshard_round_trip(name: str) -> None:
    """Slices are equal, split only along tp_dim, and reassemble to the whole in order."""
    cfg = config(name)
    for spec in param_specs(cfg, 0, cfg.layers, WHOLE):
        full = init_full(spec, SEED)
        for tp in (1, 2, 4):
            shards = [shard(full, spec, tp, r) for r in range(tp)]
            assert torch.equal(unshard(shards, spec), full), spec.name
            for piece in shards:
                expected = list(spec.full_shape)
                if spec.tp_dim is not None:
                    expected[spec.tp_dim] //= tp
                assert list(piece.shape) == expected


def test_query_and_key_slices_are_whole_heads() -> None:
    """Rows are head-major, so TP rank r's query rows are heads [r*h/t, (r+1)*h/t) and its key
    rows the key/value heads serving exactly those query heads."""
    cfg = config("llama-like")
    specs = {s.name: s for s in param_specs(cfg, 0, 1, ())}
    d = cfg.head_dim
    query = init_full(specs["blocks.0.attention.query.weight"], SEED)
    key = init_full(specs["blocks.0.attention.key.weight"], SEED)
    heads = query.view(cfg.heads, d, cfg.hidden)
    kv_heads = key.view(cfg.kv_heads, d, cfg.hidden)
    for r in range(2):
        q = shard(query, specs["blocks.0.attention.query.weight"], 2, r)
        k = shard(key, specs["blocks.0.attention.key.weight"], 2, r)
        assert torch.equal(q.view(-1, d, cfg.hidden), heads[2 * r : 2 * r + 2])
        assert torch.equal(k.view(-1, d, cfg.hidden), kv_heads[r : r + 1])


def test_init_is_deterministic_and_independent_of_the_split() -> None:
    """Start values depend on (seed, name) alone: every stage cut and both ends of a tied
    table start equal to the reference; the draw is the documented one."""
    cfg = config("gpt2-like")
    reference = dict(reference_model(cfg, SEED).named_parameters())
    for stage in split(cfg, [1, 2]):
        for name, p in stage.named_parameters():
            assert torch.equal(p, reference[name]), name
    specs = {s.name: s for s in param_specs(cfg, 0, cfg.layers, WHOLE)}
    table = init_full(specs["embedding.tokens.weight"], SEED)
    assert torch.equal(table, init_full(specs["embedding.tokens.weight"], SEED))
    assert not torch.equal(table, init_full(specs["embedding.tokens.weight"], SEED + 1))
    assert table.shape[0] % VOCAB_PAD == 0 and not table[cfg.vocab :].any()
    assert abs(table[: cfg.vocab].std().item() - 0.02) < 0.002
    out = init_full(specs["blocks.0.mlp.fc2.weight"], SEED)
    assert abs(out.std().item() - 0.02 / math.sqrt(2 * cfg.layers)) < 0.001
    assert torch.equal(init_full(specs["blocks.1.mlp.norm.weight"], SEED), torch.ones(32))
    assert not init_full(specs["blocks.1.mlp.fc1.bias"], SEED).any()


def chained_loss(stages: list[StageModule], ids: Any, targets: Any) -> float:
    """Forward through the stages with the graph cut at each boundary, as a pipeline runs
    them, then backward stage by stage with the boundary gradients."""
    boundaries = []
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


@pytest.mark.parametrize("name", CONFIGS)
def test_chained_stages_match_the_reference(name: str) -> None:
    """Two stages in one process give the reference's loss and every gradient; the tied
    table's gradient is the sum of its two holders'."""
    cfg = config(name)
    ids, targets = batch(cfg)
    reference = reference_model(cfg, SEED)
    expected = reference(ids, targets=targets)
    expected.backward()
    stages = split(cfg, [1])
    assert chained_loss(stages, ids, targets) == pytest.approx(expected.item(), rel=1e-6)
    grads: dict[str, Any] = {}
    for stage in stages:
        for n, p in stage.named_parameters():
            grads[n] = grads.get(n, 0) + p.grad
    for n, p in reference.named_parameters():
        torch.testing.assert_close(grads[n], p.grad, rtol=1e-5, atol=1e-6, msg=n)


def plain_loss(cfg: ModelConfig, p: dict[str, Any], ids: Any, targets: Any) -> Any:
    """The model written out with plain tensor operations, head by head, over the unpadded
    vocabulary, ending in torch's own cross_entropy."""
    seq = ids.shape[1]
    x = p["embedding.tokens.weight"][ids]
    if cfg.position == "learned":
        x = x + p["embedding.positions.weight"][torch.arange(seq) + cfg.position_offset]
    for i in range(cfg.layers):
        x = x + plain_attention(cfg, p, f"blocks.{i}.attention", x)
        x = x + plain_mlp(cfg, p, f"blocks.{i}.mlp", x)
    if cfg.final_norm:
        x = plain_norm(cfg, p, "final_norm", x)
    table = p["embedding.tokens.weight" if cfg.tied_embeddings else "head.weight"]
    logits = x @ table[: cfg.vocab].T
    return F.cross_entropy(logits.reshape(-1, cfg.vocab), targets.reshape(-1), reduction="sum")


def plain_norm(cfg: ModelConfig, p: dict[str, Any], prefix: str, x: Any) -> Any:
    if cfg.norm == "rmsnorm":
        return x / (x.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * p[f"{prefix}.weight"]
    centred = x - x.mean(-1, keepdim=True)
    scaled = centred / (centred.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt()
    return scaled * p[f"{prefix}.weight"] + p[f"{prefix}.bias"]


def plain_linear(p: dict[str, Any], prefix: str, x: Any) -> Any:
    y = x @ p[f"{prefix}.weight"].T
    return y + p[f"{prefix}.bias"] if f"{prefix}.bias" in p else y


def plain_rope(x: Any) -> Any:
    """Rotate pairs (j, j + d/2) of each head by position * 10000^(-2j/d), as complex numbers."""
    seq, half = x.shape[0], x.shape[-1] // 2
    angle = torch.arange(seq)[:, None] * 10000.0 ** (-torch.arange(half) * 2 / (2 * half))
    z = torch.complex(x[..., :half], x[..., half:]) * torch.polar(torch.ones(()), angle)
    return torch.cat((z.real, z.imag), dim=-1)


def plain_attention(cfg: ModelConfig, p: dict[str, Any], prefix: str, x: Any) -> Any:
    h = plain_norm(cfg, p, f"{prefix}.norm", x)
    micro, seq, _ = x.shape
    d, group = cfg.head_dim, cfg.heads // cfg.kv_heads
    q, k, v = (
        plain_linear(p, f"{prefix}.{n}", h).view(micro, seq, -1, d)
        for n in ("query", "key", "value")
    )
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    heads = []
    for m in range(micro):
        for j in range(cfg.heads):
            qj, kj, vj = q[m, :, j], k[m, :, j // group], v[m, :, j // group]
            if cfg.position == "rope":
                qj, kj = plain_rope(qj), plain_rope(kj)
            scores = (qj @ kj.T / math.sqrt(d)).masked_fill(~causal, float("-inf"))
            heads.append(scores.softmax(-1) @ vj)
    joined = torch.stack(heads).view(micro, cfg.heads, seq, d).transpose(1, 2)
    return plain_linear(p, f"{prefix}.output", joined.reshape(micro, seq, -1))


def plain_mlp(cfg: ModelConfig, p: dict[str, Any], prefix: str, x: Any) -> Any:
    h = plain_norm(cfg, p, f"{prefix}.norm", x)
    if cfg.mlp == "swiglu":
        gate = plain_linear(p, f"{prefix}.gate", h)
        inner = gate * torch.sigmoid(gate) * plain_linear(p, f"{prefix}.up", h)
    elif cfg.mlp == "relu":
        inner = plain_linear(p, f"{prefix}.fc1", h).clamp(min=0)
    else:
        u = plain_linear(p, f"{prefix}.fc1", h)
        inner = 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
    return plain_linear(p, f"{prefix}.fc2", inner)


@pytest.mark.parametrize("name", CONFIGS)
def test_reference_matches_plain_torch_and_padding_never_counts(name: str) -> None:
    """The reference model, with every parameter moved off its start value, is the plain-torch
    model over the unpadded vocabulary, even with large values in the padded rows (vocabularies
    200 and 300 are not multiples of 128), and the padded rows get no gradient."""
    cfg = config(name)
    assert cfg.padded_vocab % VOCAB_PAD == 0 and cfg.padded_vocab > cfg.vocab
    model = reference_model(cfg, SEED)
    parameters = dict(model.named_parameters())
    tables = [s.name for s in model.specs if s.drawn_rows is not None]
    generator = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for p in parameters.values():  # zero biases and unit norms would hide their misuse
            p.add_(0.05 * torch.randn(p.shape, generator=generator))
        for table in tables:
            parameters[table][cfg.vocab :].normal_(0.0, 3.0, generator=generator)
    ids, targets = batch(cfg)
    loss = model(ids, targets=targets)
    expected = plain_loss(cfg, {n: p.detach() for n, p in parameters.items()}, ids, targets)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    loss.backward()
    for table in tables:
        assert not parameters[table].grad[cfg.vocab :].any(), table


def test_stage_roles_are_enforced() -> None:
    """Targets go to the head stage only, and the head stage cannot run without them."""
    cfg = config("llama-like")
    first, last = split(cfg, [1])
    ids, targets = batch(cfg)
    with pytest.raises(ValueError, match="targets go to the stage that holds the head"):
        first(ids, targets=targets)
    with pytest.raises(ValueError, match="needs targets"):
        last(first(ids))


def test_bf16_stage_runs_with_a_float32_loss() -> None:
    """Parameters and hidden states take the given dtype; the loss is summed in float32."""
    cfg = replace(config("gpt2-like"), layers=1)
    model = StageModule(cfg, 0, 1, WHOLE, None, 1, 0, SEED, torch.bfloat16)
    ids, targets = batch(cfg)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    loss = model(ids, targets=targets)
    assert loss.dtype == torch.float32 and math.isfinite(loss.item())


@pytest.fixture(scope="module")
def tp2_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One launch of two gloo processes (tests/runtime_tp_worker.py) for every TP-2 case."""
    tmp = tmp_path_factory.mktemp("tp2")
    worker = Path(__file__).with_name("runtime_tp_worker.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out, init = tmp / "results.json", tmp / "init"
    ranks = [
        subprocess.Popen(
            [sys.executable, str(worker), str(rank), str(init), str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    logs = [rank.communicate(timeout=180)[0] for rank in ranks]
    assert all(rank.returncode == 0 for rank in ranks), "\n".join(logs)
    loaded: dict[str, Any] = json.loads(out.read_text())
    return loaded


@pytest.mark.slow
@pytest.mark.parametrize("case", ["gelu-mha-tied", "swiglu-gqa-rope", "two-stages-tied"])
def test_tp2_matches_the_reference(tp2_results: dict[str, Any], case: str) -> None:
    """TP 2 over gloo (vocab-parallel embedding and cross-entropy with padding on rank 1,
    column and row-parallel layers, GQA, a tied table split over two stages) starts from the
    reference's weights and gives its loss and every gradient."""
    result = tp2_results[case]
    assert result["init_equal"]
    assert result["loss_rel"] < 1e-6
    assert result["grad_abs"] < 1e-5
    assert tp2_results["gather"] < 1e-6


@pytest.mark.slow
def test_tp2_without_the_forward_reduce_differs(tp2_results: dict[str, Any]) -> None:
    """The comparison has teeth: with reduce_from_region's all-reduce disabled, it fails."""
    result = tp2_results["mutated"]
    assert result["loss_rel"] > 1e-6
    assert result["grad_abs"] > 1e-5
