"""The typed spec: defaults filled in, every quantity in SI units, catalog merged."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetc.schema import Spec, check_file, check_text
from hetc.schema.spec import INTER_REGION_DEFAULT, INTRA_ZONE_DEFAULT

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

MINIMAL = """\
version: 1
name: minimal
model: {preset: opt-350m}
training: {global_batch_size: 64}
zones:
  - name: z1
    pools: [{device: a100-40gb, quota: 6}]
"""


def _spec(text: str) -> Spec:
    result = check_text(text, "s.yaml")
    assert result.errors == [], result.errors
    assert result.spec is not None
    return result.spec


def test_minimal_spec_gets_documented_defaults() -> None:
    """Only the required keys given: every other field takes its documented default."""
    spec = _spec(MINIMAL)
    assert spec.model_name == "OPT-350M"
    assert spec.training.seq_len == 2048
    assert spec.training.precision == "fp16"
    assert spec.training.zero_stage == 1
    assert spec.training.optimizer.type == "adamw"
    assert spec.objective == "max_throughput"
    assert spec.constraints.max_cost_per_iteration is None
    (zone,) = spec.zones
    assert zone.region == "z1"
    (pool,) = zone.pools
    assert pool.device == "A100-40GB" and pool.name == "a100-40gb"
    assert pool.gpus_per_node == 6  # the catalog's 8, capped by the quota
    assert pool.price == pytest.approx(3.67 / 3600)
    assert pool.nic_bandwidth == 100e9 / 8
    assert spec.network.intra_zone == INTRA_ZONE_DEFAULT
    assert spec.network.inter_region == INTER_REGION_DEFAULT
    assert spec.network.egress_inter_region == pytest.approx(0.02 / 1e9)
    assert spec.run.steps == 1000 and spec.run.checkpoint_every is None


def test_quantities_are_converted_once_to_si() -> None:
    """Unit strings in the example arrive as bytes/s, seconds, USD/s and USD in the typed spec."""
    spec = check_file(str(EXAMPLES / "opt350m-5zones.yaml")).spec
    assert spec is not None
    assert spec.network.inter_region.bandwidth == 5e9 / 8
    assert spec.network.inter_region.latency == 30e-3
    assert spec.network.inter_region.tcp_streams == 8
    assert spec.network.inter_region.tcp_window == 4 * 2**20
    (link,) = spec.network.links
    assert link.between == ("us-central1", "us-west1")
    assert (link.bandwidth, link.latency) == (10e9 / 8, 25e-3)
    assert spec.zones[4].pools[0].price == pytest.approx(3.74 / 3600)
    budget = check_file(str(EXAMPLES / "opt350m-budget.yaml")).spec
    assert budget is not None and budget.constraints.max_cost_per_iteration == 0.4
    neo = check_file(str(EXAMPLES / "gptneo-a100-v100.yaml")).spec
    assert neo is not None and neo.training.tokens == 300e9


def test_spec_devices_override_catalog_fields() -> None:
    """A `devices:` entry named like a catalog device replaces only the fields it gives."""
    text = MINIMAL + "devices:\n  - {name: A100-40GB, memory: 42GB}\n"
    device = _spec(text).devices["A100-40GB"]
    assert device.memory == 42e9
    assert device.peak_flops["fp16"] == 312e12  # kept from the catalog


def test_custom_cpu_device_from_the_local_example() -> None:
    """The local example's own cpu device type is typed like a catalog one."""
    spec = check_file(str(EXAMPLES / "local-cpu.yaml")).spec
    assert spec is not None
    device = spec.devices["LOCAL-CPU"]
    assert device.kind == "cpu" and device.memory == 2 * 2**30
    assert device.peak_flops == {"fp32": 0.05e12}
    assert spec.model_name == "custom" and spec.model.parameter_count() > 0
    assert spec.zones[0].pools[0].max_nodes == 2


def test_a_spec_with_errors_has_no_typed_form() -> None:
    """Typing happens only after every check passed."""
    result = check_text(MINIMAL.replace("quota: 6", "quota: 0"), "s.yaml")
    assert result.errors and result.spec is None


def test_whole_number_floats_are_integers_and_number_fields_floats() -> None:
    """`quota: 4.0` is the integer 4 (JSON Schema's reading); `lr: 1` is the float 1.0."""
    text = MINIMAL.replace("quota: 6", "quota: 4.0").replace(
        "training: {global_batch_size: 64}",
        "training: {global_batch_size: 64.0, optimizer: {lr: 1, betas: [0, 0.5]},"
        " gradient_clipping: 2}",
    )
    spec = _spec(text)
    assert spec.zones[0].pools[0].quota == 4 and isinstance(spec.zones[0].pools[0].quota, int)
    assert isinstance(spec.training.global_batch_size, int)
    assert spec.training.optimizer.lr == 1.0 and isinstance(spec.training.optimizer.lr, float)
    assert spec.training.optimizer.betas == (0.0, 0.5)
    assert all(isinstance(b, float) for b in spec.training.optimizer.betas)
    assert isinstance(spec.training.gradient_clipping, float)


def test_whole_number_float_gets_the_integer_checks() -> None:
    """zero_stage 3.0 is refused exactly like 3."""
    result = check_text(
        MINIMAL.replace("global_batch_size: 64}", "global_batch_size: 64, zero_stage: 3.0}"),
        "s.yaml",
    )
    assert [d.path for d in result.errors] == ["training.zero_stage"]


def test_spec_hash_ignores_form_and_sees_content() -> None:
    """Comments, key order and unit spelling keep the hash; a changed value changes it."""
    from hetc.schema import spec_hash

    base = spec_hash(_spec(MINIMAL))
    assert len(base) == 64 and base == spec_hash(_spec(MINIMAL))
    reworded = "# a comment\n" + MINIMAL.replace(
        "training: {global_batch_size: 64}", "training: {global_batch_size: 64, seq_len: 2048}"
    )
    assert spec_hash(_spec(reworded)) == base  # 2048 is the default
    units = MINIMAL + "network: {intra_zone: {bandwidth: 100Gbps}}\n"
    assert spec_hash(_spec(units)) == base  # the default, spelt out
    assert spec_hash(_spec(MINIMAL.replace("quota: 6", "quota: 4"))) != base
