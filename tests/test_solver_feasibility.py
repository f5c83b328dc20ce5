"""Necessary conditions checked before the search: each refuses a spec the search also finds
infeasible, none ever refuses a spec with a plan, and `hetc plan` answers such specs at once.

Oracle: the search itself (`search.search` on the spec's `PlanningModel`, which never
consults these bounds), without a time limit on the small specs it refuses, and the
candidates it finds on generated specs, which every bound must lie below.

Mutation checks (done by hand, each restored): the property test fails with the cost floor
times 1.01, the time floor times 1.1, the least device count times 1.4, or
`devices_available` minus one; the memory test fails with `unheld_layer` left out of
`necessary_conditions`.
"""

from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.costmodel.planning import PlanningModel
from hetc.schema import check_text
from hetc.schema.spec import Spec
from hetc.solver.diagnosis import apply_fixes, diagnose
from hetc.solver.feasibility import (
    cost_floor,
    devices_available,
    least_devices,
    necessary_conditions,
    time_floor,
    unheld_layer,
)
from hetc.solver.planner import plan_spec
from hetc.solver.search import SearchOptions, SearchResult, search

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from spec_family import small_spec

SPEC = """\
version: 1
name: t
model: {model}
training: {{global_batch_size: {batch}, seq_len: 512, precision: fp16, zero_stage: 1}}
objective: {objective}
constraints: {{{constraints}}}
zones:
  - name: z1
    region: r1
    pools:
{pools}
"""


def spec_of(
    pools: str,
    constraints: str = "",
    *,
    model: str = "{preset: OPT-350M}",
    objective: str = "max_throughput",
    batch: int = 16,
) -> Spec:
    text = SPEC.format(
        model=model, batch=batch, objective=objective, constraints=constraints, pools=pools
    )
    result = check_text(text, "t.yaml")
    assert result.spec is not None, [d.format() for d in result.diagnostics]
    return result.spec


A100 = "      - {device: A100-40GB, quota: 8, gpus_per_node: 4}"


def verdict(spec: Spec, work_limit: int | None = None) -> SearchResult:
    """The search's own answer, bounds not consulted."""
    return search(PlanningModel(spec), SearchOptions(work_limit=work_limit))


def refused(spec: Spec) -> str:
    """The binding constraint a bound names, after checking that the search agrees."""
    proof = necessary_conditions(PlanningModel(spec))
    assert proof is not None
    result = verdict(spec)
    assert result.complete and not result.candidates
    return proof.binding


def test_max_gpus_below_every_node_size_is_refused() -> None:
    """Plans rent whole nodes: max_gpus 2 with 4-device nodes leaves nothing to rent."""
    spec = spec_of(A100, "max_gpus: 2")
    assert devices_available(PlanningModel(spec)) == 0
    assert refused(spec) == "max_gpus"
    proof = necessary_conditions(PlanningModel(spec))
    assert proof is not None and proof.change == "constraints.max_gpus: at least 4"


def test_a_layer_no_device_holds_is_refused_as_memory() -> None:
    """A block wider than any A100 holds, even alone with its state sharded: memory."""
    huge = (
        "{architecture: {layers: 2, hidden: 65536, heads: 512, ffn: 262144, vocab: 1024,"
        " max_positions: 512}}"
    )
    spec = spec_of(A100, model=huge)
    assert unheld_layer(PlanningModel(spec)) is not None
    assert refused(spec) == "memory"


def test_too_few_devices_for_the_model_state_is_refused() -> None:
    """GPT-3-1.3B's fp16 weights, gradients and Adam state (16 bytes a parameter, about
    21 GB) do not fit one 16 GB T4, though each layer alone does."""
    spec = spec_of("      - {device: T4, quota: 1, gpus_per_node: 1}", model="{preset: GPT-3-1.3B}")
    model = PlanningModel(spec)
    assert unheld_layer(model) is None
    assert 1.3e9 * 16 / 16e9 <= least_devices(model) < 4
    assert refused(spec) == "quota"


def test_budget_below_the_cost_floor_is_refused_and_the_floor_is_below_the_cheapest() -> None:
    """The cost floor lies under every candidate's cost (the cheapest a bounded min-cost
    search finds); a budget under it binds."""
    spec = spec_of(A100, objective="min_cost")
    floor = cost_floor(PlanningModel(spec))
    found = search(PlanningModel(spec), SearchOptions(eval_limit=300, work_limit=50_000_000))
    assert 0 < floor <= min(c.estimate.cost for c in found.candidates)
    assert refused(spec_of(A100, f"max_cost_per_iteration: {floor / 2}")) == "budget"


