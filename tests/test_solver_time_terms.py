"""Each term of the shape time bound is a lower bound of the same term of every candidate.

`Bounds.time_terms` splits the search's shape bound into F_lb, S_lb and Y_lb (fill,
straggler, sync with the optimizer step). The oracle is every candidate of small random
specs (tests/oracles/brute_force.py), timed by the planning model: each feasible
candidate's fill, straggler and sync must be at least its shape's terms. Mutation checks
done: `step_floor` without the division by P (the largest stage's step taken for the whole
model's), and without the division by D under ZeRO, each fails
`test_every_candidate_has_each_time_term_at_least_the_bound`; `sync_bound` without
`step_floor` fails `test_the_step_floor_lifts_the_sync_of_one_pipeline`; `Windows.least_ends`
summing the two end stages' least times instead of taking the larger fails
`test_every_candidate_has_each_time_term_at_least_the_bound`.
"""

from __future__ import annotations

import pytest
from oracles.brute_force import candidates
from oracles.instances import random_instance

from hetc.costmodel.planning import PlanningModel
from hetc.schema import Spec, check_text
from hetc.solver.search import SearchOptions
from hetc.solver.search.driver import Search

SEEDS = 24


def _spec(text: str) -> Spec:
    result = check_text(text, "case.yaml")
    assert result.spec is not None and not result.errors, result.diagnostics
    return result.spec


@pytest.mark.slow
def test_every_candidate_has_each_time_term_at_least_the_bound() -> None:
    """Every feasible candidate's fill >= F_lb, straggler >= S_lb and sync >= Y_lb of its
    shape (m, P, D), and its iteration time >= F_lb + (ceil(T / D) - 1) S_lb + Y_lb, over
    the random specs (most of which have feasible candidates)."""
    specs = 0
    for seed in range(SEEDS):
        model = PlanningModel(_spec(random_instance(seed)))
        bounds = Search(model, SearchOptions())
        seen = 0
        for shape, _, e in candidates(model):
            if not e.feasible:
                continue
            seen += 1
            mbs, stages, dp = shape.microbatch, shape.stages, shape.pipelines
            fill, straggler, sync = bounds.time_terms(mbs, stages, dp)
            m1 = model.microbatches(shape) - 1
            where = (seed, shape, e.fill, e.straggler, e.sync, fill, straggler, sync)
            assert fill <= e.fill * (1 + 1e-12), where
            assert straggler <= e.straggler * (1 + 1e-12), where
            assert sync <= e.sync * (1 + 1e-12), where
            assert fill + m1 * straggler + sync <= e.iteration_time * (1 + 1e-12), where
        specs += seen > 0
    assert specs >= SEEDS // 2


def test_the_step_floor_is_the_least_update_over_the_stages_and_shards() -> None:
    """By hand: U is each layer's least optimizer step over every kind summed; the floor
    is U / P, and U / (P D) under ZeRO 1 to 3 (each replica steps 1/D of its stage)."""
    for seed in range(SEEDS):
        spec = _spec(random_instance(seed))
        model = PlanningModel(spec)
        bounds = Search(model, SearchOptions())
        layers = model.blocks + 2
        least = 0.0
        for layer in range(layers):
            least += min(
                model.tables(k.device, k.tp, mbs).update[layer + 1]
                - model.tables(k.device, k.tp, mbs).update[layer]
                for k in model.kinds
                for mbs in model.microbatch_sizes()
            )
        shards = 3 if spec.training.zero_stage >= 1 else 1
        assert bounds.step_floor(2, 3) == pytest.approx(least / (2 * shards), rel=1e-12)


def test_the_step_floor_lifts_the_sync_of_one_pipeline() -> None:
    """With one pipeline there is no ring, yet every candidate steps its optimizer: the
    sync bound of D = 1 is the step floor, above zero, or with P > 1 and tied embeddings
    the tied all-reduce where that is longer; the range sync (used for every D from 1 on)
    keeps the step only without ZeRO, where it does not fall with D."""
    for seed in range(SEEDS):
        spec = _spec(random_instance(seed))
        bounds = Search(PlanningModel(spec), SearchOptions())
        assert bounds.sync_bound(1, 1) == bounds.step_floor(1, 1) > 0
        tied = bounds.shares.tied()
        assert bounds.sync_bound(2, 1) == max(bounds.step_floor(2, 1), tied)
        ranged = bounds.range_sync(2, 1)
        step = 0.0 if spec.training.zero_stage >= 1 else bounds.step_floor(2, 1)
        assert ranged == max(step, tied)
