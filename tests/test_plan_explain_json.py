"""`hetc plan --json --explain`: each `explain` entry carries, beside its text, the pool's spec
path, a reason code, the two simulated objective values it compares, their ratio and the pools
the best plan using it rents in full.

Oracles: the path is written by hand from the spec; plan 1's value is the `objective` of
`plans[0]` in the same JSON; the best plan using a pool is searched again here with
`plan_spec(must_use=...)` and its rented nodes counted from its Plan IR's `nodes` (not the
planning estimate the code reads), against each pool's quota; the percentage in the text is
recomputed from the structured numbers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.schema import check_text
from hetc.solver.explain import pool_path
from hetc.solver.planner import plan_spec

runner = CliRunner()
SPEC = """\
version: 1
name: explain-json
model: {architecture: {layers: 4, hidden: 256, heads: 4, ffn: 1024, vocab: 1024,
  max_positions: 256}}
training: {global_batch_size: 16, seq_len: 256, precision: fp16}
devices:
  - name: TINY-GPU
    kind: gpu
    memory: 8MiB
    peak_tflops: {fp32: 5, fp16: 20}
    memory_bandwidth: 200GB/s
    intra_node: {kind: pcie, bandwidth: 16GB/s}
    price: 0.5 USD/h
    source: a made-up device too small to hold one layer
zones:
  - name: a
    region: r
    pools:
      - {device: A100-40GB, quota: 8, gpus_per_node: 4, price: 3.67 USD/h}
      - {device: TINY-GPU, quota: 4, gpus_per_node: 4, price: 0.5 USD/h}
  - name: b
    region: far
    pools:
      - {device: T4, quota: 4, gpus_per_node: 4, price: 0.35 USD/h}
"""
PATHS = {"a100-40gb@a": "zones[0].pools[0]", "tiny-gpu@a": "zones[0].pools[1]"}
PATHS["t4@b"] = "zones[1].pools[0]"


def _explained(tmp_path: Path, text: str) -> dict[str, Any]:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["plan", str(path), "--top", "1", "--explain", "--json"])
    assert result.exit_code == 0, result.output
    loaded = json.loads(result.stdout)
    assert isinstance(loaded, dict)
    return loaded


def test_explain_entries_are_structured(tmp_path: Path) -> None:
    """Each unused pool's entry: path, reason, the numbers compared and the full pools."""
    out = _explained(tmp_path, SPEC)
    spec = check_text(SPEC).spec
    assert spec is not None
    plan1 = out["plans"][0]["objective"]
    entries = {e["pool"]: e for e in out["explain"]}
    assert set(entries) == {"tiny-gpu@a", "t4@b"}, entries
    labels = [f"{p.name}@{z.name}" for z in spec.zones for p in z.pools]
    for label, entry in entries.items():
        assert entry["path"] == PATHS[label]
        assert entry["objective"] == "iteration_time"
        assert entry["plan1_value"] == pytest.approx(plan1, rel=1e-12)
    tiny = entries["tiny-gpu@a"]
    assert (tiny["reason"], tiny["value"], tiny["relative"], tiny["at_quota"]) == (
        "no-plan",
        None,
        None,
        [],
    )
    t4 = entries["t4@b"]
    assert t4["reason"] == "loses" and t4["value"] > plan1
    assert t4["value"] == pytest.approx(t4["iteration_time"], rel=1e-12)
    assert t4["relative"] == pytest.approx(t4["value"] / plan1 - 1, rel=1e-12)
    shown = re.search(r"([0-9.]+)% less than plan 1", t4["loss"])
    assert shown is not None
    assert float(shown.group(1)) == pytest.approx(100 * (1 - plan1 / t4["value"]), abs=0.06)
    forced = plan_spec(
        spec, top=1, must_use=frozenset({labels.index("t4@b")}), approximations=frozenset()
    )
    nodes = forced.proposals[0].plan.nodes
    full = [
        PATHS[label]
        for z in spec.zones
        for p in z.pools
        if (label := f"{p.name}@{z.name}")
        and (rented := sum(1 for n in nodes if n.pool == p.name and n.zone == z.name))
        and rented * p.gpus_per_node >= p.quota
    ]
    assert t4["at_quota"] == full
    assert "zones[1].pools[0]" in full


def test_pool_path_counts_zone_by_zone() -> None:
    """`pool_path` numbers pools within their zone, zones in spec order."""
    spec = check_text(SPEC).spec
    assert spec is not None
    assert [pool_path(spec, i) for i in range(3)] == list(PATHS.values())
    with pytest.raises(IndexError, match="the spec has no pool 3"):
        pool_path(spec, 3)