def test_floor_above_the_time_floor_is_refused_and_the_bound_is_above_the_fastest() -> None:
    """1 / time floor lies over the fastest plan's iterations/s; a floor over it binds."""
    spec = spec_of(A100)
    fastest = 1 / time_floor(PlanningModel(spec))
    best = verdict(spec)
    assert best.complete and fastest >= 1 / best.candidates[0].estimate.iteration_time
    assert refused(spec_of(A100, f"min_throughput: {fastest * 2}")) == "throughput floor"


LLAMA13 = "      - {device: A100-80GB, quota: 8, gpus_per_node: 1}"


def test_llama13b_on_one_gpu_is_refused_before_any_search() -> None:
    """Issue 27: Llama-13B with max_gpus 1 searched for minutes; the bound answers with no
    search, and the diagnosis's verified fix respects the bound's "at least"."""
    spec = spec_of(LLAMA13, "max_gpus: 1", model="{preset: Llama-13B}", batch=64)
    result = plan_spec(spec)
    assert not result.proposals and result.search.evaluations == 0 and result.search.complete
    assert result.infeasible is not None and result.infeasible.binding == "max_gpus"
    least = int(result.infeasible.change.rsplit(" ", 1)[1])
    diagnosis = diagnose(spec)
    (fix,) = diagnosis.alternatives[0]
    assert fix.path == "constraints.max_gpus" and fix.value >= least
    assert "Before any search" in diagnosis.message
    assert plan_spec(apply_fixes(spec, [fix])).proposals


@pytest.mark.slow
def test_llama65b_on_a_small_quota_is_refused_before_any_search(tmp_path: Path) -> None:
    """Issue 27: a 65B model on 8 A100-80GB took 47 s to refuse; `hetc plan` now exits 3
    without a search, naming the quota, with a verified fix the bound does not contradict."""
    pools = "      - {device: A100-80GB, quota: 8, gpus_per_node: 8}"
    spec = spec_of(pools, model="{preset: Llama-65B}", batch=64)
    result = plan_spec(spec)
    assert result.search.evaluations == 0
    assert result.infeasible is not None and result.infeasible.binding == "quota"
    path = tmp_path / "big.yaml"
    path.write_text(
        SPEC.format(
            model="{preset: Llama-65B}",
            batch=64,
            objective="max_throughput",
            constraints="",
            pools=pools,
        )
    )
    out = CliRunner().invoke(app, ["plan", str(path)])
    assert out.exit_code == 3
    assert "quota is binding" in out.stderr and "Before any search" in out.stderr
    fixed = int(out.stderr.split("To fix: zones[0].pools[0].quota: ")[1].split()[0])
    assert fixed >= least_devices(PlanningModel(spec))


def _relaxed(spec: Spec, objective: str) -> Spec:
    """`spec` without budget or floor, under `objective`: its candidates probe the cost and
    time floors from the cheap and the fast side."""
    free = replace(spec.constraints, max_cost_per_iteration=None, min_throughput=None)
    return replace(spec, constraints=free, objective=objective)


@pytest.mark.slow
def test_no_bound_refuses_a_spec_with_a_plan_on_generated_specs() -> None:
    """On 24 generated small specs: a refused spec has no candidate in the search, and every
    candidate the search finds (cheapest and fastest, a bounded search) rents at most
    `devices_available` and at least `least_devices` devices, costs at least the cost floor
    and takes at least the time floor. See the module docstring for the mutation checks."""
    rng = random.Random(27)
    refusals = checked = 0
    for _ in range(24):
        spec = small_spec(rng)
        if necessary_conditions(PlanningModel(spec)) is not None:
            refusals += 1
            assert not verdict(spec, work_limit=200_000_000).candidates, spec
            continue
        for objective in ("min_cost", "max_throughput"):
            model = PlanningModel(_relaxed(spec, objective))
            options = SearchOptions(top=4, eval_limit=300, work_limit=20_000_000)
            for candidate in search(model, options).candidates:
                e = candidate.estimate
                checked += 1
                assert least_devices(model) <= e.devices <= devices_available(model)
                assert cost_floor(model) <= e.cost * (1 + 1e-12)
                assert time_floor(model) <= e.iteration_time * (1 + 1e-12)
    assert refusals >= 2 and checked >= 40
