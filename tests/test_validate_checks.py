"""Each structural and semantic check: the exact path, position and an actionable message."""

from __future__ import annotations

import copy
import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from hetc.schema import check_text

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _base() -> dict[str, Any]:
    loaded = YAML(typ="safe").load((EXAMPLES / "gptneo-a100-v100.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def _check(mutate: Callable[[dict[str, Any]], None]) -> list[str]:
    """`path: message` of every diagnostic after mutating the GPT-Neo example."""
    document = copy.deepcopy(_base())
    mutate(document)
    stream = io.StringIO()
    YAML().dump(document, stream)
    result = check_text(stream.getvalue(), "s.yaml")
    return [
        f"{d.path}: {'warning: ' if d.severity == 'warning' else ''}{d.message}"
        for d in result.diagnostics
    ]


def _pool(doc: dict[str, Any], index: int = 0) -> dict[str, Any]:
    pool = doc["zones"][0]["pools"][index]
    assert isinstance(pool, dict)
    return pool


def test_the_base_example_is_clean() -> None:
    """The mutation base itself has no diagnostics but the two the runtime's refusal of
    GPT-Neo's local attention gives (`hetc compile` prints the same)."""
    assert [f.split(" has ")[0] for f in _check(lambda d: None)] == [
        "model.preset: warning: model GPT-Neo-2.7B",
        "model.preset: warning: model GPT-Neo-2.7B",
    ]


CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    (
        "unknown device",
        lambda d: _pool(d).update(device="A100-40G"),
        "zones[0].pools[0].device: unknown device 'A100-40G' (did you mean 'A100-40GB'?)",
    ),
    ("device name case", lambda d: _pool(d).update(device="a100-40gb"), ""),
    (
        "unknown preset",
        lambda d: d["model"].update(preset="gpt-neo-2.7"),
        "model.preset: unknown model preset 'gpt-neo-2.7' (did you mean 'gpt-neo-2.7b'?)",
    ),
    (
        "preset and architecture",
        lambda d: d["model"].update(
            architecture={"layers": 2, "hidden": 8, "heads": 2, "vocab": 10}
        ),
        "model: give exactly one of `preset` or `architecture`",
    ),
    (
        "duplicate zone",
        lambda d: d["zones"].append(copy.deepcopy(d["zones"][0])),
        "zones[1].name: zone 'us-central1-a' is listed twice (first as zones[0])",
    ),
    (
        "gpus_per_node over quota",
        lambda d: _pool(d).update(quota=2, gpus_per_node=4),
        "zones[0].pools[0].gpus_per_node: a node of 4 devices does not fit in a quota of 2",
    ),
    (
        "quota remainder",
        lambda d: _pool(d).update(quota=30),
        "zones[0].pools[0].quota: warning: quota 30 is not a multiple of gpus_per_node 4:"
        " only 28 can be rented as whole nodes (use 28 or 32)",
    ),
    (
        "precision",
        lambda d: d["training"].update(precision="bf16"),
        "zones[0].pools[1].device: V100-16GB has no bf16: use fp32 or fp16 or drop the pool",
    ),
    (
        "heads vs hidden",
        lambda d: d.update(
            model={"architecture": {"layers": 2, "hidden": 100, "heads": 3, "vocab": 10}}
        ),
        "model.architecture.heads: 3 heads do not divide hidden 100",
    ),
    (
        "explicit head size",
        lambda d: d.update(
            model={
                "architecture": {
                    "layers": 2,
                    "hidden": 100,
                    "heads": 3,
                    "head_dim": 32,
                    "vocab": 10,
                }
            }
        ),
        "",
    ),
    (
        "kv heads",
        lambda d: d.update(
            model={
                "architecture": {"layers": 2, "hidden": 96, "heads": 6, "kv_heads": 4, "vocab": 10}
            }
        ),
        "model.architecture.kv_heads: 4 kv_heads do not divide 6 heads",
    ),
    (
        "negative number",
        lambda d: _pool(d).update(quota=-4),
        "zones[0].pools[0].quota: must be at least 1, got -4",
    ),
    (
        "zero bandwidth string",
        lambda d: _pool(d).update(nic_bandwidth="0Gbps"),
        "zones[0].pools[0].nic_bandwidth: '0Gbps' must be positive",
    ),
    (
        "negative price",
        lambda d: _pool(d).update(price=-1),
        "zones[0].pools[0].price: -1 must not be negative: a price rate is zero or more,"
        " for example '3.67 USD/h'",
    ),
    (
        "bad unit",
        lambda d: d["network"]["intra_zone"].update(latency="10 sec"),
        "network.intra_zone.latency: cannot read '10 sec' as duration: use a number in seconds"
        " or a string such as '10us'",
    ),
    (
        "NaN",
        lambda d: d["training"]["optimizer"].update(lr=float("nan")),
        "training.optimizer.lr: nan is not a finite number",
    ),
    (
        "zero stage 3",
        lambda d: d["training"].update(zero_stage=3),
        "training.zero_stage: ZeRO stage 3 is not supported (use 0, 1 or 2",
    ),
    (
        "zero stage 4",
        lambda d: d["training"].update(zero_stage=4),
        "training.zero_stage: must be at most 3, got 4",
    ),
    (
        "unknown key",
        lambda d: d["training"].update(global_batch=8),
        "training.global_batch: unknown key 'global_batch' (did you mean 'global_batch_size'?)",
    ),
    (
        "missing required",
        lambda d: d["training"].pop("global_batch_size"),
        "training.global_batch_size: missing required key 'global_batch_size'",
    ),
    (
        "wrong type",
        lambda d: d["training"].update(global_batch_size="lots"),
        "training.global_batch_size: expected an integer, got string 'lots'",
    ),
    (
        "enum",
        lambda d: d.update(objective="fastest"),
        "objective: string 'fastest' is not one of max_throughput | min_cost",
    ),
    ("version", lambda d: d.update(version=2), "version: must be 1, got integer 2"),
    (
        "link to unknown place",
        lambda d: d["network"].update(
            links=[{"between": ["us-central1", "us-west2"], "bandwidth": "1Gbps"}]
        ),
        "network.links[0].between[1]: 'us-west2' is neither a zone nor a region of this spec",
    ),
    (
        "link to itself",
        lambda d: d["network"].update(links=[{"between": ["us-central1", "us-central1"]}]),
        "network.links[0].between: a link joins two different zones or regions",
    ),
    (
        "site naming unknown zone",
        lambda d: d["sites"][0].update(zones=["us-central1-b"]),
        "sites[0].zones[0]: unknown zone 'us-central1-b' (did you mean 'us-central1-a'?)",
    ),
    (
        "zone in two sites",
        lambda d: d["sites"].append({"name": "other", "zones": ["us-central1-a"]}),
        "sites[1].zones[0]: zone 'us-central1-a' is already scheduled by site 'campus'",
    ),
    (
        "NUL in a name",
        lambda d: d.update(name="a\x00b"),
        "name: names may not contain NUL or line breaks",
    ),
    (
        "newline in a zone name",
        lambda d: d["zones"][0].update(name="a\nb"),
        "zones[0].name: names may not contain NUL or line breaks",
    ),
    (
        "hostile but legal names",
        lambda d: (
            d.update(name="job $(rm -rf /); `x` 'q' \"dq\" ünï ☃"),
            d["zones"][0].update(name="zone; $HOME `id`"),
            d["sites"][0].update(name='site "quoted"', zones=["zone; $HOME `id`"]),
        ),
        "",
    ),
    (
        "new device lacks numbers",
        lambda d: d.update(devices=[{"name": "MY-GPU"}]),
        "devices[0].memory: 'MY-GPU' is not in the catalog, so it needs 'memory'",
    ),
    (
        "unknown precision key",
        lambda d: d.update(devices=[{"name": "A100-40GB", "peak_tflops": {"fp64": 9.7}}]),
        "devices[0].peak_tflops.fp64: unknown key 'fp64' (use one of fp32, tf32, fp16, bf16, fp8)",
    ),
    (
        "min_lr above lr",
        lambda d: d["training"]["lr_schedule"].update(min_lr=1.0),
        "training.lr_schedule.min_lr: min_lr 1 is above the peak lr 0.0003",
    ),
    (
        "seq_len over positions",
        lambda d: d["training"].update(seq_len=4096),
        "training.seq_len: seq_len 4096 exceeds the model's 2048 learned positions",
    ),
    (
        "price unknown",
        lambda d: _pool(d).update(device="RTX-3090") or _pool(d).pop("price"),
        "zones[0].pools[0].device: warning: no list price is known for RTX-3090",
    ),
    (
        "cpu and gpu mixed",
        lambda d: (
            d.update(
                devices=[
                    {
                        "name": "CPU",
                        "kind": "cpu",
                        "memory": "1GB",
                        "peak_tflops": {"fp16": 1},
                        "memory_bandwidth": "1GB/s",
                    }
                ]
            ),
            _pool(d).update(device="CPU"),
        ),
        "zones[0].pools[0].device: cpu devices (gloo) and gpu devices (NCCL) cannot train in one",
    ),
    (
        "bad slurm time",
        lambda d: d["sites"][0].update(time_limit="two days"),
        "sites[0].time_limit: 'two days' has the wrong form: Slurm time limit",
    ),
    (
        "duplicate pool",
        lambda d: d["zones"][0]["pools"].append(copy.deepcopy(_pool(d))),
        "zones[0].pools[2].device: two pools named 'a100-40gb' in zone 'us-central1-a'",
    ),
]


@pytest.mark.parametrize(("case", "mutate", "expected"), CASES, ids=[c[0] for c in CASES])
def test_check_reports_the_problem(
    case: str, mutate: Callable[[dict[str, Any]], None], expected: str
) -> None:
    """A single problem yields its diagnostic (an empty expectation means: still valid)."""
    found = _check(mutate)
    if not expected:
        assert [f for f in found if "warning" not in f] == []
    else:
        assert any(f.startswith(expected) for f in found), found


def test_every_problem_is_reported_at_once() -> None:
    """Independent problems in one file are all reported in one run, in document order."""
    text = (EXAMPLES / "gptneo-a100-v100.yaml").read_text()
    text = text.replace("preset: GPT-Neo-2.7B", "preset: GPT-Neo-27B")
    text = text.replace("device: V100-16GB", "device: V100")
    text = text.replace("type: adam,", "type: adma,")
    result = check_text(text, "s.yaml")
    assert [(d.line, d.path) for d in result.errors] == [
        (7, "model.preset"),
        (12, "training.optimizer.type"),
        (25, "zones[0].pools[1].device"),
    ]
    assert [d.column for d in result.errors] == [11, 21, 18]


def test_unknown_key_points_at_the_key() -> None:
    """An unknown key's position is the key itself, not its parent mapping."""
    text = "version: 1\nname: x\nmodel: {preset: OPT-350M}\ntraining:\n  global_batch_size: 8\n"
    text += "  globl: 3\nzones: [{name: z, pools: [{device: T4, quota: 4}]}]\n"
    (diagnostic,) = check_text(text, "s.yaml").errors
    assert (diagnostic.line, diagnostic.column, diagnostic.path) == (6, 3, "training.globl")


@pytest.mark.parametrize(
    "architecture",
    [
        {"layers": 2, "hidden": 8, "heads": 0, "vocab": 10},
        {"layers": 2, "hidden": 8, "heads": "a", "vocab": 10},
        {"layers": 2, "hidden": 8, "heads": 2, "kv_heads": 0, "vocab": 10},
        {"layers": 2, "hidden": 8, "heads": 2, "vocab": 10, "max_positions": "x"},
        {"layers": 2, "hidden": 8, "heads": 2, "vocab": 10, "local_attention": 5},
        {"layers": 2, "hidden": 8, "heads": 2, "vocab": 10, "local_attention": {"pattern": 3}},
    ],
)
def test_malformed_architecture_is_reported_not_crashed_on(architecture: dict[str, Any]) -> None:
    """Semantic checks skip a malformed architecture; the schema reports it at its path."""
    found = _check(lambda d: d.update(model={"architecture": architecture}))
    assert found and all(f.startswith("model.architecture.") for f in found), found


MINIMAL = """\
version: 1
name: job
model: {preset: GPT-3-1.3B}
training: {global_batch_size: 8}
zones:
  - name: z
    pools: [{device: A100-40GB, quota: 4}]
"""
LINE = re.compile(r"^.+:\d+:\d+: \S+: .+$")


@pytest.mark.parametrize(
    ("extra", "expected_path"),
    [
        ("devices: [{name: A100-40GB, kind: []}]\n", "devices[0].kind"),
        ("devices: [{name: A100-40GB, kind: tpu}]\n", "devices[0].kind"),
        ("devices: [{name: A100-40GB, gpus_per_node: .inf}]\n", "devices[0].gpus_per_node"),
        ('"\\ud800": 1\n', '["\\ud800"]'),
        ('"my key": 1\n', '["my\\x20key"]'),
        ('"a\\nb": 1\n', '["a\\nb"]'),
        ('"": 1\n', '[""]'),
    ],
)
def test_hostile_keys_and_device_fields_give_one_clean_line(extra: str, expected_path: str) -> None:
    """Found by the property test: these crashed or broke the line format before."""
    text = MINIMAL.replace(
        "    pools: [{device: A100-40GB, quota: 4}]\n",
        "    pools: [{device: A100-40GB, quota: 4}, {device: T4, quota: 4}]\n",
    )
    result = check_text(text + extra, "s.yaml")
    lines = [d.format() for d in result.diagnostics]
    assert {d.path for d in result.errors} == {expected_path}, lines
    assert all(LINE.match(line) and "\n" not in line for line in lines)
    assert all(line.isprintable() for line in lines)


def test_invalid_precision_is_reported_once() -> None:
    """An unknown precision is one enum error, not also one error per pool."""
    result = check_text(
        MINIMAL.replace("global_batch_size: 8}", 'global_batch_size: 8, precision: "fp8\\nX"}'),
        "s.yaml",
    )
    assert [d.path for d in result.diagnostics] == ["training.precision"]
    assert "\n" not in result.diagnostics[0].format()


@pytest.mark.parametrize("where", ["name: job", "  - name: z"])
def test_trailing_newline_in_a_name_is_refused(where: str) -> None:
    """JSON Schema patterns are ECMA-262: `$` does not match before a final newline."""
    quoted = where.replace("job", '"job\\n"').replace(": z", ': "z\\n"')
    result = check_text(MINIMAL.replace(where, quoted), "s.yaml")
    assert any("may not contain NUL or line breaks" in d.message for d in result.errors)


def test_warmup_is_compared_with_the_default_run_length() -> None:
    """Without `run:`, warm-up is checked against the documented default of 1000 steps."""
    text = MINIMAL.replace(
        "global_batch_size: 8}", "global_batch_size: 8, lr_schedule: {warmup_steps: 2000}}"
    )
    (warning,) = check_text(text, "s.yaml").warnings
    assert warning.path == "training.lr_schedule.warmup_steps"
    assert "whole run of 1000 steps" in warning.message


def test_an_integer_beyond_any_float_is_reported_not_a_crash() -> None:
    """Found by the property test: `float(10**400)` raised OverflowError (exit 70)."""

    def huge(spec: dict[str, Any]) -> None:
        spec["constraints"] = {"min_throughput": 10**400}

    (message,) = [f for f in _check(huge) if ": warning: " not in f]
    assert "constraints.min_throughput: 401-digit number is too large" in message


@pytest.mark.parametrize(("key", "bound"), [("global_batch_size", 2**40), ("seq_len", 2**24)])
def test_a_batch_beyond_any_float_is_reported_not_a_crash(key: str, bound: int) -> None:
    """Found by the property test: 10**400 sequences, or tokens per sequence, made the
    tokens-per-iteration message format a product no float holds (OverflowError, exit 70);
    the schema's bound says it."""
    text = MINIMAL.replace("global_batch_size: 8}", f"global_batch_size: 8, {key}: {10**400}}}")
    text = text.replace("global_batch_size: 8, global_batch_size", "global_batch_size")
    result = check_text(text, "s.yaml")
    assert {d.path for d in result.errors} == {f"training.{key}"}
    assert any(f"must be at most {bound}" in d.message for d in result.errors)
