"""`Splits.min_max_split` finds the least straggler of a sequence of options.

Its bisection skips limits: a fill that succeeds lowers the top to its split's straggler, one
that fails raises the bottom to the least limit at which a stage would take one more block.
A jump too far would miss the best split, so the oracle is every split of the blocks into
the sequence's stages, each scored by the planning model (`time_of_sets`) and checked for
memory stage by stage (`kind_fits`). Mutation caught: the bottom raised a hair above that
limit (1e-3 s more).
"""

from __future__ import annotations

import itertools
import math

from oracles.instances import binding_instance, random_instance

from hetc.costmodel.planning import PlanningModel, Shape
from hetc.schema import check_text
from hetc.solver.search import SearchOptions
from hetc.solver.search.driver import Search
from hetc.solver.search.splits import SPLIT_TOLERANCE

PROFILES = frozenset({"kind-profiles"})


def _least_straggler(
    model: PlanningModel, sequence: tuple[tuple[int, ...], ...], mbs: int, dp: int
) -> float:
    """The least straggler of any split of the blocks into the sequence's stages that fits
    memory, by enumeration (infinite where none fits)."""
    stages = len(sequence)
    least = math.inf
    for cuts in itertools.combinations(range(1, model.blocks), stages - 1):
        shape = Shape(microbatch=mbs, boundaries=(0, *cuts, model.blocks), pipelines=dp)
        if all(model.kind_fits(shape, i, option[0]) for i, option in enumerate(sequence)):
            least = min(least, model.time_of_sets(shape, sequence)[0])
    return least


def _searchers(count: int) -> list[Search]:
    """`kind-profiles` searchers of the first `count` test instances."""
    searchers = []
    for seed in range(count):
        text = binding_instance(seed) if seed % 2 == 0 else random_instance(seed)
        report = check_text(text, "case.yaml")
        assert report.spec is not None
        searchers.append(Search(PlanningModel(report.spec), SearchOptions(approximations=PROFILES)))
    return searchers


def test_the_split_has_the_least_straggler_of_every_split() -> None:
    checked = found = 0
    for seed, searcher in enumerate(_searchers(30)):
        model = searcher.model
        if model.blocks > 16:
            continue
        mbs = model.microbatch_sizes()[0]
        _, ordered = searcher.option_speeds(mbs)
        for slow, fast in itertools.combinations_with_replacement(ordered[:4], 2):
            for stages, n, dp in ((2, 1, 1), (3, 1, 2), (3, 2, 1), (4, 2, 2)):
                if stages > model.blocks:
                    continue
                sequence = (slow,) * n + (fast,) * (stages - n)
                least = _least_straggler(model, sequence, mbs, dp)
                split = searcher.min_max_split(sequence, mbs, dp)
                checked += 1
                if split is None:
                    assert least == math.inf, (seed, sequence, dp)
                    continue
                shape = Shape(microbatch=mbs, boundaries=split, pipelines=dp)
                straggler = model.time_of_sets(shape, sequence)[0]
                assert straggler <= least * (1 + 2 * SPLIT_TOLERANCE), (seed, sequence, dp)
                found += 1
    assert checked >= 100 and found >= 50, (checked, found)


def test_stage_capacities_match_a_scan_of_memory() -> None:
    """`stage_blocks`, `last_blocks` and `flight_blocks` against the memory check scanned
    block by block: the most blocks from the first block on (at most L - 1) with that many
    microbatches in flight, the most the last stage holds with the head, and the sums over
    flights min(k, m)."""
    checked = binding = 0
    for seed in range(0, 30, 2):
        report = check_text(binding_instance(seed), "case.yaml")
        assert report.spec is not None
        searcher = Search(PlanningModel(report.spec), SearchOptions(approximations=PROFILES))
        model = searcher.model
        blocks, whole = model.blocks, model.blocks + 2
        mbs = model.microbatch_sizes()[0]
        passes = model.batch // mbs
        for kind in range(0, len(model.kinds), max(1, len(model.kinds) // 3)):
            for dp in (1, 2, 5):
                for flight in (1, 2, 4):
                    scan = max(
                        (b for b in range(blocks) if model.fits(kind, mbs, 1, 1 + b, dp, flight)),
                        default=0,
                    )
                    assert searcher.stage_blocks(kind, mbs, dp, flight) == scan
                    binding += 0 < scan < blocks - 1
                tail = max(
                    b
                    for b in range(blocks + 1)
                    if b == 0 or model.fits(kind, mbs, whole - 1 - b, whole, dp, 1)
                )
                assert searcher.last_blocks(kind, mbs, dp) == tail
                sums = searcher.flight_blocks(kind, mbs, dp, 6)
                m = -(-passes // dp)
                assert sums == [
                    sum(searcher.stage_blocks(kind, mbs, dp, min(f, m)) for f in range(1, k + 1))
                    for k in range(7)
                ]
                checked += 1
    assert checked >= 30 and binding >= 5, (checked, binding)


def test_every_stage_runs_a_block_on_its_own_option() -> None:
    """A profile's fill is at least the pair's per-layer fill plus, per stage, what one
    block takes on its option beyond the faster of the two (`Pair.extra_slow`,
    `extra_fast`) plus its sends both ways: against the fill of every split. The bound is
    met to rounding where the slow stages hold one block each (so one block more on either
    side breaks it)."""
    checked = tight = 0
    for seed, searcher in enumerate(_searchers(30)):
        model = searcher.model
        if model.blocks > 12:
            continue
        mbs = model.microbatch_sizes()[0]
        rows = {(r.slow, r.fast): r for r in searcher.pair_rows(mbs)}
        for (slow, fast), row in list(rows.items())[:6]:
            for stages, n in ((2, 1), (3, 1), (3, 2), (4, 2)):
                if slow == fast or stages > model.blocks:
                    continue
                sequence = (slow,) * n + (fast,) * (stages - n)
                sends = sum(searcher.send(a, b, mbs) for a, b in itertools.pairwise(sequence))
                bound = row.fill + n * row.extra_slow + (stages - n) * row.extra_fast
                bound += 2 * sends
                least = math.inf
                for cuts in itertools.combinations(range(1, model.blocks), stages - 1):
                    shape = Shape(microbatch=mbs, boundaries=(0, *cuts, model.blocks), pipelines=1)
                    least = min(least, model.pace_of_sets(shape, sequence)[1])
                assert least >= bound * (1 - 1e-12), (seed, sequence)
                checked += 1
                tight += least <= bound * (1 + 1e-9)
    assert checked >= 50 and tight >= 5, (checked, tight)
