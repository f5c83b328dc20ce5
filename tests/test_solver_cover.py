"""The stage-cover check (`hetc.solver.cover`) never rejects a shape that has a plan, and
rejects most of the shapes the conservation bound lets through.

Oracles: the linear programme the cover relaxes, solved by OR-Tools' GLOP from the same
numbers (so the hull-and-greedy solution is checked against an LP solver, not against
itself); every candidate of small specs, enumerated from the spec by tests/oracles/
brute_force.py, each of which must pass the check at its own slowest stage time; and the
search with the check switched off, which must find the same optimum while visiting many
more shapes.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from pathlib import Path

import pytest
from oracles.brute_force import candidates
from oracles.instances import instance_data, random_instance, to_yaml
from ortools.linear_solver import pywraplp

from hetc.costmodel.planning import PlanningModel
from hetc.schema import Spec, check_file, check_text
from hetc.solver import cover
from hetc.solver.cover import StageCover, class_hull, least_cover
from hetc.solver.planner import default_approximations
from hetc.solver.search import SearchOptions, search
from hetc.solver.search.driver import Search

BENCH = Path(__file__).resolve().parent.parent / "bench" / "scenarios"


def _spec(text: str) -> Spec:
    report = check_text(text, "case.yaml")
    assert report.spec is not None, report
    return report.spec


def _lp_cover(positions: list[tuple[int, list[int]]], weight: list[float], blocks: int) -> float:
    """min sum w x s.t. per position sum_k x_k = count, sum x reach >= blocks, x >= 0, over
    the kinds that hold a block there: the relaxation `least_cover` claims to solve."""
    solver = pywraplp.Solver.CreateSolver("GLOP")
    covered = 0
    cost = 0
    for count, reach in positions:
        if count == 0:
            continue
        usable = [k for k, r in enumerate(reach) if r >= 1]
        if not usable:
            return math.inf
        xs = [solver.NumVar(0, solver.infinity(), "") for _ in usable]
        solver.Add(sum(xs) == count)
        covered += sum(x * reach[k] for x, k in zip(xs, usable, strict=True))
        cost += sum(x * weight[k] for x, k in zip(xs, usable, strict=True))
    solver.Add(covered >= blocks)
    solver.Minimize(cost)
    status = solver.Solve()
    if status == pywraplp.Solver.INFEASIBLE:
        return math.inf
    assert status == pywraplp.Solver.OPTIMAL
    return solver.Objective().Value()


def _ours(positions: list[tuple[int, list[int]]], weight: list[float], blocks: int) -> float:
    order = sorted(range(len(weight)), key=weight.__getitem__)
    return least_cover([(n, class_hull(r, weight, order)) for n, r in positions], blocks)


def test_least_cover_is_the_lp_optimum() -> None:
    rng = random.Random(7)
    infinite = 0
    for _ in range(400):
        kinds = rng.randint(1, 6)
        blocks = rng.randint(2, 40)
        weight = [
            float(rng.choice([0, 1, 2, 4, 8])) * rng.choice([1.0, 0.37]) for _ in range(kinds)
        ]
        positions = [
            (rng.choice([0, 1, 1, 3, 7]), [rng.randint(0, 12) for _ in range(kinds)])
            for _ in range(rng.randint(1, 3))
        ]
        expected = _lp_cover(positions, weight, blocks)
        got = _ours(positions, weight, blocks)
        if expected == math.inf:
            infinite += 1
            assert got == math.inf
        else:
            assert got == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert 0 < infinite < 200


def test_least_cover_by_hand() -> None:
    # four stages between the ends, 10 blocks; TP 1 runs 1 block, TP 2 runs 3, TP 4 runs 4:
    # the hull goes (1, 1) -> (2, 3) -> (4, 4); base 4 x 1 device holds 4 blocks, the six
    # more come from TP 2 upgrades at 2 blocks per device: 3 devices, 7 in all
    assert _ours([(4, [1, 3, 4])], [1.0, 2.0, 4.0], 10) == pytest.approx(7.0)
    # 13 blocks: all four stages on TP 2 hold 12, the last block from a TP 4 upgrade at
    # 1 block per 2 devices
    assert _ours([(4, [1, 3, 4])], [1.0, 2.0, 4.0], 13) == pytest.approx(10.0)
    assert _ours([(4, [1, 3, 4])], [1.0, 2.0, 4.0], 17) == math.inf
    # a free kind (weight 0) running 2 blocks: 8 blocks for nothing, the other 2 from TP 2
    # upgrades (3 - 2 blocks for 2 devices each): 4
    assert _ours([(4, [1, 3, 2])], [1.0, 2.0, 0.0], 10) == pytest.approx(4.0)


def _local_attention(seed: int) -> Spec:
    """A random instance whose blocks alternate global and local attention (as GPT-Neo's
    do), so that a stage's time and memory depend on the block it starts at."""
    data = instance_data(seed)
    seq_len = data["training"]["seq_len"]
    data["model"]["architecture"]["local_attention"] = {
        "window": seq_len // 8,
        "pattern": ["global", "local"],
    }
    return _spec(to_yaml(data))


