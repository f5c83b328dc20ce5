"""bench/bound_tightness.py: the ratios it reports are of lower bounds over what the brute
force finds, so none is above 1, and every term is reported."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bound_tightness import TERMS, shape_ratios, spec_of  # noqa: E402
from oracles.instances import random_instance  # noqa: E402


def test_every_ratio_is_a_bound_over_a_candidate() -> None:
    """On a random spec every term's ratio, against the shape's fastest candidate and
    against the term's least over the shape, is at most 1, each term appears, and the
    bound is not exact everywhere (some total ratio is below 1)."""
    ratios = list(shape_ratios(spec_of(random_instance(3))))
    assert {term for term, _, _ in ratios} == set(TERMS)
    least = [r for term, against, r in ratios if against == "vs least"]
    assert least and max(least) <= 1 + 1e-12
    totals = [r for term, _, r in ratios if term == "total"]
    assert max(totals) <= 1 + 1e-12 and min(totals) < 1
