"""DeepSpeed configs: every one parsed by DeepSpeed's own DeepSpeedConfig with the
data-parallel size it will see, and the checks hetc adds where DeepSpeed stays silent."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from hetc.emit.deepspeed import ConfigKey, config_problems, deepspeed_config
from hetc.plan.settings import reduce_bucket_elements
from hetc.plan.topology import BatchTriple
from hetc.schema import check_text
from hetc.schema.spec import Spec

deepspeed = pytest.importorskip("deepspeed")
import torch  # noqa: E402
from deepspeed.runtime.config import DeepSpeedConfig  # noqa: E402

SPEC = """\
version: 1
name: ds
model: {{architecture: {{layers: 4, hidden: 256, heads: 4, ffn: 1024, vocab: 1024,
  max_positions: 256}}}}
training:
  global_batch_size: 16
  seq_len: 256
  precision: {precision}
  zero_stage: {zero}
  gradient_clipping: {clip}
  optimizer: {{type: {optimizer}, lr: 2.0e-4, betas: [0.9, 0.95], eps: 1.0e-6, weight_decay: 0.1}}
  lr_schedule: {schedule}
zones:
  - name: a
    pools:
      - {{device: A100-40GB, quota: 8, price: 3.67 USD/h}}
run: {{steps: 500}}
"""


def _spec(**values: Any) -> Spec:
    defaults = {
        "precision": "fp16",
        "zero": 1,
        "clip": 1.0,
        "optimizer": "adamw",
        "schedule": "{type: cosine, warmup_steps: 50, min_lr: 2.0e-5}",
    }
    checked = check_text(SPEC.format(**{**defaults, **values}))
    assert checked.spec is not None, [d.format() for d in checked.diagnostics]
    return checked.spec


class _Mpu:
    """The data-parallel size DeepSpeed checks the batch rule against."""

    def __init__(self, data_parallel: int) -> None:
        self.data_parallel = data_parallel

    def get_data_parallel_world_size(self) -> int:
        return self.data_parallel


@pytest.fixture
def distributed(monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSpeedConfig reads the rank from deepspeed.comm and falls back to a world of 1
    without a process group; pretend one exists so that the mpu's size is used."""
    import deepspeed.runtime.config as ds_config

    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)


def _parse(config: dict[str, Any], data_parallel: int) -> Any:
    return DeepSpeedConfig(config, mpu=_Mpu(data_parallel))


CASES = list(
    itertools.product(
        ["fp16", "bf16", "fp32"],
        [0, 1, 2],
        ["adam", "adamw", "sgd"],
        [
            "{type: cosine, warmup_steps: 50, min_lr: 2.0e-5}",
            "{type: cosine}",
            "{type: constant, warmup_steps: 10}",
            "{type: constant}",
        ],
    )
)


@pytest.mark.parametrize(("precision", "zero", "optimizer", "schedule"), CASES)
def test_deepspeed_parses_every_config_with_its_data_parallel_size(
    distributed: None, precision: str, zero: int, optimizer: str, schedule: str
) -> None:
    spec = _spec(precision=precision, zero=zero, optimizer=optimizer, schedule=schedule)
    for triple, on_cpu in [
        (BatchTriple(micro=2, accumulation=5, data_parallel=3, loss_weight=1.0), False),
        (BatchTriple(micro=1, accumulation=1, data_parallel=1, loss_weight=1.0), True),
    ]:
        config = deepspeed_config(spec, ConfigKey(triple=triple, on_cpu=on_cpu))
        assert config_problems(config, triple) == []
        parsed = _parse(config, triple.data_parallel)
        assert parsed.train_batch_size == triple.train_batch_size
        assert parsed.train_micro_batch_size_per_gpu == triple.micro
        assert parsed.gradient_accumulation_steps == triple.accumulation
        assert parsed.gradient_clipping == spec.training.gradient_clipping
        assert parsed.float16_config.enabled == (precision == "fp16")
        assert parsed.bfloat16_config.enabled == (precision == "bf16")
        # gradients reduce in fp16 under fp16, else in fp32 (bf16 too: DeepSpeed's default
        # would be bf16), as hetc's own path and hetc.costmodel.traffic have it
        wanted = torch.float16 if precision == "fp16" else torch.float32
        assert parsed.communication_data_type == wanted
        if precision == "fp16":
            assert parsed.float16_config.loss_scale == 0, "dynamic loss scaling"
        expected_scheduler = (config.get("scheduler") or {}).get("type")
        assert parsed.scheduler_name == expected_scheduler
        assert parsed.zero_optimization_stage == zero
        bucket = reduce_bucket_elements(spec.model.parameter_count())
        assert parsed.zero_config.reduce_bucket_size == bucket
        assert parsed.zero_config.allgather_bucket_size == bucket
        if optimizer == "sgd":
            assert parsed.optimizer_name is None
            assert parsed.zero_allow_untested_optimizer == (zero > 0)
        else:
            assert parsed.optimizer_name == optimizer
            params = parsed.optimizer_params
            assert params["lr"] == 2.0e-4 and params["betas"] == [0.9, 0.95]
            assert params["adam_w_mode"] == (optimizer == "adamw")
            assert params.get("torch_adam", False) == on_cpu


