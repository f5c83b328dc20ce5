"""hetc.solver.binding: --explain's account of the pools plan 1 rents (whole quota or not, and
whether the quota binds, measured by re-planning with it doubled)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hetc.schema import Spec, check_text
from hetc.solver.binding import explain_used, with_quota
from hetc.solver.planner import plan_spec

SPEC = """\
version: 1
name: binding
model: {architecture: {layers: 4, hidden: 256, heads: 4, ffn: 1024, vocab: 1024,
  max_positions: 256}}
training: {global_batch_size: 16, seq_len: 256, precision: fp16}
zones:
  - name: a
    region: r
    pools:
      - {device: A100-40GB, quota: 4, gpus_per_node: 1, price: 3.67 USD/h}
      - {device: V100-16GB, quota: 2, gpus_per_node: 1, price: 2.86 USD/h}
"""


BATCH_OF_ONE = (
    SPEC.replace("global_batch_size: 16", "global_batch_size: 1")
    .replace("      - {device: V100-16GB, quota: 2, gpus_per_node: 1, price: 2.86 USD/h}\n", "")
    .replace("quota: 4, gpus_per_node: 1", "quota: 1, gpus_per_node: 1")
)
"""One A100 and a batch of one sample: a second A100 cannot help, so its quota does not bind."""


def _spec(text: str = SPEC) -> Spec:
    checked = check_text(text, "binding.yaml")
    assert checked.spec is not None, [d.format() for d in checked.diagnostics]
    return checked.spec


def test_with_quota_changes_one_pool_only() -> None:
    """with_quota sets the chosen pool's quota and leaves every other field equal."""
    spec = _spec()
    slot = plan_spec(spec).model.pools[1]
    changed = with_quota(spec, slot, 6)
    (zone,) = changed.zones
    assert [p.quota for p in zone.pools] == [4, 6]
    assert replace(changed, zones=spec.zones) == spec


def test_a_stopped_search_leaves_binding_open() -> None:
    """When the doubled-quota search stops at its limit with nothing better, the line says
    the question is open instead of claiming the quota does not bind."""
    spec = _spec()
    result = plan_spec(spec)
    lines = explain_used(result, spec, work_limit=1)
    full = [line for line in lines if "its whole quota" in line]
    assert full
    assert all("whether it binds is open" in line for line in full)


@pytest.mark.parametrize(("text", "binds"), [(SPEC, True), (BATCH_OF_ONE, False)])
def test_lines_agree_with_an_independent_replan(text: str, binds: bool) -> None:
    """Each whole-quota line says 'binds' exactly when plan_spec on the spec with that quota
    doubled (built here, not by with_quota) finds a lower simulated iteration time; the two
    specs cover both answers."""
    spec = _spec(text)
    result = plan_spec(spec)
    lines = explain_used(result, spec)
    best = result.proposals[0].simulation.iteration_time
    for slot, nodes in zip(
        result.model.pools, result.proposals[0].candidate.estimate.nodes, strict=True
    ):
        if not nodes:
            continue
        (line,) = [line for line in lines if line.startswith(slot.label)]
        if nodes < slot.pool.max_nodes:
            assert "no better plan that rents more" in line
            continue
        (zone,) = spec.zones
        pools = tuple(
            replace(p, quota=2 * p.quota) if p.name == slot.pool.name else p for p in zone.pools
        )
        doubled = replace(spec, zones=(replace(zone, pools=pools),))
        faster = plan_spec(doubled).proposals[0].simulation.iteration_time < best
        assert ("and the quota binds" in line) is faster is binds, line
        assert faster or "but it does not bind" in line
