"""Built-in catalogs: exact parameter counts, complete device data, specific sources."""

from __future__ import annotations

import pytest

from hetc import catalog

# Exact counts, each from an independent source (not from hetc's formula):
#  - OPT, GPT-Neo, Llama, Llama-3: `sum(p.numel())` of the Hugging Face transformers model built
#    on the meta device from the published config.json fields listed in models.json.
#  - GPT-3 (no released config): a GPT-2-layout torch module (LayerNorm, fused QKV Linear with
#    bias, output Linear, 4h MLP, tied embeddings, 2048 learned positions, vocab 50257) built
#    with the Table 2.1 shapes of Brown et al. 2020; it reproduces transformers' GPT2 counts for
#    2.7B and 6.7B, where heads x d_head equals d_model.
PUBLISHED_COUNTS = {
    "OPT-350M": 331_196_416,
    "GPT-Neo-2.7B": 2_651_307_520,
    "Llama-7B": 6_738_415_616,
    "Llama-13B": 13_015_864_320,
    "Llama-33B": 32_528_943_616,
    "Llama-65B": 65_285_660_672,
    "Llama-3-8B": 8_030_261_248,
    "GPT-3-1.3B": 1_517_123_584,
    "GPT-3-2.7B": 2_651_553_280,
    "GPT-3-6.7B": 6_658_404_352,
    "GPT-3-13B": 12_936_488_380,
}

REQUIRED_DEVICES = [
    "A100-40GB",
    "A100-80GB",
    "H100-80GB",
    "H100-NVL",
    "H200",
    "GH200",
    "V100-16GB",
    "V100-32GB",
    "A10G",
    "L4",
    "T4",
    "RTX-3090",
    "RTX-2080",
    "Titan-RTX",
]


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_parameter_count_matches_published_config(name: str) -> None:
    """Counting from the architecture fields gives the exact count of the published model."""
    preset = catalog.models()[name]
    assert preset.architecture.parameter_count() == PUBLISHED_COUNTS[name]
    assert preset.parameters == PUBLISHED_COUNTS[name]


def test_every_required_model_is_in_the_catalog() -> None:
    """The catalog holds exactly the models the foundation issue lists, all well formed."""
    assert set(catalog.models()) == set(PUBLISHED_COUNTS)
    for preset in catalog.models().values():
        assert preset.architecture.problems() == []


def test_gpt3_13b_keeps_its_explicit_head_size() -> None:
    """GPT-3 13B: hidden 5140 with 40 heads of 128 is accepted because head_dim is explicit."""
    arch = catalog.models()["GPT-3-13B"].architecture
    assert (arch.hidden, arch.heads, arch.resolved_head_dim) == (5140, 40, 128)
    assert arch.problems() == []


def test_llama_breakdown_by_hand() -> None:
    """Llama-7B's embedding, blocks and head, computed by hand from its config."""
    arch = catalog.models()["Llama-7B"].architecture
    per_block = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096
    assert arch.layer_parameters() == per_block
    assert arch.parameter_breakdown() == {
        "embedding": 32000 * 4096,
        "blocks": 32 * per_block,
        "head": 4096 + 32000 * 4096,
    }


def test_local_attention_pattern_is_kept() -> None:
    """GPT-Neo alternates global and local (window 256) attention, starting with global."""
    arch = catalog.models()["GPT-Neo-2.7B"].architecture
    assert arch.attention_pattern == ("global", "local")
    assert arch.local_attention_window == 256


@pytest.mark.parametrize("name", REQUIRED_DEVICES)
def test_device_is_complete(name: str) -> None:
    """Each required device has memory, peak rates, bandwidths and a node shape in SI units."""
    device = catalog.devices()[name]
    assert device.kind == "gpu"
    assert 8e9 <= device.memory <= 200e9
    assert device.peak_flops["fp32"] >= 5e12
    assert device.peak_flops["fp16"] > device.peak_flops["fp32"]
    assert 1e11 <= device.memory_bandwidth <= 1e13
    assert device.intra_node_bandwidth > 0
    assert device.gpus_per_node >= 1


def test_precision_support_follows_the_hardware() -> None:
    """Volta and Turing have no bf16; Ampere and Hopper do."""
    devices = catalog.devices()
    for name in ("V100-16GB", "V100-32GB", "T4", "RTX-2080", "Titan-RTX"):
        assert not devices[name].supports("bf16")
    for name in ("A100-40GB", "A100-80GB", "H100-80GB", "H200", "GH200", "L4", "A10G"):
        assert devices[name].supports("bf16")


def test_a100_numbers_from_the_datasheet() -> None:
    """A100 40GB SXM: 312 dense fp16 TFLOP/s, 1555 GB/s, 40 GB; priced at 3.67 USD/h."""
    a100 = catalog.devices()["A100-40GB"]
    assert a100.peak_flops["fp16"] == 312e12
    assert a100.memory_bandwidth == 1555e9
    assert a100.memory == 40e9
    assert a100.price == pytest.approx(3.67 / 3600)


GENERIC_SOURCES = {"", "nvidia", "datasheet", "internet", "wikipedia", "vendor", "unknown"}


@pytest.mark.parametrize(
    "entry",
    [
        *catalog.device_entries().values(),
        *({"name": m.name, "source": m.source} for m in catalog.models().values()),
    ],
    ids=lambda e: str(e["name"]),
)
def test_sources_are_specific(entry: dict[str, object]) -> None:
    """Every entry cites a document and the table, column or section it comes from."""
    source = str(entry["source"])
    assert source.strip().casefold() not in GENERIC_SOURCES
    assert len(source) >= 40
    assert any(
        word in source.lower() for word in ("table", "column", "section", "appendix", "config.json")
    )


def test_lookup_ignores_case_and_uses_aliases() -> None:
    """Names match case-insensitively and the catalog's spelling is returned."""
    assert catalog.find_model("gpt-neo-2.7b").name == "GPT-Neo-2.7B"  # type: ignore[union-attr]
    assert catalog.find_model("LLAMA-30B").name == "Llama-33B"  # type: ignore[union-attr]
    assert catalog.find_device("a100-40gb").name == "A100-40GB"  # type: ignore[union-attr]
    assert catalog.find_model("gpt-5") is None
    assert catalog.find_device("B200") is None


def test_architecture_differences_name_each_field_and_ignore_spelled_defaults() -> None:
    """Sailor's GPT-Neo build against the catalog's: the padded vocabulary, 32 heads of 80,
    Q/K/V biases and global attention; spelling a default out (ffn = 4 x hidden, kv_heads =
    heads) is no difference."""
    from dataclasses import replace

    from hetc.catalog import architecture_differences

    neo = catalog.models()["GPT-Neo-2.7B"].architecture
    build = replace(
        neo,
        vocab=50304,
        heads=32,
        head_dim=80,
        qkv_bias=True,
        local_attention_window=None,
        attention_pattern=("global",),
    )
    names = [d.split(":")[0] for d in architecture_differences(neo, build)]
    assert names == [
        "heads",
        "vocab",
        "head_dim",
        "qkv_bias",
        "local_attention_window",
        "attention_pattern",
    ]
    spelled = replace(neo, ffn=4 * neo.hidden, kv_heads=neo.heads)
    assert architecture_differences(neo, spelled) == []
