"""Work bounded by what is physically meaningful: validation limits on batch, sequence and
quota; plan building and simulation in O(pipelines), not O(microbatches)."""

from __future__ import annotations

import heapq
import random
from pathlib import Path

from hetc.schema import check_text
from hetc.solver.build import batch_shares

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _spec_text(old: str, new: str, example: str = "opt350m-a100.yaml") -> str:
    text = (EXAMPLES / example).read_text(encoding="utf-8")
    assert old in text
    return text.replace(old, new)


def _messages(text: str) -> list[str]:
    return [d.format() for d in check_text(text, "s.yaml").diagnostics]


def test_a_batch_of_1e21_is_refused_at_its_position_with_the_reason() -> None:
    """`global_batch_size: 1e21` is one positioned error naming the 2^40 limit and why."""
    text = _spec_text("global_batch_size: 1024", "global_batch_size: 1e21")
    line = text.splitlines().index("  global_batch_size: 1e21") + 1
    (message,) = _messages(text)
    assert message.startswith(f"s.yaml:{line}:22: training.global_batch_size: must be at most")
    assert "1099511627776" in message and "tokens per iteration" in message


def test_tokens_per_iteration_are_bounded_with_the_largest_allowed_batch() -> None:
    """Batch x seq_len over 2^40 tokens is refused, saying the most sequences allowed."""
    (message,) = _messages(_spec_text("global_batch_size: 1024", "global_batch_size: 1e9"))
    assert "training.global_batch_size: 1000000000 sequences of 2048 tokens" in message
    assert f"use at most {2**40 // 2048} sequences" in message
    assert _messages(_spec_text("global_batch_size: 1024", f"global_batch_size: {2**29}")) == []


def test_sequence_length_and_quota_have_physical_upper_bounds() -> None:
    """seq_len past 2^24 and a pool quota past a million devices are refused with reasons."""
    rope = _spec_text("seq_len: 2048", "seq_len: 16777217", "llama13b-mixed.yaml")
    assert any(
        "training.seq_len: must be at most 16777216" in m and "training context" in m
        for m in _messages(rope)
    )
    (message,) = _messages(_spec_text("quota: 128", "quota: 1000001"))
    assert "zones[0].pools[0].quota: must be at most 1000000" in message
    assert "any cluster" in message


def _greedy(fill: list[float], period: list[float], microbatches: int) -> list[int]:
    """The per-microbatch reference: one microbatch at a time to the earliest finisher."""
    counts = [1] * len(fill)
    heap = [(fill[p] + period[p], p) for p in range(len(fill))]
    heapq.heapify(heap)
    for _ in range(microbatches - len(fill)):
        _, p = heapq.heappop(heap)
        counts[p] += 1
        heapq.heappush(heap, (fill[p] + counts[p] * period[p], p))
    return counts


def test_batch_shares_closed_form_equals_the_per_microbatch_greedy() -> None:
    """On random and tie-heavy inputs the closed form hands out exactly the greedy's counts."""
    rng = random.Random(29)
    for _ in range(400):
        pipelines = rng.randint(1, 6)
        if rng.random() < 0.5:
            fill = [rng.choice([1.0, 2.0, 3.0]) for _ in range(pipelines)]
            period = [rng.choice([0.5, 1.0, 0.25]) for _ in range(pipelines)]
        else:
            fill = [rng.uniform(0.1, 5) for _ in range(pipelines)]
            period = [rng.uniform(0.01, 1) for _ in range(pipelines)]
        total = pipelines + rng.randint(0, 300)
        assert batch_shares(fill, period, total) == _greedy(fill, period, total)


def test_batch_shares_of_a_huge_batch_are_balanced_without_a_loop_per_microbatch() -> None:
    """10^12 microbatches over three pipelines: counts add up, finish times within a period."""
    fill, period = [3.0, 1.0, 2.0], [0.5, 0.25, 1.0]
    counts = batch_shares(fill, period, 10**12)
    assert sum(counts) == 10**12
    finish = [f + (c - 1) * s for f, s, c in zip(fill, period, counts, strict=True)]
    # optimal: no pipeline could take one more and still finish before the slowest one
    assert all(
        f + s > max(finish) - 1e-9 * max(finish) for f, s in zip(finish, period, strict=True)
    )
