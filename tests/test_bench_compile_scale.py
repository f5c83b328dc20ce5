"""bench/compile_scale.py: its plans are plans `hetc compile --plan` accepts, of the size it
says, and the bench runs end to end on a small size (its full run takes minutes here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hetc.plan import plan_to_json
from hetc.plan.topology import topology_of
from hetc.solver.given import check_given_plan

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from compile_scale import pipelines_of, scale_plan, scale_spec  # noqa: E402


@pytest.mark.parametrize("ranks", [8, 24, 1000])
def test_scale_plan_has_the_ranks_and_passes_the_given_plan_checks(ranks: int) -> None:
    """`ranks` processes, one pipeline per 8-GPU node, accepted against its spec."""
    plan = scale_plan(ranks)
    given = check_given_plan(plan_to_json(plan), scale_spec(ranks), file="plan.json")
    assert topology_of(given.plan, tied_embeddings=False).world_size == ranks
    assert len(plan.pipelines) == sum(pipelines_of(ranks)) == ranks // 8
    assert {p.microbatches for p in plan.pipelines} == ({10, 6} if ranks > 8 else {10})


def test_a_rank_count_off_whole_nodes_is_refused() -> None:
    """The bench says why it cannot build 12 ranks."""
    with pytest.raises(ValueError, match="12 ranks is not a whole number of 8-GPU nodes"):
        pipelines_of(12)


def test_the_bench_prints_one_line_per_size() -> None:
    """End to end at 16 ranks: one line with the files and times."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "compile_scale.py"), "--ranks", "16"],
        capture_output=True,
        text=True,
        check=True,
    )
    (line,) = done.stdout.splitlines()
    assert line.startswith("ranks     16  attempt 0  files ") and line.endswith(" s")
