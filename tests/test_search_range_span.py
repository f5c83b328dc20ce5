"""Two small consistency pins of the planner's sources: one `RANGE_SPAN` serves the driver's
best-first order and `Bounds.shapes_floor` and changes only the work, never the result; and
`LARGE_CLUSTER_DEVICES`'s docstring points at the measured gaps instead of repeating numbers
that go stale.

Oracle for the span: the same search with the span at 1 and at 64, whose results must be
equal (a span that changed the answer would be an approximation, not a trade of work).
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest
from oracles.instances import binding_instance, random_instance

from hetc.costmodel.planning import PlanningModel
from hetc.schema import check_text
from hetc.solver import planner
from hetc.solver.search import SearchOptions, search
from hetc.solver.search import bounds as bounds_module
from hetc.solver.search import driver as driver_module

SEEDS = (0, 1, 15, 18, 36)


def _model(seed: int) -> PlanningModel:
    text = binding_instance(seed) if seed % 2 == 0 else random_instance(seed)
    result = check_text(text, "span.yaml")
    assert result.spec is not None and not result.errors, result.diagnostics
    return PlanningModel(result.spec)


def _answer(
    seed: int, span: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[tuple[object, ...], int]:
    """The results of both searches and the floor, and how many range bounds they took."""
    monkeypatch.setattr(bounds_module, "RANGE_SPAN", span)
    monkeypatch.setattr(driver_module, "RANGE_SPAN", span)
    calls = [0]
    ranged = bounds_module.Bounds.range_bound

    def spy(
        self: bounds_module.Bounds,
        mbs: int,
        stages: int,
        first: int,
        last: int,
        within: bool = False,
    ) -> float:
        calls[0] += 1
        return ranged(self, mbs, stages, first, last, within)

    monkeypatch.setattr(bounds_module.Bounds, "range_bound", spy)
    model = _model(seed)
    exact = search(model, SearchOptions())
    approx = search(model, SearchOptions(approximations=frozenset({"kind-profiles"})))
    floor = driver_module.Search(model, SearchOptions()).shapes_floor()
    answer = (
        exact.candidates[0].key() if exact.candidates else None,
        approx.candidates[0].key() if approx.candidates else None,
        approx.lower_bound_all_plans,
        floor,
    )
    return answer, calls[0]


def test_the_driver_and_the_floor_share_one_span() -> None:
    """The driver takes its span from `bounds`: one constant, not two that can drift."""
    assert driver_module.RANGE_SPAN is bounds_module.RANGE_SPAN
    assert not hasattr(bounds_module, "FLOOR_SPAN")


@pytest.mark.parametrize("seed", SEEDS)
def test_the_span_changes_the_work_not_the_answer(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The best candidates, the bound over all plans and the floor are the same with every
    range listed at once (span 64) and split down to single D (span 1), which take a
    different number of range bounds (the span did change the work)."""
    wide, wide_work = _answer(seed, 64, monkeypatch)
    narrow, narrow_work = _answer(seed, 1, monkeypatch)
    assert wide == narrow
    assert wide[0] is not None
    assert narrow_work > wide_work


def test_large_cluster_docstring_points_at_the_measured_gaps() -> None:
    """`LARGE_CLUSTER_DEVICES`'s docstring names `certificate.MEASURED_GAPS` and states no
    measured share or percentage of its own."""
    tree = ast.parse(Path(planner.__file__).read_text(encoding="utf-8"))
    body = tree.body
    doc = None
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.Assign)
            and any(
                isinstance(t, ast.Name) and t.id == "LARGE_CLUSTER_DEVICES" for t in node.targets
            )
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
        ):
            doc = str(after.value.value)
    assert doc is not None
    assert "MEASURED_GAPS" in doc
    assert not re.search(r"\d+(\.\d+)?%|\b\d+ of \d+\b", doc), doc