def _small_specs() -> list[Spec]:
    return [_spec(random_instance(seed)) for seed in range(12)] + [
        _local_attention(seed) for seed in range(100, 112)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(24))
def test_every_candidate_passes_at_its_own_straggler(index: int) -> None:
    spec = _small_specs()[index]
    model = PlanningModel(spec)
    searcher = Search(model, SearchOptions())
    check = searcher.cover
    least: dict[tuple[int, int, int], float] = defaultdict(lambda: math.inf)
    for shape, assignment, _ in candidates(model):
        slowest = 0.0
        for i, stage in enumerate(assignment):
            first, end = model.layer_range(shape, i)
            for kind, _count in stage:
                slowest = max(slowest, model.stage_time(kind, shape.microbatch, first, end)[0])
        key = (shape.microbatch, shape.stages, shape.pipelines)
        assert check.may_run_under(*key, slowest), (key, slowest)
        least[key] = min(least[key], slowest)
    # the check has teeth: just under the least straggler of a shape it often says no
    rejected = sum(not check.may_run_under(*key, s * (1 - 1e-6)) for key, s in least.items())
    assert rejected >= len(least) // 4, (rejected, len(least))


def _visited(model: PlanningModel, monkeypatch: pytest.MonkeyPatch) -> tuple[float, int]:
    """(best objective, shapes whose profile pairs were searched)."""
    count = 0
    pairs = Search.pairs

    def counted(self: Search, *args: object) -> object:
        nonlocal count
        count += 1
        return pairs(self, *args)

    monkeypatch.setattr(Search, "pairs", counted)
    result = search(model, SearchOptions(approximations=default_approximations(model)))
    monkeypatch.setattr(Search, "pairs", pairs)
    return result.candidates[0].value, count