def test_deepspeed_rejects_a_triple_against_the_wrong_data_parallel_size(
    distributed: None,
) -> None:
    """The mpu really sets the size DeepSpeed checks: the same config fails at another D."""
    triple = BatchTriple(micro=2, accumulation=5, data_parallel=3, loss_weight=1.0)
    config = deepspeed_config(_spec(), ConfigKey(triple=triple, on_cpu=False))
    _parse(config, 3)
    with pytest.raises(AssertionError):
        _parse(config, 2)


def test_schedules_match_the_spec() -> None:
    triple = BatchTriple(micro=1, accumulation=1, data_parallel=1, loss_weight=1.0)
    key = ConfigKey(triple=triple, on_cpu=False)
    cosine = deepspeed_config(_spec(), key)["scheduler"]
    assert cosine == {
        "type": "WarmupCosineLR",
        "params": {
            "total_num_steps": 500,
            "warmup_num_steps": 50,
            "warmup_min_ratio": 0.0,
            "warmup_type": "linear",
            "cos_min_ratio": pytest.approx(0.1),
        },
    }
    flat_start = deepspeed_config(_spec(schedule="{type: cosine}"), key)["scheduler"]["params"]
    assert flat_start["warmup_min_ratio"] == 1.0, "no warm-up: start at the peak rate"
    warm = deepspeed_config(_spec(schedule="{type: constant, warmup_steps: 10}"), key)
    assert warm["scheduler"]["type"] == "WarmupLR"
    assert warm["scheduler"]["params"]["warmup_max_lr"] == 2.0e-4
    assert "scheduler" not in deepspeed_config(_spec(schedule="{type: constant}"), key)


def test_what_deepspeed_accepts_silently_hetc_refuses(distributed: None) -> None:
    """Each mutation passes DeepSpeedConfig without a word, and config_problems names it."""
    triple = BatchTriple(micro=2, accumulation=2, data_parallel=2, loss_weight=1.0)
    good = deepspeed_config(_spec(), ConfigKey(triple=triple, on_cpu=False))
    mutations = {
        "unknown top-level key 'train_micro_batch_size'": {**good, "train_micro_batch_size": 4},
        "optimizer type 'AdamWW'": {**good, "optimizer": {**good["optimizer"], "type": "AdamWW"}},
        "gradient_clipping -1.0": {**good, "gradient_clipping": -1.0},
    }
    for message, config in mutations.items():
        _parse(config, 2)
        problems = config_problems(config, triple)
        assert any(message in p for p in problems), (message, problems)
    wrong = BatchTriple(micro=2, accumulation=2, data_parallel=3, loss_weight=1.0)
    assert any("train_batch_size 8" in p for p in config_problems(good, wrong))


def test_every_emitted_config_parses_with_the_size_of_the_ranks_that_use_it(
    distributed: None, tmp_path: Path
) -> None:
    """Compile the CI example (uneven batch shares: 7, 7, 7 and 6 microbatches) and give each
    DeepSpeed config to DeepSpeed with the data-parallel size of every rank that names it."""
    from typer.testing import CliRunner

    from hetc.cli import app

    spec = Path(__file__).resolve().parent.parent / "examples" / "slurm-local-cpu.yaml"
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["compile", str(spec), "-o", str(out)])
    assert result.exit_code == 0, result.output
    users: dict[str, set[int]] = {}
    shares = set()
    for rank_file in (out / "topology" / "ranks").glob("*.json"):
        record = json.loads(rank_file.read_text())
        users.setdefault(record["deepspeed_config"], set()).add(record["batch"]["data_parallel"])
        shares.add(record["batch"]["accumulation"])
    assert len(shares) > 1, "the example should have uneven batch shares"
    assert set(users) == {p.relative_to(out).as_posix() for p in (out / "deepspeed").glob("*.json")}
    for path, sizes in users.items():
        config = json.loads((out / path).read_text())
        assert len(sizes) == 1
        parsed = _parse(config, sizes.pop())
        assert parsed.train_batch_size == config["train_batch_size"]