@pytest.mark.parametrize(("name", "factor"), [("gptneo-128a100", 5), ("opt350m-5zones", 1.3)])
def test_the_check_cuts_the_shapes_searched(
    name: str, factor: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Measured: 361 -> 60 shapes on 128 A100, 2,007 -> 1,410 on five zones of A100. With
    two device types the check is off (`Search.may_win`), so it must change nothing."""
    report = check_file(BENCH / f"{name}.yaml")
    assert report.spec is not None
    model = PlanningModel(report.spec)
    value, with_check = _visited(model, monkeypatch)
    monkeypatch.setattr(StageCover, "may_run_under", lambda *args: True)
    unchecked, without = _visited(model, monkeypatch)
    assert value == unchecked
    assert with_check * factor < without, (with_check, without)


def test_the_check_is_off_with_two_device_types(monkeypatch: pytest.MonkeyPatch) -> None:
    report = check_file(BENCH / "gptneo-32a100-96v100.yaml")
    assert report.spec is not None
    model = PlanningModel(report.spec)
    asked = 0

    def counted(self: StageCover, *args: object) -> bool:
        nonlocal asked
        asked += 1
        return True

    monkeypatch.setattr(StageCover, "may_run_under", counted)
    search(model, SearchOptions(approximations=default_approximations(model)))
    assert asked == 0


def test_no_ceiling_means_no_answer() -> None:
    spec = _small_specs()[0]
    check = Search(PlanningModel(spec), SearchOptions()).cover
    assert check.may_run_under(1, 1, 1, math.inf)
    assert not check.may_run_under(1, 1, 1, -1.0)
    assert cover.SLACK < 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(72))
def test_the_memory_cap_keeps_every_shape_that_fits(seed: int) -> None:
    """`most_pipelines` never cuts a shape with a candidate that fits in memory and the
    quotas: the oracle is every candidate of a small spec, from the brute-force enumerator
    (seeds 48 on with local attention)."""
    spec = _spec(random_instance(seed)) if seed < 48 else _local_attention(seed)
    model = PlanningModel(spec)
    searcher = Search(model, SearchOptions())
    for shape, _, estimate in candidates(model):
        if any("out of memory" in p for p in estimate.problems):
            continue
        assert shape.pipelines <= searcher.last_dp(shape.microbatch, shape.stages), shape


def test_the_memory_cap_cuts_shapes_and_keeps_the_optimum(monkeypatch: pytest.MonkeyPatch) -> None:
    """On 32 A100 + 96 V100 with GPT-Neo-2.7B the cap removes over a thousand (m, P, D) that
    cannot hold their activations (measured: 1,119 of 4,040; 943 without the speed-weighted
    devices, 862 in raw devices alone), and the search finds the same optimum with
    the cap switched off."""
    report = check_file(BENCH / "gptneo-32a100-96v100.yaml")
    assert report.spec is not None
    model = PlanningModel(report.spec)
    searcher = Search(model, SearchOptions())
    plain = capped = 0
    for mbs in model.microbatch_sizes():
        for stages in range(1, model.blocks + 1):
            plain += searcher.dp_cap(mbs, stages)
            capped += searcher.last_dp(mbs, stages)
    assert plain - capped > 1050, (plain, capped)
    options = SearchOptions(approximations=default_approximations(model))
    value = search(model, options).candidates[0].value
    monkeypatch.setattr(StageCover, "most_pipelines", lambda self, mbs, stages, last: last)
    assert search(model, options).candidates[0].value == value


@pytest.mark.parametrize("name", ["opt350m-5zones", "gptneo-128a100"])
def test_one_kind_per_tp_degree_gives_the_same_answers(name: str) -> None:
    """With one device type the check and the memory cap read one kind per TP degree
    (`StageCover._distinct`): pools of one device run and hold the same and weigh the same
    in raw devices. Their answers must equal those over every kind, on five zones of A100
    (20 kinds, 4 degrees) and on one pool."""
    report = check_file(BENCH / f"{name}.yaml")
    assert report.spec is not None
    model = PlanningModel(report.spec)
    fast = Search(model, SearchOptions()).cover
    full = Search(model, SearchOptions()).cover
    full._distinct_kinds = list(range(len(model.kinds)))
    assert len(fast._distinct_kinds) == len({k.tp for k in model.kinds})
    rng = random.Random(7)
    answers = set()
    for mbs in model.microbatch_sizes()[:3]:
        whole = model.stage_time(0, mbs, 0, model.blocks + 2)[0]
        for stages in (1, 2, 3, 5, 8):
            assert fast.most_pipelines(mbs, stages, 400) == full.most_pipelines(mbs, stages, 400)
            for _ in range(12):
                dp = rng.randint(1, 160)
                ceiling = whole * rng.uniform(0.02, 1.2)
                answer = fast.may_run_under(mbs, stages, dp, ceiling)
                assert answer == full.may_run_under(mbs, stages, dp, ceiling)
                answers.add(answer)
    assert answers == {True, False}


def test_last_true_is_the_last_value_that_holds() -> None:
    """Against a scan: the largest v in (lo, hi] that holds, else lo."""
    for lo in range(0, 6):
        for hi in range(lo, 12):
            for point in range(-1, 13):
                expected = max([v for v in range(lo + 1, hi + 1) if v <= point], default=lo)
                assert cover.last_true(lo, hi, lambda v, p=point: v <= p) == expected


@pytest.mark.parametrize("name", ["gptneo-128a100", "opt350m-floor"])
def test_class_times_are_stage_times_at_each_position(name: str) -> None:
    """`class_times` (read through `span_times`, one table lookup per kind) equals, to the
    bit, `stage_time` at every run of blocks: from the token table, the least over the
    starts of a middle stage (GPT-Neo alternates global and local attention, so the start
    matters), and ending with the head."""
    report = check_file(BENCH / f"{name}.yaml")
    assert report.spec is not None
    model = PlanningModel(report.spec)
    check = Search(model, SearchOptions()).cover
    blocks = model.blocks
    period = len(model.arch.attention_pattern)
    for mbs in model.microbatch_sizes()[:2]:
        for kind in range(len(model.kinds)):
            first, middle, last = check.class_times(mbs, kind)
            spans = [(0, blocks + 2), (3, 7), (blocks, blocks + 1)]
            assert model.span_times(kind, mbs, spans) == [
                model.stage_time(kind, mbs, a, b)[0] for a, b in spans
            ]
            for b in range(1, blocks + 1):
                assert first[b - 1] == model.stage_time(kind, mbs, 0, b + 1)[0]
                assert last[b - 1] == model.stage_time(kind, mbs, blocks + 1 - b, blocks + 2)[0]
                starts = range(1, max(1, min(period, blocks + 1 - b)) + 1)
                assert middle[b - 1] == min(
                    model.stage_time(kind, mbs, x, x + b)[0] for x in starts
                )


@pytest.mark.parametrize(
    "name", ["gptneo-128a100", "gptneo-32a100-96v100", "opt350m-floor", "opt350m-5zones"]
)
def test_the_memory_caps_shortcut_gives_the_full_covers_answer(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`most_pipelines` skips the reach rows where the lightest kind holds ceil(L / P)
    blocks at every position (`holds_share`). Its cap must equal the full cover's for every
    (m, P), and the shortcut must be taken for some (m, P) and refused for others."""
    report = check_file(BENCH / f"{name}.yaml")
    assert report.spec is not None
    model = PlanningModel(report.spec)
    fast = Search(model, SearchOptions())
    full = Search(model, SearchOptions())
    taken = []
    shortcut = StageCover.holds_share

    def recorded(self: StageCover, *args: int) -> bool:
        held = shortcut(self, *args)
        taken.append(held)
        return held

    caps = {}
    monkeypatch.setattr(StageCover, "holds_share", recorded)
    for mbs in model.microbatch_sizes():
        for stages in range(1, model.blocks + 1):
            caps[mbs, stages] = fast.last_dp(mbs, stages)
    monkeypatch.setattr(StageCover, "holds_share", lambda self, *args: False)
    for (mbs, stages), cap in caps.items():
        assert cap == full.last_dp(mbs, stages), (mbs, stages)
    assert True in taken and False in taken
